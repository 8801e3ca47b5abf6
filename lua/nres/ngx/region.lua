-- SPDX-License-Identifier: MIT
-- nres.ngx.region: a worker's policy for a key of a scope - a copy of the
-- scope's template pointed at the key's slot in the shared table, remade
-- when the slot changes key.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"

local C = cdef.C
local ffi_new, ffi_copy, ffi_sizeof, ffi_string = ffi.new, ffi.copy, ffi.sizeof, ffi.string
local type, error = type, error
local step_now = C.nres_step_now
local sh_acquire = C.nres_shm_acquire
local bad, scopes = config.bad, config.scopes

local _M = {}

local POLICY_SIZE = ffi_sizeof("nres_policy_t")

-- --------------------------------------------------- per-key policies

-- Out-parameters, one per module: read before anything can yield.
local gen_box = ffi_new("uint32_t[1]")

-- This worker's policy for slot idx of scope s: a copy of the template
-- pointed at the slot's shared state, remade when the slot changes key.
local function rebuild(s, idx, gen)
  local cp = s.cps[idx + 1]
  if cp == nil then
    cp = ffi_new("nres_policy_t")
    s.cps[idx + 1] = cp     -- kept referenced: calls point into it
  end
  local t = s.template
  ffi_copy(cp, t, POLICY_SIZE)
  -- The copy's pointers into the template's own storage, now into its own.
  if t.estimator == t.own.estimator then cp.estimator = cp.own.estimator end
  if t.budget == t.own.budget then cp.budget = cp.own.budget end
  if t.breaker == t.own.breaker then cp.breaker = cp.own.breaker end
  if t.throttle == t.own.throttle then cp.throttle = cp.own.throttle end
  local slot = C.nres_shm_slot(s.ptr, idx)
  if s.budget then cp.budget = slot.budget end
  if s.breaker then cp.breaker = slot.breaker end
  if s.ratelimit then cp.ratelimit = slot.ratelimit end
  if s.throttle then cp.throttle = slot.throttle end
  C.nres_policy_counters_reset(cp)
  local rc = C.nres_policy_build(cp)
  if rc ~= 0 then
    error("nres.ngx: the runtime refused a scope's policy copy ("
          .. ffi_string(C.nres_err_name(rc)) .. ")")
  end
  s.gens[idx + 1] = gen
  return cp
end

-- The policy for `key` (a string of 1..64 bytes) in scope s, leased until
-- now + hold, and its slot index; when the table is full of keys in use,
-- this worker's own template (state not shared) and -1.
function _M.acquire(s, key, now)
  local idx = sh_acquire(s.ptr, key, #key, now, s.hold, gen_box)
  if idx < 0 then
    s.overflow = s.overflow + 1
    return s.template, -1
  end
  local gen = gen_box[0]
  local cp = s.cps[idx + 1]
  if cp == nil or s.gens[idx + 1] ~= gen then cp = rebuild(s, idx, gen) end
  return cp, idx
end

-- For tests and custom drivers: policy_for by scope name.
local policy_for = _M.acquire

function _M.policy_for(sname, key, now)
  local s = scopes[sname]
  if s == nil then error(bad("policy_for", "scope", "a scope declared with gw.scope", sname), 2) end
  if type(key) ~= "string" or #key < 1 or #key > 64 then
    error(bad("policy_for", "key", "a string of 1..64 bytes", key), 2)
  end
  return policy_for(s, key, now or step_now())
end

-- Call records: nres.run's free list. A record stays referenced by the

return _M

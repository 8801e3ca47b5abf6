-- SPDX-License-Identifier: MIT
-- nres.ngx.limiter: admissions from a shared per-key rate limiter (e.g.
-- one per client address) and the access-phase helper answering 429.
local ffi = require "ffi"
local cdef = require "nres.cdef"
require "nres.cdef.gateway"
local config = require "nres.ngx.config"

local C = cdef.C
local ffi_gc = ffi.gc
local error, ceil = error, math.ceil
local step_now = C.nres_step_now
local bad, limiters = config.bad, config.limiters

local gw_limit, gw_key = C.nres_gw_limit, C.nres_gw_key

local _M = {}

local wait_box = ffi.new("nres_time_t[1]")
local key_buf = ffi.new("char[32]")              -- nres_gw_key's MD5 of a long key
local key_out = ffi.new("const char *[1]")       -- the key it chose

-- Limiter s (nres.ngx.config) in libnres (runtime/src/gateway/limit.c),
-- registered by name for the nginx module's nres_admit: s.gw. Freed (and
-- unregistered) with this Lua state.
function _M.register(s)
  if #s.name > 64 then error(bad("limiter", "name", "at most 64 bytes", s.name), 3) end
  local l = C.nres_gw_limiter_new(s.name, s.ptr, s.hold)
  if l == nil then error("nres.ngx.limiter: " .. s.name .. ": the runtime refused it", 3) end
  l.control = s.control   -- the control API's dry-run and rate (nres.ngx.control)
  s.gw = ffi_gc(l, C.nres_gw_limiter_free)
  C.nres_gw_limiter_register(l)
end

-- ------------------------------------------------------------- limits

-- One admission for `key` (e.g. the client address) from limiter `name`:
-- true, or false and the seconds until one would be allowed (libnres's
-- nres_gw_limit: an empty key is not limited, a full table admits). A key
-- longer than a slot's 64 bytes is limited under its MD5 (nres_gw_key, as
-- the nginx module's nres_admit shortens it).
function _M.limit(name, key)
  local s = limiters[name]
  if s == nil then error(bad("limit", "limiter", "a limiter declared with gw.limiter", name), 2) end
  if type(key) ~= "string" then error(bad("limit", "key", "a string", key), 2) end
  local n = gw_key(key, #key, key_buf, key_out)   -- key_out[0]: key or key_buf
  if gw_limit(s.gw, key_out[0], n, step_now(), wait_box) == 0 then return true end
  return false, tonumber(wait_box[0]) / 1e9
end

-- Access-phase helper: a client limiter's refusal (nres_gw_refusal: 429,
-- "rate limited") with Retry-After (whole seconds, at least 1) when `key`
-- is over its rate.
local STOP_LIMITED = 7   -- nres_stop_t
local reason_box = ffi.new("const char *[1]")
function _M.limit_client(name, key)
  local ok, wait = _M.limit(name, key)
  if ok then return true end
  local status = C.nres_gw_refusal(STOP_LIMITED, 1, reason_box)
  ngx.header["Retry-After"] = ceil(wait) > 0 and ceil(wait) or 1
  ngx.header["X-Nres-Reason"] = ffi.string(reason_box[0])
  return ngx.exit(status)
end

return _M

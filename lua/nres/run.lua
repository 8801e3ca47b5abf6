-- nres.run: the Lua driver loop - run a function under a policy.
--
-- The same pull loop as the C drivers: the C state machine answers each
-- step with ATTEMPT, WAIT or DONE, and this loop runs the attempt (a
-- protected call), classifies it, sleeps through the driver, and ends. Lua
-- is never called back from C.
--
-- Hot path rules (lua-resty-core style): no closures, tables or cdata per
-- call; the step out-parameter is one module-level cdata read into locals
-- before any user code runs (user code may re-enter run); call state
-- (nres_call_t) comes from a free list, so steady state allocates nothing.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local classify = require "nres.classify"

local C = cdef.C
local pcall = pcall
local ffi_new, ffi_string = ffi.new, ffi.string
local step_begin, step_report = C.nres_step_begin, C.nres_step_report
local step_resume, step_cancel = C.nres_step_resume, C.nres_step_cancel

local _M = { _VERSION = "0.1.0" }

local ATTEMPT, DONE = 0, 2
local STOP_OK, STOP_ATTEMPTS = 1, 3
local VF_SELF, THROTTLED = 1, 2

local step = ffi_new("nres_step_t")

-- Stop reasons by code, as the stable strings of the C runtime.
local reasons = {}
for i = 0, 9 do reasons[i] = ffi_string(C.nres_stop_name(i)) end
_M.reasons = reasons

-- Free list of call records. An nres_call_t must stay referenced for the
-- whole call (it may span sleeps and yields): the local `call` in run does.
local free, nfree = {}, 0
local function take_call()
  if nfree > 0 then
    local call = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
    return call
  end
  return ffi_new("nres_call_t")
end
local function give_call(call)
  nfree = nfree + 1
  free[nfree] = call
end
_M.take_call, _M.give_call = take_call, give_call   -- for the other drivers

-- The running attempt's deadline (ns, -1 = none) and the clock it is on,
-- for nres.remaining(): valid inside fn until it yields.
local attempt_at, attempt_now = -1, nil

function _M.remaining()
  if attempt_at < 0 or attempt_now == nil then return nil end
  local left = (attempt_at - attempt_now()) / 1e9
  return left > 0 and left or 0
end

-- The failure path: the info table, the reason, and the fallback.
local function finish(self, call, ok, r1, r2, refused)
  local stop = step.stop
  local reason = reasons[stop]
  if refused ~= nil and call.last.flags == VF_SELF and stop == STOP_ATTEMPTS then
    reason = refused
  end
  local info = {
    reason = reason,
    attempts = call.attempts,
    retries = call.retries,
    hedges = call.hedges,
    error = classify.error_of(ok, r1, r2),
    thrown = not ok,
    log = {},
  }
  local n = call.attempts < 8 and call.attempts or 8
  for i = n - 1, 0, -1 do
    local rec = C.nres_call_log(call, i)
    info.log[#info.log + 1] = {
      attempt = rec.number,
      hedge = rec.hedge == 1,
      verdict = rec.flags == 0xff and "abandoned" or classify.names[rec.kind],
      timeout = rec.flags == 2,
      start = tonumber(rec.start) / 1e9,
      finish = tonumber(rec["end"]) / 1e9,
    }
  end
  local fallback_wanted = step.fallback == 1
  give_call(call)
  if self.on_event then self.on_event("done", reason, info.attempts) end
  if fallback_wanted and self.fallback then
    info.fallback = true
    return self.fallback(reason, info.error), nil, info
  end
  return nil, reason, info
end

-- Run fn(a1, a2, a3, a4) under the policy. On success: fn's first three
-- results. On failure: nil, reason, info (or the fallback's value, nil,
-- info). At most four arguments: LuaJIT cannot compile a vararg call here
-- (NYI: VARG outside the trace's root frame), and a compiled loop is what
-- keeps a call at a few dozen nanoseconds; pass a table for more.
function _M.run(self, fn, a1, a2, a3, a4, extra)
  if extra ~= nil then
    error("bad argument #6 to 'run' (fn takes at most 4 arguments; pass a table)", 2)
  end
  local cp, verdict_of, driver = self.cp, self.classify, self.driver
  local now, admit, on_event = driver.now, self.admit, self.on_event

  -- Everything off: one attempt, nothing to record (the C passthrough).
  if self.passthrough and cp.draining == 0 then
    local ok, r1, r2, r3 = pcall(fn, a1, a2, a3, a4)
    local vk = verdict_of(ok, r1, r2)
    if vk == 0 then return r1, r2, r3 end
    local call = take_call()
    step_begin(call, cp, 0, -1, step)
    step_report(call, 0, 0, vk, 0, -1, step)
    return finish(self, call, ok, r1, r2, nil)
  end

  local call = take_call()
  local kind = step_begin(call, cp, now(), -1, step)
  local ok, r1, r2, r3, refused = true, nil, nil, nil, nil

  while kind ~= DONE do
    if kind == ATTEMPT then
      local slot = step.slot
      local vk, fl, ra
      attempt_at, attempt_now = step.at, now
      if admit ~= nil then
        local yes, why = admit(step.attempt, self)
        if not yes then
          refused = why or "rate limited"
          ok, r1, r2 = true, nil, refused
          vk, fl, ra = THROTTLED, VF_SELF, -1
        end
      end
      if vk == nil then
        ok, r1, r2, r3 = pcall(fn, a1, a2, a3, a4)
        vk, fl, ra = verdict_of(ok, r1, r2)
      end
      attempt_at = -1
      if on_event ~= nil then on_event("attempt", call.attempts, classify.names[vk]) end
      kind = step_report(call, slot, now(), vk, fl, ra, step)
    else
      local at = step.at
      if at < 0 then   -- nothing runs in the background here: cannot happen
        step_cancel(call, now(), step)
        give_call(call)
        error("nres: the executor asked to wait forever with nothing in flight", 2)
      end
      local delay = at - now()
      if on_event ~= nil then on_event("wait", delay / 1e9) end
      driver.sleep(delay)
      kind = step_resume(call, now(), step)
    end
  end

  if step.stop == STOP_OK then
    if on_event ~= nil then on_event("done", "ok", call.attempts) end
    give_call(call)
    return r1, r2, r3
  end
  return finish(self, call, ok, r1, r2, refused)
end

return _M

-- SPDX-License-Identifier: MIT
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
-- (nres_call_t) comes from a free list, so steady state allocates nothing:
-- on success, on failure (the info table is reused, one per coroutine),
-- and hedged (each call record carries its own step and attempt records).
-- spec/lua/garbage_spec.lua counts it.
--
-- User code fails, and nothing it does escapes p:run:
--   * fn may throw or return anything: a throw is an attempt's failure,
--     classified like `nil, err`; on success p:run returns exactly fn's
--     results, however many (more than three cost one table per call).
--   * classify, admit, on_event and the driver's sleep are policy code. If
--     one throws, or returns junk (classify: not a verdict; admit: not
--     `true`, `false`/nil or `false, "reason"`), the call is ended in C at
--     once (nres_call_abort): every permit, half-open probe, queue place
--     and budget token it holds is given back and nothing counts against
--     the dependency. p:run then returns nil, "callback error", info
--     (stop NRES_STOP_CALLBACK, counted in stats().stops) with
--     info.callback naming the callback, info.error saying what it did
--     ("nres: admit raised: ..."), info.raised the raw error and
--     info.cause the attempt's own error, if any. Decision: caught, not
--     re-raised - a broken callback must not take the caller (an nginx
--     request, a scenario cell) down, and the caller already handles nil,
--     reason, info; and its own reason, not "canceled", so `res or
--     reason` says whose fault it was.
--   * After the call has ended (on_event "done", the fallback), there is
--     nothing left to give back: a failed call keeps its own reason, a
--     successful one becomes nil, "callback error" (counted as the
--     success it was in C); info says the same as above.
-- Abandoned calls: a coroutine that called p:run and is never resumed
-- holds its call record, and the record its permits. Every record carries
-- a finalizer (ffi.gc, set once when the record is made): when the
-- collector finds a record still in flight, it cancels the call in C, which
-- gives everything back. A suspended coroutine that is still referenced
-- keeps its permits: that call is not abandoned, only slow.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local classify = require "nres.classify"
local describe = require("nres.schema").describe

local C = cdef.C
local pcall, select, type, error, unpack, setmetatable = pcall, select, type, error, unpack, setmetatable
local format, sub = string.format, string.sub
local band, lshift, rshift = require("bit").band, require("bit").lshift, require("bit").rshift
local ffi_new, ffi_string, ffi_gc, ffi_cast = ffi.new, ffi.string, ffi.gc, ffi.cast
local step_begin, step_report = C.nres_step_begin_class, C.nres_step_report
local step_resume, step_cancel, step_now = C.nres_step_resume, C.nres_step_cancel, C.nres_step_now
local step_abort = C.nres_step_abort
local sync_begin, sync_report = C.nres_step_sync_begin, C.nres_step_sync_report
local sync_resume = C.nres_step_sync_resume
local verdict_names = classify.names

local _M = { _VERSION = "0.1.0" }

local ATTEMPT, DONE = 0, 2
local STOP_OK, STOP_ATTEMPTS = 1, 3
local VF_SELF, THROTTLED = 1, 2

local step = ffi_new("nres_step_t")
-- The sync steps' time out-parameter (the action's at), read the same way.
local sync_at = ffi_new("double[1]")
-- Finalizers may run in the middle of another call: they get their own.
local gc_step = ffi_new("nres_step_t")

-- Stop reasons by code, as the stable strings of the C runtime.
local CLASS_NAMES = { [0] = "critical", "default", "sheddable" }

local reasons = {}
do   -- every stop the library names: reasons[0 .. #reasons]
  local i, name = 0, ffi_string(C.nres_stop_name(0))
  while name ~= "unknown" do
    reasons[i] = name
    i = i + 1
    name = ffi_string(C.nres_stop_name(i))
  end
end
local CALLBACK_ERROR = "callback error"
_M.reasons = reasons

-- Call records. An nres_call_t must stay referenced for the whole call (it
-- may span sleeps and yields): the local `call` in run does. Each record
-- has an owner table { policy object or false, driver or false }, set
-- while run has it in flight: the finalizer needs the driver's clock, and
-- the policy object keeps the C state the record points to (policy,
-- breaker, bulkhead, budget) alive until the finalizer has run - the
-- record itself holds only raw pointers, which the collector cannot see.
--
-- Owners are found by the record's address, so every record shares one
-- finalizer: a closure per record would be a new function each time one
-- is made (FNEW), which the JIT cannot compile - the trace that needed a
-- fresh record (a burst of concurrent calls in a gateway) would abort.
-- The entry goes when the record is finalized; a record's memory is not
-- reused before that, so an address names one live record at a time.
local owners = {}                        -- record address -> its owner

local function address(call)
  return tonumber(ffi_cast("uintptr_t", ffi_cast("void *", call)))
end

local function finalize(call)
  local key = address(call)
  local owner = owners[key]
  owners[key] = nil
  local p = owner and owner[1]
  if not p then return end               -- idle in the free list, or done
  owner[1] = false
  local fine, t = pcall(owner[2].now)
  if not fine or type(t) ~= "number" then t = step_now() end
  step_cancel(call, t, gc_step)          -- a finished call: a no-op
end

local function new_call()
  local owner = { false, false }
  local call = ffi_gc(ffi_new("nres_call_t"), finalize)
  owners[address(call)] = owner
  return call, owner
end

-- The free list keeps each record beside its owner, so taking one costs
-- no lookup in `owners` (a hash on the record's address, on every call).
-- One record and its owner wait in `spare` first: a call that is not
-- nested in another takes and gives back that one, two upvalues instead of
-- two array slots and a count (about 50 instructions a call in the trace).
local free, free_owner, nfree = {}, {}, 0
local spare_call, spare_owner = false, false
-- A record and its owner table (other drivers may ignore the owner: a
-- record they take anchors nothing and their own references keep the
-- policy alive).
local function take_call()
  local call = spare_call
  if call then
    spare_call = false
    return call, spare_owner
  end
  if nfree > 0 then
    local owner
    call, owner = free[nfree], free_owner[nfree]
    free[nfree], free_owner[nfree] = nil, nil
    nfree = nfree - 1
    return call, owner
  end
  return new_call()
end
local function give_call(call, owner)
  owner = owner or owners[address(call)]
  owner[1], owner[2] = false, false
  if not spare_call then
    spare_call, spare_owner = call, owner
    return
  end
  nfree = nfree + 1
  free[nfree], free_owner[nfree] = call, owner
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

-- pcall's results as ok, n, r1, r2, r3, rest: how many values fn returned
-- (n), the first three as values, and all of them in `rest` only when
-- there are more than three (the only case that makes garbage).
local function collect(ok, ...)
  local n = select("#", ...)
  local r1, r2, r3 = ...
  if n > 3 then return ok, n, r1, r2, r3, { ... } end
  return ok, n, r1, r2, r3, nil
end

-- Exactly n values.
local function results(n, r1, r2, r3, rest)
  if n == 1 then return r1 end
  if n == 2 then return r1, r2 end
  if n == 3 then return r1, r2, r3 end
  if n == 0 then return end
  return unpack(rest, 1, n)
end

-- The info of a failed call. One table per coroutine, reused: a failure
-- allocates nothing once its coroutine has failed before (a fresh table
-- per failure was the one garbage of the plain path: 38 % of the window
-- went to the collector where fast calls failed often). So info is valid
-- until the next p:run that fails in the same coroutine; nres.copy_info
-- keeps one. A slot holds the info, its log entries (slot[1..8], made as
-- needed), how many the log shows (n) and whether a failure is filling
-- it (busy). A failure inside the callbacks of another one's ending
-- (on_event "done", the fallback) finds the slot busy and gets a fresh
-- one, not the info being filled. The cost: a coroutine's first failure
-- makes its slot (~1.4 KB with the weak-table entry, against ~0.35-0.7 KB
-- for a fresh info before), so where every call has a coroutine of its
-- own and fails once (an nginx request) a failure makes more garbage than
-- it did; everywhere coroutines live on (workers, timers, cosocket
-- servers, nresrun) it makes none.
local co_running = coroutine.running
local MAIN = {}                          -- the main thread's key (running() is nil)
local slots = setmetatable({}, { __mode = "k" })   -- coroutine -> its slot

local function new_slot()
  return { info = { reason = false, criticality = false, attempts = 0, retries = 0, hedges = 0,
                    error = false, result = false, thrown = false, log = {} },
           n = 0, busy = false }
end

local function take_slot()
  local co = co_running() or MAIN
  local slot = slots[co]
  if slot == nil then
    slot = new_slot()
    slots[co] = slot
  elseif slot.busy then
    slot = new_slot()
  end
  slot.busy = true
  return slot
end

-- A failed call's end as plain numbers (nres_step_log): the log's size,
-- the last verdict's flags, then 6 numbers per entry. Read through one FFI
-- call into this buffer, not field by field from the record: where finish
-- runs in the interpreter (a fresh coroutine per call, as in nginx, or a
-- trace not compiled yet) every 64-bit field read (start, end) and every
-- record reached by reference (call.log[i], call.last) is a fresh cdata,
-- about 100 B of garbage per attempt shown. Read before any user code
-- runs (a callback may fail another call meanwhile).
local STEP_LOG_FIELDS = 6
local logbuf = ffi_new("double[?]", 2 + 8 * STEP_LOG_FIELDS)
local step_log = C.nres_step_log

-- Log entry k (1 = the oldest shown) from logbuf.
local function put_entry(slot, log, k)
  local b, e = 2 + (k - 1) * STEP_LOG_FIELDS, slot[k]
  if e == nil then
    e = { attempt = 0, hedge = false, verdict = false, timeout = false, start = 0, finish = 0 }
    slot[k] = e
  end
  local flags = logbuf[b + 3]
  e.attempt = logbuf[b]
  e.hedge = logbuf[b + 1] == 1
  e.verdict = flags == 0xff and "abandoned" or verdict_names[logbuf[b + 2]]
  e.timeout = flags == 2
  e.start = logbuf[b + 4] / 1e9
  e.finish = logbuf[b + 5] / 1e9
  log[k] = e
end

-- The last n attempts (n <= 8, the C log's size), oldest first. Written
-- out, not a loop: a loop of a few turns inside finish becomes a trace of
-- its own and leaves the rest of finish to the interpreter.
local function fill_log(slot, log, n)
  if n >= 1 then put_entry(slot, log, 1) end
  if n >= 2 then put_entry(slot, log, 2) end
  if n >= 3 then put_entry(slot, log, 3) end
  if n >= 4 then put_entry(slot, log, 4) end
  if n >= 5 then put_entry(slot, log, 5) end
  if n >= 6 then put_entry(slot, log, 6) end
  if n >= 7 then put_entry(slot, log, 7) end
  if n >= 8 then put_entry(slot, log, 8) end
end

-- A copy of info that no later failure overwrites.
function _M.copy_info(info)
  if type(info) ~= "table" or type(info.log) ~= "table" then
    error("nres.copy_info: expected the info table of a failed p:run, got "
          .. (type(info) == "table" and "a table without a log" or type(info)), 2)
  end
  local c = {}
  for k, v in pairs(info) do c[k] = v end
  local log = {}
  for i, e in ipairs(info.log) do
    local ce = {}
    for k, v in pairs(e) do ce[k] = v end
    log[i] = ce
  end
  c.log = log
  return c
end

-- A callback's failure, into info.
local function fault(info, name, err)
  info.cause = info.error
  info.callback = name
  info.raised = err
  if type(err) == "string" and sub(err, 1, 6 + #name) == "nres: " .. name then
    info.error = err                     -- already says what (junk returned)
  else
    info.error = format("nres: %s raised: %s", name,
                        type(err) == "string" and err or describe(err))
  end
end

-- The failure path: the info table, the reason, and the fallback. `stop`
-- and `fallback_wanted` were read from `step` before any user code ran;
-- `cb`, `cb_err`: a callback that failed; `spoiled`: report "callback
-- error" whatever the stop (a success spoiled by its on_event "done").
local function finish(self, call, owner, stop, fallback_wanted, ok, r1, r2, refused,
                      cb, cb_err, spoiled)
  local reason = spoiled and CALLBACK_ERROR or reasons[stop]
  local n = step_log(call, logbuf)
  if refused ~= nil and logbuf[1] == VF_SELF and stop == STOP_ATTEMPTS then
    reason = refused
  end
  local slot = take_slot()
  local info = slot.info
  info.reason = reason
  info.criticality = CLASS_NAMES[self.class or 1]
  info.attempts = call.attempts
  info.retries = call.retries
  info.hedges = call.hedges
  info.error = classify.error_of(ok, r1, r2)
  -- The dependency's last answer (fn's first result, e.g. an HTTP
  -- response with its 503 body), so a proxy can forward it as it came.
  if ok then info.result = r1 else info.result = nil end
  info.thrown = not ok
  info.callback, info.raised, info.cause, info.fallback = nil, nil, nil, nil
  local log = info.log
  fill_log(slot, log, n)
  for k = n + 1, slot.n do log[k] = nil end   -- usually none: as many as last time
  slot.n = n
  give_call(call, owner)
  if cb ~= nil then fault(info, cb, cb_err) end
  local on_event = self.on_event
  if on_event and cb ~= "on_event" then
    local fine, err = pcall(on_event, "done", reason, info.attempts)
    if not fine and cb == nil then fault(info, "on_event", err) end
  end
  if fallback_wanted and self.fallback and info.callback == nil then
    local fine, v = pcall(self.fallback, reason, info.error)
    slot.busy = false
    if fine then
      info.fallback = true
      return v, nil, info
    end
    fault(info, "fallback", v)
    return nil, reason, info
  end
  slot.busy = false
  return nil, reason, info
end

-- The end of a successful call: on_event "done" (a failure there spoils
-- it: nil, "callback error", info), the record given back, fn's results
-- exactly.
local function succeed(self, call, owner, on_event, ok, n, r1, r2, r3, rest)
  if on_event then
    local fine, err = pcall(on_event, "done", "ok", call.attempts)
    if not fine then
      return finish(self, call, owner, STOP_OK, false, ok, r1, r2, nil, "on_event", err, true)
    end
  end
  give_call(call, owner)
  return results(n, r1, r2, r3, rest)
end

-- admit's answer is `true`, or `false`/nil with an optional reason string.
local function admit_junk(yes, why)
  return format("nres: admit returned %s, %s; expected true, or false and an optional reason (string)",
                describe(yes), describe(why))
end

-- Ask admit about attempt n: ADMITTED; REFUSED and the reason; or FAILED
-- and what admit did (raised, or returned junk).
local ADMITTED, REFUSED, FAILED = 0, 1, 2
local function ask(admit, n, self)
  local fine, yes, why = pcall(admit, n, self)
  if not fine then return FAILED, yes end
  if yes == true then return ADMITTED end
  if yes ~= false and yes ~= nil or why ~= nil and type(why) ~= "string" then
    return FAILED, admit_junk(yes, why)
  end
  return REFUSED, why or "rate limited"
end

-- The policy's breaker's stored state (nres_breaker_stats: -1 without a
-- breaker), read around a report when there is an on_event.
local breaker_box = ffi.new("nres_breaker_stats_t")
local function breaker_state(cp)
  if cp.breaker == nil then return -1 end
  C.nres_breaker_stats(cp.breaker, breaker_box)
  return breaker_box.state
end

-- on_event("breaker", state) when the report changed the breaker's state
-- from b0 ("open", "half-open", "closed"; the C face's NRES_EV_BREAKER):
-- nil, or "on_event" and its error.
local function breaker_event(on_event, cp, b0)
  local b1 = breaker_state(cp)
  if b1 == b0 then return nil end
  local fine, err = pcall(on_event, "breaker", ffi.string(C.nres_breaker_state_name(b1)))
  if not fine then return "on_event", err end
  return nil
end

-- Wait delay ns through the driver, on_event told first: nil, or the name
-- of the callback that failed and its error.
local function wait(driver, on_event, delay)
  if on_event then
    local fine, err = pcall(on_event, "wait", delay / 1e9)
    if not fine then return "on_event", err end
  end
  local fine, err = pcall(driver.sleep, delay)
  if not fine then return "driver.sleep", err end
  return nil
end

-- After a wait until `at` that began at `before`: nil if the driver's
-- clock reached `at` or at least moved (an early wake-up waits again),
-- else the error of a clock that stands still (a frozen or NaN `now`):
-- the call would ask to wait again for ever.
local function stalled(before, at, after)
  if after >= at or after > before then return nil end
  return format("nres: driver.sleep: the driver's clock did not move (now() = %s before sleeping until %s,"
                .. " %s after): the call would wait for ever", tostring(before), tostring(at),
                tostring(after))
end

-- Hedged calls: attempts side by side. A hedged policy (hedge = { at, max })
-- needs a driver that can run them, with three more functions:
--   spawn(fn, arg) -> task    start fn(arg) beside the caller (it runs until
--                             its first wait, then the caller goes on)
--   wait_any(tasks, n, until_ns) -> the arg of an ended task among
--                             tasks[1..n], or nil once until_ns (-1: none)
--                             has come
--   kill(task)                abandon a task that has not ended: it never
--                             runs again (nginx: the light thread is killed
--                             and its cosocket closed)
-- nresrun's scheduler (nresrun.sched) and the nginx driver have them. The
-- blocking and virtual drivers have one thread of control, where an attempt
-- always ends before a hedge could start: p:run refuses a hedged policy on
-- them (an error naming the driver) rather than silently not hedging.
-- The C machine decides everything: when a hedge is due (resume_at, the
-- live quantile), whether it may start (budget spent, suppressed while the
-- failure ratio is high, throttled), and which attempts lose (the cancel
-- mask): the first good answer wins and the losers are killed. Nothing
-- here is made per call: each call record carries a kit (its own step, as
-- the call waits while others run; the tables of attempts in flight; one
-- attempt record per slot), made the first time the record hedges. A
-- record is reused for the next attempt in its slot; `gen` tells a killed
-- attempt that somehow still runs (a driver whose kill failed) that its
-- record has moved on, so it writes nothing into it.
local function attempt_body(rec)
  local gen = rec.gen
  attempt_at, attempt_now = rec.at, rec.now
  local ok, n, r1, r2, r3, rest = collect(pcall(rec.fn, rec.a1, rec.a2, rec.a3, rec.a4))
  attempt_at = -1
  if rec.gen == gen then
    rec.ok, rec.n, rec.r1, rec.r2, rec.r3, rec.rest = ok, n, r1, r2, r3, rest
    rec.done = true
  end
  return rec
end

-- An attempt record with every key it will hold, so reuse never grows it.
local function new_rec()
  return { gen = 0, slot = 0, hedge = false, at = 0, now = false, fn = false, a1 = false,
           a2 = false, a3 = false, a4 = false, done = false, ok = false, n = 0, r1 = false,
           r2 = false, r3 = false, rest = false, vk = false, fl = false, ra = false,
           task = false }
end

-- The record `slot` of kit, for a new attempt of fn(a1..a4).
local function slot_rec(kit, slot, hedge, at, now, fn, a1, a2, a3, a4)
  local rec = kit[slot]
  rec.gen = rec.gen + 1
  rec.slot, rec.hedge, rec.at, rec.now, rec.done = slot, hedge, at, now, false
  rec.fn, rec.a1, rec.a2, rec.a3, rec.a4 = fn, a1, a2, a3, a4
  rec.ok, rec.n, rec.r1, rec.r2, rec.r3, rec.rest = nil, nil, nil, nil, nil, nil
  rec.vk, rec.fl, rec.ra, rec.task = nil, nil, nil, nil
  return rec
end

-- Let go of what the kit's records hold (fn, its arguments and results).
local function clear_kit(kit)
  for slot = 0, 3 do
    local rec = kit[slot]
    rec.gen = rec.gen + 1
    rec.fn, rec.a1, rec.a2, rec.a3, rec.a4, rec.now = nil, nil, nil, nil, nil, nil
    rec.r1, rec.r2, rec.r3, rec.rest, rec.task = nil, nil, nil, nil, nil
  end
end

local function new_kit()
  return { st = ffi_new("nres_step_t"), recs = {}, list = {},
           [0] = new_rec(), new_rec(), new_rec(), new_rec() }
end

-- Kill the attempts of recs[0..3] (records by slot) whose slot is in
-- mask (nil: all) and forget them: kill(task, record), for those running.
local function kill_all(kill, recs, mask)
  for slot = 0, 3 do
    local r = recs[slot]
    if r ~= nil and (mask == nil or band(mask, lshift(1, slot)) ~= 0) then
      recs[slot] = nil
      if r.task ~= nil and not r.done then pcall(kill, r.task, r) end
    end
  end
end

-- An attempt of recs[0..3] that has ended, or nil and the tasks still
-- running in list[1..n], and n.
local function ended(recs, list)
  local n = 0
  for slot = 0, 3 do
    local r = recs[slot]
    if r ~= nil then
      if r.done then return r, 0 end
      n = n + 1
      list[n] = r.task
    end
  end
  return nil, n
end
_M.kill_all, _M.ended = kill_all, ended   -- for the gateway's hedged loop

local function run_hedged(self, fn, a1, a2, a3, a4)
  local cp, verdict_of, driver = self.cp, self.classify, self.driver
  local now, admit, on_event = driver.now, self.admit, self.on_event
  local spawn, wait_any, kill = driver.spawn, driver.wait_any, driver.kill
  local call, owner = take_call()
  owner[1], owner[2] = self, driver
  local kit = owner.kit
  if kit == nil then
    kit = new_kit()
    owner.kit = kit
  end
  local st, recs, list = kit.st, kit.recs, kit.list   -- st: this call waits while others run
  local kind = step_begin(call, cp, now(), -1, self.class or 1, st)
  -- The last attempt reported, copied out: its record may be reused.
  local ok, n, r1, r2, r3, rest = true, 0, nil, nil, nil, nil
  local refused, cb, cb_err

  while kind ~= DONE do
    local at
    if kind == ATTEMPT then
      local rec = slot_rec(kit, st.slot, st.hedge == 1, st.at, now, fn, a1, a2, a3, a4)
      at = st.resume_at                  -- when a hedge may be due
      if admit then
        local said, what = ask(admit, st.attempt, self)
        if said == FAILED then
          cb, cb_err = "admit", what
          break
        elseif said == REFUSED then
          refused = what
          rec.ok, rec.n, rec.r1, rec.r2 = true, 2, nil, refused
          rec.vk, rec.fl, rec.ra, rec.done = THROTTLED, VF_SELF, -1, true
        end
      end
      recs[rec.slot] = rec
      if not rec.done then
        local fine, task = pcall(spawn, attempt_body, rec)
        if not fine then
          recs[rec.slot] = nil
          cb, cb_err = "driver.spawn", task
          break
        end
        rec.task = task
      end
    else
      at = st.at
    end

    -- An attempt that has ended, else wait for one or for `at`.
    local rec, running = ended(recs, list)
    if rec == nil and running > 0 then
      local fine, got = pcall(wait_any, list, running, at)
      for i = running, 1, -1 do list[i] = nil end
      if not fine then
        cb, cb_err = "driver.wait_any", got
        break
      end
      rec = got
    elseif rec == nil then
      if at < 0 then
        kind = step_cancel(call, now(), st)
        clear_kit(kit)
        give_call(call, owner)
        error("nres: the executor asked to wait forever with nothing in flight", 2)
      end
      local before = now()
      cb, cb_err = wait(driver, on_event, at - before)
      if cb ~= nil then break end
      cb_err = stalled(before, at, now())
      if cb_err ~= nil then cb = "driver.sleep"; break end
    end

    if rec ~= nil then
      recs[rec.slot] = nil
      local vk, fl, ra = rec.vk, rec.fl, rec.ra
      if vk == nil then
        local fine
        fine, vk, fl, ra = pcall(verdict_of, rec.ok, rec.r1, rec.r2)
        if not fine then
          ok, n, r1, r2, r3, rest = rec.ok, rec.n, rec.r1, rec.r2, rec.r3, rec.rest
          cb, cb_err = "classify", vk
          break
        end
      end
      if on_event then
        local fine, err = pcall(on_event, "attempt", call.attempts, verdict_names[vk])
        if not fine then
          ok, n, r1, r2, r3, rest = rec.ok, rec.n, rec.r1, rec.r2, rec.r3, rec.rest
          cb, cb_err = "on_event", err
          break
        end
      end
      local b0 = on_event and breaker_state(cp)
      kind = step_report(call, rec.slot, now(), vk, fl, ra, st)
      ok, n, r1, r2, r3, rest = rec.ok, rec.n, rec.r1, rec.r2, rec.r3, rec.rest
      if on_event then
        cb, cb_err = breaker_event(on_event, cp, b0)
        if cb ~= nil then break end
      end
      if st.cancel ~= 0 then kill_all(kill, recs, st.cancel) end
    else
      kind = step_resume(call, now(), st)
    end
  end

  kill_all(kill, recs, nil)
  clear_kit(kit)
  if cb ~= nil then
    step_abort(call, now(), st)
    return finish(self, call, owner, st.stop, false, ok, r1, r2, refused, cb, cb_err)
  end
  local stop, fallback_wanted = st.stop, st.fallback == 1
  if stop == STOP_OK then
    return succeed(self, call, owner, on_event, ok, n, r1, r2, r3, rest)
  end
  return finish(self, call, owner, stop, fallback_wanted, ok, r1, r2, refused)
end

-- Run fn(a1, a2, a3, a4) under the policy. On success: exactly fn's
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
    local ok, n, r1, r2, r3, rest = collect(pcall(fn, a1, a2, a3, a4))
    local fine, vk = pcall(verdict_of, ok, r1, r2)
    if fine and vk == 0 then return results(n, r1, r2, r3, rest) end
    local call, owner = take_call()
    step_begin(call, cp, 0, -1, self.class or 1, step)
    if fine then
      step_report(call, 0, 0, vk, 0, -1, step)
      return finish(self, call, owner, step.stop, step.fallback == 1, ok, r1, r2, nil)
    end
    step_abort(call, 0, step)
    return finish(self, call, owner, step.stop, false, ok, r1, r2, nil, "classify", vk)
  end

  if self.hedged then
    if driver.spawn == nil then
      error(format("nres: this policy hedges, and the %s driver cannot run attempts side by side"
                   .. " (it needs spawn, wait_any and kill: nresrun's scheduler, nginx); use"
                   .. " p:with_driver(...) or hedge = false", tostring(driver.name or "given")), 2)
    end
    return run_hedged(self, fn, a1, a2, a3, a4)
  end

  -- A policy that makes no decision on time (retries and backoff only:
  -- the C sync driver's "timeless") reads no clock: its time starts at 0
  -- and moves only by the waits it asks for. Two clock reads fewer a call.
  -- A driver on the runtime's own clock (blocking, nginx) lets C read it:
  -- -1 for "now" is an FFI call and a conversion fewer per read.
  local timeless = self.timeless
  local c_clock = not timeless and driver.runtime_clock
  local t = timeless and 0 or c_clock and -1 or now()
  local call, owner = take_call()
  owner[1], owner[2] = self, driver
  -- The sync steps answer kind | slot << 8 | hedge << 16 | stop << 24,
  -- and the action's time in sync_at[0].
  local act = sync_begin(call, cp, t, self.class or 1, sync_at)
  local ok, n, r1, r2, r3, rest, refused = true, 0, nil, nil, nil, nil, nil
  local cb, cb_err                       -- a callback that failed, and how

  while band(act, 0xff) ~= DONE do
    if band(act, 0xff) == ATTEMPT then
      local slot = band(rshift(act, 8), 0xff)
      local vk, fl, ra
      attempt_at, attempt_now = sync_at[0], now
      if admit then
        local said, what = ask(admit, call.attempts, self)
        if said == FAILED then
          cb, cb_err = "admit", what
          break
        elseif said == REFUSED then
          refused = what
          ok, n, r1, r2 = true, 2, nil, refused
          vk, fl, ra = THROTTLED, VF_SELF, -1
        end
      end
      if vk == nil then
        ok, n, r1, r2, r3, rest = collect(pcall(fn, a1, a2, a3, a4))
        local fine
        fine, vk, fl, ra = pcall(verdict_of, ok, r1, r2)
        if not fine then
          cb, cb_err = "classify", vk
          break
        end
      end
      attempt_at = -1
      if on_event then
        local fine, err = pcall(on_event, "attempt", call.attempts, verdict_names[vk])
        if not fine then
          cb, cb_err = "on_event", err
          break
        end
      end
      if not timeless then t = c_clock and -1 or now() end
      local b0 = on_event and breaker_state(cp)
      act = sync_report(call, slot, t, vk, fl, ra, sync_at)
      if on_event then
        cb, cb_err = breaker_event(on_event, cp, b0)
        if cb ~= nil then break end
      end
    else
      local at = sync_at[0]
      if at < 0 then   -- nothing runs in the background here: cannot happen
        step_cancel(call, timeless and t or now(), step)
        give_call(call, owner)
        error("nres: the executor asked to wait forever with nothing in flight", 2)
      end
      local before = timeless and t or now()
      cb, cb_err = wait(driver, on_event, at - before)
      if cb ~= nil then break end
      t = timeless and at or now()
      cb_err = not timeless and stalled(before, at, t) or nil
      if cb_err ~= nil then cb = "driver.sleep"; break end
      act = sync_resume(call, t, sync_at)
    end
  end

  if cb ~= nil then
    -- Give back at once everything the call holds (permit, probe, queue
    -- place, budget token); the attempt counts for nothing.
    attempt_at = -1
    step_abort(call, timeless and t or now(), step)
    return finish(self, call, owner, step.stop, false, ok, r1, r2, refused, cb, cb_err)
  end

  local stop = rshift(act, 24)
  if stop == STOP_OK then
    return succeed(self, call, owner, on_event, ok, n, r1, r2, r3, rest)
  end
  return finish(self, call, owner, stop, call.fallback == 1, ok, r1, r2, refused)
end

return _M

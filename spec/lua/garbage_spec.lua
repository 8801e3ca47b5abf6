-- SPDX-License-Identifier: MIT
-- garbage_spec.lua - bytes of Lua garbage per p:run, counted, on every path:
-- success, failure (info reused per coroutine), every stop reason compiled
-- and interpreted, admit refusals, fallback, and hedged calls on nresrun's
-- scheduler. The figure is deterministic:
-- the loop is compiled first, the collector is stopped, and
-- collectgarbage("count") is read around N calls, three times, and the
-- best of the three must be under 0.1 B per call. Why that bound and not
-- 0: the JIT may still compile a trace inside a window (a one-off few
-- hundred bytes to ~2 KB, seen on the hedged loop), while the smallest
-- object made per call would be 16 B/call or more in every window, and
-- one made every hundredth call still 0.16 B/call. Also: what info holds
-- is still right after reuse, and a failure nested in another one's
-- callbacks does not overwrite it. Last, a call that needs a fresh record
-- while p:run is compiled meets no NYI (the record's finalizer is shared).
local nres = require "nres"
local sched = require "nresrun.sched"

local N = 20000
local BOUND = 0.1   -- B/call: see above

-- Bytes per call of calls(k) (k calls), once compiled: the best of three
-- windows. If no window is under the bound, the traces are flushed and
-- compiled afresh once: in about one run in 85 (seen in CI's parallel
-- ctest) a coroutine's failing loop stayed out of compiled code long
-- enough to allocate in all three windows (32 B/call; interpreted, that
-- path makes 288 B/call, which the JIT sinks). A path that allocates
-- when compiled still fails: it allocates in every window of both rounds.
local function measure(calls)
  calls(N); calls(N)                     -- compile the loops, side traces too
  collectgarbage("collect")
  collectgarbage("stop")
  local best = math.huge
  for _ = 1, 3 do
    local kb0 = collectgarbage("count")
    calls(N)
    local b = (collectgarbage("count") - kb0) * 1024
    if b < best then best = b end
  end
  collectgarbage("restart")
  return best / N
end

local function bytes_per_call(calls)
  local b = measure(calls)
  if b < BOUND then return b end
  jit.flush()
  return math.min(b, measure(calls))
end

local function virtual(spec)
  return nres.policy(spec):with_driver(nres.driver.virtual())
end

-- k calls of p:run(fn, i); check(res, reason, info) sees each answer.
local function loop(p, fn, check)
  return function(k)
    for i = 1, k do check(p:run(fn, i)) end
  end
end

local function ok(i) return i end
local function down() return nil, "down" end
local function every4(i) if i % 4 == 0 then return nil, "down" end return i end

local function must_succeed(res) if res == nil then error("call failed") end end
-- (default's breaker opens: "circuit open", with no error)
local function must_fail(res, reason, info)
  if res ~= nil or info.reason ~= reason or info.error ~= "down" and reason ~= "circuit open" then
    error("expected a failure, got " .. tostring(res) .. ", " .. tostring(reason))
  end
end
local function either(res, reason, info)
  if res == nil and info.reason ~= reason then error("info.reason " .. tostring(info.reason)) end
end

describe("bytes per call (plain path)", function()
  for _, name in ipairs { "none", "trivial", "default" } do
    it(name .. ": success, 0 B", function()
      local b = bytes_per_call(loop(virtual(name), ok, must_succeed))
      expect.truthy(b < BOUND, name .. " success: " .. b .. " B/call")
    end)
    it(name .. ": failure (nil, reason, info), 0 B", function()
      local b = bytes_per_call(loop(virtual(name), down, must_fail))
      expect.truthy(b < BOUND, name .. " failure: " .. b .. " B/call")
    end)
    it(name .. ": one call in four failing, 0 B", function()
      local b = bytes_per_call(loop(virtual(name), every4, either))
      expect.truthy(b < BOUND, name .. " mixed: " .. b .. " B/call")
    end)
  end
  it("admit refusing, 0 B", function()
    local p = virtual { base = "none", admit = function() return false, "quota" end }
    local b = bytes_per_call(loop(p, ok, function(res, reason)
      if reason ~= "quota" then error("reason " .. tostring(reason)) end
    end))
    expect.truthy(b < BOUND, b .. " B/call")
  end)
  it("the fallback's value, 0 B", function()
    local p = virtual { base = "trivial", fallback = function() return "stale" end }
    local b = bytes_per_call(loop(p, down, function(res, _, info)
      if res ~= "stale" or not info.fallback then error("no fallback") end
    end))
    expect.truthy(b < BOUND, b .. " B/call")
  end)
  it("inside coroutines (one info each), 0 B", function()
    local p = virtual "trivial"
    local cos = {}
    for c = 1, 4 do
      cos[c] = coroutine.wrap(function(k)
        while true do
          for i = 1, k do must_fail(p:run(down, i)) end
          k = coroutine.yield()
        end
      end)
    end
    local b = bytes_per_call(function(k)
      for c = 1, 4 do cos[c](k / 4) end
    end)
    expect.truthy(b < BOUND, b .. " B/call")
  end)
end)

describe("reused info", function()
  it("says what the latest failure says, log included", function()
    local p = virtual { base = "trivial" }
    local _, _, first = p:run(down)
    expect.eq(first.attempts, 3); expect.eq(#first.log, 3)
    local q = virtual { base = "none", attempts = 2 }
    local _, reason, info = q:run(function() error("thrown") end)
    expect.eq(info, first, "the same table, reused")
    expect.eq(reason, "attempts exhausted")
    expect.eq(info.attempts, 2); expect.eq(info.retries, 1); expect.eq(#info.log, 2)
    expect.eq(info.log[1].attempt, 1); expect.eq(info.log[2].attempt, 2)
    expect.eq(info.thrown, true)
    expect.truthy(info.error:find("thrown", 1, true), info.error)
    expect.eq(info.fallback, nil); expect.eq(info.callback, nil)
    expect.eq(info.log[3], nil, "no entry left over from the 3-attempt call")
  end)
  it("keeps the order of the last 8 attempts of a long call", function()
    local p = virtual { base = "none", attempts = 11 }
    local _, _, info = p:run(down)
    expect.eq(#info.log, 8)
    expect.eq(info.log[1].attempt, 4); expect.eq(info.log[8].attempt, 11)
  end)
  it("a callback's fields do not stay on the next failure", function()
    local p = virtual { base = "none", admit = function() return 42 end }
    local _, _, info = p:run(ok)
    expect.eq(info.callback, "admit")
    local _, _, again = virtual("none"):run(down)
    expect.eq(again.callback, nil); expect.eq(again.raised, nil); expect.eq(again.cause, nil)
    expect.eq(again.error, "down")
  end)
  it("nres.copy_info keeps one past the next failure", function()
    local p = virtual { base = "trivial" }
    local _, _, info = p:run(down)
    local kept = nres.copy_info(info)
    p:run(function() return nil, "other" end)
    expect.eq(kept.error, "down"); expect.eq(#kept.log, 3); expect.eq(info.error, "other")
    expect.truthy(kept.log[1] ~= info.log[1], "log entries copied")
  end)
  it("nres.copy_info refuses what is not a failed call's info, by name", function()
    for _, bad in ipairs { {}, 42, "info", { log = "x" } } do
      local ok, err = pcall(nres.copy_info, bad)
      expect.eq(ok, false)
      expect.truthy(tostring(err):find("nres.copy_info: expected the info table of a failed p:run", 1, true), err)
    end
    local ok = pcall(nres.copy_info)
    expect.eq(ok, false, "nil refused")
  end)
  it("a failure inside a failing call's fallback gets its own info", function()
    local inner
    local q = virtual { base = "none" }
    local p = virtual { base = "none", fallback = function()
      local _, _, i = q:run(function() return nil, "inner" end)
      inner = i
      return "fell back"
    end }
    local res, _, info = p:run(down)
    expect.eq(res, "fell back")
    expect.eq(info.error, "down", "the outer info is not the inner one's")
    expect.eq(info.fallback, true)
    expect.eq(inner.error, "inner")
    expect.truthy(inner ~= info)
  end)
  it("coroutines do not share one", function()
    local p = virtual { base = "none" }
    local co = coroutine.wrap(function()
      local _, _, i = p:run(function() return nil, "in co" end)
      coroutine.yield(i)
    end)
    local _, _, mine = p:run(down)
    local theirs = co()
    expect.eq(mine.error, "down"); expect.eq(theirs.error, "in co")
  end)
end)

-- Every way a call can end, compiled and interpreted. Interpreted (the
-- JIT off: a fresh coroutine per call, as in nginx, or code the JIT has
-- not compiled yet) nothing sinks an allocation, so a 64-bit field or a
-- record read by reference is a fresh box: the failure path must read
-- none (nres_step_log). The interpreted figure is exact: no trace is
-- compiled inside its windows.
describe("bytes per call, every stop reason", function()
  local d = nres.driver.virtual()
  local function on(spec) return nres.policy(spec):with_driver(d) end
  local function slow() d.advance(0.3e9); return nil, "slow" end
  local cases = {
    { "attempts exhausted", function() return on "trivial", down end },
    { "permanent", function() return on { base = "trivial", classify = { default = "permanent" } }, down end },
    { "deadline exceeded", function()
        return on { base = "none", attempts = 5, deadline = 1,
                    backoff = { kind = "constant", base = 0.3, max = 0.3, jitter = "none" } }, slow end },
    { "budget exhausted", function()
        return on { base = "none", attempts = 3, telemetry = true,
                    budget = { ratio = 0.1, min_per_sec = 0, capacity = 1 } }, down end },
    { "circuit open", function()
        return on { base = "none", breaker = { consecutive = 2, break_for = 10 } }, down, "attempts exhausted" end },
    { "rate limited", function() return on { base = "none", limiter = { rate = 1, burst = 1 } }, ok, "ok" end },
    { "canceled", function() return on { base = "trivial", classify = { default = "canceled" } }, down end },
    { "draining", function() local p = on "trivial"; p:drain(); return p, ok end },
    { "throttled locally", function()
        return on { base = "none", telemetry = true, throttle = { k = 1, window = 10, buckets = 10 },
                    classify = { default = "throttled" } }, down, "attempts exhausted" end },
    { "callback error", function() return on { base = "trivial", classify = function() return "maybe" end }, ok end },
    { "quota", function() return on { base = "none", admit = function() return false, "quota" end }, ok end },
  }
  for _, case in ipairs(cases) do
    local want = case[1]
    for _, interpreted in ipairs { false, true } do
      it(want .. (interpreted and ", interpreted" or ", compiled") .. ": 0 B", function()
        local p, fn, also = case[2]()
        local check = function(res, reason, info)
          d.advance(20e6)                -- the throttle's odds move with time
          if res ~= nil and also == "ok" then return end
          if reason ~= want and reason ~= also or info.reason ~= reason then
            error("expected " .. want .. ", got " .. tostring(res) .. ", " .. tostring(reason))
          end
        end
        if interpreted then jit.off(); jit.flush() end   -- off alone keeps the traces
        local fine, b = pcall(bytes_per_call, loop(p, fn, check))
        jit.on()
        if not fine then error(b, 0) end
        expect.truthy(b < BOUND, want .. ": " .. b .. " B/call")
      end)
    end
  end
end)

describe("bytes per call (hedged, nresrun's scheduler)", function()
  -- n calls as workers on one virtual scheduler, each attempt sleeping
  -- `ms`; hedge.at 50 ms.
  local function hedged(ms, fails)
    local s = sched.new { virtual = true }
    local p = nres.policy { base = "trivial", attempts = 2, hedge = { at = 0.05, max = 2 },
                            budget = { ratio = 1, min_per_sec = 1e6, capacity = 1e6 } }
                :with_driver(s.driver)
    local sleep = s.driver.sleep
    local function fn(i)
      sleep(ms * 1e6)
      if fails then return nil, "down" end
      return i
    end
    local answered = 0
    -- One worker for every round: a coroutine per round would be garbage.
    local worker = coroutine.create(function(k)
      while true do
        for i = 1, k do
          local r = p:run(fn, i)
          if (r ~= nil) == not fails then answered = answered + 1 end
        end
        k = coroutine.yield("idle")      -- not a time: parked off the heap
      end
    end)
    return function(k)
      answered = 0
      sched.resume(s, worker, k)
      s:run_until(math.huge)
      if answered ~= k then error(answered .. " of " .. k .. " answered as expected") end
    end, p
  end
  it("no hedge fired (answers in 10 ms), 0 B", function()
    local calls, p = hedged(10)
    local b = bytes_per_call(calls)
    expect.truthy(b < BOUND, b .. " B/call")
    expect.eq(p:stats().hedges, 0)
  end)
  it("failing before the hedge, 0 B", function()
    local calls = hedged(10, true)
    local b = bytes_per_call(calls)
    expect.truthy(b < BOUND, b .. " B/call")
  end)
  it("a hedge fired and its loser killed: one coroutine per call, nothing more", function()
    local calls, p = hedged(100)   -- attempt 1 answers at 100 ms, the hedge (at 50) would at 150
    local b = bytes_per_call(calls)
    expect.eq(p:stats().hedges_canceled, p:stats().hedges, "every hedge lost and was killed")
    -- The killed loser's coroutine, suspended mid-attempt, cannot be
    -- reused: it goes with its grown stack and its task table (1184 B on
    -- LuaJIT 2.1 x64, 2.2 fresh coroutines; the path made 3.7 KB a call
    -- before tasks, timers and records were reused). Bound: three fresh
    -- coroutines, measured here so it follows the LuaJIT build.
    collectgarbage("stop")
    local kb0 = collectgarbage("count")
    local co = coroutine.create(function() coroutine.yield() end)
    coroutine.resume(co)
    local one = (collectgarbage("count") - kb0) * 1024
    collectgarbage("restart")
    expect.truthy(b <= 3 * one, string.format("%.1f B/call, a coroutine is %.0f B", b, one))
  end)
end)


-- Records made while p:run is compiled: each shares one finalizer, so
-- making one is no new function (FNEW, which the JIT cannot compile: in
-- a gateway, a burst of concurrent calls aborted p:run's trace there and
-- spec/nginx saw "NYI: bytecode 51 at run.lua").
describe("compiled code", function()
  it("calls that need fresh records (many in flight at once) meet no NYI in run.lua", function()
    local vmdef, jutil = require "jit.vmdef", require "jit.util"
    local aborts = {}
    local function on_trace(what, _, func, pc, code, extra)
      if what ~= "abort" then return end
      local where = jutil.funcinfo(func, pc)
      if (where.source or ""):find("nres/run.lua", 1, true) then
        local why = vmdef.traceerr[code] or tostring(code)
        if type(why) == "string" and extra ~= nil then why = why:format(extra) end
        -- What cannot compile (NYI); not the recorder's ordinary restarts
        -- ("inner loop in root trace"), which end in a trace.
        if tostring(why):find("NYI", 1, true) then
          aborts[#aborts + 1] = (where.loc or where.source) .. ": " .. why
        end
      end
    end
    local p = nres.policy({ base = "trivial" })
    local function held() coroutine.yield(); return true end
    local function one() return p:run(held) end
    jit.attach(on_trace, "trace")
    -- Round r holds 40 r calls in flight: each round takes records the
    -- free list has not got, long after p:run is hot.
    for r = 1, 12 do
      local cos = {}
      for i = 1, 40 * r do
        cos[i] = coroutine.create(one)
        coroutine.resume(cos[i])
      end
      for i = 1, #cos do
        local ok, res = coroutine.resume(cos[i])
        expect.truthy(ok and res == true, "a held call answered")
      end
    end
    jit.attach(on_trace)
    expect.eq(#aborts, 0, table.concat(aborts, "; "))
  end)
end)

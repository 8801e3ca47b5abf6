-- SPDX-License-Identifier: MIT
-- faults_spec.lua - user callbacks that throw or return junk, and calls
-- that are abandoned, never leave anything held: every permit, half-open
-- probe and budget token comes back, p:run answers nil, reason, info (or
-- the junk itself where junk is a legal value), and the next normal call
-- succeeds. Table-driven over callback x fault x policy state, on the
-- virtual clock (no test sleeps).
local nres = require "nres"

local JUNK = { 42, {}, "okay" }
local FAULTS = { "throw", JUNK[1], JUNK[2], JUNK[3] }

local function fault_name(f)
  if f == "throw" then return "throw" end
  return "junk " .. (type(f) == "table" and "{}" or string.format("%q", tostring(f)))
end

-- A callback misbehaving as `fault` while `sw.broken` is set.
local function misbehave(fault)
  if fault == "throw" then error("boom from a callback") end
  return fault
end

-- Policy states. Every policy has a concurrency limit of 1 (a leaked permit
-- makes every later call "rate limited") and a budget without refill.
local STATES = {
  {
    name = "closed breaker",
    spec = { breaker = { consecutive = 5, break_for = 10, break_max = 10, jitter = 0 } },
  },
  {
    name = "half-open probe",
    spec = { breaker = { consecutive = 1, break_for = 10, break_max = 10, jitter = 0,
                         probes = 1, successes = 1 } },
    setup = function(p, d)
      p:run(function() return nil, "down" end)            -- trips it
      assert(p:stats().breaker == "open", "setup: breaker not open")
      d.advance(10e9 + 1)
      assert(p:stats().breaker == "half-open", "setup: breaker not half-open")
    end,
  },
  {
    name = "concurrency limiter",
    spec = { limiter = { concurrency = 1 } },
  },
  {
    name = "rate limiter with wait",
    spec = { limiter = { concurrency = 1, rate = 1, burst = 1, wait = 5 } },
    setup = function(p)
      assert(p:run(function() return 1 end) == 1, "setup call")   -- takes the token: the next call waits
    end,
  },
  {
    name = "backoff wait with a charged budget token",
    spec = { attempts = 2, backoff = { kind = "constant", base = 0.5, max = 0.5, jitter = "none" } },
    first_fails = true,       -- fn fails its first attempt, so a retry is paid and waited for
    event = "wait",           -- on_event misbehaves on the backoff wait
  },
}

local function policy_for(state, cb, fault, sw)
  local spec = {
    base = "none", attempts = 1, deadline = 60,
    budget = { ratio = 1e-6, min_per_sec = 0, capacity = 3 },   -- deposits next to nothing
    limiter = { concurrency = 1 },
    classify = function(res, err)
      if sw.broken and cb == "classify" then return misbehave(fault) end
      return err ~= nil and "transient" or "ok"
    end,
    admit = function()
      if sw.broken and cb == "admit" then return misbehave(fault) end
      return true
    end,
    on_event = function(kind)
      if sw.broken and cb == "on_event" and (state.event == nil or state.event == kind) then
        return misbehave(fault)
      end
    end,
    -- Only where it is the callback under test: elsewhere a failed call
    -- must answer nil, reason, info.
    fallback = cb == "fallback" and function()
      if sw.broken then return misbehave(fault) end
      return "from fallback"
    end or nil,
  }
  for k, v in pairs(state.spec) do spec[k] = v end
  local d = nres.driver.virtual()
  return nres.policy(spec):with_driver(d), d
end

-- fn for the faulty call.
local function faulty_fn(state, cb, fault)
  local n = 0
  return function()
    n = n + 1
    if cb == "fn" then return misbehave(fault) end
    if cb == "fallback" then return nil, "down" end
    if state.first_fails and n == 1 then return nil, "down" end
    return "value"
  end
end

local function held(p)
  local bh = p.refs.bulkhead
  return tonumber(bh.inflight) + tonumber(bh.waiting)
end

describe("every callback x fault x state", function()
  for _, state in ipairs(STATES) do
    for _, cb in ipairs { "fn", "classify", "admit", "on_event", "fallback" } do
      for _, fault in ipairs(FAULTS) do
        it(string.format("%s / %s / %s", state.name, cb, fault_name(fault)), function()
          local sw = { broken = false }
          local p, d = policy_for(state, cb, fault, sw)
          if state.setup then state.setup(p, d) end
          local budget_before = p:stats().budget
          sw.broken = true
          local ok, res, reason, info = pcall(p.run, p, faulty_fn(state, cb, fault))
          sw.broken = false
          expect.truthy(ok, "p:run raised: " .. tostring(res))

          -- What the faulty call answers.
          local junk = fault ~= "throw"
          local reported = false      -- the attempt's failure reached the breaker
          if cb == "fn" and junk then
            expect.eq(res, fault, "fn's junk is its result")
          elseif cb == "on_event" and junk then
            expect.eq(res, "value", "on_event's return value is ignored")
          elseif cb == "fallback" and junk then
            expect.eq(res, fault, "the fallback's value")
            expect.eq(info.fallback, true, "info.fallback")
            reported = true
          elseif cb == "fn" then
            expect.eq(res, nil)
            expect.eq(reason, "attempts exhausted")
            expect.truthy(info.thrown, "info.thrown")
            expect.truthy(tostring(info.error):find("boom from a callback", 1, true), tostring(info.error))
            reported = true
          elseif cb == "fallback" then
            expect.eq(res, nil)
            expect.eq(reason, "attempts exhausted")
            expect.eq(info.callback, "fallback")
            expect.eq(info.error:sub(1, 23), "nres: fallback raised: ")
            expect.eq(info.cause, "down")
            reported = true
          else
            expect.eq(res, nil)
            expect.eq(reason, "callback error")
            expect.eq(info.callback, cb)
            expect.truthy(type(info.error) == "string" and info.error:find("^nres: " .. cb .. " "),
              "info.error names the callback: " .. tostring(info.error))
            if junk then
              expect.truthy(info.error:find(" returned ", 1, true), info.error)
            else
              expect.truthy(info.error:find("boom from a callback", 1, true), info.error)
              expect.truthy(info.raised ~= nil, "info.raised")
            end
          end

          -- Nothing held right after it, without any collection.
          expect.eq(held(p), 0, "concurrency permits held")
          local retries = info and info.retries or (state.first_fails and cb ~= "fn" and 1 or 0)
          expect.near(p:stats().budget, budget_before - retries, 1e-3, "budget tokens")
          local br = p:stats().breaker
          if state.name == "half-open probe" then
            if reported then
              expect.eq(br, "open", "a failed probe reopens the breaker")
              d.advance(11e9)
            elseif res == nil then
              expect.eq(br, "half-open", "a canceled probe is given back, the breaker waits for another")
            end
          end

          -- A following normal call succeeds, and leaves the state clean.
          local again, r2 = p:run(function() return "fine" end)
          expect.eq(again, "fine", "the next call (" .. tostring(r2) .. ")")
          expect.eq(held(p), 0, "permits after the next call")
          if br ~= nil then expect.eq(p:stats().breaker, "closed", "breaker after the next call") end
        end)
      end
    end
  end
end)

describe("callbacks at other points", function()
  it("on_event throwing on a success's \"done\" turns it into nil, \"callback error\"", function()
    local d = nres.driver.virtual()
    local p = nres.policy { base = "none", limiter = { concurrency = 1 },
      on_event = function(kind) if kind == "done" then error("done hook broke") end end }:with_driver(d)
    local res, reason, info = p:run(function() return "value" end)
    expect.eq(res, nil); expect.eq(reason, "callback error"); expect.eq(info.callback, "on_event")
    expect.truthy(info.error:find("done hook broke", 1, true), info.error)
    expect.eq(held(p), 0, "permits")
  end)
  it("on_event throwing while a call waits in the bulkhead queue gives its place back", function()
    local sw = { broken = false }
    local p = nres.policy { base = "none",
      limiter = { concurrency = 1, queue = 1, queue_timeout = 1 },
      on_event = function(kind) if sw.broken and kind == "wait" then error("queue hook broke") end end,
    }:with_driver(nres.driver.virtual())
    local inner_reason, inner_info, waiting_inside
    local outer = p:run(function()
      sw.broken = true
      local _, r, info = p:run(function() return "inner" end)   -- the permit is taken: queued
      sw.broken = false
      inner_reason, inner_info = r, info
      waiting_inside = tonumber(p.refs.bulkhead.waiting)
      return "outer"
    end)
    expect.eq(outer, "outer")
    expect.eq(inner_reason, "callback error"); expect.eq(inner_info.callback, "on_event")
    expect.eq(waiting_inside, 0, "queue place given back at once")
    expect.eq(held(p), 0, "permits")
    expect.eq(p:run(function() return "next" end), "next")
  end)
  it("a driver whose sleep throws ends the waiting call, callback error", function()
    local d = nres.driver.virtual()
    local bad = { name = "bad", now = d.now, sleep = function() error("no sleeping here") end }
    local p = nres.policy { base = "none", attempts = 2, limiter = { concurrency = 1 },
      backoff = { kind = "constant", base = 1, max = 1, jitter = "none" } }:with_driver(bad)
    local n = 0
    local res, reason, info = p:run(function() n = n + 1; return nil, "down" end)
    expect.eq(res, nil); expect.eq(reason, "callback error"); expect.eq(info.callback, "driver.sleep")
    expect.eq(n, 1)
    expect.eq(held(p), 0, "permits")
  end)
  it("a driver whose clock stands still cancels the waiting call (no endless wait)", function()
    for _, frozen in ipairs { 5e9, 0 / 0 } do
      local sleeps = 0
      local d = { name = "frozen", now = function() return frozen end, sleep = function()
        sleeps = sleeps + 1
        if sleeps > 50 then error("slept 50 times") end   -- the old endless loop
      end }
      local p = nres.policy { base = "none", attempts = 3, limiter = { concurrency = 1 },
        backoff = { kind = "constant", base = 1, max = 1, jitter = "none" } }:with_driver(d)
      local n = 0
      local res, reason, info = p:run(function() n = n + 1; return nil, "down" end)
      expect.eq(res, nil); expect.eq(reason, "callback error"); expect.eq(info.callback, "driver.sleep")
      expect.eq(info.error, string.format("nres: driver.sleep: the driver's clock did not move"
        .. " (now() = %s before sleeping until %s, %s after): the call would wait for ever",
        tostring(frozen), tostring(frozen == frozen and frozen + 1e9 or 1e9),   -- NaN reads as 0
        tostring(frozen)))
      expect.eq(n, 1); expect.eq(sleeps, 1)
      expect.eq(held(p), 0, "permits")
    end
  end)
  it("admit refusing with a reason that is not a string is junk", function()
    local p = nres.policy { base = "none", admit = function() return false, { "x" } end }
                :with_driver(nres.driver.virtual())
    local _, reason, info = p:run(function() return 1 end)
    expect.eq(reason, "callback error")
    expect.eq(info.error, "nres: admit returned false, a table; expected true, or false and an optional reason (string)")
  end)
  it("a classify pattern that is not a Lua pattern is refused when the policy is made", function()
    expect.error(function() nres.policy { classify = { patterns = { ["["] = "transient" } } } end,
      'nres.policy: classify.patterns["["]: expected a valid Lua pattern (malformed pattern (missing \']\'))')
  end)
end)

describe("abandoned calls", function()
  it("a dropped coroutine's concurrency permit comes back when it is collected", function()
    local p = nres.policy { base = "none", limiter = { concurrency = 1 } }
                :with_driver(nres.driver.virtual())
    local co = coroutine.create(function() return p:run(function() coroutine.yield(); return 1 end) end)
    assert(coroutine.resume(co))
    expect.eq(held(p), 1, "held while suspended")
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "rate limited")
    co = nil
    collectgarbage(); collectgarbage()
    expect.eq(held(p), 0, "given back by the collector")
    expect.eq(p:run(function() return 2 end), 2)
    expect.eq(co, nil)
  end)
  it("a dropped coroutine's half-open probe comes back", function()
    local d = nres.driver.virtual()
    local p = nres.policy { base = "none", breaker = { consecutive = 1, break_for = 10, break_max = 10,
                                                      jitter = 0, probes = 1, successes = 1 } }:with_driver(d)
    p:run(function() return nil, "down" end)
    d.advance(10e9 + 1)
    local co = coroutine.create(function() return p:run(function() coroutine.yield(); return 1 end) end)
    assert(coroutine.resume(co))
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "circuit open", "the probe is taken")
    co = nil
    collectgarbage(); collectgarbage()
    expect.eq(p:run(function() return 3 end), 3)
    expect.eq(p:stats().breaker, "closed")
    expect.eq(co, nil)
  end)
  it("a probe that hangs, still referenced, is given back by its lease (issue 28)", function()
    -- Plain Lua cannot abandon a running attempt: the attempt timeout is
    -- cooperative. The probe's lease (attempt_timeout + 1 s here) covers it.
    local d = nres.driver.virtual()
    local p = nres.policy { base = "none", attempt_timeout = 2,
                            breaker = { consecutive = 1, break_for = 10, break_max = 10,
                                        jitter = 0, probes = 1, successes = 1 } }:with_driver(d)
    p:run(function() return nil, "down" end)
    d.advance(10e9 + 1)
    local co = coroutine.create(function() return p:run(function() coroutine.yield(); return 1 end) end)
    assert(coroutine.resume(co))
    d.advance(3e9 - 1e6)
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "circuit open", "the probe is held for its lease")
    expect.eq(p:stats().leases_expired, 0)
    d.advance(2e6)   -- a lease ends on the ms, rounded up
    expect.eq(p:run(function() return 4 end), 4, "the lease is over: a new probe")
    expect.eq(p:stats().breaker, "closed")
    expect.eq(p:stats().leases_expired, 1)
    expect.truthy(coroutine.resume(co), "the hung call ends without harm")
  end)
  it("breaker.lease is checked against break_for", function()
    local ok, err = pcall(nres.policy, { breaker = { consecutive = 1, break_for = 1, lease = 2 } })
    expect.eq(ok, false)
    expect.truthy(tostring(err):find("breaker.lease: expected <= breaker.break_for (1 s), got 2", 1, true),
                  tostring(err))
  end)
  it("a suspended coroutine still referenced keeps its permit, and finishes normally", function()
    local p = nres.policy { base = "none", limiter = { concurrency = 1 } }
                :with_driver(nres.driver.virtual())
    local co = coroutine.create(function() return p:run(function() coroutine.yield(); return 7 end) end)
    assert(coroutine.resume(co))
    collectgarbage(); collectgarbage()
    expect.eq(held(p), 1, "a live call is not canceled by the collector")
    local fine, v = coroutine.resume(co)
    expect.truthy(fine, "resumed"); expect.eq(v, 7)
    expect.eq(held(p), 0, "released at its end")
  end)
  it("the policy may be dropped with the coroutine: the record keeps it alive for its finalizer", function()
    local weak = setmetatable({}, { __mode = "v" })
    do
      local p = nres.policy { base = "none", limiter = { concurrency = 1 } }
                  :with_driver(nres.driver.virtual())
      weak[1] = p.refs.bulkhead
      local co = coroutine.create(function() return p:run(function() coroutine.yield() end) end)
      assert(coroutine.resume(co))
      expect.eq(tonumber(weak[1].inflight), 1)
    end
    collectgarbage()
    -- The first cycle ran the finalizer (the bulkhead still alive, released);
    -- the next frees everything.
    if weak[1] ~= nil then expect.eq(tonumber(weak[1].inflight), 0, "released before freed") end
    collectgarbage(); collectgarbage()
    expect.eq(weak[1], nil, "the policy is not kept forever")
  end)
end)

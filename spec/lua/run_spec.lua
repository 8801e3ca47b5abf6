-- SPDX-License-Identifier: MIT
-- run_spec.lua - p:run on a virtual clock: every stop reason, classifiers,
-- thrown errors, fallback, admit, presets and overrides, a named budget
-- shared by two policies, determinism under a seed, and fn's results
-- returned exactly (count and garbage).
local nres = require "nres"

local function virtual(spec)
  local d = nres.driver.virtual()
  return nres.policy(spec):with_driver(d), d
end

-- A function failing `n` times with `err`, then returning `value`.
local function flaky(n, err, value)
  local calls = 0
  return function(...)
    calls = calls + 1
    if calls <= n then return nil, err end
    return value, ...
  end, function() return calls end
end

describe("success", function()
  it("returns fn's results and passes its arguments", function()
    local p = virtual { base = "trivial" }
    local a, b, c = p:run(function(x, y) return x + y, "two", 3 end, 1, 2)
    expect.eq(a, 3); expect.eq(b, "two"); expect.eq(c, 3)
  end)
  it("retries until fn succeeds", function()
    local p = virtual { base = "trivial" }
    local fn, calls = flaky(2, "boom", "done")
    expect.eq(p:run(fn), "done")
    expect.eq(calls(), 3)
    local s = p:stats()
    expect.eq(s.calls, 1); expect.eq(s.attempts, 3); expect.eq(s.retries, 2)
  end)
end)

describe("fn's results, exactly", function()
  local function count(...) return select("#", ...), ... end
  for _, name in ipairs { "trivial", "none" } do
    it(name .. ": every value, none added, none dropped", function()
      local p = virtual { base = name }
      local n, a, b, c, d = count(p:run(function() return 1, 2, 3, 4 end))
      expect.eq(n, 4); expect.eq(a, 1); expect.eq(d, 4)
      local n2, x, y = count(p:run(function() return 5, "x" end))
      expect.eq(n2, 2); expect.eq(x, 5); expect.eq(y, "x")
      expect.eq((count(p:run(function() return true end))), 1)
      expect.eq((count(p:run(function() return 1, nil, nil end))), 3)
      local n10 = count(p:run(function() return 1, 2, 3, 4, 5, 6, 7, 8, 9, nil end))
      expect.eq(n10, 10)
      expect.eq((count(p:run(function() return 1, nil, 3, nil end))), 4)
    end)
  end
  it("makes no Lua garbage per call for up to three results", function()
    local p = virtual { base = "trivial" }
    local function f(i) return i, "two", 3 end
    for i = 1, 2000 do p:run(f, i) end          -- compile the loop first
    collectgarbage("collect")
    collectgarbage("stop")
    local kb0 = collectgarbage("count")
    for i = 1, 100000 do p:run(f, i) end
    local kb = collectgarbage("count") - kb0
    collectgarbage("restart")
    -- One table per call would be several MB; allow the JIT's own traces.
    expect.truthy(kb < 64, string.format("%.1f KB of garbage over 100k calls", kb))
  end)
end)

describe("stop reasons", function()
  it("attempts exhausted, with the attempt log and the last error", function()
    local p = virtual { base = "trivial" }
    local res, reason, info = p:run(function() return nil, "refused" end)
    expect.eq(res, nil)
    expect.eq(reason, "attempts exhausted")
    expect.eq(info.attempts, 3)
    expect.eq(info.retries, 2)
    expect.eq(info.error, "refused")
    expect.eq(#info.log, 3)
    expect.eq(info.log[1].attempt, 1)
    expect.eq(info.log[3].verdict, "transient")
  end)
  it("deadline exceeded when the backoff would end past it", function()
    local p, d = virtual { base = "none", attempts = 5, deadline = 1,
                           backoff = { kind = "constant", base = 0.3, max = 0.3, jitter = "none" } }
    local _, reason, info = p:run(function() d.advance(0.3e9); return nil, "slow" end)
    expect.eq(reason, "deadline exceeded")
    expect.eq(info.attempts, 2)   -- 0.3 + 0.3 wait + 0.3 = 0.9; next wait ends at 1.5
  end)
  it("budget exhausted when retries outrun it", function()
    local p = virtual { base = "none", attempts = 3, telemetry = true,
                        budget = { ratio = 0.1, min_per_sec = 0, capacity = 1 } }
    local _, reason, info = p:run(function() return nil, "down" end)
    expect.eq(reason, "budget exhausted")
    expect.eq(info.attempts, 2)
    expect.eq(p:stats().rejects.budget, 1)
  end)
  it("circuit open, without calling fn", function()
    local p = virtual { base = "none", breaker = { consecutive = 2, break_for = 10 } }
    local fn, calls = flaky(100, "down")
    p:run(fn); p:run(fn)
    local _, reason, info = p:run(fn)
    expect.eq(reason, "circuit open")
    expect.eq(info.attempts, 0)
    expect.eq(calls(), 2)
    expect.eq(p:stats().breaker, "open")
  end)
  it("circuit open from the success that brings the window to min_calls over the ratio (issue 28)", function()
    -- resilience4j trips there; a ratio checked on failures only did not
    for _, base in ipairs { "none", "trivial" } do
      local p = virtual { base = base, attempts = 1, breaker = { ratio = 0.5, min_calls = 6, break_for = 10 } }
      for _ = 1, 3 do p:run(function() return nil, "down" end) end
      for _ = 1, 2 do expect.eq(p:run(function() return 1 end), 1) end
      expect.eq(p:stats().breaker, "closed", base .. ": 5 calls, under min_calls")
      expect.eq(p:run(function() return 1 end), 1)
      expect.eq(p:stats().breaker, "open", base .. ": 3 failures of 6")
    end
  end)
  it("throttled locally, without calling fn, once the dependency refuses for overload", function()
    local p, d = virtual { base = "none", telemetry = true, throttle = { k = 1, window = 10, buckets = 10 },
                           classify = function(_, err) return err and "throttled" or "ok" end }
    local fn, calls = flaky(1000, "429")
    local reasons = {}
    for _ = 1, 50 do
      d.advance(20e6)   -- 20 ms apart: the odds are recomputed every 10 ms
      local _, reason, info = p:run(fn)
      reasons[reason] = (reasons[reason] or 0) + 1
      if reason == "throttled locally" then expect.eq(info.attempts, 0) end
    end
    expect.truthy((reasons["throttled locally"] or 0) > 30, "most refused locally")
    expect.eq(calls(), reasons["attempts exhausted"])
    local st = p:stats()
    expect.eq(st.stops["throttled locally"], reasons["throttled locally"])
    expect.eq(st.rejects.throttle, reasons["throttled locally"])
    expect.eq(st.throttle.refused, reasons["throttled locally"])
    expect.eq(st.throttle.accepts, 0)
    expect.truthy(st.throttle.probability > 0.9)
  end)
  it("tells on_event of the breaker's changes (\"breaker\", state), once each", function()
    local p, d = virtual { base = "none", breaker = { consecutive = 2, break_for = 10,
                                                     successes = 1 } }
    local events = {}
    p.on_event = function(kind, a) if kind == "breaker" then events[#events + 1] = a end end
    local fn = flaky(2, "down")
    p:run(fn); p:run(fn)
    expect.eq(table.concat(events, " "), "open")
    p:run(fn)   -- refused: no change
    expect.eq(table.concat(events, " "), "open")
    d.advance(20e9)
    p:run(fn)   -- the probe succeeds: closed
    expect.eq(events[#events], "closed")
    expect.eq(#events, 2, table.concat(events, " "))
  end)

  it("rate limited by the local limiter", function()
    local p = virtual { base = "none", limiter = { rate = 1, burst = 1 } }
    expect.eq(p:run(function() return 1 end), 1)
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "rate limited")
  end)
  it("rate limited by the concurrency limit (a nested call)", function()
    local p = virtual { base = "none", limiter = { concurrency = 1 } }
    local inner_reason
    p:run(function() local _, r = p:run(function() return 1 end); inner_reason = r; return 1 end)
    expect.eq(inner_reason, "rate limited")
  end)
  it("permanent: no retry", function()
    local p = virtual { base = "trivial", classify = function(_, err) return err and "permanent" or "ok" end }
    local fn, calls = flaky(5, "bad request")
    local _, reason = p:run(fn)
    expect.eq(reason, "permanent")
    expect.eq(calls(), 1)
  end)
  it("canceled: no retry and no fallback", function()
    local fell = false
    local p = virtual { base = "trivial", classify = function(_, err) return err and "canceled" or "ok" end,
                        fallback = function() fell = true; return "x" end }
    local res, reason = p:run(function() return nil, "client went away" end)
    expect.eq(res, nil); expect.eq(reason, "canceled"); expect.eq(fell, false)
  end)
  it("draining", function()
    local p = virtual { base = "trivial" }
    p:drain()
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "draining")
    p:drain(false)
    expect.eq(p:run(function() return 1 end), 1)
  end)
end)

describe("passthrough", function()
  it("runs fn once and reports its failure like any policy", function()
    local p = virtual "none"
    expect.eq(p:run(function(a, b, c, d) return a + b + c + d end, 1, 2, 3, 4), 10)
    local res, reason, info = p:run(function() return nil, "nope" end)
    expect.eq(res, nil); expect.eq(reason, "attempts exhausted"); expect.eq(info.attempts, 1)
    local _, r2 = p:run(function() error("thrown") end)
    expect.eq(r2, "attempts exhausted")
  end)
  it("refuses a fifth argument instead of dropping it", function()
    local p = virtual "none"
    expect.error(function() p:run(print, 1, 2, 3, 4, 5) end,
      "bad argument #6 to 'run' (fn takes at most 4 arguments; pass a table)")
  end)
  it("still honours draining", function()
    local p = virtual "none"
    p:drain()
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "draining")
  end)
end)

describe("errors thrown by fn", function()
  it("are caught, classified and reported, never propagated raw", function()
    local p = virtual { base = "trivial" }
    local res, reason, info = p:run(function() error("kaboom") end)
    expect.eq(res, nil)
    expect.eq(reason, "attempts exhausted")
    expect.truthy(info.thrown, "info.thrown")
    expect.truthy(tostring(info.error):find("kaboom"), "error text")
  end)
  it("reach a classifier function as (nil, err)", function()
    local seen
    local p = virtual { base = "trivial", classify = function(res, err) seen = err; return "permanent" end }
    p:run(function() error({ code = 7 }) end)
    expect.eq(seen.code, 7)
  end)
end)

describe("classifiers", function()
  it("a table maps statuses, errors and patterns", function()
    local p, d = virtual { base = "none", attempts = 3,
      backoff = { kind = "constant", base = 0.01, max = 60 },
      classify = { status = { [429] = "throttled", [404] = "permanent" },
                   errors = { ["bad input"] = "permanent" },
                   patterns = { ["refused$"] = "transient" } } }
    local t0 = d.now()
    local fn = flaky(1, nil, nil)
    local n = 0
    local res = p:run(function()
      n = n + 1
      if n == 1 then return { status = 429, headers = { ["Retry-After"] = "2" } } end
      return { status = 200 }
    end)
    expect.eq(res.status, 200)
    expect.near((d.now() - t0) / 1e9, 2, 1e-6, "waited Retry-After")
    local _, reason = p:run(function() return { status = 404 } end)
    expect.eq(reason, "permanent")
    local _, r2 = p:run(function() return nil, "bad input" end)
    expect.eq(r2, "permanent")
    local _, r3, info = p:run(function() return nil, "connection refused" end)
    expect.eq(r3, "attempts exhausted"); expect.eq(info.attempts, 3)
    expect.truthy(fn, "unused")
  end)
  it("http: 503 with Retry-After waits, 404 is an answer, 500 is retried", function()
    local p, d = virtual { base = "http", breaker = false, ceiling = false }
    local t0, n = d.now(), 0
    local res = p:run(function()
      n = n + 1
      if n == 1 then return { status = 503, headers = { ["Retry-After"] = "3" } } end
      return { status = 200 }
    end)
    expect.eq(res.status, 200)
    expect.near((d.now() - t0) / 1e9, 3, 1e-6, "waited 3 s")
    expect.eq(p:run(function() return { status = 404 } end).status, 404)
    local _, reason, info = p:run(function() return 500 end)
    expect.eq(reason, "attempts exhausted"); expect.eq(info.attempts, 3)
  end)
  it("keeps the dependency's last answer in info.result when retries run out", function()
    local p = virtual { base = "http", breaker = false, ceiling = false }
    local n = 0
    local res, reason, info = p:run(function()
      n = n + 1
      return { status = 503, body = "upstream busy " .. n }
    end)
    expect.eq(res, nil); expect.eq(reason, "attempts exhausted")
    expect.eq(type(info.result), "table", "info.result")
    expect.eq(info.result.status, 503); expect.eq(info.result.body, "upstream busy 3")
    -- A thrown attempt, or nil, err, has no answer: nothing is kept.
    local _, _, info2 = p:run(function() error("kaboom") end)
    expect.eq(info2.result, nil)
    local _, _, info3 = p:run(function() return nil, "refused" end)
    expect.eq(info3.result, nil)
    -- A passthrough keeps it too.
    local q = virtual { base = "none", classify = "http" }
    local _, r, i = q:run(function() return { status = 502, body = "bad gateway" } end)
    expect.eq(r, "attempts exhausted"); expect.eq(i.result.body, "bad gateway")
  end)
  it("a classifier function's retry_after is honoured", function()
    local p, d = virtual { base = "none", attempts = 2, backoff = { kind = "constant", base = 0.01, max = 10 },
                           classify = function(_, err) if err then return "throttled", 4 end return "ok" end }
    local t0 = d.now()
    p:run(flaky(1, "slow down", "ok"))
    expect.near((d.now() - t0) / 1e9, 4, 1e-6, "waited 4 s")
  end)
  it("a classifier function's retry_after may carry a unit", function()
    local p, d = virtual { base = "none", attempts = 2, backoff = { kind = "constant", base = "10ms", max = "10s" },
                           classify = function(_, err) if err then return "throttled", "1500ms" end return "ok" end }
    local t0 = d.now()
    p:run(flaky(1, "slow down", "ok"))
    expect.near((d.now() - t0) / 1e9, 1.5, 1e-6, "waited 1.5 s")
  end)
  it("a modelled dependency's throttled answer carries its retry-after", function()
    local dep = require "nresrun.dep"
    local p, d = virtual { base = "none", attempts = 2,
                           backoff = { kind = "constant", base = 0.01, max = 10 } }
    local inst = dep.instantiate(dep.model{ throttle_every = 2, retry_after = 3 },
                                 d.sleep, function() return 0 end)
    inst.call()                      -- the first request passes; the next is throttled
    local t0 = d.now()
    expect.eq(p:run(inst.call), true)
    expect.near((d.now() - t0) / 1e9, 3, 1e-6, "waited the retry-after")
    expect.eq(inst.requests, 3)
  end)
  it("a classifier returning nonsense ends the call \"callback error\", not a throw nor \"canceled\"", function()
    local p = virtual { base = "none", classify = function() return "maybe" end }
    local res, reason, info = p:run(function() return 1 end)
    expect.eq(res, nil); expect.eq(reason, "callback error"); expect.eq(info.callback, "classify")
    expect.eq(info.error,
      'nres: classify returned "maybe"; expected "ok", "transient", "throttled", "permanent" or "canceled"')
    local q = virtual { base = "trivial", classify = function() return "maybe" end }
    local _, r2 = q:run(function() return 1 end)
    expect.eq(r2, "callback error")
    expect.eq(q:stats().stops["callback error"], 1, "counted as its own stop")
    expect.eq(q:stats().stops.canceled, 0, "not as canceled")
  end)
end)

describe("isolation by hand", function()
  it("p:isolate() stops every call until p:reset(), both counted", function()
    local p = virtual { base = "default" }
    expect.eq(p:run(function() return 1 end), 1)
    p:isolate()
    local res, reason = p:run(function() return 1 end)
    expect.eq(res, nil); expect.eq(reason, "circuit open")
    expect.eq(p:stats().breaker, "isolated")
    p:reset()
    expect.eq(p:run(function() return 2 end), 2)
    local s = p:stats()
    expect.eq(s.breaker, "closed"); expect.eq(s.isolations, 1); expect.eq(s.resets, 1)
    local q = virtual { base = "trivial" }
    local ok, err = pcall(function() q:isolate() end)
    expect.eq(ok, false)
    expect.truthy(tostring(err):find("has no breaker", 1, true), tostring(err))
    expect.truthy(tostring(err):find("run_spec", 1, true), "names the caller: " .. tostring(err))
  end)
end)

describe("fallback and admit", function()
  it("a fallback's value is returned as a success and marked in info", function()
    local got_reason, got_err
    local p = virtual { base = "trivial", fallback = function(reason, err)
      got_reason, got_err = reason, err; return "cached" end }
    local res, err, info = p:run(function() return nil, "down" end)
    expect.eq(res, "cached"); expect.eq(err, nil)
    expect.truthy(info.fallback, "info.fallback")
    expect.eq(got_reason, "attempts exhausted"); expect.eq(got_err, "down")
    expect.eq(p:stats().fallbacks, 1)
  end)
  it("admit refuses attempts without calling fn, spending no budget", function()
    local p = virtual { base = "none", attempts = 2, budget = { ratio = 0.1, min_per_sec = 0, capacity = 1 },
                        admit = function(attempt) return false, "maintenance" end }
    local fn, calls = flaky(0, nil, 1)
    local _, reason = p:run(fn)
    expect.eq(reason, "maintenance")
    expect.eq(calls(), 0)
    expect.near(p:stats().budget, 1, 1e-9, "budget untouched")
  end)
end)

describe("presets", function()
  it("are data, and a name alone is the preset", function()
    local t = nres.preset("http")
    expect.eq(t.classify, "http"); expect.eq(t.attempts, 3); expect.eq(t.base, nil)
    expect.eq(nres.policy("none").cp.attempts, 1)
  end)
  it("extend with base, merging sections key by key", function()
    local p = nres.policy { base = "http", attempts = 5, backoff = { base = 0.2 } }
    expect.eq(p.cp.attempts, 5)
    expect.eq(tonumber(p.cp.backoff.base), 0.2e9)
    expect.eq(tonumber(p.cp.backoff.max), 30e9)   -- kept from default
    expect.eq(p.spec.classify, "http")
  end)
  it("false turns a preset's feature off", function()
    local p = nres.policy { breaker = false, budget = false }
    expect.truthy(p.cp.breaker == nil and p.cp.budget == nil, "off")
  end)
end)

describe("named budgets", function()
  it("are shared by every policy that names them", function()
    nres.budget("orders", { ratio = 0.1, min_per_sec = 0, capacity = 2 })
    local p1 = virtual { base = "none", attempts = 3, budget = "orders" }
    local p2 = virtual { base = "none", attempts = 3, budget = "orders" }
    expect.truthy(p1.cp.budget == p2.cp.budget, "same budget")
    local _, r1 = p1:run(function() return nil, "x" end)   -- spends both tokens
    expect.eq(r1, "attempts exhausted")
    local _, r2, info = p2:run(function() return nil, "x" end)
    expect.eq(r2, "budget exhausted"); expect.eq(info.attempts, 1)
  end)
end)

describe("determinism", function()
  local function waits(seed)
    local p, d = virtual { base = "none", attempts = 6, seed = seed,
                           backoff = { kind = "exponential", base = 0.1, max = 10, jitter = "full" } }
    local list = {}
    p.on_event = function(kind, a) if kind == "wait" then list[#list + 1] = a end end
    p:run(function() return nil, "x" end)
    return table.concat(list, ",")
  end
  it("the same seed gives the same jittered waits", function()
    expect.eq(waits(42), waits(42))
  end)
  it("another seed gives others", function()
    expect.truthy(waits(42) ~= waits(43), "different")
  end)
end)

describe("deadline propagation", function()
  it("nres.remaining() is the attempt's time left, nil outside", function()
    local p = nres.policy { base = "none", deadline = 2, attempt_timeout = 0.3 }
    local left = p:run(function() return nres.remaining() end)
    expect.truthy(left > 0.29 and left <= 0.3, "remaining " .. tostring(left))
    expect.eq(nres.remaining(), nil)
    expect.eq(nres.policy("trivial"):run(function() return nres.remaining() end), nil)
  end)
end)

describe("the runtime's clock", function()
  -- The blocking driver's clock is the runtime's (runtime_clock): p:run
  -- lets C read it in its steps instead of calling driver.now.
  it("a call on it is timed by that clock", function()
    local C = require("nres.cdef").C
    local p = nres.policy { base = "trivial", deadline = 5 }
    expect.eq(p.driver.runtime_clock, true)
    expect.eq(p.timeless, false)
    local t0 = C.nres_step_now() / 1e9
    local r, reason, info = p:run(function() return nil, "down" end)
    local t1 = C.nres_step_now() / 1e9
    expect.eq(r, nil); expect.eq(reason, "attempts exhausted"); expect.eq(#info.log, 3)
    local last = t0
    for _, e in ipairs(info.log) do
      expect.truthy(e.start >= last and e.finish >= e.start and e.finish <= t1,
                    string.format("attempt %d: %.9f..%.9f within %.9f..%.9f",
                                  e.attempt, e.start, e.finish, t0, t1))
      last = e.finish
    end
  end)
  it("a driver that says runtime_clock must mean it", function()
    local p = nres.policy { base = "trivial", deadline = 5 }
    local d = nres.driver.virtual(5e9)
    d.runtime_clock = "yes"
    expect.error(function() p:with_driver(d) end,
      "bad argument #1 to 'with_driver' (runtime_clock: expected true, false or nil, got \"yes\")")
    -- A virtual clock that claims to be the runtime's: p:run would time
    -- the call by one clock and sleep on the other.
    d.runtime_clock = true
    expect.error(function() p:with_driver(d) end,
      "bad argument #1 to 'with_driver' (runtime_clock: true needs now = the runtime's clock"
      .. " (nres.driver.blocking.now); this driver's now is another function: drop runtime_clock)")
    d.runtime_clock = false
    expect.eq(p:with_driver(d).driver, d)
    local b = { now = nres.driver.blocking.now, sleep = nres.driver.blocking.sleep, runtime_clock = true }
    expect.eq(p:with_driver(b).driver, b)
  end)
  it("a driver off it is asked the time", function()
    local asked = 0
    local d = nres.driver.virtual(5e9)
    local now = d.now
    d.now = function() asked = asked + 1; return now() end
    local p = nres.policy { base = "trivial", deadline = 5 }:with_driver(d)
    local r, reason, info = p:run(function() d.advance(1e6); return nil, "down" end)
    expect.eq(reason, "attempts exhausted")
    expect.eq(info.log[1].start, 5); expect.eq(info.log[3].finish, 5.003)
    expect.truthy(asked >= 4, "asked " .. asked)
  end)
end)

describe("the library", function()
  it("reports every path tried when it cannot be found", function()
    local cmd = "cd " .. os.getenv("PWD") .. " && NRES_LIB=/nonexistent/libnres.so "
      .. "LUA_CPATH='/nowhere/?.so' luajit -e 'require \"nres\"' 2>&1"
    local out = io.popen(cmd):read("*a")
    expect.truthy(out:find("cannot load libnres; tried:", 1, true), out)
    expect.truthy(out:find("/nonexistent/libnres.so", 1, true), out)
    expect.truthy(out:find("/nowhere/libnres.so", 1, true), out)
    expect.truthy(out:find("/usr/local/lib/libnres.so", 1, true), out)
  end)
end)

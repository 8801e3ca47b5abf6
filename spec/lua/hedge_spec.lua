-- SPDX-License-Identifier: MIT
-- hedge_spec.lua - overload control in p:run, on virtual clocks. Hedging on
-- nresrun's scheduler: the first good answer wins and the losers never run
-- again, hedges spend the retry budget and stop when it is empty, hedging
-- stops while the failure ratio is high, a hedge answering first is counted
-- as won, the quantile delay waits for samples, and drivers that cannot run
-- attempts side by side refuse a hedged policy by name. Criticality
-- (p:with): class-ordered refusals of the limiter and the budget, per-class
-- counters, no garbage. The gradient limiter: its options, and its limit
-- against a modelled dependency.
local nres = require "nres"
local sched = require "nresrun.sched"

local MS = 1e6

-- A policy on a fresh virtual scheduler, and the scheduler.
local function on_sched(spec)
  local s = sched.new { virtual = true }
  return nres.policy(spec):with_driver(s.driver), s
end

-- fn for p:run: attempt k sleeps plan[k].ms on the scheduler, then returns
-- plan[k].ok or nil, "boom". `log` records starts and ends (virtual ms).
local function dependency(s, plan)
  local log = { started = 0, ended = {}, t0 = s.now() }
  local fn = function()
    log.started = log.started + 1
    local k = log.started
    local step = plan[k] or plan[#plan]
    s.driver.sleep(step.ms * MS)
    log.ended[#log.ended + 1] = { k = k, at = (s.now() - log.t0) / MS }
    if step.ok == false then return nil, "boom" end
    return step.ok or ("answer " .. k)
  end
  return fn, log
end

-- Run one p:run as a worker; its results land in `out`.
local function call(p, s, fn, out)
  s:spawn(function()
    local r, reason, info = p:run(fn)
    out.r, out.reason, out.info, out.at = r, reason, info, (s.now() - 1e9) / MS
  end)
end

local HEDGE = { base = "trivial", attempts = 3, hedge = { at = 0.05, max = 2 },
                budget = { capacity = 10, min_per_sec = 0, ratio = 0.1 } }

describe("hedging on nresrun's scheduler", function()
  it("a hedge that answers first wins; the loser never runs again", function()
    local p, s = on_sched(HEDGE)
    local fn, log = dependency(s, { { ms = 1000 }, { ms = 10 } })
    local out = {}
    call(p, s, fn, out)
    s:run_until(1e9 + 5000 * MS)
    expect.eq(out.r, "answer 2")
    expect.near(out.at, 60, 1e-6, "answered at the hedge's end (50 + 10 ms)")
    expect.eq(log.started, 2)
    expect.eq(#log.ended, 1, "the first attempt was killed: it never came back from its wait")
    local st = p:stats()
    expect.eq(st.hedges, 1); expect.eq(st.hedges_won, 1); expect.eq(st.hedges_canceled, 1)
    expect.eq(st.attempts, 2, "the winner and the abandoned loser")
    expect.eq(s:waiting(), 0, "nothing left on the scheduler")
  end)

  it("no hedge when the first attempt answers before the hedge delay", function()
    local p, s = on_sched(HEDGE)
    local fn, log = dependency(s, { { ms = 30 } })
    local out = {}
    call(p, s, fn, out)
    s:run_until(1e9 + 5000 * MS)
    expect.eq(out.r, "answer 1"); expect.near(out.at, 30, 1e-6)
    expect.eq(log.started, 1); expect.eq(p:stats().hedges, 0)
  end)

  it("the first attempt still wins if it ends before the hedge", function()
    local p, s = on_sched(HEDGE)
    local fn, log = dependency(s, { { ms = 80 }, { ms = 100 } })
    local out = {}
    call(p, s, fn, out)
    s:run_until(1e9 + 5000 * MS)
    expect.eq(out.r, "answer 1"); expect.near(out.at, 80, 1e-6)
    expect.eq(#log.ended, 1, "the hedge (started at 50 ms) was killed at 80 ms")
    local st = p:stats()
    expect.eq(st.hedges, 1); expect.eq(st.hedges_won, 0); expect.eq(st.hedges_canceled, 1)
  end)

  it("a failed attempt leaves the other running; the call waits for it", function()
    local p, s = on_sched(HEDGE)
    local fn = dependency(s, { { ms = 100, ok = false }, { ms = 200 } })
    local out = {}
    call(p, s, fn, out)
    s:run_until(1e9 + 5000 * MS)
    expect.eq(out.r, "answer 2"); expect.near(out.at, 250, 1e-6)
    expect.eq(out.info, nil)
  end)

  it("each hedge spends one budget token; an empty budget stops hedging", function()
    local spec = { base = "trivial", attempts = 3, hedge = { at = 0.05, max = 2 },
                   budget = { capacity = 2, min_per_sec = 0, ratio = 0.1 } }
    local p, s = on_sched(spec)
    local fn, log = dependency(s, { { ms = 1000 } })    -- every attempt slow
    for i = 1, 3 do
      local out = {}
      call(p, s, fn, out)
      s:run_until(s.now() + 5000 * MS)
      expect.eq(out.r, i == 1 and "answer 1" or (i == 2 and "answer 3" or "answer 5"))
    end
    local st = p:stats()
    expect.eq(st.hedges, 2, "two tokens, two hedges, then none")
    expect.eq(log.started, 5)
    expect.truthy(st.budget < 1, "budget spent: " .. tostring(st.budget))
  end)

  it("hedging stops while the failure ratio is high (suppress)", function()
    local spec = { base = "trivial", attempts = 2,   -- a hedge is an attempt
                   hedge = { at = 0.05, max = 2, min_samples = 5, suppress = 0.5 } }
    local p, s = on_sched(spec)
    local fails = dependency(s, { { ms = 1, ok = false } })
    for _ = 1, 10 do
      local out = {}
      call(p, s, fails, out)
      s:run_until(s.now() + 10 * MS)
      expect.eq(out.reason, "attempts exhausted")
    end
    local slow, log = dependency(s, { { ms = 1000 } })
    local out = {}
    call(p, s, slow, out)
    s:run_until(s.now() + 5000 * MS)
    expect.eq(out.r, "answer 1"); expect.eq(log.started, 1)
    expect.eq(p:stats().hedges, 0, "suppressed")
    -- The same slow call on a fresh policy, with no failures seen, hedges.
    local q, s2 = on_sched(spec)
    local slow2, log2 = dependency(s2, { { ms = 1000 } })
    local out2 = {}
    call(q, s2, slow2, out2)
    s2:run_until(s2.now() + 5000 * MS)
    expect.eq(log2.started, 2); expect.eq(q:stats().hedges, 1)
  end)

  it("a quantile delay waits for min_samples, then hedges at the live p90", function()
    local spec = { base = "trivial", attempts = 2,
                   hedge = { at = "p90", max = 2, min_samples = 20 } }
    local p, s = on_sched(spec)
    local fn, log = dependency(s, { { ms = 10 } })
    for _ = 1, 19 do
      local out = {}
      call(p, s, fn, out)
      s:run_until(s.now() + 100 * MS)
    end
    local slow, slog = dependency(s, { { ms = 500 }, { ms = 10 } })
    local out = {}
    call(p, s, slow, out)
    s:run_until(s.now() + 5000 * MS)
    expect.eq(slog.started, 1, "19 samples: no hedge yet")
    local fn2 = dependency(s, { { ms = 10 } })
    local o = {}
    call(p, s, fn2, o)
    s:run_until(s.now() + 1100 * MS)                 -- the estimator refreshes
    local slow2, slog2 = dependency(s, { { ms = 500 }, { ms = 10 } })
    local out2 = {}
    local t0 = s.now()
    call(p, s, slow2, out2)
    s:run_until(s.now() + 5000 * MS)
    expect.eq(slog2.started, 2, "hedged once the estimator has its samples")
    expect.eq(out2.r, "answer 2")
    local took = out2.at - (t0 - 1e9) / MS
    expect.truthy(took > 10 and took < 40, "hedge at about the p90 (10 ms) + 10 ms, took " .. took)
    expect.eq(log.started, 19)
  end)

  it("many hedged calls in flight on one scheduler stay independent", function()
    local p, s = on_sched { base = "trivial", attempts = 3, hedge = { at = 0.05, max = 2 },
                            budget = { capacity = 100, min_per_sec = 0, ratio = 0.1 } }
    local outs = {}
    for i = 1, 50 do
      local plan = i % 2 == 0 and { { ms = 1000 }, { ms = 5 } } or { { ms = 20 } }
      local fn = dependency(s, plan)
      outs[i] = {}
      call(p, s, fn, outs[i])
    end
    s:run_until(s.now() + 5000 * MS)
    for i = 1, 50 do
      expect.eq(outs[i].r, i % 2 == 0 and "answer 2" or "answer 1")
      expect.near(outs[i].at, i % 2 == 0 and 55 or 20, 1e-6)
    end
    local st = p:stats()
    expect.eq(st.hedges, 25); expect.eq(st.hedges_won, 25); expect.eq(st.hedges_canceled, 25)
  end)

  it("a throwing attempt is a failure; the hedge still answers", function()
    local p, s = on_sched(HEDGE)
    local n = 0
    local fn = function()
      n = n + 1
      if n == 1 then s.driver.sleep(100 * MS); error("kaput") end
      s.driver.sleep(70 * MS)
      return "ok"
    end
    local out = {}
    call(p, s, fn, out)
    s:run_until(s.now() + 5000 * MS)
    expect.eq(out.r, "ok"); expect.near(out.at, 120, 1e-6)
  end)

  -- Attempt records are reused (one per slot, per call record): a loser
  -- that a broken driver failed to kill must not answer the next call
  -- that reuses its record.
  it("a loser whose kill failed cannot answer the call that reuses its record", function()
    local s = sched.new { virtual = true }
    local d = {}
    for k, v in pairs(s.driver) do d[k] = v end
    d.kill = function() error("this driver cannot kill") end
    local p = nres.policy(HEDGE):with_driver(d)
    local first = { { ms = 100, ok = "late loser" }, { ms = 10 } }   -- the hedge wins at 60 ms
    local second = { { ms = 50, ok = "second" } }                     -- from 70 to 120 ms
    local n1, n2 = 0, 0
    local out1, out2 = {}, {}
    call(p, s, function()
      n1 = n1 + 1
      local step = first[n1]
      s.driver.sleep(step.ms * MS)
      return step.ok or "hedge"
    end, out1)
    s:run_until(1e9 + 70 * MS)
    expect.eq(out1.r, "hedge")
    call(p, s, function()
      n2 = n2 + 1
      s.driver.sleep(second[1].ms * MS)
      return second[1].ok
    end, out2)
    s:run_until(1e9 + 5000 * MS)
    expect.eq(out2.r, "second", "answered by its own attempt, not the first call's loser")
    expect.near(out2.at, 120, 1e-6)
  end)
end)

describe("drivers that cannot hedge", function()
  it("the blocking and virtual drivers refuse a hedged policy, by name", function()
    local p = nres.policy(HEDGE)
    local ran = false
    local fine, err = pcall(p.run, p, function() ran = true end)
    expect.eq(fine, false); expect.eq(ran, false)
    expect.truthy(tostring(err):find("nres: this policy hedges, and the blocking driver cannot run"
      .. " attempts side by side (it needs spawn, wait_any and kill", 1, true), err)
    local v = p:with_driver(nres.driver.virtual())
    fine, err = pcall(v.run, v, function() ran = true end)
    expect.eq(fine, false); expect.eq(ran, false)
    expect.truthy(tostring(err):find("the virtual driver cannot run attempts side by side", 1, true), err)
  end)
  it("a policy without hedge runs on them as before", function()
    local p = nres.policy { base = "trivial" }:with_driver(nres.driver.virtual())
    expect.eq(p:run(function() return 7 end), 7)
  end)
end)

describe("criticality (p:with)", function()
  local function hold(s, ms) return function() s.driver.sleep(ms * MS); return "ok" end end

  it("sheddable calls are refused first; critical ones get headroom", function()
    local p, s = on_sched { base = "trivial", attempts = 1,
                            limiter = { concurrency = 10, reserve = 0.2 } }
    local shed, crit = p:with { criticality = "sheddable" }, p:with { criticality = "critical" }
    expect.eq(p:with { criticality = "sheddable" }, shed, "made once per class")
    expect.eq(p:with { criticality = "default" }, p)
    local outs = {}
    local function go(q)
      local o = {}
      outs[#outs + 1] = o
      call(q, s, hold(s, 100), o)
      return o
    end
    for _ = 1, 9 do go(shed) end          -- 8 admitted, the 9th refused
    for _ = 1, 3 do go(p) end             -- 2 admitted (10 in all), 1 refused
    for _ = 1, 3 do go(crit) end          -- 2 admitted (12 in all), 1 refused
    s:run_until(s.now() + 1000 * MS)
    local refused = {}
    for _, o in ipairs(outs) do
      if o.r == nil then
        expect.eq(o.reason, "rate limited")
        refused[o.info.criticality] = (refused[o.info.criticality] or 0) + 1
      end
    end
    expect.eq(refused.sheddable, 1); expect.eq(refused.default, 1); expect.eq(refused.critical, 1)
    local st = p:stats()
    expect.eq(st.refused_by_class.sheddable, 1)
    expect.eq(st.refused_by_class.default, 1)
    expect.eq(st.refused_by_class.critical, 1)
    expect.eq(st.limiter.refused_by_class.sheddable, 1)
  end)

  it("a sheddable call stops retrying once the budget is half spent", function()
    local spec = { base = "trivial", attempts = 4,
                   budget = { capacity = 4, min_per_sec = 0, ratio = 0.1 } }
    local p = nres.policy(spec):with_driver(nres.driver.virtual())
    local shed = p:with { criticality = "sheddable" }
    local n = 0
    local fail = function() n = n + 1; return nil, "down" end
    local _, reason = p:run(fail)               -- 3 retries: 1 token left
    expect.eq(reason, "attempts exhausted"); expect.eq(n, 4)
    n = 0
    local _, r2, info = shed:run(fail)
    expect.eq(r2, "budget exhausted"); expect.eq(n, 1); expect.eq(info.criticality, "sheddable")
    n = 0
    local _, r3 = p:run(fail)                   -- the default class takes the last
    expect.eq(n, 2); expect.eq(r3, "budget exhausted")
  end)

  it("misuse names the field", function()
    local p = nres.policy { base = "trivial" }
    expect.error(function() p:with { criticality = "vip" } end,
      'bad argument #1 to \'with\' (criticality: expected one of "critical", "critical_plus", "default",'
      .. ' "sheddable", "sheddable_plus" (any case; the names of X-Criticality), got "vip")')
    -- The names X-Criticality takes, exactly (one parser, nres_class_parse).
    local gw_class = require("nres.ngx.config").criticality
    for _, name in ipairs { "critical", "CRITICAL_PLUS", "Sheddable", "sheddable_plus", "default" } do
      local cls = gw_class(name)
      expect.eq(p:with { criticality = name }.class, cls, name)
    end
    expect.error(function() p:with { class = "critical" } end,
      "bad argument #1 to 'with' (class: unknown field; valid: criticality)")
  end)

  it("p:run on a class copy makes no garbage", function()
    local p = nres.policy({ base = "trivial" }):with_driver(nres.driver.virtual())
    local q = p:with { criticality = "critical" }
    local function f(i) return i end
    for i = 1, 2000 do q:run(f, i) end
    collectgarbage("collect")
    collectgarbage("stop")
    local kb0 = collectgarbage("count")
    for i = 1, 100000 do q:run(f, i) end
    local kb1 = collectgarbage("count")
    collectgarbage("restart")
    -- One table per call would be several MB; allow the JIT's own traces.
    expect.truthy(kb1 - kb0 < 64, "garbage: " .. (kb1 - kb0) .. " KB over 100k calls")
  end)
end)

describe("limiter.adaptive.kind = gradient", function()
  it("builds, validates, and reports its limit", function()
    local p = nres.policy { base = "trivial",
      limiter = { concurrency = 8, adaptive = { kind = "gradient", min = 2, max = 100,
                                                tolerance = 2, headroom = 3 } } }
    expect.eq(p.cp.bulkhead.config.adaptive, 2)
    expect.eq(p.cp.bulkhead.config.tolerance, 2)
    expect.eq(p.cp.bulkhead.config.headroom, 3)
    expect.eq(p:stats().limiter.limit, 8)
    local fine, err = pcall(nres.policy, { limiter = { concurrency = 8,
      adaptive = { kind = "gradient", target = 0.1 } } })
    expect.eq(fine, false)
    expect.truthy(tostring(err):find('limiter.adaptive.target: has no effect with kind = "gradient"', 1, true), err)
    fine, err = pcall(nres.policy, { limiter = { concurrency = 8,
      adaptive = { kind = "gradient", tolerance = 0.5 } } })
    expect.eq(fine, false)
    expect.truthy(tostring(err):find("limiter.adaptive.tolerance", 1, true), err)
  end)

  it("shrinks the limit when latency climbs under load (scheduler, virtual clock)", function()
    local p, s = on_sched { base = "trivial", attempts = 1,
      limiter = { concurrency = 20, adaptive = { kind = "gradient", min = 1, max = 200 } } }
    -- A dependency of 10 servers: latency grows with the work in flight.
    local busy = 0
    local function dep()
      busy = busy + 1
      local f = busy > 10 and busy / 10 or 1
      s.driver.sleep(10 * MS * f)
      busy = busy - 1
      return true
    end
    local function loop()
      while s.now() < 1e9 + 20e9 do
        if p:run(dep) == nil then s.driver.sleep(MS) end   -- refused: back off
      end
    end
    for _ = 1, 40 do s:spawn(loop) end        -- 40 closed-loop workers
    s:run_until(1e9 + 20e9)
    local st = p:stats()
    -- The knee of 10 servers with tolerance 1.5 and headroom 4: about 19.
    expect.truthy(st.limiter.limit >= 12 and st.limiter.limit <= 25, "limit " .. st.limiter.limit)
    expect.truthy(st.limiter.baseline_ms < 12, "baseline " .. st.limiter.baseline_ms)
  end)
end)

-- SPDX-License-Identifier: MIT
-- bench/overload.lua - overload control on the simulator's virtual clock:
-- hedging against a heavy tail, gradient vs AIMD vs no concurrency limit
-- through a capacity drop, and criticality-ordered shedding. Deterministic
-- (fixed seeds), minutes of simulated time in seconds of real time.
--
--   LUA_PATH='lua/?.lua;;' NRES_LIB=build/libnres.so luajit bench/overload.lua [OUT_DIR] [--only N]
--
-- Writes OUT_DIR/overload-<n>-*.svg and OUT_DIR/overload-sim.md (default
-- bench/results) and prints the figures with the targets of issue 15:
--   1. lognormal latency (median 20 ms, sigma 1): hedging at the live p95
--      cuts the p99 of successful calls, for <= 10 % extra requests;
--   2. the dependency's capacity halves for 60 s: the gradient limiter keeps
--      the p99 of admitted calls <= 2x the no-load p99; AIMD and no limiter
--      beside it;
--   3. the same drop with 20 % critical / 50 % default / 30 % sheddable
--      calls: critical success >= 99 %, sheddable absorbs the shedding.
-- Each run is an open loop (Poisson arrivals, one coroutine per call) on an
-- nresrun.sched virtual scheduler, whose driver can run attempts side by
-- side (hedging), against nresrun.sim.dep's exact FIFO queueing model.
local nres = require "nres"
local ffi = require "ffi"
local sched = require "nresrun.sched"
local simdep = require "nresrun.sim.dep"
local hist_mod = require "nresrun.hist"
local svg = require "nresrun.svg"

local format, floor, log = string.format, math.floor, math.log
local C = require("nres.cdef").C

local args = { ... }
local OUT, ONLY = "bench/results", nil
do
  local i = 1
  while i <= #args do
    if args[i] == "--only" then ONLY = tonumber(args[i + 1]); i = i + 2
    else OUT = args[i]; i = i + 1 end
  end
end

local function q_ms(h, n, q)
  if n == 0 then return false end
  return hist_mod.quantile(h, n, q) / 1e6
end

-- One open-loop run. o = {
--   policy = policy object, or classes = { { name, share, policy }, ... },
--   dependency = nresrun.sim.dep table, rate = arrivals/s, duration = s,
--   seed = n, grace = s (default 30), window = { from, to } (s: the
--   admitted-p99 window, e.g. the capacity drop) }
-- Returns totals per class and per-second series.
local function simulate(o)
  local problems = simdep.check(o.dependency, "dependency", o.duration)
  assert(#problems == 0, table.concat(problems, "\n"))
  local s = sched.new { virtual = true }
  local now = s.now
  local t0 = now()
  local D = o.duration
  local stop_at = t0 + D * 1e9
  local inst = simdep.instantiate(o.dependency, simdep.rng(o.seed * 7919 + 104729), now,
                                  s.driver.sleep, t0)
  local dep_call = inst.call
  local remaining = nres.remaining
  local function client() return dep_call(remaining()) end
  if o.stall then   -- a share of requests stalls (GC pause, slow replica)
    local stall_rand, p, extra, sleep = simdep.rng(o.seed + 17), o.stall.p, o.stall.s * 1e9,
                                        s.driver.sleep
    client = function()
      if stall_rand() < p then sleep(extra) end
      return dep_call(remaining())
    end
  end

  local classes = o.classes or { { name = "all", share = 1, policy = o.policy } }
  local pols, cum = {}, {}
  local acc = 0
  for i, c in ipairs(classes) do
    pols[i] = c.policy:with_driver(s.driver)
    acc = acc + c.share
    cum[i] = acc
  end
  local bulkhead = pols[1].cp.bulkhead ~= nil and pols[1].cp.bulkhead or nil

  local T, S = {}, { limit = {}, p99 = {}, ok = {}, refused = {}, inflight = {} }
  for i, c in ipairs(classes) do
    T[i] = { name = c.name, arrivals = 0, ok = 0, refused = 0, failed = 0, reasons = {},
             hist = hist_mod.new(), n = 0, whist = hist_mod.new(), wn = 0 }
    S.refused[i] = {}
  end
  for sec = 1, D do
    S.limit[sec], S.p99[sec], S.ok[sec], S.inflight[sec] = false, false, 0, 0
    for i = 1, #classes do S.refused[i][sec] = 0 end
  end
  local sec_hist, sec_n, cur_sec = hist_mod.new(), 0, 1
  local wfrom = o.window and t0 + o.window[1] * 1e9 or nil
  local wto = o.window and t0 + o.window[2] * 1e9 or nil
  local inflight = 0

  local function flush(sec)
    if sec >= 1 and sec <= D then S.p99[sec] = q_ms(sec_hist, sec_n, 0.99) end
    ffi.fill(sec_hist, hist_mod.BUCKETS * 4)
    sec_n = 0
  end

  local function worker(ci, started)
    local r, reason = pols[ci]:run(client)
    local t = now()
    inflight = inflight - 1
    local c = T[ci]
    local sec = floor((t - t0) / 1e9) + 1
    if r ~= nil then
      local k = C.nres_hist_index(t - started)
      c.ok = c.ok + 1
      c.hist[k] = c.hist[k] + 1
      c.n = c.n + 1
      if wfrom and started >= wfrom and started < wto then
        c.whist[k] = c.whist[k] + 1
        c.wn = c.wn + 1
      end
      if sec <= D then
        if sec ~= cur_sec then flush(cur_sec); cur_sec = sec end
        sec_hist[k] = sec_hist[k] + 1
        sec_n = sec_n + 1
        S.ok[sec] = S.ok[sec] + 1
      end
    else
      c.reasons[reason] = (c.reasons[reason] or 0) + 1
      if reason == "rate limited" or reason == "budget exhausted" or reason == "circuit open" then
        c.refused = c.refused + 1
        if sec <= D then S.refused[ci][sec] = S.refused[ci][sec] + 1 end
      else
        c.failed = c.failed + 1
      end
    end
  end

  local arrival = simdep.rng(o.seed)
  local interval = 1e9 / o.rate
  s:spawn(function()
    local t = t0
    while true do
      t = t - interval * log(arrival())
      if t >= stop_at then return end
      coroutine.yield(t)
      local u, ci = arrival(), #classes
      for i = 1, #classes do if u <= cum[i] then ci = i break end end
      T[ci].arrivals = T[ci].arrivals + 1
      inflight = inflight + 1
      s:spawn(worker, ci, t)
    end
  end)
  s:spawn(function()
    for sec = 1, D do
      coroutine.yield(t0 + sec * 1e9 - 1)
      S.inflight[sec] = inflight
      if bulkhead then S.limit[sec] = tonumber(C.nres_bulkhead_limit(bulkhead)) end
    end
  end)
  s:run_until(stop_at + (o.grace or 30) * 1e9)
  flush(cur_sec)

  local all = { arrivals = 0, ok = 0, refused = 0, failed = 0, hist = hist_mod.new(), n = 0,
                whist = hist_mod.new(), wn = 0 }
  for _, c in ipairs(T) do
    all.arrivals, all.ok = all.arrivals + c.arrivals, all.ok + c.ok
    all.refused, all.failed = all.refused + c.refused, all.failed + c.failed
    for k = 0, hist_mod.BUCKETS - 1 do
      all.hist[k] = all.hist[k] + c.hist[k]
      all.whist[k] = all.whist[k] + c.whist[k]
    end
    all.n, all.wn = all.n + c.n, all.wn + c.wn
    c.success = c.arrivals > 0 and c.ok / c.arrivals or 0
  end
  all.success = all.arrivals > 0 and all.ok / all.arrivals or 0
  all.p50 = q_ms(all.hist, all.n, 0.5)
  all.p99 = q_ms(all.hist, all.n, 0.99)
  all.wp99 = q_ms(all.whist, all.wn, 0.99)
  all.dep_requests = inst.requests
  local st = pols[1]:stats()
  all.stats = st
  -- Extra requests: attempts sent per call beyond the first (the model's
  -- own count would miss a stalled attempt killed before it reached it).
  all.extra = all.arrivals > 0 and st.attempts / all.arrivals - 1 or 0
  return { classes = T, all = all, series = S, duration = D }
end

local md = { "# bench/overload.lua - overload control on the virtual clock", "",
             "Generated by `luajit bench/overload.lua` (deterministic: fixed seeds).", "" }
local function say(fmt, ...)
  local line = format(fmt, ...)
  io.stdout:write(line, "\n")
  md[#md + 1] = line
end
local verdicts = {}
local function target(name, ok, detail)
  verdicts[#verdicts + 1] = { name = name, ok = ok, detail = detail }
  say("- target %s: **%s** (%s)", name, ok and "met" or "MISSED", detail)
end

-- ------------------------------------------------------------ scenario 1

local function scenario1()
  say("## 1. Hedging against a heavy tail")
  say("")
  say("Dependency: lognormal latency, median 20 ms, sigma 1 (p95 = 104 ms, p99 = 205 ms),"
      .. " no capacity limit; 200 arrivals/s for 300 s; seed 1.")
  say("Policies: one attempt, no hedge; hedge at the live p95 (max 2 in flight), default"
      .. " retry budget (0.1 per success, floor 3/s).")
  say("")
  local dep = { latency = { lognormal = { 0.02, 1 } } }
  local base = { base = "trivial", attempts = 1, deadline = 10 }
  local hedged = { base = "trivial", attempts = 2, deadline = 10,
                   hedge = { at = "p95", max = 2, min_samples = 100 },
                   budget = { ratio = 0.1, min_per_sec = 3, capacity = 30 } }
  local runs = {
    { label = "no hedge", spec = base },
    { label = "hedge at p95", spec = hedged },
  }
  say("| policy | success | p50 ms | p99 ms | attempts / call | hedges sent | won | canceled |")
  say("|---|---|---|---|---|---|---|---|")
  for _, r in ipairs(runs) do
    r.res = simulate { policy = nres.policy(r.spec), dependency = dep, rate = 200,
                       duration = 300, seed = 1 }
    local a = r.res.all
    say("| %s | %.2f %% | %.1f | %.1f | %.3f | %d | %d | %d |", r.label, 100 * a.success, a.p50,
        a.p99, 1 + a.extra, a.stats.hedges, a.stats.hedges_won, a.stats.hedges_canceled)
  end
  local cut = runs[1].res.all.p99 / runs[2].res.all.p99
  local extra = runs[2].res.all.extra
  say("")
  target("1a p99 cut >= 3x", cut >= 3, format("%.2fx: %.1f -> %.1f ms", cut, runs[1].res.all.p99,
         runs[2].res.all.p99))
  target("1b extra requests <= 10 %", extra <= 0.10, format("%.1f %%", 100 * extra))
  say("")
  say("Bound: a call hedged at delay d never ends before min(X1, d), so with d the p95 of"
      .. " X more than 5 %% of calls take at least d: p99(hedged) >= p95(X), and the cut is"
      .. " at most p99/p95 = exp((2.326 - 1.645) x sigma) = %.2fx for independent lognormal"
      .. " latencies with sigma 1, whatever the driver. The >= 3x target needs a tail that is"
      .. " not in every request's own distribution, as below.", math.exp((2.326 - 1.645) * 1))
  say("")
  say("Variant 1-stall: the same dependency, and 2 %% of requests stall 1 s more (a GC pause,"
      .. " a slow replica: the p99 is in the stall):")
  say("")
  say("| policy | success | p50 ms | p99 ms | attempts / call | hedges sent | won | canceled |")
  say("|---|---|---|---|---|---|---|---|")
  local stalled = {}
  for i, r in ipairs(runs) do
    local res = simulate { policy = nres.policy(r.spec), dependency = dep, rate = 200,
                           duration = 300, seed = 1, stall = { p = 0.02, s = 1 } }
    stalled[i] = { label = r.label .. ", 2 % stalls", res = res }
    local a = res.all
    say("| %s | %.2f %% | %.1f | %.1f | %.3f | %d | %d | %d |", stalled[i].label, 100 * a.success,
        a.p50, a.p99, 1 + a.extra, a.stats.hedges, a.stats.hedges_won, a.stats.hedges_canceled)
  end
  local cut2 = stalled[1].res.all.p99 / stalled[2].res.all.p99
  say("")
  target("1-stall p99 cut >= 3x", cut2 >= 3, format("%.2fx: %.1f -> %.1f ms", cut2,
         stalled[1].res.all.p99, stalled[2].res.all.p99))
  target("1-stall extra requests <= 10 %", stalled[2].res.all.extra <= 0.10,
         format("%.1f %%", 100 * stalled[2].res.all.extra))
  say("")
  runs[3], runs[4] = stalled[1], stalled[2]
  return runs
end

-- ------------------------------------------------------------ plots

local COLORS = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e" }

local function write_svg(name, chart)
  local f = assert(io.open(OUT .. "/" .. name, "w"))
  f:write(svg.chart(chart))
  f:close()
  say("Plot: `bench/results/%s`", name)
end

local function series_max(list, floor_v)
  local m = floor_v or 0
  for _, vs in ipairs(list) do
    for _, v in ipairs(vs) do if v and v > m then m = v end end
  end
  return m
end

local function plot1(runs)
  local series, legend = {}, {}
  for i, r in ipairs(runs) do
    series[i] = { values = r.res.series.p99, color = COLORS[i], dash = i > 2 and "4 3" or nil }
    legend[i] = { label = r.label, color = COLORS[i], dash = i > 2 and "4 3" or nil }
  end
  write_svg("overload-1-hedging.svg", {
    title = "overload 1: hedging at the live p95, lognormal(20 ms, sigma 1), 200/s; and with 2 % stalls of 1 s",
    x = { min = 0, max = runs[1].res.duration, label = "simulated seconds" }, legend = legend,
    panels = { { title = "p99 of successful calls, per second (ms)", height = 220,
                 y = { min = 0, max = 1500, label = "ms" },
                 series = series } },
  })
end

-- ------------------------------------------------------------ scenario 2

local DROP = { from = 60, to = 120 }
local DEP2 = {
  latency = { lognormal = { 0.02, 0.25 } },
  capacity = { concurrency = 32, queue = 4000 },
  phases = { { name = "capacity halved", from = DROP.from, to = DROP.to, capacity = 0.5 } },
}

local function scenario2()
  say("## 2. Capacity halved for 60 s: gradient vs AIMD vs no limiter")
  say("")
  say("Dependency: lognormal latency (median 20 ms, sigma 0.25), 32 servers and a FIFO"
      .. " queue of 4000; from 60 s to 120 s only 16 servers (capacity ~780/s). 1000"
      .. " arrivals/s for 180 s (65 %% of full capacity, 130 %% of the halved one); seed 2."
      .. " One attempt per call (the limiters are the subject), deadline 10 s.")
  say("")
  local base = { base = "trivial", attempts = 1, deadline = 10 }
  local function with(l)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    t.limiter = l
    return t
  end
  local runs = {
    { label = "no limiter", spec = base },
    { label = "AIMD (target 40 ms)", spec = with { concurrency = 32,
        adaptive = { kind = "aimd", min = 1, max = 500, target = 0.04, decrease = 0.9 } } },
    { label = "gradient", spec = with { concurrency = 32,
        adaptive = { kind = "gradient", min = 1, max = 500 } } },
  }
  -- No-load p99: the no-limiter run before the drop.
  for _, r in ipairs(runs) do
    r.res = simulate { policy = nres.policy(r.spec), dependency = DEP2, rate = 1000,
                       duration = 180, seed = 2, window = { DROP.from, DROP.to } }
    r.pre = simulate { policy = nres.policy(r.spec), dependency = DEP2, rate = 1000,
                       duration = 180, seed = 2, window = { 5, DROP.from } }
  end
  local noload = runs[1].pre.all.wp99
  say("No-load p99 (calls started 5-60 s, no limiter): %.1f ms; target: admitted p99 in the drop <= %.1f ms.",
      noload, 2 * noload)
  say("")
  say("| policy | success | refused | admitted p99 in the drop (ms) | x no-load | overall p99 (ms) | limit in the drop (min-max) |")
  say("|---|---|---|---|---|---|---|")
  for _, r in ipairs(runs) do
    local a = r.res.all
    local lo, hi = math.huge, 0
    for sec = DROP.from + 1, DROP.to do
      local l = r.res.series.limit[sec]
      if l then lo = math.min(lo, l); hi = math.max(hi, l) end
    end
    say("| %s | %.1f %% | %.1f %% | %.1f | %.2f | %.1f | %s |", r.label, 100 * a.success,
        100 * a.refused / a.arrivals, a.wp99 or 0, (a.wp99 or 0) / noload, a.p99 or 0,
        hi > 0 and format("%d-%d", lo, hi) or "-")
  end
  say("")
  local g = runs[3].res.all
  target("2 gradient admitted p99 <= 2x no-load p99", g.wp99 <= 2 * noload,
         format("%.1f ms = %.2fx of %.1f ms", g.wp99, g.wp99 / noload, noload))
  say("")
  local p99s, limits, legend = {}, {}, {}
  for i, r in ipairs(runs) do
    p99s[i] = { values = r.res.series.p99, color = COLORS[i] }
    if i > 1 then limits[#limits + 1] = { values = r.res.series.limit, color = COLORS[i] } end
    legend[i] = { label = r.label, color = COLORS[i] }
  end
  legend[#legend + 1] = { label = "capacity halved", color = "#999", band = true }
  local band = { { from = DROP.from, to = DROP.to, color = "#999", opacity = 0.2 } }
  write_svg("overload-2-gradient.svg", {
    title = "overload 2: capacity halved 60-120 s, 1000 arrivals/s",
    x = { min = 0, max = 180, label = "simulated seconds" }, legend = legend,
    panels = {
      { title = "p99 of successful calls per second (ms, log-free; no limiter clipped)",
        height = 200, y = { min = 0, max = 4 * noload, label = "ms" }, bands = band,
        series = p99s },
      { title = "concurrency limit", height = 160,
        y = { min = 0, max = svg.nice_max(series_max({ runs[2].res.series.limit,
                                                        runs[3].res.series.limit }, 1)),
              label = "limit" }, bands = band, series = limits },
    },
  })
  return runs
end

-- ------------------------------------------------------------ scenario 3

local function scenario3()
  say("## 3. The same drop with criticality: 20 %% critical, 50 %% default, 30 %% sheddable")
  say("")
  say("Same dependency and load as 2; the gradient limiter with reserve = 0.2 (sheddable"
      .. " calls stop at 0.8 x limit, critical ones may go to 1.2 x limit), the retry"
      .. " budget on, 2 attempts; seed 3.")
  say("")
  local spec = { base = "trivial", attempts = 2, deadline = 10,
                 budget = { ratio = 0.1, min_per_sec = 5 },
                 limiter = { concurrency = 32, reserve = 0.2,
                             adaptive = { kind = "gradient", min = 1, max = 500 } } }
  local p = nres.policy(spec)
  local res = simulate { classes = {
      { name = "critical", share = 0.2, policy = p:with { criticality = "critical" } },
      { name = "default", share = 0.5, policy = p },
      { name = "sheddable", share = 0.3, policy = p:with { criticality = "sheddable" } } },
    dependency = DEP2, rate = 1000, duration = 180, seed = 3, window = { DROP.from, DROP.to } }
  say("| class | arrivals | success | refused | failed | share of all refusals |")
  say("|---|---|---|---|---|---|")
  local total_refused = res.all.refused
  for _, c in ipairs(res.classes) do
    say("| %s | %d | %.2f %% | %d | %d | %.1f %% |", c.name, c.arrivals, 100 * c.success,
        c.refused, c.failed, total_refused > 0 and 100 * c.refused / total_refused or 0)
  end
  say("")
  local crit, shed = res.classes[1], res.classes[3]
  target("3a critical success >= 99 %", crit.success >= 0.99, format("%.2f %%", 100 * crit.success))
  target("3b sheddable absorbs the shedding", shed.refused >= 0.5 * total_refused,
         format("%.1f %% of refusals are sheddable calls", total_refused > 0 and 100 * shed.refused / total_refused or 0))
  say("")
  local legend, series = {}, {}
  for i, c in ipairs(res.classes) do
    legend[i] = { label = c.name .. " refused/s", color = COLORS[i] }
    series[i] = { values = res.series.refused[i], color = COLORS[i] }
  end
  legend[#legend + 1] = { label = "capacity halved", color = "#999", band = true }
  local band = { { from = DROP.from, to = DROP.to, color = "#999", opacity = 0.2 } }
  write_svg("overload-3-criticality.svg", {
    title = "overload 3: capacity halved 60-120 s, 20 % critical / 50 % default / 30 % sheddable",
    x = { min = 0, max = 180, label = "simulated seconds" }, legend = legend,
    panels = {
      { title = "refusals per second, by class", height = 200,
        y = { min = 0, max = svg.nice_max(series_max(
          { res.series.refused[1], res.series.refused[2], res.series.refused[3] }, 1)),
          label = "per second" }, bands = band, series = series },
      { title = "concurrency limit", height = 140,
        y = { min = 0, max = svg.nice_max(series_max({ res.series.limit }, 1)), label = "limit" },
        bands = band, series = { { values = res.series.limit, color = COLORS[5] } } },
    },
  })
  return res
end

local function scenario1_plotted()
  local runs = scenario1()
  plot1(runs)
end

local scenarios = { scenario1_plotted, scenario2, scenario3 }
for i, fn in ipairs(scenarios) do
  if not ONLY or ONLY == i then fn() end
end
local f = assert(io.open(OUT .. "/overload-sim.md", "w"))
f:write(table.concat(md, "\n"), "\n")
f:close()

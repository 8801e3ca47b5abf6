-- SPDX-License-Identifier: MIT
-- nresrun.sim.run: one policy against one modelled dependency on a virtual clock.
--
-- The policy, the dependency (nresrun.sim.dep), an open-loop pacer and a
-- once-a-second ticker are coroutines on one nresrun.sched scheduler with a
-- virtual clock: nothing sleeps, time jumps to the next wake-up, so a
-- simulated five minutes take a fraction of a second and the same seed
-- replays the same run. Separate from nresrun.sim (the DSL and reports)
-- because this is the part that must stay fast: per operation it allocates
-- nothing (workers are reused, the latency histogram is one cdata reused
-- every second), and per second it fills preallocated series.
--
-- Every arrival ends in exactly one outcome (ok, failed, rejected by the
-- policy, shed for want of a worker, or unfinished when the grace period
-- after the run ends), and the run checks that identity.
local ffi = require "ffi"
local C = require("nres.cdef").C
local sched_mod = require "nresrun.sched"
local simdep = require "nresrun.sim.dep"
local run_mod = require "nres.run"

local co_yield = coroutine.yield
local floor, log, ffi_fill, ffi_string = math.floor, math.log, ffi.fill, ffi.string
local hist_index = C.nres_hist_index
local breaker_state, budget_level = C.nres_breaker_state, C.nres_budget_level
local remaining = run_mod.remaining
local real_now = require("nres.driver").blocking.now
local host = require "nresrun.host"

local _M = { _VERSION = "0.1.0" }

local hist_mod = require "nresrun.hist"
local BUCKETS = hist_mod.BUCKETS
local REJECTIONS = { ["circuit open"] = true, ["budget exhausted"] = true,
                     ["rate limited"] = true, ["draining"] = true,
                     ["throttled locally"] = true }
local STATE_NAMES = {}
for i = 0, 3 do STATE_NAMES[i] = ffi_string(C.nres_breaker_state_name(i)) end
_M.state_names = STATE_NAMES

local function quantile(hist, total, q)
  local ns = hist_mod.quantile(hist, total, q)
  return ns and ns / 1e6 or false
end

local function zeros(n)
  local t = {}
  for i = 1, n do t[i] = 0 end
  return t
end

-- cfg: { policy = a fresh policy object (its state is this run's),
--        dependency = a checked simdep table, rate = arrivals/s,
--        arrivals = "poisson" | "fixed", duration = s, seed = n,
--        max_inflight = n, grace = s, slo_s = s (optional: successes
--        within it count as goodput, totals.good and series.good),
--        ok_quantile = q (optional: totals.ok_quantile_ms),
--        times = { s, ... } (optional: the arrivals, in seconds from the
--        start, ascending, instead of rate and arrivals: a replayed trace),
--        trace = function(sent_s, latency_s, ok, reason) (optional: told
--        every call's outcome, to record a trace) }
-- Returns { series = { per-second arrays }, transitions, totals }.
function _M.run(cfg)
  local D = cfg.duration_s
  local s = sched_mod.new{ virtual = true }
  local now = s.now
  local t0 = now()
  local stop_at = t0 + D * 1e9
  local p = cfg.policy:with_driver(s.driver)
  local cp = p.cp
  local breaker = cp.breaker ~= nil and cp.breaker or nil
  local budget = cp.budget ~= nil and cp.budget or nil
  local bulkhead = cp.bulkhead ~= nil and cp.bulkhead or nil   -- its limit, per second
  local budget_cap = budget and tonumber(budget.capacity) / 1e6 or nil

  local seed = cfg.seed
  local arrival_rand = simdep.rng(seed)
  local dep_rand = simdep.rng(seed * 7919 + 104729)
  local inst = simdep.instantiate(cfg.dependency, dep_rand, now, s.driver.sleep, t0)
  local dep_call = inst.call
  local function client(_) return dep_call(remaining()) end

  -- Per-second series, 1..D (completions after the end count in totals).
  local S = {
    arrivals = zeros(D), ok = zeros(D), failed = zeros(D), rejected = zeros(D),
    shed = zeros(D), dep_requests = zeros(D), dep_refused = zeros(D),
    dep_failed = zeros(D), dep_timeouts = zeros(D), dep_queue_max = zeros(D),
    dep_busy = zeros(D), inflight = zeros(D),
    success_ratio = zeros(D), p50_ms = zeros(D), p99_ms = zeros(D),
    budget = budget and zeros(D) or nil, budget_min = budget and zeros(D) or nil,
    limit = bulkhead and zeros(D) or nil,
    breaker = breaker and {} or nil,
    good = cfg.slo_s and zeros(D) or nil,
  }
  local T = { arrivals = 0, ok = 0, good = cfg.slo_s and 0 or nil, failed = 0, rejected = 0, shed = 0,
              unfinished = 0, failed_by = {}, rejected_by = {}, budget_min = budget_cap, breaker_opens = 0,
              breaker_open_s = 0 }
  local transitions = {}

  local hist = hist_mod.new()
  local hist_n, hist_sec = 0, 1
  local okhist = hist_mod.new()   -- successful calls over the whole run
  local function flush(sec)
    if sec >= 1 and sec <= D then
      S.p50_ms[sec] = quantile(hist, hist_n, 0.5)
      S.p99_ms[sec] = quantile(hist, hist_n, 0.99)
    end
    ffi_fill(hist, BUCKETS * 4)
    hist_n = 0
  end

  -- Breaker and budget, observed at every event: a transition is dated
  -- at the first event that sees it (the next arrival at the latest).
  local state, state_since = 0, t0
  local bmin = budget_cap
  local function observe(t)
    if breaker then
      local st = breaker_state(breaker, t)
      if st ~= state then
        transitions[#transitions + 1] = { t = (t - t0) / 1e9, from = STATE_NAMES[state], to = STATE_NAMES[st] }
        if st == 1 then T.breaker_opens = T.breaker_opens + 1 end
        if state == 1 then T.breaker_open_s = T.breaker_open_s + (t - state_since) / 1e9 end
        state, state_since = st, t
      end
    end
    if budget then
      local level = budget_level(budget, t)
      if level < bmin then bmin = level end
    end
  end

  local function sec_of(t)
    local i = floor((t - t0) / 1e9) + 1
    return i <= D and i or D + 1
  end

  local slo_ns = cfg.slo_s and cfg.slo_s * 1e9 or -1
  local good = S.good
  local on_call = cfg.trace
  local function record(started, t, ok, reason)
    observe(t)
    if on_call then on_call((started - t0) / 1e9, (t - started) / 1e9, ok, reason) end
    local sec = sec_of(t)
    if sec ~= hist_sec then flush(hist_sec); hist_sec = sec end
    local i = hist_index(t - started)
    hist[i] = hist[i] + 1
    hist_n = hist_n + 1
    if ok then
      T.ok = T.ok + 1
      okhist[i] = okhist[i] + 1
      if sec <= D then S.ok[sec] = S.ok[sec] + 1 end
      if t - started <= slo_ns then
        T.good = T.good + 1
        if sec <= D then good[sec] = good[sec] + 1 end
      end
    elseif REJECTIONS[reason] then
      T.rejected = T.rejected + 1
      T.rejected_by[reason] = (T.rejected_by[reason] or 0) + 1
      if sec <= D then S.rejected[sec] = S.rejected[sec] + 1 end
    else
      reason = reason or "?"
      T.failed = T.failed + 1
      T.failed_by[reason] = (T.failed_by[reason] or 0) + 1
      if sec <= D then S.failed[sec] = S.failed[sec] + 1 end
    end
  end

  -- Dependency counters are read per second as differences.
  local last = { requests = 0, refused = 0, failed = 0, timeouts = 0 }

  -- Open loop: workers are reused (nresrun.sched's workers).
  local workers = s:workers(function(started, n)
    local r, reason = p:run(client, n)
    record(started, now(), r ~= nil, reason)
  end, cfg.max_inflight)

  local poisson = cfg.arrivals ~= "fixed"
  local interval = cfg.rate and 1e9 / cfg.rate
  local times = cfg.times
  local function pacer()
    local t, n = t0, 0
    while true do
      if times then
        local at = times[n + 1]
        if not at then return end
        t = t0 + at * 1e9
      elseif poisson then
        t = t - interval * log(arrival_rand())
      else
        t = t0 + n * interval
      end
      if t >= stop_at then return end
      co_yield(t)
      n = n + 1
      observe(t)
      local sec = sec_of(t)
      T.arrivals = T.arrivals + 1
      S.arrivals[sec] = S.arrivals[sec] + 1
      if not workers.start(t, n) then
        T.shed = T.shed + 1
        S.shed[sec] = S.shed[sec] + 1
      end
    end
  end

  local function ticker()
    for sec = 1, D do
      local t = t0 + sec * 1e9
      co_yield(t)
      observe(t)
      S.dep_requests[sec] = inst.requests - last.requests
      S.dep_refused[sec] = inst.refused - last.refused
      S.dep_failed[sec] = inst.failed - last.failed
      S.dep_timeouts[sec] = inst.timeouts - last.timeouts
      last.requests, last.refused, last.failed, last.timeouts =
        inst.requests, inst.refused, inst.failed, inst.timeouts
      S.dep_queue_max[sec] = inst.queue_max
      inst.queue_max = inst.queued(t)
      S.dep_busy[sec] = inst.busy(t)
      S.inflight[sec] = workers.busy()
      if bulkhead then S.limit[sec] = tonumber(C.nres_bulkhead_limit(bulkhead)) end
      if budget then
        local level = budget_level(budget, t)
        S.budget[sec] = level
        S.budget_min[sec] = bmin
        if bmin < T.budget_min then T.budget_min = bmin end
        bmin = level
      end
      if breaker then S.breaker[sec] = STATE_NAMES[state] end
    end
  end

  local real0 = real_now()
  local mem0 = collectgarbage("count")
  local bytes0 = host.available and host.lua_bytes() or nil
  s:spawn(ticker)
  s:spawn(pacer)
  s:run_until(stop_at + cfg.grace_s * 1e9)
  flush(hist_sec)
  observe(now())
  if state == 1 then T.breaker_open_s = T.breaker_open_s + (now() - state_since) / 1e9 end

  for sec = 1, D do
    local done = S.ok[sec] + S.failed[sec] + S.rejected[sec]
    S.success_ratio[sec] = done > 0 and S.ok[sec] / done or false
  end

  T.unfinished = workers.busy()
  T.identity_ok = T.arrivals == T.ok + T.failed + T.rejected + T.shed + T.unfinished
  T.dep_requests, T.dep_refused = inst.requests, inst.refused
  T.dep_failed, T.dep_timeouts = inst.failed, inst.timeouts
  T.dep_requests_per_op = T.arrivals > 0 and inst.requests / T.arrivals or 0
  T.success_ratio = T.arrivals > 0 and T.ok / T.arrivals or 0
  if T.good then T.goodput = T.arrivals > 0 and T.good / T.arrivals or 0 end
  T.ok_p50_ms = quantile(okhist, T.ok, 0.5)
  T.ok_p99_ms = quantile(okhist, T.ok, 0.99)
  if cfg.ok_quantile then T.ok_quantile_ms = quantile(okhist, T.ok, cfg.ok_quantile) end
  T.budget_capacity = budget_cap
  T.final_breaker = breaker and STATE_NAMES[breaker_state(breaker, now())] or nil
  T.final_budget = budget and budget_level(budget, now()) or nil
  if cp.telemetry == 1 then
    local st = p:stats()
    T.attempts, T.retries = st.attempts, st.retries
    T.hedges, T.hedges_won, T.hedges_canceled = st.hedges, st.hedges_won, st.hedges_canceled
    T.refused_by_class = st.refused_by_class
  end
  T.simulated_s = (now() - t0) / 1e9
  T.real_s = (real_now() - real0) / 1e9
  T.lua_kb_after = collectgarbage("count")
  T.lua_kb_before = mem0
  if bytes0 then T.lua_bytes_per_op = (host.lua_bytes() - bytes0) / math.max(1, T.arrivals) end
  return { series = S, transitions = transitions, totals = T }
end

return _M

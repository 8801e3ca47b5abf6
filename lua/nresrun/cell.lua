-- SPDX-License-Identifier: MIT
-- nresrun.cell: run one cell of a scenario in this process and measure it.
--
-- A cell is one arm against one dependency under one load, for a warm-up
-- then a measured window. How the operations are driven is the load
-- kind's (nresrun.load: workers, open_rate, threads); this file holds what
-- every kind shares - the arm's operation, the tally of outcomes and
-- latencies, the collector's governor, and finish(), which turns a kind's
-- counters into the metrics every report reads. Every arrival in the
-- window ends in exactly one outcome - success, failure or rejection - and
-- the cell checks that identity.
--
-- An http dependency (nresrun.dep.http) is the dependency server in a child
-- process (`nresrun serve`): started and reset before the cell, stopped
-- after it (also when the cell fails), its /stats read at the window's
-- start and end for the requests it counted. Its arms run the C HTTP
-- client on the cell's event loop (nresrun.http); a success is a response
-- classified OK.
local C = require("nres.cdef").C
local dep = require "nresrun.dep"
local sched_mod = require "nresrun.sched"
local host = require "nresrun.host"
local policy_mod = require "nres.policy"
local hist_mod = require "nresrun.hist"

local load = require "nresrun.load"

local hist_index = C.nres_hist_index

local _M = { _VERSION = "0.1.0" }

local REJECTIONS = { ["circuit open"] = true, ["budget exhausted"] = true,
                     ["rate limited"] = true, ["draining"] = true,
                     ["throttled locally"] = true }

-- The operation of an arm against the HTTP dependency server.
local function make_http_op(cell, inst)
  local http = require "nresrun.http"
  local fetch, url, method, flags = http.fetch, inst.url, inst.method, inst.flags
  local a = cell.arm_spec
  if a.kind == "raw" or a.kind == "naive" then
    local cp = http.c_policy("none", 2)
    local attempts = a.kind == "naive" and a.attempts or 1
    return function()
      local reason
      for _ = 1, attempts do
        local code, why = fetch(url, method, cp, flags)
        if code then return true end
        reason = why
      end
      return false, attempts > 1 and "attempts exhausted" or reason
    end, nil
  end
  local cp, p = http.c_policy(a, 2)
  return function()
    local code, reason = fetch(url, method, cp, flags)
    if code then return true end
    return false, reason
  end, p
end

-- The operation an arm performs: returns true, or false and a reason.
-- `shared` (optional): an nres_policy_t * built elsewhere, whose C state
-- the policy then uses (the threads of a threads cell).
local function make_op(cell, inst, driver, shared)
  if cell.dependency.kind == "http" then return make_http_op(cell, inst) end
  local a, call = cell.arm_spec, inst.call
  if a.kind == "raw" then
    return function(n)
      if call(n) ~= nil then return true end
      return false, "failed"
    end, nil
  end
  if a.kind == "naive" then
    local attempts = a.attempts
    return function(n)
      for _ = 1, attempts do
        if call(n) ~= nil then return true end
      end
      return false, "attempts exhausted"
    end, nil
  end
  local p = type(a) == "string" and policy_mod.new(a) or a
  if shared then p = p:on_state(shared) end
  p = p:with_driver(driver)
  return function(n)
    local r, reason = p:run(call, n)
    if r ~= nil then return true end
    return false, reason
  end, p
end

local function quantile(hist, total, q)
  return hist_mod.quantile(hist, total, q) or 0
end

-- The latency fields of a cell's metrics: all `ops`, admitted work, and
-- (single-thread cells: `ok`) successes alone, which a dependency's own
-- fast refusals (admitted failures) cannot pull down.
local function latencies(out, hist, admitted, ops, m, ok)
  out.p50_us, out.p90_us = quantile(hist, ops, 0.5) / 1e3, quantile(hist, ops, 0.9) / 1e3
  out.p99_us, out.max_us = quantile(hist, ops, 0.99) / 1e3, m.max_ns / 1e3
  out.admitted = m.admitted
  out.p50_admitted_us = quantile(admitted, m.admitted, 0.5) / 1e3
  out.p99_admitted_us = quantile(admitted, m.admitted, 0.99) / 1e3
  if ok then out.p99_ok_us = quantile(ok, m.successes, 0.99) / 1e3 end
  return out
end

-- The collector, run by the cell at LuaJIT's default pacing (pause 200 %)
-- and timed; only the time inside [measure_at, stop_at) counts.
local function gc_governor(now, measure_at, stop_at)
  collectgarbage("collect")
  collectgarbage("stop")
  local g = { ns = 0, cycles = 0, max_ns = 0 }
  local live = collectgarbage("count")
  local threshold = math.max(2 * live, live + 64)   -- KiB
  function g.check()
    if collectgarbage("count") < threshold then return end
    local t1 = now()
    collectgarbage("collect")
    local t2 = now()
    live = collectgarbage("count")
    threshold = math.max(2 * live, live + 64)
    local a = t1 > measure_at and t1 or measure_at
    local b = t2 < stop_at and t2 or stop_at
    if b > a then
      g.ns = g.ns + (b - a)
      g.cycles = g.cycles + 1
      if t2 - t1 > g.max_ns then g.max_ns = t2 - t1 end
    end
  end
  function g.stop() collectgarbage("restart") end
  return g
end

-- Resident set size now, in KiB (peak_rss_kb is the peak).
local function rss_kb()
  local f = io.open("/proc/self/statm", "r")
  if not f then return 0 end
  local _, resident = f:read("*n", "*n")
  f:close()
  return (resident or 0) * 4
end

-- What the operations of one Lua state came to: the window's outcomes and
-- latencies (all, and of admitted work: not rejected), and every operation
-- that ended (`all`, warm-up included). on_first() runs at the window's
-- first outcome (the counters' snapshot).
local function new_tally(measure_at, gc, on_first)
  local t = {
    hist = hist_mod.new(), admitted = hist_mod.new(), ok = hist_mod.new(), all = 0, first = false,
    m = { arrivals = 0, successes = 0, failures = 0, rejections = 0, shed = 0,
          missed = 0, lag_max = 0, lag_sum = 0, max_ns = 0, admitted = 0 },
    failed_by = {}, rejected_by = {},
  }
  local m, hist, admitted, okh = t.m, t.hist, t.admitted, t.ok
  local failed_by, rejected_by = t.failed_by, t.rejected_by
  local gc_n = 0
  -- One finished operation that started at `started` (scheduled time for
  -- the open loop) and ended at `ended`.
  function t.record(started, ended, ok, reason)
    t.all = t.all + 1
    gc_n = gc_n + 1
    if gc_n >= 64 then gc_n = 0; gc.check() end
    if started < measure_at then return end
    if not t.first then t.first = true; if on_first then on_first() end end
    m.arrivals = m.arrivals + 1
    local rejected = false
    if ok then
      m.successes = m.successes + 1
    elseif REJECTIONS[reason] then
      rejected = true
      m.rejections = m.rejections + 1
      rejected_by[reason] = (rejected_by[reason] or 0) + 1
    else
      m.failures = m.failures + 1
      failed_by[reason] = (failed_by[reason] or 0) + 1
    end
    local ns = ended - started
    if ns < 0 then ns = 0 end
    if ns > m.max_ns then m.max_ns = ns end
    local i = hist_index(ns)
    hist[i] = hist[i] + 1
    if ok then okh[i] = okh[i] + 1 end
    if not rejected then
      m.admitted = m.admitted + 1
      admitted[i] = admitted[i] + 1
    end
  end
  function t.shed()
    if not t.first then t.first = true; if on_first then on_first() end end
    m.shed = m.shed + 1
    m.arrivals = m.arrivals + 1
    m.rejections = m.rejections + 1
    rejected_by.shed = (rejected_by.shed or 0) + 1
  end
  return t
end

-- The rejections of the window by source (the policy's counters: breaker,
-- budget, rate, concurrency, draining), and a bulkhead's limit at the end.
local function rejects_by_source(before, after)
  local out, any = {}, false
  for k, v in pairs(after.rejects or {}) do
    local d = v - ((before.rejects or {})[k] or 0)
    if d > 0 then out[k] = d; any = true end
  end
  return any and out or nil
end

-- Hedges (sent, won, losers canceled) per operation and refusals by
-- criticality class over the window, from the policy's counters, when the
-- policy has them (the HTTP client's counters do not).
local function overload_telemetry(out, before, after, ops)
  if after.hedges and before.hedges and ops > 0 then
    out.hedges_per_op = (after.hedges - before.hedges) / ops
    out.hedges_won_per_op = ((after.hedges_won or 0) - (before.hedges_won or 0)) / ops
    out.hedges_canceled_per_op = ((after.hedges_canceled or 0) - (before.hedges_canceled or 0)) / ops
  end
  local b, a = before.refused_by_class, after.refused_by_class
  if a and b then
    local by, any = {}, false
    for class, n in pairs(a) do
      local d = n - (b[class] or 0)
      if d > 0 then by[class] = d; any = true end
    end
    if any then out.rejected_by_class = by end
  end
end

-- The metrics every load kind reports, from its counters: the outcomes
-- and their identity, completion, latencies, the pacer's lag (0 without
-- one), memory and the collector (its pauses as a share of `lanes` x the
-- window: one per thread), and attempts and retries per operation from the
-- dependency's count when no policy counted them. `out` holds what the
-- kind measured itself (ops_per_sec, dependency_requests_per_op, ...).
-- f: { m, ops, hist, admitted, ok (successes' histogram, optional),
--      failed_by, rejected_by, gc = { ns, cycles, max_ns }, lanes, rss0 }
local function finish(out, cell, f)
  local m = f.m
  out.arrivals, out.successes, out.failures = m.arrivals, m.successes, m.failures
  out.rejections, out.shed, out.missed = m.rejections, m.shed or 0, m.missed or 0
  out.failed_by, out.rejected_by = f.failed_by, f.rejected_by
  out.completion_ratio = m.arrivals > 0 and m.successes / m.arrivals or 0
  out.pacer_lag_max_us = (m.lag_max or 0) / 1e3
  out.pacer_lag_mean_us = (m.arrivals > 0 and cell.rate) and (m.lag_sum or 0) / m.arrivals / 1e3 or 0
  out.peak_rss_kb = host.available and host.peak_rss_kb() or 0
  out.rss_start_kb, out.rss_end_kb = f.rss0, rss_kb()
  out.gc_pause_share = f.gc.ns / ((f.lanes or 1) * cell.window * 1e9)
  out.gc_collections, out.gc_pause_max_us = f.gc.cycles, f.gc.max_ns / 1e3
  latencies(out, f.hist, f.admitted, f.ops, m, f.ok)
  if out.attempts_per_op == nil then
    out.attempts_per_op = out.dependency_requests_per_op
    out.retries_per_op = math.max(0, out.dependency_requests_per_op - 1)
  end
  out.identity_ok = (m.arrivals == m.successes + m.failures + m.rejections)
  return out
end

-- A cell of a kind that runs in this Lua state (srv: the http dependency
-- server, or nil): `drive(x)` runs the operations, with x = { s (the
-- scheduler), op, tally, cell, t0, measure_at, stop_at }; returns the
-- metrics.
local function run_cell(cell, seed, srv, drive)
  math.randomseed(seed or 1)
  local s = sched_mod.new()
  local now = s.now
  local t0 = now()
  local measure_at = t0 + cell.warmup * 1e9
  local stop_at = measure_at + cell.window * 1e9
  local inst
  local http = srv and require "nresrun.http"
  if srv then
    local d = cell.dependency
    inst = { url = srv.base .. d.path, method = d.method or "GET",
             flags = d.idempotent and 1 or 0 }
  else
    inst = dep.instantiate(cell.dependency, s.driver.sleep,
                           function() return (now() - t0) / 1e9 end)
  end
  -- Requests the dependency counted so far (its own view).
  local function dep_requests()
    if srv then return srv:requests() end
    return inst.requests
  end
  -- Executor counters: the policy's, or the HTTP client's (it runs
  -- per-host copies of the policy).
  local function exec_stats(p)
    if srv then return http.counters() end
    return p:stats()
  end
  local op, p = make_op(cell, inst, s.driver)

  local base = nil   -- counters at the start of the window
  local function snapshot()
    base = { requests = dep_requests(), heap = host.available and host.heap_bytes() or 0,
             lua = host.available and host.lua_bytes() or 0,
             stats = p and exec_stats(p) or nil,
             sent = srv and http.counters().sent or nil, rss = rss_kb() }
  end
  local gc = gc_governor(now, measure_at, stop_at)
  local tally = new_tally(measure_at, gc, snapshot)
  local m = tally.m

  drive { s = s, op = op, tally = tally, cell = cell, t0 = t0, measure_at = measure_at, stop_at = stop_at }
  gc.stop()

  if base == nil then snapshot() end
  local window = cell.window
  local ops = m.arrivals - m.shed
  local requests_now = dep_requests()
  local out = {
    ops_per_sec = (m.successes + m.failures + m.rejections - m.shed) / window,
    dependency_requests_per_op = ops > 0 and (requests_now - base.requests) / ops or 0,
  }
  if host.available then
    out.heap_bytes_per_op = ops > 0 and (host.heap_bytes() - base.heap) / ops or 0
    out.gc_bytes_per_op = ops > 0 and (host.lua_bytes() - base.lua) / ops or 0
  end
  if srv then
    local c = http.counters()
    out.dependency_requests = requests_now - base.requests
    out.client_requests_per_op = ops > 0 and (c.sent - base.sent) / ops or 0
    out.connections = c.connects
  end
  if p and base.stats and p.cp.telemetry == 1 then
    local st = exec_stats(p)
    out.attempts_per_op = ops > 0 and (st.attempts - base.stats.attempts) / ops or 0
    out.retries_per_op = ops > 0 and (st.retries - base.stats.retries) / ops or 0
    out.rejected_by_source = rejects_by_source(base.stats, st)
    overload_telemetry(out, base.stats, st, ops)
  end
  if p and p.cp.bulkhead ~= nil then
    out.concurrency_limit_end = tonumber(C.nres_bulkhead_limit(p.cp.bulkhead))
  end
  finish(out, cell, { m = m, ops = ops, hist = tally.hist, admitted = tally.admitted, ok = tally.ok,
                      failed_by = tally.failed_by, rejected_by = tally.rejected_by,
                      gc = gc, lanes = 1, rss0 = base.rss })
  out.trusted = out.identity_ok and m.shed == 0
                and (m.arrivals == 0 or m.missed <= 0.001 * m.arrivals) and ops > 0
  return out
end

-- What the load kinds share (nresrun.load): each kind's run() gets it.
local kit = {
  make_op = make_op, new_tally = new_tally, gc_governor = gc_governor, rss_kb = rss_kb,
  rejects_by_source = rejects_by_source, finish = finish, run_cell = run_cell,
}
_M.kit = kit

-- Run the cell; returns the metrics table. An http dependency's server
-- lives exactly as long as this call, whatever happens in the cell.
function _M.run(cell, seed)
  local kind = load.get(cell.load)
  if cell.dependency.kind ~= "http" then return kind.run(cell, seed, kit) end
  local http = require "nresrun.http"
  local srv, err = http.serve{ flaky_every = cell.dependency.flaky_every }
  if not srv then error(cell.dependency.where .. ": nresrun.dep.http: " .. err, 0) end
  local ok, out = pcall(function()
    srv:reset()
    return kind.run(cell, seed, kit, srv)
  end)
  local closed_ok, close_err = pcall(http.close)
  local stopped, stop_err = srv:stop()
  if not ok then error(out, 0) end
  if not closed_ok then error(close_err, 0) end
  if not stopped then error(stop_err, 0) end
  out.dependency_pid = srv.pid
  return out
end

return _M

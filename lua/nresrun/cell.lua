-- nresrun.cell: run one cell of a scenario in this process and measure it.
--
-- A cell is one arm against one dependency under one load, for a warm-up
-- then a measured window. Closed loop: N worker coroutines call back to
-- back. Open loop: a pacer starts arrivals at the rate on schedule (a reused
-- worker each), latency counts from the scheduled time (no coordinated
-- omission), and the pacer's lag is measured: an arrival started more than
-- 1 ms late is missed, one with no worker left (max_inflight) is shed.
-- Every arrival in the window ends in exactly one outcome - success,
-- failure or rejection - and the cell checks that identity.
--
-- An http dependency (nresrun.dep.http) is the dependency server in a child
-- process (`nresrun serve`): started and reset before the cell, stopped
-- after it (also when the cell fails), its /stats read at the window's
-- start and end for the requests it counted. Its arms run the C HTTP
-- client on the cell's event loop (nresrun.http); a success is a response
-- classified OK.
local ffi = require "ffi"
local C = require("nres.cdef").C
local dep = require "nresrun.dep"
local sched_mod = require "nresrun.sched"
local host = require "nresrun.host"
local policy_mod = require "nres.policy"
local hist_mod = require "nresrun.hist"

local co_yield, co_create, co_resume, co_running =
  coroutine.yield, coroutine.create, coroutine.resume, coroutine.running
local floor, huge = math.floor, math.huge
local hist_index = C.nres_hist_index

local _M = { _VERSION = "0.1.0" }

local MISSED_NS = 1e6
local REJECTIONS = { ["circuit open"] = true, ["budget exhausted"] = true,
                     ["rate limited"] = true, ["draining"] = true }

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
local function make_op(cell, inst, driver)
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

-- The cell (srv: the http dependency server, or nil); returns the metrics.
local function run_cell(cell, seed, srv)
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

  local hist = hist_mod.new()
  local m = { arrivals = 0, successes = 0, failures = 0, rejections = 0, shed = 0,
              missed = 0, lag_max = 0, lag_sum = 0, max_ns = 0 }
  local reasons_failed, reasons_rejected = {}, {}
  local base = nil   -- counters at the start of the window

  local function snapshot()
    base = { requests = dep_requests(), heap = host.available and host.heap_bytes() or 0,
             lua = host.available and host.lua_bytes() or 0,
             stats = p and exec_stats(p) or nil,
             sent = srv and http.counters().sent or nil }
  end

  -- One finished operation that started at `started` (scheduled time for
  -- the open loop) and ended at `ended`.
  local function record(started, ended, ok, reason)
    if started < measure_at then return end
    if base == nil then snapshot() end
    m.arrivals = m.arrivals + 1
    if ok then
      m.successes = m.successes + 1
    elseif REJECTIONS[reason] then
      m.rejections = m.rejections + 1
      reasons_rejected[reason] = (reasons_rejected[reason] or 0) + 1
    else
      m.failures = m.failures + 1
      reasons_failed[reason] = (reasons_failed[reason] or 0) + 1
    end
    local ns = ended - started
    if ns < 0 then ns = 0 end
    if ns > m.max_ns then m.max_ns = ns end
    local i = hist_index(ns)
    hist[i] = hist[i] + 1
  end

  if cell.workers then
    local workers = cell.workers
    local function worker()
      local n = 0
      while true do
        local t = now()
        if t >= stop_at then return end
        local ok, reason = op(n)
        record(t, now(), ok, reason)
        n = n + 1
        if workers > 1 and n % 64 == 0 then co_yield(now()) end
      end
    end
    for _ = 1, workers do s:spawn(worker) end
    s:run_until(stop_at + 10e9)   -- let the calls in flight finish
  else
    local interval = 1e9 / cell.rate
    local idle, nidle, inflight = {}, 0, 0
    local max_inflight = cell.max_inflight
    local IDLE = "idle"
    local function open_worker(scheduled, n)
      local self = co_running()
      while true do
        local ok, reason = op(n)
        record(scheduled, now(), ok, reason)
        inflight = inflight - 1
        nidle = nidle + 1
        idle[nidle] = self
        scheduled, n = co_yield(IDLE)
      end
    end
    local i, spin_ns = 0, 200e3
    while true do
      local t = now()
      local due_at = t0 + i * interval
      if due_at >= stop_at then break end
      if due_at <= t then
        local lag = t - due_at
        if due_at >= measure_at then
          if lag > MISSED_NS then m.missed = m.missed + 1 end
          if lag > m.lag_max then m.lag_max = lag end
          m.lag_sum = m.lag_sum + lag
        end
        if nidle > 0 then
          local co = idle[nidle]
          idle[nidle] = nil
          nidle = nidle - 1
          inflight = inflight + 1
          s:resume(co, due_at, i)
        elseif inflight < max_inflight then
          inflight = inflight + 1
          s:resume(co_create(open_worker), due_at, i)
        elseif due_at >= measure_at then
          if base == nil then snapshot() end
          m.shed = m.shed + 1
          m.arrivals = m.arrivals + 1
          m.rejections = m.rejections + 1
          reasons_rejected.shed = (reasons_rejected.shed or 0) + 1
        end
        i = i + 1
      else
        -- Nothing due: run due timers, else wait (spin when close); with
        -- requests in flight, the wait runs the event loop.
        local next_timer = s.n > 0 and s.at[1] or huge
        if next_timer <= t then
          s:run_due(t)
        else
          local wake = next_timer < due_at and next_timer or due_at
          local wait = wake - t > spin_ns and wake - t - spin_ns / 2 or 0
          if not s:wait_io(wait) and wait > 0 then C.nres_step_sleep(wait) end
        end
      end
    end
    s:run_until(stop_at + 10e9)
    m.unfinished = inflight
    if inflight > 0 then
      m.failures = m.failures + inflight
      m.arrivals = m.arrivals + inflight
      reasons_failed.unfinished = inflight
    end
  end

  if base == nil then snapshot() end
  local window = cell.window
  local ops = m.arrivals - m.shed
  local requests_now = dep_requests()
  local out = {
    ops_per_sec = (m.successes + m.failures + m.rejections - m.shed) / window,
    arrivals = m.arrivals, successes = m.successes, failures = m.failures,
    rejections = m.rejections, shed = m.shed, missed = m.missed,
    failed_by = reasons_failed, rejected_by = reasons_rejected,
    p50_us = quantile(hist, ops, 0.5) / 1e3, p90_us = quantile(hist, ops, 0.9) / 1e3,
    p99_us = quantile(hist, ops, 0.99) / 1e3, max_us = m.max_ns / 1e3,
    dependency_requests_per_op = ops > 0 and (requests_now - base.requests) / ops or 0,
    completion_ratio = m.arrivals > 0 and m.successes / m.arrivals or 0,
    pacer_lag_max_us = m.lag_max / 1e3,
    pacer_lag_mean_us = (m.arrivals > 0 and cell.rate) and m.lag_sum / m.arrivals / 1e3 or 0,
    peak_rss_kb = host.available and host.peak_rss_kb() or 0,
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
  else
    out.attempts_per_op = out.dependency_requests_per_op
    out.retries_per_op = math.max(0, out.dependency_requests_per_op - 1)
  end
  out.identity_ok = (m.arrivals == m.successes + m.failures + m.rejections)
  out.trusted = out.identity_ok and m.shed == 0
                and (m.arrivals == 0 or m.missed <= 0.001 * m.arrivals) and ops > 0
  return out
end

-- Run the cell; returns the metrics table. An http dependency's server
-- lives exactly as long as this call, whatever happens in the cell.
function _M.run(cell, seed)
  if cell.dependency.kind ~= "http" then return run_cell(cell, seed) end
  local http = require "nresrun.http"
  local srv, err = http.serve{ flaky_every = cell.dependency.flaky_every }
  if not srv then error(cell.dependency.where .. ": nresrun.dep.http: " .. err, 0) end
  local ok, out = pcall(function()
    srv:reset()
    return run_cell(cell, seed, srv)
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

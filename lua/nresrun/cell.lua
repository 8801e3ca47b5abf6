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

-- The closed loop: `workers` coroutines calling back to back until stop_at.
local function closed_loop(s, workers, op, record, stop_at)
  local now = s.now
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

  local base = nil   -- counters at the start of the window
  local function snapshot()
    base = { requests = dep_requests(), heap = host.available and host.heap_bytes() or 0,
             lua = host.available and host.lua_bytes() or 0,
             stats = p and exec_stats(p) or nil,
             sent = srv and http.counters().sent or nil, rss = rss_kb() }
  end
  local gc = gc_governor(now, measure_at, stop_at)
  local tally = new_tally(measure_at, gc, snapshot)
  local m, record = tally.m, tally.record

  if cell.workers then
    closed_loop(s, cell.workers, op, record, stop_at)
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
          tally.shed()
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
      tally.failed_by.unfinished = inflight
    end
  end
  gc.stop()

  if base == nil then snapshot() end
  local window = cell.window
  local ops = m.arrivals - m.shed
  local requests_now = dep_requests()
  local hist, admitted = tally.hist, tally.admitted
  local out = {
    ops_per_sec = (m.successes + m.failures + m.rejections - m.shed) / window,
    arrivals = m.arrivals, successes = m.successes, failures = m.failures,
    rejections = m.rejections, shed = m.shed, missed = m.missed,
    failed_by = tally.failed_by, rejected_by = tally.rejected_by,
    dependency_requests_per_op = ops > 0 and (requests_now - base.requests) / ops or 0,
    completion_ratio = m.arrivals > 0 and m.successes / m.arrivals or 0,
    pacer_lag_max_us = m.lag_max / 1e3,
    pacer_lag_mean_us = (m.arrivals > 0 and cell.rate) and m.lag_sum / m.arrivals / 1e3 or 0,
    peak_rss_kb = host.available and host.peak_rss_kb() or 0,
    rss_start_kb = base.rss, rss_end_kb = rss_kb(),
    gc_pause_share = gc.ns / (window * 1e9), gc_collections = gc.cycles,
    gc_pause_max_us = gc.max_ns / 1e3,
  }
  latencies(out, hist, admitted, ops, m, tally.ok)
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
  else
    out.attempts_per_op = out.dependency_requests_per_op
    out.retries_per_op = math.max(0, out.dependency_requests_per_op - 1)
  end
  if p and p.cp.bulkhead ~= nil then
    out.concurrency_limit_end = tonumber(C.nres_bulkhead_limit(p.cp.bulkhead))
  end
  out.identity_ok = (m.arrivals == m.successes + m.failures + m.rejections)
  out.trusted = out.identity_ok and m.shed == 0
                and (m.arrivals == 0 or m.missed <= 0.001 * m.arrivals) and ops > 0
  return out
end

-- ------------------------------------------------------------- threads

-- The scenario file of this cell process: the runner starts it as
-- `nresrun FILE --cell I ...`, so FILE is the first argument.
local function scenario_path()
  local f = io.open("/proc/self/cmdline", "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local args = {}
  for a in s:gmatch("([^%z]*)%z") do args[#args + 1] = a end
  for i = 2, #args do
    if args[i]:sub(1, 2) ~= "--" then return args[i] end
  end
  return nil
end

local THREAD_CHUNK = [[return require("nresrun.cell").thread_main(...)]]
local THREAD_OUT = 256 * 1024

-- Sparse histogram: { index, count, index, count, ... } (JSON-friendly).
local function sparse(hist)
  local out = {}
  for i = 0, hist_mod.BUCKETS - 1 do
    if hist[i] > 0 then out[#out + 1] = i; out[#out + 1] = hist[i] end
  end
  return out
end

-- One thread of a threads cell, in its own Lua state: load the scenario,
-- find the cell by key, run `workers` workers through the shared policy
-- until stop_at, return the tally as JSON.
function _M.thread_main(arg, index)
  local cjson = require "cjson.safe"
  local a = assert(cjson.decode(arg))
  local chunk = assert(loadfile(a.file))
  local sc = chunk()
  local cell
  for _, c in ipairs(sc:cells()) do if c.key == a.key then cell = c end end
  if not cell then error("nresrun: thread " .. index .. ": no cell " .. a.key .. " in " .. a.file, 0) end
  math.randomseed(a.seed + index * 7919)
  local s = sched_mod.new()
  local now = s.now
  local inst = dep.instantiate(cell.dependency, s.driver.sleep,
                               function() return (now() - a.t0) / 1e9 end)
  local op = make_op(cell, inst, s.driver, a.policy ~= 0 and a.policy or nil)
  -- The clocks start together, once every thread is set up: a thread's
  -- set-up can outlast a short window on a loaded machine.
  a.t0 = host.threads_start()
  local measure_at = a.t0 + a.warmup * 1e9
  local stop_at = measure_at + a.window * 1e9
  local gc = gc_governor(now, measure_at, stop_at)
  local lua0
  local tally = new_tally(measure_at, gc, function() lua0 = host.thread_lua_bytes() end)
  closed_loop(s, a.workers, op, tally.record, stop_at)
  gc.stop()
  return cjson.encode {
    m = tally.m, all = tally.all, requests = inst.requests,
    failed_by = tally.failed_by, rejected_by = tally.rejected_by,
    hist = sparse(tally.hist), admitted = sparse(tally.admitted),
    lua_bytes = lua0 and host.thread_lua_bytes() - lua0 or 0,
    gc_ns = gc.ns, gc_cycles = gc.cycles, gc_max_ns = gc.max_ns,
  }
end

-- A threads cell: N threads (threads.c), one shared policy built here.
local function run_threads(cell, seed)
  local cjson = require "cjson.safe"
  if not host.threads_available then
    error("nresrun: a threads load needs the nresrun executable (its threads)", 0)
  end
  local file = scenario_path()
  if not file then error("nresrun: a threads cell cannot find its scenario file", 0) end
  local a, p = cell.arm_spec, nil
  if a.kind ~= "raw" and a.kind ~= "naive" then
    p = type(a) == "string" and policy_mod.new(a) or a   -- owns the shared C state
  end
  local n = cell.threads
  local before = p and p:stats() or nil
  local heap0, rss0 = host.heap_bytes(), rss_kb()
  local arg = cjson.encode {
    file = file, key = cell.key, seed = seed or 1, warmup = cell.warmup,
    window = cell.window, workers = cell.workers_per_thread or 1,
    policy = p and tonumber(ffi.cast("uintptr_t", ffi.cast("nres_policy_t *", p.cp))) or 0,
  }
  local out_buf = ffi.new("char[?]", n * THREAD_OUT)
  local status, len = ffi.new("int[?]", n), ffi.new("size_t[?]", n)
  local rc = ffi.C.nres_host_threads_run(n, THREAD_CHUNK, arg, out_buf, THREAD_OUT, status, len)
  if rc ~= 0 then error("nresrun: cannot run " .. n .. " threads (" .. rc .. ")", 0) end
  local hist, admitted = hist_mod.new(), hist_mod.new()
  local m = { arrivals = 0, successes = 0, failures = 0, rejections = 0, admitted = 0, max_ns = 0 }
  local failed_by, rejected_by = {}, {}
  local all, requests, lua_bytes, gc_ns, gc_cycles, gc_max_ns = 0, 0, 0, 0, 0, 0
  for i = 0, n - 1 do
    local text = ffi.string(out_buf + i * THREAD_OUT, len[i])
    if status[i] ~= 0 then error("nresrun: thread " .. (i + 1) .. ": " .. text, 0) end
    local r = assert(cjson.decode(text))
    for k in pairs(m) do
      if k == "max_ns" then m.max_ns = math.max(m.max_ns, r.m.max_ns)
      else m[k] = m[k] + r.m[k] end
    end
    for k, v in pairs(r.failed_by) do failed_by[k] = (failed_by[k] or 0) + v end
    for k, v in pairs(r.rejected_by) do rejected_by[k] = (rejected_by[k] or 0) + v end
    for j = 1, #r.hist, 2 do hist[r.hist[j]] = hist[r.hist[j]] + r.hist[j + 1] end
    for j = 1, #r.admitted, 2 do admitted[r.admitted[j]] = admitted[r.admitted[j]] + r.admitted[j + 1] end
    all, requests, lua_bytes = all + r.all, requests + r.requests, lua_bytes + r.lua_bytes
    gc_ns, gc_cycles = gc_ns + r.gc_ns, gc_cycles + r.gc_cycles
    gc_max_ns = math.max(gc_max_ns, r.gc_max_ns)
  end
  local window = cell.window
  local ops = m.arrivals
  local out = {
    threads = n, workers_per_thread = cell.workers_per_thread or 1,
    ops_per_sec = ops / window,
    arrivals = m.arrivals, successes = m.successes, failures = m.failures,
    rejections = m.rejections, shed = 0, missed = 0,
    failed_by = failed_by, rejected_by = rejected_by,
    -- Whole run (warm-up included): exact, not cut at the window's edges.
    operations_total = all, dependency_requests_total = requests,
    dependency_requests_per_op = all > 0 and requests / all or 0,
    completion_ratio = m.arrivals > 0 and m.successes / m.arrivals or 0,
    pacer_lag_max_us = 0, pacer_lag_mean_us = 0,
    peak_rss_kb = host.peak_rss_kb(), rss_start_kb = rss0, rss_end_kb = rss_kb(),
    heap_bytes_per_op = all > 0 and (host.heap_bytes() - heap0) / all or 0,
    gc_bytes_per_op = ops > 0 and lua_bytes / ops or 0,
    -- Each thread's collector pauses that thread: the share of the
    -- threads' time.
    gc_pause_share = gc_ns / (n * window * 1e9), gc_collections = gc_cycles,
    gc_pause_max_us = gc_max_ns / 1e3,
  }
  latencies(out, hist, admitted, ops, m)
  out.identity_ok = (m.arrivals == m.successes + m.failures + m.rejections)
  local exact = true
  if p and p.cp.telemetry == 1 then
    local st = p:stats()
    local calls, attempts = st.calls - before.calls, st.attempts - before.attempts
    out.policy_calls, out.policy_attempts = calls, attempts
    out.calls_exact = calls == all
    out.requests_exact = attempts == requests
    exact = out.calls_exact and out.requests_exact
    out.attempts_per_op = all > 0 and attempts / all or 0
    out.retries_per_op = all > 0 and (st.retries - before.retries) / all or 0
    out.rejected_by_source = rejects_by_source(before, st)
  else
    out.attempts_per_op = out.dependency_requests_per_op
    out.retries_per_op = math.max(0, out.dependency_requests_per_op - 1)
  end
  out.trusted = out.identity_ok and exact and ops > 0
  return out
end

-- Run the cell; returns the metrics table. An http dependency's server
-- lives exactly as long as this call, whatever happens in the cell.
function _M.run(cell, seed)
  if cell.threads then return run_threads(cell, seed) end
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

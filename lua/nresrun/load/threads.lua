-- SPDX-License-Identifier: MIT
-- nresrun.load.threads: a closed loop on OS threads of the cell's process.
--
--   load = { threads = { 1, 2, 4, 8 }, workers = 1 }   -- workers per thread: one value
--
-- Each thread has its own Lua state and `workers` worker coroutines
-- (nresrun.load.workers' loop), all calling through one policy built in
-- the cell's own state, so its C state is shared. Not with an http
-- dependency, whose event loop is one thread's. The cell checks that the
-- shared policy saw exactly the threads' operations and requests.
local ffi = require "ffi"
local host = require "nresrun.host"
local hist_mod = require "nresrun.hist"
local workers = require "nresrun.load.workers"

local floor, format = math.floor, string.format

local _M = { name = "threads", loop = "closed", what = "OS threads",
             expected = "a count of OS threads from 1 to 64", result = { "threads" } }

local THREADS_MAX = 64
local MAX = 100000
local THREAD_CHUNK = [[return require("nresrun.load.threads").thread_main(...)]]
local THREAD_OUT = 256 * 1024

function _M.check(v)
  return type(v) == "number" and v >= 1 and v == floor(v) and v < 1e9 and v <= THREADS_MAX
end

-- The workers of each thread: one count, "cores" or "Nx".
_M.companions = {
  workers = function(v, path)
    if type(v) == "table" or not workers.resolve(v) then
      return format('%s.load.workers: with threads, the workers of each thread: one count, "cores" or "Nx", got %s',
                    path, require("nres.schema").describe(v))
    end
    return nil
  end,
}

function _M.dependency(d)
  if type(d) == "table" and d.kind == "http" then
    return "threads: not with an http dependency (its event loop is one thread's)"
  end
  return nil
end

function _M.values(load)
  local v = load.threads
  if type(v) == "table" and v[1] ~= nil then return v end
  return { v }
end

function _M.fields(cell, v, load)
  cell.threads = v
  cell.workers_per_thread = workers.resolve(load.workers or 1)
end

function _M.fit(cell)
  if cell.threads * (cell.workers_per_thread or 1) > MAX then
    return format("%s: %d threads x %d workers cannot fit this machine", cell.key, cell.threads, cell.workers_per_thread or 1)
  end
  return nil
end

function _M.peer()
  return nil, "the peer driver has no threads load (one event loop)"
end

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
  local kit = require("nresrun.cell").kit
  local sched_mod = require "nresrun.sched"
  local dep = require "nresrun.dep"
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
  local op = kit.make_op(cell, inst, s.driver, a.policy ~= 0 and a.policy or nil)
  -- The clocks start together, once every thread is set up: a thread's
  -- set-up can outlast a short window on a loaded machine.
  a.t0 = host.threads_start()
  local measure_at = a.t0 + a.warmup * 1e9
  local stop_at = measure_at + a.window * 1e9
  local gc = kit.gc_governor(now, measure_at, stop_at)
  local lua0
  local tally = kit.new_tally(measure_at, gc, function() lua0 = host.thread_lua_bytes() end)
  workers.closed_loop(s, a.workers, op, tally.record, stop_at)
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
function _M.run(cell, seed, kit)
  local cjson = require "cjson.safe"
  local policy_mod = require "nres.policy"
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
  local heap0, rss0 = host.heap_bytes(), kit.rss_kb()
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
  local ops = m.arrivals
  local out = {
    threads = n, workers_per_thread = cell.workers_per_thread or 1,
    ops_per_sec = ops / cell.window,
    -- Whole run (warm-up included): exact, not cut at the window's edges.
    operations_total = all, dependency_requests_total = requests,
    dependency_requests_per_op = all > 0 and requests / all or 0,
    heap_bytes_per_op = all > 0 and (host.heap_bytes() - heap0) / all or 0,
    gc_bytes_per_op = ops > 0 and lua_bytes / ops or 0,
  }
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
    out.rejected_by_source = kit.rejects_by_source(before, st)
  end
  -- Each thread's collector pauses that thread: the share of the threads' time.
  kit.finish(out, cell, { m = m, ops = ops, hist = hist, admitted = admitted,
                          failed_by = failed_by, rejected_by = rejected_by,
                          gc = { ns = gc_ns, cycles = gc_cycles, max_ns = gc_max_ns }, lanes = n, rss0 = rss0 })
  out.trusted = out.identity_ok and exact and ops > 0
  return out
end

return _M

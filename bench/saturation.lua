-- SPDX-License-Identifier: MIT
-- bench/saturation.lua - offered load above capacity: what nres sheds, why,
-- and what the work it admits still gets.
--
--   build/nresrun bench/saturation.lua            5 repetitions, ~6 min
--   build/nresrun bench/saturation.lua --quick    one pass at 80 % load
--
-- Two saturated resources, each offered 80 % and 200 % of its capacity by
-- an open loop (arrivals on schedule whatever happens to earlier ones):
--   pool        the nres work pool with 2 threads, each operation a 10 ms
--               blocking job (a sleep on a pool thread): capacity 200/s;
--               as it is (its queue unbounded) and with max_wait 2 ms (the
--               pool refuses at once a job it expects to wait longer for a
--               thread: admission by expected wait);
--   dependency  a modelled server of 8 slots, 10 ms per request, that
--               answers "overloaded" at once when all 8 are busy (as an
--               HTTP server's 503 would): capacity 800/s.
-- Arms: raw (no policy: everything goes straight in), trivial (3 attempts:
-- retries amplify the overload), default (budget, breaker, backoff), limit
-- (a concurrency limit at the capacity, a short queue, a queue timeout:
-- sheds locally, "rate limited", source concurrency) and adaptive (the same
-- limit adjusting itself to a latency target; adaptive_noqueue: without
-- the limiter's queue). What to read in the report:
-- completion, rejections by reason, p99 of admitted work (not rejected)
-- at 200 % against 80 %, RSS at the window's start and end (flat when
-- nothing queues without bound), and the accounting identity (arrivals =
-- successes + failures + rejections). A job the pool refuses ends its
-- operation at once as a failure ("failed" raw, "attempts exhausted" under a
-- policy: the harness names only the policy's own refusals as rejections),
-- so it counts as admitted work, with a latency near 0: the JSON's
-- p99_ok_us (successes alone) is the figure those cannot pull down.
-- An arrival that finds max_inflight
-- operations already in flight is shed by the harness ("shed", an
-- untrusted cell): that is the overload the arm did not shed itself.
local nres = require "nres"
local nresrun = require "nresrun"

-- 10 ms of service: long against this machine's timer overshoot (tens of
-- µs idle, milliseconds when other processes hold both cores).
local POOL_THREADS, JOB_NS = 2, 10e6           -- 2 threads x 10 ms: 200/s
local SLOTS, SERVICE_NS = 8, 10e6              -- 8 slots x 10 ms: 800/s

local pool_capacity = POOL_THREADS * 1e9 / JOB_NS
local dep_capacity = SLOTS * 1e9 / SERVICE_NS

-- The work pool: one blocking job per attempt, awaited by the worker.
-- max_wait (seconds, or nil): the pool's own admission by expected wait,
-- which refuses at once ("rate limited": the pool's NRES_ELIMITED) a job it
-- expects to wait longer than that for a thread.
local function pool_dep(max_wait, name)
  local dep = nresrun.dep.fn(function()
    if not POOL_READY then
      nresrun.pool.init{ threads = POOL_THREADS, max_wait = max_wait }
      POOL_READY = true
    end
    local ok, why, err = nresrun.pool.run("sleep", JOB_NS)
    if not ok then return nil, err == "ELIMITED" and "rate limited" or why end
    return true
  end)
  dep.name = name
  return dep
end
local pool_job = pool_dep(nil, "pool 2 x 10 ms")
-- A fifth of a service time: admitted work waits for a thread at most
-- about that long (the check is an estimate).
local POOL_MAX_WAIT = 0.2 * JOB_NS / 1e9
local pool_shedding = pool_dep(POOL_MAX_WAIT, string.format("pool 2 x 10 ms, max_wait %g ms",
                                                             POOL_MAX_WAIT * 1e3))

-- The server: 8 slots; a request finding them all busy is refused at once.
local busy = 0
local server = nresrun.dep.fn(function(_, sleep)
  if busy >= SLOTS then return nil, "overloaded" end
  busy = busy + 1
  sleep(SERVICE_NS)
  busy = busy - 1
  return true
end)
server.name = "server 8 x 10 ms"

-- A limit at the capacity with a queue as deep, waited in for at most one
-- service time (so admitted work waits at most that long on top of its
-- own service); telemetry on, so the report shows where refusals came from.
local function limit(slots)
  return nres.policy{ base = "none", telemetry = true,
                      limiter = { concurrency = slots, queue = slots,
                                  queue_timeout = 0.01, poll = 0.001 } }
end
-- The same, its limit moved by the latency of what it admits (AIMD on a
-- 15 ms target: 1.5 service times). queue = false: no queue of its own, for
-- a resource that bounds its own (the pool with max_wait): two queues in
-- series add their waits.
local function adaptive(slots, queue)
  local limiter = { concurrency = slots, adaptive = { target = 0.015, min = 1, max = 4 * slots } }
  if queue ~= false then
    limiter.queue, limiter.queue_timeout, limiter.poll = slots, 0.01, 0.001
  end
  return nres.policy{ base = "none", telemetry = true, limiter = limiter }
end

return nresrun.scenario{
  name = "saturation",
  repetitions = 5, warmup = 0.5, window = 2, seed = 1,
  quick = { repetitions = 1, warmup = 0.2, window = 1 },
  max_inflight = 2000,
  sections = {
    {
      name = "pool",
      dependency = { pool_job, pool_shedding },
      load = { open_rate = { 0.8 * pool_capacity, 2 * pool_capacity } },
      arms = { raw = nresrun.raw, limit = limit(POOL_THREADS), adaptive = adaptive(POOL_THREADS),
               adaptive_noqueue = adaptive(POOL_THREADS, false) },
      baseline = "raw",
    },
    {
      name = "dependency",
      dependency = server,
      load = { open_rate = { 0.8 * dep_capacity, 2 * dep_capacity } },
      arms = { raw = nresrun.raw, trivial = "trivial", default = "default",
               limit = limit(SLOTS), adaptive = adaptive(SLOTS) },
      baseline = "raw",
    },
  },
}

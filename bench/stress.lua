-- SPDX-License-Identifier: MIT
-- bench/stress.lua - the stress matrix, modelled on the reference suite
-- (../shared/reference/000_*.txt): what a process sustains under load, and
-- what the dependency feels from the other side.
--
--   build/nresrun bench/stress.lua --quick    one pass, ~1 minute
--   build/nresrun bench/stress.lua            the full matrix, ~20 minutes
--
-- Sections: executor (closed loop, workers 1 / cores / 8 x cores, healthy
-- dependency), retry-twice (the dependency fails twice then succeeds, zero
-- delay; the hand-written loop is the baseline), latency (open loop, two
-- rates), budget (open loop, two rates; the dependency fails every 4th or
-- every 2nd attempt by one shared counter), http (closed loop, 8 workers,
-- the dependency server `nresrun serve` in its own process; the C HTTP
-- client on the cell's event loop), threads (1, 2, 4, 8 OS threads in the
-- cell's process, each with its own Lua state and worker, all through one
-- policy's C state: what sharing it costs), gc (10 workers, healthy and
-- failing every 4th: the share of the window paused in garbage collection,
-- nres against cockatiel). Elsewhere workers are coroutines on one thread:
-- with a dependency that answers at once, more workers interleave but add
-- no parallelism.
local nres = require "nres"
local nresrun = require "nresrun"

local healthy = nresrun.dep.model{ name = "healthy" }

-- Fails twice, then succeeds: two of every three calls fail, by one counter.
local calls = 0
local twice = nresrun.dep.fn(function()
  calls = calls + 1
  if calls % 3 ~= 0 then return nil, "unavailable" end
  return true
end)
twice.name = "fails twice"   -- the peer driver knows this dependency by name

-- Peers: the same cells run by cockatiel (npm, the JS port of Polly) on
-- node (bench/peers/); skipped with a note when node is missing. Each is
-- compared with its own runtime's raw arm, js_raw.
local function js(arm, baseline)
  return nresrun.peer{ runtime = "node", script = "bench/peers/cockatiel.js", arm = arm,
                    baseline = baseline or "js_raw" }
end

local budgeted = nres.policy{ base = "trivial", budget = { ratio = 0.1, min_per_sec = 3 } }

-- http: every arm against /echo and against /flaky (503 on every 4th
-- request, one counter). nresrun.raw is the C client with one attempt and
-- nothing else (the "none" preset), so raw on /echo is the issue's "raw"
-- arm and raw on /flaky its "raw-flaky": the transport's own cost per
-- request, which the report subtracts (dependency requests/op x raw-flaky's
-- heap B/op) to show the handler's own cost.
local echo = nresrun.dep.http{ path = "/echo", name = "echo" }
local flaky = nresrun.dep.http{ path = "/flaky?n=4", name = "flaky n=4" }
-- lib: the http preset, 3 attempts, no backoff, budget off.
local lib = nres.policy{ base = "http", attempts = 3, backoff = false, budget = false }
-- lib-minimal: everything optional off (no deadline, timeouts, breaker,
-- budget, telemetry), the 3 attempts kept: the retry loop alone.
local lib_minimal = nres.policy{ base = "none", attempts = 3 }

return nresrun.scenario{
  name = "stress",
  repetitions = 3, warmup = 2, window = 5, seed = 1,
  quick = { repetitions = 1, warmup = 0.3, window = 1 },
  sections = {
    {
      name = "executor",
      dependency = healthy,
      load = { workers = { 1, "cores", "8x" } },
      arms = { raw = nresrun.raw, passthrough = "none", trivial = "trivial",
               default = "default", naive = nresrun.naive(3),
               js_raw = js "empty", js_passthrough = js "passthrough", js_retry = js "retry",
               js_default = js "default", js_naive = js "naive" },
      baseline = "raw",
    },
    {
      name = "retry-twice",
      dependency = twice,
      load = { workers = { 1, "cores", "8x" } },
      arms = { naive = nresrun.naive(3), trivial = "trivial",
               budgetless = nres.policy{ base = "default", backoff = false, budget = false,
                                         breaker = false },
               js_naive = js("naive", "js_naive"), js_retry = js("retry", "js_naive") },
      baseline = "naive",
    },
    {
      name = "latency",
      dependency = healthy,
      load = { open_rate = { 50000, 200000 } },
      arms = { raw = nresrun.raw, passthrough = "none", trivial = "trivial", default = "default",
               js_raw = js "empty", js_default = js "default" },
      baseline = "raw",
    },
    {
      name = "budget",
      dependency = { nresrun.dep.flaky{ fail_every = 4 }, nresrun.dep.flaky{ fail_every = 2 } },
      load = { open_rate = { 20000, 100000 } },
      arms = { raw = nresrun.raw, unbudgeted = "trivial", budgeted = budgeted,
               -- cockatiel has no budget: its retry alone.
               js_raw = js "empty", js_retry = js "retry" },
      baseline = "unbudgeted",
    },
    {
      name = "threads",
      dependency = healthy,
      load = { threads = { 1, 2, 4, 8 }, workers = 1 },
      -- *_quiet: telemetry off, no counters: what the counters' cache line
      -- costs when threads share the policy (bench/README.md).
      arms = { raw = nresrun.raw, trivial = "trivial", default = "default",
               trivial_quiet = nres.policy{ base = "trivial", telemetry = false },
               default_quiet = nres.policy{ base = "default", telemetry = false } },
      baseline = "raw",
    },
    {
      name = "gc",
      dependency = { healthy, nresrun.dep.flaky{ fail_every = 4 } },
      load = { workers = 10 },
      arms = { raw = nresrun.raw, passthrough = "none", trivial = "trivial", default = "default",
               js_raw = js "empty", js_passthrough = js "passthrough", js_retry = js "retry",
               js_default = js "default" },
      baseline = "raw",
    },
    {
      name = "http",
      dependency = { echo, flaky },
      load = { workers = 8 },
      -- js_* arms: the cockatiel peer against the same server, each compared
      -- with js_raw.
      arms = { raw = nresrun.raw, lib = lib, ["lib-minimal"] = lib_minimal,
               js_raw = js "empty", js_retry = js "retry", js_default = js "default" },
      baseline = "raw",
    },
  },
}

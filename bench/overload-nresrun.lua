-- SPDX-License-Identifier: MIT
-- bench/overload-nresrun.lua - scenario 1 of bench/overload.lua (hedging
-- against a heavy tail) in real time: nresrun cells on an in-process
-- modelled dependency (lognormal latency, median 20 ms, sigma 1), open loop
-- at 200 calls/s, one arm without hedging and one hedging at the live p95.
-- The hedged arm runs its attempts side by side on nresrun's coroutine
-- scheduler (p:run with the scheduler's spawn/wait_any/kill).
--
--   build/nresrun bench/overload-nresrun.lua [--window S] [--out DIR]
local nres = require "nres"
local nresrun = require "nresrun"

local base = { base = "trivial", attempts = 1, deadline = 10 }
local hedged = { base = "trivial", attempts = 2, deadline = 10,
                 hedge = { at = "p95", max = 2, min_samples = 100 },
                 budget = { ratio = 0.1, min_per_sec = 3, capacity = 30 } }

return nresrun.scenario{
  name = "overload-hedge",
  description = "Hedging at the live p95 against a lognormal (median 20 ms, sigma 1) dependency, "
             .. "open loop 200/s, in real time on nresrun's scheduler.",
  dependency = nresrun.dep.model{ latency = { lognormal = { 0.02, 1 } } },
  load = { open_rate = { 200 } },
  arms = { ["no-hedge"] = nres.policy(base), ["hedge-p95"] = nres.policy(hedged) },
  repetitions = 1, warmup = 5, window = 60, seed = 1,
}

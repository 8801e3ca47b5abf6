-- SPDX-License-Identifier: MIT
-- bench/sim-outage.lua - policies against a dependency that goes down,
-- browns out and saturates, on a virtual clock: five simulated minutes in
-- about a second of real time, the same run for the same seed.
--
--   build/nresrun bench/sim-outage.lua [--seed N] [--only PATTERN] [--out DIR]
--
-- The dependency answers in a lognormal spread (median 20 ms), has 16
-- servers and a queue of 32 (beyond that it refuses at once: "overloaded"),
-- goes down completely for 30 s (every request fails after its usual
-- latency), and later browns out for a minute (10 % of requests fail and
-- every answer takes 1.5x as long, which alone pushes it near its
-- capacity). Arrivals: 400/s, Poisson, the same for every policy.
--
-- Policies: the default preset (retries with backoff, budget, breaker,
-- timeouts), the same without its retry budget, the trivial preset (three
-- attempts at once, nothing else), and "none" (one attempt) as the floor.
local nres = require "nres"
local nresrun = require "nresrun"

return nresrun.simulation{
  name = "sim-outage",
  description = "A 30 s outage and a 60 s brownout of a capacity-limited dependency, "
             .. "under four policies.",
  policies = {
    default = "default",
    ["default-no-budget"] = nres.policy{ budget = false },
    trivial = "trivial",
    none = "none",
  },
  dependency = {
    latency = { lognormal = { 0.020, 0.5 } },
    capacity = { concurrency = 16, queue = 32 },
    phases = {
      { name = "outage", from = 60, to = 90, fail = 1 },
      { name = "brownout", from = 150, to = 210, fail = 0.1, latency_factor = 1.5 },
    },
  },
  load = { rate = 400, arrivals = "poisson" },
  duration = 300,
  seed = 1,
}

-- SPDX-License-Identifier: MIT
-- batch: for background jobs that can wait. More attempts, long backoff,
-- generous time bounds; the budget still caps retry load on a failing
-- dependency, and the breaker stops the batch from hammering one that is
-- down (bench/tournament.lua runs it; the targets are asserted for
-- default, http and gateway).
return {
  base = "default",
  -- Five retries: a job would rather wait than fail.
  attempts = 6,
  -- From 1 s, doubling to a minute: retries ride out an outage.
  backoff = { kind = "exponential", base = 1, factor = 2, max = 60,
              jitter = "full", throttled_base = 5 },
  -- Ten minutes for a whole job.
  deadline = 600,
  -- Two minutes per attempt.
  attempt_timeout = 120,
  -- A job's attempts are not cut at a multiple of the usual latency.
  ceiling = false,
  -- No local refusals: a refused first attempt fails at once, and a job would rather wait (its budget bounds retries).
  throttle = false,
  -- 20 % of successes, a floor of 1 a second: more retry room than the default.
  budget = { ratio = 0.2, min_per_sec = 1 },
  -- The default's trip rules, a probe every 2 s never doubled (30 s doubling to 10 min: 44 % in the outage).
  breaker = { consecutive = 20, ratio = 0.9, window = 0.1, buckets = 4,
              min_calls = 8, break_for = 2, break_max = 2, jitter = 0.1,
              probes = 1, successes = 2 },
}

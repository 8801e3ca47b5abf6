-- batch: for background jobs that can wait. More attempts, long backoff,
-- generous time bounds; the budget still caps retry load on a failing
-- dependency, and the breaker stops the batch from hammering one that is down.
return {
  base = "default",
  attempts = 6,
  backoff = { kind = "exponential", base = 1, factor = 2, max = 60,
              jitter = "full", throttled_base = 5 },
  deadline = 600,
  attempt_timeout = 120,
  ceiling = false,
  budget = { ratio = 0.2, min_per_sec = 1 },
  breaker = { consecutive = 10, ratio = 0.5, window = 120, buckets = 12,
              min_calls = 20, break_for = 30, break_max = 600, jitter = 0.1,
              probes = 1, successes = 2 },
}

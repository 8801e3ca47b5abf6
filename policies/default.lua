-- default: for calls to a dependency you do not own. Three attempts with
-- exponential backoff and full jitter, a 30 s deadline over everything, a
-- 10 s attempt timeout tightened to 3 x the measured p95, a retry budget
-- (10 % of successes, a floor of 3 retries per second) and a breaker.
return {
  attempts = 3,
  backoff = { kind = "exponential", base = 0.1, factor = 2, max = 30,
              jitter = "full", throttled_base = 1 },
  deadline = 30,
  attempt_timeout = 10,
  ceiling = { factor = 3, quantile = 0.95, floor = 0.05, min_samples = 20 },
  budget = { ratio = 0.1, min_per_sec = 3 },
  breaker = { consecutive = 5, ratio = 0.5, window = 30, buckets = 10,
              min_calls = 20, break_for = 15, break_max = 120, jitter = 0.1,
              probes = 1, successes = 2 },
  limiter = false,
  hedge = false,
  classify = "default",
  telemetry = true,
}

-- gateway: for a proxy in front of upstreams, where the client is waiting.
-- Short backoff, a tight deadline, a retry budget so retries never more
-- than add ~10 % load to a failing upstream, and a fast breaker.
return {
  base = "http",
  attempts = 3,
  backoff = { kind = "exponential", base = 0.025, factor = 2, max = 0.25,
              jitter = "full", throttled_base = 0.5 },
  deadline = 5,
  attempt_timeout = 2,
  budget = { ratio = 0.1, min_per_sec = 5 },
  breaker = { consecutive = 5, ratio = 0.5, window = 10, buckets = 10,
              min_calls = 20, break_for = 5, break_max = 60, jitter = 0.1,
              probes = 1, successes = 2 },
}

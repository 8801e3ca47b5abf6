-- gateway: for a proxy in front of upstreams, where the client is waiting.
-- Short backoff, a tight deadline, a retry budget so retries never add
-- more than ~20 % load to a failing upstream (Finagle's and Envoy's
-- default share), and a breaker for outages.
--
-- The breaker opens when an upstream is (nearly) down - 20 transient
-- failures in a row, or 90 % of at least 20 calls over 10 s - not when it
-- is merely degraded: a half-failing upstream still answers every other
-- request, and the budget already keeps retries to ~10 %. Breaks are short
-- (0.5 s, at most 1 s) so a recovered upstream gets traffic within a second;
-- an open breaker lets one probe through per break, which costs a dead
-- upstream about one request a second per key.
return {
  base = "http",
  attempts = 3,
  backoff = { kind = "exponential", base = 0.025, factor = 2, max = 0.25,
              jitter = "full", throttled_base = 0.5 },
  deadline = 5,
  attempt_timeout = 2,
  budget = { ratio = 0.2, min_per_sec = 5 },
  breaker = { consecutive = 20, ratio = 0.9, window = 10, buckets = 10,
              min_calls = 20, break_for = 0.5, break_max = 1, jitter = 0.1,
              probes = 1, successes = 2 },
}

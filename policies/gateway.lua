-- SPDX-License-Identifier: MIT
-- gateway: for a proxy in front of upstreams, where the client is waiting.
-- The default's breaker and ceiling (an upstream that is down is skipped
-- within ~50 ms and probed every ~0.55 s; a busy one is left alone) with
-- the default's backoff capped at 2 s (Retry-After honoured up to 2 s), a
-- tight deadline, the HTTP classifier, and http's fail fast when its
-- throttle refuses. Held to
-- bench/tournament.lua like the default (bench/results/tournament-2026-12-02.md).
return {
  base = "http",
  -- Two retries, as the default.
  attempts = 3,
  -- The default's 100 ms doubling (1 s after a throttled answer), capped at 2 s for a waiting client. 50 ms sent
  -- the first failures' retries before the breaker tripped: a 3 s blip got 0.0503 req/call (seed 14), 100 ms 0.0454.
  backoff = { max = 2 },
  -- The client waits about this long at most.
  deadline = 5,
  -- An upstream attempt longer than 2 s is of no use to a waiting client.
  attempt_timeout = 2,
  -- 10 %, not Finagle's and Envoy's 20 %: at 20 % half capacity got 1.19 x the offered load.
  budget = { ratio = 0.1, min_per_sec = 3 },
  -- The default's (policies/default.lua); break_max = break_for, where 1 s let a failed probe double it.
  breaker = { consecutive = 20, ratio = 0.9, window = 0.1, buckets = 4,
              min_calls = 8, break_for = 0.55, break_max = 0.55, jitter = 0.1,
              probes = 1, successes = 2 },
}

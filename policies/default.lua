-- SPDX-License-Identifier: MIT
-- default: for calls to a dependency you do not own. Three attempts with
-- exponential backoff and full jitter, a 30 s deadline over everything, a
-- 10 s attempt timeout tightened to 5 x the measured p99, a retry budget
-- (10 % of successes, a floor of 3 retries per second) and a breaker that
-- opens for an outage, not for a busy dependency (a throttled answer, a
-- 429 or an "overloaded" that says so, is the dependency answering: it
-- never trips it) and a client-side throttle that refuses locally what an
-- overloaded dependency would refuse (the SRE book's adaptive throttling;
-- throttled answers, and plain errors back far faster than its successes,
-- count against it; a call it refuses waits the throttled backoff and asks
-- again while it has tries left). The values are held to
-- bench/tournament.lua (ten scenarios, ten seeds; the table is
-- bench/results/tournament-2026-12-02.md): never more than 0.5 points of
-- success below no policy at all, at most 0.05 requests per call to a
-- dependency that is down, back within 2 s of its recovery.
return {
  -- Two retries: in the brownout (10 % failures) none completes 96.6 %, this 99.7 %.
  attempts = 3,
  -- 100 ms doubling, fully jittered: retries spread over a blip instead of landing together.
  backoff = { kind = "exponential", base = 0.1, factor = 2, max = 30,
              jitter = "full", throttled_base = 1 },
  -- A bound on the whole call, retries and waits included.
  deadline = 30,
  -- A bound on one attempt until the ceiling has samples to measure.
  attempt_timeout = 10,
  -- 5 x p99, >= 250 ms: cuts hung attempts, not queues (3 x p95 took overload-deep to 23-31 %, none 44 %).
  ceiling = { factor = 5, quantile = 0.99, floor = 0.25, min_samples = 100 },
  -- Retries add <= ~10 %: under overload the dependency gets <= 1.1 x the offered load.
  budget = { ratio = 0.1, min_per_sec = 3 },
  breaker = {
    -- 20 in a row (~50 ms at 400 calls/s): 10 cost 3.6-5.0 points on plain-error refusals (overload-mute).
    consecutive = 20,
    -- Down, not degraded: at 0.5 a half-serving dependency would lose the half it serves.
    ratio = 0.9,
    -- The ratio over the last ~0.1 s: a quiet outage trips in ~8 calls (0.046 req/call at 50 calls/s, not 0.056).
    window = 0.1,
    buckets = 4,
    -- At least 8 outcomes in it: at 400 calls/s it holds ~40-60, a burst of refusals never reaches 90 %.
    min_calls = 8,
    -- A probe every ~0.55 s, never doubled: 0.5 s left up to 0.050 req/call at 50 calls/s, 0.6 s cost the blip 0.51 points.
    break_for = 0.55,
    -- = break_for, so no doubling; a 1 s break cost 0.3-0.6 points in the 3 s blip.
    break_max = 0.55,
    -- Breaks shortened by up to 10 % at random, so many breakers do not probe in step.
    jitter = 0.1,
    -- One probe at a time.
    probes = 1,
    -- Two probe successes close it: one lucky answer does not.
    successes = 2,
  },
  throttle = {
    -- Sends ~1.03 x what it accepts: 1.06 sent a quarter capacity up to 1.12 x, 1.02 lost 0.11 points at half.
    k = 1.03,
    -- 0.3 s, sliding: the odds follow an overload within a window; the throttle's room brings sending back after it.
    window = 0.3,
    -- 8 buckets of 37.5 ms, as the breaker's window slides.
    buckets = 8,
    -- A plain error back in < 0.1 x the p50 of successes is a silent refusal (overload-mute); 0.25 caught outage failures.
    fast_failure = 0.1,
  },
  -- No rate limit: a client-side limit cannot know the dependency's capacity.
  limiter = false,
  -- No hedging: it doubles load exactly when a dependency is slow.
  hedge = false,
  -- Any error is transient, timeouts flagged.
  classify = "default",
  -- Counters for p:stats().
  telemetry = true,
}

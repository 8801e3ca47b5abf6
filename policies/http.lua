-- SPDX-License-Identifier: MIT
-- http: the default policy with the HTTP classifier: 429 and 503 with
-- Retry-After are throttled (Retry-After honoured), other 5xx and 408 are
-- transient, other 4xx are answers (not retried); a call its throttle
-- refuses fails fast. Every other value is the default's
-- (policies/default.lua says why each is what it is).
return {
  base = "default",
  -- Statuses are read as above.
  classify = "http",
  -- A call the throttle refuses fails at once ("throttled locally") instead of waiting a throttled backoff
  -- past the client's patience: overload goodput within 67 ms 75.5 % against 70.5 %, for 0.4 points of
  -- success (bench/results/tournament-throttled-2026-12-07.md).
  throttle = { wait = false },
}

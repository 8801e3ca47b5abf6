-- SPDX-License-Identifier: MIT
-- none: everything off. One attempt, no time bounds, no budget, no breaker,
-- no telemetry: a passthrough that costs next to nothing.
return {
  attempts = 1,
  backoff = false,
  deadline = false,
  attempt_timeout = false,
  ceiling = false,
  budget = false,
  breaker = false,
  limiter = false,
  hedge = false,
  telemetry = false,
}

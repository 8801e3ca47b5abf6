-- SPDX-License-Identifier: MIT
-- http: the default policy with the HTTP classifier: 429 and 503 with
-- Retry-After are throttled (Retry-After honoured), other 5xx and 408 are
-- transient, other 4xx are answers (not retried). Every other value is the
-- default's (policies/default.lua says why each is what it is).
return {
  base = "default",
  -- The only difference: statuses are read as above.
  classify = "http",
}

-- http: the default policy with the HTTP classifier: 429 and 503 with
-- Retry-After are throttled (Retry-After honoured), other 5xx and 408 are
-- transient, other 4xx are answers (not retried).
return {
  base = "default",
  classify = "http",
}

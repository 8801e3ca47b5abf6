-- SPDX-License-Identifier: MIT
-- trivial: three attempts at once, nothing else (no delay, no time bounds).
return {
  base = "none",
  attempts = 3,
  telemetry = true,
}

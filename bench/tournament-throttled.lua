-- SPDX-License-Identifier: MIT
-- bench/tournament-throttled.lua - should the interactive presets (http,
-- gateway) fail fast when their throttle refuses a call, and should the
-- gateway's retry budget be a fixed ratio? The tournament's ten scenarios
-- (bench/tournament.lua) and one more, the gateway benchmark's "every 4th
-- request fails" on a dependency with room, over ten seeds, against:
--   http, gateway              the presets: a call the throttle refuses
--                              waits a throttled backoff and asks again
--   http-fail-fast,            the same with throttle.wait = false: it
--   gateway-fail-fast          ends "throttled locally" at once
--   gateway-budget-20          the budget at 20 % (Finagle's, Envoy's)
--   gateway-no-budget          no budget: retries bounded only by the
--                              throttle, which follows what the dependency
--                              accepts (measured headroom), and the breaker
-- Read goodput within the SLO for calls a person waits on, success for
-- batch work (bench/results/tournament-throttled-*.md says what was decided).
--
--   build/nresrun bench/tournament-throttled.lua [--out DIR]
local nres, nresrun = require "nres", require "nresrun"

local scenarios = {}
for i, sc in ipairs(dofile("bench/tournament.lua").spec.scenarios) do scenarios[i] = sc end
scenarios[#scenarios + 1] = {
  name = "every-4th", description = "Every 4th request fails at once, with room to retry: the gateway "
                                  .. "benchmark's cell, where a fixed budget caps retries that cost nothing.",
  dependency = { latency = { lognormal = { 0.020, 0.5 } }, fail_every = 4,
                 capacity = { concurrency = 16, queue = 32, refusal = "throttled" } },
  load = { rate = 400, arrivals = "poisson" }, duration = 120,
}

return nresrun.simulation{
  name = "tournament-throttled",
  description = "The interactive presets, waiting or failing fast when their throttle refuses, and the gateway's "
             .. "budget fixed or left to the throttle, against the tournament's scenarios over ten seeds.",
  policies = {
    none = "none",
    http = "http",
    ["http-fail-fast"] = nres.policy{ base = "http", throttle = { wait = false } },
    gateway = "gateway",
    ["gateway-fail-fast"] = nres.policy{ base = "gateway", throttle = { wait = false } },
    ["gateway-budget-20"] = nres.policy{ base = "gateway", budget = { ratio = 0.2 } },
    ["gateway-no-budget"] = nres.policy{ base = "gateway", budget = false },
  },
  seeds = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 },
  scenarios = scenarios,
}

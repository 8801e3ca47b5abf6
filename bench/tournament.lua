-- SPDX-License-Identifier: MIT
-- bench/tournament.lua - every preset against ten standard scenarios over
-- several seeds, on the simulator's virtual clock: does a policy ever cost
-- availability against calling the dependency once (none) or three times
-- at once (trivial)?
--
--   build/nresrun bench/tournament.lua [--seed N] [--only PATTERN] [--out DIR]
--
-- The dependency of sim-outage (lognormal latency, median 20 ms, sigma 0.5;
-- 16 servers + a queue of 32, ~700 requests/s; beyond that it refuses at
-- once with "overloaded", said as a throttled answer, as a 429 or a 503
-- with Retry-After says it) under 400 arrivals/s (Poisson), and:
--   steady      healthy throughout
--   outage      down 30 s (every request fails after its usual latency)
--   outage-quiet  the outage at 50 arrivals/s
--   blip        down 3 s
--   brownout    60 s of 10 % failures and latency x1.5: near capacity
--   overload    capacity halved for 60 s: ~350 requests/s against 400
--   overload-deep  capacity down to a quarter for 60 s
--   overload-mute  the same, refusals a plain error (no sign of overload)
--   heavy-tail  lognormal sigma 1 (p99 ~10x the median): ~80 % busy
--   drift       latency x3 over 2 minutes, then held, 32 servers: ends
--               near capacity
-- spec/lua/tournament_spec.lua runs the same scenarios on fewer seeds and
-- asserts the targets (nresrun.sim.tournament.targets).
local nresrun = require "nresrun"

local function dep(phases, latency, servers, refusal)
  return {
    latency = latency or { lognormal = { 0.020, 0.5 } },
    capacity = { concurrency = servers or 16, queue = 32, refusal = refusal or "throttled" },
    phases = phases,
  }
end
local load = { rate = 400, arrivals = "poisson" }

local scenarios = {
  { name = "steady", description = "Healthy throughout.",
    dependency = dep(nil), load = load, duration = 120 },
  { name = "outage", description = "The dependency fails every request for 30 s.",
    dependency = dep{ { name = "outage", from = 60, to = 90, fail = 1 } }, load = load, duration = 150 },
  { name = "outage-quiet", description = "The outage at 50 arrivals/s: probing and tripping cost more per arrival.",
    dependency = dep{ { name = "outage", from = 60, to = 90, fail = 1 } }, load = { rate = 50, arrivals = "poisson" },
    duration = 150 },
  { name = "blip", description = "The dependency fails every request for 3 s.",
    dependency = dep{ { name = "blip", from = 60, to = 63, fail = 1 } }, load = load, duration = 120 },
  { name = "brownout", description = "10 % failures and latency x1.5 for 60 s, which alone takes the "
                                   .. "dependency near its capacity.",
    dependency = dep{ { name = "brownout", from = 60, to = 120, fail = 0.1, latency_factor = 1.5 } },
    load = load, duration = 180 },
  { name = "overload", description = "Capacity halved for 60 s: below the offered load.",
    dependency = dep{ { name = "overload", from = 60, to = 120, capacity = 0.5 } }, load = load, duration = 180 },
  { name = "overload-deep", description = "Capacity down to a quarter for 60 s: ~180 requests/s against 400.",
    dependency = dep{ { name = "overload", from = 60, to = 120, capacity = 0.25 } }, load = load, duration = 180 },
  { name = "overload-mute", description = "overload-deep with refusals that do not say so: a plain error, "
                                        .. "as from a dependency that sheds load without a 429 or 503.",
    dependency = dep({ { name = "overload", from = 60, to = 120, capacity = 0.25 } }, nil, nil, "error"),
    load = load, duration = 180 },
  { name = "heavy-tail", description = "Lognormal latency with sigma 1 (p99 ~10x the median): mean 33 ms, "
                                     .. "so the 16 servers run at ~80 %.",
    dependency = dep(nil, { lognormal = { 0.020, 1.0 } }), load = load, duration = 120 },
  { name = "drift", description = "Latency drifts to x3 over 2 minutes and stays; with 32 servers the "
                                .. "dependency ends near its capacity.",
    dependency = dep({ { name = "drift", from = 30, to = 240, latency_factor = 3, ramp = 120 } }, nil, 32),
    load = load, duration = 240 },
}

return nresrun.simulation{
  name = "tournament",
  description = "Every preset against ten standard scenarios, each over ten seeds.",
  policies = { "none", "trivial", "default", "http", "gateway", "batch" },
  seeds = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 },
  scenarios = scenarios,
}

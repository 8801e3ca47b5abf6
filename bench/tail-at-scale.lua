-- SPDX-License-Identifier: MIT
-- bench/tail-at-scale.lua - the hedging example of Dean and Barroso's "The
-- Tail at Scale" (2013) as a leaf dependency: a read of 1,000 keys waits
-- for the slowest of 1,000 leaf calls, so its 99.9th percentile is a leaf
-- call's 1 - 10^-6 quantile. The paper: hedging after 10 ms cuts that
-- 99.9th percentile from 1,800 ms to 74 ms and sends 2 % more requests.
--
-- The leaf latency is the lognormal that meets two of the paper's figures:
-- 2 % of leaf calls take longer than 10 ms (the hedges sent), and 10^-6 of
-- them longer than 1,800 ms (the fan-out's 99.9th percentile unhedged):
-- ln(1800 / 10) = (4.753 - 2.054) sigma, so sigma = 1.924 and the median
-- is 10 ms / e^(2.054 sigma) = 0.19 ms. The third figure, 74 ms, is left to
-- predict. No capacity limit: the paper's servers were not saturated.
--
--   build/nresrun bench/tail-at-scale.lua          none against a hedge at 10 ms
--   build/nresrun tune bench/tail-at-scale.lua     what the tuner recommends
-- docs/tune.md compares both with the paper.
local nres, nresrun = require "nres", require "nresrun"
return nresrun.simulation{
  name = "tail-at-scale",
  description = "A leaf call of a 1,000-key read: none, and a hedge after 10 ms (The Tail at Scale).",
  policies = { none = "none", ["hedge-10ms"] = nres.policy{ base = "none", attempts = 2, hedge = { at = 0.010, max = 2 },
                                                            telemetry = true } },
  dependency = { latency = { lognormal = { 0.00019, 1.924 } } },
  load = { rate = 1000 }, duration = 60, seed = 1,
}

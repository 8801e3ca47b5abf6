-- SPDX-License-Identifier: MIT
-- nresrun: the harness's face - scenarios, modelled dependencies and
-- simulations that `nresrun FILE.lua` runs to choose and prove policies.
--
--   local nres = require "nres"        -- the library: policies
--   local run  = require "nresrun"     -- the harness: what to run them on
--   return run.scenario{
--     dependency = run.dep.flaky{ fail_every = 2 },
--     load = { workers = 4 },
--     arms = { raw = run.raw, trivial = "trivial", mine = nres.policy{ attempts = 5 } },
--   }
--
-- The parts live in lua/nresrun/ (the simulator in lua/nresrun/sim/); they
-- are loaded on first use, so a scenario that names no HTTP dependency
-- loads no HTTP client.
local _M = { _VERSION = require("nres")._VERSION }

-- nresrun.scenario{...}: a stress matrix (lua/nresrun/scenario.lua).
function _M.scenario(t)
  local sc = require("nresrun.scenario").new(t, 2)   -- not a tail call: keeps the error level
  return sc
end

-- nresrun.simulation{...}: policies against a modelled dependency on a
-- virtual clock (lua/nresrun/sim.lua).
function _M.simulation(t)
  local sim = require("nresrun.sim").new(t, 2)   -- not a tail call
  return sim
end

-- nresrun.external{...}: a benchmark whose work is a C program built
-- beside nresrun (lua/nresrun/external.lua).
function _M.external(t)
  local e = require("nresrun.external").new(t, 2)   -- not a tail call
  return e
end

-- The rest are modules or values, loaded when first read:
--   dep   - dependencies a scenario calls (nresrun.dep.flaky{...}, .model, .fn, .http)
--   http  - HTTP requests from a scenario's workers (nresrun.http.request{...})
--   pool  - built-in C jobs on the loop's work pool, awaited from workers
--   raw, naive(n), peer{...} - the arms that are not policies
local lazy = {
  dep  = function() return require "nresrun.dep" end,
  http = function() return require "nresrun.http" end,
  pool = function() return require "nresrun.pool" end,
  raw  = function() return require("nresrun.scenario").raw end,
  naive = function() return require("nresrun.scenario").naive end,
  peer = function() return require("nresrun.scenario").peer end,
}

return setmetatable(_M, { __index = function(t, k)
  local load = lazy[k]
  if not load then return nil end
  local v = load()
  rawset(t, k, v)
  return v
end })

-- nres: resilience policies for Lua, on the nres C runtime (LuaJIT FFI).
--
--   local nres = require "nres"
--   local p = nres.policy{ attempts = 4, deadline = 1.5 }
--   local res, err, info = p:run(fetch, url)
--
-- This file is the face: it re-exports the parts (nres.policy for
-- declaring and running, nres.classify, nres.driver) and the few module
-- functions. Loading it loads libnres and checks its ABI.
local cdef = require "nres.cdef"
local policy = require "nres.policy"
local run = require "nres.run"
local classify = require "nres.classify"
local driver = require "nres.driver"
local schema = require "nres.schema"

local ffi = require "ffi"
local C = cdef.C

local _M = {
  _VERSION = "0.1.0",
  version = ffi.string(C.nres_version_string()),
  library = cdef.path,
  driver = driver,
  classify = classify,
  reasons = run.reasons,
}

-- nres.policy(spec): spec is a table (see README: every field, unit and
-- default) or a preset name ("none", "trivial", "default", "http",
-- "gateway", "batch"). Raises error(msg, 2) naming every problem.
function _M.policy(spec)
  local p = policy.new(spec, 2)   -- not a tail call: keeps error levels right
  return p
end

-- nres.budget(name, { ratio, min_per_sec, capacity }): declare a named
-- budget before policies name it (budget = "name"); later calls return the
-- same budget.
function _M.budget(name, cfg)
  if type(name) ~= "string" then
    error("bad argument #1 to 'budget' (string expected, got " .. type(name) .. ")", 2)
  end
  if cfg ~= nil then
    local problems = schema.check({ budget = cfg })
    if #problems > 0 then error("nres.budget: " .. problems[1], 2) end
  end
  local b, err = policy.named_budget(name, cfg)
  if not b then error("nres.budget: " .. err, 2) end
  return b
end

-- A preset's table (a copy), e.g. to read its defaults.
function _M.preset(name)
  local t, err = policy.resolve(name)
  if not t then error("nres.preset: " .. err, 2) end
  return t
end

-- The scenario DSL of nresrun (see lua/nres/scenario.lua, lua/nres/dep.lua).
function _M.scenario(t)
  local sc = require("nres.scenario").new(t, 2)   -- not a tail call
  return sc
end
_M.dep = require "nres.dep"

-- A simulation on a virtual clock (see lua/nres/sim.lua): nresrun runs it.
function _M.simulation(t)
  local sim = require("nres.sim").new(t, 2)   -- not a tail call
  return sim
end
-- HTTP requests from scenarios' workers, inside nresrun (lua/nres/http.lua).
_M.http = require "nres.http"
-- Built-in C jobs on the loop's work pool, awaited from scenarios'
-- workers, inside nresrun (lua/nres/pool.lua).
_M.pool = require "nres.pool"
-- A benchmark whose work is a C program built beside nresrun.
function _M.external(t)
  local e = require("nres.external").new(t, 2)   -- not a tail call
  return e
end
_M.raw = require("nres.scenario").raw
_M.naive = require("nres.scenario").naive
_M.peer = require("nres.scenario").peer

-- Seconds left for the attempt running now (nil when unbounded): what to
-- propagate downstream, e.g. as X-Deadline-Ms. Valid inside fn.
_M.remaining = run.remaining

return _M

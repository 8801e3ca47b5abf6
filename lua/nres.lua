-- SPDX-License-Identifier: MIT
-- nres: resilience policies for Lua, on the nres C runtime (LuaJIT FFI).
--
--   local nres = require "nres"
--   local p = nres.policy{ attempts = 4, deadline = 1.5 }
--   local res, err, info = p:run(fetch, url)
--
-- This file is the library's face: it re-exports the parts (nres.policy
-- for declaring and running, nres.classify, nres.driver) and the few
-- module functions. Loading it loads libnres and checks its ABI, and
-- nothing of the harness (nresrun's scenarios, dependencies, simulator:
-- `require "nresrun"`). nres.ngx (the gateway) and nres.shm are loaded
-- by name where they are used.
local cdef = require "nres.cdef"
local policy = require "nres.policy"
local run = require "nres.run"
local classify = require "nres.classify"
local driver = require "nres.driver"
local schema = require "nres.schema"

local ffi = require "ffi"
local C = cdef.C

local _M = {
  _VERSION = ffi.string(C.nres_version_string()),   -- the CMake project version
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

-- A copy of a failed call's info that later failures do not overwrite
-- (p:run reuses one info table per coroutine).
_M.copy_info = run.copy_info

-- Seconds left for the attempt running now (nil when unbounded): what to
-- propagate downstream, e.g. as X-Deadline-Ms. Valid inside fn.
_M.remaining = run.remaining

-- The harness (nresrun's scenarios, dependencies, simulator) moved to its
-- own namespace, `require "nresrun"`. Its old names here stay for this
-- release as aliases that load it on first use and say so once on stderr;
-- `require "nres"` itself loads no harness module.
local moved = { scenario = true, simulation = true, dep = true, http = true,
                pool = true, external = true, raw = true, naive = true,
                peer = true }
local warned = {}
setmetatable(_M, { __index = function(t, k)
  if not moved[k] then return nil end
  if not warned[k] then
    warned[k] = true
    io.stderr:write("nres." .. k .. " is deprecated: use require(\"nresrun\")." .. k
                    .. " (the harness has its own namespace since 0.2)\n")
  end
  return require("nresrun")[k]
end })

return _M

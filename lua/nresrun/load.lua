-- SPDX-License-Identifier: MIT
-- nresrun.load: the load kinds of a scenario, one module each.
--
-- A load kind is a module in nresrun/load/ (workers, open_rate, threads)
-- with one shape, as lua-resty-balancer's pickers are:
--
--   name, loop ("closed" or "open"), what ("closed loop", ...),
--   expected      what one value must be, for error messages
--   check(v)      true when one value of the kind is valid
--   companions    { field = check(v, path) -> problem or nil }: other load
--                 fields the kind reads (threads' workers per thread)
--   dependency(d) a problem with running dependency `d` under it, or nil
--   values(load)  the list of values a section's matrix takes
--   fields(cell, v, load)  fill a cell's fields for value v
--   fit(cell)     why the machine cannot run the cell, or nil
--   peer(cell, spec)       fill a peer driver's spec, or return nil, why
--   run(cell, seed, kit, srv)  run the cell in this process (kit: the
--                 shared parts of nresrun.cell); returns its metrics
--   result        the cell fields copied into each result of the report
--
-- The scenario checks, the matrix, the runner, the cell and the report ask
-- this module, so a new kind (a replayed trace) is one new file,
-- nresrun/load/NAME.lua, found by its name the first time a load table
-- uses it; KINDS lists the kinds shipped here, in the order error
-- messages name them.
local _M = { _VERSION = "0.1.0" }

_M.KINDS = { "workers", "open_rate", "threads" }

local by_name = {}
for _, name in ipairs(_M.KINDS) do
  by_name[name] = require("nresrun.load." .. name)
end

-- The kind module called `name`, or nil: a shipped kind, or a module
-- nresrun.load.<name> (a plain identifier) whose name field is `name`.
function _M.get(name)
  local k = by_name[name]
  if k ~= nil or type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then return k end
  local ok, mod = pcall(require, "nresrun.load." .. name)
  if ok and type(mod) == "table" and mod.name == name then
    by_name[name] = mod
    return mod
  end
  return nil
end

-- The kind a load table names: the one with companions (fields it reads
-- besides its own, as threads reads workers) if any, else the first by
-- name; nil when it names none.
local function order(kind) return kind.companions and 0 or 1 end

function _M.of(load)
  local best
  for k in pairs(load) do
    local kind = _M.get(k)
    if kind and (not best or order(kind) < order(best)
                 or order(kind) == order(best) and kind.name < best.name) then
      best = kind
    end
  end
  return best
end

-- Whether results of this kind were offered a fixed rate (an open loop):
-- their ops/s is the offered rate, whatever the arm does.
function _M.is_open(name)
  local k = _M.get(name)
  return k ~= nil and k.loop == "open"
end

return _M

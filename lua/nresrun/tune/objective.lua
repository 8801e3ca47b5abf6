-- SPDX-License-Identifier: MIT
-- nresrun.tune.objective: what a user asks of a policy, and the score of
-- one simulated run against it.
--
--   objective = {
--     use = "interactive",                    -- or "batch": the defaults below
--     slo = { latency = 0.25, quantile = 0.99 },  -- interactive default: the trace's healthy p99
--     weights = { goodput = 1, load = 0.1, recovery = 0.5, requests = 0.1 },
--   }
--
-- The score is in points (higher is better):
--   goodput x (calls that succeeded within slo.latency, per arrival, in %;
--              batch, no slo: calls that succeeded)
-- - load    x (dependency requests per arrival while it is down, x 100;
--              plus, where its capacity drops, the share of its capacity
--              it was sent beyond it, in %)
-- - requests x (dependency requests per arrival beyond one, over the
--              whole run, in %: retries and hedges cost even when healthy)
-- - recovery x (seconds from the end of the last disruption until the
--              success ratio is back to 95 % of healthy; never: the rest
--              of the run)
-- So with the default weights 0.05 requests per call to a dead dependency
-- costs 0.5 points, sending 10 % over its capacity 1 point, 2 % more
-- requests in all 0.2 points, and each second of recovery half a point.
local schema = require "nres.schema"
local format, max = string.format, math.max
local describe = schema.describe

local _M = { _VERSION = "0.1.0" }

_M.uses = {
  interactive = { weights = { goodput = 1, load = 0.1, recovery = 0.5, requests = 0.1 }, slo = true },
  batch = { weights = { goodput = 1, load = 0.1, recovery = 0.1, requests = 0.1 }, slo = false },
}

local fields = { use = true, slo = true, weights = true }
local weight_fields = { goodput = true, load = true, recovery = true, requests = true }

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end

-- The objective `o` (nil: interactive) with its defaults, for a trace whose
-- healthy p99 is `healthy_p99_s`; or nil, error.
function _M.new(o, healthy_p99_s)
  o = o or {}
  if type(o) ~= "table" then return nil, "objective: expected a table { use, slo, weights }, got " .. describe(o) end
  for k in pairs(o) do
    if not fields[k] then return nil, format("objective.%s: unknown field (use, slo, weights)", tostring(k)) end
  end
  local use = o.use or "interactive"
  local d = _M.uses[use]
  if not d then return nil, format('objective.use: expected "interactive" or "batch", got %s', describe(use)) end
  local w = {}
  for k, v in pairs(d.weights) do w[k] = v end
  if o.weights ~= nil then
    if type(o.weights) ~= "table" then return nil, "objective.weights: expected a table, got " .. describe(o.weights) end
    for k, v in pairs(o.weights) do
      if not weight_fields[k] then
        return nil, format("objective.weights.%s: unknown weight (goodput, load, recovery, requests)", tostring(k))
      end
      if not (finite(v) and v >= 0) then
        return nil, format("objective.weights.%s: expected a number >= 0, got %s", k, describe(v))
      end
      w[k] = v
    end
  end
  local slo
  if o.slo ~= nil then
    if type(o.slo) ~= "table" then return nil, "objective.slo: expected { latency = s, quantile = q }, got " .. describe(o.slo) end
    local l, q = o.slo.latency, o.slo.quantile or 0.99
    if l ~= nil and not (finite(l) and l > 0 and l <= 3600) then
      return nil, "objective.slo.latency: expected seconds (> 0, at most 3600), got " .. describe(l)
    end
    if not (finite(q) and q > 0 and q < 1) then
      return nil, "objective.slo.quantile: expected a share in (0, 1), got " .. describe(q)
    end
    slo = { latency = l or healthy_p99_s, quantile = q, from = l and "stated" or "the trace's healthy p99" }
  elseif d.slo then
    slo = { latency = healthy_p99_s, quantile = 0.99, from = "the trace's healthy p99" }
  end
  return { use = use, slo = slo, weights = w }
end

-- The score of measure `m` (nresrun.sim.tournament.measure) and its parts.
function _M.score(obj, m, duration)
  local w = obj.weights
  local good = (obj.slo and m.goodput or m.success) * 100
  local load = (m.down_req_per_op or 0) * 100
  if m.load_rps and m.capacity_rps and m.capacity_rps < math.huge then
    load = load + max(0, m.load_rps / m.capacity_rps - 1) * 100
  end
  local rec = 0
  if m.recovery_s ~= nil then rec = m.recovery_s or duration end
  local extra = max(0, (m.req_per_op or 1) - 1) * 100
  local s = w.goodput * good - w.load * load - w.recovery * rec - w.requests * extra
  return s, { good = good, load = load, recovery = rec, extra = extra }
end

return _M

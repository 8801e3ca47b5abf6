-- nresrun.sim: the simulation DSL of nresrun, checked at the file's line.
--
--   return nresrun.simulation{
--     name = "sim-outage",
--     policies = { default = "default", trivial = "trivial",
--                  ["no-budget"] = nres.policy{ budget = false } },   -- or policy = ...
--     dependency = {
--       latency = { lognormal = { 0.02, 0.5 } },
--       capacity = { concurrency = 16, queue = 32 },
--       phases = { { name = "outage", from = 60, to = 90, fail = 1 } },
--     },
--     load = { rate = 400 },             -- open loop, arrivals/s ("poisson" or "fixed")
--     duration = 300,                    -- simulated seconds
--     seed = 1,
--   }
--
-- `nresrun FILE.lua` sees that the file returned a simulation and calls
-- main(): each policy runs in turn against its own fresh instance of the
-- dependency on a virtual clock (nresrun.sim.run), with a policy built afresh
-- (so no breaker or budget state leaks from one run into the next), and
-- the same arrivals; the report (nresrun.sim.report) goes to
-- <out>/<name>-<UTC stamp>.md, .json and .svg. This file holds the
-- declaration, its checks, and that orchestration.
local schema = require "nres.schema"
local dep = require "nresrun.dep"
local simdep = require "nresrun.sim.dep"
local policy_mod = require "nres.policy"

local type, pairs, ipairs, format, floor = type, pairs, ipairs, string.format, math.floor
local describe = schema.describe

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

local MAX_ARRIVALS = 20000000     -- per policy: a few seconds of real time each
local MAX_DURATION = 86400

local fields = {
  name = true, description = true, policy = true, policies = true, dependency = true,
  load = true, duration = true, seed = true, max_inflight = true, grace = true,
}
local load_fields = { rate = true, arrivals = true }

local function suggest(key, set)
  local names = {}
  for k in pairs(set) do names[#names + 1] = k end
  table.sort(names)
  for _, n in ipairs(names) do
    if n:sub(1, 3) == tostring(key):sub(1, 3) then return format(' (did you mean "%s"?)', n) end
  end
  return " (valid: " .. table.concat(names, ", ") .. ")"
end

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function int(v, lo, hi) return finite(v) and v == floor(v) and v >= lo and v <= hi end

local function is_policy(v) return type(v) == "table" and v.cp ~= nil and type(v.run) == "function" end

-- The problem with one policy entry, or nil.
local function check_policy(path, v)
  if type(v) == "string" then
    local ok, t = pcall(policy_mod.resolve, v)
    if not ok or not t then return format("%s: unknown preset %s", path, describe(v)) end
    if type(t.budget) == "string" then
      return format("%s: preset %s uses the named budget %s, shared by the whole process; a simulation needs fresh state per run",
                    path, describe(v), describe(t.budget))
    end
    return nil
  end
  if not is_policy(v) then
    return format("%s: expected a policy (nres.policy{...}) or a preset name, got %s", path, describe(v))
  end
  if type(v.spec.budget) == "string" then
    return format("%s.budget: the named budget %s is shared by the whole process; a simulation needs fresh state per run (give a budget table)",
                  path, describe(v.spec.budget))
  end
  return nil
end

-- nresrun.simulation{...}: checked now, so a mistake points at the file.
function _M.new(t, level)
  level = (level or 1) + 1
  local at = dep.where(level)
  if type(t) ~= "table" then
    error(format("%s: nresrun.simulation: expected a table, got %s", at, describe(t)), 0)
  end
  local problems = {}
  local function bad(fmt, ...) problems[#problems + 1] = format(fmt, ...) end
  for k in pairs(t) do
    if not fields[k] then bad("simulation.%s: unknown field%s", tostring(k), suggest(k, fields)) end
  end
  if t.name ~= nil and (type(t.name) ~= "string" or not t.name:match("^[%w_%-%.]+$")) then
    bad("simulation.name: expected a name of letters, digits, '-', '_' or '.', got %s", describe(t.name))
  end
  if t.description ~= nil and type(t.description) ~= "string" then
    bad("simulation.description: expected a string, got %s", describe(t.description))
  end

  local duration = t.duration
  if duration == nil then
    bad("simulation.duration: missing (simulated seconds)")
    duration = nil
  elseif not (finite(duration) and duration == floor(duration) and duration >= 1 and duration <= MAX_DURATION) then
    bad("simulation.duration: expected whole simulated seconds from 1 to %d, got %s", MAX_DURATION, describe(duration))
    duration = nil
  end
  if t.seed ~= nil and not int(t.seed, 0, 2 ^ 31 - 2) then
    bad("simulation.seed: expected an integer from 0 to 2147483646, got %s", describe(t.seed))
  end
  if t.max_inflight ~= nil and not int(t.max_inflight, 1, 1000000) then
    bad("simulation.max_inflight: expected an integer from 1 to 1000000, got %s", describe(t.max_inflight))
  end
  if t.grace ~= nil and not (finite(t.grace) and t.grace >= 0 and t.grace <= 3600) then
    bad("simulation.grace: expected simulated seconds from 0 to 3600, got %s", describe(t.grace))
  end

  -- policy or policies
  local list = {}
  if t.policy ~= nil and t.policies ~= nil then
    bad("simulation.policies: give policy = ... or policies = { name = ... }, not both")
  elseif t.policy ~= nil then
    local why = check_policy("simulation.policy", t.policy)
    if why then bad("%s", why) end
    list[1] = { name = type(t.policy) == "string" and t.policy or "policy", spec = t.policy }
  elseif t.policies ~= nil then
    if type(t.policies) ~= "table" or next(t.policies) == nil then
      bad("simulation.policies: expected a table of name = policy or preset name, got %s", describe(t.policies))
    else
      for name, v in pairs(t.policies) do
        if type(name) ~= "string" or not name:match("^[%w_%-%.]+$") then
          bad("simulation.policies[%s]: expected a name of letters, digits, '-', '_' or '.'", describe(name))
        else
          local why = check_policy("simulation.policies." .. name, v)
          if why then bad("%s", why) end
          list[#list + 1] = { name = name, spec = v }
        end
      end
      table.sort(list, function(a, b) return a.name < b.name end)
    end
  else
    bad("simulation.policy: missing (a policy, a preset name, or policies = { name = policy, ... })")
  end

  if t.dependency == nil then
    bad("simulation.dependency: missing (a table: latency, fail_prob, fail_every, capacity, phases)")
  else
    for _, p in ipairs(simdep.check(t.dependency, "simulation.dependency", duration)) do bad("%s", p) end
  end

  local load = t.load
  if type(load) ~= "table" then
    bad("simulation.load: expected { rate = arrivals per second }, got %s", describe(load))
  else
    for k in pairs(load) do
      if not load_fields[k] then bad("simulation.load.%s: unknown field%s", tostring(k), suggest(k, load_fields)) end
    end
    if not (finite(load.rate) and load.rate > 0) then
      bad("simulation.load.rate: expected arrivals per second (> 0), got %s", describe(load.rate))
    elseif duration and load.rate * duration > MAX_ARRIVALS then
      bad("simulation.load.rate: %s arrivals/s for %d s is %.0f arrivals per policy; at most %d (lower the rate or the duration)",
          describe(load.rate), duration, load.rate * duration, MAX_ARRIVALS)
    end
    if load.arrivals ~= nil and load.arrivals ~= "poisson" and load.arrivals ~= "fixed" then
      bad('simulation.load.arrivals: expected "poisson" or "fixed", got %s', describe(load.arrivals))
    end
  end

  -- Level 0: the message already starts with the caller's file:line ("?"
  -- when nresrun.simulation was a tail call; nresrun then finds the line).
  if #problems > 0 then
    table.sort(problems)
    error(at .. ": " .. (#problems == 1 and problems[1]
      or format("%d problems:\n  %s", #problems, table.concat(problems, "\n  "))), 0)
  end
  return setmetatable({ spec = t, where = at, policies = list }, mt)
end

function _M.is_simulation(v)
  return type(v) == "table" and getmetatable(v) == mt
end

-- A fresh policy for one run: same configuration, new breaker, budget,
-- estimator and counters, jitter seeded from the simulation's seed (unless
-- the policy sets its own).
local function fresh(spec, seed)
  if type(spec) == "string" then
    return policy_mod.new({ base = spec, seed = seed }, 2)
  end
  local t = {}
  for k, v in pairs(spec.spec) do t[k] = v end
  t.base = "none"           -- spec.spec is already merged: "none" adds nothing
  if t.seed == nil then t.seed = seed end
  return policy_mod.new(t, 2)
end
_M.fresh = fresh

-- Run every policy (opts.only: a Lua pattern on the name; opts.seed
-- overrides the file's). Returns the report document (nresrun.sim.report).
function _M.run(self, opts)
  opts = opts or {}
  local t = self.spec
  local seed = opts.seed or t.seed or 1
  local d = t.dependency
  local runs = {}
  for _, entry in ipairs(self.policies) do
    if not opts.only or entry.name:find(opts.only) then
      local r = require("nresrun.sim.run").run{
        policy = fresh(entry.spec, seed),
        dependency = d,
        rate = t.load.rate,
        arrivals = t.load.arrivals or "poisson",
        duration_s = t.duration,
        seed = seed,
        max_inflight = t.max_inflight or 100000,
        grace_s = t.grace or 120,
      }
      r.policy = entry.name
      r.policy_label = type(entry.spec) == "string" and ("preset " .. entry.spec) or "nres.policy{...}"
      runs[#runs + 1] = r
    end
  end
  local phases = {}
  for i, p in ipairs(d.phases or {}) do
    phases[i] = { name = p.name or ("phase " .. i), from = p.from, to = p.to,
                  fail = p.fail or 0, latency_factor = p.latency_factor or 1 }
  end
  return {
    kind = "simulation",
    simulation = t.name or "simulation",
    description = t.description,
    seed = seed,
    duration_s = t.duration,
    load = { rate = t.load.rate, arrivals = t.load.arrivals or "poisson" },
    dependency = { label = simdep.label(d), phases = phases, capacity = d.capacity,
                   latency = d.latency, fail_prob = d.fail_prob, fail_every = d.fail_every },
    runs = runs,
  }
end

-- nresrun's entry for a simulation file. Options: --seed, --only (a Lua
-- pattern on policy names), --out (default artifacts/sim), --list; --quick
-- is accepted and changes nothing (a simulation is already quick); the
-- real-time options are refused. Exit code: 0 when every policy ran and
-- its accounting holds, 1 otherwise, 2 for bad usage.
function _M.main(self, path, opts)
  opts = opts or {}
  local report = require "nresrun.sim.report"
  local name = self.spec.name or path:match("([^/]+)%.lua$") or "simulation"
  for _, o in ipairs { "warmup", "window", "repetitions", "max_minutes", "cell", "rep" } do
    if opts[o] ~= nil then
      io.stderr:write("nresrun: --", (o:gsub("_", "-")), " has no meaning for a simulation (",
                      path, " runs each policy once on a virtual clock)\n")
      return 2
    end
  end
  if opts.list then
    for _, e in ipairs(self.policies) do
      if not opts.only or e.name:find(opts.only) then
        print(format("%s  (%s)", e.name, type(e.spec) == "string" and "preset " .. e.spec or "nres.policy{...}"))
      end
    end
    return 0
  end
  local started = os.time()
  local doc = self:run(opts)
  if #doc.runs == 0 then
    io.stderr:write("nresrun: no policy matches --only ", tostring(opts.only), "\n")
    return 2
  end
  doc.simulation = name
  doc.started = os.date("!%Y-%m-%d %H:%M:%S", started)
  doc.versions = { nres = require("nres").version, luajit = jit and jit.version or "?" }
  local stem = name .. "-" .. os.date("!%Y%m%dT%H%M%SZ", started)
  local paths = report.write(doc, opts.out or "artifacts/sim", stem)
  io.stdout:write(report.markdown(doc, { every = report.print_step(doc.duration_s) }), "\n")
  print(format("reports: %s %s %s", paths.md, paths.json, paths.svg))
  for _, r in ipairs(doc.runs) do
    if not r.totals.identity_ok then
      io.stderr:write("nresrun: ", r.policy, ": arrivals do not add up to outcomes\n")
      return 1
    end
  end
  return 0
end

return _M

-- SPDX-License-Identifier: MIT
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
--     slo = { latency = 0.25, quantile = 0.99 },   -- optional: goodput
--   }
--
-- slo: a share `quantile` (default 0.99) of calls should succeed within
-- `latency` seconds (default: measured - the latency of that quantile of
-- calls made with no policy while the dependency is healthy). With it the reports give goodput
-- (calls that succeeded within the latency, per arrival) beside success,
-- and the verdict ranks by goodput. A tournament always reports goodput,
-- with the tournament's or the scenario's slo, else the default.
--
-- The tournament form runs several scenarios over several seeds instead
-- of one dependency (nresrun.sim.tournament; bench/tournament.lua):
--
--   return nresrun.simulation{
--     name = "tournament",
--     policies = { "none", "trivial", "default" },   -- presets, in this order
--     seeds = { 1, 2, 3, 4, 5 },
--     scenarios = {
--       { name = "outage", dependency = { ... }, load = { rate = 400 }, duration = 180 },
--       ...
--     },
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
  scenarios = true, seeds = true, slo = true,
}
-- What one run needs: the top level of a plain simulation, or a scenario.
local run_fields = { dependency = true, load = true, duration = true, max_inflight = true, grace = true }
local scenario_fields = { name = true, description = true, slo = true }
for k in pairs(run_fields) do scenario_fields[k] = true end
local MAX_SEEDS = 1000
local load_fields = { rate = true, arrivals = true }
local slo_fields = { latency = true, quantile = true }

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
    local ok, t, why = pcall(policy_mod.resolve, v)
    if not ok or not t then   -- resolve's own words: the nearest preset, the list
      return format("%s: %s", path, ok and why or format("unknown preset %s", describe(v)))
    end
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

-- The problems with an slo table at `path`.
local function check_slo(v, path, bad)
  if v == nil then return end
  if type(v) ~= "table" then
    bad("%s: expected { latency = seconds, quantile = share }, got %s", path, describe(v))
    return
  end
  for k in pairs(v) do
    if not slo_fields[k] then bad("%s.%s: unknown field%s", path, tostring(k), suggest(k, slo_fields)) end
  end
  if v.latency ~= nil and not (finite(v.latency) and v.latency > 0 and v.latency <= 3600) then
    bad("%s.latency: expected seconds (> 0, at most 3600), got %s", path, describe(v.latency))
  end
  if v.quantile ~= nil and not (finite(v.quantile) and v.quantile > 0 and v.quantile < 1) then
    bad("%s.quantile: expected a share of calls in (0, 1), e.g. 0.99, got %s", path, describe(v.quantile))
  end
end

-- The slo of a run: { latency = s, quantile = q, measured = bool } from
-- table `v` (nil: nil unless `always`). Without a latency, it is measured:
-- the quantile q of successful calls made with no policy to the
-- dependency without its phases (healthy), under the run's load, for up
-- to 60 simulated seconds with the given seed.
function _M.slo_of(v, run, seed, always)
  if v == nil and not always then return nil end
  v = v or {}
  local q = v.quantile or 0.99
  if v.latency then return { latency = v.latency, quantile = q, measured = false } end
  local healthy = {}
  for k, x in pairs(run.dependency) do if k ~= "phases" then healthy[k] = x end end
  local r = require("nresrun.sim.run").run{
    policy = policy_mod.new({ base = "none", seed = seed }, 2), dependency = healthy,
    rate = run.load.rate, arrivals = run.load.arrivals or "poisson",
    duration_s = math.min(run.duration, 60), seed = seed, max_inflight = run.max_inflight or 100000,
    grace_s = 10, ok_quantile = q,
  }
  return { latency = (r.totals.ok_quantile_ms or 0) / 1000, quantile = q, measured = true }
end

-- The checks of what one run needs (duration, dependency, load,
-- max_inflight, grace) in table `t`, its problems named from `path`
-- ("simulation" or "simulation.scenarios[2]").
local function check_run(t, path, bad)
  local duration = t.duration
  if duration == nil then
    bad("%s.duration: missing (simulated seconds)", path)
    duration = nil
  elseif not (finite(duration) and duration == floor(duration) and duration >= 1 and duration <= MAX_DURATION) then
    bad("%s.duration: expected whole simulated seconds from 1 to %d, got %s", path, MAX_DURATION, describe(duration))
    duration = nil
  end
  if t.max_inflight ~= nil and not int(t.max_inflight, 1, 1000000) then
    bad("%s.max_inflight: expected an integer from 1 to 1000000, got %s", path, describe(t.max_inflight))
  end
  if t.grace ~= nil and not (finite(t.grace) and t.grace >= 0 and t.grace <= 3600) then
    bad("%s.grace: expected simulated seconds from 0 to 3600, got %s", path, describe(t.grace))
  end

  if t.dependency == nil then
    bad("%s.dependency: missing (a table: latency, fail_prob, fail_every, capacity, phases)", path)
  else
    for _, p in ipairs(simdep.check(t.dependency, path .. ".dependency", duration)) do bad("%s", p) end
  end

  local load = t.load
  if type(load) ~= "table" then
    bad("%s.load: expected { rate = arrivals per second }, got %s", path, describe(load))
  else
    for k in pairs(load) do
      if not load_fields[k] then bad("%s.load.%s: unknown field%s", path, tostring(k), suggest(k, load_fields)) end
    end
    if not (finite(load.rate) and load.rate > 0) then
      bad("%s.load.rate: expected arrivals per second (> 0), got %s", path, describe(load.rate))
    elseif duration and load.rate * duration > MAX_ARRIVALS then
      bad("%s.load.rate: %s arrivals/s for %d s is %.0f arrivals per policy; at most %d (lower the rate or the duration)",
          path, describe(load.rate), duration, load.rate * duration, MAX_ARRIVALS)
    end
    if load.arrivals ~= nil and load.arrivals ~= "poisson" and load.arrivals ~= "fixed" then
      bad('%s.load.arrivals: expected "poisson" or "fixed", got %s', path, describe(load.arrivals))
    end
  end
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
  if t.seed ~= nil and not int(t.seed, 0, 2 ^ 31 - 2) then
    bad("simulation.seed: expected an integer from 0 to 2147483646, got %s", describe(t.seed))
  end
  check_slo(t.slo, "simulation.slo", bad)

  -- One run (dependency, load, duration) or a tournament (scenarios, seeds).
  local scenarios
  if t.scenarios == nil then
    check_run(t, "simulation", bad)
    if t.seeds ~= nil then
      bad("simulation.seeds: only with scenarios = { ... } (one run takes seed = n)")
    end
  else
    for k in pairs(run_fields) do
      if t[k] ~= nil then
        bad("simulation.%s: give it per scenario (simulation.scenarios[i].%s) in a tournament", k, k)
      end
    end
    if t.seed ~= nil then bad("simulation.seed: a tournament takes seeds = { ... }") end
    local sc = t.scenarios
    if type(sc) ~= "table" or sc[1] == nil then
      bad("simulation.scenarios: expected a list of { name, dependency, load, duration }, got %s", describe(sc))
    else
      scenarios = {}
      local seen = {}
      for k in pairs(sc) do
        if not int(k, 1, #sc) then bad("simulation.scenarios[%s]: expected a list (keys 1..n)", describe(k)) end
      end
      for i, s in ipairs(sc) do
        local path = format("simulation.scenarios[%d]", i)
        if type(s) ~= "table" then
          bad("%s: expected a table { name, dependency, load, duration }, got %s", path, describe(s))
        else
          for k in pairs(s) do
            if not scenario_fields[k] then bad("%s.%s: unknown field%s", path, tostring(k), suggest(k, scenario_fields)) end
          end
          if type(s.name) ~= "string" or not s.name:match("^[%w_%-%.]+$") then
            bad("%s.name: expected a name of letters, digits, '-', '_' or '.', got %s", path, describe(s.name))
          elseif seen[s.name] then
            bad("%s.name: %s is also scenarios[%d]", path, describe(s.name), seen[s.name])
          else
            seen[s.name] = i
          end
          if s.description ~= nil and type(s.description) ~= "string" then
            bad("%s.description: expected a string, got %s", path, describe(s.description))
          end
          check_run(s, path, bad)
          check_slo(s.slo, path .. ".slo", bad)
          scenarios[i] = s
        end
      end
    end
    local seeds = t.seeds
    if seeds == nil then
      bad("simulation.seeds: missing (a list of integer seeds, e.g. { 1, 2, 3, 4, 5 })")
    elseif type(seeds) ~= "table" or seeds[1] == nil or #seeds > MAX_SEEDS then
      bad("simulation.seeds: expected a list of 1 to %d integer seeds, got %s", MAX_SEEDS, describe(seeds))
    else
      for i, v in ipairs(seeds) do
        if not int(v, 0, 2 ^ 31 - 2) then
          bad("simulation.seeds[%d]: expected an integer from 0 to 2147483646, got %s", i, describe(v))
        end
      end
    end
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
    elseif t.policies[1] ~= nil then
      -- A list of preset names, run and reported in this order.
      for k, v in pairs(t.policies) do
        local i = int(k, 1, #t.policies) and k or nil
        if not i then
          bad("simulation.policies[%s]: a list of preset names cannot also have named entries", describe(k))
        elseif type(v) ~= "string" then
          bad("simulation.policies[%d]: expected a preset name in a list (name = nres.policy{...} in a table), got %s",
              i, describe(v))
        else
          local why = check_policy(format("simulation.policies[%d]", i), v)
          if why then bad("%s", why) end
        end
      end
      for i, v in ipairs(t.policies) do
        for j = 1, i - 1 do
          if t.policies[j] == v then bad("simulation.policies[%d]: %s is also policies[%d]", i, describe(v), j) end
        end
        list[i] = { name = tostring(v), spec = v }
      end
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

  -- Level 0: the message already starts with the caller's file:line ("?"
  -- when nresrun.simulation was a tail call; nresrun then finds the line).
  if #problems > 0 then
    table.sort(problems)
    error(at .. ": " .. (#problems == 1 and problems[1]
      or format("%d problems:\n  %s", #problems, table.concat(problems, "\n  "))), 0)
  end
  return setmetatable({ spec = t, where = at, policies = list, scenarios = scenarios }, mt)
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
  if self.scenarios then return require("nresrun.sim.tournament").run(self, opts) end
  local t = self.spec
  local seed = opts.seed or t.seed or 1
  local d = t.dependency
  local slo = _M.slo_of(t.slo, t, seed)
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
        slo_s = slo and slo.latency,
      }
      r.policy = entry.name
      r.policy_label = type(entry.spec) == "string" and ("preset " .. entry.spec) or "nres.policy{...}"
      runs[#runs + 1] = r
    end
  end
  local phases = {}
  for i, p in ipairs(d.phases or {}) do
    phases[i] = { name = p.name or ("phase " .. i), from = p.from, to = p.to,
                  fail = p.fail or 0, latency_factor = p.latency_factor or 1,
                  capacity = p.capacity or 1, ramp = p.ramp }
  end
  return {
    kind = "simulation",
    simulation = t.name or "simulation",
    description = t.description,
    seed = seed,
    duration_s = t.duration,
    slo = slo,
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
  if opts.list then   -- the policies (and a tournament's scenarios); nothing runs
    for _, e in ipairs(self.policies) do
      if not opts.only or e.name:find(opts.only) then
        print(format("%s  (%s)", e.name, type(e.spec) == "string" and "preset " .. e.spec or "nres.policy{...}"))
      end
    end
    for _, sc in ipairs(self.scenarios or {}) do print(format("scenario %s  (%g s)", sc.name, sc.duration)) end
    return 0
  end
  if self.scenarios then return require("nresrun.sim.tournament").main(self, path, opts) end
  local report = require "nresrun.sim.report"
  local name = self.spec.name or path:match("([^/]+)%.lua$") or "simulation"
  for _, o in ipairs { "warmup", "window", "repetitions", "max_minutes", "cell", "rep" } do
    if opts[o] ~= nil then
      io.stderr:write("nresrun: --", (o:gsub("_", "-")), " has no meaning for a simulation (",
                      path, " runs each policy once on a virtual clock)\n")
      return 2
    end
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
  io.stdout:write(report.terminal(doc, paths), "\n")
  for _, r in ipairs(doc.runs) do
    if not r.totals.identity_ok then
      io.stderr:write("nresrun: ", r.policy, ": arrivals do not add up to outcomes\n")
      return 1
    end
  end
  return 0
end

return _M

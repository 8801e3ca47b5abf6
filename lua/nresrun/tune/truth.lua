-- SPDX-License-Identifier: MIT
-- nresrun.tune.truth: the tuner checked against a known dependency. For a
-- simulated scenario (a tournament's { dependency, load, duration }) a
-- trace is recorded with no policy (trace_seed), fitted, tuned on, and the
-- tuned policy and every preset run on the true scenario over `seeds`,
-- scored by the same objective (spec/lua/tune_spec.lua asserts the tuned
-- policy's mean >= the best preset's for every scenario of
-- bench/tournament.lua; bench/tune-truth.lua prints the table of
-- docs/tune.md).
--
-- shorten(sc, lead, tail[, span]) is the scenario with its healthy lead-in
-- cut to `lead` seconds, its phases squeezed in time to `span` seconds
-- from the first's start to the last's end (ramps too), and its run
-- ending `tail` seconds after the last phase (a phase that lasts to the
-- run's end still does; a scenario without phases lasts lead + tail):
-- the same kinds of disruption with fewer calls, so a test can afford ten
-- seeds of every scenario.
local trace = require "nresrun.tune.trace"
local fit = require "nresrun.tune.fit"
local search = require "nresrun.tune.search"
local objective = require "nresrun.tune.objective"
local tournament = require "nresrun.sim.tournament"
local simrun = require "nresrun.sim.run"
local policy_mod = require "nres.policy"

local format, min, max = string.format, math.min, math.max

local _M = { _VERSION = "0.1.0" }

local copy = search.copy

function _M.shorten(sc, lead, tail, span)
  local t = copy(sc)
  local phases = t.dependency.phases or {}
  local D = t.duration
  if #phases == 0 then
    t.duration = min(D, lead + tail)
    return t
  end
  local first, last = D, 0
  for _, p in ipairs(phases) do first, last = min(first, p.from), max(last, p.to) end
  local start = min(first, lead)
  local f = (span and last - first > span) and span / (last - first) or 1
  local function at(x) return start + (x - first) * f end
  for _, p in ipairs(phases) do
    p.from, p.to = at(p.from), at(p.to)
    if p.ramp then p.ramp = p.ramp * f end
  end
  t.duration = at(last) + min(tail, D - last)   -- a phase to the run's end stays so
  return t
end

-- The mean score of merged policy table `spec` on scenario `sc` over seeds.
function _M.score(sc, spec, obj, seeds)
  local info = tournament.shape(sc)
  local total = 0
  for _, seed in ipairs(seeds) do
    local t = copy(spec)
    t.base, t.seed = "none", seed
    local r = simrun.run{
      policy = policy_mod.new(t, 2), dependency = sc.dependency, rate = sc.load.rate,
      arrivals = sc.load.arrivals or "poisson", duration_s = sc.duration, seed = seed,
      max_inflight = 100000, grace_s = 30, slo_s = obj.slo and obj.slo.latency,
    }
    total = total + objective.score(obj, tournament.measure(r, sc, info), sc.duration)
  end
  return total / #seeds
end

-- check(sc, opts) -> { name, model, result (nresrun.tune.search.run),
-- truth = { [preset] = mean }, best_name, best (the best preset's mean),
-- tuned (the tuned policy's mean) }. opts: seeds (default 1-10),
-- trace_seed (100), use ("interactive"), dir (for the trace file),
-- search_seeds ({ 1 }).
function _M.check(sc, opts)
  opts = opts or {}
  local seeds = opts.seeds or { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }
  local path = format("%s/%s.csv", opts.dir or "/tmp", sc.name or "scenario")
  trace.write_csv(path, trace.simulate(sc, opts.trace_seed or 100))
  local model = assert(fit.fit(assert(trace.read(path))))
  os.remove(path)
  local obj = assert(objective.new({ use = opts.use or "interactive" }, model.healthy.p99_s))
  local r = search.run(model, obj, { seeds = opts.search_seeds or { 1 } })
  local out = { name = sc.name, model = model, result = r, objective = obj, truth = {}, best = -math.huge }
  for _, p in ipairs(r.presets) do
    local s = _M.score(sc, p.spec, obj, seeds)
    out.truth[p.name] = s
    if s > out.best then out.best, out.best_name = s, p.name end
  end
  -- The tuned policy is a preset unchanged when the search found no more
  -- than the margin: its truth is that preset's.
  out.tuned = #r.best.changes == 0 and out.truth[r.best.base] or _M.score(sc, r.best.spec, obj, seeds)
  return out
end

return _M

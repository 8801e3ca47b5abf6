-- SPDX-License-Identifier: MIT
-- nresrun.tune.search: the presets and a search over the main knobs, each
-- replayed on the simulator against a fitted model (nresrun.tune.fit) with
-- the trace's own arrivals, scored by an objective (nresrun.tune.objective).
--
-- The search starts from the best preset and moves one knob at a time
-- (attempts, backoff base, the wait after a throttled answer, budget
-- ratio, breaker threshold and break, attempt timeout, throttle, hedge): each
-- value of a knob is tried with the others held, the best kept when it
-- beats the incumbent, for PASSES passes. The result replaces the preset
-- only when it beats it by more than MARGIN points (the verdict's "same":
-- less is the noise of a seed, and a preset is the better-known choice);
-- otherwise the preset is the answer and result.searched says what the
-- search reached. Each candidate runs on every seed in opts.seeds; its
-- score is the mean.
--
-- Two guards against a replay that flatters:
-- - Capacity the trace never proved. Without refusals the model has no
--   capacity limit, so more requests look free. A policy that sends more
--   than UNPROVEN x the trace's requests in some window where the
--   dependency answered (most_vs_trace) is then not eligible: neither as
--   the best preset nor as a move of the search (result.unproven names the
--   presets set aside).
-- - The winner's curse. The search keeps the best of many noisy replays,
--   so its gain is biased up. The result is replayed again, with the
--   preset, on CHECK more seeds it never saw; it replaces the preset only
--   when it still beats it by more than MARGIN there, the same rule on a
--   score that was not selected (result.check). A gain of 0 there let a
--   loss through: outage-quiet, shortened, +0.57 on the search's seed and
--   -0.05 on the truth.
local simrun = require "nresrun.sim.run"
local tournament = require "nresrun.sim.tournament"
local policy_mod = require "nres.policy"
local objective = require "nresrun.tune.objective"
local fit = require "nresrun.tune.fit"

local _M = { _VERSION = "0.1.0" }

_M.PRESETS = { "none", "trivial", "default", "http", "gateway", "batch" }
_M.MARGIN = require("nresrun.sim.verdict").SAME_POINTS
_M.PASSES = 2
_M.UNPROVEN = 1.05
_M.CHECK = 3

local function copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  return t
end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- The knobs: name, how to set a value on a merged policy table, the values
-- tried (`p99` is the trace's healthy p99 in seconds).
local function knobs(p99)
  local function set_path(a, b)
    return function(t, v)
      if b then
        if type(t[a]) ~= "table" then return false end
        t[a][b] = v
      else
        t[a] = v
      end
      return true
    end
  end
  return {
    { name = "attempts", set = set_path("attempts"), values = { 1, 2, 3, 4, 5 } },
    { name = "backoff.base", set = set_path("backoff", "base"), values = { 0.01, 0.025, 0.1, 0.4 } },
    { name = "backoff.throttled_base", set = set_path("backoff", "throttled_base"), values = { 0.05, 0.25, 1 } },
    { name = "budget.ratio", set = set_path("budget", "ratio"), values = { 0.05, 0.1, 0.2, 0.5 } },
    { name = "breaker.consecutive", set = set_path("breaker", "consecutive"), values = { 5, 10, 20, 40 } },
    { name = "breaker.break_for", values = { 0.25, 0.55, 1, 2 },
      set = function(t, v)
        if type(t.breaker) ~= "table" then return false end
        t.breaker.break_for, t.breaker.break_max = v, v
        return true
      end },
    { name = "attempt_timeout", set = set_path("attempt_timeout"),
      values = { math.max(0.001, 2 * p99), math.max(0.001, 5 * p99), 2, 10 } },
    { name = "throttle.k", set = set_path("throttle", "k"), values = { 1.03, 1.1, 1.5 } },
    { name = "hedge", values = { false, { at = "p95", max = 2 }, { at = "p99", max = 2 } },
      set = function(t, v)   -- a hedge is an attempt: at least max of them
        t.hedge = v
        if v and (t.attempts or 1) < v.max then t.attempts = v.max end
        return true
      end },
  }
end
_M.knobs = knobs

-- The scenario the measures read: the fitted dependency over the trace's span.
local function scenario_of(model)
  return { dependency = fit.sim_dependency(model), duration = model.duration }
end

-- Run merged policy table `spec` (or a preset name) on the model; the
-- mean score over seeds and the first seed's measure.
function _M.evaluate(model, obj, spec, seeds)
  local sc = scenario_of(model)
  local info = tournament.shape(sc)
  local total, first, parts = 0, nil, nil
  for i, seed in ipairs(seeds) do
    local t = copy(spec)
    t.base, t.seed = "none", seed
    local r = simrun.run{
      policy = policy_mod.new(t, 2), dependency = sc.dependency, times = model.arrivals,
      duration_s = model.duration, seed = seed, max_inflight = 100000, grace_s = 30,
      slo_s = obj.slo and obj.slo.latency,
    }
    local m = tournament.measure(r, sc, info)
    local s, p = objective.score(obj, m, model.duration)
    total = total + s
    if i == 1 then
      first, parts = m, p
      -- The most the dependency got in a window against what the trace
      -- shows it served then: beyond that, the model's capacity is a guess.
      local dep, width, most = r.series.dep_requests, model.window, 0
      for wi, w in ipairs(model.windows) do
        if w.tries >= 50 and w.failed * 2 < w.tries then   -- where it answered
          local n = 0
          for sec = (wi - 1) * width + 1, math.min(wi * width, #dep) do n = n + dep[sec] end
          if n / w.tries > most then most = n / w.tries end
        end
      end
      m.most_vs_trace = most
    end
  end
  return total / #seeds, first, parts
end

-- Search: returns { best = { name, spec, score, measure, parts, changes =
-- { { knob, value, from, gain } } }, presets = { { name, score, measure,
-- parts } }, tried = n }.
function _M.run(model, obj, opts)
  opts = opts or {}
  local seeds = opts.seeds or { 1 }
  local presets, unproven = {}, {}
  local best
  local function eligible(m)
    return model.dependency.capacity ~= nil or not m.most_vs_trace or m.most_vs_trace <= _M.UNPROVEN
  end
  for _, name in ipairs(opts.presets or _M.PRESETS) do
    local spec = assert(policy_mod.resolve(name))
    local s, m, parts = _M.evaluate(model, obj, spec, seeds)
    presets[#presets + 1] = { name = name, score = s, measure = m, parts = parts, spec = spec, unproven = not eligible(m) }
    if presets[#presets].unproven then unproven[#unproven + 1] = name end
  end
  for _, p in ipairs(presets) do
    if not p.unproven and (not best or p.score > best.score) then best = p end
  end
  if not best then   -- nothing within the trace's evidence: the best, with the report's caution
    for _, p in ipairs(presets) do if not best or p.score > best.score then best = p end end
  end
  local cur = { name = "tuned from " .. best.name, base = best.name, spec = copy(best.spec), score = best.score,
                measure = best.measure, parts = best.parts, changes = {} }
  local tried, aside = #presets, 0
  local ks = knobs(model.healthy.p99_s)
  for _ = 1, opts.passes or _M.PASSES do
    local moved = false
    for _, k in ipairs(ks) do
      local top
      for _, v in ipairs(k.values) do
        local t = copy(cur.spec)
        if k.set(t, v) and not same(cur.spec, t) then
          local c = copy(t)
          c.base = "none"
          if pcall(policy_mod.new, c, 2) then   -- a value this policy cannot take is skipped
            tried = tried + 1
            local s, m, parts = _M.evaluate(model, obj, t, seeds)
            local ok = eligible(m) or best.unproven
            if not ok then aside = aside + 1 end
            if ok and (not top or s > top.score) then top = { value = v, spec = t, score = s, measure = m, parts = parts } end
          end
        end
      end
      if top and top.score > cur.score then
        cur.changes[#cur.changes + 1] = { knob = k.name, value = top.value, gain = top.score - cur.score,
                                          score = top.score, parts = top.parts }
        cur.spec, cur.score, cur.measure, cur.parts = top.spec, top.score, top.measure, top.parts
        moved = true
      end
    end
    if not moved then break end
  end
  local searched, check
  if cur.score - best.score > _M.MARGIN then
    local more = {}
    for i = 1, opts.check or _M.CHECK do more[i] = seeds[#seeds] + i end
    check = { seeds = more, tuned = _M.evaluate(model, obj, cur.spec, more),
              preset = _M.evaluate(model, obj, best.spec, more) }
    check.held = check.tuned - check.preset > _M.MARGIN
  end
  if cur.score - best.score <= _M.MARGIN or not check.held then
    searched = cur
    cur = { name = best.name, base = best.name, spec = copy(best.spec), score = best.score,
            measure = best.measure, parts = best.parts, changes = {} }
  end
  return { best = cur, presets = presets, tried = tried, seeds = seeds, searched = searched, check = check,
           unproven = unproven, unproven_moves = aside }
end

_M.copy = copy
return _M

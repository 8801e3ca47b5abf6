-- SPDX-License-Identifier: MIT
-- nresrun.tune.write: what `nresrun tune` leaves in its output folder:
-- policy.lua (the chosen policy, one comment per field naming the evidence
-- that chose it), report.md (the verdict first), model.json (the fitted
-- dependency, its evidence and the windows it was fitted on) and
-- model.svg (the windows drawn, the phases shaded).
local cjson = require "cjson.safe"
local simdep = require "nresrun.sim.dep"

local format, concat = string.format, table.concat

local _M = { _VERSION = "0.1.0" }

-- A policy sending more than this x the trace's requests in a window goes
-- beyond what the trace proves the dependency can serve.
_M.UNPROVEN = require("nresrun.tune.search").UNPROVEN

local num
function num(v)
  if type(v) == "boolean" then return tostring(v) end
  if type(v) == "string" then return format("%q", v) end
  if type(v) == "table" then   -- hedge = { at = "p95", max = 2 }
    local keys, parts = {}, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      parts[#parts + 1] = format("%s = %s", k, num(v[k]))
    end
    return "{ " .. concat(parts, ", ") .. " }"
  end
  if v == math.floor(v) and math.abs(v) < 1e15 then return format("%d", v) end
  return format("%.4g", v)
end

local function pts(v) return format("%.2f", v) end

-- "score 70.7 (goodput 65.4 %, load 8.6, recovery 2 s)"
local function parts_text(s, p)
  return format("score %s: goodput %.1f %%, load %.2f, %.1f %% more requests, recovery %g s", pts(s), p.good, p.load,
                p.extra, p.recovery)
end

-- The policy file's text.
function _M.policy(result, obj, model)
  local best = result.best
  local ref
  for _, p in ipairs(result.presets) do if p.name == best.base then ref = p end end
  local out = {
    "-- Written by `nresrun tune` from " .. tostring(model.source) .. " (" .. model.format .. ", "
      .. model.requests .. " requests over " .. model.duration .. " s).",
    format("-- Objective: %s%s; weights goodput %g, load %g, requests %g, recovery %g (points: docs/tune.md).", obj.use,
           obj.slo and format(", SLO %.3g ms at q%g (%s)", obj.slo.latency * 1e3, obj.slo.quantile, obj.slo.from) or ", no latency SLO",
           obj.weights.goodput, obj.weights.load, obj.weights.requests, obj.weights.recovery),
    "-- Load it with nres.policy(dofile(\"policy.lua\")); every field not named here is the base preset's.",
    "return {",
    format("  -- Best of the presets replayed on the fitted model (%s), seeds %s.", parts_text(ref.score, ref.parts),
           concat(result.seeds, ", ")),
    format("  base = %q,", best.base),
  }
  -- One field per knob (the search may move a knob twice: its last value,
  -- its gains summed); a section's fields in one table.
  local knob_of, knobs = {}, {}
  for _, c in ipairs(best.changes) do
    local k = knob_of[c.knob]
    if not k then
      k = { knob = c.knob, gain = 0, steps = {} }
      knob_of[c.knob] = k
      knobs[#knobs + 1] = k
    end
    k.value, k.gain, k.score, k.parts = c.value, k.gain + c.gain, c.score, c.parts
    k.steps[#k.steps + 1] = num(c.value)
  end
  local why_of = {}
  for _, c in ipairs(knobs) do
    why_of[c.knob] = format("-- %+.2f points on the replay%s (then %s).", c.gain,
                            #c.steps > 1 and format(" (searched %s)", concat(c.steps, " then ")) or "",
                            parts_text(c.score, c.parts))
  end
  -- Every field that differs from the base preset, with the reason of the
  -- knob that moved it (a knob may move two: break_for takes break_max,
  -- a hedge raises attempts to its max).
  local base = assert(require("nres.policy").resolve(best.base))
  local keys = {}
  for k in pairs(best.spec) do keys[#keys + 1] = k end
  table.sort(keys)
  local sections, order = {}, {}
  local function along(knob)
    return why_of[knob] or (knob == "attempts" and why_of.hedge and "-- Raised with the hedge: a hedge is an attempt (hedge.max).")
      or (knob == "breaker.break_max" and why_of["breaker.break_for"] and "-- = break_for, as in the presets: no doubling.")
      or "-- Moved by the search."
  end
  for _, k in ipairs(keys) do
    local v, b = best.spec[k], base[k]
    if type(v) == "table" and type(b) == "table" and k ~= "hedge" then
      local subs = {}
      for sk in pairs(v) do subs[#subs + 1] = sk end
      table.sort(subs)
      for _, sk in ipairs(subs) do
        if v[sk] ~= b[sk] then
          if not sections[k] then sections[k] = {}; order[#order + 1] = k end
          local lines = sections[k]
          lines[#lines + 1] = "    " .. along(k .. "." .. sk)
          lines[#lines + 1] = format("    %s = %s,", sk, num(v[sk]))
        end
      end
    elseif type(v) ~= "function" and num(v) ~= num(b == nil and false or b) then
      out[#out + 1] = "  " .. along(k)
      out[#out + 1] = format("  %s = %s,", k, num(v))
    end
  end
  for _, sec in ipairs(order) do
    out[#out + 1] = format("  %s = {", sec)
    for _, l in ipairs(sections[sec]) do out[#out + 1] = l end
    out[#out + 1] = "  },"
  end
  out[#out + 1] = "}"
  return concat(out, "\n") .. "\n"
end

-- The report's text, the verdict first.
function _M.report(result, obj, model)
  local best = result.best
  local out = {}
  local function w(fmt, ...) out[#out + 1] = select("#", ...) > 0 and format(fmt, ...) or fmt end
  local ranked = {}
  for _, p in ipairs(result.presets) do ranked[#ranked + 1] = p end
  table.sort(ranked, function(a, b)   -- the presets set aside (unproven) last
    if a.unproven ~= b.unproven then return not a.unproven end
    return a.score > b.score
  end)
  local top = ranked[1]
  w("# nresrun tune: %s", model.source)
  w("")
  if #best.changes > 0 then
    w("**Verdict: %s**, %s points against %s, the best preset (%s vs %s), on the %s objective. The file: policy.lua.",
      best.name, pts(best.score - top.score), top.name, pts(best.score), pts(top.score), obj.use)
  else
    local sr, ck = result.searched, result.check
    w("**Verdict: %s**, the best preset on the %s objective (%s points; next: %s, %s). The knob search reached %s points%s: %s.",
      top.name, obj.use, pts(top.score), ranked[2] and ranked[2].name or "-", ranked[2] and pts(ranked[2].score) or "-",
      sr and pts(sr.score) or pts(top.score), sr and #sr.changes > 0 and format(" (%d changes)", #sr.changes) or "",
      ck and not ck.held and "more, but not on the seeds it never saw (below)"
      or format("within %g points, the same", require("nresrun.tune.search").MARGIN))
  end
  local ck = result.check
  if ck then
    w("")
    w("Checked on seeds %s, which the search never saw: %s %s points, %s %s: %s.", concat(ck.seeds, ", "),
      result.searched and result.searched.name or best.name, pts(ck.tuned), best.base, pts(ck.preset),
      ck.held and "the gain holds" or format("within %g points there, so the preset stays",
                                             require("nresrun.tune.search").MARGIN))
  end
  if #result.unproven > 0 or (result.unproven_moves or 0) > 0 then
    w("")
    w("Set aside: %s%s. Each sends more than %g x the requests the trace shows in some window where the dependency "
      .. "answered, and the trace has no refusal to bound its capacity.", concat(result.unproven, ", "),
      (result.unproven_moves or 0) > 0 and format("%s%d moves of the search", #result.unproven > 0 and "; " or "",
                                                  result.unproven_moves) or "", _M.UNPROVEN)
  end
  w("")
  local m = best.measure
  if not model.dependency.capacity and m.most_vs_trace and m.most_vs_trace > _M.UNPROVEN then
    w("**Caution:** %s sends the dependency up to %.2f x the requests the trace shows it serving in the same window, "
      .. "and the trace has no refusal, so nothing bounds its capacity in the model. If the dependency was near its "
      .. "capacity, that load costs more than the replay says: check its headroom before adopting it.",
      best.name, m.most_vs_trace)
    w("")
  end
  if #model.warnings > 0 then
    w("Warnings about the trace:")
    w("")
    for _, x in ipairs(model.warnings) do w("- %s", x) end
    w("")
  end
  w("Objective: %s; %s; score = %g x goodput %% - %g x load - %g x more requests %% - %g x recovery s. "
    .. "Load: dependency requests per arrival while it is down x 100, plus the %% sent beyond its capacity where it drops.",
    obj.use, obj.slo and format("goodput = calls that succeeded within %.3g ms (%s)", obj.slo.latency * 1e3, obj.slo.from)
    or "no latency SLO: goodput = success", obj.weights.goodput, obj.weights.load, obj.weights.requests, obj.weights.recovery)
  w("")
  w("Replayed: the trace's %d arrivals on the fitted model, seeds %s, %d candidates.", model.requests,
    concat(result.seeds, ", "), result.tried)
  w("")
  w("| policy | score | goodput % | success % | load | more requests % | recovery s | p99 ms |")
  w("|---|---|---|---|---|---|---|---|")
  local function row(name, s, m, p)
    w("| %s | %s | %.1f | %.1f | %.2f | %.1f | %g | %s |", name, pts(s), p.good, m.success * 100, p.load, p.extra, p.recovery,
      m.p99_ms and format("%.0f", m.p99_ms) or "-")
  end
  if #best.changes > 0 then row(best.name, best.score, best.measure, best.parts) end
  for _, p in ipairs(ranked) do row(p.name, p.score, p.measure, p.parts) end
  w("")
  if #best.changes > 0 then
    w("Changes from %s, in the order the search made them:", best.base)
    w("")
    for _, c in ipairs(best.changes) do w("- %s = %s: %+.2f points", c.knob, num(c.value), c.gain) end
    w("")
  end
  w("## The fitted model")
  w("")
  w("![the trace per window, the fitted phases shaded](model.svg)")
  w("")
  w("%s; %d requests over %d s, %.1f per second; windows of %g s.", simdep.label(model.dependency),
    model.requests, model.duration, model.mean_rate, model.window)
  w("")
  w("- latency: %s", model.evidence.latency)
  w("- capacity: %s", model.evidence.capacity)
  if model.evidence.fail_prob then w("- failures when healthy: %s", model.evidence.fail_prob) end
  for _, p in ipairs(model.dependency.phases) do
    local what = {}
    if p.fail then what[#what + 1] = format("fail %g", p.fail) end
    if p.latency_factor then what[#what + 1] = format("latency x%g", p.latency_factor) end
    if p.capacity then what[#what + 1] = format("capacity x%g", p.capacity) end
    w("- phase %s %g-%g s: %s (%s)", p.name, p.from, p.to, concat(what, ", "), p.evidence)
  end
  if #model.dependency.phases == 0 then w("- no phase: every window reads healthy") end
  w("")
  w("The queue length is assumed, not measured, and a phase holds its mean over its windows: "
    .. "the replay's figures are a prediction from the trace, not a measurement.")
  return concat(out, "\n") .. "\n"
end

-- An SVG of the trace as the fit saw it: tries per second by outcome and
-- the median latency of successes, per window, the fitted phases shaded.
function _M.svg(model)
  local svg = require "nresrun.svg"
  local ws, width = model.windows, model.window
  local ok, failed, refused, median = {}, {}, {}, {}
  local top, ltop = 1, 1
  for i, w in ipairs(ws) do
    ok[i], failed[i], refused[i] = w.ok / width, w.failed / width, w.refused / width
    median[i] = w.median_ms
    top = math.max(top, ok[i], failed[i], refused[i])
    if w.median_ms then ltop = math.max(ltop, w.median_ms) end
  end
  local bands = {}
  for _, p in ipairs(model.dependency.phases) do
    bands[#bands + 1] = { from = p.from, to = p.to, color = "#999999", opacity = 0.18, label = p.name }
  end
  local x0 = width / 2
  return svg.chart{
    title = format("nresrun tune: %s", tostring(model.source)),
    subtitle = format("%d requests, windows of %g s; shaded: the fitted phases", model.requests, width),
    width = 1000,
    x = { min = 0, max = #ws * width, label = "seconds of the trace" },
    legend = { { label = "ok", color = "#2ca02c" }, { label = "failed", color = "#d62728" },
               { label = "refused", color = "#ff7f0e" }, { label = "median of successes", color = "#1f77b4" },
               { label = "phase", color = "#999999", band = true, opacity = 0.18 } },
    panels = {
      { title = "tries per second", height = 200, bands = bands, y = { min = 0, max = svg.nice_max(top), label = "per second" },
        series = { { values = ok, color = "#2ca02c", x0 = x0, dx = width },
                   { values = failed, color = "#d62728", x0 = x0, dx = width },
                   { values = refused, color = "#ff7f0e", x0 = x0, dx = width } } },
      { title = "median latency of successful tries", height = 160, bands = bands,
        y = { min = 0, max = svg.nice_max(ltop), label = "ms" },
        series = { { values = median, color = "#1f77b4", x0 = x0, dx = width, n = #ws } } },
    },
  }
end

-- The model as JSON (without the arrivals: the trace has them).
function _M.model_json(model, obj)
  local t = {}
  for k, v in pairs(model) do if k ~= "arrivals" then t[k] = v end end
  t.objective = obj
  local s = cjson.encode(t)
  return s .. "\n"
end

return _M

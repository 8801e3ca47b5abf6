-- SPDX-License-Identifier: MIT
-- nresrun.sim.report: a simulation's reports - Markdown, JSON and an SVG plot.
--
-- The JSON holds the settings and, per policy, every per-second series,
-- the breaker transitions, the totals and the verdict, so everything in the
-- Markdown and the plot can be recomputed from it. The Markdown opens with
-- the verdict (nresrun.sim.verdict: a ranking, one sentence per policy from
-- its own figures, the breakers' flaps summarised), then a summary per
-- policy, a table per phase (the named phases, and every second outside
-- them) with the time each policy took to recover after the phase
-- ended, the breaker transitions, and a per-second table per policy. The
-- plot (nresrun.svg) has one panel per policy on shared axes: dependency
-- requests/s against arrivals/s, success ratio and budget level in %, the
-- phases shaded grey and the breaker's open / half-open time red / amber.
-- What a terminal gets (_M.terminal) is the verdict and the two short
-- tables, at most 40 lines; the rest is in the files.
local cjson = require "cjson.safe"
local svg = require "nresrun.svg"
local verdict = require "nresrun.sim.verdict"

local format, concat, floor, ceil = string.format, table.concat, math.floor, math.ceil
local max, min = math.max, math.min

local _M = { _VERSION = "0.1.0" }

-- ------------------------------------------------------------- helpers

local function pct(v) if v == false or v == nil then return "-" end return format("%.1f %%", v * 100) end
local function f1(v) if v == false or v == nil then return "-" end return format("%.1f", v) end
local function f2(v) if v == false or v == nil then return "-" end return format("%.2f", v) end

-- Whole seconds (1-based buckets [s-1, s)) of a phase, or of none.
local function in_phase(sec, ph) return sec - 1 >= ph.from and sec <= ph.to end
local function overlaps(sec, ph) return sec > ph.from and sec - 1 < ph.to end

local function outside_phases(sec, phases)
  for _, ph in ipairs(phases) do if overlaps(sec, ph) then return false end end
  return true
end

local function aggregate(run, D, pick)
  local S = run.series
  local a = { seconds = 0, arrivals = 0, ok = 0, done = 0, dep = 0, refused = 0, timeouts = 0,
              rejected = 0, p99 = false }
  for sec = 1, D do
    if pick(sec) then
      a.seconds = a.seconds + 1
      a.arrivals = a.arrivals + S.arrivals[sec]
      a.ok = a.ok + S.ok[sec]
      a.done = a.done + S.ok[sec] + S.failed[sec] + S.rejected[sec]
      a.rejected = a.rejected + S.rejected[sec]
      a.dep = a.dep + S.dep_requests[sec]
      a.refused = a.refused + S.dep_refused[sec]
      a.timeouts = a.timeouts + S.dep_timeouts[sec]
      local p = S.p99_ms[sec]
      if p and (not a.p99 or p > a.p99) then a.p99 = p end
    end
  end
  a.success = a.done > 0 and a.ok / a.done or false
  a.req_per_op = a.arrivals > 0 and a.dep / a.arrivals or false
  a.req_per_s = a.seconds > 0 and a.dep / a.seconds or false
  return a
end

-- Seconds after `ph.to` until the success ratio is back to 95 % of the
-- baseline (the seconds before the first phase; 100 % if none) with the
-- breaker, if any, closed; false if never.
local function recovery(run, D, ph, baseline)
  local S = run.series
  local target = (baseline or 1) * 0.95
  for sec = ceil(ph.to) + 1, D do
    local r = S.success_ratio[sec]
    if r and r >= target and (not S.breaker or S.breaker[sec] == "closed") then
      return sec - ph.to
    end
  end
  return false
end

-- The analysis the Markdown shows (kept in the JSON too).
function _M.analyse(doc)
  local D, phases = doc.duration_s, doc.dependency.phases
  for _, run in ipairs(doc.runs) do
    local rows = {}
    local outside = aggregate(run, D, function(sec) return outside_phases(sec, phases) end)
    outside.phase = "outside phases"
    rows[1] = outside
    local first = D
    for _, ph in ipairs(phases) do first = min(first, ph.from) end
    local baseline = aggregate(run, D, function(sec) return sec <= first end)
    for _, ph in ipairs(phases) do
      local a = aggregate(run, D, function(sec) return in_phase(sec, ph) end)
      a.phase = ph.name
      a.recovered_after_s = recovery(run, D, ph, baseline.success)
      rows[#rows + 1] = a
    end
    run.phases = rows
  end
  doc.verdict = verdict.of(doc)
  return doc
end

-- ------------------------------------------------------------ Markdown

-- The settings: load, dependency, one line per phase.
local function settings(w, doc, bold)
  w("- Load: open loop, %g arrivals/s (%s), the same arrivals for every policy.", doc.load.rate, doc.load.arrivals)
  w("- Dependency: %s.", doc.dependency.label)
  if doc.slo then
    w("- SLO: %g %% of calls succeed within %.3g ms%s; goodput = calls that succeeded within it, per arrival.",
      doc.slo.quantile * 100, doc.slo.latency * 1000,
      doc.slo.measured and format(" (measured: the p%g of calls with no policy while the dependency is healthy)",
                                  doc.slo.quantile * 100) or "")
  end
  for _, ph in ipairs(doc.dependency.phases) do
    local what = {}
    if ph.fail > 0 then what[#what + 1] = format("fails %g %%", ph.fail * 100) end
    if ph.latency_factor ~= 1 then
      what[#what + 1] = ph.ramp and format("latency x%g over %g s", ph.latency_factor, ph.ramp)
                        or format("latency x%g", ph.latency_factor)
    end
    if ph.capacity and ph.capacity ~= 1 then what[#what + 1] = format("capacity x%g", ph.capacity) end
    if #what == 0 then what[1] = "no change" end
    w(bold and "- Phase **%s**: %g-%g s, %s." or "- Phase %s: %g-%g s, %s.", ph.name, ph.from, ph.to, concat(what, ", "))
  end
end

-- A run's goodput, and whether it meets the SLO; "-" without one.
local function goodput(doc, T)
  if not doc.slo or not T.goodput then return "-" end
  return format("%s%s", pct(T.goodput), T.goodput >= doc.slo.quantile and " (met)" or "")
end

-- The ranking with its sentences, then the breakers' flaps.
local function verdict_lines(w, doc)
  local v = doc.verdict
  w("Verdict, %s:", v.rule)
  for _, e in ipairs(v.ranking) do w("%d. %s", e.rank, e.sentence) end
  if #v.breakers > 0 then
    local parts = {}
    for _, b in ipairs(v.breakers) do parts[#parts + 1] = format("%s %s", b.policy, b.text) end
    w("Breakers: %s.", concat(parts, "; "))
  end
end

-- Shed, unfinished and broken accounting, as list items.
local function warnings(w, doc)
  for _, r in ipairs(doc.runs) do
    local T = r.totals
    if T.shed > 0 then w("- %s: %d arrivals shed (max_inflight reached)", r.policy, T.shed) end
    if T.unfinished > 0 then w("- %s: %d operations unfinished after the grace period", r.policy, T.unfinished) end
    if not T.identity_ok then w("- **%s: arrivals do not add up to outcomes**", r.policy) end
  end
end

-- Success, load and recovery of every policy in every phase.
local function phase_table(w, doc)
  w("| phase | policy | seconds | success | dep req/s | dep req/op | refused/s | worst p99 ms | recovered after |")
  w("|---|---|---|---|---|---|---|---|---|")
  local nph = #doc.runs[1].phases
  for i = 1, nph do
    for _, r in ipairs(doc.runs) do
      local a = r.phases[i]
      local rec = "-"
      if i > 1 then rec = a.recovered_after_s and format("%g s", a.recovered_after_s) or "never" end
      w("| %s | %s | %d | %s | %s | %s | %s | %s | %s |", a.phase, r.policy, a.seconds, pct(a.success),
        f1(a.req_per_s), f2(a.req_per_op), f1(a.seconds > 0 and a.refused / a.seconds or false),
        f1(a.p99), rec)
    end
  end
end

function _M.markdown(doc, opts)
  opts = opts or {}
  if not doc.verdict then _M.analyse(doc) end
  local out = {}
  local function w(...) out[#out + 1] = format(...) end
  local D = doc.duration_s
  w("# nresrun simulation: %s", doc.simulation)
  w("")
  if doc.description then w("%s", doc.description) w("") end
  w("%s UTC · seed %d · %d simulated s per policy on a virtual clock · nres %s · %s",
    doc.started or "?", doc.seed, D, doc.versions and doc.versions.nres or "?",
    doc.versions and doc.versions.luajit or "?")
  w("")
  settings(w, doc, true)
  if opts.svg then w("") w("![per-second plot](%s)", opts.svg) end
  w("")
  w("## Verdict")
  w("")
  verdict_lines(w, doc)

  w("")
  w("## Summary")
  w("")
  w("Outcomes per arrival. dep req/op: requests the dependency received per arrival (its own count). "
    .. "Refused: by the dependency's capacity. Breaker open s: time spent open (half-open excluded). "
    .. "real s: wall time of the run; Lua B/op: Lua heap bytes allocated per arrival (inside nresrun only).")
  w("")
  local gp = doc.slo and " goodput |" or ""
  w("| policy | arrivals | success |%s failed | rejected | dep req/op | refused | client timeouts | retries/op | breaker opens | breaker open s | budget min | real s | Lua B/op |", gp)
  w("|---|---|---|%s---|---|---|---|---|---|---|---|---|---|---|", doc.slo and "---|" or "")
  for _, r in ipairs(doc.runs) do
    local T = r.totals
    w("| %s | %d | %s |%s %s | %s | %s | %d | %d | %s | %s | %s | %s | %.2f | %s |",
      r.policy, T.arrivals, pct(T.ok / max(1, T.arrivals)), doc.slo and " " .. goodput(doc, T) .. " |" or "",
      pct(T.failed / max(1, T.arrivals)),
      pct(T.rejected / max(1, T.arrivals)), f2(T.dep_requests_per_op), T.dep_refused, T.dep_timeouts,
      T.retries and f2(T.retries / max(1, T.arrivals)) or "-",
      T.final_breaker and tostring(T.breaker_opens) or "no breaker",
      T.final_breaker and f1(T.breaker_open_s) or "-",
      T.budget_capacity and format("%.1f / %g", T.budget_min, T.budget_capacity) or "no budget",
      T.real_s, T.lua_bytes_per_op and format("%.0f", T.lua_bytes_per_op) or "-")
  end
  local warn = {}
  warnings(function(...) warn[#warn + 1] = format(...) end, doc)
  if #warn > 0 then w("") for _, l in ipairs(warn) do w("%s", l) end end

  w("")
  w("## By phase")
  w("")
  w("Over each phase's whole seconds; \"outside phases\" is every other second (recoveries included). "
    .. "Recovered after: seconds from the phase's end until a second's success ratio is back to 95 %% of "
    .. "the policy's ratio before the first phase, with the breaker closed.")
  w("")
  phase_table(w, doc)

  w("")
  w("## Breaker transitions")
  w("")
  local any = false
  for _, b in ipairs(doc.verdict.breakers) do w("- %s: %s.", b.policy, b.text) end
  if #doc.verdict.breakers > 0 then w("") end
  for _, r in ipairs(doc.runs) do if r.series.breaker then any = true end end
  if not any then
    w("No policy has a breaker.")
  else
    w("Dated at the first simulated event that saw them (within one arrival interval).")
    w("")
    w("| policy | t (s) | from | to |")
    w("|---|---|---|---|")
    for _, r in ipairs(doc.runs) do
      if r.series.breaker then
        if #r.transitions == 0 then w("| %s | - | closed | (no change) |", r.policy) end
        for _, tr in ipairs(r.transitions) do
          w("| %s | %.3f | %s | %s |", r.policy, tr.t, tr.from, tr.to)
        end
      end
    end
  end

  for _, r in ipairs(doc.runs) do
    local S = r.series
    w("")
    w("## Per second: %s", r.policy)
    w("")
    w("Outcomes by the second they completed in; p50/p99 of what the caller waited, all outcomes.")
    w("")
    w("| s | arrivals | dep req | refused | timeouts | queue max | ok | failed | rejected | success | p50 ms | p99 ms | breaker | budget |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sec = 1, D do
      w("| %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |", sec, S.arrivals[sec],
          S.dep_requests[sec], S.dep_refused[sec], S.dep_timeouts[sec], S.dep_queue_max[sec],
          S.ok[sec], S.failed[sec], S.rejected[sec], pct(S.success_ratio[sec]),
          f1(S.p50_ms[sec]), f1(S.p99_ms[sec]), S.breaker and S.breaker[sec] or "-",
          S.budget and f1(S.budget[sec]) or "-")
    end
  end
  w("")
  return concat(out, "\n")
end

-- ------------------------------------------------------------ terminal

_M.TERMINAL_LINES = 40

-- What nresrun prints: the verdict, then a short summary and the phase
-- table while they fit, in at most TERMINAL_LINES lines; the last line
-- names the files (`paths`), which hold the rest.
function _M.terminal(doc, paths)
  if not doc.verdict then _M.analyse(doc) end
  local function section(fill)
    local t = {}
    fill(function(...) t[#t + 1] = format(...) end)
    return t
  end
  local head = section(function(w)
    w("nresrun simulation: %s · seed %d · %d simulated s per policy", doc.simulation, doc.seed, doc.duration_s)
    settings(w, doc, false)
  end)
  local verdict = section(function(w) w("") verdict_lines(w, doc) end)
  local warn = section(function(w) warnings(w, doc) end)
  local summary = section(function(w)
    w("")
    local gp = doc.slo and " goodput |" or ""
    w("| policy | success |%s failed | rejected | dep req/op | retries/op | ok p99 ms | breaker opens | budget min |", gp)
    w("|---|---|%s---|---|---|---|---|---|---|", doc.slo and "---|" or "")
    for _, r in ipairs(doc.runs) do
      local T = r.totals
      w("| %s | %s |%s %s | %s | %s | %s | %s | %s | %s |", r.policy, pct(T.ok / max(1, T.arrivals)),
        doc.slo and " " .. goodput(doc, T) .. " |" or "",
        pct(T.failed / max(1, T.arrivals)), pct(T.rejected / max(1, T.arrivals)), f2(T.dep_requests_per_op),
        T.retries and f2(T.retries / max(1, T.arrivals)) or "-", f1(T.ok_p99_ms),
        T.final_breaker and tostring(T.breaker_opens) or "no breaker",
        T.budget_capacity and format("%.1f / %g", T.budget_min, T.budget_capacity) or "no budget")
    end
  end)
  local phases = section(function(w) w("") phase_table(w, doc) end)
  local left_out = {}
  local budget = _M.TERMINAL_LINES - #head - 3          -- a blank line and the files' two
  local out = {}
  local function add(t, name)
    if #t <= budget then
      for _, l in ipairs(t) do out[#out + 1] = l end
      budget = budget - #t
    elseif name then
      left_out[#left_out + 1] = name
    end
  end
  -- The verdict always: cut to what fits (at least its first line).
  if #verdict > budget then
    local keep = {}
    for i = 1, math.max(2, budget - 1) do keep[i] = verdict[i] end
    keep[#keep + 1] = format("(%d more lines of the verdict in the .md file)", #verdict - #keep)
    verdict = keep
  end
  add(verdict)
  add(warn, "warnings")
  add(summary, "summary")
  add(phases, "by phase")
  local lines = {}
  for _, l in ipairs(head) do lines[#lines + 1] = l end
  for _, l in ipairs(out) do lines[#lines + 1] = l end
  lines[#lines + 1] = ""
  if paths then
    lines[#lines + 1] = format("reports: %s %s %s", paths.md, paths.json, paths.svg)
  end
  lines[#lines + 1] = (#left_out > 0 and ("Not shown here: " .. concat(left_out, ", ") .. "; the .md has them, ")
                       or "The .md has ") .. "every second of every policy and every breaker transition."
  return concat(lines, "\n")
end

-- ---------------------------------------------------------------- JSON

-- false (no data that second) becomes null.
local function jsonable(v)
  if v == false then return cjson.null end
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = jsonable(x) end
  return t
end

function _M.json(doc)
  if not doc.runs[1].phases then _M.analyse(doc) end
  local copy = jsonable(doc)
  -- Booleans that mean something stay booleans.
  for i, r in ipairs(doc.runs) do
    copy.runs[i].totals.identity_ok = r.totals.identity_ok
    for j, a in ipairs(r.phases) do
      if a.recovered_after_s == false then copy.runs[i].phases[j].recovered_after_s = cjson.null end
    end
  end
  cjson.encode_sparse_array(true)
  return cjson.encode(copy)
end

-- ----------------------------------------------------------------- SVG

local COLORS = {
  dep = "#1f77b4", arrivals = "#7f7f7f", refused = "#d62728", success = "#2ca02c",
  budget = "#9467bd", phase = "#888888", open = "#d62728", half = "#ff7f0e",
}

-- Intervals [from, to) of the breaker in `state`, from the transitions.
local function breaker_bands(run, D, state, color, opacity)
  local bands, since = {}, nil
  local cur = "closed"
  for _, tr in ipairs(run.transitions) do
    if tr.to == state and cur ~= state then since = tr.t end
    if cur == state and tr.to ~= state then
      bands[#bands + 1] = { from = since, to = tr.t, color = color, opacity = opacity, show_label = false,
                            label = format("breaker %s %.1f-%.1f s", state, since, tr.t) }
    end
    cur = tr.to
  end
  if cur == state and since then
    bands[#bands + 1] = { from = since, to = D, color = color, opacity = opacity, show_label = false,
                          label = format("breaker %s from %.1f s", state, since) }
  end
  return bands
end

function _M.plot(doc)
  local D = doc.duration_s
  local top = 0
  for _, r in ipairs(doc.runs) do
    for sec = 1, D do
      top = max(top, r.series.dep_requests[sec], r.series.arrivals[sec])
    end
  end
  top = svg.nice_max(top)
  local panels = {}
  for _, r in ipairs(doc.runs) do
    local S, T = r.series, r.totals
    local bands = {}
    for _, ph in ipairs(doc.dependency.phases) do
      bands[#bands + 1] = { from = ph.from, to = ph.to, color = COLORS.phase, opacity = 0.18, label = ph.name }
    end
    if S.breaker then
      for _, b in ipairs(breaker_bands(r, D, "open", COLORS.open, 0.22)) do bands[#bands + 1] = b end
      for _, b in ipairs(breaker_bands(r, D, "half-open", COLORS.half, 0.35)) do bands[#bands + 1] = b end
    end
    local pct_success, pct_budget = {}, {}
    for sec = 1, D do
      local v = S.success_ratio[sec]
      pct_success[sec] = v and v * 100 or false
      if S.budget then pct_budget[sec] = S.budget[sec] / T.budget_capacity * 100 end
    end
    local series = {
      { values = S.arrivals, color = COLORS.arrivals, width = 1, x0 = 0.5 },
      { values = S.dep_refused, color = COLORS.refused, width = 1, x0 = 0.5 },
      { values = S.dep_requests, color = COLORS.dep, width = 1.6, x0 = 0.5 },
      { values = pct_success, color = COLORS.success, axis = 2, width = 1.6, x0 = 0.5, n = D },
    }
    if S.budget then
      series[#series + 1] = { values = pct_budget, color = COLORS.budget, axis = 2, dash = "5 3", x0 = 0.5 }
    end
    panels[#panels + 1] = {
      title = format("%s  (%s; dep req/op %.2f, success %.1f %%)", r.policy, r.policy_label or "",
                     T.dep_requests_per_op, T.success_ratio * 100),
      height = 170,
      y = { min = 0, max = top, label = "per second" },
      y2 = { min = 0, max = 100, label = "%", format = function(v) return format("%g%%", v) end },
      bands = bands, series = series,
    }
  end
  return svg.chart{
    title = format("nresrun simulation: %s", doc.simulation),
    subtitle = format("seed %d · %g arrivals/s (%s) · %s", doc.seed, doc.load.rate, doc.load.arrivals,
                      doc.dependency.label),
    width = 1000,
    x = { min = 0, max = D, label = "simulated seconds" },
    legend = {
      { label = "dependency requests/s", color = COLORS.dep },
      { label = "arrivals/s", color = COLORS.arrivals },
      { label = "refused by capacity/s", color = COLORS.refused },
      { label = "success ratio (right, %)", color = COLORS.success },
      { label = "budget level (right, % of capacity)", color = COLORS.budget, dash = "5 3" },
      { label = "phase", color = COLORS.phase, band = true, opacity = 0.18 },
      { label = "breaker open", color = COLORS.open, band = true, opacity = 0.22 },
      { label = "half-open", color = COLORS.half, band = true, opacity = 0.35 },
    },
    panels = panels,
  }
end

-- Make folder `dir` (and its parents).
function _M.mkdir(dir)
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
end

-- Write `text` to `path`, or raise naming it.
local function put(path, text)
  local f, err = io.open(path, "w")
  if not f then error("nresrun: cannot write " .. path .. ": " .. tostring(err), 0) end
  f:write(text)
  f:close()
end
_M.put = put

-- Write <dir>/<stem>.md, .json and .svg; returns their paths.
function _M.write(doc, dir, stem)
  _M.analyse(doc)
  _M.mkdir(dir)
  local base = dir .. "/" .. stem
  local paths = { md = base .. ".md", json = base .. ".json", svg = base .. ".svg" }
  put(paths.svg, _M.plot(doc))
  put(paths.json, _M.json(doc) .. "\n")
  put(paths.md, _M.markdown(doc, { svg = stem .. ".svg" }))
  return paths
end

return _M

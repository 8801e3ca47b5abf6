-- SPDX-License-Identifier: MIT
-- nresrun.sim.tournament: every policy against several scenarios over
-- several seeds, on the simulator's virtual clock, with the measures that
-- say whether a policy ever costs availability and the targets the
-- presets are held to.
--
-- The tournament form of nresrun.simulation{ scenarios = ..., seeds = ... }
-- comes here (bench/tournament.lua; spec/lua/tournament_spec.lua asserts
-- the targets on a smaller seed set). Per scenario, policy and seed it
-- runs nresrun.sim.run and keeps a few numbers (measure): success,
-- dependency requests per arrival overall and while the dependency is
-- down (a phase with fail = 1), seconds from the end of the scenario's
-- disruption to the policy's recovery, p50/p99 of successful calls, and
-- in a capacity phase the load the dependency received against what it
-- can serve, and goodput: the calls that succeeded within the scenario's
-- latency SLO (its slo, the tournament's, else measured: the p99 of calls
-- with no policy while the dependency is healthy - nresrun.sim.slo_of),
-- per arrival. The report is one Markdown file (a table per scenario, the
-- targets) and one SVG per scenario (the first seed's per-second success
-- and dependency requests).
local simrun = require "nresrun.sim.run"
local svg = require "nresrun.svg"

local format, concat, floor, max, min, exp = string.format, table.concat, math.floor, math.max, math.min, math.exp
local sort = table.sort

local _M = { _VERSION = "0.1.0" }

-- The targets of issue 16, for the policies in `policies`, every scenario
-- and every seed (check below says which applies where).
_M.targets = {
  policies = { "default", "http", "gateway" },
  none_margin = 0.005,          -- success >= none's - 0.5 points
  trivial_share = 0.99,         -- success >= 99 % of trivial's ...
  trivial_scenarios = { brownout = true, ["heavy-tail"] = true },   -- ... here
  down_req_per_op = 0.05,       -- dependency requests per arrival while down
  recovery_s = 2,               -- after the dependency's recovery
  overload_load = 1.10,         -- dep requests/s <= this x its capacity in a capacity phase
  capacity_margin = 0,          -- in a capacity phase: success >= none's (interactive: goodput)
  -- The presets for calls a person waits on: in a capacity phase their
  -- goodput within the SLO is held to none's, not their success (a call
  -- the throttle refuses fails fast rather than wait past the SLO:
  -- bench/results/tournament-throttled-2026-12-07.md).
  interactive = {},   -- a set: _M.interactive's names
}

-- The presets for calls a person waits on: the report sets their success
-- and goodput side by side (no target reads goodput yet).
_M.interactive = { "http", "gateway" }
for _, name in ipairs(_M.interactive) do _M.targets.interactive[name] = true end

-- ------------------------------------------------------------- scenario

-- Mean service time in seconds of a latency model (nil: none).
local function mean_service(l)
  if not l then return 0 end
  local k, v = next(l)
  if k == "fixed" then return v end
  if k == "uniform" then return (v[1] + v[2]) / 2 end
  return v[1] * exp(v[2] * v[2] / 2)   -- lognormal
end

-- Requests per second the dependency can serve with capacity factor capf
-- and latency factor latf: servers / mean service time, and/or the rate.
local function capacity_rps(d, capf, latf)
  local c = d.capacity
  if not c then return math.huge end
  local r = math.huge
  if c.concurrency then
    local n = floor(c.concurrency * capf + 0.5)
    n = max(1, min(n, c.concurrency))
    local m = mean_service(d.latency) * latf
    if m > 0 then r = n / m end
  end
  if c.rate then r = min(r, c.rate * capf) end
  return r
end
_M.capacity_rps = capacity_rps

-- What a scenario's phases mean for the measures: the seconds the
-- dependency is down (fail = 1), the end of its disruption (the last
-- phase that ends before the run does: recovery is timed from there),
-- its capacity phase, and where the healthy level is read (before the
-- first phase).
local function shape(sc)
  local D = sc.duration
  local info = { down = {}, first = D, recover_at = false, overload = false }
  for _, p in ipairs(sc.dependency.phases or {}) do
    info.first = min(info.first, p.from)
    if (p.fail or 0) >= 1 then info.down[#info.down + 1] = p end
    if p.to < D and (not info.recover_at or p.to > info.recover_at) then info.recover_at = p.to end
    if (p.capacity or 1) < 1 then info.overload = p end
  end
  return info
end
_M.shape = shape

-- Sum of series S[key] over the whole seconds of [from, to).
local function sum(S, key, from, to)
  local n = 0
  for sec = floor(from) + 1, min(floor(to), #S[key]) do n = n + S[key][sec] end
  return n
end

-- The numbers kept from one run.
function _M.measure(run, sc, info)
  local S, T = run.series, run.totals
  local m = {
    success = T.success_ratio,
    goodput = T.goodput,
    req_per_op = T.dep_requests_per_op,
    p50_ms = T.ok_p50_ms, p99_ms = T.ok_p99_ms,
    identity_ok = T.identity_ok,
  }
  if #info.down > 0 then
    local req, arr = 0, 0
    for _, p in ipairs(info.down) do
      req = req + sum(S, "dep_requests", p.from, p.to)
      arr = arr + sum(S, "arrivals", p.from, p.to)
    end
    m.down_req_per_op = arr > 0 and req / arr or 0
  end
  -- Healthy level: the success of the seconds before the first phase.
  local ok, done = 0, 0
  for sec = 1, floor(info.first) do
    ok = ok + S.ok[sec]
    done = done + S.ok[sec] + S.failed[sec] + S.rejected[sec]
  end
  m.healthy = done > 0 and ok / done or 1
  if info.recover_at then
    -- Whole seconds from the dependency's recovery to the end of the first
    -- second whose success is back to 95 % of the healthy level (1: the
    -- first second after it already is).
    m.recovery_s = false
    for sec = floor(info.recover_at) + 1, sc.duration do
      local r = S.success_ratio[sec]
      if r and r >= 0.95 * m.healthy then
        m.recovery_s = sec - info.recover_at
        break
      end
    end
  end
  local o = info.overload
  if o then
    local secs = floor(o.to) - floor(o.from)
    m.load_rps = sum(S, "dep_requests", o.from, o.to) / secs
    m.served_rps = (m.load_rps * secs - sum(S, "dep_refused", o.from, o.to)) / secs
    m.offered_rps = sum(S, "arrivals", o.from, o.to) / secs
    m.capacity_rps = capacity_rps(sc.dependency, o.capacity, o.latency_factor or 1)
    m.overload_success = sum(S, "ok", o.from, o.to) / math.max(1, sum(S, "arrivals", o.from, o.to))
  end
  return m
end

-- ------------------------------------------------------------------ run

-- Run the tournament `sim` (a checked nresrun.simulation with scenarios).
-- opts: seeds (a list; default the file's), only (Lua pattern on policy
-- names), policies and scenarios (sets of names; default all), progress
-- (a function(msg)). Returns the document the report and check read.
function _M.run(sim, opts)
  opts = opts or {}
  local simmod = require "nresrun.sim"
  local fresh = simmod.fresh
  local seeds = opts.seeds or (opts.seed and { opts.seed }) or sim.spec.seeds
  local doc = { kind = "tournament", name = sim.spec.name or "tournament",
                description = sim.spec.description, seeds = seeds, scenarios = {},
                policies = {} }
  for _, e in ipairs(sim.policies) do
    if (not opts.only or e.name:find(opts.only)) and (not opts.policies or opts.policies[e.name]) then doc.policies[#doc.policies + 1] = e.name end
  end
  local real0 = os.clock()
  for _, sc in ipairs(sim.scenarios) do
    if not opts.scenarios or opts.scenarios[sc.name] then
      local info = shape(sc)
      local slo = simmod.slo_of(sc.slo or sim.spec.slo, sc, seeds[1], true)
      local entry = { name = sc.name, description = sc.description, duration = sc.duration, slo = slo,
                      rate = sc.load.rate, info = info, label = require("nresrun.sim.dep").label(sc.dependency),
                      phases = sc.dependency.phases or {}, results = {}, series = {} }
      for _, e in ipairs(sim.policies) do
        if (not opts.only or e.name:find(opts.only)) and (not opts.policies or opts.policies[e.name]) then
          local per_seed = {}
          for i, seed in ipairs(seeds) do
            local r = simrun.run{
              policy = fresh(e.spec, seed), dependency = sc.dependency,
              rate = sc.load.rate, arrivals = sc.load.arrivals or "poisson",
              duration_s = sc.duration, seed = seed,
              max_inflight = sc.max_inflight or 100000, grace_s = sc.grace or 120,
              slo_s = slo.latency,
            }
            per_seed[i] = _M.measure(r, sc, info)
            per_seed[i].seed = seed
            if i == 1 then
              entry.series[e.name] = { success = r.series.success_ratio, dep = r.series.dep_requests }
            end
          end
          entry.results[e.name] = per_seed
        end
      end
      doc.scenarios[#doc.scenarios + 1] = entry
      if opts.progress then
        opts.progress(format("%s: %d policies x %d seeds, %.1f s cpu so far", sc.name, #doc.policies,
                             #seeds, os.clock() - real0))
      end
    end
  end
  doc.cpu_s = os.clock() - real0
  return doc
end

-- --------------------------------------------------------------- targets

-- Every miss of the targets in `doc`: a list of { scenario, policy, seed,
-- target, got, want } (empty: all met). Which target applies where:
-- success against none's everywhere (with a capacity phase: also with the
-- narrower capacity_margin, 0: none's itself; the interactive presets'
-- goodput there, not their success); against trivial's in the scenarios
-- named in trivial_scenarios; requests while down where the dependency is
-- down; recovery where the disruption ends before the run; load where
-- capacity drops. A policy or a reference the doc did not run is skipped.
function _M.check(doc, targets)
  targets = targets or _M.targets
  local misses = {}
  local function miss(sc, pol, seed, what, got, want, offered)
    misses[#misses + 1] = { scenario = sc, policy = pol, seed = seed, target = what, got = got, want = want,
                            offered = offered }
  end
  for _, sc in ipairs(doc.scenarios) do
    local none, trivial = sc.results.none, sc.results.trivial
    for _, pol in ipairs(targets.policies) do
      local res = sc.results[pol]
      for i, m in ipairs(res or {}) do
        local seed = m.seed
        if not m.identity_ok then miss(sc.name, pol, seed, "accounting", "broken", "arrivals = outcomes") end
        if none then
          local want = none[i].success - targets.none_margin
          if m.success < want then miss(sc.name, pol, seed, "success >= none - 0.5 pt", m.success, want) end
        end
        if trivial and targets.trivial_scenarios[sc.name] then
          local want = trivial[i].success * targets.trivial_share
          if m.success < want then miss(sc.name, pol, seed, "success >= 99 % of trivial", m.success, want) end
        end
        if m.down_req_per_op and m.down_req_per_op > targets.down_req_per_op then
          miss(sc.name, pol, seed, "dep req/arrival while down", m.down_req_per_op, targets.down_req_per_op)
        end
        if sc.info.recover_at then
          local r = m.recovery_s
          if not r or r > targets.recovery_s then
            miss(sc.name, pol, seed, "recovery s", r or "never", targets.recovery_s)
          end
        end
        if m.load_rps then
          -- No retry storm, nor an offered load beyond the dependency's
          -- means: within 10 % of its capacity, whatever the offered load
          -- (what it cannot serve is refused before it is sent).
          local want = targets.overload_load * m.capacity_rps
          if m.load_rps > want then
            miss(sc.name, pol, seed, "overload dep req/s (x capacity)", m.load_rps, want, m.offered_rps)
          end
          local margin = targets.capacity_margin or _M.targets.capacity_margin
          local k = (targets.interactive or _M.targets.interactive)[pol] and "goodput" or "success"
          if none and m[k] < none[i][k] - margin then
            local what = margin > 0 and format("%s >= none - %g pt (capacity phase)", k, margin * 100)
                         or format("%s >= none (capacity phase)", k)
            miss(sc.name, pol, seed, what, m[k], none[i][k] - margin)
          end
        end
      end
    end
  end
  return misses
end

-- ---------------------------------------------------------------- report

local function pct(v) return v and format("%.1f", v * 100) or "-" end

-- Median and [min, max] of field `k` over the seeds, formatted by `f`.
local function spread(list, k, f)
  local v = {}
  for _, m in ipairs(list) do
    local x = m[k]
    if x == nil then return "-" end
    v[#v + 1] = x == false and math.huge or x
  end
  sort(v)
  local function F(x) return x == math.huge and "never" or f(x) end
  local med = v[floor((#v + 1) / 2)]
  if v[1] == v[#v] then return F(med) end
  return format("%s [%s–%s]", F(med), F(v[1]), F(v[#v]))
end

local COLORS = { none = "#7f7f7f", trivial = "#2ca02c", default = "#1f77b4", http = "#9467bd",
                 gateway = "#ff7f0e", batch = "#8c564b" }
local EXTRA = { "#e377c2", "#17becf", "#bcbd22", "#d62728" }
local function color(name, i) return COLORS[name] or EXTRA[(i - 1) % #EXTRA + 1] end

-- The median of field `k` over the seeds (nil where a seed has none).
local function median(list, k)
  local v = {}
  for _, m in ipairs(list) do
    if m[k] == nil then return nil end
    v[#v + 1] = m[k]
  end
  sort(v)
  return v[floor((#v + 1) / 2)]
end

-- Rows of success / goodput (medians over the seeds, in %) per scenario,
-- one column per policy in `cols`; at most `rows` scenarios (default all).
local function matrix(w, doc, cols, rows)
  w("| scenario | SLO ms | %s |", concat(cols, " | "))
  w("|---|---|%s", string.rep("---|", #cols))
  for i, sc in ipairs(doc.scenarios) do
    if rows and i > rows then
      w("(%d more scenarios in the report)", #doc.scenarios - rows)
      break
    end
    local row = { sc.name, sc.slo and format("%.3g", sc.slo.latency * 1000) or "-" }
    for _, pol in ipairs(cols) do
      local list = sc.results[pol]
      row[#row + 1] = list and format("%s / %s", pct(median(list, "success")), pct(median(list, "goodput"))) or "-"
    end
    w("| %s |", concat(row, " | "))
  end
end

-- Success and goodput of the interactive presets (and none, default for
-- reference) in every scenario.
local function side_by_side(w, doc)
  local cols, ran = {}, {}
  for _, pol in ipairs(doc.policies) do ran[pol] = true end
  for _, pol in ipairs { "none", "default", _M.interactive[1], _M.interactive[2] } do
    if ran[pol] then cols[#cols + 1] = pol end
  end
  local any = false
  for _, pol in ipairs(_M.interactive) do any = any or ran[pol] end
  if not any then return end
  w("## Interactive presets: success and goodput")
  w("")
  w("For calls a person waits on (%s), a success after the SLO's latency is often a failure. "
    .. "Medians over the seeds, success / goodput in %%; the difference is the successes that came too late.",
    concat(_M.interactive, ", "))
  w("")
  matrix(w, doc, cols)
  w("")
end

_M.TERMINAL_LINES = 40

-- What nresrun prints for a tournament, in at most TERMINAL_LINES lines:
-- success / goodput of every policy in every scenario, the targets' misses
-- (as many as fit), and the report's path (`md`), which has the rest.
function _M.terminal(doc, misses, md)
  local out = {}
  local function w(fmt, ...) out[#out + 1] = select("#", ...) > 0 and format(fmt, ...) or fmt end
  w("nresrun tournament: %s · %d policies × %d scenarios × %d seed%s · %.0f s of CPU", doc.name or "?",
    #doc.policies, #doc.scenarios, #doc.seeds, #doc.seeds == 1 and "" or "s", doc.cpu_s or 0)
  w("Success / goodput (calls that succeeded within the scenario's SLO) in %, medians over the seeds:")
  w("")
  -- Room for the heading (3), the table's head (2), the targets (3) and the path (2).
  local rows = _M.TERMINAL_LINES - 10
  matrix(w, doc, doc.policies, #doc.scenarios > rows and rows - 1 or nil)
  w("")
  if not misses then
    -- no targets read
  elseif #misses == 0 then
    w("Targets: all met.")
  else
    local room = _M.TERMINAL_LINES - #out - 3
    w("Targets: %d missed%s:", #misses, #misses > room and format(" (the first %d here)", math.max(0, room)) or "")
    for i = 1, math.min(#misses, math.max(0, room)) do
      local x = misses[i]
      local function v(y) return type(y) == "number" and format("%.4g", y) or tostring(y) end
      w("- %s / %s / seed %d: %s: got %s, want %s", x.scenario, x.policy, x.seed, x.target, v(x.got), v(x.want))
    end
  end
  w("")
  w("report: %s (and one .svg per scenario): every column, the ranges over the seeds, the targets.", md or "-")
  return concat(out, "\n")
end

function _M.markdown(doc, opts)
  opts = opts or {}
  local out = {}
  local function w(fmt, ...) out[#out + 1] = select("#", ...) > 0 and format(fmt, ...) or fmt end
  w("# nresrun tournament: %s", doc.name)
  w("")
  if doc.description then w("%s", doc.description) w("") end
  local seeds = {}
  for i, s in ipairs(doc.seeds) do seeds[i] = tostring(s) end
  w("%s · seeds %s · %d policies × %d scenarios × %d seeds on a virtual clock · %.0f s of CPU · nres %s · %s",
    doc.started or "", concat(seeds, ", "), #doc.policies, #doc.scenarios, #doc.seeds, doc.cpu_s or 0,
    doc.versions and doc.versions.nres or "?", doc.versions and doc.versions.luajit or "LuaJIT ?")
  w("")
  w("Per policy, the median over the seeds and [min–max] where they differ. success: calls that "
    .. "succeeded per arrival over the whole run. dep req/op: requests the dependency received per arrival. "
    .. "while down: the same over the seconds the dependency fails everything. recovery: seconds from the "
    .. "end of the disruption to the end of the first second whose success is back to 95 % of the policy's "
    .. "level before it (1 s is the best a per-second series can show). p50/p99: latency of successful calls, "
    .. "retries and backoff included. Overload: dependency requests/s during the capacity phase against "
    .. "its capacity (servers / mean service time) and the offered load. goodput: calls that succeeded "
    .. "within the scenario's latency SLO per arrival (the SLO is named under each scenario).")
  w("")
  for _, sc in ipairs(doc.scenarios) do
    w("## %s", sc.name)
    w("")
    if sc.description then w("%s", sc.description) w("") end
    w("%g arrivals/s for %d s; %s.", sc.rate, sc.duration, sc.label)
    for _, p in ipairs(sc.phases) do
      local what = {}
      if p.fail then what[#what + 1] = format("fails %g %%", p.fail * 100) end
      if p.latency_factor then
        what[#what + 1] = p.ramp and format("latency ×%g over %g s", p.latency_factor, p.ramp)
                          or format("latency ×%g", p.latency_factor)
      end
      if p.capacity then what[#what + 1] = format("capacity ×%g", p.capacity) end
      w("Phase **%s** %g–%g s: %s.", p.name or "?", p.from, p.to, concat(what, ", "))
    end
    if sc.slo then
      w("SLO: %g %% of calls within %.3g ms%s.", sc.slo.quantile * 100, sc.slo.latency * 1000,
        sc.slo.measured and format(" (measured: the p%g of calls with no policy, healthy)", sc.slo.quantile * 100) or "")
    end
    w("")
    if opts.svg then w("![%s](%s)", sc.name, opts.svg(sc.name)) w("") end
    local cols = { "policy", "success %", "goodput %", "dep req/op" }
    local info = sc.info
    if #info.down > 0 then cols[#cols + 1] = "dep req/op while down" end
    if info.recover_at then cols[#cols + 1] = "recovery s" end
    cols[#cols + 1] = "p50 ms"
    cols[#cols + 1] = "p99 ms"
    if info.overload then
      cols[#cols + 1] = "overload success %"
      cols[#cols + 1] = "overload dep req/s (served)"
    end
    w("| %s |", concat(cols, " | "))
    w("|%s", string.rep("---|", #cols))
    for _, pol in ipairs(doc.policies) do
      local list = sc.results[pol]
      if list then
        local row = { pol, spread(list, "success", pct), spread(list, "goodput", pct),
                      spread(list, "req_per_op", function(x) return format("%.2f", x) end) }
        if #info.down > 0 then row[#row + 1] = spread(list, "down_req_per_op", function(x) return format("%.3f", x) end) end
        if info.recover_at then row[#row + 1] = spread(list, "recovery_s", function(x) return format("%g", x) end) end
        row[#row + 1] = spread(list, "p50_ms", function(x) return format("%.1f", x) end)
        row[#row + 1] = spread(list, "p99_ms", function(x) return format("%.0f", x) end)
        if info.overload then
          row[#row + 1] = spread(list, "overload_success", pct)
          row[#row + 1] = format("%s (%s)", spread(list, "load_rps", function(x) return format("%.0f", x) end),
                                 spread(list, "served_rps", function(x) return format("%.0f", x) end))
        end
        w("| %s |", concat(row, " | "))
      end
    end
    if info.overload then
      local m = sc.results[doc.policies[1]][1]
      w("")
      w("Capacity during **%s**: %.0f requests/s; offered load %.0f arrivals/s.", info.overload.name or "overload",
        m.capacity_rps, m.offered_rps)
    end
    w("")
  end
  side_by_side(w, doc)
  if opts.misses then
    local t = opts.targets or _M.targets
    w("## Targets")
    w("")
    w("For %s, every scenario and every seed: success ≥ none's − %g points; ≥ %g %% of trivial's in %s; "
      .. "≤ %g dependency requests per arrival while the dependency is down; recovery ≤ %g s; in a capacity "
      .. "phase, dependency requests/s ≤ %g × its capacity, and success (goodput for the interactive presets) ≥ none's%s.",
      concat(t.policies, ", "), t.none_margin * 100, t.trivial_share * 100,
      (function() local n = {} for k in pairs(t.trivial_scenarios) do n[#n + 1] = k end sort(n) return concat(n, ", ") end)(),
      t.down_req_per_op, t.recovery_s, t.overload_load,
      t.capacity_margin > 0 and format(" − %g points", t.capacity_margin * 100) or "")
    w("")
    if #opts.misses == 0 then
      w("All met.")
    else
      w("| scenario | policy | seed | target | got | want |")
      w("|---|---|---|---|---|---|")
      for _, x in ipairs(opts.misses) do
        local function v(y) return type(y) == "number" and format("%.4g", y) or tostring(y) end
        w("| %s | %s | %d | %s | %s | %s |", x.scenario, x.policy, x.seed, x.target, v(x.got), v(x.want))
      end
    end
    w("")
  end
  return concat(out, "\n")
end

-- One SVG for scenario `sc`: the first seed's per-second success and
-- dependency requests, a line per policy, the phases shaded.
function _M.plot(doc, sc)
  local D = sc.duration
  local top = 0
  for _, pol in ipairs(doc.policies) do
    local s = sc.series[pol]
    if s then for sec = 1, D do top = max(top, s.dep[sec]) end end
  end
  top = svg.nice_max(max(top, sc.rate))
  local bands = {}
  for _, p in ipairs(sc.phases) do
    bands[#bands + 1] = { from = p.from, to = p.to, color = "#999999", opacity = 0.18, label = p.name }
  end
  local succ, dep, legend = {}, {}, {}
  for i, pol in ipairs(doc.policies) do
    local s = sc.series[pol]
    if s then
      local pcts = {}
      for sec = 1, D do
        local v = s.success[sec]
        pcts[sec] = v and v * 100 or false
      end
      succ[#succ + 1] = { values = pcts, color = color(pol, i), width = 1.4, x0 = 0.5, n = D }
      dep[#dep + 1] = { values = s.dep, color = color(pol, i), width = 1.4, x0 = 0.5 }
      legend[#legend + 1] = { label = pol, color = color(pol, i) }
    end
  end
  legend[#legend + 1] = { label = "phase", color = "#999999", band = true, opacity = 0.18 }
  return svg.chart{
    title = format("nresrun tournament: %s", sc.name),
    subtitle = format("seed %d · %g arrivals/s · %s", doc.seeds[1], sc.rate, sc.label),
    width = 1000,
    x = { min = 0, max = D, label = "simulated seconds" },
    legend = legend,
    panels = {
      { title = "success ratio per second (%)", height = 200, bands = bands,
        y = { min = 0, max = 100, label = "%" }, series = succ },
      { title = "dependency requests per second", height = 200, bands = bands,
        y = { min = 0, max = top, label = "per second" }, series = dep },
    },
  }
end

-- nresrun's entry for a tournament file: options --seed (one seed
-- instead of the file's list), --only (a Lua pattern on policy names),
-- --out (default artifacts/sim). Writes <out>/<name>-<stamp>.md and one
-- <name>-<stamp>-<scenario>.svg per scenario. Exit code 0 when every run's
-- accounting holds (missed targets are reported, not an error: the spec
-- asserts them), 1 otherwise.
function _M.main(sim, path, opts)
  local started = os.time()
  local doc = _M.run(sim, { seed = opts.seed, only = opts.only,
                            progress = function(msg) io.stderr:write("nresrun: ", msg, "\n") end })
  if #doc.policies == 0 then
    io.stderr:write("nresrun: no policy matches --only ", tostring(opts.only), "\n")
    return 2
  end
  doc.name = sim.spec.name or path:match("([^/]+)%.lua$") or "tournament"
  doc.started = os.date("!%Y-%m-%d %H:%M:%S UTC", started)
  doc.versions = { nres = require("nres").version, luajit = jit and jit.version or "?" }
  local report = require "nresrun.sim.report"
  local dir = opts.out or "artifacts/sim"
  report.mkdir(dir)
  local stem = doc.name .. "-" .. os.date("!%Y%m%dT%H%M%SZ", started)
  local put = report.put
  for _, sc in ipairs(doc.scenarios) do
    put(format("%s/%s-%s.svg", dir, stem, sc.name), _M.plot(doc, sc))
  end
  local misses = _M.check(doc)
  local md = _M.markdown(doc, { misses = misses, svg = function(n) return format("%s-%s.svg", stem, n) end })
  put(format("%s/%s.md", dir, stem), md .. "\n")
  io.stdout:write(_M.terminal(doc, misses, format("%s/%s.md", dir, stem)), "\n")
  for _, sc in ipairs(doc.scenarios) do
    for _, list in pairs(sc.results) do
      for _, m in ipairs(list) do
        if not m.identity_ok then
          io.stderr:write("nresrun: ", sc.name, ": arrivals do not add up to outcomes\n")
          return 1
        end
      end
    end
  end
  return 0
end

return _M

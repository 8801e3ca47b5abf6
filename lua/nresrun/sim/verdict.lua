-- SPDX-License-Identifier: MIT
-- nresrun.sim.verdict: a simulation's ranking and one sentence per policy.
--
-- Built only from the run's own figures (nresrun.sim.report.analyse must
-- have filled run.phases): the share of arrivals that succeeded, the
-- requests the dependency received while it was down (phases failing at
-- least half its calls; every second when there is none), the success in
-- each other phase, the p99 of successes, and the seconds each policy took
-- to come back after a phase; with an slo (doc.slo), the goodput too
-- (calls that succeeded within its latency, per arrival), and the ranking
-- reads goodput where it reads success otherwise. Ranked by success; policies within
-- SAME_POINTS of each other are ordered by the load they sent, then by
-- recovery, then by p99; neighbours that read the same on all four (load
-- within SAME_LOAD, p99 within SAME_P99) share a place. The first policy
-- is compared with the second, every other one with the first. Breaker flaps are summarised as opens, the
-- gap between probes and the time spent open.
local format, concat, sort = string.format, table.concat, table.sort
local max, abs, huge, floor, log = math.max, math.abs, math.huge, math.floor, math.log

local _M = { _VERSION = "0.1.0" }

_M.SAME_POINTS = 0.5        -- success within half a point reads "same"
_M.SAME_LOAD = 1.2          -- loads within a factor 1.2 read "as many"
_M.SAME_P99 = 1.5           -- p99s within a factor 1.5 are not mentioned
local DOWN = 0.5            -- a phase failing at least this share is "down"

local function pct(v) return format("%.1f", v * 100) end

-- "344x", "2.5x"
local function times(r) return r >= 10 and format("%.0fx", r) or format("%.1fx", r) end

-- The figures a verdict reads from one analysed run.
local function figures(doc, run)
  local T = run.totals
  local f = { policy = run.policy, success = T.ok / max(1, T.arrivals), p99 = T.ok_p99_ms or false,
              goodput = T.good and T.good / max(1, T.arrivals) or nil,
              phases = {}, recovery = 0, recovery_phase = nil, down_requests = 0, down_seconds = 0 }
  local phases = doc.dependency.phases
  local any_down = false
  for i, ph in ipairs(phases) do
    local a = run.phases[i + 1]
    f.phases[i] = a
    if ph.fail >= DOWN then
      any_down = true
      f.down_requests = f.down_requests + a.dep
      f.down_seconds = f.down_seconds + a.seconds
    end
    local rec = a.recovered_after_s
    if rec == false then
      f.recovery, f.recovery_phase = huge, ph.name
    elseif rec > f.recovery then
      f.recovery, f.recovery_phase = rec, ph.name
    end
  end
  if not any_down then
    f.down_requests, f.down_seconds = T.dep_requests, doc.duration_s
  end
  f.any_down = any_down
  f.arrivals = T.arrivals
  f.score = doc.slo and f.goodput or f.success
  return f
end

-- Steps of `factor` above the smallest value: within one factor of the
-- least reads as the least, so sorting on it stays a strict order.
local function step(v, least, factor)
  if not v then return huge end
  if least <= 0 then return v <= 0 and 0 or 1 + floor(log(v) / log(factor)) end
  return floor(log(max(v, least) / least) / log(factor))
end

local function better_in(group)
  local least_load, least_p99 = huge, huge
  for _, f in ipairs(group) do
    least_load = math.min(least_load, f.down_requests)
    if f.p99 then least_p99 = math.min(least_p99, f.p99) end
  end
  for _, f in ipairs(group) do
    f.load_step = step(f.down_requests, least_load, _M.SAME_LOAD)
    f.p99_step = step(f.p99, least_p99, _M.SAME_P99)
  end
  return function(a, b)
    if a.load_step ~= b.load_step then return a.load_step < b.load_step end
    if a.recovery ~= b.recovery then return a.recovery < b.recovery end
    if a.p99_step ~= b.p99_step then return a.p99_step < b.p99_step end
    if a.score ~= b.score then return a.score > b.score end
    return a.policy < b.policy
  end
end

-- Whether two neighbours of the ranking read the same on every key.
local function tied(a, b)
  local la, lb = a.down_requests, b.down_requests
  local pa, pb = a.p99 or 0, b.p99 or 0
  return abs(a.score - b.score) * 100 < _M.SAME_POINTS
    and la <= lb * _M.SAME_LOAD and lb <= la * _M.SAME_LOAD
    and a.recovery == b.recovery
    and pa <= pb * _M.SAME_P99 and pb <= pa * _M.SAME_P99
end

-- Policies by success; a group within SAME_POINTS of its leader is ordered
-- by `better`.
local function rank(list)
  sort(list, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    return a.policy < b.policy
  end)
  local out, i = {}, 1
  while i <= #list do
    local group, lead = {}, list[i].score
    while i <= #list and (lead - list[i].score) * 100 < _M.SAME_POINTS do
      group[#group + 1] = list[i]
      i = i + 1
    end
    sort(group, better_in(group))
    for _, f in ipairs(group) do out[#out + 1] = f end
  end
  return out
end

-- How `mine` compares with `theirs` (requests): "345x fewer", "as many".
local function compare_load(mine, theirs)
  if mine == theirs then return "as many" end
  if theirs == 0 then return "more" end
  if mine == 0 then return "no" end
  if mine * _M.SAME_LOAD <= theirs then return times(theirs / mine) .. " fewer" end
  if theirs * _M.SAME_LOAD <= mine then return times(mine / theirs) .. " more" end
  return "as many"
end

-- The load clauses: one per down phase, or the whole run's requests per call.
local function load_clauses(doc, f, r, parts)
  local any = false
  for i, ph in ipairs(doc.dependency.phases) do
    if ph.fail >= DOWN then
      any = true
      local a, b = f.phases[i], r.phases[i]
      parts[#parts + 1] = format("%s requests to the %s dependency in %s (%.1f vs %.1f/s)",
        compare_load(a.dep, b.dep), ph.fail >= 1 and "dead" or "failing", ph.name,
        a.seconds > 0 and a.dep / a.seconds or 0, b.seconds > 0 and b.dep / b.seconds or 0)
    end
  end
  if not any then
    parts[#parts + 1] = format("%s requests to the dependency (%.2f vs %.2f per call)",
      compare_load(f.down_requests, r.down_requests),
      f.down_requests / max(1, f.arrivals), r.down_requests / max(1, r.arrivals))
  end
end

local function recovery_words(f)
  if f.recovery == huge then return format("never back after %s", f.recovery_phase) end
  if not f.recovery_phase then return nil end
  return format("back %g s after %s", f.recovery, f.recovery_phase)
end

local function ms(s) return format("%.3g", s * 1000) end

-- "same success as b (89.8 vs 89.9 %)", "5.0 points less goodput than b
-- (...)"; without `ref`, "same success (...)".
local function points(what, a, b, ref, suffix)
  local d = (a - b) * 100
  if abs(d) < _M.SAME_POINTS then
    return format("same %s%s (%s vs %s %%%s)", what, ref and " as " .. ref or "", pct(a), pct(b), suffix or "")
  end
  return format("%.1f points %s %s%s (%s vs %s %%%s)", abs(d), d > 0 and "more" or "less", what,
                ref and " than " .. ref or "", pct(a), pct(b), suffix or "")
end

-- One sentence: policy `f` against the reference `r`.
local function sentence(doc, f, r)
  local parts = {}
  local within = doc.slo and format(" within %s ms", ms(doc.slo.latency)) or ""
  if doc.slo then
    parts[1] = points("goodput", f.goodput, r.goodput, r.policy, within)
    parts[2] = points("success", f.success, r.success)
  else
    parts[1] = points("success", f.success, r.success, r.policy, "")
  end
  load_clauses(doc, f, r, parts)
  -- Each other phase where success differs by SAME_POINTS or more.
  for i, ph in ipairs(doc.dependency.phases) do
    local a, b = f.phases[i], r.phases[i]
    if ph.fail < DOWN and a.success and b.success then
      local dp = (a.success - b.success) * 100
      if abs(dp) >= _M.SAME_POINTS then
        parts[#parts + 1] = format("%.1f points %s in %s (%s vs %s %%)", abs(dp), dp > 0 and "more" or "less",
                                   ph.name, pct(a.success), pct(b.success))
      end
    end
  end
  if f.p99 and r.p99 and (f.p99 >= r.p99 * _M.SAME_P99 or r.p99 >= f.p99 * _M.SAME_P99) then
    parts[#parts + 1] = format("p99 of successes %.0f vs %.0f ms", f.p99, r.p99)
  end
  local rec = recovery_words(f)
  if rec then
    if r.recovery ~= f.recovery then
      rec = rec .. format(" (%s: %s)", r.policy,
        r.recovery == huge and "never" or format("%g s", r.recovery))
    end
    parts[#parts + 1] = rec
  end
  return format("%s: %s.", f.policy, concat(parts, ", "))
end

-- The sentence of a policy with no other to compare with.
local function alone(doc, f)
  return format("%s: %s %% success%s.", f.policy, pct(f.success),
    doc.slo and format(", %s %% goodput within %s ms", pct(f.goodput), ms(doc.slo.latency)) or "")
end

-- Opens, probe gap and time open of one run's breaker; nil without one.
function _M.breaker(run)
  local T = run.totals
  if not run.series.breaker then return nil end
  local gaps, n, last = 0, 0, nil
  for _, tr in ipairs(run.transitions) do
    if tr.to == "closed" then
      last = nil
    elseif tr.to == "half-open" then
      if last then gaps, n = gaps + (tr.t - last), n + 1 end
      last = tr.t
    end
  end
  local b = { opens = T.breaker_opens, open_s = T.breaker_open_s, probe_every_s = n > 0 and gaps / n or false }
  if b.opens == 0 then
    b.text = "never opened"
  else
    b.text = format("%d open%s", b.opens, b.opens == 1 and "" or "s")
    if b.probe_every_s then b.text = b.text .. format(", a probe every %.2f s", b.probe_every_s) end
    b.text = b.text .. format(", open %.1f s in all", b.open_s)
  end
  return b
end

-- The verdict of an analysed simulation document:
-- { rule = "...", ranking = { { rank, policy, sentence, success, down_requests, recovery_s, p99_ms } },
--   breakers = { { policy, opens, probe_every_s, open_s, text } } }
function _M.of(doc)
  local list = {}
  for _, run in ipairs(doc.runs) do list[#list + 1] = figures(doc, run) end
  local ranked = rank(list)
  local out = {
    rule = format("ranked by %s; within %g points, by the requests sent %s, then by recovery, then by p99",
                  doc.slo and format("goodput (calls that succeeded within %s ms, per arrival)", ms(doc.slo.latency))
                  or "success",
                  _M.SAME_POINTS, ranked[1].any_down and "while the dependency was down" or "to the dependency"),
    ranking = {}, breakers = {},
  }
  local place = 0
  for i, f in ipairs(ranked) do
    local ref = ranked[1]
    if i == 1 then ref = ranked[2] end
    if i == 1 or not tied(ranked[i - 1], f) then place = i end
    out.ranking[i] = {
      rank = place, policy = f.policy,
      sentence = ref and sentence(doc, f, ref) or alone(doc, f),
      success = f.success, goodput = f.goodput, down_requests = f.down_requests,
      recovery_s = f.recovery ~= huge and f.recovery or false, p99_ms = f.p99,
    }
  end
  for _, run in ipairs(doc.runs) do
    local b = _M.breaker(run)
    if b then
      b.policy = run.policy
      out.breakers[#out.breakers + 1] = b
    end
  end
  return out
end

return _M

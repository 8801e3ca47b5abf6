-- SPDX-License-Identifier: MIT
-- nresrun.tune.fit: a dependency model, as nresrun.sim.dep takes it, fitted
-- to a trace (nresrun.tune.trace) over time windows.
--
-- Per window (WINDOW_S, or longer so a window holds MIN_PER_WINDOW requests
-- on average): arrivals, tries and their outcomes, the latency of the
-- successful tries (median, p99), and the concurrency the dependency held
-- (Little's law: tries per second x their mean latency). A window is
-- healthy when it has no failures, refusals or slowness beyond the noise:
-- failing (error and timeout share above FAILING), refusing (refusal share
-- above REFUSING, where a plain error back in under FAST x the healthy
-- median counts as a refusal that does not say so), slow (median above
-- SLOW x the healthy median). The model:
--   latency   lognormal { median, sigma } of the healthy windows' successes
--             (sigma from their p90: ln(p90 / median) / 1.2816)
--   fail_prob the healthy windows' failure share, when there is one
--   capacity  with refusals: the served rate in refusing windows x the
--             healthy mean latency gives the servers left then, and the
--             healthy servers are twice the peak healthy concurrency (at
--             least that); queue = 2 x servers (assumed: a trace does not
--             show the queue). Without refusals, none: nothing in the
--             trace bounds it
--   phases    adjacent windows with the same flags, merged: fail = their
--             failure share, latency_factor = their median / the healthy
--             one, capacity = their servers / the healthy servers
-- and the arrivals (seconds from the trace's origin) to replay.
local format, floor, ceil, max, min, log, exp =
  string.format, math.floor, math.ceil, math.max, math.min, math.log, math.exp
local sort = table.sort

local _M = { _VERSION = "0.1.0" }

_M.WINDOW_S = 1
_M.MIN_PER_WINDOW = 50
_M.FAILING = 0.03
_M.REFUSING = 0.01
_M.SLOW = 1.3
_M.FAST = 0.1
_M.SLOW_RUN = 3         -- windows: a shorter run of slowness alone is noise
_M.MIN_TRIES = 10      -- a window with fewer tries carries the previous flags

local function quantile(sorted, q)
  if #sorted == 0 then return nil end
  local i = max(1, min(#sorted, ceil(q * #sorted)))
  return sorted[i]
end
_M.quantile = quantile

-- Count one window's tries.
local function count(w, t, tries, fast_s)
  for _, tr in ipairs(tries) do
    w.tries = w.tries + 1
    w.busy = w.busy + tr.latency
    local o = tr.outcome
    if o == "ok" then
      w.ok = w.ok + 1
      w.lat[#w.lat + 1] = tr.latency
    elseif o == "refused" or (o == "error" and fast_s and tr.latency < fast_s) then
      w.refused = w.refused + 1
      if o == "error" then w.silent = w.silent + 1 end
    else
      w.failed = w.failed + 1
      w.first_fail = w.first_fail or t
      w.last_fail = t
    end
  end
end

local function windows_of(trace, width, fast_s)
  local reqs = trace.requests
  local n = floor(reqs[#reqs].t / width) + 1
  local ws = {}
  for i = 1, n do
    ws[i] = { from = (i - 1) * width, to = i * width, arrivals = 0, tries = 0, ok = 0, failed = 0,
              refused = 0, silent = 0, busy = 0, lat = {} }
  end
  for _, r in ipairs(reqs) do
    local w = ws[floor(r.t / width) + 1]
    w.arrivals = w.arrivals + 1
    count(w, r.t, r.tries, fast_s)
  end
  for _, w in ipairs(ws) do
    sort(w.lat)
    w.median = quantile(w.lat, 0.5)
    w.p99 = quantile(w.lat, 0.99)
    w.rate = w.arrivals / width
    w.concurrency = w.busy / width
    w.fail_share = w.tries > 0 and w.failed / max(1, w.tries - w.refused) or 0
    w.refused_share = w.tries > 0 and w.refused / w.tries or 0
  end
  return ws
end

local function flags_of(w, base_median)
  if w.tries < _M.MIN_TRIES then return nil end
  local f = {}
  if w.fail_share > _M.FAILING and w.failed >= 3 then f[#f + 1] = "failing" end
  if w.refused_share > _M.REFUSING and w.refused >= 3 then f[#f + 1] = "refusing" end
  if base_median and w.median and w.median > _M.SLOW * base_median then f[#f + 1] = "slow" end
  return table.concat(f, "+")
end

-- fit(trace[, opts]) -> model. opts.window: seconds per window.
function _M.fit(trace, opts)
  opts = opts or {}
  local reqs = trace.requests
  local span = reqs[#reqs].t
  local rate = #reqs / max(span, 1e-9)
  local width = opts.window or max(_M.WINDOW_S, ceil(_M.MIN_PER_WINDOW / rate))
  -- Pass 1, the healthy median from windows neither failing nor refusing.
  local ws = windows_of(trace, width, nil)
  local lat = {}
  for _, w in ipairs(ws) do
    if flags_of(w, nil) == "" then for _, l in ipairs(w.lat) do lat[#lat + 1] = l end end
  end
  sort(lat)
  local base_median = quantile(lat, 0.5)
  if not base_median then
    return nil, "no healthy window: every window fails or refuses, so nothing says what healthy latency is"
  end
  -- Pass 2 with silent refusals and slowness known.
  ws = windows_of(trace, width, _M.FAST * base_median)
  lat = {}
  local failed, tries, peak = 0, 0, 0
  for _, w in ipairs(ws) do w.flags = flags_of(w, base_median) end
  -- Slowness alone for fewer than SLOW_RUN windows is a queue's passing
  -- burst (a heavy tail), not a phase.
  local i = 1
  while i <= #ws do
    local j = i
    while j <= #ws and ws[j].flags == "slow" do j = j + 1 end
    if j > i and j - i < _M.SLOW_RUN then
      for k = i, j - 1 do ws[k].flags = "" end
    end
    i = math.max(j, i + 1)
  end
  for _, w in ipairs(ws) do
    if w.flags == "" then
      for _, l in ipairs(w.lat) do lat[#lat + 1] = l end
      failed, tries = failed + w.failed, tries + w.tries
      peak = max(peak, w.concurrency)
    end
  end
  sort(lat)
  local healthy_n = #lat
  if healthy_n < 50 then
    return nil, format("%d successful tries in healthy windows: too few to fit a latency (at least 50)", healthy_n)
  end
  local median, p90, p99 = quantile(lat, 0.5), quantile(lat, 0.9), quantile(lat, 0.99)
  local sigma = max(0, log(p90 / median) / 1.2816)
  local latency = sigma > 0.01 and { lognormal = { median, sigma } } or { fixed = median }
  local mean_s = median * exp(sigma * sigma / 2)
  local evidence = {
    latency = format("%d successful tries in healthy windows: median %.3g ms, p90 %.3g ms, p99 %.3g ms",
                     healthy_n, median * 1e3, p90 * 1e3, p99 * 1e3),
  }

  -- Phases: runs of windows with the same flags (a thin window carries on).
  local runs, cur = {}, nil
  for _, w in ipairs(ws) do
    local f = w.flags
    if f == nil then f = cur and cur.flags or "" end
    if not cur or cur.flags ~= f then
      cur = { flags = f, windows = {} }
      runs[#runs + 1] = cur
    end
    cur.windows[#cur.windows + 1] = w
  end

  local saturated = {}
  for _, r in ipairs(runs) do
    if r.flags:find("refusing") then
      for _, w in ipairs(r.windows) do
        saturated[#saturated + 1] = (w.tries - w.refused) / width * mean_s
      end
    end
  end
  sort(saturated)
  local servers, capacity
  local healthy_servers = max(1, ceil(2 * peak))
  local silent, refused = 0, 0
  for _, w in ipairs(ws) do silent, refused = silent + w.silent, refused + w.refused end
  if #saturated > 0 then
    local busy = quantile(saturated, 0.5)
    servers = max(healthy_servers, ceil(busy))
    local refusal = silent * 2 > refused and "error" or "throttled"
    capacity = { concurrency = servers, queue = 2 * servers, refusal = refusal }
    evidence.capacity = format("refusals in %d windows; served rate x healthy mean latency there: %.1f servers busy (median); "
      .. "healthy peak concurrency %.1f (Little's law), x2 = %d servers; queue %d assumed (2 x servers); "
      .. "refusals %s (%d of %d plain errors back in < %g x the healthy median)",
      #saturated, busy, peak, healthy_servers, 2 * servers, refusal, silent, refused, _M.FAST)
  else
    evidence.capacity = format("no refusals seen, so no capacity limit is modelled (the peak concurrency was %.1f, Little's law)",
                               peak)
  end
  local dependency = { latency = latency, capacity = capacity, phases = {} }
  local phases = dependency.phases

  for _, r in ipairs(runs) do
    if r.flags ~= "" then
      local ws_ = r.windows
      local f, t, ok, rf, lat_r = 0, 0, 0, 0, {}
      for _, w in ipairs(ws_) do
        f, t, ok, rf = f + w.failed, t + w.tries, ok + w.ok, rf + w.refused
        for _, l in ipairs(w.lat) do lat_r[#lat_r + 1] = l end
      end
      sort(lat_r)
      local p = { name = r.flags, from = ws_[1].from, to = ws_[#ws_].to }
      if r.flags:find("failing") then
        p.fail = math.floor(f / max(1, t - rf) * 1000 + 0.5) / 1000
        if p.fail >= 0.99 or (#ws_ > 2 and f >= t - rf - ws_[1].ok - ws_[#ws_].ok) then
          -- Down: every failure but the edges' successes. It begins at
          -- the first failure and ends after the last, not at a window's edge.
          p.fail = 1
          p.from = floor(ws_[1].first_fail * 1000) / 1000
          p.to = ceil(ws_[#ws_].last_fail * 1000 + 1) / 1000
        end
      end
      -- Slowness while refusing is the queue's wait, which the capacity models.
      if r.flags:find("slow") and not r.flags:find("refusing") and lat_r[1] then
        p.latency_factor = math.floor(quantile(lat_r, 0.5) / median * 100 + 0.5) / 100
      end
      if r.flags:find("refusing") then
        local busy = {}
        for _, w in ipairs(ws_) do busy[#busy + 1] = (w.tries - w.refused) / width * mean_s end
        sort(busy)
        p.capacity = floor(min(1, max(0.01, quantile(busy, 0.5) / servers)) * 100 + 0.5) / 100
      end
      p.evidence = format("%d windows %g-%g s: %d tries, %d failed, %d refused, median %s ms", #ws_, p.from, p.to, t, f, rf,
                          lat_r[1] and format("%.3g", quantile(lat_r, 0.5) * 1e3) or "-")
      if p.fail or p.latency_factor or p.capacity then phases[#phases + 1] = p end
    end
  end

  local base_fail = tries > 0 and failed / tries or 0
  if base_fail > 0.001 then
    dependency.fail_prob = math.floor(base_fail * 10000 + 0.5) / 10000
    evidence.fail_prob = format("%d of %d tries failed in healthy windows", failed, tries)
  end

  local arrivals = {}
  for i, r in ipairs(reqs) do arrivals[i] = r.t end
  local summary = {}
  for i, w in ipairs(ws) do
    summary[i] = { from = w.from, rate = w.rate, tries = w.tries, ok = w.ok, failed = w.failed, refused = w.refused,
                   median_ms = w.median and w.median * 1e3 or false, p99_ms = w.p99 and w.p99 * 1e3 or false,
                   concurrency = w.concurrency, flags = w.flags or "thin" }
  end
  return {
    format = trace.format, source = trace.path, warnings = trace.warnings,
    requests = #reqs, duration = ceil(span + 1e-9), window = width, mean_rate = rate,
    healthy = { median_s = median, p90_s = p90, p99_s = p99, mean_s = mean_s, samples = healthy_n,
                peak_concurrency = peak, fail_share = base_fail },
    dependency = dependency, evidence = evidence, arrivals = arrivals, windows = summary,
  }
end

-- The dependency table without the notes a simulation does not take.
function _M.sim_dependency(model)
  local d = model.dependency
  local out = { latency = d.latency, capacity = d.capacity, fail_prob = d.fail_prob, phases = {} }
  for i, p in ipairs(d.phases) do
    out.phases[i] = { name = p.name, from = p.from, to = p.to, fail = p.fail,
                      latency_factor = p.latency_factor, capacity = p.capacity }
  end
  return out
end

return _M

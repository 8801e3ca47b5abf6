-- SPDX-License-Identifier: MIT
-- bench/gateway/peers-report.lua TSV ELAPSED JSON_OUT SLOW_START: the
-- Markdown report (stdout) and the JSON (JSON_OUT) of bench/gateway/peers.sh
-- from its raw lines. Verdict first: nres's targets (a rolling deploy with
-- 0 failed requests and a p99 within 1.5x the steady p99 of the same run;
-- new peers at their fair share within slow_start + 1 s of being added,
-- with 0 failed; a hung peer that gets no client request), then each arm's
-- figures. Exits 10 when an nres arm's rolling deploy through the membership
-- actions failed a request (the smoke test's check), 0 otherwise.
local cjson = require "cjson.safe"
local tsv, ELAPSED, JSON_OUT, SLOW_START = arg[1], tonumber(arg[2]), arg[3], tonumber(arg[4])
local format = string.format
local FAIR = 0.8   -- a new peer is at its fair share at 0.8 of an equal share

local order, arms, samples = {}, {}, {}
local function arm(name)
  if not arms[name] then arms[name] = { name = name }; order[#order + 1] = name end
  return arms[name]
end
for line in io.lines(tsv) do
  local kind, a, rest = line:match("^(%S+) (%S+) ?(.*)$")
  if kind == "membership" then
    arm(a).membership = rest
  elseif kind == "wrk" then
    local sc, kv = rest:match("^(%S+) ?(.*)$")
    local r = {}
    for k, v in kv:gmatch("([%w_]+)=(%S+)") do r[k] = tonumber(v) or v end
    r.failed = (r.bad or 0) + (r.sockerr or 0)
    arm(a)[sc] = r
  elseif kind == "share" then
    local s = { counts = {} }
    for k, v in rest:gmatch("(%w+)=(%S+)") do
      if k == "t" then s.t = tonumber(v) else s.counts[k] = tonumber(v) end
    end
    samples[a] = samples[a] or {}
    table.insert(samples[a], s)
  end
end

local function split(s)
  local t = {}
  for x in tostring(s or ""):gmatch("[^,]+") do t[#t + 1] = x end
  return t
end

-- Windows between two samples: each peer's share of the requests counted
-- in both; then when each new peer first reached FAIR of an equal share.
local function shares(a)
  local sc, list = arms[a].scale, samples[a]
  if not sc or not list then return nil end
  local new = split(sc.new)
  local windows = {}
  for i = 2, #list do
    local p, q, total, d = list[i - 1], list[i], 0, {}
    for port, c in pairs(q.counts) do
      local c0 = p.counts[port]
      if c0 and c >= c0 then d[port] = c - c0; total = total + d[port] end
    end
    if total > 0 then
      local n, w = 0, { t = q.t, share = {} }
      for port, x in pairs(d) do n = n + 1; w.share[port] = x / total end
      w.peers = n
      windows[#windows + 1] = w
    end
  end
  local reached = {}
  for _, port in ipairs(new) do
    for _, w in ipairs(windows) do
      if w.t > sc.added_at and w.t <= sc.drained_at and w.share[port]
         and w.share[port] >= FAIR / w.peers then
        reached[port] = w.t - sc.added_at
        break
      end
    end
  end
  local worst = 0
  for _, port in ipairs(new) do worst = math.max(worst, reached[port] or math.huge) end
  return { windows = windows, reached = reached, worst = worst, old = split(sc.old), new = new }
end

local function api(x) return (x.membership or ""):match("^control API %(") ~= nil end

local out = {}
local function say(...) out[#out + 1] = format(...) end
local function ms(x) return x and format("%.1f", x) or "-" end
local function ratio(r, s) return (r and s and s.p99_ms > 0) and r.p99_ms / s.p99_ms or nil end

local doc = { elapsed_s = ELAPSED, slow_start_s = SLOW_START, fair_fraction = FAIR, arms = {} }
local nres_rolling_failed = false

say("# Peers that come and go: nginx, HAProxy, nres")
say("")
say("## Verdict")
say("")
for _, a in ipairs(order) do
  local x = arms[a]
  if a:match("^nres") then
    if x.rolling and x.steady then
      local q = ratio(x.rolling, x.steady)
      local ok = x.rolling.failed == 0 and q <= 1.5
      -- the 0-failed check needs the membership actions: a reload drops
      -- client connections that nres does not own
      if x.rolling.failed > 0 and api(x) then nres_rolling_failed = true end
      say("- **Rolling deploy, %s**: %d failed of %d; p99 %s ms against %s ms steady (%.2fx): %s"
          .. " (target 0 failed, p99 within 1.5x).", a, x.rolling.failed, x.rolling.requests,
          ms(x.rolling.p99_ms), ms(x.steady.p99_ms), q, ok and "**met**" or "**missed**")
    end
    local sh = shares(a)
    if sh then
      local ok = x.scale.failed == 0 and sh.worst <= SLOW_START + 1
      say("- **Scale 3 → 6 → 3, %s**: %d failed of %d; the slowest new peer at its fair share"
          .. " %s s after being added: %s (target 0 failed, within slow_start + 1 = %g s).",
          a, x.scale.failed, x.scale.requests,
          sh.worst < math.huge and format("%.1f", sh.worst) or "never", ok and "**met**" or "**missed**",
          SLOW_START + 1)
    end
    local h = x["idle-hang"]
    if h then
      say("- **A peer hangs while the upstream is idle, %s**: ejected by the checks after %s s;"
          .. " %d client requests reached it, %d failed, p99 %s ms: %s (target: no client request"
          .. " to it).", a, tostring(h.ejected_after), h.hung_requests, h.failed, ms(h.p99_ms),
          h.hung_requests == 0 and "**met**" or "**missed**")
    end
  end
end
for _, a in ipairs(order) do
  if not a:match("^nres") then
    local x, parts = arms[a], {}
    if x.rolling then
      parts[#parts + 1] = format("rolling deploy %d failed, p99 %.2fx steady", x.rolling.failed,
                                 ratio(x.rolling, x.steady) or 0)
    end
    if x.scale then parts[#parts + 1] = format("scale %d failed", x.scale.failed) end
    if x["idle-hang"] then
      parts[#parts + 1] = format("hung peer got %d client requests, p99 %s ms",
                                 x["idle-hang"].hung_requests, ms(x["idle-hang"].p99_ms))
    end
    say("- %s: %s.", a, table.concat(parts, "; "))
  end
end
say("")
say("One run of `bench/gateway/peers.sh`, %d s. Each arm's changes:", ELAPSED)
say("")
for _, a in ipairs(order) do say("- %s: %s", a, arms[a].membership or "-") end

-- A table of wrk results: one row per { label, result, extra cell }.
local function wrk_table(title, extra_head, rows)
  say("")
  say("## %s", title)
  say("")
  say("| arm | requests | failed (non-2xx + socket) | req/s | p50 ms | p99 ms | %s |", extra_head)
  say("|---|---:|---:|---:|---:|---:|---|")
  for _, row in ipairs(rows) do
    local r = row[2]
    say("| %s | %d | %d (%d + %d) | %.0f | %s | %s | %s |", row[1], r.requests, r.failed, r.bad,
        r.sockerr, r.rps, ms(r.p50_ms), ms(r.p99_ms), row[3])
  end
end
local function rows_of(sc, cell)
  local rows = {}
  for _, a in ipairs(order) do
    if arms[a][sc] then rows[#rows + 1] = { a, arms[a][sc], cell(a, arms[a][sc]) } end
  end
  return rows
end

local any = function(sc) for _, a in ipairs(order) do if arms[a][sc] then return true end end end
if any("rolling") then
  local rows = {}
  for _, a in ipairs(order) do
    local x = arms[a]
    if x.steady then rows[#rows + 1] = { a .. ", steady", x.steady, "" } end
    if x.rolling then
      rows[#rows + 1] = { a .. ", rolling", x.rolling, format("%.2fx; steps done at %s s",
                          ratio(x.rolling, x.steady) or 0, tostring(x.rolling.steps_done_at)) }
    end
  end
  wrk_table("Rolling deploy: steady, then 3 peers replaced one by one",
            "p99 / steady p99; steps", rows)
end
if any("scale") then
  wrk_table("Scale out and in: 3 → 6 → 3 peers under load", "slowest new peer at fair share (s)",
            rows_of("scale", function(a)
              local sh = shares(a)
              return sh and (sh.worst < math.huge and format("%.1f", sh.worst) or "never") or "-"
            end))
  for _, a in ipairs(order) do
    local sh, sc = shares(a), arms[a].scale
    if sh then
      say("")
      say("%s: each peer's share of the requests per 0.5 s window (%%), new peers added at %.1f s"
          .. " (done %.1f s), drained at %.1f s, removed at %.1f s.", a, sc.added_at,
          sc.added_done_at, sc.drained_at, sc.removed_at)
      say("")
      local cols = {}
      for _, p in ipairs(sh.old) do cols[#cols + 1] = p end
      for _, p in ipairs(sh.new) do cols[#cols + 1] = p end
      local head, rule = "| t (s) |", "|---:|"
      for i, p in ipairs(cols) do
        head = head .. format(" %s %s |", i <= #sh.old and "old" or "new", p)
        rule = rule .. "---:|"
      end
      say("%s", head); say("%s", rule)
      for _, w in ipairs(sh.windows) do
        local line = format("| %.1f |", w.t)
        for _, p in ipairs(cols) do
          line = line .. (w.share[p] and format(" %.0f |", 100 * w.share[p]) or " |")
        end
        say("%s", line)
      end
    end
  end
end
if any("idle-hang") then
  wrk_table("A peer hangs while the upstream is idle",
            "client requests to the hung peer; ejected by the checks after (s)",
            rows_of("idle-hang", function(_, r)
              return format("%d; %s", r.hung_requests, tostring(r.ejected_after))
            end))
  say("")
  say("The peer answers nothing (30 s delay on every request and check) from 3 s before wrk starts."
      .. " nginx knows only passive checks: a request must time out (proxy_read_timeout 2 s) first.")
end
say("")
say("The machine is shared by several engineers' builds and tests: the p99 figures and the times"
    .. " are those of a loaded machine, ratios against the same run's steady figures.")

for _, a in ipairs(order) do
  local x = arms[a]
  local sh = shares(a)
  doc.arms[a] = { membership = x.membership, steady = x.steady, rolling = x.rolling, scale = x.scale,
                  idle_hang = x["idle-hang"],
                  rolling_p99_ratio = ratio(x.rolling, x.steady),
                  fair_share_s = sh and sh.reached or nil,
                  share_windows = sh and sh.windows or nil }
end
local f = assert(io.open(JSON_OUT, "w"))
cjson.encode_sparse_array(true)
f:write(assert(cjson.encode(doc)), "\n")
f:close()
io.write(table.concat(out, "\n"), "\n")
os.exit(nres_rolling_failed and 10 or 0)

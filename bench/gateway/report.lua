-- SPDX-License-Identifier: MIT
-- bench/gateway/report.lua TSV D REPS BLIP_D ELAPSED HREPS [healthy]: the
-- Markdown report of bench/gateway/run.sh from its raw lines (kept beside
-- it as .tsv); with "healthy" (run.sh --healthy) only the healthy
-- throughput comparison.
-- Medians with min-max for throughput; success and amplification are
-- summed over the repetitions (totals, not averages of ratios); then the
-- issue's targets, each with its figure and met or missed.
local tsv, D, REPS, BLIP_D, ELAPSED, HREPS = arg[1], arg[2], arg[3], arg[4], arg[5], arg[6]
local HEALTHY_ONLY = arg[7] == "healthy"
local format = string.format

local rows = {}
for line in io.lines(tsv) do
  local kind, gw, sc, rep, rest = line:match("^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(.*)$")
  if kind then
    local r = { kind = kind, gw = gw, sc = sc, rep = tonumber(rep) }
    for k, v in rest:gmatch("([%w_]+)=([%d%.%-]+)") do r[k] = tonumber(v) end
    rows[#rows + 1] = r
  end
end

local gateways = { "nginx-plain", "nginx-plain-b", "nginx-plain-lua", "nginx-retry", "nginx-retry-mf0",
                   "haproxy", "nres-balancer", "nres-balancer-base", "nres-module", "nres-module-base", "nres-cosocket" }
local labels = {
  ["nginx-plain"] = "nginx proxy_pass",
  ["nginx-plain-b"] = "nginx proxy_pass again (the control: the same config)",
  ["nginx-plain-lua"] = "nginx proxy_pass, lua-nginx-module loaded (control)",
  ["nginx-retry"] = "nginx next_upstream x3 (passive checks)",
  ["nginx-retry-mf0"] = "nginx next_upstream x3, max_fails=0",
  haproxy = "HAProxy retries 2, redispatch, observe layer7",
  ["nres-balancer"] = "nres balancer mode (gateway preset, 20 % budget)",
  ["nres-balancer-base"] = "nres balancer mode, baseline Lua tree (NRES_BENCH_BASE_LUA)",
  ["nres-module"] = "nres balancer mode, nginx module (same policy, no Lua phase)",
  ["nres-module-base"] = "nres balancer mode, nginx module of the baseline build (NRES_BENCH_BASE_BUILD)",
  ["nres-cosocket"] = "nres cosocket mode (gateway preset, 20 % budget)",
}
local single = { "healthy", "every4", "every2", "down" }
local pools = { "pool-healthy", "pool-every2", "pool-down1", "pool-slow" }
local sclabels = {
  healthy = "healthy", every4 = "every 4th fails", every2 = "every 2nd fails", down = "down",
  ["pool-healthy"] = "3 peers, all healthy (1 ms)",
  ["pool-every2"] = "3 peers, one fails every 2nd",
  ["pool-down1"] = "3 peers, one down",
  ["pool-slow"] = "3 peers, one 10x slower (10 ms)",
}

local function select(kind, gw, sc)
  local out = {}
  for _, r in ipairs(rows) do
    if r.kind == kind and r.gw == gw and r.sc == sc then out[#out + 1] = r end
  end
  return out
end

local function median(t)
  table.sort(t)
  local n = #t
  if n == 0 then return 0 end
  if n % 2 == 1 then return t[(n + 1) / 2] end
  return (t[n / 2] + t[n / 2 + 1]) / 2
end

local function stats(gw, sc)
  local rs = select("wrk", gw, sc)
  if #rs == 0 then return nil end
  local req, ok, ups, bad, rps, p99, cpu = 0, 0, 0, 0, {}, {}, {}
  for _, r in ipairs(rs) do
    if r.gw_cpu_us then cpu[#cpu + 1] = r.gw_cpu_us end
    local total = r.requests + r.sockerr
    req, ok, ups, bad = req + total, ok + r.ok, ups + r.upstream, bad + r.bad_peer
    rps[#rps + 1] = r.rps
    p99[#p99 + 1] = r.p99_ms
  end
  local lo, hi = math.huge, 0
  for _, v in ipairs(rps) do lo = math.min(lo, v); hi = math.max(hi, v) end
  return { success = ok / math.max(req, 1), amp = ups / math.max(req, 1),
           bad = bad / math.max(req, 1), rps = median(rps), lo = lo, hi = hi,
           p99 = median(p99), n = #rs, rows = rs, cpu = #cpu > 0 and median(cpu) or nil }
end

-- Throughput against proxy_pass: in the healthy cell, where the gateways'
-- runs are interleaved, the median of run-by-run ratios (each run against
-- the proxy_pass run of the same round), which cancels the machine's drift;
-- elsewhere the ratio of medians.
local function vs_plain(gw, sc, s, base)
  if not base then return 0 end
  if sc ~= "healthy" then return s.rps / base.rps end
  local plain, ratios = {}, {}
  for _, r in ipairs(base.rows) do plain[r.rep] = r.rps end
  for _, r in ipairs(s.rows) do
    if plain[r.rep] then ratios[#ratios + 1] = r.rps / plain[r.rep] end
  end
  local m = median(ratios)
  return m, ratios[1] or 0, ratios[#ratios] or 0   -- sorted by median
end

-- The healthy throughput comparison: req/s, the run-by-run ratio to
-- proxy_pass, and each gateway's CPU per request.
local function healthy_table()
  local base = stats("nginx-plain", "healthy")
  print("| gateway | req/s median (min-max) | vs proxy_pass, run by run: median (min-max) | gateway CPU us/request (median) | p99 ms |")
  print("|---|---|---|---|---|")
  for _, gw in ipairs(gateways) do
    local s = stats(gw, "healthy")
    if s then
      local m, lo, hi = vs_plain(gw, "healthy", s, base)
      lo, hi = lo or 0, hi or 0
      print(format("| %s | %.0f (%.0f-%.0f) | %.3f (%.3f-%.3f) | %s | %.1f |", labels[gw], s.rps,
                   s.lo, s.hi, m, lo, hi, s.cpu and format("%.0f", s.cpu) or "-", s.p99))
    end
  end
end

if HEALTHY_ONLY then
  print(format("# Gateway benchmark, healthy throughput only, %s", os.date("%Y-%m-%d")))
  print()
  print(format("`bash bench/gateway/run.sh --healthy`: one upstream, every gateway running at once,"
               .. " %s interleaved runs of %s s each (wrk, 2 threads, 16 connections), the"
               .. " upstream reloaded before each round so every gateway's keepalive"
               .. " connections to it are dealt anew; total run time %s s.", HREPS, D, ELAPSED))
  print()
  healthy_table()
  os.exit(0)
end

print(format("# Gateway benchmark, %s", os.date("%Y-%m-%d")))
print()
print("`bash bench/gateway/run.sh` (bench/gateway/): each gateway on 127.0.0.1 in front of")
print("the test upstream (a second nginx with Lua, spec/nginx/nres_upstream.lua, on three")
print("ports, each port its own upstream with its own mode; \"every Nth fails\" is one")
print("counter per port shared by its workers); all nginx instances run 2 workers; the")
print("machine has 2 cores shared by upstream, gateways, load generator and whatever else")
print("runs on it, so throughput is relative: compare within a row, against nginx")
print("proxy_pass measured in the same run.")
print()
print(format("- wrk: 2 threads, 16 connections, %s runs of %s s per cell after a 1 s healthy",
             REPS, D))
print("  warm-up (state carries over between the runs, as in a live gateway); pool cells")
print("  start counting one second after the fault starts;")
print(format("- healthy with one upstream (the throughput comparison): all gateways running at"
             .. " once, %s runs of %s s each, interleaved gateway by gateway, the upstream"
             .. " reloaded before each round (keepalive connections dealt anew); \"vs"
             .. " proxy_pass\" there is the median of run-by-run ratios;", HREPS or "?", D))
print(format("- blip: one %s s wrk run; the upstream fails everything from 1 s to 4 s;", BLIP_D))
print("- reload: 6 s of wrk against a down upstream, `nginx -s reload` (HUP; HAProxy: a")
print("  soft reload with -sf) at 3.5 s; upstream requests in the 1.5 s before and after;")
print("- success = 2xx / requests; amplification = upstream requests / client requests;")
print("  bad peer = requests reaching the failing (or slow) peer / client requests;")
print("  req/s = wrk's median (min-max); p99 = wrk's latency percentile, median of runs.")
print(format("- total run time %s s.", ELAPSED))
print()

print("## One upstream")
print()
print("| scenario | gateway | success | amplification | req/s median (min-max) | vs proxy_pass | p99 ms |")
print("|---|---|---|---|---|---|---|")
for _, sc in ipairs(single) do
  local base = stats("nginx-plain", sc)
  for _, gw in ipairs(gateways) do
    local s = stats(gw, sc)
    if s then
      print(format("| %s | %s | %.1f %% | %.3f | %.0f (%.0f-%.0f) | %.2f | %.1f |",
        sclabels[sc], labels[gw], 100 * s.success, s.amp, s.rps, s.lo, s.hi,
        (vs_plain(gw, sc, s, base)), s.p99))
    end
  end
end
print()

print("### Healthy throughput, run by run")
print()
healthy_table()
print()

print("## A pool of three peers")
print()
print("nres cosocket mode calls one host:port, so it has no pool rows.")
print()
print("| scenario | gateway | success | amplification | to the bad peer | req/s median (min-max) | p99 ms |")
print("|---|---|---|---|---|---|---|")
for _, sc in ipairs(pools) do
  for _, gw in ipairs(gateways) do
    local s = stats(gw, sc)
    if s then
      print(format("| %s | %s | %.2f %% | %.3f | %s | %.0f (%.0f-%.0f) | %.1f |",
        sclabels[sc], labels[gw], 100 * s.success, s.amp,
        sc == "pool-healthy" and "-" or format("%.2f %%", 100 * s.bad),
        s.rps, s.lo, s.hi, s.p99))
    end
  end
end
print()

print("## 3 s blip")
print()
print("wrk is a closed loop: a gateway that refuses fast (an open breaker) answers many more")
print("requests per second during the blip than one that waits on the upstream, so the success")
print("share of a run is not comparable across gateways here; the failure window is.")
print()
print("| gateway | first 2xx after recovery | clients saw failures for | success | amplification | req/s |")
print("|---|---|---|---|---|---|")
local blip = {}
for _, gw in ipairs(gateways) do
  local s = stats(gw, "blip")
  if s then
    local r = s.rows[1]
    local first = (r.first_ok > 0 and r.recovery > 0) and r.first_ok - r.recovery or nil
    blip[gw] = first
    local window = (r.first_bad or 0) > 0 and format("%.2f s (%.2f s after recovery)",
      r.last_bad - r.first_bad, r.last_bad - r.recovery) or "-"
    print(format("| %s | %s | %s | %.1f %% | %.3f | %.0f |", labels[gw],
                 first and format("%.2f s", first) or "none in the run", window,
                 100 * s.success, s.amp, s.rps))
  end
end
print()

print("## Reload during an outage")
print()
print("| gateway | upstream requests 1.5 s before the reload | 1.5 s after | extra | client requests | success |")
print("|---|---|---|---|---|---|")
local reload = {}
for _, gw in ipairs(gateways) do
  local r = select("reload", gw, "reload")[1]
  if r then
    reload[gw] = r.after - r.before
    print(format("| %s | %d | %d | %d | %d | %.1f %% |", labels[gw], r.before, r.after,
                 math.max(0, r.after - r.before), r.requests,
                 100 * r.ok / math.max(r.requests, 1)))
  end
end
print()

-- ------------------------------------------------------------ targets
print("## Targets (nres balancer mode)")
print()
print("| target | measured | met |")
print("|---|---|---|")
local function target(name, value, ok)
  print(format("| %s | %s | %s |", name, value, ok == nil and "no figure" or (ok and "yes" or "NO")))
end
local b = "nres-balancer"
local hp = stats("nginx-plain", "healthy")
for _, arm in ipairs({ { b, "" }, { "nres-module", " (nginx module)" } }) do
  local h = stats(arm[1], "healthy")
  if h and hp then
    local ratio = (vs_plain(arm[1], "healthy", h, hp))
    target("healthy, one upstream: >= 0.95x plain proxy_pass" .. arm[2],
           format("%.2fx (median of run-by-run ratios; medians %.0f vs %.0f req/s)", ratio,
                  h.rps, hp.rps), ratio >= 0.95)
  end
end
local s = stats(b, "pool-every2")
if s then
  target("3 peers, one fails every 2nd: success >= 99.5 %", format("%.2f %%", 100 * s.success),
         s.success >= 0.995)
  target("3 peers, one fails every 2nd: amplification <= 1.05 after the first second",
         format("%.3f", s.amp), s.amp <= 1.05)
end
s = stats(b, "pool-down1")
if s then
  target("3 peers, one down: success >= 99.9 %", format("%.2f %%", 100 * s.success),
         s.success >= 0.999)
  target("3 peers, one down: <= 1 % of requests to the dead peer after the first second",
         format("%.2f %%", 100 * s.bad), s.bad <= 0.01)
end
local sl, sh = stats(b, "pool-slow"), stats(b, "pool-healthy")
if sl and sh then
  target("3 peers, one 10x slower: p99 <= 2x the all-healthy p99",
         format("%.1f ms vs %.1f ms (%.2fx)", sl.p99, sh.p99, sl.p99 / sh.p99),
         sl.p99 <= 2 * sh.p99)
end
s = stats(b, "every2")
if s then
  target("one upstream, every 2nd fails: amplification <= 1.2", format("%.3f", s.amp), s.amp <= 1.2)
  target("one upstream, every 2nd fails: success >= 55 %", format("%.1f %%", 100 * s.success),
         s.success >= 0.55)
end
s = stats(b, "down")
if s then target("one upstream, down: amplification <= 0.05", format("%.3f", s.amp), s.amp <= 0.05) end
if blip[b] ~= nil or stats(b, "blip") then
  target("one upstream, 3 s blip: first 2xx <= 1.5 s after recovery",
         blip[b] and format("%.2f s", blip[b]) or "none", blip[b] ~= nil and blip[b] <= 1.5)
end
if reload[b] then
  target("reload during an outage: 0 extra requests to the dead upstream",
         format("%d", math.max(0, reload[b])), reload[b] <= 0)
end

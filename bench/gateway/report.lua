-- bench/gateway/report.lua TSV D REPS N BLIP_D ELAPSED: the Markdown
-- report of bench/gateway/run.sh from its raw lines (kept beside it as
-- .tsv). Medians with min-max for throughput; success and amplification
-- are summed over the repetitions (totals, not averages of ratios).
local tsv, D, REPS, N, BLIP_D, ELAPSED = arg[1], arg[2], arg[3], arg[4], arg[5], arg[6]
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

local gateways = { "nginx-plain", "nginx-retry", "nginx-retry-mf0", "haproxy", "nres" }
local labels = {
  ["nginx-plain"] = "nginx proxy_pass",
  ["nginx-retry"] = "nginx next_upstream x3 (passive checks)",
  ["nginx-retry-mf0"] = "nginx next_upstream x3, max_fails=0",
  haproxy = "HAProxy retries 2, retry-on 503",
  nres = "nginx + nres (gateway preset)",
}
local scenarios = { "healthy", "every4", "every2", "down" }
local sclabels = { healthy = "healthy", every4 = "every 4th fails", every2 = "every 2nd fails",
                   down = "down", blip = "3 s blip" }

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

local function wrk_stats(gw, sc)
  local rs = select("wrk", gw, sc)
  if #rs == 0 then return nil end
  local req, ok, ups, rps, p99 = 0, 0, 0, {}, {}
  for _, r in ipairs(rs) do
    local total = r.requests + r.sockerr
    req, ok, ups = req + total, ok + r.ok, ups + r.upstream
    rps[#rps + 1] = r.rps
    p99[#p99 + 1] = r.p99_ms
  end
  local lo, hi = math.huge, 0
  for _, v in ipairs(rps) do lo = math.min(lo, v); hi = math.max(hi, v) end
  return { success = ok / math.max(req, 1), amp = ups / math.max(req, 1),
           rps = median(rps), lo = lo, hi = hi, p99 = median(p99), n = #rs, rows = rs }
end

print(format("# Gateway benchmark, %s", os.date("%Y-%m-%d")))
print()
print("`bash bench/gateway/run.sh` (bench/gateway/): each gateway on 127.0.0.1 in front of")
print("the test upstream (a second nginx with Lua, spec/nginx/nres_upstream.lua, whose")
print("\"every Nth fails\" is one counter shared by its workers); all nginx instances run")
print("2 workers; the machine has 2 cores shared by upstream, gateway and load generator,")
print("so throughput is relative: compare within a row, against nginx proxy_pass measured")
print("in the same run.")
print()
print(format("- wrk: 2 threads, 16 connections, %s runs of %s s per cell after a 1 s healthy",
             REPS, D))
print("  warm-up (state carries over between the runs, as in a live gateway);")
print(format("- fixed count: %s requests with curl, 16 in parallel, after the wrk runs;", N))
print(format("- blip: one %s s wrk run; the upstream fails everything from 1 s to 4 s.", BLIP_D))
print("- success = 2xx / requests; amplification = upstream requests / client requests;")
print("  req/s = wrk's median (min-max); p99 = wrk's latency percentile, median of runs.")
print(format("- total run time %s s.", ELAPSED))
print()

print("## wrk")
print()
print("| scenario | gateway | success | amplification | req/s median (min-max) | vs proxy_pass | p99 ms |")
print("|---|---|---|---|---|---|---|")
for _, sc in ipairs(scenarios) do
  local base = wrk_stats("nginx-plain", sc)
  for _, gw in ipairs(gateways) do
    local s = wrk_stats(gw, sc)
    if s then
      print(format("| %s | %s | %.1f %% | %.3f | %.0f (%.0f-%.0f) | %.2f | %.1f |",
        sclabels[sc], labels[gw], 100 * s.success, s.amp, s.rps, s.lo, s.hi,
        base and s.rps / base.rps or 0, s.p99))
    end
  end
end
print()

print(format("## Fixed count (%s requests)", N))
print()
print("| scenario | " .. table.concat((function()
  local t = {}
  for _, gw in ipairs(gateways) do t[#t + 1] = labels[gw] end
  return t
end)(), " | ") .. " |")
print("|---" .. string.rep("|---", #gateways) .. "|")
for _, sc in ipairs(scenarios) do
  local cells = {}
  for _, gw in ipairs(gateways) do
    local r = select("fixed", gw, sc)[1]
    if r then
      cells[#cells + 1] = format("%.1f %% ok, %.2fx", 100 * r.ok / math.max(r.requests, 1),
                                 r.upstream / math.max(r.requests, 1))
    else
      cells[#cells + 1] = "-"
    end
  end
  print(format("| %s | %s |", sclabels[sc], table.concat(cells, " | ")))
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
for _, gw in ipairs(gateways) do
  local s = wrk_stats(gw, "blip")
  if s then
    local r = s.rows[1]
    local t = (r.first_ok > 0 and r.recovery > 0) and format("%.2f s", r.first_ok - r.recovery)
              or "none in the run"
    local window = (r.first_bad or 0) > 0 and format("%.2f s (%.2f s after recovery)",
      r.last_bad - r.first_bad, r.last_bad - r.recovery) or "-"
    print(format("| %s | %s | %s | %.1f %% | %.3f | %.0f |", labels[gw], t, window,
                 100 * s.success, s.amp, s.rps))
  end
end

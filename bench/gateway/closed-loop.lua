-- SPDX-License-Identifier: MIT
-- bench/gateway/closed-loop.lua: the figures of bench/gateway/closed-loop.sh.
--
--   luajit closed-loop.lua predict ACCESS_LOG POLICY_LUA SEEDS FAULT TSV REP
--       the fit of ACCESS_LOG (as nresrun tune fits it), `default` and
--       POLICY_LUA (nresrun tune's choice) replayed on it, each as written
--       ("predicted") and as the gateway's balancer runs it ("gateway's
--       tries": no wait between tries, no hedge): rows appended to TSV
--       (goodput and success in %, dependency requests per client
--       request, p99 of successes in ms, the SLO in ms)
--   luajit closed-loop.lua policy POLICY_LUA
--       the policy as a Lua expression for gw.scope: dofile of the file,
--       with a deadline when the chosen one has none (the gateway needs one)
--   luajit closed-loop.lua measure TRIES_LOG UPSTREAM_REQUESTS SLO_MS FAULT ARM TSV REP
--       the gateway's JSON try log (docs/tune.md) measured the same way,
--       with the count of each $nres_retry reason: one row appended to TSV
--   luajit closed-loop.lua report TSV OUT_MD HEADER_MD
--       the markdown table of predicted against measured (medians over
--       the reps, and their range), after HEADER_MD
local format = string.format

local GW_DEADLINE = 2   -- s: what the gateway gets when the chosen policy has no deadline

local function append(path, row)
  local f = assert(io.open(path, "a"))
  f:write(table.concat(row, "\t"), "\n")
  f:close()
end

local function quantile(xs, q)
  if #xs == 0 then return 0 end
  table.sort(xs)
  return xs[math.max(1, math.ceil(q * #xs))]
end

local cmd = {}

function cmd.predict(log, policy_file, seeds, fault, tsv, rep)
  local trace = require "nresrun.tune.trace"
  local fit = require "nresrun.tune.fit"
  local search = require "nresrun.tune.search"
  local policy_mod = require "nres.policy"
  local model = assert(fit.fit(assert(trace.read(log))))
  local obj = assert(require("nresrun.tune.objective").new({}, model.healthy.p99_s))
  local s = {}
  for i = 1, tonumber(seeds) do s[i] = i end
  local chosen = dofile(policy_file)
  for _, arm in ipairs { { "tuned", assert(policy_mod.resolve(chosen)) },
                         { "default", assert(policy_mod.resolve("default")) } } do
    -- the balancer cannot wait: a retry goes at once; hedging is the cosocket mode's
    local gw = search.copy(arm[2])
    gw.backoff, gw.hedge = false, false
    for _, kind in ipairs { { "predicted", arm[2] }, { "predicted, the gateway's tries", gw } } do
      local _, m = search.evaluate(model, obj, kind[2], s)
      append(tsv, { fault, arm[1], kind[1], format("%.1f", m.goodput * 100), format("%.1f", m.success * 100),
                    format("%.3f", m.req_per_op or 0), format("%.1f", m.p99_ms or 0),
                    format("%.1f", obj.slo.latency * 1e3), "-", "-", rep, "-" })
    end
  end
end

function cmd.policy(policy_file)
  local t = assert(require("nres.policy").resolve(dofile(policy_file)))
  if t.deadline then
    io.write(format("dofile(%q)", policy_file))
  else
    io.write(format("(function() local p = dofile(%q); p.deadline = %g; return p end)()", policy_file, GW_DEADLINE))
  end
end

function cmd.measure(log, upstream, slo_ms, fault, arm, tsv, rep)
  local cjson = require "cjson.safe"
  local slo = tonumber(slo_ms) / 1e3
  local n, ok, good, tries, bad = 0, 0, 0, 0, 0
  local lat, why = {}, {}
  for line in io.lines(log) do
    local o = cjson.decode(line)
    if type(o) ~= "table" or not tonumber(o.status) then
      bad = bad + 1
    else
      n = n + 1
      local st, rt = tonumber(o.status), tonumber(o.request_time) or 0
      if st >= 200 and st < 300 then
        ok = ok + 1
        lat[#lat + 1] = rt
        if rt <= slo then good = good + 1 end
      end
      tries = tries + (tonumber(o.nres_tries) or 0)
      local r = o.nres_retry ~= "" and o.nres_retry or o.nres_reason ~= "" and ("admission: " .. o.nres_reason)
      if type(r) == "string" then why[r] = (why[r] or 0) + 1 end
    end
  end
  if n == 0 then error(format("%s: no request logged (%d lines not JSON)", log, bad)) end
  local reasons = {}
  for r, c in pairs(why) do reasons[#reasons + 1] = format("%s %d", r, c) end
  table.sort(reasons)
  append(tsv, { fault, arm, "measured", format("%.1f", good / n * 100), format("%.1f", ok / n * 100),
                format("%.3f", tonumber(upstream) / n), format("%.1f", quantile(lat, 0.99) * 1e3), slo_ms,
                tostring(n), format("%.3f", tries / n), rep, #reasons > 0 and table.concat(reasons, ", ") or "none" })
end

-- "median [min-max]" of column i over rows (the range only when they differ).
local function spread(rows, i)
  local xs = {}
  for _, r in ipairs(rows) do xs[#xs + 1] = tonumber(r[i]) end
  if #xs == 0 then return "-" end
  table.sort(xs)
  local mid = #xs % 2 == 1 and xs[(#xs + 1) / 2] or (xs[#xs / 2] + xs[#xs / 2 + 1]) / 2
  local fmt = i == 6 and "%.3f" or "%.1f"
  if xs[1] == xs[#xs] then return format(fmt, mid) end
  return format(fmt .. " [" .. fmt .. "-" .. fmt .. "]", mid, xs[1], xs[#xs])
end

function cmd.report(tsv, out, header)
  local groups, order = {}, {}
  for line in io.lines(tsv) do
    local r = {}
    for x in (line .. "\t"):gmatch("([^\t]*)\t") do r[#r + 1] = x end
    local key = r[1] .. "\t" .. r[2] .. "\t" .. r[3]
    if not groups[key] then
      groups[key] = {}
      order[#order + 1] = key
    end
    table.insert(groups[key], r)
  end
  local f = assert(io.open(out, "w"))
  local h = assert(io.open(header))
  f:write(h:read("*a"))
  h:close()
  f:write("| fault | policy | figures | goodput % | success % | dependency requests per request | p99 of successes, ms | SLO ms |\n")
  f:write("|---|---|---|---|---|---|---|---|\n")
  for _, key in ipairs(order) do
    local g = groups[key]
    local fault, arm, kind = key:match("^(.-)\t(.-)\t(.*)$")
    f:write(format("| %s | %s | %s | %s | %s | %s | %s | %s |\n", fault, arm, kind, spread(g, 4), spread(g, 5),
                   spread(g, 6), spread(g, 7), spread(g, 8)))
  end
  f:write("\nWhy the gateway made no more tries (the try log's `nres_retry`, and `nres_reason` for its own refusals), per rep:\n\n")
  for _, key in ipairs(order) do
    local fault, arm, kind = key:match("^(.-)\t(.-)\t(.*)$")
    if kind == "measured" then
      for _, r in ipairs(groups[key]) do
        f:write(format("- %s, %s, rep %s: %s; %s requests, %s tries per request\n", fault, arm, r[11], r[12], r[9], r[10]))
      end
    end
  end
  f:close()
end

local name = arg[1]
if not cmd[name] then
  io.stderr:write("usage: luajit closed-loop.lua predict|policy|measure|report ... (see its header)\n")
  os.exit(2)
end
cmd[name](select(2, unpack(arg)))

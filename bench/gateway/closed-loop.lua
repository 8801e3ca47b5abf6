-- SPDX-License-Identifier: MIT
-- bench/gateway/closed-loop.lua: the figures of bench/gateway/closed-loop.sh.
--
--   luajit closed-loop.lua predict ACCESS_LOG POLICY_LUA SEEDS FAULT TSV
--       the fit of ACCESS_LOG (as nresrun tune fits it), `default` and
--       POLICY_LUA (nresrun tune's choice) replayed on it: one row each
--       appended to TSV (goodput and success in %, dependency requests per
--       client request, p99 of successes in ms, the SLO in ms)
--   luajit closed-loop.lua policy POLICY_LUA
--       the policy as a Lua expression for gw.scope: dofile of the file,
--       with a deadline when the chosen one has none (the gateway needs one)
--   luajit closed-loop.lua measure TRIES_LOG UPSTREAM_REQUESTS SLO_MS FAULT ARM TSV
--       the gateway's JSON try log (docs/tune.md) measured the same way:
--       one row appended to TSV
--   luajit closed-loop.lua report TSV OUT_MD HEADER_MD
--       the markdown table of predicted against measured, after HEADER_MD
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

function cmd.predict(log, policy_file, seeds, fault, tsv)
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
    local _, m = search.evaluate(model, obj, arm[2], s)
    append(tsv, { fault, arm[1], "predicted", format("%.1f", m.goodput * 100), format("%.1f", m.success * 100),
                  format("%.3f", m.req_per_op or 0), format("%.1f", m.p99_ms or 0),
                  format("%.1f", obj.slo.latency * 1e3) })
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

function cmd.measure(log, upstream, slo_ms, fault, arm, tsv)
  local cjson = require "cjson.safe"
  local slo = tonumber(slo_ms) / 1e3
  local n, ok, good, tries, bad = 0, 0, 0, 0, 0
  local lat = {}
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
    end
  end
  if n == 0 then error(format("%s: no request logged (%d lines not JSON)", log, bad)) end
  append(tsv, { fault, arm, "measured", format("%.1f", good / n * 100), format("%.1f", ok / n * 100),
                format("%.3f", tonumber(upstream) / n), format("%.1f", quantile(lat, 0.99) * 1e3), slo_ms,
                tostring(n), format("%.3f", tries / n) })
end

function cmd.report(tsv, out, header)
  local rows = {}
  for line in io.lines(tsv) do
    local r = {}
    for x in (line .. "\t"):gmatch("([^\t]*)\t") do r[#r + 1] = x end
    rows[#rows + 1] = r
  end
  local by = {}
  for _, r in ipairs(rows) do by[r[1] .. "/" .. r[2] .. "/" .. r[3]] = r end
  local f = assert(io.open(out, "w"))
  local h = assert(io.open(header))
  f:write(h:read("*a"))
  h:close()
  f:write("| fault | policy | goodput % predicted / measured | success % | dependency requests per request | p99 of successes, ms | SLO ms | requests measured |\n")
  f:write("|---|---|---|---|---|---|---|---|\n")
  local seen = {}
  for _, r in ipairs(rows) do
    local key = r[1] .. "/" .. r[2]
    if not seen[key] then
      seen[key] = true
      local p, m = by[key .. "/predicted"], by[key .. "/measured"]
      local function pair(i) return format("%s / %s", p and p[i] or "-", m and m[i] or "-") end
      f:write(format("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r[1], r[2], pair(4), pair(5), pair(6), pair(7),
                     (p or m)[8], m and m[9] or "-"))
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

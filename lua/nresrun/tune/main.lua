-- SPDX-License-Identifier: MIT
-- nresrun.tune.main: `nresrun tune TRACE [options]`, from a recorded trace
-- to a policy file.
--
-- TRACE is a CSV or an nginx access log (nresrun.tune.trace), or a
-- simulation file (nresrun.simulation{ dependency, load, duration }): then
-- the trace is its dependency called with no policy on --seed, written to
-- DIR/trace.csv. The trace is fitted (nresrun.tune.fit), the presets and a
-- knob search replayed on the fit (nresrun.tune.search) and scored by the
-- objective (nresrun.tune.objective), and DIR gets policy.lua, report.md,
-- model.json and model.svg (nresrun.tune.write).
local format = string.format

local _M = { _VERSION = "0.1.0" }

_M.USAGE = [[
usage: nresrun tune TRACE [options]

TRACE is a CSV of time,latency,outcome, an nginx access log in the
nres_tune log_format, or a simulation file (docs/tune.md).

Options:
  --out DIR        where policy.lua, report.md, model.json and model.svg go
                   (default artifacts/tune)
  --use USE        interactive (default: SLO = the trace's healthy p99)
                   or batch (no latency SLO)
  --slo S          the SLO's latency in seconds
  --quantile Q     the SLO's quantile (default 0.99)
  --weights LIST   goodput=1,load=0.1,requests=0.1,recovery=0.5 (any)
  --seeds N        replay each candidate on seeds 1..N (default 1)
  --window S       seconds per window of the fit (default: 1 s, longer
                   when a window would hold under 50 requests)
  --seed N         seed of a simulation file's trace (default 1)]]

-- The options, read by nresrun's one parser (nresrun.cli.parse).
_M.grammar = {
  flags = { help = true },
  values = { out = "string", use = { "interactive", "batch" }, slo = "positive_seconds", quantile = "share",
             weights = "string", seeds = "count", window = "positive_seconds", seed = "count" },
  help = "nresrun tune --help",
}

-- parse(args) -> options, positional; or nil, "tune: error".
function _M.parse(args)
  local o, pos = require("nresrun.cli").parse(args, _M.grammar)
  if not o then return nil, "tune: " .. pos end
  return o, pos
end

-- The objective table the options state.
local function objective_of(o)
  local t = { use = o.use }
  if o.slo or o.quantile then t.slo = { latency = o.slo, quantile = o.quantile } end
  if o.weights then
    t.weights = {}
    for item in (o.weights .. ","):gmatch("([^,]*),") do
      local k, v = item:match("^%s*([%w_]+)%s*=%s*(%S+)%s*$")
      if not k or not tonumber(v) then
        return nil, format("tune: --weights: expected name=number, got %q", item)
      end
      t.weights[k] = tonumber(v)
    end
  end
  return t
end

-- The trace of a simulation file, written to out/trace.csv.
local function from_simulation(path, out, seed)
  local sim = require "nresrun.sim"
  local ok, sc = pcall(dofile, path)
  if not ok then return nil, tostring(sc) end
  if not sim.is_simulation(sc) or sc.scenarios then
    return nil, format("%s: expected a simulation with one dependency (nresrun.simulation{ dependency, load, duration })", path)
  end
  local trace = require "nresrun.tune.trace"
  local csv = out .. "/trace.csv"
  trace.write_csv(csv, trace.simulate(sc.spec, seed))
  return csv
end

-- Tune on `path` with options `o`; returns the result table or nil, error.
function _M.tune(path, o)
  o = o or {}
  local out = o.out or "artifacts/tune"
  if path:match("%.lua$") then
    local csv, err = from_simulation(path, out, o.seed or 1)
    if not csv then return nil, err end
    path = csv
  end
  local trace, err = require("nresrun.tune.trace").read(path)
  if not trace then return nil, err end
  local fit = require "nresrun.tune.fit"
  local model, why = fit.fit(trace, { window = o.window })
  if not model then return nil, format("%s: cannot fit a model: %s", path, why) end
  local spec, bad = objective_of(o)
  if not spec then return nil, bad end
  local obj, oerr = require("nresrun.tune.objective").new(spec, model.healthy.p99_s)
  if not obj then return nil, "tune: " .. oerr end
  local seeds = {}
  for i = 1, math.floor(o.seeds or 1) do seeds[i] = i end
  local result = require("nresrun.tune.search").run(model, obj, { seeds = seeds })
  return { result = result, model = model, objective = obj }
end

function _M.main(args)
  local o, pos = _M.parse(args)
  if not o then io.stderr:write("nresrun: ", pos, "\n") return 2 end
  if o.help then print(_M.USAGE) return 0 end
  if #pos ~= 1 then io.stderr:write("nresrun: tune: expected one trace file (see nresrun tune --help)\n") return 2 end
  local out = o.out or "artifacts/tune"
  local cli = require "nresrun.cli"
  local ok_out, why = cli.check_out(out)
  if not ok_out then io.stderr:write("nresrun: ", why, "\n") return 2 end
  local r, err = _M.tune(pos[1], o)
  if not r then io.stderr:write("nresrun: ", err, "\n") return 2 end
  local write = require "nresrun.tune.write"
  local put = require("nresrun.sim.report").put
  local report = write.report(r.result, r.objective, r.model)
  put(out .. "/policy.lua", write.policy(r.result, r.objective, r.model))
  put(out .. "/report.md", report)
  put(out .. "/model.json", write.model_json(r.model, r.objective))
  put(out .. "/model.svg", write.svg(r.model))
  for _, w in ipairs(r.model.warnings) do io.stderr:write("nresrun: tune: warning: ", w, "\n") end
  io.stdout:write(report, "\n")
  print(format("written: %s/policy.lua %s/report.md %s/model.json %s/model.svg", out, out, out, out))
  return 0
end

return _M

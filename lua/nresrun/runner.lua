-- SPDX-License-Identifier: MIT
-- nresrun.runner: run a scenario's matrix, one fresh process per cell.
--
-- The runs (cell × repetition) go in a fixed-seed shuffled order, so drift
-- and warmth land on every arm alike. Each run is nresrun re-executing
-- itself with `--cell I --rep R`; the child prints one JSON line with its
-- metrics. A child that crashes, hangs (killed at warm-up + window + grace,
-- 30 s unless the scenario says otherwise)
-- or prints no valid line is recorded as failed with its stderr, and the
-- run goes on. Peer arms run the peer's own driver (bench/peers/) the same
-- way; without its runtime they are skipped, visibly.
local cjson = require "cjson.safe"
local host = require "nresrun.host"
local report = require "nresrun.report"
local load = require "nresrun.load"

local format = string.format
local _M = { _VERSION = "0.1.0" }

local function utc_stamp()
  return os.date("!%Y%m%dT%H%M%SZ")
end

local function eta(seconds)
  if seconds < 60 then return format("%ds", seconds) end
  return format("%dm%02ds", math.floor(seconds / 60), math.floor(seconds % 60))
end

local function group_of(c)
  return format("%s|%d|%s=%s", c.section, c.dependency_index, c.load, tostring(c.load_value))
end

local function which(prog)
  local p = io.popen("command -v " .. prog .. " 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s ~= nil and s ~= "" and s or nil
end

-- argv for one run of one cell.
local function child_argv(ctx, run)
  local c = run.cell
  if c.arm_spec.kind == "peer" then
    local spec, why = load.get(c.load).peer(c, {
      arm = c.arm_spec.arm or c.arm, dependency = c.dependency,
      warmup = c.warmup, window = c.window, seed = run.seed,
      max_inflight = c.max_inflight,
    })
    if not spec then return nil, why end
    local runtime = which(c.arm_spec.runtime or "node")
    if not runtime then return nil, (c.arm_spec.runtime or "node") .. " is not installed" end
    spec.dependency = {}
    for k, v in pairs(c.dependency) do if type(v) ~= "function" then spec.dependency[k] = v end end
    if c.dependency.kind == "http" then
      -- The peer starts the same dependency server the nres cells use.
      spec.server = { host.exe(), "serve", "--port", "0" }
    end
    -- The script from the current directory, else from the repository
    -- (the executable lives in build/ or bin/ beside it).
    local script = c.arm_spec.script
    local f = io.open(script, "r")
    if f then f:close() else
      local root = host.exe():match("^(.*)/[^/]+/[^/]+$")
      if root then script = root .. "/" .. script end
    end
    return { runtime, script, cjson.encode(spec) }
  end
  local argv = { host.exe(), ctx.path, "--cell", tostring(c.index), "--rep", tostring(run.repetition),
                 "--seed", tostring(run.seed) }
  for _, k in ipairs { "quick" } do if ctx.opts[k] then argv[#argv + 1] = "--" .. k end end
  for _, k in ipairs { "repetitions", "warmup", "window", "only" } do
    if ctx.opts[k] ~= nil then
      argv[#argv + 1] = "--" .. k
      argv[#argv + 1] = tostring(ctx.opts[k])
    end
  end
  return argv
end

local function last_json_line(s)
  local last
  for line in s:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then last = line end
  end
  if not last then return nil end
  return cjson.decode(last)
end

-- Run every run; returns the report document and the exit code.
function _M.run(scenario, path, runs, opts)
  local ctx = { path = path, opts = opts }
  local tty = host.isatty(2) and not opts.no_progress
  local results = {}
  local started = os.time()
  local seed = opts.seed or 1
  for i, run in ipairs(runs) do
    run.seed = seed * 1000003 + run.cell.index * 101 + run.repetition
    local c = run.cell
    if tty then
      local elapsed = os.time() - started
      local left = i > 1 and elapsed / (i - 1) * (#runs - i + 1) or 0
      io.stderr:write(format("\r\27[K[%d/%d] %s · %s · %s · %s=%s · rep %d/%d · ETA %s",
        i, #runs, c.section, c.arm, c.dependency_label, c.load, tostring(c.load_value),
        run.repetition, c.repetitions, eta(left)))
    end
    local result = {
      key = c.key, group = group_of(c), index = c.index, section = c.section, arm = c.arm,
      baseline = c.baseline, dependency = c.dependency_label, load = c.load,
      load_value = c.load_value,
      repetition = run.repetition, seed = run.seed, warmup = c.warmup, window = c.window,
    }
    for _, k in ipairs(load.get(c.load).result) do result[k] = c[k] end
    local argv, why = child_argv(ctx, run)
    if not argv then
      result.ok, result.skipped, result.error = false, true, "skipped: " .. why
    else
      local timeout = c.warmup + c.window + c.grace
      local child, err = host.spawn(argv, timeout)
      if not child then
        result.ok, result.error = false, err
      else
        local metrics = last_json_line(child.stdout)
        if child.timed_out then
          result.ok, result.error = false, format("hung: killed after %.0f s", timeout)
        elseif child.status ~= 0 then
          result.ok, result.error = false, child.status >= 128
            and format("crashed (signal %d)", child.status - 128)
            or format("exited with status %d", child.status)
        elseif type(metrics) ~= "table" then
          result.ok, result.error = false, "printed no JSON line"
        else
          result.ok = true
          for k, v in pairs(metrics) do result[k] = v end
        end
        if not result.ok then result.stderr = child.stderr:sub(-4000) end
      end
    end
    results[#results + 1] = result
  end
  if tty then io.stderr:write("\r\27[K") end

  local doc = {
    scenario = scenario.spec.name or path:match("([^/]+)%.lua$") or path,
    file = path,
    started = os.date("!%Y-%m-%d %H:%M:%S", started),
    seed = seed,
    settings = { quick = opts.quick or false, repetitions = opts.repetitions,
                 warmup = opts.warmup, window = opts.window, only = opts.only },
    machine = report.machine(),
    versions = { nres = require("nres").version, luajit = jit and jit.version or "?",
                 lua_cjson = cjson._VERSION },
    results = results,
  }
  local code = 0
  for _, r in ipairs(results) do
    if not r.skipped and (not r.ok or not r.trusted) then code = 1 end
  end
  return doc, code, utc_stamp()
end

return _M

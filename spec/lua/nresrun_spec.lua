-- SPDX-License-Identifier: MIT
-- nresrun_spec.lua - the nresrun command: scenario errors with file:line,
-- the matrix and its seeded shuffle, crashing and hanging cells, the
-- accounting identity, the JSON report's schema, and a tiny end-to-end run.
-- Needs NRESRUN (the built executable) in the environment.
local cjson = require "cjson.safe"
local scenario = require "nresrun.scenario"
local nres = require "nres"
local nresrun = require "nresrun"

local NRESRUN = assert(os.getenv("NRESRUN"), "set NRESRUN to the nresrun executable")
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local function write(name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- Run nresrun; returns exit code, stdout, stderr.
local function run(args)
  local out, err = dir .. "/stdout", dir .. "/stderr"
  local ok, how, code = os.execute(string.format("%s %s >%s 2>%s", NRESRUN, args, out, err))
  if type(ok) == "number" then code = ok / 256 end   -- Lua 5.1 os.execute
  local function slurp(p) local f = io.open(p); local s = f:read("*a"); f:close(); return s end
  return code, slurp(out), slurp(err)
end

-- The JSON report a run wrote (its path is on the last line of stdout),
-- decoded; `{ results = {} }` when there is none.
local function report_of(out)
  local json_path = out:match("reports: %S+ (%S+%.json)")
  return json_path and cjson.decode(io.open(json_path):read("*a")) or { results = {} }
end

local HEAD = 'local nres, nresrun = require "nres", require "nresrun"\nreturn nresrun.scenario{\n'

describe("scenario errors name file:line and the field", function()
  local cases = {
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.flaky{ fail_every = 2 },\n  load = { workers = 1 },\n'
      .. '  arms = { raw = nresrun.raw },\n  windw = 5,\n}\n',
      '$F:7: scenario.windw: unknown field (did you mean "window"?)' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.flaky{ fail_every = 2 },\n'
      .. '  load = { workers = { 1, "many" } },\n  arms = { raw = nresrun.raw },\n}\n',
      '$F:5: scenario.load.workers[2]: expected a count, "cores" or "Nx", got "many"' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.flaky{ fail_every = 2 },\n  load = { workers = 1 },\n'
      .. '  arms = {\n    raw = nresrun.raw,\n    fast = 42,\n  },\n}\n',
      '$F:8: scenario.arms.fast: expected a policy, a preset name, nresrun.raw, nresrun.naive(n) or nresrun.peer{...}, got 42' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.fn(print),\n  load = { threds = 4 },\n'
      .. '  arms = { raw = nresrun.raw },\n}\n',
      '$F:5: scenario.load.threds: unknown load kind (workers, open_rate, threads)' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.fn(print),\n  load = { threads = { 1, 65 } },\n'
      .. '  arms = { raw = nresrun.raw },\n}\n',
      '$F:5: scenario.load.threads[2]: expected a count of OS threads from 1 to 64, got 65' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.fn(print),\n  load = { threads = 2, workers = { 1, 2 } },\n'
      .. '  arms = { raw = nresrun.raw },\n}\n',
      '$F:5: scenario.load.workers: with threads, the workers of each thread: one count, "cores" or "Nx", got a table' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.http{ path = "/echo" },\n  load = { threads = 2 },\n'
      .. '  arms = { raw = nresrun.raw },\n}\n',
      '$F:4: scenario.dependency: threads: not with an http dependency (its event loop is one thread\'s)' },
    { HEAD .. '  name = "x",\n  load = { workers = 1 },\n  arms = { raw = nresrun.raw },\n}\n',
      '$F:2: scenario.dependency: missing (nresrun.dep.flaky{...}, nresrun.dep.model{...}, nresrun.dep.fn(f))' },
    { HEAD .. '  name = "x",\n  dependency = nresrun.dep.flaky{\n    fail_evry = 2 },\n'
      .. '  load = { workers = 1 }, arms = { raw = nresrun.raw },\n}\n',
      '$F:4: nresrun.dep.flaky: dependency.fail_evry: unknown field (did you mean "fail_every"?)' },
    { HEAD .. '  name = "x", dependency = nresrun.dep.model{ latency = { normal = 1 } },\n'
      .. '  load = { workers = 1 }, arms = { raw = nresrun.raw },\n}\n',
      '$F:3: nresrun.dep.model: dependency.latency.normal: unknown latency kind (fixed, uniform, lognormal)' },
    { HEAD .. '  name = "x", dependency = nresrun.dep.flaky{ fail_every = 2 },\n'
      .. '  load = { workers = 1 },\n  arms = { p = nres.policy{ attempts = 0 } },\n}\n',
      '$F:5: nres.policy: attempts: expected an integer from 1 to 65535, got 0' },
    { HEAD .. '  name = "x", dependency = nresrun.dep.flaky{ fail_every = 2 },\n'
      .. '  load = { workers = 1 },\n  arms = { p = "nosuch" },\n  baseline = "nope",\n}\n',
      '$F:2: 2 problems:\n  $F:5: scenario.arms.p: unknown preset "nosuch" (presets: batch, default, gateway, http, none, trivial)\n  $F:6: scenario.baseline: no arm named "nope"' },
    { 'return { name = "not a scenario" }\n',
      '$F: a scenario file must return nresrun.scenario{...}, got a table' },
    { 'return nresrun.scenario{\n', nil },   -- a syntax error: message from Lua
  }
  for i, c in ipairs(cases) do
    it("case " .. i, function()
      local path = write("bad" .. i .. ".lua", c[1])
      local code, _, err = run(path .. " --list")
      expect.eq(code, 2, "exit code")
      if c[2] then
        expect.eq(err, "nresrun: " .. c[2]:gsub("%$F", path) .. "\n")
      else
        expect.truthy(err:find(path, 1, true), "names the file: " .. err)
      end
    end)
  end
  it("refuses a matrix that cannot fit", function()
    local path = write("long.lua", HEAD .. '  name = "long", dependency = nresrun.dep.flaky{ fail_every = 2 },\n'
      .. '  load = { workers = { 1, 2, 3, 4 } }, arms = { raw = nresrun.raw, t = "trivial" },\n'
      .. '  repetitions = 10, window = 60,\n}\n')
    local code, _, err = run(path)
    expect.eq(code, 2)
    expect.truthy(err:find("the matrix needs about 83 minutes (80 runs); the limit is 60", 1, true), err)
  end)
  it("bad flag values exit 2 with a usage line naming the flag, before any cell runs", function()
    local path = write("flags.lua", HEAD .. '  name = "flags", dependency = nresrun.dep.flaky{ fail_every = 2 },\n'
      .. '  load = { workers = 1 }, arms = { raw = nresrun.raw },\n  repetitions = 1, warmup = 0, window = 0.1,\n}\n')
    local notdir = write("plain-file", "")
    local cases = {
      { '--only "["', 'nresrun: --only: not a Lua pattern (malformed pattern (missing \']\')): "["\n' },
      { "--window inf", 'nresrun: --window: expected seconds from 0 to 86400, got "inf"\n' },
      { "--warmup nan", 'nresrun: --warmup: expected seconds from 0 to 86400, got "nan"\n' },
      { "--warmup 1e300", 'nresrun: --warmup: expected seconds from 0 to 86400, got "1e300"\n' },
      { "--window -1", 'nresrun: --window: expected seconds from 0 to 86400, got "-1"\n' },
      { "--max-minutes 1e400", 'nresrun: --max-minutes: expected minutes from 0 to 10080, got "1e400"\n' },
      { "--repetitions 2.5", 'nresrun: --repetitions: expected a whole number from 1 to 2147483647, got "2.5"\n' },
      { "--seed 9e99", 'nresrun: --seed: expected a whole number from 1 to 2147483647, got "9e99"\n' },
      { "--out " .. notdir .. "/reports",
        "nresrun: --out " .. notdir .. "/reports: cannot write reports there (Not a directory)\n" },
    }
    for _, c in ipairs(cases) do
      local code, out, err = run(path .. " " .. c[1])
      expect.eq(code, 2, c[1])
      expect.eq(err, c[2], c[1])
      expect.eq(out, "", c[1] .. ": nothing ran")
    end
  end)
  it("usage errors exit 2, --help and --version exit 0", function()
    expect.eq((run("--bogus")), 2)
    expect.eq((run("")), 2)
    expect.eq((run("x.lua --repetitions 0")), 2)
    local code, out = run("--help")
    expect.eq(code, 0)
    -- The help (also nresrun(1)) covers simulations, serve, where the
    -- reports go and the exit status.
    for _, want in ipairs { "Exit status:", "nresrun.simulation{", "nresrun serve",
                            "artifacts/sim", "artifacts/stress", "--max-minutes" } do
      expect.truthy(out:find(want, 1, true), "help text lacks " .. want)
    end
    code, out = run("--version")
    expect.eq(code, 0)
    expect.truthy(out:find("^nresrun %d"), out)
  end)
end)

describe("a tournament file", function()
  -- --list lists its policies and scenarios and runs nothing (it ran the
  -- whole tournament before).
  it("--list prints the policies and the scenarios, and runs nothing", function()
    local path = write("tour.lua", [[
local nresrun = require "nresrun"
local dep = { latency = { fixed = 0.01 } }
return nresrun.simulation{ name = "tour", policies = { "none", "default" }, seeds = { 1, 2 },
  scenarios = { { name = "calm", dependency = dep, load = { rate = 10 }, duration = 5 },
                { name = "still", dependency = dep, load = { rate = 10 }, duration = 5 } } }
]])
    local code, out = run(path .. " --list --out " .. dir .. "/tour")
    expect.eq(code, 0)
    expect.truthy(out:find("none  (preset none)", 1, true), out)
    expect.truthy(out:find("default  (preset default)", 1, true), out)
    expect.truthy(out:find("scenario calm  (5 s)", 1, true), out)
    expect.truthy(out:find("scenario still  (5 s)", 1, true), out)
    expect.eq(out:find("nresrun tournament", 1, true), nil)
  end)
end)

describe("the matrix", function()
  local sc = nresrun.scenario {
    name = "m",
    sections = {
      { name = "a", dependency = { nresrun.dep.flaky{ fail_every = 2 }, nresrun.dep.flaky{ fail_every = 4 } },
        load = { workers = { 1, 2, 3 } }, arms = { raw = nresrun.raw, t = "trivial" } },
      { name = "b", dependency = nresrun.dep.model{}, load = { open_rate = { 10, 20 } },
        arms = { raw = nresrun.raw } },
    },
    repetitions = 3,
  }
  it("is the product of dependencies, load values and arms, per section", function()
    local cells = sc:cells()
    expect.eq(#cells, 2 * 3 * 2 + 2)
    expect.eq(cells[1].key, "a/raw/fails every 2/workers=1")
    expect.eq(cells[2].key, "a/t/fails every 2/workers=1")
    expect.eq(cells[13].key, "b/raw/healthy/open_rate=10")
    expect.eq(#sc:runs(cells, 1), 14 * 3)
  end)
  it("quick keeps one value per dimension and one repetition", function()
    local cells = sc:cells { quick = true }
    expect.eq(#cells, 2 * 1 * 2 + 1)
    expect.eq(cells[1].repetitions, 1)
  end)
  it("--only filters section/arm", function()
    expect.eq(#sc:cells { only = "^a/t" }, 6)
  end)
  it("shuffles the same way under the same seed, otherwise not", function()
    local function order(seed)
      local out = {}
      for _, r in ipairs(sc:runs(sc:cells(), seed)) do out[#out + 1] = r.cell.index .. ":" .. r.repetition end
      return table.concat(out, " ")
    end
    expect.eq(order(7), order(7))
    expect.truthy(order(7) ~= order(8), "seed changes order")
    local sorted = {}
    for _, r in ipairs(sc:runs(sc:cells(), 7)) do sorted[#sorted + 1] = r.cell.index end
    table.sort(sorted)
    expect.eq(#sorted, 42)
  end)
end)

describe("a run", function()
  local path = write("tiny.lua", HEAD .. [[
  name = "tiny",
  dependency = nresrun.dep.flaky{ fail_every = 3 },
  load = { workers = 2 },
  arms = { raw = nresrun.raw, trivial = "trivial" },
  repetitions = 1, warmup = 0.1, window = 0.3,
}
]])
  local code, out = run(path .. " --out " .. dir .. "/out")
  it("exits 0 and writes both reports", function()
    expect.eq(code, 0, out)
    expect.truthy(out:find("reports: " .. dir .. "/out/tiny%-"), out)
  end)
  local json_path = out:match("reports: %S+ (%S+%.json)")
  local doc = json_path and cjson.decode(io.open(json_path):read("*a")) or {}
  it("keeps every repetition under stable names with the accounting identity", function()
    expect.eq(#doc.results, 2)
    for _, r in ipairs(doc.results) do
      for _, k in ipairs { "ops_per_sec", "p50_us", "p90_us", "p99_us", "max_us", "heap_bytes_per_op",
                           "gc_bytes_per_op", "attempts_per_op", "retries_per_op",
                           "dependency_requests_per_op", "completion_ratio" } do
        expect.eq(type(r[k]), "number", k)
      end
      expect.eq(type(r.trusted), "boolean", "trusted")
      expect.eq(type(r.section), "string"); expect.eq(type(r.arm), "string")
      expect.eq(r.arrivals, r.successes + r.failures + r.rejections, "arrivals identity")
      expect.truthy(r.ops_per_sec > 0, "ops/s")
      expect.eq(r.trusted, true)
    end
    expect.eq(type(doc.machine.cores), "number")
    expect.eq(doc.seed, 1)
  end)
  it("measures what the arms do to the dependency", function()
    local by = {}
    for _, r in ipairs(doc.results) do by[r.arm] = r end
    expect.near(by.raw.completion_ratio, 2 / 3, 0.01, "raw completion")
    expect.near(by.trivial.completion_ratio, 1, 1e-9, "trivial completion")
    expect.near(by.trivial.dependency_requests_per_op, 1.5, 0.01, "trivial requests/op")
    expect.near(by.trivial.retries_per_op, 0.5, 0.01, "retries/op")
    expect.eq(by.trivial.heap_bytes_per_op, 0, "heap bytes/op")
  end)
  it("records a crashing and a hanging cell, and goes on", function()
    local bad = write("bad.lua", HEAD .. [[
  name = "bad",
  dependency = nresrun.dep.fn(function()
    if os.getenv("NRES_TEST_MODE") == nil then end
    return true
  end),
  load = { workers = 1 },
  arms = { ok = nresrun.raw,
           crash = nres.policy{ base = "none", admit = function()
             require("ffi").cast("int *", 0)[0] = 1 end },
           hang = nres.policy{ base = "none", admit = function() while true do end end } },
  repetitions = 1, warmup = 0, window = 0.2, grace = 2,
}
]])
    local code2, out2 = run(bad .. " --out " .. dir .. "/out2")
    expect.eq(code2, 1)
    local d = report_of(out2)
    local by = {}
    for _, r in ipairs(d.results) do by[r.arm] = r end
    expect.eq(by.ok.ok, true)
    expect.eq(by.crash.ok, false)
    expect.truthy(by.crash.error:find("crashed (signal 11)", 1, true), by.crash.error)
    expect.eq(by.hang.ok, false)
    expect.truthy(by.hang.error:find("hung: killed after 2 s", 1, true), by.hang.error)
    expect.truthy(out2:find("**failed**", 1, true), "warning block")
  end)
end)

-- Load kinds are modules behind one interface (nresrun.load).
describe("load kinds", function()
  local load = require "nresrun.load"
  it("every kind has the whole interface", function()
    for _, name in ipairs(load.KINDS) do
      local k = assert(load.get(name), name)
      expect.eq(k.name, name)
      for _, f in ipairs { "check", "values", "fields", "fit", "peer", "run" } do
        expect.eq(type(k[f]), "function", name .. "." .. f)
      end
      for _, f in ipairs { "expected", "what", "loop" } do expect.eq(type(k[f]), "string", name .. "." .. f) end
      expect.eq(type(k.result), "table", name .. ".result")
    end
  end)
  it("the scenario's checks and matrix ask the kinds", function()
    local sc = scenario.new({ name = "k", dependency = nresrun.dep.flaky{ fail_every = 2 },
                              load = { threads = { 1, 2 }, workers = 3 }, arms = { raw = nresrun.raw } })
    local cells = sc:cells()
    expect.eq(#cells, 2)
    expect.eq(cells[2].load, "threads")
    expect.eq(cells[2].threads, 2)
    expect.eq(cells[2].workers_per_thread, 3)
    expect.eq(load.of({ open_rate = 5 }).name, "open_rate")
    expect.eq(load.is_open("open_rate"), true)
    expect.eq(load.is_open("workers"), false)
    local spec, why = load.get("threads").peer(cells[2], {})
    expect.eq(spec, nil)
    expect.eq(why, "the peer driver has no threads load (one event loop)")
    expect.eq(load.get("open_rate").peer({ rate = 7 }, {}).rate, 7)
  end)
end)

describe("a new load kind", function()
  it("is one file: nresrun/load/NAME.lua, found by the scenario's checks and matrix", function()
    local root = dir .. "/kinds"
    os.execute("mkdir -p " .. root .. "/nresrun/load")
    local f = assert(io.open(root .. "/nresrun/load/burst.lua", "w"))
    f:write([[
local workers = require "nresrun.load.workers"
return { name = "burst", loop = "closed", what = "bursts", expected = "a burst size >= 1", result = { "burst" },
  check = function(v) return type(v) == "number" and v >= 1 end,
  values = function(load) return type(load.burst) == "table" and load.burst or { load.burst } end,
  fields = function(cell, v) cell.burst, cell.workers = v, v end,
  fit = function() return nil end,
  peer = function() return nil, "no peer" end,
  run = function(cell, seed, kit, srv) return workers.run(cell, seed, kit, srv) end }
]])
    f:close()
    local saved = package.path
    package.path = root .. "/?.lua;" .. package.path
    local ok, sc = pcall(scenario.new, { name = "b", dependency = nresrun.dep.flaky{ fail_every = 2 },
                                         load = { burst = { 2, 4 } }, arms = { raw = nresrun.raw } })
    local bad_ok, bad = pcall(scenario.new, { name = "b", dependency = nresrun.dep.flaky{ fail_every = 2 },
                                              load = { burst = 0 }, arms = { raw = nresrun.raw } })
    package.path = saved
    expect.truthy(ok, tostring(sc))
    local cells = sc:cells()
    expect.eq(#cells, 2)
    expect.eq(cells[2].load, "burst")
    expect.eq(cells[2].burst, 4)
    expect.eq(cells[2].key, "b/raw/fails every 2/burst=4")
    expect.eq(bad_ok, false)
    expect.truthy(tostring(bad):find("scenario.load.burst[1]: expected a burst size >= 1, got 0", 1, true), tostring(bad))
  end)
end)

-- The stress report says what differs between arms, not only a ratio.
describe("the stress report", function()
  local report = require "nresrun.report"
  local function result(arm, load, completion, req, ops)
    return { key = "budget/" .. arm, section = "budget", arm = arm, dependency = "fails every 2", load = load,
             load_value = 20000, baseline = "unbudgeted", group = "budget/fails every 2/" .. load, index = #arm,
             ok = true, trusted = true, repetition = 1, completion_ratio = completion,
             dependency_requests_per_op = req, ops_per_sec = ops }
  end
  local function doc(results)
    return { scenario = "s", started = "t", seed = 1, settings = { quick = true }, results = results,
             machine = { cpu = "cpu", cores = 2 }, versions = { nres = "0", luajit = "lj" } }
  end

  it("open loop: completion and requests per op, and why the ratio reads 1.00", function()
    local md = report.markdown(doc { result("budgeted", "open_rate", 0.526, 1.05, 20000),
                                     result("unbudgeted", "open_rate", 1.0, 2.0, 20000) })
    expect.truthy(md:find("| 1.00 (offered) |", 1, true), "the ratio marked")
    expect.truthy(md:find("- budgeted vs unbudgeted (fails every 2, open_rate=20000): completes 0.526 of its"
      .. " operations where unbudgeted completes 1.000, 0.53x the dependency requests per operation (1.05 vs 2.00);"
      .. " both were offered the same rate, so ops/s does not tell them apart.", 1, true), md)
  end)

  it("closed loop: the throughput ratio too; alike arms are said to be alike", function()
    local md = report.markdown(doc { result("budgeted", "workers", 1.0, 2.0, 5000),
                                     result("unbudgeted", "workers", 1.0, 2.0, 10000) })
    expect.truthy(md:find("- budgeted vs unbudgeted (fails every 2, workers=20000): 0.50x the operations per second.",
      1, true), md)
    local same = report.markdown(doc { result("budgeted", "workers", 1.0, 2.02, 10100),
                                       result("unbudgeted", "workers", 1.0, 2.0, 10000) })
    expect.truthy(same:find("What differs: every arm completes as much as its baseline with as many"
      .. " dependency requests per operation.", 1, true), same)
  end)
end)

describe("policy:on_state", function()
  it("a copy over another policy's C state shares its counters and state", function()
    local owner = nres.policy{ base = "trivial" }
    local other = nres.policy{ base = "trivial" }
    local ffi = require "ffi"
    local addr = tonumber(ffi.cast("uintptr_t", ffi.cast("nres_policy_t *", owner.cp)))
    local shared = other:on_state(addr)
    local before, other_before = owner:stats().calls, other:stats().calls
    for _ = 1, 10 do assert(shared:run(function() return true end)) end
    expect.eq(owner:stats().calls - before, 10, "counted in the owner's state")
    expect.eq(other:stats().calls - other_before, 0, "not in the copy's own")
    expect.eq(shared:stats().calls, owner:stats().calls, "the copy reads the owner's counters")
  end)
  it("refuses what is not a policy pointer", function()
    local p = nres.policy{ base = "trivial" }
    local ok, err = pcall(p.on_state, p, "x")
    expect.eq(ok, false)
    expect.truthy(err:find("bad argument #1 to 'on_state'", 1, true), err)
    ok = pcall(p.on_state, p, 0)
    expect.eq(ok, false, "NULL refused")
  end)
end)

describe("a threads cell", function()
  -- Two and three OS threads, each with its own Lua state and workers, on
  -- ONE policy's C state; a dependency that fails every 2nd request of each
  -- thread's own counter. Exactness is checked in the cell (calls_exact,
  -- requests_exact) and again here from the figures.
  local path = write("threads.lua", HEAD .. [[
  name = "threads",
  sections = {
    { name = "shared", dependency = nresrun.dep.flaky{ fail_every = 2 },
      load = { threads = { 2, 3 }, workers = 3 },
      arms = { raw = nresrun.raw, trivial = "trivial",
               budgeted = nres.policy{ base = "trivial", budget = { ratio = 0.1, min_per_sec = 1 } } } },
    { name = "garbage", dependency = nresrun.dep.fn(function(n)
        KEEP = KEEP or {}
        KEEP[n % 256] = string.rep("x", 1024) .. n   -- escapes: ~1 kB allocated per call
        return true
      end),
      load = { threads = 2 }, arms = { raw = nresrun.raw } },
    { name = "clean", dependency = nresrun.dep.model{},
      load = { workers = 2 }, arms = { none = "none" } },
  },
  repetitions = 1, warmup = 0.05, window = 0.3,
}
]])
  local code, out, err = run(path .. " --out " .. dir .. "/threads")
  local doc = report_of(out)
  local by = {}
  for _, r in ipairs(doc.results) do by[r.key] = r end
  it("exits 0 with every cell trusted", function()
    expect.eq(code, 0, out .. err)
    expect.eq(#doc.results, 8)
    for _, r in ipairs(doc.results) do
      expect.eq(r.ok, true, r.key .. ": " .. tostring(r.error))
      expect.eq(r.trusted, true, r.key)
      expect.eq(r.arrivals, r.successes + r.failures + r.rejections, r.key .. ": arrivals identity")
    end
  end)
  it("ran the threads asked for, and the policy saw exactly what they did", function()
    for _, n in ipairs { 2, 3 } do
      for _, arm in ipairs { "trivial", "budgeted" } do
        local r = by["shared/" .. arm .. "/fails every 2/threads=" .. n]
        expect.eq(r.threads, n, "threads")
        expect.eq(r.workers_per_thread, 3, "workers per thread")
        expect.eq(r.calls_exact, true, arm .. " x" .. n .. ": calls")
        expect.eq(r.requests_exact, true, arm .. " x" .. n .. ": requests")
        expect.eq(r.policy_calls, r.operations_total, "policy calls = operations")
        expect.eq(r.policy_attempts, r.dependency_requests_total, "attempts = dependency requests")
        expect.truthy(r.operations_total >= r.arrivals, "the whole run holds the window")
      end
    end
    -- trivial retries every failure: with every 2nd request failing (each
    -- thread's own counter) each operation's first attempt fails and its
    -- retry succeeds, 2 requests/op; the shared budget cuts that.
    local t = by["shared/trivial/fails every 2/threads=2"]
    expect.near(t.dependency_requests_per_op, 2, 0.01, "trivial requests/op")
    expect.near(t.completion_ratio, 1, 1e-9, "trivial completes everything")
    local b = by["shared/budgeted/fails every 2/threads=2"]
    expect.truthy(b.dependency_requests_per_op < 1.2, "budget: " .. b.dependency_requests_per_op)
    expect.truthy(b.rejected_by_source and b.rejected_by_source.budget > 0, "budget rejections")
  end)
  it("a thread whose worker raises fails the cell, naming the thread and the error", function()
    local bad = write("threads_bad.lua", HEAD .. [[
  name = "threads_bad",
  dependency = nresrun.dep.fn(function(n) if n == 3 then error("boom in a thread") end return true end),
  load = { threads = 2 }, arms = { raw = nresrun.raw },
  repetitions = 1, warmup = 0, window = 0.1, grace = 5,
}
]])
    local code2, out2 = run(bad .. " --out " .. dir .. "/threads_bad")
    expect.eq(code2, 1)
    local d = report_of(out2)
    local r = d.results[1]
    expect.eq(r.ok, false)
    expect.truthy(r.stderr:find("nresrun: thread %d: .*boom in a thread"), r.stderr)
  end)
  it("starts the threads' clocks together, however long their set-up takes", function()
    -- Every Lua state that loads this file sleeps 0.4 s first, threads
    -- included: longer than the cell's warm-up and window together. The
    -- threads start counting once all are set up, so the window is full.
    local slow = write("threads_slow.lua", [[
os.execute("sleep 0.4")
]] .. HEAD .. [[
  name = "threads_slow",
  dependency = nresrun.dep.fn(function() return true end),
  load = { threads = 2 }, arms = { raw = nresrun.raw },
  repetitions = 1, warmup = 0.02, window = 0.1,
}
]])
    local code3, out3, err3 = run(slow .. " --out " .. dir .. "/threads_slow")
    expect.eq(code3, 0, out3 .. err3)
    local r = report_of(out3).results[1]
    expect.eq(r.trusted, true)
    expect.truthy(r.arrivals > 100, "operations in the window: " .. tostring(r.arrivals))
  end)
  it("measures the collector: collections where the heap grows, none where it does not", function()
    local g = by["garbage/raw/custom/threads=2"]
    expect.truthy(g.gc_bytes_per_op > 1000, "garbage B/op " .. g.gc_bytes_per_op)
    expect.truthy(g.gc_collections > 0, "collections")
    expect.truthy(g.gc_pause_share > 0 and g.gc_pause_share < 1, "pause share " .. g.gc_pause_share)
    local c = by["clean/none/healthy/workers=2"]
    expect.eq(c.gc_collections, 0, "no collection")
    expect.eq(c.gc_pause_share, 0, "no pause")
    expect.truthy(c.gc_bytes_per_op < 1, "clean B/op " .. c.gc_bytes_per_op)
  end)
end)

describe("an http cell", function()
  -- The dependency server runs beside each cell (`nresrun serve`); a short
  -- window, two arms against /flaky (503 on every 4th request).
  local path = write("http.lua", HEAD .. [[
  name = "http",
  dependency = nresrun.dep.http{ path = "/flaky?n=4" },
  load = { workers = 4 },
  arms = { raw = nresrun.raw,
           lib = nres.policy{ base = "http", attempts = 3, backoff = false, budget = false } },
  repetitions = 1, warmup = 0.1, window = 0.3,
}
]])
  local code, out, err = run(path .. " --out " .. dir .. "/http")
  local doc = report_of(out)
  local by = {}
  for _, r in ipairs(doc.results) do by[r.arm] = r end
  it("exits 0 with both cells trusted", function()
    expect.eq(code, 0, out .. err)
    expect.eq(#doc.results, 2)
    for _, r in ipairs(doc.results) do
      expect.eq(r.ok, true, r.error)
      expect.eq(r.trusted, true)
      expect.eq(r.arrivals, r.successes + r.failures + r.rejections, "arrivals identity")
    end
  end)
  it("requests flow, and the server's own count matches what was sent", function()
    for _, r in ipairs(doc.results) do
      expect.truthy(r.ops_per_sec > 100, "ops/s " .. tostring(r.ops_per_sec))
      expect.truthy(r.dependency_requests > 0, "the server counted requests")
      -- Counted by the server (/stats) against the client's own count of
      -- requests written: equal but for the few in flight at the window's
      -- edges (at most one per worker at each edge).
      local ops = r.arrivals
      expect.truthy(math.abs(r.dependency_requests_per_op - r.client_requests_per_op) * ops <= 8,
        string.format("server %g/op vs client %g/op", r.dependency_requests_per_op, r.client_requests_per_op))
      expect.near(r.dependency_requests, r.dependency_requests_per_op * ops, 1e-6, "per op x ops")
    end
    -- raw: one request per op, and the server's every 4th answer is a 503.
    expect.near(by.raw.dependency_requests_per_op, 1, 0.01, "raw requests/op")
    expect.near(by.raw.completion_ratio, 0.75, 0.02, "raw completion")
    -- lib retries the 503s: about 4/3 requests per op, nearly all complete.
    expect.truthy(by.lib.dependency_requests_per_op > 1.2 and by.lib.dependency_requests_per_op < 1.45,
      "lib requests/op " .. by.lib.dependency_requests_per_op)
    expect.truthy(by.lib.completion_ratio > 0.9, "lib completion " .. by.lib.completion_ratio)
    expect.near(by.lib.attempts_per_op, by.lib.dependency_requests_per_op, 0.02, "attempts = requests")
    expect.truthy(out:find("Handler's own cost", 1, true), "own cost table")
  end)
  it("leaves no server running", function()
    for _, r in ipairs(doc.results) do
      expect.eq(type(r.dependency_pid), "number", "pid reported")
      expect.truthy(r.dependency_pid > 0)
      expect.eq(io.open("/proc/" .. r.dependency_pid .. "/stat"), nil, "server process " .. r.dependency_pid .. " gone")
    end
  end)
  it("nresrun.http.request works from a worker coroutine", function()
    local p2 = write("http_fn.lua", HEAD .. [[
  name = "httpfn",
  dependency = nresrun.dep.fn(function()
    if not SRV then SRV = assert(nresrun.http.serve()); SRV:reset() end
    local res, err = nresrun.http.request{ url = SRV.base .. "/flaky?n=2", policy = "none" }
    if res then
      assert(res.status == 200 and res.attempts == 1 and res.body_length > 0)
      return true
    end
    return nil, err
  end),
  load = { workers = 2 },
  arms = { raw = nresrun.raw },
  repetitions = 1, warmup = 0.1, window = 0.2,
}
]])
    local c2, o2, e2 = run(p2 .. " --out " .. dir .. "/httpfn")
    expect.eq(c2, 0, o2 .. e2)
    local jp = o2:match("reports: %S+ (%S+%.json)")
    local r = cjson.decode(io.open(jp):read("*a")).results[1]
    expect.near(r.completion_ratio, 0.5, 0.02, "every 2nd answer fails")
  end)
  it("a bad nresrun.dep.http names file:line and the field", function()
    local bad = write("badhttp.lua", HEAD .. '  name = "x",\n  dependency = nresrun.dep.http{ path = "echo", metod = "GET" },\n'
      .. '  load = { workers = 1 }, arms = { raw = nresrun.raw },\n}\n')
    local c3, _, e3 = run(bad .. " --list")
    expect.eq(c3, 2)
    expect.eq(e3, "nresrun: " .. bad .. ':4: nresrun.dep.http: dependency.metod: unknown field (did you mean "method"?); '
      .. 'dependency.path: expected a path starting with "/" (e.g. "/echo", "/flaky?n=4"), got "echo"\n')
  end)
end)

-- nresrun built without the pool component has no nresrun.pool: skip then.
local function pool_available()
  local probe = write("pool_probe.lua", 'print("pool " .. tostring(require("nres").pool.available))\n'
    .. 'os.exit(0)\n')
  local _, out = run(probe)
  return out:find("pool true", 1, true) ~= nil
end

if pool_available() then describe("a pool cell", function()
  -- 8 workers each await a 10 ms sleep job on a 2-thread pool (nresrun.pool):
  -- the jobs run on the pool's threads two at a time (rounds of ~40 ms, not
  -- 80), come back through the loop, and reuse their records.
  local stats_path = dir .. "/pool_stats"
  local path = write("pool.lua", HEAD .. [[
  name = "pool",
  dependency = nresrun.dep.fn(function()
    if not POOL then nresrun.pool.init{ threads = 2 }; POOL = true end
    local ok, worker = nresrun.pool.run("sleep", 10e6)
    if not ok then return nil, worker end
    local st = nresrun.pool.stats()
    local f = assert(io.open("]] .. stats_path .. [[", "w"))
    f:write(string.format("%d %d %d %d %d\n", st.threads, st.max_running, st.slots,
                          st.executed, worker))
    f:close()
    return true
  end),
  load = { workers = 8 },
  arms = { raw = nresrun.raw },
  repetitions = 1, warmup = 0.1, window = 0.3,
}
]])
  local code, out, err = run(path .. " --out " .. dir .. "/pool")
  local doc = report_of(out)
  local r = doc.results[1] or {}
  it("exits 0 with every job done", function()
    expect.eq(code, 0, out .. err)
    expect.eq(r.ok, true, r.error)
    expect.eq(r.trusted, true)
    expect.near(r.completion_ratio, 1, 1e-9, "completion")
  end)
  it("runs the jobs on the pool's two threads at once", function()
    local f = assert(io.open(stats_path))
    local threads, max_running, slots, executed, worker = f:read("*n", "*n", "*n", "*n", "*n")
    f:close()
    expect.eq(threads, 2, "threads")
    expect.eq(max_running, 2, "two jobs were running at once")
    expect.truthy(worker == 0 or worker == 1, "worker index " .. tostring(worker))
    -- one record per worker coroutine, reused by every later job
    expect.truthy(slots <= 8, "job records made: " .. slots)
    expect.truthy(executed > 3 * slots, "jobs executed: " .. executed)
    -- a lower bound on time: 2 threads x 10 ms sleeps allow 200 ops/s at most
    expect.truthy(r.ops_per_sec <= 200 * 1.05, "ops/s " .. tostring(r.ops_per_sec))
  end)
  it("allocates nothing per job", function()
    expect.eq(r.heap_bytes_per_op, 0, "heap bytes/op")
  end)
  it("nresrun.pool.init refuses a bad max_wait or an unknown field, by name", function()
    local probe = write("pool_bad.lua", [[
local pool = require("nresrun").pool
for _, t in ipairs { { max_wait = -1 }, { max_wait = 0 / 0 }, { max_wait = 1e9 },
                     { max_wait = "1" }, { max_wat = 1 } } do
  local ok, err = pcall(pool.init, t)
  print(ok, err)
end
os.exit(0)
]])
    local _, o = run(probe)
    local n = 0
    for line in o:gmatch("[^\n]+") do
      n = n + 1
      expect.truthy(line:find("^false\tnresrun.pool.init: max_w") , line)
    end
    expect.eq(n, 5, o)
  end)
end) end

describe("a hedged cell", function()
  it("reports hedges per operation, won and canceled, and the report's table shows them", function()
    local path = write("hedged.lua", HEAD .. [[
  name = "hedged",
  dependency = nresrun.dep.model{ latency = { lognormal = { 0.002, 1 } } },
  load = { workers = 4 },
  arms = { plain = nres.policy{ base = "trivial", attempts = 2 },
           hedged = nres.policy{ base = "trivial", attempts = 2, hedge = { at = 0.001, max = 2 } } },
  repetitions = 1, warmup = 0.1, window = 0.5,
}
]])
    local code, out, err = run(path .. " --out " .. dir .. "/hedged")
    expect.truthy(code == 0 or code == 1, "ran: " .. out .. err)
    local by = {}
    for _, r in ipairs(report_of(out).results) do by[r.arm] = r end
    local h = assert(by.hedged, "the hedged arm's result")
    expect.truthy(h.hedges_per_op > 0 and h.hedges_per_op <= 1, "hedges/op " .. tostring(h.hedges_per_op))
    expect.truthy(h.hedges_won_per_op > 0 and h.hedges_won_per_op <= h.hedges_per_op, "won/op")
    expect.truthy(h.hedges_canceled_per_op >= 0, "canceled/op")
    expect.eq(by.plain.hedges_per_op, 0, "no hedge without a hedge table")
    expect.truthy(out:find("hedges/op (won, canceled)", 1, true), "the load table's column")
  end)
end)

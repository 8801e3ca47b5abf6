-- SPDX-License-Identifier: MIT
-- nresrun.cli: the command line of nresrun.
--
--   nresrun SCENARIO.lua [options]    run the scenario's matrix, write reports
--   nresrun SCENARIO.lua --list       list its cells
--   nresrun --help | --version
--
-- Exit codes: 0 every cell ran and is trusted; 1 a cell failed or is
-- untrusted; 2 usage or scenario error. Internally, each cell runs as
-- `nresrun SCENARIO.lua --cell I --rep R --seed S`, printing one JSON line.
local _M = { _VERSION = "0.1.0" }

local format = string.format

-- The help text is also nresrun(1): cmake/manpage.cmake makes the manual
-- page from `nresrun --help` at build time, so the two cannot drift. Keep
-- its shape: "usage:" lines, then paragraphs and "Heading:" sections whose
-- entries are indented two spaces, with descriptions aligned after them.
local USAGE = [[
usage: nresrun FILE.lua [options]
       nresrun serve [--port N] [server options]
       nresrun tune TRACE [options]    (nresrun tune --help)
       nresrun --help | --version

nresrun runs the stress scenarios and simulations that compare resilience
policies. FILE.lua returns one of:
  nresrun.scenario{...}    a stress matrix in real time: every cell
                           (section x dependency x load x arm) runs in a
                           fresh process, in a seeded shuffled order, a
                           warm-up then a measured window, N times.
  nresrun.simulation{...}  policies against a modelled dependency on a
                           virtual clock: the same seed gives the same run.
  a tournament             presets against several simulated scenarios,
                           as bench/tournament.lua.

Options:
  --quick          one value per load dimension, 1 repetition, short
                   windows; a simulation runs as it is
  --repetitions N  repetitions per cell (overrides the scenario)
  --warmup S       warm-up seconds per run
  --window S       measured seconds per run
  --seed N         seed of the order and of the cells (default 1), or of a
                   simulation: same seed, same run
  --only PATTERN   Lua pattern: run only the cells whose "section/arm"
                   matches, or the simulation's policies whose name does
  --out DIR        where the reports go (default: see Reports)
  --list           print the cells, or the simulation's policies, and exit
  --max-minutes M  refuse a matrix longer than M minutes (default 60)
  --cell I         internal: run cell I once and print one JSON line
  --rep R          internal: the repetition a --cell run belongs to
  --help           print this help and exit
  --version        print the versions of nres and LuaJIT and exit

Reports:
  scenario         DIR/NAME-TIME.md (medians with spreads, ratios to the
                   baseline arm, warnings for untrusted or failed cells)
                   and DIR/NAME-TIME.json (every repetition); DIR is
                   artifacts/stress unless --out says otherwise; the
                   markdown is also printed
  simulation       DIR/NAME-TIME.md, .json and .svg; a tournament writes
                   DIR/NAME-TIME.md and one .svg per scenario; DIR is
                   artifacts/sim unless --out says otherwise
  NAME and TIME    the file's name field, and its start in UTC, as in
                   sim-outage-20261207T120000Z

serve:
  nresrun serve    the HTTP dependency server the http cells call, as
                   nres-depserver: the same options (nres-depserver --help),
                   "port N" printed first, stops when its standard input
                   closes or on SIGTERM

Environment:
  NRES_LIB         the libnres the Lua face loads (default: the one
                   nresrun is linked with)

Files:
  DIR/../lua, DIR/../share/lua/5.1
                   where the Lua modules are found, DIR being the
                   executable's folder

Exit status:
  0                every cell ran and is trusted, or the simulation ran
                   and its accounting holds
  1                a cell failed or is untrusted (an open-loop cell with
                   more than 0.1 % of its arrivals late by over 1 ms, or
                   any shed), or a simulation's accounting does not hold
  2                a usage or scenario error, naming file:line and the
                   field]]

-- A command's options: flags (name = true) and values (name = kind), and
-- where its help is. nresrun's own; `nresrun tune` has its own grammar
-- (nresrun.tune.main) read by the same parse.
local grammar = {
  flags = { quick = true, list = true, help = true, version = true },
  values = { repetitions = "count", warmup = "seconds", window = "seconds",
             seed = "count", only = "pattern", out = "string", cell = "count",
             rep = "count", ["max-minutes"] = "minutes" },
  help = "--help",
}

-- What each kind of value accepts, and how to say so. Every number is
-- finite: "inf", "nan" and 1e400 (which tonumber reads as inf) are refused.
-- open: the bound itself is refused.
local kinds = {
  count   = { max = 2^31 - 1, whole = true, min = 1, says = "a whole number from 1 to 2147483647" },
  seconds = { max = 86400, min = 0, says = "seconds from 0 to 86400" },
  minutes = { max = 10080, min = 0, says = "minutes from 0 to 10080" },
  positive_seconds = { max = 86400, min = 0, open_min = true, says = "seconds above 0, at most 86400" },
  share   = { max = 1, min = 0, open_min = true, open_max = true, says = "a share above 0 and below 1" },
}

local function value(name, kind, v)
  if kind == "string" then return v end
  if type(kind) == "table" then   -- one of a list of words
    for _, w in ipairs(kind) do if v == w then return v end end
    return nil, format("--%s: expected %s, got %q", name, table.concat(kind, " or "), v)
  end
  if kind == "pattern" then
    local ok, err = pcall(string.find, "", v)
    if not ok then
      return nil, format("--%s: not a Lua pattern (%s): %q", name, tostring(err):gsub("^.-:%d+: ", ""), v)
    end
    return v
  end
  local k, n = kinds[kind], tonumber(v)
  if not n or n ~= n or n < k.min or n > k.max or (k.whole and n ~= math.floor(n))
     or (k.open_min and n == k.min) or (k.open_max and n == k.max) then
    return nil, format("--%s: expected %s, got %q", name, k.says, v)
  end
  return n
end

-- parse(args[, g]) -> options, positional; or nil, error. g: a grammar as
-- above (default nresrun's). An option's dashes become underscores.
local function parse(args, g)
  g = g or grammar
  local opts, positional = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name = a:match("^%-%-([%w%-]+)$")
    if name and g.flags[name] then
      opts[name] = true
    elseif name and g.values[name] then
      if args[i + 1] == nil then return nil, format("--%s needs a value", name) end
      local v, err = value(name, g.values[name], args[i + 1])
      if v == nil then return nil, err end
      opts[name:gsub("%-", "_")] = v
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return nil, format("unknown option %s (see %s)", a, g.help)
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  return opts, positional
end
_M.parse = parse

local function fail(msg)
  io.stderr:write("nresrun: ", msg, "\n")
  return 2
end

-- The line of the file a scenario problem is about: the first line that
-- sets the problem's field ("key ="), after the line that calls .scenario{ (or .simulation{).
local function locate(lines, problem, start)
  local path = problem:match("^(scenario[%w_%.%[%]\"]*)")
               or problem:match("^(simulation[%w_%.%[%]\"]*)")
  local key = path and path:gsub("%[[^%]]*%]$", ""):match("([%w_]+)$")
  if key and key ~= "scenario" and key ~= "simulation" then
    for i = start, #lines do
      if lines[i]:find("%f[%w_]" .. key .. "%s*=") then return i end
    end
  end
  return start
end

-- Give every problem of an error from nresrun.scenario its file:line (the
-- call was a tail call when the position reads "?").
local function place(path, msg)
  local rest = msg:match("^%?: (.*)$")
  if not rest then return msg end
  local lines, start = {}, 1
  for line in io.lines(path) do
    lines[#lines + 1] = line
    if start == 1 and (line:find("%.scenario%s*[{(]") or line:find("%.simulation%s*[{(]")) then
      start = #lines
    end
  end
  local count, list = rest:match("^(%d+ problems):\n(.*)$")
  if not count then
    return format("%s:%d: %s", path, locate(lines, rest, start), rest)
  end
  local out = { format("%s:%d: %s:", path, start, count) }
  for p in list:gmatch("  ([^\n]+)") do
    out[#out + 1] = format("  %s:%d: %s", path, locate(lines, p, start), p)
  end
  return table.concat(out, "\n")
end
_M.place = place

-- The reports' folder must take files before the first cell runs: a run
-- of many minutes must not end in a folder it cannot write.
local function check_out(dir)
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  local probe = dir .. "/.nresrun-write-check"
  local f, err = io.open(probe, "w")
  if not f then
    return nil, format("--out %s: cannot write reports there (%s)", dir,
                       tostring(err):gsub("^" .. probe:gsub("%p", "%%%0") .. ": ", ""))
  end
  f:close()
  os.remove(probe)
  return true
end
_M.check_out = check_out

local function load_scenario(path)
  local scenario = require "nresrun.scenario"
  local chunk, err = loadfile(path)
  if not chunk then return nil, err end
  local ok, sc = pcall(chunk)
  if not ok then return nil, place(path, tostring(sc)) end
  local ok_sim, sim = pcall(require, "nresrun.sim")
  if ok_sim and sim.is_simulation and sim.is_simulation(sc) then return sc end
  if require("nresrun.external").is_external(sc) then return sc end
  if getmetatable(sc) == nil or getmetatable(sc).__index ~= scenario then
    return nil, format("%s: a scenario file must return nresrun.scenario{...}, got %s",
      path, require("nres.schema").describe(sc))
  end
  return sc
end

function _M.main(...)
  if select(1, ...) == "tune" then   -- its own options: nresrun.tune.main
    return require("nresrun.tune.main").main({ select(2, ...) })
  end
  local opts, positional = parse({ ... })
  if not opts then return fail(positional) end
  if opts.help then print(USAGE) return 0 end
  if opts.version then
    print("nresrun " .. require("nres").version .. " (" .. (jit and jit.version or "Lua") .. ")")
    return 0
  end
  if #positional ~= 1 then return fail("expected one scenario file (see --help)") end
  local path = positional[1]
  local sc, err = load_scenario(path)
  if not sc then return fail(err) end
  local ok_sim, sim = pcall(require, "nresrun.sim")
  local is_sim = ok_sim and sim.is_simulation and sim.is_simulation(sc)
  if not opts.list and not opts.cell then
    local ok_out, why = check_out(opts.out or (is_sim and "artifacts/sim" or "artifacts/stress"))
    if not ok_out then return fail(why) end
  end
  if is_sim then
    return sim.main(sc, path, opts)   -- a virtual-clock simulation (nresrun.sim)
  end
  local external = require "nresrun.external"
  if external.is_external(sc) then
    return external.main(sc, path, opts)   -- a C benchmark program
  end
  local cells = sc:cells(opts)
  if #cells == 0 then return fail("no cells" .. (opts.only and " match --only " .. opts.only or "")) end

  if opts.cell then   -- a child: run one cell, print one JSON line
    local cell = cells[opts.cell]
    if not cell then return fail(format("no cell %d (the scenario has %d)", opts.cell, #cells)) end
    local metrics = require("nresrun.cell").run(cell, opts.seed or 1)
    io.stdout:write(require("cjson.safe").encode(metrics), "\n")
    return 0
  end

  local runs = sc:runs(cells, opts.seed or 1)
  if opts.list then
    for _, c in ipairs(cells) do
      print(format("%3d  %s  (x%d, %gs + %gs)", c.index, c.key, c.repetitions, c.warmup, c.window))
    end
    return 0
  end
  local seconds, why = sc:fit(runs, opts)
  if not seconds then return fail(why) end
  local runner = require "nresrun.runner"
  local doc, code, stamp = runner.run(sc, path, runs, opts)
  local stem = (sc.spec.name or path:match("([^/]+)%.lua$") or "scenario") .. "-" .. stamp
  local json_path, md_path = require("nresrun.report").write(doc, opts.out or "artifacts/stress", stem)
  print(require("nresrun.report").markdown(doc))
  print(format("reports: %s %s", md_path, json_path))
  return code
end

return _M

-- SPDX-License-Identifier: MIT
-- nresrun.scenario: the scenario DSL of nresrun, its checks, and its matrix.
--
--   return nresrun.scenario{
--     name = "budget",
--     dependency = nresrun.dep.flaky{ fail_every = 2 },
--     load = { open_rate = { 20000, 100000 } },        -- or { workers = { 1, "cores", "8x" } }
--                                                     -- or { threads = { 1, 2, 4, 8 }, workers = 1 }
--     arms = { raw = nresrun.raw, unbudgeted = "trivial",
--              budgeted = nres.policy{ base = "trivial", budget = { ratio = 0.1 } } },
--     repetitions = 3, warmup = 2, window = 5,
--   }
--
-- A scenario has sections (`sections = { { name = ..., dependency = ...,
-- load = ..., arms = ... }, ... }`, each inheriting the top level's
-- fields) or is one section itself. The matrix is, per section, the
-- product of its dependencies × load values × arms; each cell runs
-- `repetitions` times. Every problem is reported at once, prefixed with
-- the file:line of the nresrun.scenario call.
--
-- Load kinds: workers (closed loop, coroutines on one thread), open_rate
-- (open loop), threads (closed loop on that many OS threads of the cell's
-- process, each with its own Lua state and `workers` workers - one value,
-- default 1 - all calling through one shared policy; not with an http
-- dependency, whose event loop is one thread's). Each is a module of
-- nresrun.load, which checks its values and fills its cells' fields.
local schema = require "nres.schema"
local dep = require "nresrun.dep"
local load_mod = require "nresrun.load"
local workers_kind = require "nresrun.load.workers"

local type, pairs, ipairs, format, floor = type, pairs, ipairs, string.format, math.floor
local describe = schema.describe

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

_M.raw = setmetatable({ kind = "raw" }, { __tostring = function() return "nresrun.raw" end })

function _M.naive(attempts)
  return { kind = "naive", attempts = attempts or 3 }
end

-- A peer: the same cell run by another runtime's driver (bench/peers/).
function _M.peer(t)
  local spec = { kind = "peer", where = dep.where(2) }
  for k, v in pairs(t or {}) do spec[k] = v end
  return spec
end

_M.cores = workers_kind.cores

local top_fields = {
  name = true, description = true, sections = true, dependency = true, load = true,
  arms = true, baseline = true, repetitions = true, warmup = true, window = true,
  seed = true, quick = true, max_minutes = true, max_inflight = true, grace = true,
}
local section_fields = {
  name = true, description = true, dependency = true, load = true, arms = true,
  baseline = true, repetitions = true, warmup = true, window = true, max_inflight = true,
}
local quick_fields = { repetitions = true, warmup = true, window = true }

local function count(v) return type(v) == "number" and v >= 1 and v == floor(v) and v < 1e9 end

local function suggest(key, fields)
  return " (" .. schema.hint(tostring(key), fields) .. ")"
end

local function list_of(v)
  if type(v) == "table" and v[1] ~= nil then return v end
  return { v }
end

local function arm_kind(a)
  if a == _M.raw then return "raw" end
  if type(a) == "string" then return "preset" end
  if type(a) == "table" then
    if a.cp ~= nil and a.run ~= nil then return "policy" end
    if a.kind == "naive" then return count(a.attempts) and "naive" or nil end
    if a.kind == "peer" then return "peer" end
  end
  return nil
end

local function check_section(problems, path, s, top)
  for k in pairs(s) do
    if not section_fields[k] then
      problems[#problems + 1] = format("%s.%s: unknown field%s", path, tostring(k), suggest(k, section_fields))
    end
  end
  local deps = s.dependency or top.dependency
  if deps == nil then
    problems[#problems + 1] = path .. ".dependency: missing (nresrun.dep.flaky{...}, nresrun.dep.model{...}, nresrun.dep.fn(f))"
  else
    for i, d in ipairs(list_of(deps)) do
      if not dep.is_spec(d) then
        problems[#problems + 1] = format("%s.dependency%s: expected a dependency (nresrun.dep.*), got %s",
          path, type(deps) == "table" and deps[1] ~= nil and "[" .. i .. "]" or "", describe(d))
      end
    end
  end
  local load = s.load or top.load
  if type(load) ~= "table" then
    problems[#problems + 1] = format("%s.load: expected { workers = ... } or { open_rate = ... }, got %s", path, describe(load))
  else
    local n = 0
    local kind = load_mod.of(load)
    local companions = kind and kind.companions or {}
    for k, v in pairs(load) do
      local own = load_mod.get(k)
      if companions[k] and k ~= kind.name then
        local why = companions[k](v, path)
        if why then problems[#problems + 1] = why end
      elseif not own then
        problems[#problems + 1] = format("%s.load.%s: unknown load kind (%s)", path, tostring(k),
                                         table.concat(load_mod.KINDS, ", "))
      else
        n = n + 1
        for i, val in ipairs(list_of(v)) do
          if not own.check(val) then
            problems[#problems + 1] = format("%s.load.%s[%d]: expected %s, got %s", path, k, i, own.expected, describe(val))
          end
        end
      end
    end
    if n > 1 then
      local each = {}
      for i, name in ipairs(load_mod.KINDS) do
        each[i] = format("%s (%s)", name, load_mod.get(name).what)
      end
      problems[#problems + 1] = format("%s.load: %s or %s, one of them", path,
        table.concat(each, ", ", 1, #each - 1), each[#each])
    end
    if kind and kind.dependency then
      for i, d in ipairs(list_of(deps or {})) do
        local why = kind.dependency(d)
        if why then
          problems[#problems + 1] = format("%s.dependency%s: %s",
            path, type(deps) == "table" and deps[1] ~= nil and "[" .. i .. "]" or "", why)
        end
      end
    end
    if n == 0 and next(load) == nil then problems[#problems + 1] = path .. ".load: empty" end
  end
  local arms = s.arms or top.arms
  if type(arms) ~= "table" or next(arms) == nil then
    problems[#problems + 1] = format("%s.arms: expected a table of name = arm, got %s", path,
      type(arms) == "table" and "an empty table" or describe(arms))
  else
    for name, a in pairs(arms) do
      if type(name) ~= "string" then
        problems[#problems + 1] = format("%s.arms[%s]: arm names are strings", path, describe(name))
      elseif not arm_kind(a) then
        problems[#problems + 1] = format("%s.arms.%s: expected a policy, a preset name, nresrun.raw, nresrun.naive(n) or nresrun.peer{...}, got %s",
          path, name, describe(a))
      elseif type(a) == "string" then
        local ok, t, why = pcall(require("nres.policy").resolve, a)
        if not ok or not t then   -- resolve's own words: the nearest preset, the list
          problems[#problems + 1] = format("%s.arms.%s: %s", path, name,
                                           ok and why or format("unknown preset %s", describe(a)))
        end
      end
    end
    local base = s.baseline or top.baseline
    if base ~= nil and arms[base] == nil then
      problems[#problems + 1] = format("%s.baseline: no arm named %s", path, describe(base))
    end
  end
  for _, k in ipairs { "repetitions" } do
    if s[k] ~= nil and not count(s[k]) then
      problems[#problems + 1] = format("%s.%s: expected an integer >= 1, got %s", path, k, describe(s[k]))
    end
  end
  for _, k in ipairs { "warmup", "window" } do
    if s[k] ~= nil and not (type(s[k]) == "number" and s[k] >= 0 and s[k] < 3600 and (k == "warmup" or s[k] > 0)) then
      problems[#problems + 1] = format("%s.%s: expected seconds (%s), got %s", path, k,
        k == "warmup" and ">= 0" or "> 0", describe(s[k]))
    end
  end
end

-- nresrun.scenario{...}: checked now, so a mistake points at the file.
function _M.new(t, level)
  level = (level or 1) + 1
  local at = dep.where(level)
  if type(t) ~= "table" then
    error(format("%s: nresrun.scenario: expected a table, got %s", at, describe(t)), level)
  end
  local problems = {}
  for k in pairs(t) do
    if not top_fields[k] then
      problems[#problems + 1] = format("scenario.%s: unknown field%s", tostring(k), suggest(k, top_fields))
    end
  end
  if t.name ~= nil and type(t.name) ~= "string" then
    problems[#problems + 1] = "scenario.name: expected a string, got " .. describe(t.name)
  end
  for _, k in ipairs { "repetitions", "max_inflight" } do
    if t[k] ~= nil and not count(t[k]) then
      problems[#problems + 1] = format("scenario.%s: expected an integer >= 1, got %s", k, describe(t[k]))
    end
  end
  for _, k in ipairs { "warmup", "window", "max_minutes", "grace" } do
    if t[k] ~= nil and not (type(t[k]) == "number" and t[k] >= 0 and t[k] < 1e6 and (k == "warmup" or t[k] > 0)) then
      problems[#problems + 1] = format("scenario.%s: expected seconds (%s), got %s", k, k == "warmup" and ">= 0" or "> 0", describe(t[k]))
    end
  end
  if t.quick ~= nil then
    if type(t.quick) ~= "table" then
      problems[#problems + 1] = "scenario.quick: expected a table, got " .. describe(t.quick)
    else
      for k in pairs(t.quick) do
        if not quick_fields[k] then
          problems[#problems + 1] = format("scenario.quick.%s: unknown field%s", tostring(k), suggest(k, quick_fields))
        end
      end
    end
  end
  local sections = {}
  if t.sections ~= nil then
    if type(t.sections) ~= "table" or t.sections[1] == nil then
      problems[#problems + 1] = "scenario.sections: expected a list of section tables, got " .. describe(t.sections)
    else
      for i, s in ipairs(t.sections) do
        local path = format("scenario.sections[%d]", i)
        if type(s) ~= "table" then
          problems[#problems + 1] = path .. ": expected a table, got " .. describe(s)
        else
          if type(s.name) ~= "string" then
            problems[#problems + 1] = path .. ".name: expected a string, got " .. describe(s.name)
          else
            path = "scenario." .. s.name
          end
          check_section(problems, path, s, t)
          sections[#sections + 1] = s
        end
      end
    end
  else
    local own = { name = t.name or "main" }
    check_section(problems, "scenario", { name = own.name }, t)
    sections[1] = own
  end
  if #problems > 0 then
    -- `return nresrun.scenario{...}` is a tail call: the caller's frame, and
    -- so its line, may be gone ("?"). nresrun then finds each field's line
    -- in the file itself (nresrun.cli).
    error(at .. ": " .. (#problems == 1 and problems[1]
      or format("%d problems:\n  %s", #problems, table.concat(problems, "\n  "))), 0)
  end
  return setmetatable({ spec = t, sections = sections, where = at }, mt)
end

local function pick(s, top, k, default)
  if s[k] ~= nil then return s[k] end
  if top[k] ~= nil then return top[k] end
  return default
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The cells, in a stable order. opts.quick keeps one value per load
-- dimension; opts.only (a Lua pattern) keeps matching "section/arm" cells.
function _M.cells(self, opts)
  opts = opts or {}
  local top, cells = self.spec, {}
  for _, s in ipairs(self.sections) do
    local deps = list_of(pick(s, top, "dependency"))
    local load = pick(s, top, "load")
    local kind = load_mod.of(load)
    local values = kind.values(load)
    if opts.quick then values = { values[1] } end
    local arms = pick(s, top, "arms")
    local baseline = pick(s, top, "baseline", arms.raw and "raw" or nil)
    for di, d in ipairs(deps) do
      for _, v in ipairs(values) do
        for _, name in ipairs(sorted_keys(arms)) do
          local a = arms[name]
          local cell = {
            section = s.name, arm = name, arm_spec = a,
            -- A peer compares with its own runtime's raw arm when it names one.
            baseline = type(a) == "table" and a.kind == "peer" and a.baseline or baseline,
            dependency = d, dependency_index = di, dependency_label = dep.label(d),
            load = kind.name, load_value = v,
            max_inflight = pick(s, top, "max_inflight", 10000),
            grace = top.grace or 30,
            repetitions = opts.repetitions or (opts.quick and ((top.quick or {}).repetitions or 1))
                          or pick(s, top, "repetitions", 3),
            warmup = opts.warmup or (opts.quick and ((top.quick or {}).warmup or 0.3))
                     or pick(s, top, "warmup", 2),
            window = opts.window or (opts.quick and ((top.quick or {}).window or 1))
                     or pick(s, top, "window", 5),
          }
          kind.fields(cell, v, load)
          cell.key = format("%s/%s/%s/%s=%s", cell.section, cell.arm, cell.dependency_label,
                            cell.load, tostring(v))
          if not opts.only or (cell.section .. "/" .. cell.arm):find(opts.only) then
            cells[#cells + 1] = cell
          end
        end
      end
    end
  end
  for i, c in ipairs(cells) do c.index = i end
  return cells
end

-- A small seeded generator (not math.random: cells seed that themselves).
local function lcg(seed)
  local state = seed % 2147483647
  if state <= 0 then state = state + 2147483646 end
  return function(n)
    state = (state * 48271) % 2147483647
    return state % n + 1
  end
end

-- Every (cell, repetition) run, shuffled with the seed: same seed, same order.
function _M.runs(self, cells, seed)
  local runs = {}
  for _, c in ipairs(cells) do
    for r = 1, c.repetitions do runs[#runs + 1] = { cell = c, repetition = r } end
  end
  local rand = lcg(seed or 1)
  for i = #runs, 2, -1 do
    local j = rand(i)
    runs[i], runs[j] = runs[j], runs[i]
  end
  return runs
end

-- Refuse a matrix that cannot fit: too long, too many workers, a rate
-- the machine cannot pace.
function _M.fit(self, runs, opts)
  local seconds = 0
  for _, r in ipairs(runs) do
    local c = r.cell
    seconds = seconds + c.warmup + c.window + 0.4
    local why = load_mod.get(c.load).fit(c)
    if why then return nil, why end
  end
  local limit = (opts and opts.max_minutes) or self.spec.max_minutes or 60
  if seconds / 60 > limit then
    return nil, format("the matrix needs about %.0f minutes (%d runs); the limit is %g (max_minutes; --quick or --only shrink it)",
      seconds / 60, #runs, limit)
  end
  return seconds
end

return _M

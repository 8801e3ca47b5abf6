-- SPDX-License-Identifier: MIT
-- nresrun.external: a benchmark whose work is a C program, declared in Lua.
--
--   return nresrun.external{
--     name = "overhead", program = "bench_pool",
--     args = { "--only", "minimal,sequential,logging,parallel,files" },
--     quick_args = { "--quick" }, timeout = 900,
--   }
--
-- nresrun runs the program (found beside the nresrun executable) in its
-- own process with a time limit, asks it for its JSON and Markdown
-- (--json FILE --md FILE), files both under the report folder with a UTC
-- stamp like the stress reports, and prints the Markdown. The program does
-- the measuring; Lua only declares what to run.
local host = require "nresrun.host"
local schema = require "nres.schema"
local dep = require "nresrun.dep"

local format = string.format
local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

local fields = { name = true, program = true, args = true, quick_args = true, timeout = true,
                 description = true }

local function strings(v)
  if type(v) ~= "table" then return false end
  for _, s in ipairs(v) do if type(s) ~= "string" then return false end end
  return true
end

function _M.new(t, level)
  local at = dep.where((level or 1) + 1)
  local problems = {}
  if type(t) ~= "table" then
    error(format("%s: nresrun.external: expected a table, got %s", at, schema.describe(t)), 0)
  end
  for k in pairs(t) do
    if not fields[k] then
      problems[#problems + 1] = format("external.%s: unknown field (%s)", tostring(k), schema.hint(tostring(k), fields))
    end
  end
  if type(t.name) ~= "string" then problems[#problems + 1] = "external.name: expected a string, got " .. schema.describe(t.name) end
  if type(t.program) ~= "string" or not t.program:match("^[%w_%-%.]+$") then
    problems[#problems + 1] = "external.program: expected a program name built beside nresrun, got " .. schema.describe(t.program)
  end
  for _, k in ipairs { "args", "quick_args" } do
    if t[k] ~= nil and not strings(t[k]) then
      problems[#problems + 1] = format("external.%s: expected a list of strings, got %s", k, schema.describe(t[k]))
    end
  end
  if t.timeout ~= nil and not (type(t.timeout) == "number" and t.timeout > 0) then
    problems[#problems + 1] = "external.timeout: expected seconds > 0, got " .. schema.describe(t.timeout)
  end
  if #problems > 0 then error(at .. ": " .. table.concat(problems, "; "), 0) end
  return setmetatable({ spec = t, where = at }, mt)
end

function _M.is_external(v) return getmetatable(v) == mt end

function _M.main(self, path, opts)
  local t = self.spec
  if not host.available then
    io.stderr:write("nresrun: external benchmarks run inside nresrun\n")
    return 2
  end
  local program = host.exe():gsub("[^/]+$", "") .. t.program
  local f = io.open(program, "r")
  if not f then
    io.stderr:write(format("nresrun: %s: %s was not built (looked for %s)\n", path, t.program, program))
    return 2
  end
  f:close()
  local dir = opts.out or "artifacts/stress"
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  local stem = format("%s/%s-%s", dir, t.name, os.date("!%Y%m%dT%H%M%SZ"))
  local argv = { program }
  for _, a in ipairs(t.args or {}) do argv[#argv + 1] = a end
  if opts.quick then for _, a in ipairs(t.quick_args or {}) do argv[#argv + 1] = a end end
  for _, a in ipairs { "--json", stem .. ".json", "--md", stem .. ".md" } do argv[#argv + 1] = a end
  local child, err = host.spawn(argv, t.timeout or 900)
  if not child then
    io.stderr:write("nresrun: ", err, "\n")
    return 1
  end
  io.stdout:write(child.stdout)
  if child.timed_out or child.status ~= 0 then
    io.stderr:write(format("nresrun: %s %s%s\n", t.program,
      child.timed_out and "ran past its time limit" or "exited with status " .. child.status,
      child.stderr ~= "" and (": " .. child.stderr:sub(-2000)) or ""))
    return 1
  end
  print(format("reports: %s.md %s.json", stem, stem))
  return 0
end

return _M

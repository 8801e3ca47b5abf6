-- SPDX-License-Identifier: MIT
-- spec/lua/runner.lua - a small spec runner for the Lua face.
--
--   luajit spec/lua/runner.lua spec/lua/*_spec.lua
--
-- Spec files call describe(name, fn) and it(name, fn) and use the assert
-- helpers below; a failing `it` records its message and the run goes on.
-- Ends with "N passed, N failed" and exits non-zero on any failure.
local passed, failed, failures = 0, 0, {}
local prefix = {}

local function describe(name, fn)
  prefix[#prefix + 1] = name
  fn()
  prefix[#prefix] = nil
end

local function it(name, fn)
  local full = table.concat(prefix, " / ") .. " / " .. name
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    passed = passed + 1
  else
    failed = failed + 1
    failures[#failures + 1] = full .. "\n    " .. tostring(err):gsub("\n", "\n    ")
    io.stdout:write("FAIL ", full, "\n")
  end
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local expect = {}
function expect.eq(got, want, what)
  if got ~= want then
    error(string.format("%sexpected %s, got %s", what and what .. ": " or "", show(want), show(got)), 2)
  end
end
function expect.truthy(v, what)
  if not v then error((what or "value") .. " should be truthy, got " .. show(v), 2) end
end
function expect.near(got, want, tol, what)
  if type(got) ~= "number" or math.abs(got - want) > tol then
    error(string.format("%sexpected %s +- %s, got %s", what and what .. ": " or "", show(want), show(tol), show(got)), 2)
  end
end
-- fn must raise an error whose message equals `want` (after stripping the
-- "file:line: " position, which is checked separately when `where` is set).
function expect.error(fn, want, where)
  local ok, err = pcall(fn)
  if ok then error("expected an error: " .. show(want), 2) end
  err = tostring(err)
  local pos, msg = err:match("^([^\n]-:%d+): (.*)$")
  if not pos then msg = err end
  if msg ~= want then
    error(string.format("error message:\n  want %s\n  got  %s", show(want), show(msg)), 2)
  end
  if where and not (pos or ""):find(where, 1, true) then
    error(string.format("error position: want %s, got %s", show(where), show(pos)), 2)
  end
end

_G.describe, _G.it, _G.expect = describe, it, expect

for _, file in ipairs(arg) do
  local chunk, err = loadfile(file)
  if not chunk then
    failed = failed + 1
    failures[#failures + 1] = file .. ": " .. err
  else
    describe(file:match("([^/]+)%.lua$") or file, chunk)
  end
end

if #failures > 0 then
  io.stdout:write("\nFailures:\n")
  for _, f in ipairs(failures) do io.stdout:write("  ", f, "\n") end
end
io.stdout:write(string.format("%d passed, %d failed\n", passed, failed))
os.exit(failed == 0 and 0 or 1)

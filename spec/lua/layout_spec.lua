-- SPDX-License-Identifier: MIT
-- layout_spec.lua - the library and the harness are two namespaces:
-- `require "nres"` loads the library only (nothing of nresrun), the
-- harness is `require "nresrun"`, and the harness's old names under nres
-- still work for one release, with a warning. Run in a fresh LuaJIT (its
-- own ctest entry): package.loaded must hold only what this file loaded.
local before = {}
for name in pairs(package.loaded) do before[name] = true end

local nres = require "nres"

local function loaded_since(prefix)
  local list = {}
  for name in pairs(package.loaded) do
    if not before[name] and name:sub(1, #prefix) == prefix then list[#list + 1] = name end
  end
  table.sort(list)
  return list
end

describe("require \"nres\"", function()
  it("loads no harness module", function()
    expect.eq(table.concat(loaded_since("nresrun"), ", "), "")
  end)
  it("loads only library modules", function()
    local library = { nres = true, ["nres.cdef"] = true, ["nres.cdef.shm"] = true,
                      ["nres.policy"] = true,
                      ["nres.run"] = true, ["nres.classify"] = true, ["nres.driver"] = true,
                      ["nres.schema"] = true }
    for _, name in ipairs(loaded_since("nres")) do
      expect.truthy(library[name], name .. " is a library module")
    end
  end)
  it("exposes the library and not the harness as its own fields", function()
    for _, k in ipairs{ "policy", "budget", "preset", "remaining", "reasons", "driver", "classify" } do
      expect.truthy(rawget(nres, k) ~= nil, "nres." .. k)
    end
    for _, k in ipairs{ "scenario", "simulation", "dep", "http", "pool", "external", "raw", "naive", "peer" } do
      expect.eq(rawget(nres, k), nil, "nres." .. k)
    end
  end)
end)

describe("require \"nresrun\"", function()
  it("is the harness, loading its parts on first use", function()
    local nresrun = require "nresrun"
    expect.eq(type(nresrun.scenario), "function")
    expect.eq(type(nresrun.simulation), "function")
    expect.eq(#loaded_since("nresrun.dep"), 0, "nresrun.dep before use")
    expect.eq(type(nresrun.dep.flaky), "function")
    expect.eq(tostring(nresrun.raw), "nresrun.raw")
    expect.eq(nresrun.nothing, nil)
  end)
end)

describe("the harness's old names under nres", function()
  it("still resolve, to the nresrun parts, and warn once each on stderr", function()
    local nresrun = require "nresrun"
    local lines = {}
    local stderr = io.stderr
    io.stderr = { write = function(_, ...) lines[#lines + 1] = table.concat({ ... }) end }
    local dep, dep_again, raw = nres.dep, nres.dep, nres.raw
    io.stderr = stderr
    expect.truthy(dep == nresrun.dep and dep_again == dep and raw == nresrun.raw)
    expect.eq(#lines, 2)
    expect.truthy(lines[1]:find("nres.dep is deprecated: use require(\"nresrun\").dep", 1, true), lines[1])
  end)
  it("answer nil for a name that never existed", function()
    expect.eq(nres.no_such_field, nil)
  end)
end)

describe("presets", function()
  it("the list an unknown preset's error shows is the policies/ folder's", function()
    local shipped = {}
    local ls = io.popen("ls policies")
    for file in ls:lines() do shipped[#shipped + 1] = file:match("^(.*)%.lua$") end
    ls:close()
    table.sort(shipped)
    expect.eq(table.concat(require("nres.policy").presets, ", "), table.concat(shipped, ", "))
  end)
end)

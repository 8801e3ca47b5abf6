-- SPDX-License-Identifier: MIT
-- cdef_spec: every nres_* function declared in an ffi.cdef of the Lua
-- binding (lua/), the benchmarks (bench/) and the specs (spec/) against
-- its prototype in runtime/include (nres.h, nres/*.h): the same return
-- type and parameter types, parameter names aside. A mirror that drifts
-- calls the library with the wrong arguments and nothing else says so:
-- balancer.lua declared `int nres_breaker_release` where nres.h says
-- void (issue 26). Allowed: `void *` (`const void *`) for a pointer to a
-- type the binding does not declare, `struct nres_x_s *` for `nres_x_t *`. Also: each
-- public header's declarations live in one cdef module.
local expect = expect

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function files(dir, pattern)
  local out = {}
  local p = assert(io.popen("find " .. dir .. " -type f -name '" .. pattern .. "' | sort"))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- Comments, struct bodies and preprocessor lines out, whitespace folded.
local function clean(text)
  text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
  text = text:gsub("\n%s*#[^\n]*", "\n")
  local prev
  repeat prev = text; text = text:gsub("%b{}", " ") until text == prev
  return (text:gsub("%s+", " "))
end

-- A type in one spelling: typedef names for struct tags, one space
-- before each '*' and none after.
local function norm_type(t)
  t = t:gsub("struct%s+nres_([%w_]-)_s%f[^%w_]", "nres_%1_t")
  t = t:gsub("%s*%*%s*", " *"):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  return t
end

-- A parameter's type, its name dropped (a function pointer's too).
local function param_type(p)
  p = p:gsub("^%s+", ""):gsub("%s+$", "")
  if p == "void" or p == "..." then return p end
  p = p:gsub("%(%s*%*%s*[%a_][%w_]*%s*%)", "(*)")      -- void (*fn)(...)
  local head, name = p:match("^(.-[%s%*])([%a_][%w_]*)$")
  local bare = head and head:gsub("[%s%*]", "")
  if head and bare ~= "" and bare ~= "const" and bare ~= "unsigned" and bare ~= "struct" then
    p = head
  end
  return norm_type(p)
end

-- Split a parameter list at its top-level commas.
local function params(list)
  local out, depth, cur = {}, 0, {}
  for c in list:gmatch(".") do
    if c == "(" then depth = depth + 1 elseif c == ")" then depth = depth - 1 end
    if c == "," and depth == 0 then
      out[#out + 1] = table.concat(cur)
      cur = {}
    else
      cur[#cur + 1] = c
    end
  end
  out[#out + 1] = table.concat(cur)
  for i, p in ipairs(out) do out[i] = param_type(p) end
  return out
end

-- One prototype "ret name(params)" into out[name] = { ret, params }.
local function add(out, s)
  local ret, name, list = s:match("^%s*(.-)%f[%w_](nres_[%w_]+)%s*(%b())%s*$")
  if ret and not ret:find("typedef") and ret:match("%S") then
    out[name] = { ret = norm_type(ret), params = params(list:sub(2, -2)) }
  end
end

-- name -> { ret = type, params = { types } } of each nres_* prototype of
-- an ffi.cdef body.
local function prototypes(text)
  local out = {}
  for stmt in clean(text):gmatch("[^;]+") do add(out, stmt) end
  return out
end

-- The same for a C header: its NRES_EXTERN declarations.
local function exported(text)
  local out = {}
  text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " "):gsub("%s+", " ")
  for decl in text:gmatch("NRES_EXTERN%s+([^;{}]+);") do add(out, decl) end
  return out
end

local function show(p)
  return p.ret .. " (" .. table.concat(p.params, ", ") .. ")"
end

local function same(header, binding)
  if header == binding then return true end
  if binding == "void *" then return header:find("%*$") ~= nil end
  return binding == "const void *" and header:find("^const .*%*$") ~= nil
end

describe("the FFI mirrors of runtime/include", function()
  local headers = {}
  local paths = files("runtime/include", "*.h")
  paths[#paths + 1] = "runtime/src/nresrun/host.h"   -- the harness's, lua/nresrun binds it
  for _, path in ipairs(paths) do
    for name, p in pairs(exported(read(path))) do
      p.path = path
      headers[name] = p
    end
  end

  it("read the headers' prototypes", function()
    expect.truthy(headers.nres_breaker_release, "nres_breaker_release not found in nres.h")
    expect.eq(show(headers.nres_breaker_release), "void (nres_breaker_t *, uint32_t)")
    expect.eq(show(headers.nres_gw_upstream_new), "nres_gw_upstream_t * (const nres_gw_config_t *)")
  end)

  it("declare every nres_* function as its header does", function()
    local wrong, checked = {}, 0
    local sources = {}
    for _, dir in ipairs { "lua", "bench", "spec" } do
      for _, path in ipairs(files(dir, "*.lua")) do sources[#sources + 1] = path end
    end
    for _, path in ipairs(sources) do
      local text = read(path)
      for _, body in text:gmatch("ffi%.cdef%s*%(?%s*%[(=*)%[(.-)%]%1%]") do
        for name, p in pairs(prototypes(body)) do
          local h = headers[name]
          checked = checked + 1
          if h == nil then
            wrong[#wrong + 1] = path .. ": " .. name .. " is in no header of runtime/include"
          else
            local ok = same(h.ret, p.ret) and #h.params == #p.params
            for i = 1, #h.params do ok = ok and same(h.params[i], p.params[i] or "") end
            if not ok then
              wrong[#wrong + 1] = string.format("%s: %s is %s, but %s in %s", path, name,
                show(p), show(h), h.path)
            end
          end
        end
      end
    end
    expect.truthy(checked > 100, "only " .. checked .. " prototypes found in ffi.cdef blocks")
    expect.eq(table.concat(wrong, "\n"), "")
  end)

  it("find a wrong return type (balancer.lua's int nres_breaker_release)", function()
    local p = prototypes("int nres_breaker_release(nres_breaker_t *breaker, uint32_t permit);")
    local h = headers.nres_breaker_release
    expect.eq(same(h.ret, p.nres_breaker_release.ret), false)
  end)

  it("declare each public header's functions in one cdef module", function()
    local owner, twice = {}, {}
    for _, path in ipairs(files("lua", "*.lua")) do
      for _, body in read(path):gmatch("ffi%.cdef%s*%(?%s*%[(=*)%[(.-)%]%1%]") do
        for name in pairs(prototypes(body)) do
          if owner[name] and owner[name] ~= path then
            twice[#twice + 1] = name .. " in " .. owner[name] .. " and " .. path
          end
          owner[name] = path
        end
      end
    end
    expect.eq(table.concat(twice, "\n"), "")
    -- and a header's functions all in one module. Known, to move:
    -- nres.shm still declares shm.h's three region-file calls itself.
    local pending = { ["lua/nres/shm.lua"] = true }
    local modules = {}   -- header -> { module path = true }
    for name, path in pairs(owner) do
      local h = headers[name]
      if h and not pending[path] then
        modules[h.path] = modules[h.path] or {}
        modules[h.path][path] = true
      end
    end
    local spread = {}
    for header, set in pairs(modules) do
      local list = {}
      for path in pairs(set) do list[#list + 1] = path end
      if #list > 1 then
        table.sort(list)
        spread[#spread + 1] = header .. " in " .. table.concat(list, ", ")
      end
    end
    table.sort(spread)
    expect.eq(table.concat(spread, "\n"), "")
  end)
end)

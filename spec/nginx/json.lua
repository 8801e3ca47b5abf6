-- SPDX-License-Identifier: MIT
-- json.lua EXPR: read JSON on stdin and print the value of the Lua
-- expression EXPR, in which `j` is the decoded document and
-- `key(scope, name)` the entry of key `name` in j.scopes[scope].keys.
-- For spec/nginx/run.sh and bench/gateway/run.sh (luajit + lua-cjson, both
-- already dependencies). Prints nothing for nil; exits 1 on bad JSON.
local cjson = require "cjson"
local ok, j = pcall(cjson.decode, io.read("*a"))
if not ok then io.stderr:write("json.lua: ", tostring(j), "\n"); os.exit(1) end
local function key(scope, name)
  local s = j.scopes and j.scopes[scope]
  for _, k in ipairs(s and s.keys or {}) do
    if k.key == name then return k end
  end
  return {}
end
local f = assert(loadstring("return " .. arg[1]))
setfenv(f, { j = j, key = key, tostring = tostring, math = math, string = string, table = table, require = require,
            ipairs = ipairs, pairs = pairs })
local v = f()
if v ~= nil then print(tostring(v)) end

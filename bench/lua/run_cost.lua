-- bench/lua/run_cost.lua - what p:run costs over calling fn directly.
--
--   LUA_PATH="lua/?.lua;;" NRES_LIB=build/libnres.so luajit bench/lua/run_cost.lua
--
-- Arms are measured interleaved, repetition by repetition, each against the
-- raw call of the same repetition: ns/call (median, min-max), the overhead,
-- and Lua garbage per call (collectgarbage("count") around the calls, after
-- a warm-up so the loops are compiled). Reported, never asserted.
-- With `-jv` in LUAJIT's arguments (see bench/README.md) the JIT reports
-- every trace and any abort or NYI.
local nres = require "nres"

local calls = tonumber(os.getenv("CALLS")) or 1000000
local reps = tonumber(os.getenv("REPS")) or 7
local now = nres.driver.blocking.now

local sink = 0
local function work(x) sink = sink + x; return x end

local n = 0
local function fail_twice(x)
  n = n + 1
  if n % 3 ~= 0 then return nil, "transient" end
  sink = sink + x
  return x
end

local function lua_classify(res, err)
  if err then return "transient" end
  return "ok"
end

local arms = {
  { name = "raw", what = "fn(i) directly", run = function(k)
      for i = 1, k do work(i) end end },
  { name = "passthrough", what = 'preset "none"', policy = nres.policy("none") },
  { name = "trivial", what = "3 attempts, nothing else", policy = nres.policy("trivial") },
  { name = "default", what = "retry+deadline+timeout+budget+breaker+ceiling", policy = nres.policy("default") },
  { name = "lua-classifier", what = "trivial + a Lua classify function",
    policy = nres.policy { base = "trivial", classify = lua_classify } },
  { name = "raw-retry-twice", what = "fn until it succeeds (3 calls)", run = function(k)
      for i = 1, k do
        local r = fail_twice(i)
        while r == nil do r = fail_twice(i) end
      end
    end, retry = true },
  { name = "retry-twice", what = "trivial, fails twice then OK", policy = nres.policy("trivial"),
    fn = fail_twice, retry = true },
}

for _, arm in ipairs(arms) do
  if arm.policy then
    local p, fn = arm.policy, arm.fn or work
    arm.run = function(k)
      for i = 1, k do
        if p:run(fn, i) == nil then error(arm.name .. ": call failed") end
      end
    end
  end
  arm.ns, arm.over, arm.garbage = {}, {}, 0
end

-- Warm-up: compile every loop before measuring.
for _, arm in ipairs(arms) do arm.run(math.max(1, math.floor(calls / 10))) end

for r = 1, reps do
  for _, arm in ipairs(arms) do
    n = 0
    collectgarbage("collect")
    collectgarbage("stop")
    local kb0 = collectgarbage("count")
    local t0 = now()
    arm.run(calls)
    local t1 = now()
    local kb1 = collectgarbage("count")
    collectgarbage("restart")
    arm.ns[r] = (t1 - t0) / calls
    arm.garbage = arm.garbage + (kb1 - kb0) * 1024
  end
  for _, arm in ipairs(arms) do
    local base = arm.retry and arms[6] or arms[1]
    arm.over[r] = arm.ns[r] - base.ns[r]
  end
end

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  local m = #c
  return m % 2 == 1 and c[(m + 1) / 2] or (c[m / 2] + c[m / 2 + 1]) / 2
end

print("| arm | what | ns/call (median) | min-max | overhead ns (median) | Lua garbage B/call |")
print("|---|---|---|---|---|---|")
for _, arm in ipairs(arms) do
  local lo, hi = math.huge, 0
  for _, v in ipairs(arm.ns) do lo = math.min(lo, v); hi = math.max(hi, v) end
  print(string.format("| %s | %s | %.1f | %.1f-%.1f | %+.1f | %.3f |", arm.name, arm.what,
    median(arm.ns), lo, hi, median(arm.over), arm.garbage / (calls * reps)))
end
print(string.format("\n%d repetitions x %d calls per arm, interleaved; %s; sink %d", reps, calls,
  jit and jit.version or "no JIT", sink % 7))

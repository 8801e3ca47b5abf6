-- SPDX-License-Identifier: MIT
-- bench/lua/run_cost.lua - what p:run costs over calling fn directly.
--
--   LUA_PATH="lua/?.lua;;" NRES_LIB=build/libnres.so luajit bench/lua/run_cost.lua
--   ARM=default CALLS=100000 luajit bench/lua/run_cost.lua   one arm, quiet
--                                      (what bench/lua/callgrind.sh counts)
--
-- Arms are measured interleaved, repetition by repetition, each against the
-- raw call of the same repetition: ns/call (median, min-max) of thread CPU
-- time (CLOCK_THREAD_CPUTIME_ID, so time the shared machine gives to others
-- is not counted; the CPU's own speed still moves), the overhead, the
-- ratio to raw, and Lua garbage per call (collectgarbage("count") around
-- the calls with the collector stopped, after a warm-up so the loops are
-- compiled). Reported, never asserted (spec/lua/garbage_spec.lua asserts
-- the garbage). With `-jv` in LUAJIT's arguments (see bench/README.md) the
-- JIT reports every trace and any abort or NYI.
local ffi = require "ffi"
local nres = require "nres"

ffi.cdef [[
struct nres_bench_timespec { long tv_sec, tv_nsec; };
int clock_gettime(int clk, struct nres_bench_timespec *ts);
]]
local ts = ffi.new("struct nres_bench_timespec")
local CLOCK_THREAD_CPUTIME_ID = 3
local function cpu_ns()
  ffi.C.clock_gettime(CLOCK_THREAD_CPUTIME_ID, ts)
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

local calls = tonumber(os.getenv("CALLS")) or 1000000
local reps = tonumber(os.getenv("REPS")) or 7
local only = os.getenv("ARM")

local sink = 0
local function work(x) sink = sink + x; return x end

local n = 0
local function fail_twice(x)
  n = n + 1
  if n % 3 ~= 0 then return nil, "transient" end
  sink = sink + x
  return x
end

local function every4(x)
  if x % 4 == 0 then return nil, "down" end
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
  { name = "raw-retry-twice", what = "fn until it succeeds (3 calls)", against = "raw-retry-twice", run = function(k)
      for i = 1, k do
        local r = fail_twice(i)
        while r == nil do r = fail_twice(i) end
      end
    end },
  { name = "retry-twice", what = "trivial, fails twice then OK", policy = nres.policy("trivial"),
    fn = fail_twice, against = "raw-retry-twice" },
  { name = "raw-fail-1in4", what = "fn(i), every 4th returns nil, err", against = "raw-fail-1in4", run = function(k)
      for i = 1, k do every4(i) end end },
  { name = "passthrough-fail-1in4", what = 'preset "none", every 4th fails (nil, reason, info)',
    policy = nres.policy("none"), fn = every4, against = "raw-fail-1in4", failing = true },
}

local by_name = {}
for _, arm in ipairs(arms) do
  by_name[arm.name] = arm
  if arm.policy then
    local p, fn = arm.policy, arm.fn or work
    if arm.failing then
      arm.run = function(k)
        for i = 1, k do
          local r, reason, info = p:run(fn, i)
          if r == nil and info.attempts ~= 1 then error(arm.name .. ": " .. tostring(reason)) end
        end
      end
    else
      arm.run = function(k)
        for i = 1, k do
          if p:run(fn, i) == nil then error(arm.name .. ": call failed") end
        end
      end
    end
  end
  arm.ns, arm.over, arm.garbage = {}, {}, 0
end

-- One arm, quiet: a fixed warm-up (the same whatever CALLS is, so a count
-- over CALLS and 2 x CALLS differs by the calls alone), then CALLS calls.
if only then
  local arm = by_name[only]
  if not arm then error("ARM: no arm named " .. only) end
  arm.run(20000)
  arm.run(calls)
  return
end

-- Warm-up: compile every loop before measuring.
for _, arm in ipairs(arms) do arm.run(math.max(20000, math.floor(calls / 10))) end

for r = 1, reps do
  for _, arm in ipairs(arms) do
    n = 0
    collectgarbage("collect")
    collectgarbage("stop")
    local kb0 = collectgarbage("count")
    local t0 = cpu_ns()
    arm.run(calls)
    local t1 = cpu_ns()
    local kb1 = collectgarbage("count")
    collectgarbage("restart")
    arm.ns[r] = (t1 - t0) / calls
    arm.garbage = arm.garbage + (kb1 - kb0) * 1024
  end
  for _, arm in ipairs(arms) do
    local base = by_name[arm.against or "raw"]
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

print("| arm | what | ns/call (median) | min-max | overhead ns (median) | over-range | ratio to its raw | Lua garbage B/call |")
print("|---|---|---|---|---|---|---|---|")
for _, arm in ipairs(arms) do
  local lo, hi, olo, ohi = math.huge, 0, math.huge, -math.huge
  for r, v in ipairs(arm.ns) do
    lo, hi = math.min(lo, v), math.max(hi, v)
    olo, ohi = math.min(olo, arm.over[r]), math.max(ohi, arm.over[r])
  end
  local base = by_name[arm.against or "raw"]
  print(string.format("| %s | %s | %.1f | %.1f-%.1f | %+.1f | %+.1f..%+.1f | %.1f | %.3f |", arm.name, arm.what,
    median(arm.ns), lo, hi, median(arm.over), olo, ohi, median(arm.ns) / median(base.ns),
    arm.garbage / (calls * reps)))
end
print(string.format("\n%d repetitions x %d calls per arm, interleaved; thread CPU time; %s; sink %d",
  reps, calls, jit and jit.version or "no JIT", sink % 7))

-- SPDX-License-Identifier: MIT
-- nres.driver: where a Lua driver gets the time and how it waits.
--
-- A driver is a table { name, now = function() -> ns, sleep = function(ns) }.
-- runtime_clock = true says `now` is the runtime's own clock (nres_step_now):
-- p:run then lets C read it where it needs the time (no FFI call for it).
-- The decisions are the same C state machine whatever the driver; only the
-- clock and the wait differ:
--   blocking  plain LuaJIT: the runtime's monotonic clock, a blocking sleep;
--   nginx     the same clock, ngx.sleep (yields: never blocks the worker);
--   virtual   a clock that moves only when someone sleeps: tests and the
--             simulator, deterministic and instant.
local _M = { _VERSION = "0.1.0" }

local C = require("nres.cdef").C

_M.blocking = { name = "blocking", now = C.nres_step_now, sleep = C.nres_step_sleep,
                runtime_clock = true }

if type(ngx) == "table" and type(ngx.sleep) == "function" then
  local ngx_sleep = ngx.sleep
  _M.nginx = {
    name = "nginx",
    now = C.nres_step_now,
    runtime_clock = true,
    -- ngx.sleep has millisecond resolution; 0 would spin: round up.
    sleep = function(ns) if ns > 0 then ngx_sleep(math.ceil(ns / 1e6) / 1e3) end end,
  }
  -- Hedging (nres.run): attempts are light threads. A thread returns its
  -- arg; wait_any waits on the attempts and, for a deadline, one sleeper
  -- thread, killed afterwards; kill kills a loser (its cosocket is closed
  -- with it).
  local thread, now_ns = ngx.thread, C.nres_step_now
  local function body(fn, arg) fn(arg) return arg end
  local function sleeper(until_ns)
    local left = until_ns - now_ns()
    if left > 0 then ngx_sleep(math.ceil(left / 1e6) / 1e3) end
    return false
  end
  if type(thread) == "table" then
    local spawn, wait, kill = thread.spawn, thread.wait, thread.kill
    _M.nginx.spawn = function(fn, arg) return spawn(body, fn, arg) end
    _M.nginx.wait_any = function(tasks, n, until_ns)
      local s = until_ns >= 0 and spawn(sleeper, until_ns) or nil
      local args = { tasks[1], tasks[2], tasks[3], tasks[4] }
      local m = n
      if s ~= nil then m = n + 1; args[m] = s end
      local ok, got = wait(unpack(args, 1, m))
      if s ~= nil and got ~= false then kill(s) end
      if not ok then error(got, 0) end
      return got or nil
    end
    _M.nginx.kill = function(t) kill(t) end
  end
end

-- A virtual clock starting at `start` ns (default 1 s).
function _M.virtual(start)
  local d = { name = "virtual", t = start or 1e9 }
  d.now = function() return d.t end
  d.sleep = function(ns) if ns > 0 then d.t = d.t + ns end end
  d.advance = d.sleep
  return d
end

-- The driver a policy gets unless told otherwise.
function _M.default()
  return _M.nginx or _M.blocking
end

-- Check a user-supplied driver.
function _M.check(d)
  if type(d) ~= "table" or type(d.now) ~= "function" and type(d.now) ~= "cdata"
     or type(d.sleep) ~= "function" and type(d.sleep) ~= "cdata" then
    return nil, "expected a driver table { now = function() -> ns, sleep = function(ns) }"
  end
  -- p:run lets C read its own clock on such a driver and never asks `now`:
  -- on any other clock the call's times and the driver's waits would mix
  -- two clocks (a virtual driver slept for hours of its own time).
  local rc = d.runtime_clock
  if rc ~= nil and rc ~= false and rc ~= true then
    return nil, "runtime_clock: expected true, false or nil, got "
                .. (type(rc) == "string" and string.format("%q", rc) or tostring(rc))
  end
  if rc and d.now ~= C.nres_step_now then
    return nil, "runtime_clock: true needs now = the runtime's clock (nres.driver.blocking.now);"
                .. " this driver's now is another function: drop runtime_clock"
  end
  return d
end

return _M

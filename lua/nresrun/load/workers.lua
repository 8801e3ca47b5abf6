-- SPDX-License-Identifier: MIT
-- nresrun.load.workers: the closed loop - N worker coroutines on the cell's
-- thread, each calling back to back until the window ends.
--
--   load = { workers = { 1, "cores", "8x" } }     -- a count, the cores, N x the cores
--
-- The loop itself (closed_loop) is also the threads kind's, per thread.
local floor = math.floor
local co_yield = coroutine.yield

local _M = { name = "workers", loop = "closed", what = "closed loop",
             expected = 'a count, "cores" or "Nx"', result = { "workers" } }

local MAX = 100000

local function count(v) return type(v) == "number" and v >= 1 and v == floor(v) and v < 1e9 end

function _M.cores()
  local f = io.open("/proc/cpuinfo", "r")
  local n = 0
  if f then
    for line in f:lines() do if line:match("^processor%s*:") then n = n + 1 end end
    f:close()
  end
  return n > 0 and n or 1
end

-- workers: 4, "cores", "8x" (8 x cores); nil when not one of those.
function _M.resolve(v)
  if count(v) then return v end
  if v == "cores" then return _M.cores() end
  if type(v) == "string" then
    local k = tonumber(v:match("^(%d+)x$"))
    if k and k >= 1 then return k * _M.cores() end
  end
  return nil
end

function _M.check(v) return _M.resolve(v) ~= nil end

function _M.values(load)
  local v = load.workers
  if type(v) == "table" and v[1] ~= nil then return v end
  return { v }
end

function _M.fields(cell, v) cell.workers = _M.resolve(v) end

function _M.fit(cell)
  if cell.workers > MAX then
    return string.format("%s: %d workers cannot fit this machine (at most %d coroutines)", cell.key, cell.workers, MAX)
  end
  return nil
end

function _M.peer(cell, spec) spec.workers = cell.workers return spec end

-- `workers` coroutines on scheduler `s` calling op back to back until
-- stop_at, each outcome to record(started, ended, ok, reason).
function _M.closed_loop(s, workers, op, record, stop_at)
  local now = s.now
  local function worker()
    local n = 0
    while true do
      local t = now()
      if t >= stop_at then return end
      local ok, reason = op(n)
      record(t, now(), ok, reason)
      n = n + 1
      if workers > 1 and n % 64 == 0 then co_yield(now()) end
    end
  end
  for _ = 1, workers do s:spawn(worker) end
  s:run_until(stop_at + 10e9)   -- let the calls in flight finish
end

function _M.run(cell, seed, kit, srv)
  return kit.run_cell(cell, seed, srv, function(x)
    _M.closed_loop(x.s, cell.workers, x.op, x.tally.record, x.stop_at)
  end)
end

return _M

-- SPDX-License-Identifier: MIT
-- nresrun.load.open_rate: the open loop - arrivals at a fixed rate.
--
--   load = { open_rate = { 20000, 100000 } }      -- operations per second
--
-- A pacer starts each arrival on schedule (a reused worker each); latency
-- counts from the scheduled time (no coordinated omission), and the
-- pacer's lag is measured: an arrival started more than 1 ms late is
-- missed, one with no worker left (max_inflight) is shed. Calls still in
-- flight after the grace are counted as failed ("unfinished").
local C = require("nres.cdef").C

local huge = math.huge

local _M = { name = "open_rate", loop = "open", what = "open loop",
             expected = "operations per second (> 0)", result = { "rate" } }

local MISSED_NS = 1e6
local MAX = 2000000

function _M.check(v) return type(v) == "number" and v == v and v > 0 and v < huge end

function _M.values(load)
  local v = load.open_rate
  if type(v) == "table" and v[1] ~= nil then return v end
  return { v }
end

function _M.fields(cell, v) cell.rate = v end

function _M.fit(cell)
  if cell.rate > MAX then
    return string.format("%s: an open rate of %g/s cannot be paced on this machine (at most 2,000,000/s)", cell.key, cell.rate)
  end
  return nil
end

function _M.peer(cell, spec) spec.rate = cell.rate return spec end

-- The pacer, on the cell's scheduler (x: see nresrun.cell's run_cell).
local function drive(x)
  local s, op, tally, cell = x.s, x.op, x.tally, x.cell
  local now, t0, measure_at, stop_at = s.now, x.t0, x.measure_at, x.stop_at
  local m, record = tally.m, tally.record
  local interval = 1e9 / cell.rate
  local workers = s:workers(function(scheduled, n)
    local ok, reason = op(n)
    record(scheduled, now(), ok, reason)
  end, cell.max_inflight)
  local i, spin_ns = 0, 200e3
  while true do
    local t = now()
    local due_at = t0 + i * interval
    if due_at >= stop_at then break end
    if due_at <= t then
      local lag = t - due_at
      if due_at >= measure_at then
        if lag > MISSED_NS then m.missed = m.missed + 1 end
        if lag > m.lag_max then m.lag_max = lag end
        m.lag_sum = m.lag_sum + lag
      end
      if not workers.start(due_at, i) and due_at >= measure_at then tally.shed() end
      i = i + 1
    else
      -- Nothing due: run due timers, else wait (spin when close); with
      -- requests in flight, the wait runs the event loop.
      local next_timer = s.n > 0 and s.at[1] or huge
      if next_timer <= t then
        s:run_due(t)
      else
        local wake = next_timer < due_at and next_timer or due_at
        local wait = wake - t > spin_ns and wake - t - spin_ns / 2 or 0
        if not s:wait_io(wait) and wait > 0 then C.nres_step_sleep(wait) end
      end
    end
  end
  s:run_until(stop_at + 10e9)
  local inflight = workers.busy()
  m.unfinished = inflight
  if inflight > 0 then
    m.failures = m.failures + inflight
    m.arrivals = m.arrivals + inflight
    tally.failed_by.unfinished = inflight
  end
end

function _M.run(cell, seed, kit, srv)
  return kit.run_cell(cell, seed, srv, drive)
end

return _M

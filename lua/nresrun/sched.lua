-- SPDX-License-Identifier: MIT
-- nresrun.sched: a coroutine scheduler for nresrun's cells, and its driver.
--
-- Workers are coroutines on one thread. A worker that waits (a policy's
-- backoff, a dependency's latency) yields its wake-up time; the scheduler
-- keeps them in a binary heap and, when nothing is due, sleeps the thread
-- until the next one. The driver it hands to policies (now, sleep) makes
-- every wait a yield, so one thread carries many calls in flight, as an
-- event loop would. Coroutines are reused: nothing is allocated per call
-- (hedged calls' tasks and timers too, below).
-- On a virtual clock (new{ virtual = true }) nothing sleeps: run_until
-- jumps the clock to the next wake-up, so simulated minutes take
-- milliseconds and a seed reproduces the run exactly.
--
-- I/O (nresrun.http): a worker waiting for a request yields a non-number, so
-- it is in no heap; the I/O source (set_io) counts such waiters and, where
-- the scheduler would sleep the thread, runs the event loop instead, up to
-- the next timer, then resumes the waiters whose requests finished (with
-- _M.resume, on the scheduler they yielded under: `current`). C never
-- calls Lua. While timers keep being due, the loop is still polled every
-- 64 steps, so I/O is never starved.
local nres_driver = require "nres.driver"

local co_create, co_resume, co_yield, co_status, co_running =
  coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running
local floor = math.floor

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

-- The I/O source (nil, or { waiting = n, poll = function(s, timeout_ns) }):
-- one per process, as the event loop is.
local io_src = nil
function _M.set_io(src) io_src = src end

-- The scheduler whose worker runs now (nil outside any).
local current = nil
function _M.current() return current end

local now = nres_driver.blocking.now
local real_sleep = nres_driver.blocking.sleep

local add_tasks   -- below: spawn, wait_any and kill for the driver

-- opts.virtual: a virtual clock starting at opts.start ns (default 1 s).
function _M.new(opts)
  local s = setmetatable({ at = {}, co = {}, n = 0 }, mt)
  if opts and opts.virtual then
    local t = opts.start or 1e9
    s.virtual = true
    s.now = function() return t end
    -- Jump the clock (forward only); used by run_until instead of sleeping.
    s.advance_to = function(at) if at > t then t = at end end
    s.sleep_thread = s.advance_to
  else
    s.now = now
    s.sleep_thread = function(ns_until) real_sleep(ns_until - now()) end
  end
  local clock = s.now
  -- The driver policies get: waits yield to this scheduler.
  s.driver = {
    name = s.virtual and "sched-virtual" or "sched",
    now = clock,
    sleep = function(ns) if ns > 0 then co_yield(clock() + ns) end end,
  }
  add_tasks(s)
  return s
end

local function push(s, at, co)
  local n = s.n + 1
  s.n = n
  local A, Co = s.at, s.co
  while n > 1 do
    local parent = floor(n / 2)
    if A[parent] <= at then break end
    A[n], Co[n] = A[parent], Co[parent]
    n = parent
  end
  A[n], Co[n] = at, co
end

local function pop(s)
  local A, Co = s.at, s.co
  local top_at, top_co = A[1], Co[1]
  local n = s.n
  local last_at, last_co = A[n], Co[n]
  A[n], Co[n] = nil, nil
  n = n - 1
  s.n = n
  local i = 1
  while true do
    local l = i * 2
    if l > n then break end
    local r = l + 1
    local c = (r <= n and A[r] < A[l]) and r or l
    if A[c] >= last_at then break end
    A[i], Co[i] = A[c], Co[c]
    i = c
  end
  if n > 0 then A[i], Co[i] = last_at, last_co end
  return top_at, top_co
end

-- Resume co; if it yields a time, it sleeps until then.
local function step(s, co, ...)
  local dead = s.dead
  if dead ~= nil and dead[co] then return nil end   -- a killed task: dropped
  local prev = current
  current = s
  local ok, at = co_resume(co, ...)
  current = prev
  if not ok then error(at, 0) end
  if type(at) == "number" and co_status(co) == "suspended" then
    push(s, at, co)
  end
  return at
end
_M.resume = step

-- Side-by-side tasks, what nres.run needs to hedge (driver.spawn,
-- driver.wait_any, driver.kill). A task is a coroutine on this scheduler
-- running fn(arg). A worker in wait_any parks by yielding a non-number (so
-- it is in no heap) and is resumed by the first of its tasks to end, or by
-- a timer at the wait's end. kill marks a task dead: the scheduler drops it
-- the next time it would resume it (its timer or its I/O completion), so a
-- loser stops where it waits and its coroutine is collected. Tasks that
-- end and timers that fire go back to the scheduler's pools and are
-- reused: a hedged call allocates only when a loser is killed (its
-- coroutine cannot be reused) or more run at once than ever before. A wait
-- is known by a number (its token), and a timer that fires after its wait
-- was answered finds another token and does nothing.
local PARKED, IDLE = "parked", "idle"
local function task_body(s, t, fn, arg)
  while true do
    fn(arg)
    t.done = true
    local w = t.waiter
    if w ~= nil and s.parked[w] == t.token then
      s.parked[w] = nil
      step(s, w)
    end
    local n = s.ntasks + 1
    s.ntasks, s.tasks[n] = n, t
    fn, arg = co_yield(IDLE)
  end
end
local function timer_body(s, tm, me, token, at)
  while true do
    co_yield(at)
    if s.parked[me] == token then
      s.parked[me] = nil
      step(s, me)
    end
    local n = s.ntimers + 1
    s.ntimers, s.timers[n] = n, tm
    me, token, at = co_yield(IDLE)
  end
end
add_tasks = function(s)
  s.dead = setmetatable({}, { __mode = "k" })
  s.parked = setmetatable({}, { __mode = "k" })
  s.tasks, s.ntasks, s.timers, s.ntimers, s.token = {}, 0, {}, 0, 0
  local d, clock = s.driver, s.now
  d.spawn = function(fn, arg)
    local n, t = s.ntasks, nil
    if n > 0 then
      t = s.tasks[n]
      s.tasks[n], s.ntasks = nil, n - 1
      t.done, t.arg, t.waiter, t.token = false, arg, nil, nil
      step(s, t.co, fn, arg)
    else
      t = { co = co_create(task_body), done = false, arg = arg, waiter = false, token = false }
      t.waiter, t.token = nil, nil
      step(s, t.co, s, t, fn, arg)
    end
    return t
  end
  -- The arg of an ended task among tasks[1..n], or nil once until_ns (ns,
  -- -1 = none) has come.
  d.wait_any = function(tasks, n, until_ns)
    for i = 1, n do if tasks[i].done then return tasks[i].arg end end
    if until_ns >= 0 and until_ns <= clock() then return nil end
    local me = coroutine.running()
    local token = s.token + 1
    s.token = token
    s.parked[me] = token
    for i = 1, n do tasks[i].waiter, tasks[i].token = me, token end
    if until_ns >= 0 then
      local m = s.ntimers
      if m > 0 then
        local tm = s.timers[m]
        s.timers[m], s.ntimers = nil, m - 1
        step(s, tm.co, me, token, until_ns)
      else
        local tm = { co = co_create(timer_body) }
        step(s, tm.co, s, tm, me, token, until_ns)
      end
    end
    co_yield(PARKED)
    s.parked[me] = nil
    for i = 1, n do tasks[i].waiter = nil end
    for i = 1, n do if tasks[i].done then return tasks[i].arg end end
    return nil
  end
  d.kill = function(t)
    if not t.done then s.dead[t.co] = true end
  end
end

-- Start fn(...) as a worker; it runs until its first wait.
function _M.spawn(s, fn, ...)
  local co = co_create(fn)
  step(s, co, ...)
  return co
end

-- Reusable workers for an open loop: start(a, b) runs job(a, b) on an idle
-- worker, or on a new one while fewer than `max` are busy, and returns
-- true; false when `max` are busy. A worker parks itself when its job
-- ends (it yields a non-number, so the scheduler forgets it) until start
-- hands it the next one: nothing is allocated per job once the workers
-- exist. busy() counts the workers running a job.
function _M.workers(s, job, max)
  local idle, nidle, busy = {}, 0, 0
  local function worker(a, b)
    local self = co_running()
    while true do
      job(a, b)
      busy = busy - 1
      nidle = nidle + 1
      idle[nidle] = self
      a, b = co_yield("idle")
    end
  end
  local set = {}
  function set.start(a, b)
    if nidle > 0 then
      local co = idle[nidle]
      idle[nidle] = nil
      nidle = nidle - 1
      busy = busy + 1
      step(s, co, a, b)
    elseif busy < max then
      busy = busy + 1
      step(s, co_create(worker), a, b)
    else
      return false
    end
    return true
  end
  function set.busy() return busy end
  return set
end

-- Run due workers until `deadline` (ns); sleeps the thread while nothing
-- is due. Returns when the deadline passes or no worker is waiting.
-- Workers waiting for I/O count as waiting (not on a virtual clock).
function _M.run_until(s, deadline)
  local clock, sleep_thread = s.now, s.sleep_thread
  local io = not s.virtual and io_src or nil
  local turns = 0
  while s.n > 0 or (io and io.waiting > 0) do
    local t = clock()
    if t >= deadline then return end
    local next_at = s.n > 0 and s.at[1] or deadline
    if next_at > t then
      local wake = next_at < deadline and next_at or deadline
      if io and io.waiting > 0 then
        io.poll(s, wake - t)
      else
        sleep_thread(wake)
      end
    else
      local _, co = pop(s)
      step(s, co)
      if io and io.waiting > 0 then
        turns = turns + 1
        if turns >= 64 then
          turns = 0
          io.poll(s, 0)
        end
      end
    end
  end
end

-- Run every worker whose wake-up time is at or before t, without waiting
-- (finished I/O first).
function _M.run_due(s, t)
  local io = not s.virtual and io_src or nil
  if io and io.waiting > 0 then io.poll(s, 0) end
  while s.n > 0 and s.at[1] <= t do
    local _, co = pop(s)
    step(s, co)
  end
end

-- Wait for I/O at most ns (under 1 ms: only poll). false when no worker
-- waits for I/O (the caller sleeps its own way).
function _M.wait_io(s, ns)
  local io = not s.virtual and io_src or nil
  if not (io and io.waiting > 0) then return false end
  io.poll(s, ns)
  return true
end

function _M.waiting(s)
  local io = not s.virtual and io_src or nil
  return s.n + (io and io.waiting or 0)
end

return _M

-- SPDX-License-Identifier: MIT
-- nresrun.pool: blocking work on the work pool, awaited from nresrun's worker
-- coroutines.
--
--   local ok, worker = nresrun.pool.run("sleep", 10e6)   -- 10 ms on a pool thread
--   -- ok true and the worker's index; or nil, status ("error", "canceled"),
--   -- the job's error name
--   local n_ok, n = nresrun.pool.run_all{ { "spin", 1e5 }, { "sleep", 1e6 } }
--
-- Only inside nresrun built with the pool and http components: the pool
-- belongs to the cells' event loop (runtime/src/nresrun/loop.c), made on first
-- use with $NRES_THREADS threads, else one per core (or nresrun.pool.init{
-- threads = n } first). The jobs are built-in C jobs - "sleep" and "spin"
-- (a busy loop) for arg nanoseconds - so Lua only declares the work; C
-- never calls Lua. A finished job comes back through the pool's one
-- uv_async_t to the loop, and its id (negative) to the ring the HTTP
-- requests use (nresrun.http.share_loop): the scheduler drains both where it
-- would sleep and resumes the coroutine waiting on the job.
--
-- From a worker coroutine of nresrun.sched a job yields until it ends; on the
-- main thread it blocks, running the loop. Job slots are C records reused
-- from a free list and run returns plain values, so a steady load
-- allocates nothing (run_all builds one table of ids per call).
local ffi = require "ffi"
local host = require "nresrun.host"
local http = require "nresrun.http"
local schema = require "nres.schema"

local C = ffi.C
local type, error, tostring = type, error, tostring
local ffi_string = ffi.string

local _M = { _VERSION = "0.1.0" }

_M.available = host.pool_available == true

local KINDS = { sleep = 1, spin = 2 }
local ARG_MAX = 3600e9
local STATUS = { [0] = "pending", "ok", "error", "timeout", "canceled" }
local OK = 1

local slots = {}                 -- id (< 0) -> nres_host_job_t *
local free, nfree = {}, 0        -- ids of idle slots
local ready = false
local stats_buf = nil

local err_name = require("nres.cdef").err_name
local function errname(rc)
  if rc == 0 then return nil end
  return err_name(rc)
end

-- Told by nresrun.http when the loop closes: every slot is gone.
local user = {}
function user.closed()
  slots, free, nfree = {}, {}, 0
  ready = false
end

local function start(threads, max_wait, level)
  if not _M.available then
    error("nresrun.pool: only inside nresrun built with the pool and http components", level + 1)
  end
  http.share_loop(user, level + 1)
  local rc = C.nres_host_pool_init(threads, max_wait)
  if rc ~= 0 then
    if errname(rc) == "ESTATE" then
      error("nresrun.pool.init: the pool already runs with another threads or max_wait", level + 1)
    end
    error("nresrun.pool: cannot start the pool (" .. errname(rc) .. ")", level + 1)
  end
  ready = true
end

-- nresrun.pool.init{ threads = n, max_wait = s }: start the pool now with n
-- threads (1 to 1024; default $NRES_THREADS, else the cores) and, with
-- max_wait (seconds), admission by expected wait: a job the pool expects
-- to wait longer than that is refused (run returns nil, "error",
-- "ELIMITED"). Again with the same settings (or none) does nothing; others
-- while it runs are an error.
function _M.init(t)
  if t ~= nil and type(t) ~= "table" then
    error("bad argument #1 to 'init' (table expected, got " .. type(t) .. ")", 2)
  end
  local threads = t and t.threads or 0
  local max_wait = t and t.max_wait or 0
  for k in pairs(t or {}) do
    if k ~= "threads" and k ~= "max_wait" then
      error("nresrun.pool.init: " .. tostring(k) .. ": unknown field (threads, max_wait)", 2)
    end
  end
  if type(max_wait) ~= "number" or not (max_wait >= 0 and max_wait <= 3600) then
    error("nresrun.pool.init: max_wait: expected seconds from 0 to 3600, got "
          .. schema.describe(t.max_wait), 2)
  end
  if t and t.threads ~= nil and (type(threads) ~= "number" or threads % 1 ~= 0
                                 or threads < 1 or threads > 1024) then
    error("nresrun.pool.init: threads: expected an integer from 1 to 1024, got "
          .. schema.describe(t.threads), 2)
  end
  start(threads, max_wait * 1e9, 2)
end

local function check(kind, ns, fname, level)
  local k = KINDS[kind]
  if not k then
    error("nresrun.pool." .. fname .. ": kind: expected \"sleep\" or \"spin\", got "
          .. schema.describe(kind), level + 1)
  end
  if type(ns) ~= "number" or not (ns >= 0 and ns <= ARG_MAX) then
    error("nresrun.pool." .. fname .. ": ns: expected nanoseconds from 0 to 3600e9, got "
          .. schema.describe(ns), level + 1)
  end
  return k
end

-- Take a slot and submit; the id, or nil, error name.
local function submit(k, ns)
  local id
  if nfree > 0 then
    id = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
  else
    local slot = C.nres_host_job_new()
    if slot == nil then return nil, "too many jobs in flight" end
    id = slot.id
    slots[id] = slot
  end
  local rc = C.nres_host_job_start(slots[id], k, ns)
  if rc ~= 0 then
    nfree = nfree + 1
    free[nfree] = id
    return nil, errname(rc)
  end
  return id
end

-- The outcome of a finished job; its slot goes back to the free list.
local function outcome(id)
  local slot = slots[id]
  local status, result, worker = slot.status, slot.result, slot.worker
  nfree = nfree + 1
  free[nfree] = id
  if status == OK then return true, worker end
  return nil, STATUS[status] or "unknown", errname(result)
end

-- Wait for job `id` on the shared loop (nresrun.http.await).
local function await(id, fname)
  http.await(id, "nresrun.pool." .. fname, 3)
end

-- nresrun.pool.run(kind, ns): run one built-in job on the pool and wait for
-- it. true, worker index; or nil, status, error name.
function _M.run(kind, ns)
  local k = check(kind, ns, "run", 2)
  if not ready then start(0, 0, 2) end
  local id, err = submit(k, ns)
  if not id then return nil, "error", err end
  await(id, "run")
  return outcome(id)
end

-- nresrun.pool.run_all{ { kind, ns }, ... }: fan the jobs out at once, wait
-- for all of them. Returns how many succeeded and how many ran; a job
-- that could not be submitted counts as a failure.
function _M.run_all(list)
  if type(list) ~= "table" then
    error("bad argument #1 to 'run_all' (table expected, got " .. type(list) .. ")", 2)
  end
  local n = #list
  for i = 1, n do
    local job = list[i]
    if type(job) ~= "table" then
      error("nresrun.pool.run_all: [" .. i .. "]: expected { kind, ns }, got " .. schema.describe(job), 2)
    end
    check(job[1], job[2], "run_all[" .. i .. "]", 2)
  end
  if not ready then start(0, 0, 2) end
  -- Submit all first (they run meanwhile), then wait for each in turn:
  -- waiting on one that already ended costs no yield of note.
  local ok, ids = 0, {}
  for i = 1, n do
    local id = submit(KINDS[list[i][1]], list[i][2])
    ids[i] = id or false
  end
  for i = 1, n do
    local id = ids[i]
    if id then
      await(id, "run_all")
      if outcome(id) then ok = ok + 1 end
    end
  end
  return ok, n
end

-- { threads, submitted, executed, max_running (most jobs running at once),
-- slots (job records made), in_flight }; nil before the pool started.
function _M.stats()
  if not ready then return nil end
  stats_buf = stats_buf or ffi.new("double[6]")
  C.nres_host_pool_stats(stats_buf)
  return { threads = stats_buf[0], submitted = stats_buf[1], executed = stats_buf[2],
           max_running = stats_buf[3], slots = stats_buf[4], in_flight = stats_buf[5] }
end

return _M

-- SPDX-License-Identifier: MIT
-- nresrun.http: HTTP requests from nresrun's worker coroutines, on the C client.
--
--   local res, err = nresrun.http.request{ url = "http://127.0.0.1:8080/echo",
--                                       method = "GET", policy = "http" }
--   -- res = { status = 200, body_length = 3, attempts = 1 }; err e.g.
--   -- "attempts exhausted" (res nil; the last status code third)
--
-- Only inside nresrun (built with the http component): the requests run on
-- the cell's libuv loop (runtime/src/nresrun/loop.c) under the C client
-- (nres/http.h), which runs the policy's C part - attempts, timeouts,
-- backoff, breaker and budget per host, the HTTP classifier. Lua-only parts
-- of a policy (admit, on_event, fallback, a Lua classify table) cannot run
-- there: such a policy is refused.
--
-- From a worker coroutine of nresrun.sched (a scenario's workers), a request
-- yields until it ends: the scheduler runs the loop where it would sleep
-- and resumes the coroutine. Elsewhere (the main thread) it blocks, running
-- the loop until its own request ends. Request slots are C objects reused
-- from a free list and `fetch` returns plain values, so a steady load
-- allocates nothing; `request` builds its result table (one per call).
--
-- Also here: the dependency server as a child process (serve), for the
-- http cells (nresrun.dep.http).
local ffi = require "ffi"
local host = require "nresrun.host"
local sched = require "nresrun.sched"
local policy_mod = require "nres.policy"
local run = require "nres.run"
local schema = require "nres.schema"

local C = ffi.C
local co_running, co_yield = coroutine.running, coroutine.yield
local type, error, format, tonumber = type, error, string.format, tonumber
local ffi_string = ffi.string

local _M = { _VERSION = "0.1.0" }

_M.available = host.http_available == true

local reasons = run.reasons
local IDEMPOTENT = 1
_M.IDEMPOTENT = IDEMPOTENT
local TAKE = 1024

local slots = {}                 -- id -> nres_host_http_t * (C-owned)
local url_of, method_of = {}, {} -- id -> strings C points at: kept
                                 -- referenced until the request ends
local free, nfree = {}, 0        -- ids of idle slots
local waiter, waiter_sched = {}, {}
local finished = {}              -- id -> true: a blocking request ended
local ids = nil                  -- int32_t[TAKE], made at init
local ready = false

-- The I/O source the scheduler polls (see nresrun.sched).
local io = { waiting = 0 }

local errname = require("nres.cdef").err_name

-- The loop's other user (nresrun.pool): its ids in the ring are negative.
local other = nil   -- { closed = function() }: nresrun.pool

-- Resume every coroutine whose request or job ended; mark blocking ones.
-- Ids are unique across users of the loop (pool jobs are negative).
local function drain()
  local n = C.nres_host_loop_take(ids, TAKE)
  for i = 0, n - 1 do
    local id = ids[i]
    local co = waiter[id]
    if co then
      local s = waiter_sched[id]
      waiter[id], waiter_sched[id] = nil, nil
      io.waiting = io.waiting - 1
      sched.resume(s, co, id)
    else
      finished[id] = true
    end
  end
end

io.poll = function(_, timeout_ns)
  if C.nres_host_loop_run(timeout_ns) > 0 then drain() end
end

local function init(level)
  if not _M.available then
    error("nresrun.http: only inside nresrun built with the http component", level + 1)
  end
  local rc = C.nres_host_loop_init()
  if rc ~= 0 then
    error("nresrun.http: cannot start the event loop (" .. errname(rc) .. ")", level + 1)
  end
  ids = ids or ffi.new("int32_t[?]", TAKE)
  ready = true
  sched.set_io(io)
end

local current_sched = sched.current

-- For nresrun.pool: start the loop (if needed) and share it; `user` hears of
-- close (user.closed).
function _M.share_loop(user, level)
  if not ready then init((level or 1) + 1) end
  other = user
end

-- Wait until the loop reports `id`: yield the worker coroutine, or run the
-- loop on the main thread. An id that already came out of the ring is
-- marked finished: no wait then. `what` names the caller in the error.
local function await(id, what, level)
  if finished[id] then
    finished[id] = nil
    return
  end
  local s = current_sched()
  local co, main = co_running()
  if s and co and not main then
    waiter[id], waiter_sched[id] = co, s
    io.waiting = io.waiting + 1
    local got = co_yield(false)   -- not a time: the scheduler keeps no timer
    if got ~= id then
      error(what .. ": a coroutine waiting on the loop was resumed by something else", level + 1)
    end
  else
    while not finished[id] do
      if C.nres_host_loop_run(1e8) > 0 then drain() end
    end
    finished[id] = nil
  end
end
_M.await = await

local function release(id)
  url_of[id], method_of[id] = nil, nil
  nfree = nfree + 1
  free[nfree] = id
end

-- One request under the built policy cp (an nres_policy_t *). Returns
-- status code, attempts, body length on success; nil, reason, status code,
-- attempts otherwise. No garbage in steady state.
local function fetch(url, method, cp, flags)
  if not ready then init(2) end
  local id
  if nfree > 0 then
    id = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
  else
    local slot = C.nres_host_http_new()
    if slot == nil then return nil, "too many requests in flight", 0, 0 end
    id = slot.id
    slots[id] = slot
  end
  local slot = slots[id]
  url_of[id], method_of[id] = url, method
  local rc = C.nres_host_http_start(slot, url, method, flags or 0, cp)
  if rc ~= 0 then
    release(id)
    return nil, errname(rc), 0, 0
  end
  await(id, "nresrun.http", 2)
  local status, code, attempts = slot.status, slot.status_code, slot.attempts
  local stop, len = slot.stop, slot.resp_len
  release(id)
  if status == 0 then return code, attempts, len end
  return nil, reasons[stop] or errname(status), code, attempts
end
_M.fetch = fetch

-- ------------------------------------------------------------- policies

local presets = {}

-- The C policy of a preset name or a policy object; errors name the field.
local function c_policy(p, level)
  if p == nil then p = "http" end
  if type(p) == "string" then
    local cached = presets[p]
    if cached then return cached.cp, cached end
    local ok, obj = pcall(policy_mod.new, p)
    if not ok then error("nresrun.http: policy: " .. tostring(obj), level + 1) end
    presets[p] = obj
    return obj.cp, obj
  end
  if type(p) ~= "table" or p.cp == nil then
    error("nresrun.http: policy: expected a preset name or nres.policy{...}, got "
          .. schema.describe(p), level + 1)
  end
  for _, k in ipairs { "admit", "on_event", "fallback" } do
    if p[k] then
      error("nresrun.http: policy." .. k .. ": a Lua hook the C client cannot run", level + 1)
    end
  end
  if p.spec and type(p.spec.classify) == "table" then
    error("nresrun.http: policy.classify: the C client classifies HTTP itself", level + 1)
  end
  return p.cp, p
end
_M.c_policy = c_policy

local request_fields = { url = true, method = true, policy = true, idempotent = true }

-- nresrun.http.request{ url, method = "GET", policy = "http", idempotent = false }
function _M.request(t)
  if type(t) ~= "table" then
    error("bad argument #1 to 'request' (table expected, got " .. type(t) .. ")", 2)
  end
  for k in pairs(t) do
    if not request_fields[k] then
      error(format("nresrun.http.request: %s: unknown field (%s)", tostring(k),
                   schema.hint(tostring(k), request_fields)), 2)
    end
  end
  if type(t.url) ~= "string" or not t.url:find("^http://") then
    error("nresrun.http.request: url: expected \"http://host[:port]/path\", got "
          .. schema.describe(t.url), 2)
  end
  if t.method ~= nil and (type(t.method) ~= "string" or not t.method:find("^[%w!#$%%&'*+.^_`|~-]+$")
                          or #t.method > 16) then
    error("nresrun.http.request: method: expected an HTTP method token, got "
          .. schema.describe(t.method), 2)
  end
  if t.idempotent ~= nil and type(t.idempotent) ~= "boolean" then
    error("nresrun.http.request: idempotent: expected a boolean, got " .. schema.describe(t.idempotent), 2)
  end
  local cp = c_policy(t.policy, 2)
  local code, a, b, c = fetch(t.url, t.method or "GET", cp, t.idempotent and IDEMPOTENT or 0)
  if code then return { status = code, attempts = a, body_length = b } end
  if a == "EINVAL" then
    error("nresrun.http.request: the client refused the request (url: host must be an IP "
          .. "literal or localhost; a bad port or header)", 2)
  end
  return nil, a, b, c
end

-- The client's counters: attempts, retries (executor, summed over hosts),
-- requests sent, connections opened.
local counters, client_out
function _M.counters()
  if not ready then return { attempts = 0, retries = 0, sent = 0, connects = 0 } end
  counters = counters or ffi.new("nres_counters_t")
  client_out = client_out or ffi.new("double[4]")
  C.nres_host_http_counters(counters, client_out)
  return { attempts = tonumber(counters.attempts), retries = tonumber(counters.retries),
           sent = client_out[0], connects = client_out[1], reused = client_out[2] }
end

-- Close the loop: every slot; requests still running are canceled and
-- their coroutines never resumed. Returns how many were dropped.
function _M.close()
  if not ready then return 0 end
  local dropped = io.waiting
  C.nres_host_loop_close()
  slots, free, nfree, finished = {}, {}, 0, {}
  url_of, method_of, waiter, waiter_sched = {}, {}, {}, {}
  io.waiting = 0
  ready = false
  if other then other.closed() end
  return dropped
end

-- ------------------------------------------------- the dependency server

local server = {}
local server_mt = { __index = server }

-- Start `nresrun serve --port 0 [--flaky-every N]` as a child process.
-- Returns the server ({ port, pid, base = "http://127.0.0.1:PORT" }) or
-- nil, err. Stop it with :stop() (also done when it is collected).
function _M.serve(opts)
  if not _M.available then return nil, "nresrun.http: only inside nresrun built with the http component" end
  opts = opts or {}
  local argv = { host.exe(), "serve", "--port", "0" }
  if opts.flaky_every then
    argv[#argv + 1] = "--flaky-every"
    argv[#argv + 1] = tostring(opts.flaky_every)
  end
  local cargv = ffi.new("const char *[?]", #argv + 1)
  for i, a in ipairs(argv) do cargv[i - 1] = a end
  local cs = ffi.gc(ffi.new("nres_host_server_t"), C.nres_host_server_stop)
  local rc = C.nres_host_server_start(cargv, opts.timeout or 5, cs)
  if rc ~= 0 then
    ffi.gc(cs, nil)
    return nil, "the dependency server did not start (" .. errname(rc)
                .. "; its stderr is above)"
  end
  return setmetatable({ c = cs, port = cs.port, pid = cs.pid,
                        base = "http://127.0.0.1:" .. cs.port,
                        buf = ffi.new("char[?]", 4096) }, server_mt)
end

-- A control request (blocking, off the loop): status code and body, or
-- nil, err.
function server.get(self, path)
  local code = C.nres_host_http_get(self.port, path, 5, self.buf, 4096)
  if code < 0 then return nil, format("GET %s: errno %d", path, -code) end
  return code, ffi_string(self.buf)
end

-- Requests the server has counted (/stats; /stats and /reset not counted).
function server.requests(self)
  local code, body = self:get("/stats")
  if code ~= 200 then error("the dependency server's /stats failed: " .. tostring(body), 2) end
  return tonumber(body:match('"requests":(%d+)'))
end

function server.reset(self)
  local code, body = self:get("/reset")
  if code ~= 200 then error("the dependency server's /reset failed: " .. tostring(body), 2) end
end

-- Stop it and reap it; true, or nil, err.
function server.stop(self)
  local rc = C.nres_host_server_stop(self.c)
  ffi.gc(self.c, nil)
  if rc ~= 0 then return nil, "the dependency server could not be reaped" end
  return true
end

return _M

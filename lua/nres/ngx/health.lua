-- SPDX-License-Identifier: MIT
-- nres.ngx.health: active health checks of a balancer upstream's peers.
--
--   gw.upstream("backend", { scope = "upstreams", peers = { ... },
--     health = { path = "/health", interval = "2s", timeout = "1s",
--                healthy = 2, unhealthy = 3, statuses = { 200 }, host = "api" } })
--   -- or health = { tcp = true, interval = "2s", ... }: a TCP connect
--
-- One worker of the whole nginx runs an upstream's checks: the holder of
-- its lease (nres_gw_lease_t, a word in the upstream's "health" table in
-- shared memory), which it renews each interval in one CAS. The others
-- look every interval / 4 and take the lease once it has lapsed (lease =
-- 2 x interval), so a killed holder stops the checks for at most a lease
-- and a look. The checks are an ngx.timer.at loop with cosockets, started
-- by gw.init_worker: nothing runs on a request.
--
-- Results feed the peer's breaker in the peers' table, the state passive
-- ejection uses, so the Lua balancer and the nginx module see them alike:
-- `unhealthy` failed checks in a row isolate the breaker (ejected even if
-- no client request goes there) and set the peer's NRES_GW_HEALTH control
-- flag, which says the isolation is the checks', not an operator's;
-- `healthy` passing checks in a row reset it (closed, no client request
-- spent as a probe). A peer ejected passively (open) is left to its
-- breaker until its break is over; then the checks are its half-open
-- probes (a permit taken and reported like a client's: `eject.successes`
-- passes close it, a failure reopens it), so no client request is spent
-- on a peer still down. `unhealthy` failures in a row eject it actively
-- whatever its state. A peer the control API isolated is left alone. Per peer, the counts (runs, last
-- result, checks by result) sit in the health table for /nres/status.
local ffi = require "ffi"
local cdef = require "nres.cdef"
require "nres.cdef.gateway"
local config = require "nres.ngx.config"
local elected = require "nres.ngx.elected"

local C = cdef.C
local type, error, tostring, tonumber, pairs, ipairs, format =
  type, error, tostring, tonumber, pairs, ipairs, string.format
local band, floor, max, min = require("bit").band, math.floor, math.max, math.min
local bad = config.bad

local _M = {}

local HEALTH = 8   -- NRES_GW_HEALTH (nres/gateway.h)
local CLOSED, OPEN, HALF_OPEN, ISOLATED = 0, 1, 2, 3
local RESULTS = { [0] = nil, "ok", "status", "timeout", "error" }
local OK, STATUS, TIMEOUT, ERR = 1, 2, 3, 4
local PEER_SIZE = ffi.sizeof("nres_gw_health_peer_t")
local permit_box = ffi.new("uint32_t[1]")

local FIELDS = { path = true, interval = true, timeout = true, healthy = true,
                 unhealthy = true, statuses = true, host = true, tcp = true }
local FIELD_LIST = "path, interval, timeout, healthy, unhealthy, statuses, host, tcp"

local function count(field, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or v < 1 or v > 255 or v % 1 ~= 0 then
    error(bad("upstream", "health." .. field, "an integer 1..255", v), 0)
  end
  return v
end

-- Validated health settings of table h (gw.upstream's `health`; nil or
-- false: none), before anything of the upstream is made.
function _M.settings(h)
  if h == nil or h == false then return nil end
  if type(h) ~= "table" then error(bad("upstream", "health", "a table", h), 0) end
  for k in pairs(h) do
    if not FIELDS[k] then
      error("nres.ngx.upstream: health." .. tostring(k) .. ": expected one of " .. FIELD_LIST
            .. ", got an unknown field", 0)
    end
  end
  local s = {}
  if h.tcp ~= nil and type(h.tcp) ~= "boolean" then
    error(bad("upstream", "health.tcp", "true (a TCP connect) or false", h.tcp), 0)
  end
  s.tcp = h.tcp == true
  if s.tcp then
    for _, k in ipairs { "path", "statuses", "host" } do
      if h[k] ~= nil then
        error(bad("upstream", "health." .. k, "nil with tcp = true (a connect sends nothing)",
                  h[k]), 0)
      end
    end
  else
    if type(h.path) ~= "string" or h.path:byte(1) ~= 47 or h.path:find("[%s%c]") then
      error(bad("upstream", "health.path", "a path such as \"/health\" (or tcp = true)",
                h.path), 0)
    end
    s.path = h.path
    if h.host ~= nil and (type(h.host) ~= "string" or h.host == "" or h.host:find("[%s%c]")) then
      error(bad("upstream", "health.host", "a Host header value", h.host), 0)
    end
    s.host = h.host
    if h.statuses ~= nil then
      if type(h.statuses) ~= "table" or #h.statuses == 0 then
        error(bad("upstream", "health.statuses", "a list of HTTP statuses",
                  type(h.statuses) == "table" and "an empty list" or h.statuses), 0)
      end
      s.statuses = {}
      for i, v in ipairs(h.statuses) do
        if type(v) ~= "number" or v < 100 or v > 599 or v % 1 ~= 0 then
          error(bad("upstream", "health.statuses[" .. i .. "]", "an HTTP status 100..599", v), 0)
        end
        s.statuses[v] = true
      end
    end
  end
  s.interval = config.seconds("upstream", "health.interval", h.interval, 5)
  if s.interval < 0.01 or s.interval > 3600 then
    error(bad("upstream", "health.interval", "0.01 s .. 1 h", h.interval), 0)
  end
  s.timeout = config.seconds("upstream", "health.timeout", h.timeout, min(1, s.interval))
  if s.timeout <= 0 or s.timeout > s.interval then
    error(bad("upstream", "health.timeout", "more than 0 and at most health.interval ("
              .. s.interval .. " s)", h.timeout), 0)
  end
  s.healthy = count("healthy", h.healthy, 2)
  s.unhealthy = count("unhealthy", h.unhealthy, 3)
  s.lease = 2 * s.interval
  return s
end

-- Settings s (from settings) given to balancer upstream u (nres.ngx.
-- balancer's declare, after its peers are laid out): the upstream's health
-- table made (the lease word, then a record per peer).
function _M.attach(u, s)
  if s == nil then return end
  local tbl = config.new_table("health", { slots = 1, budget = false, breaker = false,
                                           limiter = false,
                                           extra = 64 + u.shm.slots * PEER_SIZE },
                               u.name)
  s.shm = tbl
  s.lease_word = ffi.cast("nres_gw_lease_t *", tbl.extra)
  s.peers = ffi.cast("nres_gw_health_peer_t *", ffi.cast("char *", tbl.extra) + 64)
  u.health = s
end

-- ------------------------------------------------------------ checking

local ngx = ngx
local log, WARN, NOTICE = ngx and ngx.log, ngx and ngx.WARN, ngx and ngx.NOTICE

-- One check of peer i of u: OK, or STATUS (with the status), TIMEOUT, ERR
-- (with the error).
local function check(u, i)
  local s = u.health
  local sock = ngx.socket.tcp()
  local t = floor(s.timeout * 1000)
  sock:settimeouts(t, t, t)
  local ok, err = sock:connect(u.hosts[i], u.ports[i])
  if not ok then
    return err == "timeout" and TIMEOUT or ERR, 0, err
  end
  if s.tcp then
    sock:close()
    return OK, 0
  end
  local req = format("GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: nres-health\r\n"
                     .. "Connection: close\r\n\r\n", s.path, s.host or u.peer[i])
  ok, err = sock:send(req)
  local line
  if ok then line, err = sock:receive("*l") end
  sock:close()
  if not line then return err == "timeout" and TIMEOUT or ERR, 0, err end
  local status = tonumber(line:match("^HTTP/%d%.%d (%d%d%d)"))
  if not status then return ERR, 0, "no HTTP status line" end
  local pass
  if s.statuses then pass = s.statuses[status] else pass = status >= 200 and status < 400 end
  return pass and OK or STATUS, status
end

local function control(u, i)
  return ffi.cast("nres_gw_control_t *", u.controls + u.idx[i] * ffi.sizeof("nres_gw_control_t"))
end

-- Is peer i of u ejected by the checks (nres.ngx.watch's log says so)?
function _M.held(u, i) return band(control(u, i).flags, HEALTH) ~= 0 end

-- Peer i's result fed to its breaker.
local function record(u, i, result, status, err, took)
  local s, rec, br = u.health, u.health.peers + u.idx[i], u.br[i]
  local c = control(u, i)
  local now = C.nres_step_now()
  ngx.update_time()
  rec.at, rec.took, rec.last, rec.status = ngx.now(), took, result, status
  rec.by_result[result - 1] = rec.by_result[result - 1] + 1
  local held = band(c.flags, HEALTH) ~= 0
  local state = C.nres_breaker_state(br, now)
  if held and state ~= ISOLATED then   -- someone closed it meanwhile (control API)
    C.nres_gw_control_flag(c, HEALTH, 0)
    held, rec.fail_run = false, 0
  end
  local what = format("nres: peer %s of upstream %s", u.peer[i], u.name)
  if result == OK then
    rec.fail_run, rec.ok_run = 0, min(rec.ok_run + 1, 65535)
  else
    rec.ok_run, rec.fail_run = 0, min(rec.fail_run + 1, 65535)
  end
  -- Ejected passively and its break over: the check is the half-open
  -- probe (a permit taken and reported, as a client's would be), so the
  -- breaker's own rules close or reopen it and no client request is spent.
  if not held and state == HALF_OPEN
     and C.nres_breaker_acquire(br, now, permit_box) == 0 and permit_box[0] ~= 0 then
    local to = C.nres_breaker_record(br, now, permit_box[0], result == OK and 0 or 1, 0, nil)
    if to == CLOSED then
      log(NOTICE, format("%s restored: its half-open probes were health checks that passed",
                         what))
    end
    return
  end
  if result == OK then
    if held and rec.ok_run >= s.healthy then
      C.nres_breaker_reset(br)
      C.nres_gw_control_flag(c, HEALTH, 0)
      log(NOTICE, format("%s restored by the health checks (%d passed in a row)", what,
                         rec.ok_run))
    end
  else
    if rec.fail_run >= s.unhealthy and not held and state ~= ISOLATED then
      C.nres_gw_control_flag(c, HEALTH, 1)
      C.nres_breaker_isolate(br)
      log(WARN, format("%s ejected by the health checks: %d failed in a row, the last %s", what,
                       rec.fail_run, result == STATUS and "answered " .. status
                       or tostring(err or RESULTS[result])))
    end
  end
end

local function check_one(u, i)
  local t0 = C.nres_step_now()
  local result, status, err = check(u, i)
  record(u, i, result, status, err, (C.nres_step_now() - t0) / 1e9)
end

-- One round: every peer checked at once, each in its own light thread.
local function round(u)
  local threads, peers = {}, {}
  require("nres.ngx.balancer").sync(u)   -- peers added or removed at run time
  for i = 1, u.n do   -- the members (a removed peer's entry may remain)
    if u.live[i] then
      peers[#peers + 1] = u.peer[i]
      threads[#peers] = ngx.thread.spawn(check_one, u, i)
    end
  end
  for k = 1, #peers do
    local ok, err = ngx.thread.wait(threads[k])
    if not ok then log(ngx.ERR, "nres: health check of ", peers[k], ": ", err) end
  end
end

local id   -- this worker's lease id (its pid)

local tick
-- The timer: the holder renews its lease and runs a round each interval;
-- the others look every interval / 4. A worker that exits lets go.
function tick(premature, u)
  local s = u.health
  if premature then
    C.nres_gw_lease_drop(s.lease_word, id)
    return
  end
  local t0 = C.nres_step_now()
  local wait = s.interval / 4
  if C.nres_gw_lease_take(s.lease_word, id, t0, s.lease * 1e9) == 1 then
    local ok, err = pcall(round, u)
    if not ok then log(ngx.ERR, "nres: health checks of ", u.name, ": ", err) end
    wait = max(0, s.interval - (C.nres_step_now() - t0) / 1e9)
  end
  elected.again(wait, tick, u, "health checks")
end

-- gw.init_worker: each upstream with health checks gets its timer in
-- every worker (only the lease holder checks).
function _M.start()
  id = ngx.worker.pid()
  elected.start(config.upstreams, "health", tick, "health checks")
end

-- ------------------------------------------------------------- status

-- For nres.ngx.balancer's status: each peer of u's `ejected_by` (active,
-- passive or operator, while not closed) and its `health` (last result,
-- runs, checks by result), and u's health settings and lease holder.
function _M.annotate(u, out, now, at)
  local s = u.health
  for k, p in ipairs(out.peers) do
    local i = at[k]   -- its entry in u's arrays
    local isolated = p.state == "isolated"
    local held = band(control(u, i).flags, HEALTH) ~= 0
    if isolated then p.ejected_by = held and "active" or "operator"
    elseif p.state ~= "closed" then p.ejected_by = "passive" end
    if s then
      local rec = s.peers + u.idx[i]
      local by = {}
      for r = 1, 4 do by[RESULTS[r]] = tonumber(rec.by_result[r - 1]) end
      p.health = {
        last = RESULTS[rec.last], last_status = rec.status > 0 and tonumber(rec.status) or nil,
        last_at = rec.at > 0 and rec.at or nil, last_seconds = rec.at > 0 and rec.took or nil,
        passed_in_a_row = tonumber(rec.ok_run), failed_in_a_row = tonumber(rec.fail_run),
        checks = by,
      }
    end
  end
  if s then
    local holder = tonumber(C.nres_gw_lease_holder(s.lease_word, now))
    out.health = { kind = s.tcp and "tcp" or "http", path = s.path, interval = s.interval,
                   timeout = s.timeout, healthy = s.healthy, unhealthy = s.unhealthy,
                   checker_pid = holder > 0 and holder or nil }
  end
end

return _M

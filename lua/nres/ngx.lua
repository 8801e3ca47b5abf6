-- SPDX-License-Identifier: MIT
-- nres.ngx: nres inside nginx (lua-nginx-module) - the gateway driver.
--
-- In init_by_lua (the master, before the workers fork):
--
--   local gw = require "nres.ngx"
--   gw.scope("upstreams", { policy = "gateway", slots = 256 })
--   gw.limiter("clients", { rate = 50, burst = 100, slots = 4096 })
--   gw.upstream("backend", { host = "127.0.0.1", port = 9001 })
--   -- or { location = "/_backend" }: a subrequest to an internal proxy location
--
-- then in the request phases (cosocket mode; balancer mode below):
--
--   access_by_lua_block  { require("nres.ngx").limit_client("clients", ngx.var.remote_addr) }
--   content_by_lua_block { require("nres.ngx").proxy("upstreams", "backend") }
--   location = /nres/status { content_by_lua_block { require("nres.ngx").status() } }
--
-- A scope keeps one breaker, one retry budget (and a rate limit, if the
-- policy has one) per key - by default the upstream's host:port - in a
-- shared-memory table (nres.shm) that every worker maps: a breaker that
-- opens in one worker is open in all, and a budget is one bucket for the
-- whole nginx. Updates are atomics in C; nothing is read, changed in Lua and
-- written back, so workers cannot race as lua_shared_dict get/set does.
--
-- The call loop is the runtime's state machine (nres_step_*), driven here:
-- each attempt is a cosocket HTTP/1.1 request whose connect/send/read
-- timeouts are the attempt's time left (or a subrequest, whose timeouts are
-- its location's proxy_*_timeout), with X-Deadline-Ms set to that time left;
-- the status goes through the policy's classifier (http by default); waits
-- are ngx.sleep; time is the runtime's monotonic clock (nres_step_now, the
-- same clock in every worker, which the shared state needs). Nothing blocks
-- the worker; no threads, no libuv.
--
-- Worker memory: a policy (nres_policy_t, 5.8 KB with its latency
-- estimator) per key a worker has served, made lazily from the scope's
-- template and pointed at the key's shared state; the estimator, the
-- bulkhead (limiter.concurrency) and nres_policy_t counters stay per worker.
--
-- Limits. A key is at most 64 bytes (a longer one is replaced by its MD5);
-- a scope holds `slots` keys (default 1024, ~1 KB of shared memory each;
-- a limiter 4096), in sets of 8 picked by hash. A key stays leased for
-- `hold` after its last use (default max(60 s, deadline + 5 s), at least
-- the deadline, so no call outlives its slot); the least recently leased
-- key whose lease is over makes room for a new one. When a key's set is
-- full of leased keys the call still runs, on this worker's own copy of
-- the policy (state not shared; counted as `overflow_this_worker`), and a
-- limiter admits (it never fails closed). The size is fixed at start.
--
-- Reloads. Under nginx every table is a file mapped MAP_SHARED
-- (nres.ngx.files: <dir>/<name>.<kind>.<table>.shm, dir $NRES_REGION_DIR
-- or /dev/shm): a HUP reload runs init_by_lua again and reattaches the
-- same file if its header and configuration match, so open breakers,
-- budget levels, limiter buckets and counters carry on in the new workers;
-- another layout gets a new file and one log line. A binary upgrade (USR2)
-- shares the files. gw.init_worker() removes files no declaration uses.
--
-- Balancer mode (nres.ngx.balancer): nginx's proxy does the proxying to
-- an upstream block whose balancer_by_lua calls gw.balance(name); gw.admit
-- (set_by_lua; or gw.access in access_by_lua) admits, gw.refused answers
-- its refusals, gw.log (log_by_lua) records. Peers, per-peer ejection and
-- latency-aware choice are there.
--
-- The modules, by job: nres.ngx.config (declarations), nres.ngx.region
-- (a worker's policy per shared key), nres.ngx.cosocket (the cosocket
-- proxy path: request, proxy), nres.ngx.limiter (limit, limit_client),
-- nres.ngx.status (snapshot, prometheus, status), nres.ngx.balancer
-- (admit, access, refused, balance, log), nres.ngx.files (region files). This module is
-- their face.
local config = require "nres.ngx.config"
local region = require "nres.ngx.region"
local cosocket = require "nres.ngx.cosocket"
local limiter = require "nres.ngx.limiter"
local status = require "nres.ngx.status"
local balancer = require "nres.ngx.balancer"
local files = require "nres.ngx.files"

local _M = { _VERSION = "0.1.0" }

_M.scopes, _M.limiters, _M.upstreams = config.scopes, config.limiters, config.upstreams
_M.scope, _M.limiter, _M.upstream = config.scope, config.limiter, config.upstream
_M.fleet = config.fleet   -- gw.fleet(path): nres-syncd's status in /nres/status
_M.policy_for = region.policy_for
_M.request, _M.proxy = cosocket.request, cosocket.proxy
_M.limit, _M.limit_client = limiter.limit, limiter.limit_client
_M.snapshot, _M.prometheus, _M.status = status.snapshot, status.prometheus, status.status
_M.json = status.json
_M.admit, _M.access, _M.refused = balancer.admit, balancer.access, balancer.refused
_M.balance, _M.log = balancer.balance, balancer.log
_M.region = files.configure

-- The control API (nres.ngx.control): gw.control() is the location's
-- content handler; gw.control{ allow = {...} } (init_by_lua) adds the
-- addresses allowed besides loopback; gw.apply(op) is the same from Lua.
function _M.control(opts)
  local control = require "nres.ngx.control"
  if opts ~= nil then return control.configure(opts) end
  return control.handler()
end
function _M.apply(op, from) return require("nres.ngx.control").apply(op, from) end

-- init_worker_by_lua: bind balancer mode's nginx functions, seed this
-- worker's random peer choices and, in worker 0, remove region files no
-- declaration uses (nres.ngx.files) and log every breaker's and peer's
-- state changes (nres.ngx.watch).
function _M.init_worker()
  balancer.bind()
  balancer.seed()
  files.init_worker()
  require("nres.ngx.watch").start()
  require("nres.ngx.health").start()   -- active health checks (one worker runs them)
  require("nres.ngx.resolve").start()  -- peers by name (one worker resolves them)
end

return _M

-- SPDX-License-Identifier: MIT
-- nres.ngx.balancer: balancer mode - nginx's own proxy moves the bytes
-- (proxy_pass to an upstream block with balancer_by_lua), nres decides.
--
--   init_by_lua:      gw.scope("upstreams", { policy = "gateway" })
--                     gw.upstream("backend", { scope = "upstreams",
--                       peers = { "127.0.0.1:9001", "127.0.0.1:9002" } })
--   set_by_lua:       $nres_deadline_ms = gw.admit("backend")   -- admission
--                     (proxy_set_header X-Deadline-Ms $nres_deadline_ms;
--                     "" when refused: return 599 -> @nres_refused ->
--                     gw.refused(); or gw.access("backend") in access_by_lua)
--   balancer_by_lua:  gw.balance("backend")    -- peer, timeouts, one more try?
--   log_by_lua:       gw.log()                 -- the last try's outcome
--
-- Admission (admit): a named client limiter over its rate refuses with
-- 429; an inbound X-Deadline-Ms (a number of ms >= 0; other values are
-- ignored; 0 answers 504) shortens the policy's deadline; the upstream's
-- breaker (one per upstream key, in the scope's shared table) refuses with
-- 503 when open; the time left is X-Deadline-Ms upstream (nginx sends the
-- request headers once, so every try carries the first try's value).
--
-- Each try (balance): the previous try's outcome, if any, comes from
-- ngx.balancer.get_last_failure() and is recorded into that peer's breaker
-- and latency estimator; then a peer is picked (never the one that just
-- failed while another is admitted), its timeouts set to the time left
-- (at most the policy's attempt_timeout), and one more try is granted
-- (set_more_tries(1)) only if the policy's attempts allow it, time is left
-- and a token of the upstream's retry budget can be taken. The token is
-- reserved for the retry the try might need and given back (log) if it was
-- not needed, so the budget is never overdrawn; with more requests in
-- flight than tokens some tries get no retry. The balancer cannot wait:
-- a retry goes to a peer at once (use the cosocket mode, nres.ngx.cosocket,
-- for backoff waits, custom requests or hedging).
--
-- Peers. Each peer has a breaker (outlier ejection: by default 5 failures
-- in a row or 25 % of at least 10 tries over 5 s eject it for 2 s, doubling
-- up to 30 s while its half-open probes fail) and a latency estimator
-- (nres_estimator_t, the p75 of the last 1-2 s of tries, a failed try
-- counted as the attempt timeout; with no try in that time, the last
-- estimate fading by half about every 1.7 s) in the upstream's shared
-- table, so every
-- worker sees the same ejections and latencies; in-flight tries are
-- counted per worker. Choice: power of two choices (default; two random
-- admitted peers, the lower latency x (in-flight + 1) wins, as Finagle's
-- and Linkerd's balancers) or round-robin. An ejected peer gets only the
-- half-open probes its breaker admits; a probe whose request never ends
-- (a worker killed, an error_page without gw.log) lapses after
-- `eject.lease` (default: break_for) and the next request probes
-- (docs/leases.md). Panic: when fewer than `panic`
-- (default 0.5) of the peers are closed, ejection is ignored and every
-- peer is eligible (Envoy's panic threshold): the gateway never makes a
-- total outage of its own.
--
-- A failure is an nginx-made 502/504 (connect error, timeout) or an
-- upstream 5xx; which statuses are retried at all is nginx's
-- proxy_next_upstream (nres grants or refuses the extra tries).
--
-- Criticality: a retry token is spent by class (nres_budget_spend_class:
-- a sheddable request only while the bucket is at least half full); the
-- class comes from X-Criticality (nres_gw_class, the classes of
-- nres.ngx.config.criticality), read only when a token is asked for under
-- half a bucket. The header goes upstream
-- as the client sent it, like every other header nginx's proxy passes.
--
-- The decisions themselves are libnres's (runtime/include/nres/gateway.h),
-- shared with the nginx module (ngx_http_nres_module: the same mode with
-- no Lua phase per request); this module declares the upstreams (and
-- registers them by name for the module) and runs the phases.
local ffi = require "ffi"
local cdef = require "nres.cdef"
require "nres.cdef.gateway"
local config = require "nres.ngx.config"

local C = cdef.C
local breaker_stats = ffi.new("nres_breaker_stats_t")   -- read through nres_breaker_stats
local counts = ffi.new("nres_shm_counts_t")             -- nres_shm_slot_counts's
local ffi_new, ffi_cast, ffi_sizeof = ffi.new, ffi.cast, ffi.sizeof
local type, error, tonumber, tostring, pairs, ipairs =
  type, error, tonumber, tostring, pairs, ipairs
local floor, ceil, max = math.floor, math.ceil, math.max

local step_now = C.nres_step_now
local sh_acquire, sh_slot = C.nres_shm_acquire, C.nres_shm_slot
local br_release, br_state = C.nres_breaker_release, C.nres_breaker_state
local gw_admit, gw_unadmitted, gw_left_ms = C.nres_gw_admit, C.nres_gw_unadmitted,
  C.nres_gw_left_ms
local gw_pick, gw_try_begin, gw_grant = C.nres_gw_pick, C.nres_gw_try_begin, C.nres_gw_grant
local gw_try_end, gw_abandon, gw_end = C.nres_gw_try_end, C.nres_gw_try_abandon,
  C.nres_gw_request_end
local gw_class, gw_deadline_ms = C.nres_gw_class, C.nres_gw_deadline_ms
local gw_deadline_header = C.nres_gw_deadline_header
local gw_refusal = C.nres_gw_refusal
local est_quantile = C.nres_estimator_quantile
local bad, scopes, new_table, seconds = config.bad, config.scopes, config.new_table, config.seconds
local limit = require("nres.ngx.limiter").limit

local _M = {}

local STOP_OK, STOP_DEADLINE, STOP_LIMITED = 1, 4, 7   -- nres_stop_t
local EST_SIZE = ffi_sizeof("nres_estimator_t")
local HIST_SIZE = tonumber(C.nres_gw_struct_size(4))   -- nres_gw_hist_t, C's to lay out
local HIST_BUCKETS = 14                                 -- NRES_GW_HIST_BUCKETS
local EST_PERIOD = 1e9          -- ns per estimator window (two are read)
local NEVER = 2 ^ 64            -- a lease that never ends (nres.shm)
local NEED_CLASS = -1           -- nres_gw_grant: read the criticality, ask again
local NAN = 0 / 0               -- no inbound deadline

local permit_box = ffi_new("uint32_t[1]")
local has_box = ffi_new("int[1]")
local gen_box = ffi_new("uint32_t[1]")
local samples_box = ffi_new("uint64_t[1]")
local reason_box = ffi_new("const char *[1]")   -- nres_gw_refusal's reason
local hist_counts = ffi_new("uint64_t[?]", HIST_BUCKETS + 1)
local hist_sum = ffi_new("uint64_t[1]")

local EJECT = { consecutive = 5, ratio = 0.25, min_calls = 10, window = 5, buckets = 5,
                break_for = 2, break_max = 30, jitter = 0.1, probes = 1, successes = 3,
                lease = 0 }   -- 0: break_for

-- The peers' breaker configuration from an eject table (seconds, ratios).
local function eject_config(e)
  local cfg = ffi_new("nres_breaker_config_t")
  C.nres_breaker_config_init(cfg)
  for k in pairs(e) do
    if EJECT[k] == nil then
      error("nres.ngx.upstream: eject." .. tostring(k) .. ": expected one of consecutive,"
            .. " ratio, min_calls, window, buckets, break_for, break_max, jitter, probes,"
            .. " successes, lease, got an unknown field", 0)
    end
  end
  local function num(k)
    local v = e[k]
    if v == nil then v = EJECT[k] end
    if type(v) ~= "number" or v ~= v or v < 0 then
      error(bad("upstream", "eject." .. k, "a number >= 0", v), 0)
    end
    return v
  end
  cfg.consecutive = num("consecutive")
  cfg.failure_ratio = num("ratio")
  cfg.min_calls = num("min_calls")
  cfg.window = num("window") * 1e9
  cfg.buckets = num("buckets")
  cfg.break_for = num("break_for") * 1e9
  cfg.break_max = num("break_max") * 1e9
  cfg.break_jitter = num("jitter")
  cfg.probes = num("probes")
  cfg.success_threshold = num("successes")
  cfg.lease = num("lease") * 1e9
  local why = C.nres_breaker_config_error(cfg)
  if why ~= nil then error("nres.ngx.upstream: eject: " .. ffi.string(why), 0) end
  return cfg
end

-- The upstream's C twin (runtime/include/nres/gateway.h), registered by
-- name for the nginx module (ngx_http_nres_module: nres_balancer), which
-- decides with libnres's functions on the same shared tables. Freed (and
-- unregistered) with this Lua state.
local function register(u, s, ests)
  local names = ffi_new("const char *[?]", u.n)
  local slots = ffi_new("uint32_t[?]", u.n)
  local weights, backup = ffi_new("uint32_t[?]", u.n), ffi_new("uint8_t[?]", u.n)
  for i = 1, u.n do
    names[i - 1], slots[i - 1] = u.peer[i], u.idx[i]
    weights[i - 1], backup[i - 1] = u.weight[i], u.backup[i] and 1 or 0
  end
  local cfg = ffi_new("nres_gw_config_t", {
    name = u.name, key = u.key, scope = s.ptr, peers = u.ptr, estimators = ests,
    peer_names = names, peer_slots = slots, npeers = u.n, attempts = u.attempts,
    deadline = u.deadline, attempt_timeout = u.attempt_timeout, hold = s.hold,
    choice = u.choice == "p2c" and 0 or 1, panic = u.panic,
    budget = s.budget and 1 or 0, breaker = s.breaker and 1 or 0,
    try_hists = u.hists, request_hist = u.hist, control = s.control,
    peer_controls = u.controls, peer_weights = weights, peer_backup = backup,
    slow_start = u.slow_start * 1e9 })
  local g = C.nres_gw_upstream_new(cfg)
  if g == nil then error("nres.ngx.upstream: " .. u.name .. ": the runtime refused its gateway state", 0) end
  g = ffi.gc(g, C.nres_gw_upstream_free)
  C.nres_gw_register(g)
  return g
end

-- Where a peers' table of `slots` keeps its extra memory: an estimator
-- per slot at 0, then (64-aligned) a try histogram per slot and the
-- request histogram, then a control block per slot. Returns the
-- histograms' and the control blocks' offsets, and the bytes in all.
local CONTROL_SIZE = require("nres.ngx.control").BYTES
local function peers_layout(slots)
  local hists_at = slots * EST_SIZE
  hists_at = hists_at + (64 - hists_at % 64) % 64
  local controls_at = hists_at + (slots + 1) * HIST_SIZE
  return hists_at, controls_at, controls_at + slots * CONTROL_SIZE
end

-- A reload's new peers' table takes over each declared peer's own memory
-- from the old table (report from nres.shm migrate, its map from old slot
-- to new): its latency estimator (unless the estimators' period
-- changed), its try histogram and its control block (drain, weight set
-- at run time), and the upstream's request histogram.
local NOT_MOVED = require("nres.shm").NOT_MOVED
local function move_peers(tbl, r, notes)
  local old = r.old
  local ohists, ocontrols, obytes = peers_layout(r.slots)
  if old.extra == nil or old.extra_bytes < obytes then
    notes[#notes + 1] = "reset: latency estimators, histograms, drains and weights"
      .. " (the old region has none)"
    return
  end
  local hists_at, controls_at = peers_layout(tbl.slots)
  local from, to = ffi_cast("char *", old.extra), ffi_cast("char *", tbl.extra)
  local oest, nest = ffi_cast("nres_estimator_t *", from), ffi_cast("nres_estimator_t *", to)
  local reset = 0
  for i = 0, r.slots - 1 do
    local j = r.map[i]
    if j ~= NOT_MOVED then
      if oest[i].period == nest[j].period then
        ffi.copy(nest + j, oest + i, EST_SIZE)
      else
        reset = reset + 1
      end
      ffi.copy(to + hists_at + j * HIST_SIZE, from + ohists + i * HIST_SIZE, HIST_SIZE)
      ffi.copy(to + controls_at + j * CONTROL_SIZE, from + ocontrols + i * CONTROL_SIZE,
               CONTROL_SIZE)
    end
  end
  ffi.copy(to + hists_at + tbl.slots * HIST_SIZE, from + ohists + r.slots * HIST_SIZE, HIST_SIZE)
  if reset > 0 then
    notes[#notes + 1] = "reset: " .. reset .. " peers' latency estimators (their period changed)"
  end
end

-- A peer entry: "host:port", or { "host:port", weight = 1..10000,
-- backup = true } (docs/gateway-peers.md): its address, weight, backup.
local function peer_entry(i, p)
  local field = "peers[" .. i .. "]"
  if type(p) ~= "table" then return p, 1, false end
  for k in pairs(p) do
    if k ~= 1 and k ~= "weight" and k ~= "backup" then
      error("nres.ngx.upstream: " .. field .. "." .. tostring(k) .. ": expected one of"
            .. ' [1] ("host:port"), weight, backup, got an unknown field', 0)
    end
  end
  local w = p.weight == nil and 1 or p.weight
  if type(w) ~= "number" or w < 1 or w > 10000 or w % 1 ~= 0 then
    error(bad("upstream", field .. ".weight", "an integer 1..10000", p.weight), 0)
  end
  if p.backup ~= nil and type(p.backup) ~= "boolean" then
    error(bad("upstream", field .. ".backup", "true or false", p.backup), 0)
  end
  return p[1], w, p.backup == true
end

-- gw.upstream(name, { peers = { "host:port" or { "host:port", weight = 3,
--   backup = true }, ... }, scope = "upstreams", choice = "p2c" |
--   "round-robin", panic = 0.5, slow_start = 0 (s), eject = { ... },
--   key = name (the upstream's key in the scope) }), from nres.ngx.config.
function _M.declare(name, opts)
  for k in pairs(opts) do
    if k ~= "peers" and k ~= "scope" and k ~= "choice" and k ~= "panic" and k ~= "eject"
       and k ~= "key" and k ~= "health" and k ~= "slow_start" then
      error("nres.ngx.upstream: " .. tostring(k) .. ": expected one of peers, scope, choice,"
            .. " panic, slow_start, eject, key, health, got an unknown field", 0)
    end
  end
  if #name > 64 then error(bad("upstream", "name", "at most 64 bytes (a balancer's name)", name), 0) end
  local health = require("nres.ngx.health")
  local checks = health.settings(opts.health)   -- active checks, if asked (nil: none)
  local list = opts.peers
  if type(list) ~= "table" or #list < 1 or #list > 256 then
    error(bad("upstream", "peers", "a list of 1..256 \"host:port\"",
              type(list) == "table" and (#list .. " peers") or list), 0)
  end
  local sname = opts.scope
  local s = scopes[sname]
  if s == nil then
    error(bad("upstream", "scope", "a scope declared with gw.scope before it", sname), 0)
  end
  local choice = opts.choice or "p2c"
  if choice ~= "p2c" and choice ~= "round-robin" then
    error(bad("upstream", "choice", "\"p2c\" or \"round-robin\"", choice), 0)
  end
  local panic = opts.panic or 0.5
  if type(panic) ~= "number" or not (panic >= 0 and panic <= 1) then
    error(bad("upstream", "panic", "a share of healthy peers 0..1", panic), 0)
  end
  local key = opts.key or name
  if type(key) ~= "string" or #key < 1 or #key > 64 then
    error(bad("upstream", "key", "a string of 1..64 bytes", key), 0)
  end
  if type(ngx) == "table" and ngx.config then   -- in nginx: a lua-nginx-module this binding cannot call fails the start
    local ok, why = require("nres.ngx.request").peer_host_args(ngx.config.ngx_lua_version)
    if ok == nil then error("nres.ngx.upstream: " .. name .. ": " .. why, 0) end
  end
  local n = #list
  local u = {
    name = name, key = key, scope = s, n = n, choice = choice, panic = panic,
    slow_start = seconds("upstream", "slow_start", opts.slow_start, 0),
    hosts = {}, ports = {}, peer = {}, idx = {}, br = {}, est = {}, balancer = true,
    weight = {}, backup = {},
  }
  local seen, primaries = {}, 0
  for i, entry in ipairs(list) do
    local p, w, backup = peer_entry(i, entry)
    u.weight[i], u.backup[i] = w, backup
    primaries = primaries + (backup and 0 or 1)
    local host, port
    if type(p) == "string" then
      -- an IPv6 address keeps its brackets: set_current_peer parses it so
      host, port = p:match("^(%[[%x:.]+%]):(%d+)$")
      if not host then host, port = p:match("^([^:]+):(%d+)$") end
    end
    port = tonumber(port)
    if not host or port < 1 or port > 65535 then
      error(bad("upstream", "peers[" .. i .. "]", "\"host:port\" or \"[IPv6]:port\"", p), 0)
    end
    if seen[p] then error(bad("upstream", "peers[" .. i .. "]", "a peer listed once", p), 0) end
    seen[p] = true
    u.hosts[i], u.ports[i], u.peer[i] = host, port, p
  end
  if primaries == 0 then
    error(bad("upstream", "peers", "at least one peer that is not a backup", "only backups"), 0)
  end
  -- The peers' table: two slots per peer (room to add a few without a new
  -- layout), each key leased for ever; after it an estimator and a
  -- histogram of try durations per slot, and the upstream's histogram of
  -- request durations (zeroed memory: empty histograms), and a control
  -- block per slot (peers_layout).
  local slots = max(8, 2 * n)
  slots = slots + (8 - slots % 8) % 8
  local hists_at, controls_at, bytes = peers_layout(slots)
  local ests
  -- Estimators laid out and peers keyed, in order: a fresh table given
  -- the same keys in the same order puts each in the same slot, so a
  -- worker's table remade by verify() keeps every index and pointer
  -- (its extra memory comes zeroed: empty histograms). A table that
  -- replaced one of another layout is laid out so too, before the old
  -- one's state moves into it (move_peers).
  local function lay_out(fresh)
    if fresh then
      for i = 0, slots - 1 do C.nres_estimator_init(ests + i, EST_PERIOD) end
    end
    local now = step_now()
    for i = 1, n do
      local idx = sh_acquire(u.ptr, u.peer[i], #u.peer[i], now, NEVER, gen_box)
      if idx < 0 or (u.idx[i] and u.idx[i] ~= idx) then
        error("nres.ngx.upstream: no slot for peer " .. u.peer[i], 0)
      end
      u.idx[i] = idx
      u.br[i] = sh_slot(u.ptr, idx).breaker
      u.est[i] = ests + idx
    end
  end
  local tbl = new_table("peers", { slots = slots, breaker = eject_config(opts.eject or {}),
                                    budget = false, limiter = false, extra = bytes }, name,
                        { present = true, extra = move_peers, prepare = function(t)
    u.shm, u.ptr = t, t.shm
    ests = ffi_cast("nres_estimator_t *", t.extra)   -- kept alive by t
    u.hists = ffi_cast("char *", t.extra) + hists_at        -- slot i's at i * HIST_SIZE
    u.hist = u.hists + slots * HIST_SIZE
    u.controls = ffi_cast("char *", t.extra) + controls_at   -- slot i's (drain) at i * size
    lay_out(not t.reused)
  end })
  tbl.on_fresh = function() lay_out(true) end
  local t = s.policy.spec
  u.attempts = t.attempts or 1
  u.deadline = t.deadline * 1e9
  u.attempt_timeout = (t.attempt_timeout or t.deadline) * 1e9
  u.deadline_left = floor(u.deadline / 1e6)   -- X-Deadline-Ms, nothing inbound
  u.deadline_ms = tostring(u.deadline_left)
  u.gw = register(u, s, ests)
  health.attach(u, checks)
  return u
end

-- ---------------------------------------------------------- peer choice
--
-- libnres decides (runtime/src/gateway/pick.c): the same code the nginx
-- module runs. For tests: a peer other than `avoid` (1-based), and its
-- breaker's permit, or false (panic, or nobody admitted: taken unasked).
function _M.pick(u, now, avoid)
  local i = gw_pick(u.gw, now, avoid and avoid - 1 or -1, permit_box, has_box)
  return i + 1, has_box[0] ~= 0 and permit_box[0] or false
end

-- ------------------------------------------------------------ the phases
--
-- Per-request cost (the three phases run on every proxied request: this
-- is the gateway's overhead over plain proxy_pass). Each phase function
-- compiles into one trace: the nginx calls are direct FFI calls
-- (nres.ngx.request says why), and the hot path calls no function of its
-- own that could have compiled first (a recorded trace stops at such a
-- call and the rest of the caller runs interpreted). The decisions are
-- libnres's (nres/gateway.h: admit, pick, try start and end, grant, call
-- end), the functions the nginx module (ngx_http_nres_module) calls: one
-- FFI call each, their state in the request record's nres_gw_request_t
-- and the upstream's nres_gw_upstream_t. The request's state
-- is a record from this worker's free list, found by the request's
-- address (with its start time, so a record left by a request whose log
-- phase never ran - an internal redirect to a location without gw.log -
-- is never taken for another's), not an ngx.ctx table. The upstream's
-- slot is looked up (its lease extended) once a second per worker, not
-- per request. X-Criticality is read only when a retry token is asked for
-- while the budget is under half full (the only time the class matters).
-- Admission runs in set_by_lua and returns X-Deadline-Ms for nginx's
-- proxy_set_header (ngx.req.set_header costs three times that).
-- What is left per request: one header read, the breakers', estimator's
-- and budget's atomics, three clock reads.

local ngx = ngx
local ffi_str = ffi.string
local R   -- nres.ngx.request, bound on the first request
local exdata, var_get, set_header, resp_status, start_time
local headers_count, get_headers, headers, headers_out, truncated, HEADERS_MAX
local set_peer, peer_host, set_timeouts, set_more_tries
local NGX_OK, NGX_DECLINED, value_ptr, size_ptr, errmsg, lowcase, uintptr_t
local reqs = {}             -- request address -> state record (this worker)
local free, nfree = {}, 0   -- state records to reuse

local function bind()
  R = require("nres.ngx.request").bind()
  exdata, var_get, set_header, resp_status, start_time =
    R.exdata, R.var_get, R.set_header, R.status, R.start_time
  set_peer, set_timeouts, set_more_tries = R.set_peer, R.set_timeouts, R.set_more_tries
  peer_host = R.peer_host
  headers_count, get_headers, headers, headers_out, truncated, HEADERS_MAX =
    R.headers_count, R.get_headers, R.headers, R.headers_out, R.truncated, R.HEADERS_MAX
  NGX_OK, NGX_DECLINED, value_ptr, size_ptr, errmsg, lowcase, uintptr_t =
    R.NGX_OK, R.NGX_DECLINED, R.value_ptr, R.size_ptr, R.errmsg, R.lowcase, R.uintptr_t
end

local function exit_with(status, reason)
  ngx.header["X-Nres-Reason"] = reason
  ngx.status = status
  ngx.print(reason, "\n")
  return ngx.exit(status)
end

-- A state record for request `key` (from the free list when it can): its
-- upstream and its libnres state (nres_gw_request_t, reset by admission).
-- A record still held at that address is one whose gw.log never ran: a
-- subrequest (nginx logs none without log_subrequest), an internal
-- redirect to a location without gw.log. Its request has ended (nginx
-- gave its memory to this one) or left that upstream session: it is let
-- go unjudged, as a call whose client left (its try's permit, in-flight
-- count and held token given back, counted canceled), so such records
-- are held at most until their address is reused, and their permits at
-- most for a lease.
local CLIENT_CLOSED = 499   -- NRES_GW_CLIENT_CLOSED
local function new_state(key, stamp, u)
  local r = reqs[key]
  if r ~= nil and r.u then
    if not r.refused then gw_end(r.u.gw, r.req, step_now(), CLIENT_CLOSED) end
  elseif nfree > 0 then
    r = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
  else
    r = { req = ffi_new("nres_gw_request_t") }
  end
  r.stamp, r.u, r.refused = stamp, u, false
  reqs[key] = r
  return r
end

-- A refusal for request record r (stop: nres_stop_t; client: a client
-- limiter's): the record gw.refused answers from (the error_page 599
-- location; a config without the `if` line lets the request reach the
-- balancer, which fails it: nginx's 500). Its status and reason are
-- nres_gw_refusal's, the table the nginx module answers from.
-- Returns "" (set_by_lua's value: no X-Deadline-Ms header).
local refusals = {}   -- stop * 2 + client -> { status, reason }
local function refuse(r, stop, client, wait)
  local k = stop * 2 + (client and 1 or 0)
  local answer = refusals[k]
  if answer == nil then
    local status = tonumber(gw_refusal(stop, client and 1 or 0, reason_box))
    answer = { status, ffi_str(reason_box[0]) }
    refusals[k] = answer
  end
  r.refused, r.reason, r.wait = answer[1], answer[2], wait
  return ""
end

-- The refusal recorded for the current request, taken (its record freed):
-- status, reason, seconds to wait (429), or nil if there is none.
local function take_refusal(req)
  local key = tonumber(ffi_cast(uintptr_t, req))
  local r = reqs[key]
  if r == nil or r.stamp ~= start_time(req) or not r.refused then return nil end
  reqs[key] = nil
  r.u = false
  if nfree < 1024 then
    nfree = nfree + 1
    free[nfree] = r
  end
  return r.refused, r.reason, r.wait
end

-- set_by_lua: admission, without a Lua phase of its own (set_by_lua runs
-- on the main Lua thread: no coroutine, as access_by_lua makes).
--   set_by_lua_block $nres_deadline_ms { return require("nres.ngx").admit("backend") }
--   proxy_set_header X-Deadline-Ms $nres_deadline_ms;
-- Returns X-Deadline-Ms's value (the time left in ms), or "" when the
-- request is refused: limiter `lname` (optional) over its rate for `lkey`
-- (429), inbound X-Deadline-Ms under 1 ms (504), the upstream's breaker
-- open (503; nres_gw_admit). A refused request is answered by the
-- location's
--   if ($nres_deadline_ms = "") { return 599; }
--   error_page 599 = @nres_refused;   # content_by_lua: gw.refused()
-- with the status, X-Nres-Reason and Retry-After, the client's connection
-- kept (without the `if` line the balancer fails it with nginx's 500,
-- which closes it; no upstream connection either way).
function _M.admit(uname, lname, lkey)
  local u = config.upstreams[uname]
  if u == nil or not u.balancer then
    error(bad("admit", "upstream", "an upstream declared with peers", uname), 2)
  end
  if lname ~= nil then
    if config.limiters[lname] == nil then
      error(bad("admit", "limiter", "a limiter declared with gw.limiter, or nil", lname), 2)
    end
    if type(lkey) ~= "string" then
      error(bad("admit", "key", "a string (the client's, e.g. ngx.var.remote_addr)", lkey), 2)
    end
  elseif lkey ~= nil then
    error(bad("admit", "key", "nil without a limiter (the second argument), which it is for",
              lkey), 2)
  end
  if not R then bind() end
  local req = exdata()
  local r = new_state(tonumber(ffi_cast(uintptr_t, req)), start_time(req), u)
  if lname ~= nil then
    local ok, wait = limit(lname, lkey)
    if not ok then return refuse(r, STOP_LIMITED, true, wait) end
  end
  local now = step_now()
  -- X-Deadline-Ms: the headers listed in place and the first of that name
  -- found in C (a tenth of what $http_x_deadline_ms costs: a variable
  -- lookup by name, then the same walk); past HEADERS_MAX headers, the
  -- variable
  local ms = NAN
  truncated[0] = 0
  local n = headers_count(req, HEADERS_MAX, truncated)
  if n > 0 and truncated[0] == 0 then
    get_headers(req, headers_out, n, 0)
    ms = gw_deadline_header(headers, n)
  elseif n ~= 0 then
    local rc = var_get(req, "http_x_deadline_ms", 18, lowcase, 0, value_ptr, size_ptr, errmsg)
    if rc == NGX_OK then
      ms = gw_deadline_ms(value_ptr[0], size_ptr[0])
    elseif rc ~= NGX_DECLINED then
      error("nres.ngx: $http_x_deadline_ms: " .. ffi_str(errmsg[0]))
    end
  end
  local verdict = gw_admit(u.gw, r.req, now, ms)
  if verdict ~= 0 then return refuse(r, verdict, false) end   -- a stop reason
  local left = tonumber(gw_left_ms(r.req, now))
  -- without an inbound deadline the time left is the policy's: its string
  -- is made once (a number's tostring is a format and an interning)
  if left == u.deadline_left then return u.deadline_ms end
  -- Not `return tostring(...)`: a trace cannot record a tail call of a
  -- builtin returning past its start (NYI "return to lower frame").
  local v = tostring(left)
  return v
end

-- access_by_lua: admission in a phase of its own (gw.admit, then the
-- refusal answered or X-Deadline-Ms set on the request). Returns true if
-- the request goes on.
function _M.access(uname)
  local u = config.upstreams[uname]
  if u == nil or not u.balancer then
    error(bad("access", "upstream", "an upstream declared with peers", uname), 2)
  end
  local v = _M.admit(uname)
  local req = exdata()
  if v == "" then
    local status, reason = take_refusal(req)
    return exit_with(status, reason)
  end
  if set_header(req, "X-Deadline-Ms", 13, v, #v, nil, 0, 1, errmsg) < NGX_OK then
    error("nres.ngx: setting X-Deadline-Ms: " .. ffi_str(errmsg[0]))
  end
  return true
end

-- content_by_lua of the error_page 599 location: a request gw.admit
-- refused gets its answer (429 with Retry-After, 503, 504; the reason in
-- X-Nres-Reason and the body); anything else sent there gets a 500.
function _M.refused()
  if not R then bind() end
  local status, reason, wait = take_refusal(exdata())
  if status == nil then return exit_with(500, "internal error") end
  if status == 429 then ngx.header["Retry-After"] = max(1, ceil(wait)) end
  return exit_with(status, reason)
end

-- The end of the try before this one (a retry): recorded into its peer.
-- Returns the peer to avoid (0-based), or -1 when this is no retry: the
-- request came back to the balancer in a new upstream session (an internal
-- redirect, e.g. error_page to a location proxying to this upstream, with
-- no gw.log in between); its unfinished try is let go unjudged (permit
-- released, in-flight count and reserved token given back) and the
-- request goes on under its first admission (deadline, upstream permit).
local function retrying(g, r, req, now)
  local st = R.last_failure(req, R.int_out, errmsg)
  if st < 0 then error("nres.ngx: get_last_failure: " .. ffi_str(errmsg[0])) end
  if st == 0 then
    gw_abandon(g, r.req)
    return -1
  end
  local i = gw_try_end(g, r.req, now, R.FAILURE[st] == "failed" and 1 or 0,
                       R.int_out[0] == 504 and 1 or 0)
  return i
end

local try

-- balancer_by_lua: one try.
function _M.balance(uname)
  local u = config.upstreams[uname]
  if u == nil or not u.balancer then
    error(bad("balance", "upstream", "an upstream declared with peers", uname), 2)
  end
  if not R then bind() end
  local req = exdata()
  local now = step_now()
  local key = tonumber(ffi_cast(uintptr_t, req))
  local r = reqs[key]
  local g = u.gw
  if r == nil or r.stamp ~= start_time(req) then
    -- no admission ran (or a stale record): no admission, no retries
    r = new_state(key, start_time(req), u)
    gw_unadmitted(g, r.req, now)
  elseif r.refused then
    return ngx.exit(ngx.ERROR)   -- nginx's 500: error_page -> gw.refused
  end
  local avoid = -1
  if r.req.peer >= 0 then avoid = retrying(g, r, req, now) end
  return try(u, g, r, req, now, gw_pick(g, now, avoid, permit_box, has_box))
end

-- The rest of balance: try peer i (0-based; its breaker's permit in the
-- boxes): the peer set, its timeouts from the time left, one more try if
-- libnres grants it (X-Criticality read only when it asks).
function try(u, g, r, req, now, i)
  local permit, has = permit_box[0], has_box[0]
  local host = u.hosts[i + 1]
  local rc   -- the signature bind() chose by lua-nginx-module's version
  if peer_host then
    rc = set_peer(req, host, #host, u.ports[i + 1], nil, 0, errmsg)
  else
    rc = set_peer(req, host, #host, u.ports[i + 1], errmsg)
  end
  if rc ~= NGX_OK then
    if has ~= 0 then br_release(u.br[i + 1], permit) end
    ngx.log(ngx.ERR, "nres: set_current_peer ", u.peer[i + 1], ": ", ffi_str(errmsg[0]))
    return ngx.exit(ngx.ERROR)
  end
  local t = tonumber(gw_try_begin(g, r.req, now, i, permit, has))
  if set_timeouts(req, t, t, t, errmsg) ~= NGX_OK then
    error("nres.ngx: set_timeouts: " .. ffi_str(errmsg[0]))
  end
  local more = gw_grant(g, r.req, now, -1)
  if more == NEED_CLASS then   -- X-Criticality's class, read in place
    local rc = var_get(req, "http_x_criticality", 18, lowcase, 0, value_ptr, size_ptr, errmsg)
    if rc ~= NGX_OK and rc ~= NGX_DECLINED then
      error("nres.ngx: $http_x_criticality: " .. ffi_str(errmsg[0]))
    end
    local cls = rc == NGX_OK and gw_class(value_ptr[0], size_ptr[0]) or gw_class(nil, 0)
    more = gw_grant(g, r.req, now, cls)
  end
  if more == 1 and set_more_tries(req, 1, errmsg) ~= NGX_OK then
    error("nres.ngx: set_more_tries: " .. ffi_str(errmsg[0]))
  end
end

-- log_by_lua: the call's outcome, and the last try's (nres_gw_request_end).
function _M.log()
  if not R then bind() end
  local req = exdata()
  local key = tonumber(ffi_cast(uintptr_t, req))
  local r = reqs[key]
  if r == nil then return end
  reqs[key] = nil
  if r.stamp ~= start_time(req) then return end   -- another request's
  local u = r.u
  -- back to the free list (nothing runs between this and the end)
  r.u = false
  if nfree < 1024 then
    nfree = nfree + 1
    free[nfree] = r
  end
  if r.refused then return end   -- a refusal nobody answered: nothing began
  -- Not `return gw_end(...)`: a trace cannot record a tail call of a C
  -- function leaving the phase's frame ("leaving loop in root trace at
  -- ffi.meta.__call": blacklisted after 5 tries, log ran interpreted).
  gw_end(u.gw, r.req, step_now(), resp_status(req))
end

-- ------------------------------------------------------------- status

local BREAKER_STATES = { [0] = "closed", "open", "half-open", "isolated" }

local HIST_LE = {}   -- the buckets' upper bounds, s
for i = 0, HIST_BUCKETS - 1 do HIST_LE[i + 1] = tonumber(C.nres_gw_hist_bound(i)) / 1e9 end

-- A histogram at h as nres.ngx.status exports it: upper bounds (s),
-- cumulative counts, count, sum (s).
local function histogram(h)
  local count = tonumber(C.nres_gw_hist_read(h, hist_counts, hist_sum))
  local counts, acc = {}, 0
  for i = 1, HIST_BUCKETS do
    acc = acc + tonumber(hist_counts[i - 1])
    counts[i] = acc
  end
  return { le = HIST_LE, counts = counts, count = count, sum = tonumber(hist_sum[0]) / 1e9 }
end

-- The peers of every balancer upstream, for nres.ngx.status. Besides its
-- breaker's state, each peer says how the choice sees it: its score (this
-- worker's latency estimate x sqrt(in-flight + 1), ms: the lower wins a
-- pair) and its share of the tries of the last 1-2 s (the estimators'
-- samples); `avoided` when it is closed yet got under half an even share
-- of at least 10 recent tries.
function _M.status(now)
  local control = require "nres.ngx.control"
  local out = {}
  for name, u in pairs(config.upstreams) do
    if u.balancer then
      local g = u.gw
      C.nres_gw_refresh(g, now)
      local peers, recent = {}, 0
      for i = 1, u.n do
        local slot = sh_slot(u.ptr, u.idx[i])
        local q = est_quantile(u.est[i], now, 0.75, samples_box)
        C.nres_shm_slot_counts(slot, counts)
        local tries = tonumber(counts.calls)
        local okc = tonumber(counts.stops[STOP_OK])
        C.nres_breaker_stats(slot.breaker, breaker_stats)
        local gp = g.peer[i - 1]
        peers[i] = {
          drained = control.flag(control.block(u.controls + u.idx[i] * control.BYTES),
                                 control.DRAIN),
          peer = u.peer[i],
          weight = tonumber(gp.weight), backup = u.backup[i] or nil,
          share = g.weighted ~= 0 and tonumber(gp.share) or nil,
          state = BREAKER_STATES[br_state(u.br[i], now)] or "unknown",
          ejections = tonumber(breaker_stats.trips),
          refused = tonumber(breaker_stats.rejected),
          leases_expired = tonumber(breaker_stats.leases_expired),
          tries = tries, failures = tries - okc,
          timeouts = tonumber(counts.stops[STOP_DEADLINE]),
          -- no estimate yet (no try has ended): no figure, never 0 ms
          latency_p75_ms = q > 0 and tonumber(q) / 1e6 or nil,
          latency_samples = tonumber(samples_box[0]),
          recent_tries = tonumber(samples_box[0]),
          score_ms = gp.cost > 0 and gp.cost * math.sqrt(gp.inflight + 1) / 1e6 or nil,
          inflight_this_worker = tonumber(gp.inflight),
          try_seconds = histogram(u.hists + u.idx[i] * HIST_SIZE),
        }
        recent = recent + peers[i].recent_tries
      end
      for _, p in ipairs(peers) do
        p.recent_share = recent > 0 and p.recent_tries / recent or 0
        p.avoided = p.state == "closed" and recent >= 10 and p.recent_share < 0.5 / u.n
      end
      out[name] = { scope = u.scope.name, key = u.key, choice = u.choice, panic = u.panic,
                    panicking = g.panicking ~= 0, peers = peers,
                    request_seconds = histogram(u.hist) }
      require("nres.ngx.health").annotate(u, out[name], now)   -- ejected_by, checks
    end
  end
  return out
end

-- Seed this worker's random choices and break jitter (init_worker): each
-- upstream's libnres state is this worker's copy since the fork. The
-- worker's number is its shard of the shared words every request writes:
-- up to 8 workers never write one line, whatever their pids (workers n and
-- n + 8 share one, as do an old and a new worker of one number while a
-- reload drains).
-- init_worker: the nginx functions bound now, in every worker, when a
-- balancer upstream is declared (an unsupported lua-nginx-module was
-- refused when it was declared).
function _M.bind()
  for _, u in pairs(config.upstreams) do
    if u.balancer then
      if not R then bind() end
      return
    end
  end
end

function _M.seed()
  local pid = ngx and ngx.worker.pid() or 1
  local id = ngx and ngx.worker.id()
  if id then C.nres_shard_set(id) end
  math.randomseed(pid * 7919 + floor(step_now() % 1e9))
  local k = 0
  for _, u in pairs(config.upstreams) do
    if u.balancer then
      k = k + 1
      C.nres_gw_seed(u.gw, pid * 2654435761 + floor(step_now() % 1e9) + k)
    end
  end
end

return _M

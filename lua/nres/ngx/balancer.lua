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
-- half-open probes its breaker admits. Panic: when fewer than `panic`
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
-- class comes from X-Criticality (nres.ngx.config.criticality), read only
-- when a token is asked for under half a bucket. The header goes upstream
-- as the client sent it, like every other header nginx's proxy passes.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"

local C = cdef.C
local breaker_stats = ffi.new("nres_breaker_stats_t")   -- read through nres_breaker_stats
local ffi_new, ffi_cast, ffi_sizeof = ffi.new, ffi.cast, ffi.sizeof
local type, error, tonumber, tostring, pairs, ipairs, format =
  type, error, tonumber, tostring, pairs, ipairs, string.format
local floor, ceil, random, min, max = math.floor, math.ceil, math.random, math.min, math.max

ffi.cdef [[
int nres_breaker_acquire(nres_breaker_t *breaker, nres_time_t now, uint32_t *permit);
int nres_breaker_record(nres_breaker_t *breaker, nres_time_t now, uint32_t permit,
                        int outcome, int slow, nres_rng_t *rng);
void nres_breaker_release(nres_breaker_t *breaker, uint32_t permit);
void nres_budget_deposit(nres_budget_t *budget);
int nres_budget_spend(nres_budget_t *budget, nres_time_t now);
int nres_budget_spend_class(nres_budget_t *budget, nres_time_t now, int cls);
void nres_budget_refund(nres_budget_t *budget);
void nres_estimator_record(nres_estimator_t *estimator, nres_time_t now, nres_time_t latency);
typedef struct nres_gw_config_s {
  const char *name; const char *key; void *scope; void *peers;
  nres_estimator_t *estimators; const char *const *peer_names; const uint32_t *peer_slots;
  uint32_t npeers, attempts; nres_time_t deadline, attempt_timeout, hold;
  int choice; double panic; int budget, breaker;
} nres_gw_config_t;
typedef struct nres_gw_upstream_s nres_gw_upstream_t;
nres_gw_upstream_t *nres_gw_upstream_new(const nres_gw_config_t *cfg);
void nres_gw_upstream_free(nres_gw_upstream_t *u);
void nres_gw_register(nres_gw_upstream_t *u);
]]

local step_now = C.nres_step_now
local sh_acquire, sh_record, sh_slot = C.nres_shm_acquire, C.nres_shm_record, C.nres_shm_slot
local br_acquire, br_record, br_release = C.nres_breaker_acquire, C.nres_breaker_record,
  C.nres_breaker_release
local br_state = C.nres_breaker_state
local bu_spend, bu_refund, bu_deposit = C.nres_budget_spend_class, C.nres_budget_refund,
  C.nres_budget_deposit
local criticality = config.criticality
local est_record, est_quantile = C.nres_estimator_record, C.nres_estimator_quantile
local bad, scopes, new_table = config.bad, config.scopes, config.new_table
local limit = require("nres.ngx.limiter").limit

local _M = {}

local STOP_OK, STOP_ATTEMPTS, STOP_DEADLINE, STOP_CIRCUIT = 1, 3, 4, 6
local EST_SIZE = ffi_sizeof("nres_estimator_t")
local EST_PERIOD = 1e9          -- ns per estimator window (two are read)
local REFRESH = 50e6            -- ns between a worker's looks at peer states
local NEVER = 2 ^ 64            -- a lease that never ends (nres.shm)

local permit_box = ffi_new("uint32_t[1]")
local gen_box = ffi_new("uint32_t[1]")
local samples_box = ffi_new("uint64_t[1]")
local rng = ffi_new("nres_rng_t")

local EJECT = { consecutive = 5, ratio = 0.25, min_calls = 10, window = 5, buckets = 5,
                break_for = 2, break_max = 30, jitter = 0.1, probes = 1, successes = 3 }

-- The peers' breaker configuration from an eject table (seconds, ratios).
local function eject_config(e)
  local cfg = ffi_new("nres_breaker_config_t")
  C.nres_breaker_config_init(cfg)
  for k in pairs(e) do
    if EJECT[k] == nil then
      error("nres.ngx.upstream: eject." .. tostring(k) .. ": expected one of consecutive,"
            .. " ratio, min_calls, window, buckets, break_for, break_max, jitter, probes,"
            .. " successes, got an unknown field", 0)
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
  for i = 1, u.n do names[i - 1], slots[i - 1] = u.peer[i], u.idx[i] end
  local cfg = ffi_new("nres_gw_config_t", {
    name = u.name, key = u.key, scope = s.ptr, peers = u.ptr, estimators = ests,
    peer_names = names, peer_slots = slots, npeers = u.n, attempts = u.attempts,
    deadline = u.deadline, attempt_timeout = u.attempt_timeout, hold = s.hold,
    choice = u.choice == "p2c" and 0 or 1, panic = u.panic,
    budget = s.budget and 1 or 0, breaker = s.breaker and 1 or 0 })
  local g = C.nres_gw_upstream_new(cfg)
  if g == nil then error("nres.ngx.upstream: " .. u.name .. ": the runtime refused its gateway state", 0) end
  g = ffi.gc(g, C.nres_gw_upstream_free)
  C.nres_gw_register(g)
  return g
end

-- gw.upstream(name, { peers = { "host:port", ... }, scope = "upstreams",
--   choice = "p2c" | "round-robin", panic = 0.5, eject = { ... },
--   key = name (the upstream's key in the scope) }), from nres.ngx.config.
function _M.declare(name, opts)
  for k in pairs(opts) do
    if k ~= "peers" and k ~= "scope" and k ~= "choice" and k ~= "panic" and k ~= "eject"
       and k ~= "key" then
      error("nres.ngx.upstream: " .. tostring(k) .. ": expected one of peers, scope, choice,"
            .. " panic, eject, key, got an unknown field", 0)
    end
  end
  if #name > 64 then error(bad("upstream", "name", "at most 64 bytes (a balancer's name)", name), 0) end
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
  local n = #list
  local u = {
    name = name, key = key, scope = s, n = n, choice = choice, panic = panic,
    hosts = {}, ports = {}, peer = {}, idx = {}, br = {}, est = {},
    inflight = {}, cost = {}, state = {}, rr = 0, checked = -1e18, panicking = false,
    balancer = true, lookup_at = -1e18, sidx = -1, sslot = false,
  }
  local seen = {}
  for i, p in ipairs(list) do
    local host, port
    if type(p) == "string" then host, port = p:match("^([^:]+):(%d+)$") end
    port = tonumber(port)
    if not host or port < 1 or port > 65535 then
      error(bad("upstream", "peers[" .. i .. "]", "\"host:port\"", p), 0)
    end
    if seen[p] then error(bad("upstream", "peers[" .. i .. "]", "a peer listed once", p), 0) end
    seen[p] = true
    u.hosts[i], u.ports[i], u.peer[i] = host, port, p
    u.inflight[i], u.cost[i], u.state[i] = 0, 0, 0
  end
  -- The peers' table: two slots per peer (room to add a few without a new
  -- layout), each key leased for ever; estimators after it, one per slot.
  local slots = max(8, 2 * n)
  slots = slots + (8 - slots % 8) % 8
  local tbl = new_table("peers", { slots = slots, breaker = eject_config(opts.eject or {}),
                                    budget = false, limiter = false,
                                    extra = slots * EST_SIZE }, name)
  u.shm, u.ptr = tbl, tbl.shm
  local ests = ffi_cast("nres_estimator_t *", tbl.extra)   -- kept alive by tbl
  if not tbl.reused then
    for i = 0, slots - 1 do C.nres_estimator_init(ests + i, EST_PERIOD) end
  end
  local now = step_now()
  for i = 1, n do
    local idx = sh_acquire(u.ptr, u.peer[i], #u.peer[i], now, NEVER, gen_box)
    if idx < 0 then error("nres.ngx.upstream: no slot for peer " .. u.peer[i], 0) end
    u.idx[i] = idx
    u.br[i] = sh_slot(u.ptr, idx).breaker
    u.est[i] = ests + idx
  end
  local t = s.policy.spec
  u.attempts = t.attempts or 1
  u.deadline = t.deadline * 1e9
  u.attempt_timeout = (t.attempt_timeout or t.deadline) * 1e9
  u.deadline_ms = tostring(floor(u.deadline / 1e6))   -- X-Deadline-Ms, nothing inbound
  u.gw = register(u, s, ests)
  return u
end

-- ---------------------------------------------------------- peer choice

-- This worker's view of the peers, at most REFRESH old: closed or not,
-- latency estimate (ns), and whether the pool is in panic.
local function refresh(u, now)
  u.checked = now
  local healthy = 0
  for i = 1, u.n do
    local st = br_state(u.br[i], now)
    u.state[i] = st
    if st == 0 then healthy = healthy + 1 end
    if u.n > 1 then   -- one peer: no choice to make, no estimate to read
      local q = est_quantile(u.est[i], now, 0.75, samples_box)
      if samples_box[0] > 0 then
        u.cost[i] = tonumber(q)
      else
        -- No try in the estimator's windows (1-2 s): the last estimate,
        -- fading (halved about every 1.7 s), so an avoided slow peer is
        -- not flooded the moment its samples age out, yet is tried again.
        u.cost[i] = u.cost[i] * 0.98
      end
    end
  end
  u.panicking = healthy < u.panic * u.n
end

local function score(u, i) return (u.cost[i] + 1e5) * (u.inflight[i] + 1) end

-- Admit peer i: its breaker's permit, or nil if ejected. In panic every
-- peer is admitted without asking (permit false: nothing to record).
local function admit(u, i, now)
  if u.panicking then return false end
  if br_acquire(u.br[i], now, permit_box) ~= 0 then return nil end
  return permit_box[0]
end

-- A peer other than `avoid` (when there is another): index, permit.
local function pick(u, now, avoid)
  if now - u.checked > REFRESH then refresh(u, now) end
  local n = u.n
  if n == 1 then return 1, admit(u, 1, now) or false end
  if u.choice == "p2c" then
    local a = random(n)
    if a == avoid then a = a % n + 1 end
    local b = random(n - 1)
    if b >= a then b = b + 1 end
    if b == avoid then
      b = b % n + 1
      if b == a then b = b % n + 1 end
      if b == avoid then b = a end
    end
    if score(u, b) < score(u, a) then a, b = b, a end
    local p = admit(u, a, now)
    if p ~= nil then return a, p end
    if b ~= a then
      p = admit(u, b, now)
      if p ~= nil then return b, p end
    end
  end
  -- Round-robin (or both choices ejected): the next admitted peer.
  local start = u.rr
  for k = 1, n do
    local i = (start + k - 1) % n + 1
    if i ~= avoid then
      local p = admit(u, i, now)
      if p ~= nil then u.rr = i; return i, p end
    end
  end
  -- Nobody admitted but `avoid` (or nobody at all): `avoid` if it is, else
  -- the cheapest peer, unasked (no self-inflicted total outage).
  if avoid then
    local p = admit(u, avoid, now)
    if p ~= nil then return avoid, p end
  end
  local best = 1
  for i = 2, n do if score(u, i) < score(u, best) then best = i end end
  if best == avoid and n > 1 then best = best % n + 1 end
  return best, false
end
_M.pick = pick   -- for tests

-- The end of the current try of request state r: recorded into its peer.
local function finish(u, r, now, failed, timed_out)
  local i = r.peer
  u.inflight[i] = u.inflight[i] - 1
  local lat = now - r.t0
  local permit = r.ppermit
  if permit then
    br_record(u.br[i], now, permit, failed and 1 or 0, 0, rng)
  end
  est_record(u.est[i], now, failed and max(lat, u.attempt_timeout) or lat)
  sh_record(u.ptr, u.idx[i], failed and (timed_out and STOP_DEADLINE or STOP_ATTEMPTS) or STOP_OK,
            1, r.tries > 1 and 1 or 0)
  r.peer = false
end

-- ------------------------------------------------------------ the phases
--
-- Per-request cost (the three phases run on every proxied request: this
-- is the gateway's overhead over plain proxy_pass). Each phase function
-- compiles into one trace: the nginx calls are direct FFI calls
-- (nres.ngx.request says why), and the hot path calls no function of its
-- own that could have compiled first (a recorded trace stops at such a
-- call and the rest of the caller runs interpreted). The request's state
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
local set_peer, set_timeouts, set_more_tries
local NGX_OK, NGX_DECLINED, value_ptr, size_ptr, errmsg, lowcase, uintptr_t
local reqs = {}             -- request address -> state record (this worker)
local free, nfree = {}, 0   -- state records to reuse
local LOOKUP_EVERY = 1e9    -- ns between a worker's lookups of an upstream's slot

local function bind()
  R = require("nres.ngx.request").bind()
  exdata, var_get, set_header, resp_status, start_time =
    R.exdata, R.var_get, R.set_header, R.status, R.start_time
  set_peer, set_timeouts, set_more_tries = R.set_peer, R.set_timeouts, R.set_more_tries
  NGX_OK, NGX_DECLINED, value_ptr, size_ptr, errmsg, lowcase, uintptr_t =
    R.NGX_OK, R.NGX_DECLINED, R.value_ptr, R.size_ptr, R.errmsg, R.lowcase, R.uintptr_t
end

-- Request header `name` (a variable name such as "http_x_criticality"),
-- or nil. Off the hot path (the hot path inlines it).
local function header(req, name)
  local rc = var_get(req, name, #name, lowcase, 0, value_ptr, size_ptr, errmsg)
  if rc == NGX_OK then return ffi_str(value_ptr[0], size_ptr[0]) end
  if rc ~= NGX_DECLINED then error("nres.ngx: $" .. name .. ": " .. ffi_str(errmsg[0])) end
  return nil
end

local function exit_with(status, reason)
  ngx.header["X-Nres-Reason"] = reason
  ngx.status = status
  ngx.print(reason, "\n")
  return ngx.exit(status)
end

-- A state record for request `key` (from the free list when it can).
-- idx, slot, upermit: the upstream's slot and breaker permit from the
-- admission (-1, false, false without one).
local function new_state(key, stamp, u, deadline, idx, slot, upermit)
  local r
  if nfree > 0 then
    r = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
  else
    r = {}
  end
  r.stamp, r.u, r.deadline = stamp, u, deadline
  r.idx, r.slot, r.upermit, r.cls = idx, slot, upermit, false
  r.tries, r.retries, r.t0 = 0, 0, 0
  r.peer, r.ppermit, r.reserved, r.budget_refused = false, false, false, false
  r.refused = false
  reqs[key] = r
  return r
end

-- The upstream's slot in its scope's table, looked up (and its lease
-- extended) at most once a second per worker; every time while the
-- table is full (-1: the call runs without shared state).
local function lookup(u, s, now)
  local idx = sh_acquire(s.ptr, u.key, #u.key, now, s.hold, gen_box)
  if idx >= 0 then
    u.sidx, u.sslot, u.lookup_at = idx, sh_slot(s.ptr, idx), now + LOOKUP_EVERY
  else
    u.sidx, u.sslot = -1, false
    s.overflow = s.overflow + 1
  end
  return u.sidx, u.sslot
end

-- A refusal for request `key`: a record gw.refused answers from (the
-- error_page 599 location; a config without the `if` line lets the
-- request reach the balancer, which fails it: nginx's 500).
-- Returns "" (set_by_lua's value: no X-Deadline-Ms header).
local function refuse(key, stamp, u, status, reason, wait)
  local r = new_state(key, stamp, u, 0, -1, false, false)
  r.refused, r.reason, r.wait = status, reason, wait
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
-- open (503). A refused request is answered by the location's
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
  local key, stamp = tonumber(ffi_cast(uintptr_t, req)), start_time(req)
  if lname ~= nil then
    local ok, wait = limit(lname, lkey)
    if not ok then return refuse(key, stamp, u, 429, "rate limited", wait) end
  end
  local s = u.scope
  local now = step_now()
  local deadline = now + u.deadline
  local rc = var_get(req, "http_x_deadline_ms", 18, lowcase, 0, value_ptr, size_ptr, errmsg)
  if rc == NGX_OK then
    local ms = tonumber(ffi_str(value_ptr[0], size_ptr[0]))
    if ms and ms >= 0 and ms <= 9007199254740991 then
      if ms < 1 then return refuse(key, stamp, u, 504, "deadline exceeded") end
      if now + ms * 1e6 < deadline then deadline = now + ms * 1e6 end
    end
  elseif rc ~= NGX_DECLINED then
    error("nres.ngx: $http_x_deadline_ms: " .. ffi_str(errmsg[0]))
  end
  local idx, slot = u.sidx, u.sslot
  if now >= u.lookup_at then idx, slot = lookup(u, s, now) end
  local upermit = false
  if idx >= 0 and s.breaker then
    if br_acquire(slot.breaker, now, permit_box) ~= 0 then
      sh_record(s.ptr, idx, STOP_CIRCUIT, 0, 0)
      return refuse(key, stamp, u, 503, "circuit open")
    end
    upermit = permit_box[0]
  end
  new_state(key, stamp, u, deadline, idx, slot, upermit)
  -- without an inbound deadline the time left is the policy's: its string
  -- is made once (a number's tostring is a format and an interning)
  if deadline - now == u.deadline then return u.deadline_ms end
  -- Not `return tostring(...)`: a trace cannot record a tail call of a
  -- builtin returning past its start (NYI "return to lower frame"), which
  -- a side trace entered in new_state would do.
  local ms = tostring(floor((deadline - now) / 1e6))
  return ms
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
-- Returns the peer to avoid, or false when this is no retry: the request
-- came back to the balancer in a new upstream session (an internal
-- redirect, e.g. error_page to a location proxying to this upstream, with
-- no gw.log in between); its unfinished try is let go unjudged (permit
-- released, in-flight count and reserved token given back) and the
-- request goes on under its first admission (deadline, upstream permit).
local function retrying(u, r, req, now)
  local st = R.last_failure(req, R.int_out, errmsg)
  if st < 0 then error("nres.ngx: get_last_failure: " .. ffi_str(errmsg[0])) end
  local i = r.peer
  if st == 0 then
    u.inflight[i] = u.inflight[i] - 1
    if r.ppermit then br_release(u.br[i], r.ppermit) end
    if r.reserved and r.slot then bu_refund(r.slot.budget) end
    r.peer, r.reserved = false, false
    return false
  end
  finish(u, r, now, R.FAILURE[st] == "failed", R.int_out[0] == 504)
  if r.reserved then r.reserved = false; r.retries = r.retries + 1 end
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
  if r == nil or r.stamp ~= start_time(req) then
    -- no admission ran (or a stale record): no admission, no retries
    r = new_state(key, start_time(req), u, now + u.deadline, -1, false, false)
  elseif r.refused then
    return ngx.exit(ngx.ERROR)   -- nginx's 500: error_page -> gw.refused
  end
  local avoid
  if r.peer then avoid = retrying(u, r, req, now) end
  -- pick may have compiled as a trace of its own (it can get hot first):
  -- what follows it is a function of its own, so that it runs compiled too.
  return try(u, r, req, now, pick(u, now, avoid))
end

-- The rest of balance: try peer i (its breaker's permit, or false).
function try(u, r, req, now, i, permit)
  local host = u.hosts[i]
  if set_peer(req, host, #host, u.ports[i], errmsg) ~= NGX_OK then
    if permit then br_release(u.br[i], permit) end
    ngx.log(ngx.ERR, "nres: set_current_peer ", u.peer[i], ": ", ffi_str(errmsg[0]))
    return ngx.exit(ngx.ERROR)
  end
  r.peer, r.ppermit, r.t0 = i, permit, now
  local tries = r.tries + 1
  r.tries = tries
  u.inflight[i] = u.inflight[i] + 1
  local left = r.deadline - now
  local t = min(u.attempt_timeout, left)
  if t < 1e6 then t = 1e6 end
  t = floor(t / 1e6)   -- ms
  if set_timeouts(req, t, t, t, errmsg) ~= NGX_OK then
    error("nres.ngx: set_timeouts: " .. ffi_str(errmsg[0]))
  end
  -- One more try, if the policy, the time and the budget allow.
  -- A half-open probe of the upstream's breaker (permit > 0) gets no retry:
  -- one request tells whether it recovered.
  local slot = r.slot
  if tries < u.attempts and left > 2e6 and slot and (not r.upermit or r.upermit == 0) then
    local grant = true
    if u.scope.budget then
      -- The class matters only under half a budget: X-Criticality is read
      -- then (nres_budget_spend_class refuses a sheddable request there).
      local b = slot.budget
      local cls = r.cls
      if not cls then
        if b.tokens * 2 >= b.capacity then
          cls = 1
        else
          cls = criticality(header(req, "http_x_criticality"))
          r.cls = cls
        end
      end
      grant = bu_spend(b, now, cls) == 0
      if grant then r.reserved = true else r.budget_refused = true end
    end
    if grant and set_more_tries(req, 1, errmsg) ~= NGX_OK then
      error("nres.ngx: set_more_tries: " .. ffi_str(errmsg[0]))
    end
  end
end

-- log_by_lua: the call's outcome, and the last try's.
function _M.log()
  if not R then bind() end
  local req = exdata()
  local key = tonumber(ffi_cast(uintptr_t, req))
  local r = reqs[key]
  if r == nil then return end
  reqs[key] = nil
  if r.stamp ~= start_time(req) then return end   -- another request's
  local now = step_now()
  local status = resp_status(req)
  local failed = status >= 500 or status == 0
  local u, slot = r.u, r.slot
  if slot then
    if r.reserved then bu_refund(slot.budget); r.reserved = false end
    local s = u.scope
    local upermit = r.upermit
    if upermit then
      br_record(slot.breaker, now, upermit, failed and 1 or 0, 0, rng)
    end
    if not failed and s.budget then bu_deposit(slot.budget) end
    local stop = STOP_OK
    if failed then
      if status == 504 then stop = STOP_DEADLINE
      elseif r.budget_refused then stop = 5   -- budget exhausted
      else stop = STOP_ATTEMPTS end
    end
    sh_record(s.ptr, r.idx, stop, r.tries, r.retries)
  end
  -- back to the free list (nothing runs between this and finish)
  r.u, r.slot = false, false
  if nfree < 1024 then
    nfree = nfree + 1
    free[nfree] = r
  end
  if r.peer then return finish(u, r, now, failed, status == 504) end
end

-- ------------------------------------------------------------- status

local BREAKER_STATES = { [0] = "closed", "open", "half-open", "isolated" }

-- The peers of every balancer upstream, for nres.ngx.status.
function _M.status(now)
  local out = {}
  for name, u in pairs(config.upstreams) do
    if u.balancer then
      local peers = {}
      for i = 1, u.n do
        local slot = sh_slot(u.ptr, u.idx[i])
        local q = est_quantile(u.est[i], now, 0.75, samples_box)
        local tries = tonumber(slot.calls)
        local okc = tonumber(slot.stops[STOP_OK])
        C.nres_breaker_stats(slot.breaker, breaker_stats)
        peers[i] = {
          peer = u.peer[i],
          state = BREAKER_STATES[br_state(u.br[i], now)] or "unknown",
          ejections = tonumber(breaker_stats.trips),
          refused = tonumber(breaker_stats.rejected),
          tries = tries, failures = tries - okc,
          timeouts = tonumber(slot.stops[STOP_DEADLINE]),
          latency_p75_ms = samples_box[0] > 0 and tonumber(q) / 1e6 or 0,
          latency_samples = tonumber(samples_box[0]),
          inflight_this_worker = u.inflight[i],
        }
      end
      refresh(u, now)
      out[name] = { scope = u.scope.name, key = u.key, choice = u.choice, panic = u.panic,
                    panicking = u.panicking, peers = peers }
    end
  end
  return out
end

-- Seed this worker's random choices and break jitter (init_worker).
function _M.seed()
  local pid = ngx and ngx.worker.pid() or 1
  math.randomseed(pid * 7919 + floor(step_now() % 1e9))
  rng.state = pid * 2654435761 + 1
end

return _M

-- nres.ngx.status: what the shared tables hold, as a Lua table (snapshot),
-- JSON or Prometheus text (the /nres/status content handler).
local ffi = require "ffi"
local cdef = require "nres.cdef"
local run = require "nres.run"
local config = require "nres.ngx.config"

local C = cdef.C
-- Counters of shared state are read through the runtime's stats functions
-- (their fields are the runtime's to lay out); one box each, reused.
local breaker_stats = ffi.new("nres_breaker_stats_t")
local budget_stats = ffi.new("nres_budget_stats_t")
local rate_stats = ffi.new("nres_ratelimit_stats_t")
local tonumber, tostring, pairs, ipairs, format = tonumber, tostring, pairs, ipairs, string.format
local concat, find = table.concat, string.find
local step_now = C.nres_step_now
local scopes, limiters = config.scopes, config.limiters
local reasons = run.reasons
local ngx = ngx

local _M = {}

-- ------------------------------------------------------------- status

local stop_names = reasons
local BREAKER_STATES = { [0] = "closed", "open", "half-open", "isolated" }
local REJECTS = { [0] = "breaker", "budget", "rate", "concurrency", "draining", "throttle" }

local function by_refused(a, b) return a.rate_refused > b.rate_refused end

-- A table's status. A limiter lists only its most refused keys (`top`),
-- with totals over all of them: its keys are clients, thousands of them.
local function scope_status(s, now, worker_local, top)
  local st = s.shm:stats()
  -- lookups refused with the table full: Lua's, and libnres's (a client
  -- limiter's admissions, a balancer upstream's slot lookups)
  local overflow = s.overflow + (s.gw and tonumber(s.gw.overflow) or 0)
  for _, u in pairs(config.upstreams) do
    if u.scope == s and u.gw then overflow = overflow + tonumber(u.gw.overflow) end
  end
  st.overflow_this_worker = overflow
  if s.hedged then st.hedges_won_this_worker = s.hedges_won end
  local keys = {}
  local asked, refused = 0, 0
  for i = 0, s.shm.slots - 1 do
    local key, gen, lease = s.shm:key(i)
    if key then
      local slot = s.shm:slot(i)
      local counts = s.shm:counts(i)   -- summed over the slot's shards
      local k = {
        key = key, slot = i,
        calls = counts.calls, attempts = counts.attempts, retries = counts.retries, stops = {},
        lease = math.max(0, (lease - now) / 1e9),   -- s before it may be evicted
      }
      for stop = 1, 10 do
        local n = counts.stops[stop]
        if n > 0 then k.stops[stop_names[stop]] = n end
      end
      if s.breaker then
        local state = C.nres_breaker_state(slot.breaker, now)
        k.breaker = BREAKER_STATES[state]
        C.nres_breaker_stats(slot.breaker, breaker_stats)
        k.breaker_trips = tonumber(breaker_stats.trips)
        k.breaker_rejected = tonumber(breaker_stats.rejected)
        k.leases_expired = tonumber(breaker_stats.leases_expired)
      end
      if s.budget then
        k.budget = C.nres_budget_level(slot.budget, now)
        C.nres_budget_stats(slot.budget, budget_stats)
        k.budget_spent = tonumber(budget_stats.spent)
        k.budget_refused = tonumber(budget_stats.refused)
      end
      if s.ratelimit or s.rate then
        C.nres_ratelimit_stats(slot.ratelimit, rate_stats)
        k.rate_refused = tonumber(rate_stats.refused)
        asked, refused = asked + k.calls, refused + k.rate_refused
      end
      if worker_local then
        local cp = s.cps and s.cps[i + 1]
        if cp ~= nil and s.gens[i + 1] == gen then
          local rej = {}
          for r = 0, 5 do rej[REJECTS[r]] = tonumber(cp.n_rejects[r]) end
          k.this_worker = { rejects = rej, retries = tonumber(cp.n_retries),
                            hedges = tonumber(cp.n_hedges),
                            hedges_won = tonumber(cp.n_hedges_won),
                            hedges_canceled = tonumber(cp.n_abandoned),
                            refused_by_class = {
                              critical = tonumber(cp.n_class_rejects[0]),
                              default = tonumber(cp.n_class_rejects[1]),
                              sheddable = tonumber(cp.n_class_rejects[2]) } }
          if cp.bulkhead ~= nil then   -- this worker's concurrency limit now
            k.this_worker.limit = tonumber(C.nres_bulkhead_limit(cp.bulkhead))
          end
        end
      end
      if not top or k.rate_refused > 0 then keys[#keys + 1] = k end
    end
  end
  if top then
    table.sort(keys, by_refused)
    for i = #keys, top + 1, -1 do keys[i] = nil end
    st.asked, st.refused = asked, refused
  end
  st.keys = keys
  return st
end

-- JSON: lists (keys, peers) as arrays even when empty; the maps
-- (scopes, limiters, upstreams, stops) stay objects. Debian's lua-cjson
-- 2.1.0 has no empty_array_mt and writes {} for any empty table, so an
-- empty list is encoded as a marker string and the marker replaced by [].
local EMPTY = "nres-empty-list-" .. tostring({}):sub(8)
local EMPTY_JSON = ('"' .. EMPTY .. '"'):gsub("%p", "%%%0")   -- as a pattern

-- Replace an empty list t[field] by the marker; remember where in emptied.
-- (A function of its own, not a closure per call: a trace that reaches
-- this from a hot caller must not meet a new function, which is NYI.)
local function mark(emptied, t, field)
  if next(t[field]) == nil then
    emptied[#emptied + 1] = t
    emptied[#emptied + 1] = field
    t[field] = EMPTY
  end
end

function _M.json(snap)
  local emptied = {}
  for _, group in pairs { snap.scopes, snap.limiters } do
    for _, st in pairs(group) do mark(emptied, st, "keys") end
  end
  for _, u in pairs(snap.upstreams or {}) do mark(emptied, u, "peers") end
  if snap.fleet then mark(emptied, snap.fleet, "entries") end
  local text = require("cjson.safe").encode(snap)
  for i = 1, #emptied, 2 do emptied[i][emptied[i + 1]] = {} end
  return (text:gsub(EMPTY_JSON, "[]"))
end

-- The fleet agent's view (gw.fleet(path)): nres-syncd rewrites its status
-- file each second, so its age says whether the agent is alive; a file
-- that is missing or not JSON is reported as such, never raised.
local function fleet_status(path)
  local f = { status_file = path, entries = {} }
  local file = io.open(path, "r")
  if not file then
    f.error = "no status file"
    return f
  end
  local st = require("cjson.safe").decode(file:read("*a") or "")
  file:close()
  if type(st) ~= "table" then
    f.error = "not JSON"
    return f
  end
  f.node, f.connected = st.node, st.connected == 1
  if type(st.written_unix) == "number" then   -- seconds since the agent wrote it
    f.age_s = math.max(0, os.time() - st.written_unix)
  end
  f.rounds, f.failures = st.rounds, st.failures
  f.entries = type(st.entries) == "table" and st.entries or {}
  return f
end

-- The whole status as a Lua table.
function _M.snapshot()
  local now = step_now()
  local out = { worker = ngx and ngx.worker.id() or 0, pid = ngx and ngx.worker.pid() or 0,
                scopes = {}, limiters = {} }
  for name, s in pairs(scopes) do out.scopes[name] = scope_status(s, now, true) end
  for name, s in pairs(limiters) do
    local st = scope_status(s, now, false, 20)
    st.rate, st.burst = s.rate, s.burst
    out.limiters[name] = st
  end
  out.upstreams = require("nres.ngx.balancer").status(now)
  if config.fleet_status then out.fleet = fleet_status(config.fleet_status) end
  return out
end

local function label(v)
  return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

-- Prometheus text exposition (version 0.0.4) of a snapshot. The writer is
-- plain functions over one table (no closures: a status scrape compiles).
local function emit(out, name, kind, help, labels, value)
  local n = out.n
  if not out.seen[name] then
    out.seen[name] = true
    out[n + 1] = "# HELP " .. name .. " " .. help
    out[n + 2] = "# TYPE " .. name .. " " .. kind
    n = n + 2
  end
  out[n + 1] = format("%s{%s} %s", name, labels, tostring(value))
  out.n = n + 1
end

local function breaker_code(name)
  for c = 0, 3 do if BREAKER_STATES[c] == name then return c end end
  return 0
end

local function emit_key(out, kind, kl, k)
  emit(out, "nres_calls_total", "counter", "calls ended (limiters: admissions asked)", kl, k.calls)
  for reason, c in pairs(k.stops) do
    emit(out, "nres_stops_total", "counter", "calls ended, by reason",
         kl .. ',reason="' .. label(reason) .. '"', c)
  end
  if kind == "scope" then
    emit(out, "nres_attempts_total", "counter", "upstream attempts", kl, k.attempts)
    emit(out, "nres_retries_total", "counter", "upstream retries", kl, k.retries)
  end
  if k.breaker then
    emit(out, "nres_breaker_state", "gauge", "0 closed, 1 open, 2 half-open, 3 isolated", kl,
         breaker_code(k.breaker))
    emit(out, "nres_breaker_trips_total", "counter", "times the breaker opened", kl,
         k.breaker_trips)
    emit(out, "nres_breaker_rejected_total", "counter", "admissions the breaker refused", kl,
         k.breaker_rejected)
    emit(out, "nres_leases_expired_total", "counter",
         "probe permits given back by their lease, not their holder", kl, k.leases_expired)
  end
  if k.budget then
    emit(out, "nres_budget_tokens", "gauge", "retry budget tokens available", kl,
         format("%.3f", k.budget))
    emit(out, "nres_budget_spent_total", "counter", "retries the budget allowed", kl,
         k.budget_spent)
    emit(out, "nres_budget_refused_total", "counter", "retries the budget refused", kl,
         k.budget_refused)
  end
  if k.rate_refused then
    emit(out, "nres_rate_refused_total", "counter", "rate limit refusals", kl, k.rate_refused)
  end
end

local function emit_tables(out, group, kind)
  local names = {}
  for name in pairs(group) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local st = group[name]
    local sl = format('%s="%s"', kind, label(name))
    emit(out, "nres_table_slots", "gauge", "keys the shared table holds", sl, st.slots)
    emit(out, "nres_table_live", "gauge", "keys in the shared table now", sl, st.live)
    emit(out, "nres_table_bytes", "gauge", "bytes of the shared mapping", sl, st.bytes)
    emit(out, "nres_table_inserts_total", "counter", "keys moved in", sl, st.inserts)
    emit(out, "nres_table_evictions_total", "counter", "keys moved out for room", sl,
         st.evictions)
    emit(out, "nres_table_full_total", "counter", "lookups refused: set full of leased keys",
         sl, st.full)
    if st.asked then
      emit(out, "nres_limiter_asked_total", "counter", "admissions asked of a limiter", sl,
           st.asked)
      emit(out, "nres_limiter_refused_total", "counter", "admissions a limiter refused", sl,
           st.refused)
    end
    for _, k in ipairs(st.keys) do
      emit_key(out, kind, format('%s,key="%s"', sl, label(k.key)), k)
    end
  end
end

-- Balancer upstreams' peers (nres.ngx.balancer).
local function emit_peers(out, ups)
  local names = {}
  for name in pairs(ups) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local u = ups[name]
    emit(out, "nres_upstream_panic", "gauge", "1 while too few peers are healthy and all get"
         .. " traffic", format('upstream="%s"', label(name)), u.panicking and 1 or 0)
    for _, p in ipairs(u.peers) do
      local pl = format('upstream="%s",peer="%s"', label(name), label(p.peer))
      emit(out, "nres_peer_state", "gauge", "0 closed, 1 ejected (open), 2 half-open", pl,
           breaker_code(p.state))
      emit(out, "nres_peer_ejections_total", "counter", "times the peer was ejected", pl,
           p.ejections)
      emit(out, "nres_peer_leases_expired_total", "counter",
           "probe permits given back by their lease, not their holder", pl, p.leases_expired)
      emit(out, "nres_peer_tries_total", "counter", "tries sent to the peer", pl, p.tries)
      emit(out, "nres_peer_failures_total", "counter", "tries that failed (5xx, connect"
           .. " error, timeout)", pl, p.failures)
      emit(out, "nres_peer_latency_p75_seconds", "gauge", "recent p75 try latency", pl,
           format("%.6f", p.latency_p75_ms / 1e3))
    end
  end
end

local function emit_fleet(out, f)
  emit(out, "nres_fleet_connected", "gauge", "1 when the fleet agent reaches Redis", "", f.connected and 1 or 0)
  if f.age_s then
    emit(out, "nres_fleet_status_age_seconds", "gauge", "seconds since the fleet agent last wrote its status", "", f.age_s)
  end
  for _, e in ipairs(f.entries) do
    local l = format('scope="%s",kind="%s"', label(e.scope), label(e.kind))
    emit(out, "nres_fleet_synced", "gauge", "1 while the entry follows the fleet, 0 on local shares", l,
         e.synced == 1 and 1 or 0)
    emit(out, "nres_fleet_hosts", "gauge", "hosts of the fleet seen for the entry", l, e.hosts or 0)
  end
end

function _M.prometheus(snap)
  local out = { n = 0, seen = {} }
  emit_tables(out, snap.scopes, "scope")
  emit_tables(out, snap.limiters, "limiter")
  emit_peers(out, snap.upstreams or {})
  if snap.fleet then emit_fleet(out, snap.fleet) end
  return concat(out, "\n", 1, out.n) .. "\n"
end

-- Content handler for /nres/status: JSON (default, ?format=json) or
-- Prometheus text (?format=prometheus, or an Accept of text/plain).
function _M.status()
  local snap = _M.snapshot()
  local fmt = ngx.var.arg_format
  local accept = ngx.var.http_accept
  if fmt == "prometheus" or (fmt == nil and accept and find(accept, "text/plain", 1, true)) then
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(_M.prometheus(snap))
    return
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.print(_M.json(snap), "\n")
end

return _M

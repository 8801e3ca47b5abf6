-- SPDX-License-Identifier: MIT
-- nres.ngx.status: what the shared tables hold, as a Lua table (snapshot),
-- JSON or Prometheus text (the /nres/status content handler).
local ffi = require "ffi"
local cdef = require "nres.cdef"
local run = require "nres.run"
local config = require "nres.ngx.config"
local keytext = require "nres.ngx.keytext"

local C = cdef.C
-- Counters of shared state are read through the runtime's stats functions
-- (their fields are the runtime's to lay out); one box each, reused.
local breaker_stats = ffi.new("nres_breaker_stats_t")
local budget_stats = ffi.new("nres_budget_stats_t")
local until_box = ffi.new("nres_time_t[1]")   -- nres_breaker_peek's
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
        key = keytext.key(key, s.keys), slot = i,
        calls = counts.calls, attempts = counts.attempts, retries = counts.retries, stops = {},
        lease = math.max(0, (lease - now) / 1e9),   -- s before it may be evicted
      }
      for stop = 1, #stop_names do
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
        if state == 1 and C.nres_breaker_peek(slot.breaker, now, until_box) == 1 then
          k.break_left = math.max(0, (tonumber(until_box[0]) - now) / 1e9)
        end
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
  if top then   -- the most refused keys, and the refusals of the rest
    table.sort(keys, by_refused)
    for i = #keys, top + 1, -1 do keys[i] = nil end
    local listed = 0
    for i = 1, #keys do listed = listed + keys[i].rate_refused end
    st.asked, st.refused, st.others_refused = asked, refused, refused - listed
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
  for _, e in ipairs(f.entries) do   -- someone else's file: its text made valid
    for k, v in pairs(e) do if type(v) == "string" then e[k] = keytext.text(v) end end
  end
  if type(f.node) == "string" then f.node = keytext.text(f.node) end
  return f
end

-- The whole status as a Lua table.
function _M.snapshot()
  local now = step_now()
  local out = { worker = ngx and ngx.worker.id() or 0, pid = ngx and ngx.worker.pid() or 0,
                scopes = {}, limiters = {} }
  local control = require "nres.ngx.control"
  for name, s in pairs(scopes) do
    local st = scope_status(s, now, true)
    local c = control.state(s.control)
    if c then st.dry_run, st.would_refuse = c.dry_run, c.would_refuse end
    out.scopes[name] = st
  end
  for name, s in pairs(limiters) do
    local st = scope_status(s, now, false, s.top)
    st.rate, st.burst, st.top = s.rate, s.burst, s.top
    local c = control.state(s.control)
    if c then   -- the control API's dry-run, and its rate if it set one
      st.dry_run, st.would_refuse = c.dry_run, c.would_refuse
      if c.rate then st.rate, st.burst, st.rate_set = c.rate, c.burst, true end
    end
    out.limiters[name] = st
  end
  out.upstreams = require("nres.ngx.balancer").status(now)
  if config.fleet_status then out.fleet = fleet_status(config.fleet_status) end
  return out
end

-- ------------------------------------------------------ Prometheus
--
-- Metric families, declared once: name, type, help, the rows they are
-- read from and the field of each row (or a function of the row). A new
-- metric is one line here; the exporter walks this list, so each family's
-- lines come out together (the text format forbids a family in pieces).
-- Rows (prom_rows): table (a scope's or limiter's shared table: labels
-- scope= or limiter=), key (a scope's key: + key=), limiter (a limiter's
-- totals), limiter_key (one of its `top` most refused keys), upstream,
-- peer (+ peer=), fleet, fleet_entry. A field that is a map gives one
-- line per entry, its name in the label `by`; a row without the field
-- gives no line.
local function state_code(s)
  for c = 0, 3 do if BREAKER_STATES[c] == s then return c end end
  return 0
end
local function flag(v) return v and 1 or 0 end

local FAMILIES = {
  { "nres_table_slots", "gauge", "keys the shared table holds", "table", "slots" },
  { "nres_table_live", "gauge", "keys in the shared table now", "table", "live" },
  { "nres_table_bytes", "gauge", "bytes of the shared mapping", "table", "bytes" },
  { "nres_table_inserts_total", "counter", "keys moved in", "table", "inserts" },
  { "nres_table_evictions_total", "counter", "keys moved out for room", "table", "evictions" },
  { "nres_table_full_total", "counter", "lookups refused: set full of leased keys", "table",
    "full" },
  { "nres_dry_run", "gauge", "1 while the control API's dry-run lets refusals through",
    "table", function(t) return t.dry_run ~= nil and flag(t.dry_run) or nil end },
  { "nres_would_refuse_total", "counter", "requests a dry-run let through, by the refusal"
    .. " they would have had", "table", "would_refuse", by = "reason" },
  { "nres_calls_total", "counter", "calls ended", "key", "calls" },
  { "nres_stops_total", "counter", "calls ended, by reason", "key", "stops", by = "reason" },
  { "nres_attempts_total", "counter", "upstream attempts", "key", "attempts" },
  { "nres_retries_total", "counter", "upstream retries", "key", "retries" },
  { "nres_breaker_state", "gauge", "0 closed, 1 open, 2 half-open, 3 isolated", "key",
    function(k) return k.breaker and state_code(k.breaker) end },
  { "nres_breaker_trips_total", "counter", "times the breaker opened", "key", "breaker_trips" },
  { "nres_breaker_rejected_total", "counter", "admissions the breaker refused", "key",
    "breaker_rejected" },
  { "nres_leases_expired_total", "counter", "probe permits given back by their lease, not their"
    .. " holder", "key", "leases_expired" },
  { "nres_budget_tokens", "gauge", "retry budget tokens available", "key", "budget" },
  { "nres_budget_spent_total", "counter", "retries the budget allowed", "key", "budget_spent" },
  { "nres_budget_refused_total", "counter", "retries the budget refused", "key",
    "budget_refused" },
  { "nres_rate_refused_total", "counter", "rate limit refusals of a scope's key", "key",
    "rate_refused" },
  { "nres_limiter_asked_total", "counter", "admissions asked of a limiter", "limiter", "asked" },
  { "nres_limiter_refused_total", "counter", "admissions a limiter refused", "limiter",
    "refused" },
  { "nres_limiter_key_refused", "gauge", "refusals of one of the limiter's most refused keys"
    .. " (while it holds the key)", "limiter_key", "rate_refused" },
  { "nres_limiter_key_asked", "gauge", "admissions asked by one of the limiter's most refused"
    .. " keys (while it holds the key)", "limiter_key", "calls" },
  { "nres_limiter_others_refused", "gauge", "refusals of the keys not listed by key",
    "limiter", "others_refused" },
  { "nres_upstream_panic", "gauge", "1 while too few peers are healthy and all get traffic",
    "upstream", function(u) return flag(u.panicking) end },
  { "nres_peer_state", "gauge", "0 closed, 1 ejected (open), 2 half-open", "peer",
    function(p) return state_code(p.state) end },
  { "nres_peer_ejected_by", "gauge", "1 while the peer is ejected, by whom: active (health"
    .. " checks), passive (its tries) or operator", "peer",
    function(p) return p.ejected_by and { [p.ejected_by] = 1 } end, by = "by" },
  { "nres_peer_health_checks_total", "counter", "active health checks of the peer, by result"
    .. " (ok, status, timeout, error)", "peer", function(p) return p.health and p.health.checks end,
    by = "result" },
  { "nres_peer_drained", "gauge", "1 while the control API drains the peer (no new tries)",
    "peer", function(p) return flag(p.drained) end },
  { "nres_peer_ejections_total", "counter", "times the peer was ejected", "peer", "ejections" },
  { "nres_peer_leases_expired_total", "counter", "probe permits given back by their lease, not"
    .. " their holder", "peer", "leases_expired" },
  { "nres_peer_tries_total", "counter", "tries sent to the peer", "peer", "tries" },
  { "nres_peer_failures_total", "counter", "tries that failed (5xx, connect error, timeout)",
    "peer", "failures" },
  { "nres_peer_latency_p75_seconds", "gauge", "recent p75 try latency (none without a"
    .. " successful sample)", "peer",
    function(p) return p.latency_p75_ms and p.latency_p75_ms / 1e3 end },
  { "nres_peer_score_seconds", "gauge", "the choice's view of the peer: latency estimate x"
    .. " sqrt(in-flight + 1), the lower wins", "peer",
    function(p) return p.score_ms and p.score_ms / 1e3 end },
  { "nres_peer_recent_share", "gauge", "the peer's share of the tries of the last 1-2 s",
    "peer", "recent_share" },
  { "nres_peer_avoided", "gauge", "1 while the peer is closed but the choice avoids it",
    "peer", function(p) return flag(p.avoided) end },
  { "nres_upstream_request_duration_seconds", "histogram", "requests' durations, admission"
    .. " to end, every try included", "upstream", "request_seconds" },
  { "nres_peer_try_duration_seconds", "histogram", "tries' durations, failed ones included",
    "peer", "try_seconds" },
  { "nres_fleet_connected", "gauge", "1 when the fleet agent reaches Redis", "fleet",
    function(f) return flag(f.connected) end },
  { "nres_fleet_status_age_seconds", "gauge", "seconds since the fleet agent last wrote its"
    .. " status", "fleet", "age_s" },
  { "nres_fleet_synced", "gauge", "1 while the entry follows the fleet, 0 on local shares",
    "fleet_entry", function(e) return e.synced == 1 and 1 or 0 end },
  { "nres_fleet_hosts", "gauge", "hosts of the fleet seen for the entry", "fleet_entry",
    function(e) return e.hosts or 0 end },
}
_M.FAMILIES = FAMILIES

-- A label value: valid UTF-8 text (keytext.text), escaped for the format.
local function label(v)
  return (keytext.text(tostring(v)):gsub("[\\\"\n]", { ["\\"] = "\\\\", ['"'] = '\\"',
                                                       ["\n"] = "\\n" }))
end

local function sorted(map)
  local names = {}
  for name in pairs(map or {}) do names[#names + 1] = name end
  table.sort(names)
  return names
end

local function add(rows, kind, labels, v)
  local list = rows[kind]
  list[#list + 1] = labels
  list[#list + 1] = v
end

-- The snapshot's rows, by kind: pairs of (label text, row table).
local function prom_rows(snap)
  local rows = { table = {}, key = {}, limiter = {}, limiter_key = {}, upstream = {},
                 peer = {}, fleet = {}, fleet_entry = {} }
  for _, kind in ipairs { "scope", "limiter" } do
    local group = kind == "scope" and snap.scopes or snap.limiters
    for _, name in ipairs(sorted(group)) do
      local st = group[name]
      local tl = format('%s="%s"', kind, label(name))
      add(rows, "table", tl, st)
      if kind == "limiter" then add(rows, "limiter", tl, st) end
      for _, k in ipairs(st.keys) do
        add(rows, kind == "scope" and "key" or "limiter_key",
            format('%s,key="%s"', tl, label(k.key)), k)
      end
    end
  end
  local ups = snap.upstreams or {}
  for _, name in ipairs(sorted(ups)) do
    local u = ups[name]
    local ul = format('upstream="%s"', label(name))
    add(rows, "upstream", ul, u)
    for _, p in ipairs(u.peers) do add(rows, "peer", format('%s,peer="%s"', ul, label(p.peer)), p) end
  end
  local f = snap.fleet
  if f then
    add(rows, "fleet", "", f)
    for _, e in ipairs(f.entries) do
      add(rows, "fleet_entry", format('scope="%s",kind="%s"', label(e.scope), label(e.kind)), e)
    end
  end
  return rows
end

local function number(v)
  if v == true or v == false then return v and "1" or "0" end
  v = tonumber(v)
  if v == nil then return nil end
  if v ~= v then return "NaN" end
  if v == 1 / 0 then return "+Inf" end
  if v == -1 / 0 then return "-Inf" end
  if v % 1 == 0 and v > -2 ^ 53 and v < 2 ^ 53 then return format("%d", v) end
  return format("%.9g", v)
end

local function sample(out, name, labels, v)
  local s = number(v)
  if s == nil then return end
  out[#out + 1] = labels == "" and (name .. " " .. s) or format("%s{%s} %s", name, labels, s)
end

-- A histogram row value: { le = { upper bounds (s) }, counts = { cumulative },
-- count, sum (s) }.
local function histogram(out, name, labels, h)
  local sep = labels == "" and "" or ","
  for i, le in ipairs(h.le) do
    sample(out, name .. "_bucket", format('%s%sle="%s"', labels, sep, number(le)), h.counts[i])
  end
  sample(out, name .. "_bucket", labels .. sep .. 'le="+Inf"', h.count)
  sample(out, name .. "_sum", labels, h.sum)
  sample(out, name .. "_count", labels, h.count)
end

-- Prometheus text exposition (version 0.0.4) of a snapshot.
function _M.prometheus(snap)
  local rows = prom_rows(snap)
  local out = {}
  for _, fam in ipairs(FAMILIES) do
    local name, kind, help, over, field, by = fam[1], fam[2], fam[3], fam[4], fam[5], fam.by
    local list = rows[over]
    local first = #out + 1
    for i = 1, #list, 2 do
      local labels, row = list[i], list[i + 1]
      local v
      if type(field) == "function" then v = field(row) else v = row[field] end
      if v == nil then
        -- no line: this row has no such figure
      elseif kind == "histogram" then
        histogram(out, name, labels, v)
      elseif by then
        local sep = labels == "" and "" or ","
        for _, k in ipairs(sorted(v)) do
          sample(out, name, format('%s%s%s="%s"', labels, sep, by, label(k)), v[k])
        end
      else
        sample(out, name, labels, v)
      end
    end
    if #out >= first then
      table.insert(out, first, "# TYPE " .. name .. " " .. kind)
      table.insert(out, first, "# HELP " .. name .. " " .. help)
    end
  end
  return concat(out, "\n") .. "\n"
end

-- Content handler for /nres/status: JSON (default, ?format=json),
-- Prometheus text (?format=prometheus, or an Accept of text/plain) or the
-- HTML page (?format=html, or an Accept of text/html: a browser).
function _M.status()
  local snap = _M.snapshot()
  local fmt = ngx.var.arg_format
  local accept = ngx.var.http_accept
  if fmt == "prometheus" or (fmt == nil and accept and find(accept, "text/plain", 1, true)) then
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(_M.prometheus(snap))
    return
  end
  if fmt == "html" or (fmt == nil and accept and find(accept, "text/html", 1, true)) then
    ngx.header["Content-Type"] = "text/html; charset=utf-8"
    ngx.print(require("nres.ngx.page").html(snap, ngx.now()))
    return
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.print(_M.json(snap), "\n")
end

return _M

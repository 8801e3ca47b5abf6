-- SPDX-License-Identifier: MIT
-- nres.ngx.control: the operator's hand on the shared tables, without a
-- reload. Each change is in a table's shared memory (a control block,
-- nres_gw_control_t, in its region file, or the breaker itself), so every
-- worker sees it at once, the nginx module too, and it survives reloads;
-- each is logged once in error.log ([notice], what changed, from where).
--
--   location = /nres/control { content_by_lua_block { require("nres.ngx").control() } }
--   -- off unless a location says so; loopback only, plus
--   -- gw.control{ allow = { "10.1.0.0/16", "2001:db8::7" } }
--
-- JSON in (POST) and out; GET answers the control state. Operations (also
-- from Lua: gw.apply(op), e.g. in an init_worker timer or a test):
--   { "action": "isolate" | "close" | "reset", "scope": S, "key": K }
--   { "action": "isolate" | "close" | "reset", "upstream": U }   (its key)
--   { "action": "eject" | "restore" | "drain", "upstream": U, "peer": "host:port" }
--   { "action": "weight", "upstream": U, "peer": "host:port", "weight": 1..10000 }
--   { "action": "add", "upstream": U, "peer": "ip:port" | "[v6]:port",
--     "weight": 1..10000 (1), "backup": true | false (false) }
--   { "action": "remove", "upstream": U, "peer": "host:port" }
--   { "action": "rate", "limiter": L, "rate": R, "burst": B }
--   { "action": "dry_run", "scope": S | "limiter": L, "on": true | false }
-- isolate holds a breaker open until closed; close ends an open or
-- isolated state; reset closes and clears its counts. eject isolates a
-- peer's breaker; drain gives a peer no new tries (in-flight ones finish;
-- draining the last peer that is not drained is refused); restore undoes
-- both. weight replaces a peer's declared weight (docs/gateway-peers.md)
-- in every worker within 50 ms. add and remove change the upstream's
-- members in every worker at its next pick: a removed peer gets no new
-- try, its tries in flight finish (its slot is freed once they did); the
-- last primary peer that is not drained is never removed. A dry-run decides as usual but lets the request through, counting
-- `would_refuse` by reason ("circuit open" for a scope's breaker in
-- balancer mode, "rate limited" for a limiter). Bad input gets a 4xx and
-- the reason; nothing is changed by a request that is refused.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"
local keytext = require "nres.ngx.keytext"

local C = cdef.C
local type, tostring, tonumber, pairs, ipairs, format = type, tostring, tonumber, pairs,
  ipairs, string.format
local concat, sort = table.concat, table.sort
local band = require("bit").band

require "nres.cdef.gateway"   -- nres_gw_control_t and its functions

local _M = {}

local DRY_RUN, DRAIN, RATE_SET = 1, 2, 4
local WOULD = { [0] = "circuit open", "rate limited" }
local STATES = { [0] = "closed", "open", "half-open", "isolated" }
_M.BYTES = ffi.sizeof("nres_gw_control_t")
_M.DRY_RUN, _M.DRAIN = DRY_RUN, DRAIN

-- The control block at ptr (a table's extra memory).
function _M.block(ptr) return ffi.cast("nres_gw_control_t *", ptr) end

local function flag(c, f) return c ~= nil and band(c.flags, f) ~= 0 end
_M.flag = flag

-- What a block holds, for the status: dry_run, would_refuse by reason,
-- and (a limiter's) the rate and burst set, if any.
function _M.state(c)
  if c == nil then return nil end
  local would = {}
  for i = 0, 1 do
    local n = tonumber(c.would_refuse[i])
    if n > 0 then would[WOULD[i]] = n end
  end
  local st = { dry_run = flag(c, DRY_RUN), would_refuse = would }
  if flag(c, RATE_SET) then st.rate, st.burst = tonumber(c.rate), tonumber(c.burst) end
  return st
end

-- ------------------------------------------------------------ operations

local ACTIONS = {
  isolate = { "scope", "key", "upstream" }, close = { "scope", "key", "upstream" },
  reset = { "scope", "key", "upstream" },
  eject = { "upstream", "peer" }, restore = { "upstream", "peer" },
  drain = { "upstream", "peer" }, weight = { "upstream", "peer", "weight" },
  add = { "upstream", "peer", "weight", "backup" }, remove = { "upstream", "peer" },
  rate = { "limiter", "rate", "burst" },
  dry_run = { "scope", "limiter", "on" },
}

local function fail(status, field, expected, got)
  local g = type(got) == "string" and format("%q", keytext.text(got)) or tostring(got)
  return nil, status, format("%s: expected %s, got %s", field, expected, g)
end

local function names(map, pred)
  local t = {}
  for k, v in pairs(map) do if not pred or pred(v) then t[#t + 1] = k end end
  sort(t)
  return #t > 0 and concat(t, ", ") or "none declared"
end

-- The slot of `key` in scope s (its text as the status shows it, or its
-- bytes), or nil: never inserted.
local function find_key(s, key)
  for i = 0, s.shm.slots - 1 do
    local k = s.shm:key(i)
    if k and (k == key or keytext.key(k) == key) then return i end
  end
  return nil
end

local function breaker_target(op)
  local s, key = op.scope, op.key
  if op.upstream ~= nil then
    if s ~= nil or key ~= nil then
      return fail(400, "upstream", "either upstream or scope and key", op.upstream)
    end
    local u = config.upstreams[op.upstream]
    if u == nil or not u.balancer then
      return fail(404, "upstream", "one of " .. names(config.upstreams,
                  function(x) return x.balancer end), op.upstream)
    end
    s, key = u.scope.name, u.key
  end
  local sc = config.scopes[s]
  if sc == nil then return fail(404, "scope", "one of " .. names(config.scopes), s) end
  if not sc.breaker then return fail(400, "scope", "a scope whose policy has a breaker", s) end
  if type(key) ~= "string" then return fail(400, "key", "a key of the scope (a string)", key) end
  local i = find_key(sc, key)
  if i == nil then return fail(404, "key", "a key scope " .. s .. " holds now", key) end
  return sc.shm:slot(i).breaker, format("scope %s key %s", s, keytext.key(key))
end

-- Balancer upstream op.upstream, its view of the members brought up to
-- date; or nil, status, reason.
local function upstream_target(op)
  local u = config.upstreams[op.upstream]
  if u == nil or not u.balancer then
    return fail(404, "upstream", "one of " .. names(config.upstreams,
                function(x) return x.balancer end), op.upstream)
  end
  require("nres.ngx.balancer").sync(u)
  return u
end

-- The members' names of u, for a reason.
local function members(u)
  local t = {}
  for i = 1, u.n do if u.live[i] then t[#t + 1] = u.peer[i] end end
  return #t > 0 and concat(t, ", ") or "none"
end

local function peer_target(op)
  local u, status, reason = upstream_target(op)
  if u == nil then return nil, status, reason end
  for i = 1, u.n do
    if u.live[i] and u.peer[i] == op.peer then return u, i end
  end
  return fail(404, "peer", "one of " .. members(u), op.peer)
end

local sockaddr_box = ffi.new("uint64_t[4]")   -- nres_gw_parse_addr's
local MEMBER_ERR = {   -- nres_gw_member_add's and _remove's errors
  [-2] = { 409, "peer", "a peer not in the upstream yet" },
  [-4] = { 404, "peer", "a peer of the upstream" },
  [-5] = { 409, "peer", "a peer whose upstream keeps another primary peer that is not"
                        .. " drained" },
  [-16] = { 503, "upstream", "an upstream no other change holds (try again)" },
}

-- add and remove: the membership in shared memory (nres_gw_member_*).
local function membership(op, now)
  local u, status, reason = upstream_target(op)
  if u == nil then return nil, status, reason end
  local p = op.peer
  if op.action == "remove" then
    local rc = type(p) == "string" and C.nres_gw_member_remove(u.gw, p, #p, now) or -4
    if rc < 0 then
      local e = MEMBER_ERR[rc] or { 500, "peer", "a change the runtime makes" }
      return fail(e[1], e[2], rc == -4 and "one of " .. members(u) or e[3],
                  rc == -16 and op.upstream or p)
    end
    local inflight = tonumber(C.nres_gw_member_inflight(u.members, rc))
    require("nres.ngx.balancer").sync(u, now)
    return format("upstream %s peer %s: removed (%d tries in flight finish there)", u.name,
                  p, inflight), { removed = p, inflight = inflight }
  end
  if type(p) ~= "string" or C.nres_gw_parse_addr(p, #p, sockaddr_box) == 0 then
    return fail(400, "peer", "\"a.b.c.d:port\" or \"[IPv6]:port\" (an address, port"
                .. " 1..65535)", p)
  end
  local w = op.weight == nil and 1 or op.weight
  if type(w) ~= "number" or w < 1 or w > 10000 or w % 1 ~= 0 then
    return fail(400, "weight", "an integer 1..10000", op.weight)
  end
  if op.backup ~= nil and type(op.backup) ~= "boolean" then
    return fail(400, "backup", "true or false", op.backup)
  end
  local rc = C.nres_gw_member_add(u.gw, p, #p, w, op.backup and 1 or 0, now)
  if rc == -3 then
    local m = 0
    for s = 0, u.members.slots - 1 do
      if C.nres_gw_member(u.members, s).state ~= 0 then m = m + 1 end
    end
    return fail(409, "upstream", format("an upstream with room for another peer (max_peers"
                .. " %d; %d members, removed ones counted until their tries end)",
                u.max_peers, m), op.upstream)
  elseif rc < 0 then
    local e = MEMBER_ERR[rc] or { 500, "peer", "a change the runtime makes" }
    return fail(e[1], e[2], e[3], rc == -16 and op.upstream or p)
  end
  require("nres.ngx.balancer").sync(u, now)
  return format("upstream %s peer %s: added (weight %d%s%s)", u.name, p, w,
                op.backup and ", backup" or "",
                u.slow_start > 0 and format(", slow start %gs", u.slow_start) or ""),
         { added = p, weight = w, backup = op.backup == true }
end

-- Check op fully, then change: (what changed, result table) or (nil,
-- status, reason) with nothing changed.
local function apply(op, now)
  if type(op) ~= "table" then return fail(400, "body", "a JSON object", type(op)) end
  local allowed = ACTIONS[op.action]
  if allowed == nil then
    return fail(400, "action", "one of add, close, drain, dry_run, eject, isolate, rate,"
                .. " remove, reset, restore, weight", op.action)
  end
  for k in pairs(op) do
    local ok = k == "action"
    for _, a in ipairs(allowed) do ok = ok or k == a end
    if not ok then
      return fail(400, tostring(k), "no such field for " .. op.action .. " (fields: "
                  .. concat(allowed, ", ") .. ")", op[k])
    end
  end
  local action = op.action
  if action == "add" or action == "remove" then return membership(op, now) end
  if action == "isolate" or action == "close" or action == "reset" then
    local b, what, reason = breaker_target(op)
    if b == nil then return nil, what, reason end
    local before = STATES[C.nres_breaker_state(b, now)]
    if action == "isolate" then C.nres_breaker_isolate(b)
    elseif action ~= "close" or before ~= "closed" then C.nres_breaker_reset(b) end
    local after = STATES[C.nres_breaker_state(b, now)]
    return format("%s: breaker %s (was %s, now %s)", what, action, before, after),
           { state = after, was = before }
  elseif action == "eject" or action == "restore" or action == "drain" then
    local u, i, reason = peer_target(op)
    if u == nil then return nil, i, reason end
    local c = _M.block(u.controls + (u.idx[i]) * _M.BYTES)
    if action == "drain" and not flag(c, DRAIN) then
      local left = 0
      for j = 1, u.n do
        if j ~= i and u.live[j]
           and not flag(_M.block(u.controls + u.idx[j] * _M.BYTES), DRAIN) then
          left = left + 1
        end
      end
      if left == 0 then
        return fail(409, "peer", "a peer whose upstream keeps another one not drained", op.peer)
      end
    end
    local before = STATES[C.nres_breaker_state(u.br[i], now)]
    if action == "eject" then
      C.nres_breaker_isolate(u.br[i])
    elseif action == "drain" then
      C.nres_gw_control_flag(c, DRAIN, 1)
    else
      C.nres_gw_control_flag(c, DRAIN, 0)
      if before ~= "closed" then C.nres_breaker_reset(u.br[i]) end
    end
    local after = STATES[C.nres_breaker_state(u.br[i], now)]
    return format("upstream %s peer %s: %s (was %s, now %s%s)", u.name, u.peer[i],
                  action == "eject" and "ejected" or action == "drain" and "drained"
                  or "restored", before, after, flag(c, DRAIN) and ", drained" or ""),
           { state = after, was = before, drained = flag(c, DRAIN) }
  elseif action == "weight" then
    local u, i, reason = peer_target(op)
    if u == nil then return nil, i, reason end
    local w = op.weight
    if type(w) ~= "number" or w < 1 or w > 10000 or w % 1 ~= 0 then
      return fail(400, "weight", "an integer 1..10000", w)
    end
    local c = _M.block(u.controls + (u.idx[i]) * _M.BYTES)
    local was = c.weight ~= 0 and tonumber(c.weight) or u.weight[i]
    c.weight = w   -- an aligned 32-bit store: each worker reads it whole
    return format("upstream %s peer %s: weight %d (was %d)", u.name, u.peer[i], w, was),
           { weight = w, was = was }
  elseif action == "rate" then
    local s = config.limiters[op.limiter]
    if s == nil then return fail(404, "limiter", "one of " .. names(config.limiters), op.limiter) end
    local rate, burst = op.rate, op.burst
    if type(rate) ~= "number" or not (rate > 0 and rate <= 1e9) then
      return fail(400, "rate", "admissions per second, > 0 and at most 1e9", rate)
    end
    local c = s.control
    local was_rate, was_burst = s.rate, s.burst
    if flag(c, RATE_SET) then was_rate, was_burst = tonumber(c.rate), tonumber(c.burst) end
    if burst == nil then burst = was_burst end
    if type(burst) ~= "number" or burst < 1 or burst > 1e6 or burst % 1 ~= 0 then
      return fail(400, "burst", "an integer 1..1e6", burst)
    end
    if C.nres_gw_control_rate(c, s.ptr, rate, burst, now) ~= 0 then
      return fail(400, "rate", "a rate the limiter can keep", rate)
    end
    return format("limiter %s: rate %s/s burst %d (was %s/s burst %d)", s.name,
                  tostring(rate), burst, tostring(was_rate), was_burst),
           { rate = rate, burst = burst }
  end
  -- dry_run
  if (op.scope == nil) == (op.limiter == nil) then
    return fail(400, "scope", "either scope or limiter", op.scope or op.limiter)
  end
  if type(op.on) ~= "boolean" then return fail(400, "on", "true or false", op.on) end
  local s = op.scope and config.scopes[op.scope] or config.limiters[op.limiter]
  if s == nil then
    return fail(404, op.scope and "scope" or "limiter", "one of "
                .. names(op.scope and config.scopes or config.limiters), op.scope or op.limiter)
  end
  local was = flag(s.control, DRY_RUN)
  C.nres_gw_control_flag(s.control, DRY_RUN, op.on and 1 or 0)
  return format("%s %s: dry-run %s (was %s)", op.scope and "scope" or "limiter", s.name,
                op.on and "on" or "off", was and "on" or "off"), { dry_run = op.on, was = was }
end

-- gw.apply(op[, from]): one operation (the table above) from Lua. Returns
-- the result table, or nil, the HTTP status it would get and the reason.
-- Logged like the control API's changes, `from` (default "lua") as where.
function _M.apply(op, from)
  local what, res, reason = apply(op, C.nres_step_now())
  if what == nil then return nil, res, reason end
  local line = format("nres: control from %s: %s", from or "lua", what)
  if ngx and ngx.log then ngx.log(ngx.NOTICE, line) end
  res.changed = what
  return res
end

-- The control state of every table (GET).
function _M.snapshot()
  local out = { scopes = {}, limiters = {}, upstreams = {} }
  for name, s in pairs(config.scopes) do out.scopes[name] = _M.state(s.control) end
  for name, s in pairs(config.limiters) do out.limiters[name] = _M.state(s.control) end
  for name, u in pairs(config.upstreams) do
    if u.balancer then
      local drained, weights, peers = {}, {}, {}
      require("nres.ngx.balancer").sync(u)
      for i = 1, u.n do
        if u.live[i] then
          local c = _M.block(u.controls + u.idx[i] * _M.BYTES)
          peers[#peers + 1] = u.peer[i]
          if flag(c, DRAIN) then drained[#drained + 1] = u.peer[i] end
          weights[u.peer[i]] = c.weight ~= 0 and tonumber(c.weight) or u.weight[i]
        end
      end
      out.upstreams[name] = { drained = drained, weights = weights, peers = peers,
                              max_peers = u.max_peers }
    end
  end
  return out
end

-- ------------------------------------------------------------- handler

-- Who may use the handler: loopback, and gw.control{ allow = {...} }'s
-- addresses and IPv4 prefixes.
local allow = {}

local function v4(addr)
  local a, b, c, d = addr:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return nil end
  a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
  if a > 255 or b > 255 or c > 255 or d > 255 then return nil end
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function allowed(addr)
  if addr == "::1" or (v4(addr) and v4(addr) >= 0x7f000000 and v4(addr) <= 0x7fffffff) then
    return true
  end
  local n = v4(addr)
  for _, e in ipairs(allow) do
    if e.addr == addr then return true end
    if n and e.net and math.floor(n / e.size) == e.net then return true end
  end
  return false
end
_M.allowed = allowed

-- gw.control{ allow = { "10.0.0.0/8", "192.0.2.7", "2001:db8::7" } }:
-- the addresses allowed besides loopback (init_by_lua).
function _M.configure(opts)
  if type(opts) ~= "table" then error(config.bad("control", "opts", "a table", opts), 2) end
  for k in pairs(opts) do
    if k ~= "allow" then
      error("nres.ngx.control: " .. tostring(k) .. ": expected allow, got an unknown field", 2)
    end
  end
  local list = {}
  for i, a in ipairs(opts.allow or {}) do
    local ip, bits
    if type(a) == "string" then ip, bits = a:match("^([^/]+)/(%d+)$") end
    if ip and v4(ip) and tonumber(bits) <= 32 then
      local size = 2 ^ (32 - tonumber(bits))
      list[#list + 1] = { net = math.floor(v4(ip) / size), size = size }
    elseif type(a) == "string" and (v4(a) or a:find(":", 1, true)) then
      list[#list + 1] = { addr = a }
    else
      error(config.bad("control", "allow[" .. i .. "]", "an address or an IPv4 prefix"
                       .. " (a.b.c.d/n)", a), 2)
    end
  end
  allow = list
end

local function answer(status, body)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.print(require("cjson.safe").encode(body), "\n")
  return ngx.exit(status)
end

-- content_by_lua: the control API.
function _M.handler()
  local addr = ngx.var.remote_addr
  if not allowed(addr) then
    return answer(403, { error = "control: " .. addr .. " is not allowed (loopback, or"
                         .. " gw.control{ allow = ... })" })
  end
  local method = ngx.req.get_method()
  if method == "GET" then return answer(200, _M.snapshot()) end
  if method ~= "POST" then return answer(405, { error = "method: expected GET or POST, got " .. method }) end
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body == nil then return answer(400, { error = "body: expected a JSON object, got none" }) end
  local op = require("cjson.safe").decode(body)
  if type(op) ~= "table" then return answer(400, { error = "body: expected a JSON object" }) end
  local res, status, reason = _M.apply(op, addr)
  if res == nil then return answer(status, { error = reason }) end
  return answer(200, res)
end

return _M

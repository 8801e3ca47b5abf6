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
--   { "action": "rate", "limiter": L, "rate": R, "burst": B }
--   { "action": "dry_run", "scope": S | "limiter": L, "on": true | false }
-- isolate holds a breaker open until closed; close ends an open or
-- isolated state; reset closes and clears its counts. eject isolates a
-- peer's breaker; drain gives a peer no new tries (in-flight ones finish;
-- draining the last peer that is not drained is refused); restore undoes
-- both. weight replaces a peer's declared weight (docs/gateway-peers.md)
-- in every worker within 50 ms. A dry-run decides as usual but lets the request through, counting
-- `would_refuse` by reason ("circuit open" for a scope's breaker in
-- balancer mode, "rate limited" for a limiter). Bad input gets a 4xx and
-- the reason; nothing is changed by a request that is refused.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"

local C = cdef.C
local type, tostring, tonumber, pairs, ipairs, format = type, tostring, tonumber, pairs,
  ipairs, string.format
local band, bnot = require("bit").band, require("bit").bnot

require "nres.cdef.gateway"   -- nres_gw_control_t and its functions

local _M = {}

local DRY_RUN, DRAIN, RATE_SET = 1, 2, 4
local WOULD = { [0] = "circuit open", "rate limited" }
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

-- A reload that replaced a scope's or limiter's table (another layout):
-- the new table takes over the old one's control block (nres.ngx.config's
-- moves.extra; report from nres.shm migrate): dry-run and its counts are
-- kept; a limiter's rate set through the control API is kept unless the
-- declaration's own rate changed (the operator's new word), then dropped,
-- said in the notes.
function _M.migrate(tbl, report, notes)
  local old = report.old
  if old.extra == nil or old.extra_bytes < _M.BYTES then return end
  local c = _M.block(tbl.extra)
  ffi.copy(c, old.extra, _M.BYTES)
  local was, now = C.nres_shm_config(old.shm), C.nres_shm_config(tbl.shm)
  if flag(c, RATE_SET) and (was.rate ~= now.rate or was.burst ~= now.burst) then
    c.flags = band(c.flags, bnot(RATE_SET))
    notes[#notes + 1] = format("reset: the rate set through the control API (%s/s burst %d;"
      .. " the declared rate changed)", tostring(c.rate), tonumber(c.burst))
  end
end

-- ------------------------------------------------------------ operations
--
-- The operations are libnres's (runtime/src/gateway/control_api.c): the
-- nginx module's nres_control runs the same C on the same JSON, so both
-- doors check, apply and answer alike. Here: the scopes registered for it
-- (gw.scope), a table encoded as that JSON, and the answers decoded.

local cjson = require "cjson.safe"
local ANSWER_MAX = 4096   -- NRES_GW_CONTROL_ANSWER_MAX
local answer_buf = ffi.new("char[?]", ANSWER_MAX)
local what_buf = ffi.new("char[?]", 1024)

-- Scope s (nres.ngx.config) registered for the control API by name.
-- Freed (and unregistered) with this Lua state.
function _M.register_scope(s)
  local g = C.nres_gw_scope_new(s.name, s.ptr, s.control, s.breaker and 1 or 0)
  if g == nil then error("nres.ngx.scope: " .. s.name .. ": the runtime refused it", 3) end
  s.named = ffi.gc(g, C.nres_gw_scope_free)   -- (s.gw: a limiter's)
  C.nres_gw_scope_register(g)
end

-- One operation, a JSON object (body): the answer (a table) and what
-- changed, or nil, the HTTP status and the reason; nothing changed then.
local function apply_json(body)
  local status = C.nres_gw_control_apply(body, #body, C.nres_step_now(), answer_buf,
                                         ANSWER_MAX, what_buf, 1024)
  local what = ffi.string(what_buf)
  if status ~= 200 then return nil, status, what end
  return cjson.decode(ffi.string(answer_buf)), what
end

-- gw.apply(op[, from]): one operation (a table of the fields above) from
-- Lua. Returns the result table (with `changed`), or nil, the HTTP status
-- it would get and the reason. Logged like the control API's changes,
-- `from` (default "lua") as where.
function _M.apply(op, from)
  if type(op) ~= "table" then
    return nil, 400, format("body: expected a JSON object, got %q", type(op))
  end
  local body = cjson.encode(op)
  if body == nil then return nil, 400, "body: expected a JSON object, got a table cjson cannot encode" end
  local res, what, reason = apply_json(body)
  if res == nil then return nil, what, reason end
  if ngx and ngx.log then ngx.log(ngx.NOTICE, format("nres: control from %s: %s", from or "lua", what)) end
  return res
end

-- The control state of every table (GET), as libnres writes it.
function _M.snapshot()
  local n = tonumber(C.nres_gw_control_state(answer_buf, ANSWER_MAX))
  if n < ANSWER_MAX then return cjson.decode(ffi.string(answer_buf, n)) end
  local buf = ffi.new("char[?]", n + 1)
  C.nres_gw_control_state(buf, n + 1)
  return cjson.decode(ffi.string(buf, n))
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
  local res, what, reason = apply_json(body)
  if res == nil then return answer(what, { error = reason }) end
  ngx.log(ngx.NOTICE, format("nres: control from %s: %s", addr, what))
  return answer(200, res)
end

return _M

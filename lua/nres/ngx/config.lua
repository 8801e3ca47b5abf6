-- SPDX-License-Identifier: MIT
-- nres.ngx.config: the gateway's declarations made in init_by_lua - scopes
-- (a policy per key in a shared table), limiters (a rate per key) and
-- upstreams - kept in this module's registries for the request phases.
local policy_mod = require "nres.policy"
local shm_mod = require "nres.shm"
local files = require "nres.ngx.files"

local type, error, tostring, pairs, format = type, error, tostring, pairs, string.format
local byte = string.byte

local _M = {}

local scopes, limiters, upstreams = {}, {}, {}
_M.scopes, _M.limiters, _M.upstreams = scopes, limiters, upstreams

-- ------------------------------------------------------------ set-up

local function bad(fn, field, expected, got)
  return format("nres.ngx.%s: %s: expected %s, got %s", fn, field, expected,
                type(got) == "string" and format("%q", got) or tostring(got))
end

local function check_name(fn, name)
  if type(name) ~= "string" or name == "" then
    error("bad argument #1 to '" .. fn .. "' (a non-empty string expected, got "
          .. type(name) .. ")", 3)
  end
end

-- A table that replaced a file of another layout takes over its state
-- (nres.shm migrate, nres/shm.h): what moved, and what was reset and why,
-- as a note for the table's one log line, and whether keys were left out
-- (a warning then). moves: see new_table.
local function migrate(tbl, moves)
  if not tbl.old then return nil end
  local r, err = tbl:migrate(moves.present)
  if not r then
    tbl:release_old()
    return "its state could not be moved (" .. err .. ") and starts fresh", true
  end
  local notes = { r.text }
  if moves.extra then moves.extra(tbl, r, notes) end
  if #notes > 1 then notes[1] = notes[1]:gsub("; nothing reset$", "") end   -- the extra's resets
  tbl:release_old()
  return table.concat(notes, "; "), r.full + r.changed > 0
end

-- nres.shm.new, its misuse errors raised at the level of our caller's caller;
-- in the region file of table `tname` of kind fn, if there is a region
-- directory (nres.ngx.files). A file of another layout (a reload that
-- changed the slots, the peers or a policy field) is replaced, and its
-- state moved into the new table: moves = { present = true (only keys
-- the new table holds: the declared peers), prepare = function(tbl)
-- (lays out the keys, before the move), extra = function(tbl, report,
-- notes) (moves the caller's own memory after the table, adding to the
-- notes) }.
local function new_table(fn, opts, tname, moves)
  if tname then opts.file = files.path(fn, tname) end
  local ok, tbl, err, kind = pcall(shm_mod.new, opts)
  if not ok then error((tostring(tbl):gsub("^[^\n]-:%d+: ", "")), 3) end
  if not tbl and kind == "full" then error(files.full(fn, tname, err), 3) end
  if not tbl then error("nres.ngx." .. fn .. ": " .. err, 3) end
  moves = moves or {}
  if moves.prepare then moves.prepare(tbl) end
  local moved, left_out = migrate(tbl, moves)
  if tname then files.opened(fn, tname, tbl, moved, left_out) end
  return tbl
end

local unit_seconds = require("nres.schema").seconds

local function seconds(fn, field, v, default)
  if v == nil then return default end
  if type(v) == "string" then v = unit_seconds(v) or v end   -- "90s", "2m"
  if type(v) ~= "number" or v ~= v or v < 0 or v > 1e6 then
    error(bad(fn, field, 'seconds (a number 0..1e6, or with a unit: "90s", "2m")', v), 3)
  end
  return v
end

-- gw.scope(name, { policy = spec or preset (default "gateway"), slots = 1024,
--                  hold = seconds a key is kept after its last use (default
--                  the larger of 60 and the policy's deadline + 5) })
_M.bad, _M.check_name, _M.new_table, _M.seconds = bad, check_name, new_table, seconds

function _M.scope(name, opts)
  check_name("scope", name)
  opts = opts or {}
  if type(opts) ~= "table" then error(bad("scope", "opts", "a table", opts), 2) end
  for k in pairs(opts) do
    if k ~= "policy" and k ~= "slots" and k ~= "hold" then
      error("nres.ngx.scope: " .. tostring(k) .. ": expected one of policy, slots, hold,"
          .. " got an unknown field", 2)
    end
  end
  local p = policy_mod.new(opts.policy or "gateway", 2)
  local t = p.spec
  if type(t.budget) == "string" then
    error(bad("scope", "policy.budget", "a table or false (a scope keeps one budget"
          .. " per key)", t.budget), 2)
  end
  -- A hedge table: idempotent cosocket requests are hedged (nres.ngx.cosocket).
  if not t.deadline then
    error(bad("scope", "policy.deadline", "a deadline in seconds (keys are leased"
          .. " for a call's length)", t.deadline), 2)
  end
  if p.fallback or p.admit or p.on_event then
    error(bad("scope", "policy", "no fallback, admit or on_event (Lua callbacks"
          .. " are not run by the gateway driver)", "one of them"), 2)
  end
  local l = t.limiter
  local hold = seconds("scope", "hold", opts.hold, math.max(60, t.deadline + 5))
  if hold < t.deadline then
    error(bad("scope", "hold", "at least the policy's deadline (" .. t.deadline .. ")", hold), 2)
  end
  local ctl = require "nres.ngx.control"
  local tbl = new_table("scope", {
    slots = opts.slots or 1024, extra = ctl.BYTES,   -- the control block
    budget = type(t.budget) == "table" and t.budget or false,
    breaker = type(t.breaker) == "table" and p.cp.own.breaker.config or false,
    limiter = type(l) == "table" and l.rate and { rate = l.rate, burst = l.burst or 1 } or false,
    throttle = type(t.throttle) == "table" and {
      k = p.cp.own.throttle.k, buckets = p.cp.own.throttle.window.count,
      window = tonumber(p.cp.own.throttle.window.width) * p.cp.own.throttle.window.count,
      fast_failure = p.cp.own.throttle.fast_failure } or false,
  }, name, { extra = ctl.migrate })
  local s = {
    name = name, policy = p, template = p.cp, shm = tbl, ptr = tbl.shm,
    hold = hold * 1e9, classify = p.classify,
    budget = type(t.budget) == "table", breaker = type(t.breaker) == "table",
    ratelimit = type(l) == "table" and l.rate ~= nil,
    throttle = type(t.throttle) == "table",
    timeout_ms = (t.attempt_timeout or t.deadline) * 1000,
    cps = {}, gens = {}, overflow = 0,
    hedged = type(t.hedge) == "table", hedges_won = 0,
    control = ctl.block(tbl.extra),
  }
  ctl.register_scope(s)   -- by name, for the control API (in C)
  scopes[name] = s
  return s
end

-- A request's criticality from its X-Criticality header: the class
-- (0 critical, 1 default, 2 sheddable; Google's CRITICAL_PLUS and
-- SHEDDABLE_PLUS fold into the nearest) and its name to pass upstream, or
-- 1 and nil when the header is absent or unknown. The names are the
-- runtime's one parser (nres_class_parse), as in p:with and the module.
local CLASS_NAME = { [0] = "critical", "default", "sheddable" }
local class_parse = require("nres.cdef").C.nres_class_parse
function _M.criticality(header)
  local cls = type(header) == "string" and class_parse(header, #header) or -1
  if cls < 0 then return 1, nil end
  return cls, CLASS_NAME[cls]
end

-- gw.fleet(path): nres-syncd's --status file (runtime/include/nres/sync.h);
-- /nres/status then says per scope whether it is fleet-synced, and since
-- when the agent last wrote (the agent itself talks to Redis, never nginx).
_M.fleet_status = nil
function _M.fleet(path)
  if type(path) ~= "string" or path == "" then
    error(bad("fleet", "path", "the path of nres-syncd's --status file", path), 2)
  end
  _M.fleet_status = path
end

-- gw.limiter(name, { rate = per second, burst = 1, slots = 4096, hold = 60,
--   top = 10 (keys the status lists by name: the most refused; 0..100),
--   keys = "address" ($binary_remote_addr: shown as addresses), "text" or
--   nil (either, guessed per key) })
local LIMITER_KEYS = { address = true, text = true }
function _M.limiter(name, opts)
  check_name("limiter", name)
  if type(opts) ~= "table" then error(bad("limiter", "opts", "a table", opts), 2) end
  if type(opts.rate) ~= "number" or not (opts.rate > 0) then
    error(bad("limiter", "rate", "admissions per second (> 0)", opts.rate), 2)
  end
  local burst = opts.burst or 1
  if type(burst) ~= "number" or burst < 1 or burst % 1 ~= 0 then
    error(bad("limiter", "burst", "an integer >= 1", burst), 2)
  end
  local top = opts.top or 10
  if type(top) ~= "number" or top < 0 or top > 100 or top % 1 ~= 0 then
    error(bad("limiter", "top", "an integer 0..100 (keys listed by name)", top), 2)
  end
  if opts.keys ~= nil and not LIMITER_KEYS[opts.keys] then
    error(bad("limiter", "keys", "\"address\", \"text\" or nil", opts.keys), 2)
  end
  local ctl = require "nres.ngx.control"
  local tbl = new_table("limiter", { slots = opts.slots or 4096, extra = ctl.BYTES,
                                    limiter = { rate = opts.rate, burst = burst } }, name,
                        { extra = ctl.migrate })
  local s = { name = name, shm = tbl, ptr = tbl.shm, rate = opts.rate, burst = burst,
              hold = seconds("limiter", "hold", opts.hold, 60) * 1e9, overflow = 0,
              top = top, keys = opts.keys, control = ctl.block(tbl.extra) }
  require("nres.ngx.limiter").register(s)
  limiters[name] = s
  return s
end

-- gw.upstream(name, { host, port } or { location = "/internal/proxy" },
--             keepalive = 60 (s), pool = 64 (connections per worker)),
-- or { peers = { "host:port", ... }, scope = ..., ... } for balancer mode
-- (nres.ngx.balancer).
function _M.upstream(name, opts)
  check_name("upstream", name)
  if type(opts) ~= "table" then error(bad("upstream", "opts", "a table", opts), 2) end
  if opts.peers ~= nil then
    local ok, u = pcall(require("nres.ngx.balancer").declare, name, opts)
    if not ok then error((tostring(u):gsub("^[^\n]-:%d+: ", "")), 2) end
    upstreams[name] = u
    return u
  end
  local u = { name = name }
  if opts.location ~= nil then
    if type(opts.location) ~= "string" or byte(opts.location, 1) ~= 47 then
      error(bad("upstream", "location", "a path such as \"/_backend\"", opts.location), 2)
    end
    u.location = opts.location
    u.key = opts.key or opts.location
  else
    if type(opts.host) ~= "string" or opts.host == "" then
      error(bad("upstream", "host", "a host name or address", opts.host), 2)
    end
    if type(opts.port) ~= "number" or opts.port < 1 or opts.port > 65535 or opts.port % 1 ~= 0 then
      error(bad("upstream", "port", "an integer 1..65535", opts.port), 2)
    end
    u.host, u.port = opts.host, opts.port
    u.host_header = opts.host_header or (opts.port == 80 and opts.host
                                         or opts.host .. ":" .. opts.port)
    u.key = opts.key or (opts.host .. ":" .. opts.port)
  end
  if #u.key > 64 then error(bad("upstream", "key", "at most 64 bytes", u.key), 2) end
  u.keepalive = seconds("upstream", "keepalive", opts.keepalive, 60) * 1000
  local pool = opts.pool or 64
  if type(pool) ~= "number" or pool < 1 or pool > 65535 or pool % 1 ~= 0 then
    error(bad("upstream", "pool", "an integer 1..65535 (connections kept per worker)", pool), 2)
  end
  u.pool = pool
  upstreams[name] = u
  return u
end

return _M

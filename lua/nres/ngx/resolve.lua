-- SPDX-License-Identifier: MIT
-- nres.ngx.resolve: peers by name (docs/gateway-peers.md, "Peers by name").
--
--   gw.upstream("backend", { scope = "upstreams",
--     peers = { "app.internal:8080", "10.0.0.9:8080" },
--     resolve = { resolver = "127.0.0.1:53", min_ttl = "1s", max_ttl = "5m",
--                 timeout = "1s", ipv6 = true } })
--
-- A peer whose host is not an address literal is a name. In init_by_lua
-- (nginx's master, before any request) each name is resolved once,
-- blocking (nres_dns_exchange), and the upstream is declared with one
-- peer per address, each with the entry's weight and backup flag; a name
-- that does not resolve fails the declaration, unless the upstream's
-- region file still holds its last good set from an earlier run.
--
-- Afterwards one worker of the whole nginx resolves: the holder of a lease
-- word (nres_gw_lease_t, as nres.ngx.health) in the upstream's "names"
-- table in shared memory. Its ngx.timer.at loop sends the A and AAAA
-- queries over UDP, polled (random ids; nres_dns_reply checks the id,
-- the question and every length) when a name's time comes: its records'
-- smallest TTL bounded by min_ttl and max_ttl (min_ttl after a failure).
-- An address that appears is added (gw.apply "add": slow start); one that
-- vanishes is drained, then removed once the scope policy's deadline has
-- passed (no try can still be running on it); one that comes back while
-- draining is restored. A failure (timeout, SERVFAIL, NXDOMAIN, refused,
-- a malformed reply, no address at all) keeps the last good set and is
-- logged once per change of result, not per attempt. Nothing runs on a
-- request.
--
-- Per name, a record in the names table holds what /nres/status shows
-- (the addresses, TTL, last result and times) and what the resolver needs
-- across a change of holder (the next time, the peers applied and since
-- when each drains); only the holder writes it, under a sequence count
-- that readers check.
local ffi = require "ffi"
local cdef = require "nres.cdef"
require "nres.cdef.dns"
require "nres.cdef.gateway"
local config = require "nres.ngx.config"
local elected = require "nres.ngx.elected"

local C = cdef.C
local type, error, tostring, tonumber, pairs, ipairs, format =
  type, error, tostring, tonumber, pairs, ipairs, string.format
local floor, max, min = math.floor, math.max, math.min
local ffi_string, ffi_copy = ffi.string, ffi.copy
local bad = config.bad

local _M = {}

local A, AAAA = 1, 28                 -- NRES_DNS_A, NRES_DNS_AAAA
local EAGAIN, ETIMEDOUT = -11, -110   -- NRES_EAGAIN, NRES_ETIMEDOUT
local ADDRS = 64                      -- addresses kept per name (both families)
local PEER_MAX = 48                   -- "[v6]:port" and its NUL

ffi.cdef [[
typedef struct nres_ngx_name_s {
  uint32_t seq, port;                  /* seq odd while the holder writes */
  char name[256];
  double at, ok_at;                    /* wall seconds: last try, last success */
  int64_t next;                        /* monotonic ns of the next try */
  uint32_t ttl, ndns, napplied, failing;
  char result[64];                     /* "ok" or why the last try failed */
  char dns[64][48];                    /* the last good set, "addr:port" */
  char applied[64][48];                /* the peers the gateway has for it */
  double draining[64];                 /* monotonic s an applied peer drains since; 0 */
} nres_ngx_name_t;
]]
local REC_SIZE = ffi.sizeof("nres_ngx_name_t")

local qbuf = ffi.new("uint8_t[?]", 272)   -- NRES_DNS_QUERY_MAX
local answer = ffi.new("nres_dns_answer_t")
local why_box = ffi.new("const char *[1]")

-- ------------------------------------------------------------ set-up

local FIELDS = { resolver = true, min_ttl = true, max_ttl = true, timeout = true, ipv6 = true }
local FIELD_LIST = "resolver, min_ttl, max_ttl, timeout, ipv6"

-- "host" and port of an address "1.2.3.4", "1.2.3.4:53", "[::1]" or
-- "[::1]:53" (host without brackets), or nil.
local function server(s)
  local h, p = s:match("^%[([%x:.]+)%]:?(%d*)$")
  if not h then h, p = s:match("^(%d+%.%d+%.%d+%.%d+):?(%d*)$") end
  if not h then return nil end
  p = p == "" and 53 or tonumber(p)
  if p < 1 or p > 65535 then return nil end
  return h, p
end

-- The system's resolver: the first nameserver of /etc/resolv.conf (what
-- the C library asks first), else 127.0.0.1 (the C library's default).
local function system_resolver(path)
  local f = io.open(path or "/etc/resolv.conf")
  if f then
    for line in f:lines() do
      local a = line:match("^%s*nameserver%s+([%x:.]+)")
      if a then
        f:close()
        return a:find(":", 1, true) and "[" .. a .. "]" or a
      end
    end
    f:close()
  end
  return "127.0.0.1"
end
_M.system_resolver = system_resolver

-- Validated settings of gw.upstream's `resolve` table (nil: the defaults).
function _M.settings(r)
  if r == nil then r = {} end
  if type(r) ~= "table" then error(bad("upstream", "resolve", "a table", r), 0) end
  for k in pairs(r) do
    if not FIELDS[k] then
      error("nres.ngx.upstream: resolve." .. tostring(k) .. ": expected one of " .. FIELD_LIST
            .. ", got an unknown field", 0)
    end
  end
  local s = { system = r.resolver == nil }
  local addr = r.resolver or system_resolver()
  if type(addr) ~= "string" then
    error(bad("upstream", "resolve.resolver", '"address[:port]" (an IP address, e.g.'
              .. ' "127.0.0.1:53" or "[::1]:53"; nil: /etc/resolv.conf\'s)', addr), 0)
  end
  s.host, s.port = server(addr)
  if not s.host then
    error(bad("upstream", "resolve.resolver", '"address[:port]" (an IP address, e.g.'
              .. ' "127.0.0.1:53" or "[::1]:53"; nil: /etc/resolv.conf\'s)', addr), 0)
  end
  s.resolver = (s.host:find(":", 1, true) and "[" .. s.host .. "]" or s.host) .. ":" .. s.port
  s.min_ttl = config.seconds("upstream", "resolve.min_ttl", r.min_ttl, 1)
  if s.min_ttl < 0.1 then
    error(bad("upstream", "resolve.min_ttl", "at least 0.1 s", r.min_ttl), 0)
  end
  s.max_ttl = config.seconds("upstream", "resolve.max_ttl", r.max_ttl, max(300, s.min_ttl))
  if s.max_ttl < s.min_ttl or s.max_ttl > 86400 then
    error(bad("upstream", "resolve.max_ttl", "min_ttl (" .. s.min_ttl .. " s) .. 1 day",
              r.max_ttl), 0)
  end
  s.timeout = config.seconds("upstream", "resolve.timeout", r.timeout, 1)
  if s.timeout < 0.01 or s.timeout > 30 then
    error(bad("upstream", "resolve.timeout", "0.01 s .. 30 s", r.timeout), 0)
  end
  if r.ipv6 ~= nil and type(r.ipv6) ~= "boolean" then
    error(bad("upstream", "resolve.ipv6", "true (A and AAAA) or false (A only)", r.ipv6), 0)
  end
  s.ipv6 = r.ipv6 ~= false
  return s
end

-- Is host (of "host:port") a name, not an address literal?
local function is_name(host)
  return not host:find("^%[") and not host:find("^%d+%.%d+%.%d+%.%d+$")
end

-- The peer string of address bytes p (4 or 16) and port.
local function peer_of(p, size, port)
  if size == 4 then return format("%d.%d.%d.%d:%d", p[0], p[1], p[2], p[3], port) end
  local w = {}
  for i = 0, 7 do w[i + 1] = format("%x", p[2 * i] * 256 + p[2 * i + 1]) end
  -- the longest run of zero words (two or more) written "::" (RFC 5952)
  local best, len, at, run = 0, 0, 0, 0
  for i = 1, 9 do
    if i <= 8 and w[i] == "0" then
      if run == 0 then at = i end
      run = run + 1
    else
      if run > len and run > 1 then best, len = at, run end
      run = 0
    end
  end
  local text
  if len > 0 then
    text = table.concat(w, ":", 1, best - 1) .. "::" .. table.concat(w, ":", best + len, 8)
  else
    text = table.concat(w, ":")
  end
  return "[" .. text .. "]:" .. port
end
_M.peer_of = peer_of

-- What an answer (rc from nres_dns_reply or nres_dns_exchange) says:
-- nil and why, or the addresses appended to set (as peers of port) and
-- the answer's TTL.
local RCODES = { [1] = "FORMERR", [2] = "SERVFAIL", [3] = "NXDOMAIN", [4] = "NOTIMP",
                 [5] = "REFUSED" }
local function read(rc, err, qtype, port, set)
  if rc == ETIMEDOUT then return nil, "timeout" end
  if rc ~= 0 then
    return nil, err or why_box[0] ~= nil and ffi_string(why_box[0]) or "error " .. rc
  end
  if answer.rcode ~= 0 then return nil, RCODES[answer.rcode] or "rcode " .. answer.rcode end
  local size = qtype == A and 4 or 16
  for i = 0, answer.n - 1 do set[#set + 1] = peer_of(answer.addr[i], size, port) end
  return answer.ttl
end

-- Resolve name for port through s's resolver, sending each query with
-- exchange(s, query, qlen, answer, why) -> rc (nres_dns_reply's, or
-- NRES_ETIMEDOUT; the answer filled), error text: the set of peers
-- (sorted, no repeats), the TTL (s) and, when a query failed, why. A
-- family whose query failed keeps its addresses of old (the last good
-- set); nil, nil and why when no address is known at all.
local function lookup(s, name, port, exchange, old)
  local set, ttl, why = {}, nil, nil
  for _, qtype in ipairs(s.ipv6 and { A, AAAA } or { A }) do
    local qlen = C.nres_dns_query(qbuf, 272, C.nres_dns_id(), name, #name, qtype)
    if qlen < 0 then return nil, nil, "not a DNS name" end
    why_box[0] = nil
    local rc, err = exchange(s, qbuf, qlen, answer, why_box)
    local t, failed = read(rc, err, qtype, port, set)
    if not t then
      why = why or (qtype == A and "A: " or "AAAA: ") .. failed
      for _, p in ipairs(old or {}) do
        if (p:byte(1) == 91) == (qtype == AAAA) then set[#set + 1] = p end   -- "[v6]:port"
      end
    elseif answer.n > 0 then
      ttl = ttl and min(ttl, t) or t
    end
  end
  if #set == 0 then return nil, nil, why or "no address" end
  table.sort(set)
  local out, last = {}, nil
  for _, p in ipairs(set) do
    if p ~= last then out[#out + 1] = p end
    last = p
  end
  if #out > ADDRS then return nil, nil, "more than " .. ADDRS .. " addresses" end
  return out, ttl or 0, why
end
_M.lookup = lookup

local function blocking(s, q, qlen, out, why)
  return C.nres_dns_exchange(s.host, s.port, q, qlen, floor(s.timeout * 1000), out, why)
end

-- A NUL-terminated text of at most cap bytes in a record (a region file
-- is input: a text without its NUL ends at cap).
local function text(buf, cap)
  local n = tonumber(C.strnlen(buf, cap))
  return ffi_string(buf, n)
end

-- The record's fields, read under its sequence count (force: as they are,
-- for the only writer, whose predecessor may have died mid-write); nil
-- when it is being written, or holds counts out of range.
local function snapshot(rec, force)
  for _ = 1, 100 do
    local seq = rec.seq
    if seq % 2 == 0 or force then
      if rec.ndns > ADDRS or rec.napplied > ADDRS then return nil end
      local t = { name = text(rec.name, 256), port = rec.port, at = rec.at, ok_at = rec.ok_at,
                  next = tonumber(rec.next), ttl = rec.ttl, failing = rec.failing ~= 0,
                  result = text(rec.result, 64), dns = {}, applied = {}, draining = {} }
      for i = 0, rec.ndns - 1 do t.dns[i + 1] = text(rec.dns[i], PEER_MAX) end
      for i = 0, rec.napplied - 1 do
        t.applied[i + 1] = text(rec.applied[i], PEER_MAX)
        t.draining[i + 1] = rec.draining[i]
      end
      if force or rec.seq == seq then return t end
    end
  end
  return nil
end
_M.snapshot = snapshot

-- Write table t (snapshot's shape) into rec: seq odd meanwhile, even after.
local function store(rec, t)
  if rec.seq % 2 == 0 then rec.seq = rec.seq + 1 end
  ffi_copy(rec.name, t.name)
  rec.port, rec.at, rec.ok_at, rec.next, rec.ttl = t.port, t.at or 0, t.ok_at or 0,
    t.next or 0, t.ttl or 0
  rec.failing = t.failing and 1 or 0
  ffi_copy(rec.result, t.result:sub(1, 63))
  rec.ndns, rec.napplied = #t.dns, #t.applied
  for i, p in ipairs(t.dns) do ffi_copy(rec.dns[i - 1], p) end
  for i, p in ipairs(t.applied) do
    ffi_copy(rec.applied[i - 1], p)
    rec.draining[i - 1] = t.draining[i] or 0
  end
  rec.seq = rec.seq + 1
end

local function now_s() return tonumber(C.nres_step_now()) / 1e9 end
local function wall() return ngx and ngx.now() or os.time() end

-- The names' table of upstream uname (in its region file, so a name's
-- last good set outlives a reload or a restart): the lease, then a record
-- per name.
local function names_table(uname, names)
  local tbl = config.new_table("names", { slots = 1, budget = false, breaker = false,
                                          limiter = false, extra = 64 + #names * REC_SIZE },
                               uname)
  names.shm = tbl
  names.lease_word = ffi.cast("nres_gw_lease_t *", tbl.extra)
  names.recs = ffi.cast("nres_ngx_name_t *", ffi.cast("char *", tbl.extra) + 64)
  local s = names.settings
  names.lease = 1 + 2 * s.timeout * (s.ipv6 and 2 or 1)   -- renewed before each name
end

-- gw.upstream's peers list with each name replaced by its addresses (each
-- address a peer with the entry's weight and backup flag), and the names
-- found (nil: none), resolved once, blocking. Called by nres.ngx.balancer's
-- declare before it reads the list. A name that does not resolve takes its
-- last good set from the names' table, or fails the declaration.
function _M.expand(uname, list, r)
  if type(list) ~= "table" then return list, nil end
  local names, s = {}, nil
  for i, entry in ipairs(list) do
    local p = type(entry) == "table" and entry[1] or entry
    local host, port
    if type(p) == "string" then host, port = p:match("^([^:%[%]]+):(%d+)$") end
    port = tonumber(port)
    if host and is_name(host) and port and port >= 1 and port <= 65535 then
      if C.nres_dns_query(qbuf, 272, 1, host, #host, A) < 0 then
        error(bad("upstream", "peers[" .. i .. "]", '"host:port" with a DNS name (labels of'
                  .. " letters, digits, '-' and '_', 1..63 bytes, 253 in all)", p), 0)
      end
      s = s or _M.settings(r)
      local set, ttl, why = lookup(s, host, port, blocking)
      names[#names + 1] = { name = host, port = port, entry = entry, i = i, set = set,
                            ttl = ttl or 0, why = why, at = wall() }
      if set and why and ngx then
        ngx.log(ngx.WARN, format("nres: upstream %s: %s resolved through %s in part (%s): %s",
                                 uname, host, s.resolver, why, table.concat(set, " ")))
      end
    end
  end
  if #names == 0 then
    if r ~= nil then
      error(bad("upstream", "resolve", "nil (no peer is a DNS name)", "a table"), 0)
    end
    return list, nil
  end
  names.settings = s
  names_table(uname, names)
  local out, by_entry = {}, {}
  for j, n in ipairs(names) do
    by_entry[n.i] = n
    if not n.set then
      local old = names.shm.reused and snapshot(names.recs + (j - 1))
      if not old or old.name ~= n.name or old.port ~= n.port or #old.dns == 0 then
        error(format("nres.ngx.upstream: peers[%d]: %s did not resolve through %s (%s) and"
                     .. " no address of it is known", n.i, n.name, s.resolver, n.why), 0)
      end
      n.set, n.ok_at = old.dns, old.ok_at
      if ngx then
        ngx.log(ngx.WARN, format("nres: upstream %s: %s did not resolve through %s (%s): its"
                .. " last good addresses (%s) from the region file are used", uname, n.name,
                s.resolver, n.why, table.concat(old.dns, " ")))
      end
    end
  end
  for i, entry in ipairs(list) do
    local n = by_entry[i]
    if not n then
      out[#out + 1] = entry
    else
      for _, a in ipairs(n.set) do
        if type(entry) == "table" then
          local e = {}
          for k, v in pairs(entry) do e[k] = v end
          e[1] = a
          out[#out + 1] = e
        else
          out[#out + 1] = a
        end
      end
    end
  end
  return out, names
end

-- Upstream u declared with expand's list: each name's record written
-- (its set, the peers it has, its next time).
function _M.attach(u, names)
  if not names then return end
  local s = names.settings
  for j, n in ipairs(names) do
    local t = { name = n.name, port = n.port, at = n.at, dns = n.set, ttl = n.ttl,
                ok_at = n.why and n.ok_at or n.at, result = n.why or "ok",
                failing = n.why ~= nil, applied = {}, draining = {} }
    for i, a in ipairs(t.dns) do t.applied[i] = a end
    t.next = tonumber(C.nres_step_now()) + _M.wait(s, t.failing and 0 or t.ttl) * 1e9
    store(names.recs + (j - 1), t)
  end
  u.names = names
end

-- Seconds until the next try after a TTL of ttl s (a failure: 0).
function _M.wait(s, ttl) return min(max(ttl, s.min_ttl), s.max_ttl) end

-- ------------------------------------------------------------ resolving

local ngx = ngx
local log = ngx and ngx.log or function() end   -- outside nginx (tests): none
local WARN, NOTICE = ngx and ngx.WARN, ngx and ngx.NOTICE

-- A query over a non-blocking UDP socket, its replies polled between
-- ngx.sleep calls (2 ms, doubling up to 50 ms) until the timeout:
-- nres_dns_reply's rc for the first datagram that is a reply to it, or
-- ETIMEDOUT. Not a cosocket: lua-nginx-module logs a cosocket's refused
-- or timed-out read at [error], once per query, and a resolver that is
-- down must make one line, not one a TTL.
local function polled(s, q, qlen, out, why)
  local fd = C.nres_dns_open(s.host, s.port, why)
  if fd < 0 then return fd end
  local rc = C.nres_dns_send(fd, q, qlen, why)
  if rc == 0 then rc = EAGAIN end
  local until_, pause = now_s() + s.timeout, 0.002
  while rc == EAGAIN do
    if now_s() >= until_ then
      rc = ETIMEDOUT
      break
    end
    ngx.sleep(pause)
    pause = min(pause * 2, 0.05)
    rc = C.nres_dns_recv(fd, q, qlen, out, why)
  end
  C.nres_dns_close(fd)
  return rc
end

-- gw.apply, with a log line when it fails: once per peer and error, not
-- per round (this worker's memory of the last failure of each).
local failed = {}
local function apply(op)
  local ok, status, reason = require("nres.ngx.control").apply(op, "resolver")
  local err = reason or status
  local k = op.upstream .. " " .. op.peer
  if not ok and failed[k] ~= op.action .. tostring(err) then
    log(WARN, format("nres: upstream %s: %s %s for its name: %s", op.upstream, op.action,
                     op.peer, tostring(err)))
  end
  failed[k] = not ok and op.action .. tostring(err) or nil
  return ok
end

-- The peers of name record t brought to its DNS set: new ones added
-- first (so that the old ones may be drained even when all change), gone
-- ones drained then removed after the scope policy's deadline (no try can
-- still be running on them), returning ones restored while they drain.
local function reconcile(u, n, t)
  local want, have = {}, {}
  for _, a in ipairs(t.dns) do want[a] = true end
  for _, a in ipairs(t.applied) do have[a] = true end
  local now, grace = now_s(), u.deadline / 1e9
  local applied, draining = {}, {}
  local e = n.entry
  for _, a in ipairs(t.dns) do
    if not have[a] and apply { action = "add", upstream = u.name, peer = a,
                               weight = type(e) == "table" and e.weight or nil,
                               backup = type(e) == "table" and e.backup or nil } then
      applied[#applied + 1] = a
      draining[#applied] = 0
    end
  end
  for i, a in ipairs(t.applied) do
    local since, keep = t.draining[i] or 0, true
    if want[a] and since > 0 then
      if apply { action = "restore", upstream = u.name, peer = a } then since = 0 end
    elseif not want[a] and since == 0 then
      if apply { action = "drain", upstream = u.name, peer = a } then since = now end
    elseif not want[a] and now - since >= grace then
      keep = not apply { action = "remove", upstream = u.name, peer = a }
    end
    if keep then
      applied[#applied + 1] = a
      draining[#applied] = since
    end
  end
  t.applied, t.draining = applied, draining
end

_M.reconcile = reconcile

-- Name j of u: resolved if its time has come, its peers reconciled.
local function step(u, j)
  local names = u.names
  local n, rec, s = names[j], names.recs + (j - 1), names.settings
  local t = snapshot(rec, true)
  if not t or t.name ~= n.name or t.port ~= n.port then   -- not ours: start again
    t = { name = n.name, port = n.port, dns = {}, applied = {}, draining = {}, next = 0,
          result = "", failing = true }
  end
  local now = tonumber(C.nres_step_now())
  if t.next <= now then
    local set, ttl, why = lookup(s, n.name, n.port, polled, t.dns)
    ngx.update_time()
    t.at = ngx.now()
    if set then
      local before, after = table.concat(t.dns, " "), table.concat(set, " ")
      t.dns, t.ttl = set, ttl
      if not why then t.ok_at = t.at end
      if before ~= after or (t.failing and not why) then
        log(NOTICE, format("nres: upstream %s: %s resolves to %s (TTL %d s)%s", u.name, n.name,
                           after, ttl, t.failing and not why and ", again" or ""))
      end
    end
    if why and why ~= t.result then   -- once per change, not per attempt
      log(WARN, format("nres: upstream %s: %s did not resolve through %s (%s): its last good"
                       .. " addresses are kept (%s)", u.name, n.name, s.resolver, why,
                       table.concat(t.dns, " ")))
    end
    t.failing, t.result = why ~= nil, why or "ok"
    t.next = tonumber(C.nres_step_now()) + _M.wait(s, why and 0 or ttl) * 1e9
  end
  reconcile(u, n, t)
  store(rec, t)
end

local id   -- this worker's lease id (its pid)
local LOOK = 0.5   -- s between two looks at the lease; the holder's longest sleep

local tick
function tick(premature, u)
  local names = u.names
  if premature then
    C.nres_gw_lease_drop(names.lease_word, id)
    return
  end
  local wait = LOOK
  for j = 1, #names do
    if C.nres_gw_lease_take(names.lease_word, id, C.nres_step_now(), names.lease * 1e9) ~= 1 then
      break
    end
    local ok, err = pcall(step, u, j)
    if not ok then log(ngx.ERR, "nres: resolving ", names[j].name, ": ", err) end
    -- the holder wakes when the next name is due (a drain's end: a look)
    wait = min(wait, max(0.01, (tonumber(names.recs[j - 1].next)
                                - tonumber(C.nres_step_now())) / 1e9))
  end
  elected.again(wait, tick, u, "resolving the names")
end

-- gw.init_worker: each upstream with names gets its timer in every worker
-- (only the lease holder resolves).
function _M.start()
  id = ngx.worker.pid()
  elected.start(config.upstreams, "names", tick, "resolving the names")
end

-- ------------------------------------------------------------- status

-- For nres.ngx.balancer's status: u's names, each with its addresses, the
-- peers it has in the upstream (and which drain), its TTL, the last result
-- and when, and the resolver and the holder of the lease.
function _M.annotate(u, out, now)
  local names = u.names
  if not names then return end
  local list = {}
  for j = 1, #names do
    local t = snapshot(names.recs + (j - 1))
    if t then
      local peers = {}
      for i, a in ipairs(t.applied) do
        peers[i] = { peer = a, draining = t.draining[i] > 0 or nil }
      end
      list[j] = { name = t.name, port = t.port, addresses = t.dns, peers = peers, ttl = t.ttl,
                  last = t.result, failing = t.failing, last_at = t.at > 0 and t.at or nil,
                  last_ok_at = t.ok_at > 0 and t.ok_at or nil,
                  next_in = max(0, (t.next - tonumber(now)) / 1e9) }
    end
  end
  local s = names.settings
  local holder = tonumber(C.nres_gw_lease_holder(names.lease_word, now))
  out.names = list
  out.resolve = { resolver = s.resolver, system = s.system, min_ttl = s.min_ttl,
                  max_ttl = s.max_ttl, timeout = s.timeout, ipv6 = s.ipv6,
                  resolver_pid = holder > 0 and holder or nil }
end

return _M

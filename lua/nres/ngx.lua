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
-- then in the request phases:
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
-- a scope holds `slots` keys (default 1024, ~0.6 KB of shared memory each;
-- a limiter 4096), in sets of 8 picked by hash. A key stays leased for
-- `hold` after its last use (default max(60 s, deadline + 5 s), at least
-- the deadline, so no call outlives its slot); the least recently leased
-- key whose lease is over makes room for a new one. When a key's set is
-- full of leased keys the call still runs, on this worker's own copy of
-- the policy (state not shared; counted as `overflow_this_worker`), and a
-- limiter admits (it never fails closed). The size is fixed at start.
--
-- Reloads. The table is an anonymous MAP_SHARED mapping made in init_by_lua:
-- on a HUP the master runs init_by_lua again and makes a new table, so new
-- workers start with closed breakers, full budgets and zero counters, while
-- old workers finish their requests on the old table (the master unmaps its
-- copy when the old Lua VM closes; the memory goes with the last old
-- worker). A binary upgrade (USR2) starts a new master that does the same:
-- old and new workers do not share state during the overlap. Unlike a
-- lua_shared_dict, state does not survive a reload - a deliberate trade:
-- a table laid out by another binary is never mapped.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local policy_mod = require "nres.policy"
local shm_mod = require "nres.shm"
local run = require "nres.run"

local C = cdef.C
local ffi_new, ffi_copy, ffi_sizeof, ffi_string = ffi.new, ffi.copy, ffi.sizeof, ffi.string
local type, error, tonumber, tostring, pairs, ipairs, format =
  type, error, tonumber, tostring, pairs, ipairs, string.format
local floor, ceil, concat = math.floor, math.ceil, table.concat
local byte, sub, find, lower, match = string.byte, string.sub, string.find, string.lower, string.match

local step_begin, step_report, step_resume = C.nres_step_begin, C.nres_step_report, C.nres_step_resume
local step_now = C.nres_step_now
local sh_acquire, sh_record, sh_limit = C.nres_shm_acquire, C.nres_shm_record, C.nres_shm_limit

local _M = { _VERSION = "0.1.0" }

local ATTEMPT, DONE = 0, 2
local STOP_OK = 1
local POLICY_SIZE = ffi_sizeof("nres_policy_t")
local reasons = run.reasons

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

-- nres.shm.new, its misuse errors raised at the level of our caller's caller.
local function new_table(fn, opts)
  local ok, tbl, err = pcall(shm_mod.new, opts)
  if not ok then error((tostring(tbl):gsub("^[^\n]-:%d+: ", "")), 3) end
  if not tbl then error("nres.ngx." .. fn .. ": " .. err, 3) end
  return tbl
end

local function seconds(fn, field, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < 0 or v > 1e6 then
    error(bad(fn, field, "seconds (a number 0..1e6)", v), 3)
  end
  return v
end

-- gw.scope(name, { policy = spec or preset (default "gateway"), slots = 1024,
--                  hold = seconds a key is kept after its last use (default
--                  the larger of 60 and the policy's deadline + 5) })
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
  if type(t.hedge) == "table" then
    error("nres.ngx.scope: policy.hedge: expected false (the gateway runs one attempt"
          .. " at a time), got a hedge table", 2)
  end
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
  local tbl = new_table("scope", {
    slots = opts.slots or 1024,
    budget = type(t.budget) == "table" and t.budget or false,
    breaker = type(t.breaker) == "table" and p.cp.own.breaker.config or false,
    limiter = type(l) == "table" and l.rate and { rate = l.rate, burst = l.burst or 1 } or false,
  })
  local s = {
    name = name, policy = p, template = p.cp, shm = tbl, ptr = tbl.shm,
    hold = hold * 1e9, classify = p.classify,
    budget = type(t.budget) == "table", breaker = type(t.breaker) == "table",
    ratelimit = type(l) == "table" and l.rate ~= nil,
    timeout_ms = (t.attempt_timeout or t.deadline) * 1000,
    cps = {}, gens = {}, overflow = 0,
  }
  scopes[name] = s
  return s
end

-- gw.limiter(name, { rate = per second, burst = 1, slots = 4096, hold = 60 })
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
  local tbl = new_table("limiter", { slots = opts.slots or 4096,
                                    limiter = { rate = opts.rate, burst = burst } })
  local s = { name = name, shm = tbl, ptr = tbl.shm, rate = opts.rate, burst = burst,
              hold = seconds("limiter", "hold", opts.hold, 60) * 1e9, overflow = 0 }
  limiters[name] = s
  return s
end

-- gw.upstream(name, { host, port } or { location = "/internal/proxy" },
--             keepalive = 60 (s), pool = 64 (connections per worker)).
function _M.upstream(name, opts)
  check_name("upstream", name)
  if type(opts) ~= "table" then error(bad("upstream", "opts", "a table", opts), 2) end
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
  u.pool = opts.pool or 64
  upstreams[name] = u
  return u
end

-- --------------------------------------------------- per-key policies

-- Out-parameters, one per module: read before anything can yield.
local step = ffi_new("nres_step_t")
local gen_box = ffi_new("uint32_t[1]")
local wait_box = ffi_new("double[1]")

-- This worker's policy for slot idx of scope s: a copy of the template
-- pointed at the slot's shared state, remade when the slot changes key.
local function rebuild(s, idx, gen)
  local cp = s.cps[idx + 1]
  if cp == nil then
    cp = ffi_new("nres_policy_t")
    s.cps[idx + 1] = cp     -- kept referenced: calls point into it
  end
  local t = s.template
  ffi_copy(cp, t, POLICY_SIZE)
  -- The copy's pointers into the template's own storage, now into its own.
  if t.estimator == t.own.estimator then cp.estimator = cp.own.estimator end
  if t.budget == t.own.budget then cp.budget = cp.own.budget end
  if t.breaker == t.own.breaker then cp.breaker = cp.own.breaker end
  local slot = C.nres_shm_slot(s.ptr, idx)
  if s.budget then cp.budget = slot.budget end
  if s.breaker then cp.breaker = slot.breaker end
  if s.ratelimit then cp.ratelimit = slot.ratelimit end
  C.nres_policy_counters_reset(cp)
  local rc = C.nres_policy_build(cp)
  if rc ~= 0 then
    error("nres.ngx: the runtime refused a scope's policy copy ("
          .. ffi_string(C.nres_err_name(rc)) .. ")")
  end
  s.gens[idx + 1] = gen
  return cp
end

-- The policy for `key` (a string of 1..64 bytes) in scope s, leased until
-- now + hold, and its slot index; when the table is full of keys in use,
-- this worker's own template (state not shared) and -1.
local function policy_for(s, key, now)
  local idx = sh_acquire(s.ptr, key, #key, now, s.hold, gen_box)
  if idx < 0 then
    s.overflow = s.overflow + 1
    return s.template, -1
  end
  local gen = gen_box[0]
  local cp = s.cps[idx + 1]
  if cp == nil or s.gens[idx + 1] ~= gen then cp = rebuild(s, idx, gen) end
  return cp, idx
end

-- For tests and custom drivers: policy_for by scope name.
function _M.policy_for(sname, key, now)
  local s = scopes[sname]
  if s == nil then error(bad("policy_for", "scope", "a scope declared with gw.scope", sname), 2) end
  if type(key) ~= "string" or #key < 1 or #key > 64 then
    error(bad("policy_for", "key", "a string of 1..64 bytes", key), 2)
  end
  return policy_for(s, key, now or step_now())
end

-- Call records: nres.run's free list. A record stays referenced by the
-- running request (the local `call`) across its sleeps and yields.
local take_call, give_call = require("nres.run").take_call, require("nres.run").give_call


-- -------------------------------------------------------- the attempts

local ngx = ngx
local tcp = ngx and ngx.socket and ngx.socket.tcp
local ngx_sleep = ngx and ngx.sleep

-- The response is read with receiveany (whatever has arrived, one call for
-- a small response) and parsed with string.find over the buffer, rather
-- than line by line: each cosocket call costs more than the parsing.
local RECV_MAX = 65536
local HEAD_MAX = 65536

-- More bytes on buf, or nil, err.
local function more(sock, buf)
  local data, err = sock:receiveany(RECV_MAX)
  if not data then return nil, err end
  return buf .. data
end

-- A chunked body starting at buf[pos]: body, the bytes left over after it
-- (0 on a clean end); or nil, err.
local function read_chunked(sock, buf, pos)
  local parts, n = nil, 0
  local err
  -- The usual small answer: one chunk and the last one, all in buf.
  local size = tonumber(match(buf, "^(%x+)\r\n", pos), 16)
  if size and size > 0 then
    local first = find(buf, "\n", pos, true) + 1
    local stop = first + size + 1
    if sub(buf, stop - 1, stop + 5) == "\r\n0\r\n\r\n" then
      return sub(buf, first, first + size - 1), #buf - (stop + 5)
    end
  end
  while true do
    local eol = find(buf, "\r\n", pos, true)
    while not eol do
      buf, err = more(sock, buf)
      if not buf then return nil, err end
      eol = find(buf, "\r\n", pos, true)
    end
    local size = tonumber(match(buf, "^%x+", pos), 16)
    if not size then return nil, "bad chunk size" end
    if size == 0 then   -- trailers, up to an empty line
      local stop = eol
      while sub(buf, stop, stop + 3) ~= "\r\n\r\n" and sub(buf, eol + 2, eol + 3) ~= "\r\n" do
        local e = find(buf, "\r\n\r\n", eol, true)
        if e then stop = e; break end
        buf, err = more(sock, buf)
        if not buf then return nil, err end
      end
      local last = sub(buf, eol + 2, eol + 3) == "\r\n" and eol + 3 or stop + 3
      if n == 0 then return "", #buf - last end
      return n == 1 and parts[1] or concat(parts, "", 1, n), #buf - last
    end
    local first = eol + 2
    local stop = first + size + 1   -- the chunk's closing CRLF
    if #buf < stop then
      local rest
      rest, err = sock:receive(stop - #buf)
      if not rest then return nil, err end
      buf = buf .. rest
    end
    n = n + 1
    if parts == nil then parts = {} end
    parts[n] = sub(buf, first, first + size - 1)
    pos = stop + 1
  end
end

-- One request over a cosocket, bounded by `at` (ns on the runtime clock).
-- status, body, content_type, retry_after; or nil, err.
local function cosocket_attempt(u, at, method, path, body, deadline_ms)
  local sock = tcp()
  local left = floor((at - step_now()) / 1e6)
  if left < 1 then return nil, "timeout" end
  sock:settimeouts(left, left, left)
  local ok, err = sock:connect(u.host, u.port)
  if not ok then return nil, err end
  local req = method .. " " .. path .. " HTTP/1.1\r\nHost: " .. u.host_header
              .. "\r\nX-Deadline-Ms: " .. deadline_ms
              .. (body and ("\r\nContent-Length: " .. #body) or "")
              .. "\r\n\r\n" .. (body or "")
  ok, err = sock:send(req)
  if not ok then sock:close(); return nil, err end
  -- The read timeout is what is left of the attempt after connect and send.
  left = floor((at - step_now()) / 1e6)
  if left < 1 then sock:close(); return nil, "timeout" end
  sock:settimeout(left)

  local buf
  buf, err = sock:receiveany(RECV_MAX)
  if not buf then sock:close(); return nil, err end
  local hend = find(buf, "\r\n\r\n", 1, true)
  while not hend do
    if #buf > HEAD_MAX then sock:close(); return nil, "response header too large" end
    buf, err = more(sock, buf)
    if not buf then sock:close(); return nil, err end
    hend = find(buf, "\r\n\r\n", 1, true)
  end
  local status = tonumber(sub(buf, 10, 12))
  if not status or sub(buf, 1, 5) ~= "HTTP/" then
    sock:close()
    return nil, "bad status line"
  end
  -- The header block, lower-cased once, searched for the few we need.
  local head = lower(sub(buf, 1, hend + 1))
  local close = find(head, "\r\nconnection:[^\r]*close") ~= nil
                or (sub(head, 6, 8) == "1.0" and not find(head, "\r\nconnection:[^\r]*keep%-alive"))
  local ctype, ra
  local _, e = find(head, "\r\ncontent%-type:[ \t]*")
  if e then ctype = match(buf, "^[^\r]*", e + 1) end
  _, e = find(head, "\r\nretry%-after:[ \t]*")
  if e then ra = match(buf, "^[^\r]*", e + 1) end

  local data, extra = "", 0
  local first = hend + 4
  if method == "HEAD" or status == 204 or status == 304 or status < 200 then
    extra = #buf - hend - 3
  else
    local len = tonumber(match(head, "\r\ncontent%-length:[ \t]*(%d+)"))
    if len then
      local stop = first + len - 1
      if #buf >= stop then
        data, extra = sub(buf, first, stop), #buf - stop
      else
        left = floor((at - step_now()) / 1e6)
        if left < 1 then sock:close(); return nil, "timeout" end
        sock:settimeout(left)
        local rest
        rest, err = sock:receive(stop - #buf)
        if not rest then sock:close(); return nil, err end
        data = sub(buf, first) .. rest
      end
    elseif find(head, "\r\ntransfer%-encoding:[^\r]*chunked") then
      data, extra = read_chunked(sock, buf, first)
      if not data then sock:close(); return nil, extra end
    else   -- delimited by the connection's end
      local rest
      rest, err = sock:receive("*a")
      if not rest then sock:close(); return nil, err end
      data, close = sub(buf, first) .. rest, true
    end
  end
  -- Bytes past the response mean the connection is out of step: drop it.
  if close or extra ~= 0 then sock:close() else sock:setkeepalive(u.keepalive, u.pool) end
  return status, data, ctype, ra
end

-- One subrequest to an internal location. Its timeouts are the location's
-- own; X-Deadline-Ms reaches the upstream through $nres_deadline_ms, set
-- in the subrequest: the location says `proxy_set_header X-Deadline-Ms
-- $nres_deadline_ms;`, and the variable is declared by a
-- `set $nres_deadline_ms "";` in some other location (one in the proxy
-- location itself would overwrite the value).
local capture_vars = {}
local capture_opts = { vars = capture_vars }
local METHODS = {}
if ngx then
  METHODS = { GET = ngx.HTTP_GET, HEAD = ngx.HTTP_HEAD, POST = ngx.HTTP_POST,
              PUT = ngx.HTTP_PUT, DELETE = ngx.HTTP_DELETE, OPTIONS = ngx.HTTP_OPTIONS,
              PATCH = ngx.HTTP_PATCH }
end

local function capture_attempt(u, at, method, path, body, deadline_ms)
  -- capture copies its options before it yields: one table serves all.
  capture_opts.method = METHODS[method] or METHODS.GET
  capture_opts.body = body
  capture_vars.nres_deadline_ms = deadline_ms
  local res = ngx.location.capture(u.location .. path, capture_opts)
  if res.truncated then return nil, "truncated response" end
  if res.status == 0 then return nil, "no response" end
  local h = res.header
  return res.status, res.body, h["Content-Type"], h["Retry-After"]
end

-- The classifier sees one response table (a module-level one: it is read
-- before anything yields).
local resbox = {}

-- -------------------------------------------------------------- the call

-- Run one upstream request under scope `sname` against upstream `uname`:
-- status, body, content_type on success; nil, reason, status, body,
-- content_type, err otherwise (status and body of the last response, if
-- there was one). key defaults to the upstream's; method and path to the
-- client request's.
function _M.request(sname, uname, key, method, path, body)
  local s, u = scopes[sname], upstreams[uname]
  if s == nil then error(bad("request", "scope", "a scope declared with gw.scope", sname), 2) end
  if u == nil then error(bad("request", "upstream", "an upstream declared with gw.upstream", uname), 2) end
  key = key or u.key
  if #key > 64 then key = ngx.md5(key) end
  method = method or ngx.req.get_method()
  path = path or ngx.var.request_uri

  local now = step_now()
  local inbound = -1
  local hdr = ngx.var.http_x_deadline_ms
  if hdr then
    local ms = tonumber(hdr)
    if ms and ms >= 0 then inbound = now + ms * 1e6 end
  end

  local ptr = s.ptr
  local cp, idx = policy_for(s, key, now)

  local attempt = u.location and capture_attempt or cosocket_attempt
  local classify, default_ms = s.classify, s.timeout_ms
  local call = take_call()
  local kind = step_begin(call, cp, now, inbound, step)
  local status, data, ctype, ra, err
  while kind ~= DONE do
    if kind == ATTEMPT then
      local slot, at = step.slot, step.at
      local t = step_now()
      if at < 0 then at = t + default_ms * 1e6 end
      local ms = floor((at - t) / 1e6)
      status, data, ctype, ra = attempt(u, at, method, path, body, ms > 0 and ms or 0)
      local vk, fl, ra_ns
      if status then
        err = nil
        resbox.status, resbox.retry_after = status, ra
        vk, fl, ra_ns = classify(true, resbox, nil)
      else
        err = data
        vk, fl, ra_ns = classify(true, nil, err)
      end
      kind = step_report(call, slot, step_now(), vk, fl, ra_ns, step)
    else
      -- nginx timers have ms resolution: round up, so the machine is never
      -- resumed early (and ngx.sleep(0) never spins).
      local delay = step.at - step_now()
      if delay > 0 then ngx_sleep(ceil(delay / 1e6) / 1e3) end
      kind = step_resume(call, step_now(), step)
    end
  end
  local stop = step.stop
  if idx >= 0 then sh_record(ptr, idx, stop, call.attempts, call.retries) end
  give_call(call)
  if stop == STOP_OK then return status, data, ctype end
  return nil, reasons[stop], status, data, ctype, err
end

-- Content handler: request() and send the answer. A failure with an
-- upstream response passes that response on; one without gets 503 (the
-- gateway refused: circuit open, budget exhausted, rate limited), 504 (out
-- of time) or 502 (the upstream could not be reached). X-Nres-Reason says
-- why a call failed.
function _M.proxy(sname, uname, key)
  local method = ngx.req.get_method()
  local body
  if method == "POST" or method == "PUT" or method == "PATCH" then
    ngx.req.read_body()
    body = ngx.req.get_body_data()
  end
  -- success: status, body, content type; failure: nil, reason, then the
  -- last response's status, body and content type (if any), and the error.
  local r1, r2, r3, r4, r5, r6 =
    _M.request(sname, uname, key, method, ngx.var.request_uri, body)
  if r1 ~= nil then
    ngx.status = r1
    if r3 then ngx.header["Content-Type"] = r3 end
    ngx.print(r2)
    return
  end
  local reason, status, data, ctype, err = r2, r3, r4, r5, r6
  ngx.header["X-Nres-Reason"] = reason
  if status ~= nil then
    ngx.status = status
    if ctype then ngx.header["Content-Type"] = ctype end
    ngx.print(data)
    return
  end
  if reason == "deadline exceeded" or err == "timeout" then
    ngx.status = 504
  elseif reason == "circuit open" or reason == "budget exhausted"
      or reason == "rate limited" or reason == "draining" then
    ngx.status = 503
  else
    ngx.status = 502
  end
  ngx.print(reason, "\n")
end

-- ------------------------------------------------------------- limits

-- One admission for `key` (e.g. the client address) from limiter `name`:
-- true, or false and the seconds until one would be allowed. A full table
-- admits (and counts the overflow): the limiter never fails closed.
function _M.limit(name, key)
  local s = limiters[name]
  if s == nil then error(bad("limit", "limiter", "a limiter declared with gw.limiter", name), 2) end
  if #key > 64 then key = ngx.md5(key) end
  local now = step_now()
  local idx = sh_acquire(s.ptr, key, #key, now, s.hold, gen_box)
  if idx < 0 then
    s.overflow = s.overflow + 1
    return true
  end
  if sh_limit(s.ptr, idx, now, wait_box) == 0 then return true end
  return false, wait_box[0] / 1e9
end

-- Access-phase helper: 429 with Retry-After (whole seconds, at least 1)
-- when `key` is over its rate.
function _M.limit_client(name, key)
  local ok, wait = _M.limit(name, key)
  if ok then return true end
  ngx.header["Retry-After"] = ceil(wait) > 0 and ceil(wait) or 1
  ngx.header["X-Nres-Reason"] = "rate limited"
  return ngx.exit(429)
end

-- ------------------------------------------------------------- status

local stop_names = reasons
local BREAKER_STATES = { [0] = "closed", "open", "half-open", "isolated" }
local REJECTS = { [0] = "breaker", "budget", "rate", "concurrency", "draining" }

local function by_refused(a, b) return a.rate_refused > b.rate_refused end

-- A table's status. A limiter lists only its most refused keys (`top`),
-- with totals over all of them: its keys are clients, thousands of them.
local function scope_status(s, now, worker_local, top)
  local st = s.shm:stats()
  st.overflow_this_worker = s.overflow
  local keys = {}
  local asked, refused = 0, 0
  for i = 0, s.shm.slots - 1 do
    local key, gen, lease = s.shm:key(i)
    if key then
      local slot = s.shm:slot(i)
      local k = {
        key = key, slot = i,
        calls = tonumber(slot.calls), attempts = tonumber(slot.attempts),
        retries = tonumber(slot.retries), stops = {},
        lease = math.max(0, (lease - now) / 1e9),   -- s before it may be evicted
      }
      for stop = 1, 9 do
        local n = tonumber(slot.stops[stop])
        if n > 0 then k.stops[stop_names[stop]] = n end
      end
      if s.breaker then
        local state = C.nres_breaker_state(slot.breaker, now)
        k.breaker = BREAKER_STATES[state]
        k.breaker_trips = tonumber(slot.breaker.trips)
        k.breaker_rejected = tonumber(slot.breaker.rejected)
      end
      if s.budget then
        k.budget = C.nres_budget_level(slot.budget, now)
        k.budget_spent = tonumber(slot.budget.spent)
        k.budget_refused = tonumber(slot.budget.refused)
      end
      if s.ratelimit or s.rate then
        k.rate_refused = tonumber(slot.ratelimit.refused)
        asked, refused = asked + k.calls, refused + k.rate_refused
      end
      if worker_local then
        local cp = s.cps and s.cps[i + 1]
        if cp ~= nil and s.gens[i + 1] == gen then
          local rej = {}
          for r = 0, 4 do rej[REJECTS[r]] = tonumber(cp.n_rejects[r]) end
          k.this_worker = { rejects = rej, retries = tonumber(cp.n_retries) }
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

function _M.prometheus(snap)
  local out = { n = 0, seen = {} }
  emit_tables(out, snap.scopes, "scope")
  emit_tables(out, snap.limiters, "limiter")
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
  local cjson = require "cjson.safe"
  ngx.header["Content-Type"] = "application/json"
  ngx.print(cjson.encode(snap), "\n")
end

return _M

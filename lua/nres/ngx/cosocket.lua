-- SPDX-License-Identifier: MIT
-- nres.ngx.cosocket: the cosocket proxy path - nres's own call loop
-- (nres_step_*) driving each attempt as a cosocket HTTP/1.1 request (or a
-- subrequest to an internal location), with waits as ngx.sleep; request()
-- and the content handler proxy().
local ffi = require "ffi"
local cdef = require "nres.cdef"
require "nres.cdef.gateway"
local run = require "nres.run"
local config = require "nres.ngx.config"
local region = require "nres.ngx.region"
local criticality = config.criticality

local C = cdef.C
local ffi_new = ffi.new
local tonumber, error = tonumber, error
local floor, ceil, concat = math.floor, math.ceil, table.concat
local sub, find, lower, match = string.sub, string.find, string.lower, string.match

local step_begin, step_report, step_resume = C.nres_step_begin_class, C.nres_step_report, C.nres_step_resume
local step_now = C.nres_step_now
local deadline_ms, gw_key = C.nres_gw_deadline_ms, C.nres_gw_key
local key_buf = ffi.new("char[32]")          -- nres_gw_key's MD5 of a long key
local key_out = ffi.new("const char *[1]")
local sh_record = C.nres_shm_record
local bad, scopes, upstreams = config.bad, config.scopes, config.upstreams
local policy_for = region.acquire

local _M = {}

local ATTEMPT, DONE = 0, 2
local STOP_OK, STOP_ATTEMPTS, STOP_CIRCUIT = 1, 3, 6
local VERDICT_OK = 0
local band = require("bit").band
local control_count = C.nres_gw_control_count
local reasons = run.reasons
local stop_of = {}   -- a stop reason's text -> its nres_stop_t
for stop, text in pairs(reasons) do stop_of[text] = stop end

-- Out-parameters, one per module: read before anything can yield.
local step = ffi_new("nres_step_t")


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
local function cosocket_attempt(u, at, method, path, body, deadline_ms, holder, crit)
  local sock = tcp()
  if holder ~= nil then holder.sock = sock end   -- a hedge loser's is closed
  local left = floor((at - step_now()) / 1e6)
  if left < 1 then return nil, "timeout" end
  sock:settimeouts(left, left, left)
  local ok, err = sock:connect(u.host, u.port)
  if not ok then return nil, err end
  local req = method .. " " .. path .. " HTTP/1.1\r\nHost: " .. u.host_header
              .. "\r\nX-Deadline-Ms: " .. deadline_ms
              .. (crit and ("\r\nX-Criticality: " .. crit) or "")
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


-- ---------------------------------------------------------- hedging

-- A hedged call: attempts side by side as light threads (ngx.thread), the
-- C machine deciding when a hedge is due (the live latency quantile), what
-- it costs (a retry-budget token, the scope's shared budget), when hedging
-- stops (failure ratio over hedge.suppress, a throttled answer) and who
-- loses: the first good answer wins, and each loser's light thread is
-- killed and its socket closed. Only idempotent requests are hedged:
-- GET, HEAD and OPTIONS, or any method with an Idempotency-Key header or
-- X-Idempotent: 1; the others, and every subrequest upstream ({ location }:
-- a light thread with a pending subrequest cannot be killed), run one
-- attempt at a time as before. Allocates per call (records, threads): only
-- hedged calls do.
local IDEMPOTENT = { GET = true, HEAD = true, OPTIONS = true }
local tasks = require("nres.driver").nginx     -- spawn, wait_any, kill
local ended, kill_all = run.ended, run.kill_all

local function idempotent(method)
  if IDEMPOTENT[method] then return true end
  local v = ngx.var.http_x_idempotent
  return ngx.var.http_idempotency_key ~= nil or v == "1" or v == "true"
end

local function attempt_thread(rec)
  local fine, status, data, ctype, ra = pcall(rec.attempt, rec.u, rec.at, rec.method, rec.path,
                                              rec.body, rec.ms, rec, rec.crit)
  if fine then
    rec.status, rec.data, rec.ctype, rec.ra = status, data, ctype, ra
  else
    rec.status, rec.data = nil, tostring(status)
  end
  rec.done = true
  return rec
end

-- A loser: its light thread killed, its socket closed.
local function drop(task, rec)
  tasks.kill(task)
  local sock = rec.sock
  if sock ~= nil then pcall(sock.close, sock) end
end

-- The loop of a hedged call that step_begin started (st: its own step, as
-- it yields while others run). Returns the stop and the winning (or last)
-- attempt's record.
local function hedged_loop(s, u, call, st, attempt, method, path, body, crit)
  local classify, default_ms = s.classify, s.timeout_ms
  local recs, list, last = {}, {}, nil
  local kind = st.kind
  while kind ~= DONE do
    local at
    if kind == ATTEMPT then
      local t = step_now()
      local aat = st.at
      if aat < 0 then aat = t + default_ms * 1e6 end
      local ms = floor((aat - t) / 1e6)
      local rec = { slot = st.slot, hedge = st.hedge == 1, u = u, at = aat, method = method,
                    path = path, body = body, ms = ms > 0 and ms or 0, attempt = attempt,
                    crit = crit, done = false }
      recs[rec.slot] = rec
      rec.task = tasks.spawn(attempt_thread, rec)
      at = st.resume_at
    else
      at = st.at
    end
    local rec, n = ended(recs, list)
    if rec == nil and n == 0 then
      local delay = at - step_now()
      if delay > 0 then ngx_sleep(ceil(delay / 1e6) / 1e3) end
    elseif rec == nil then
      rec = tasks.wait_any(list, n, at)
      for i = n, 1, -1 do list[i] = nil end
    end
    if rec ~= nil then
      recs[rec.slot] = nil
      local vk, fl, ra_ns
      if rec.status then
        resbox.status, resbox.retry_after = rec.status, rec.ra
        vk, fl, ra_ns = classify(true, resbox, nil)
      else
        vk, fl, ra_ns = classify(true, nil, rec.data)
      end
      kind = step_report(call, rec.slot, step_now(), vk, fl, ra_ns, st)
      last = rec
      if st.cancel ~= 0 then kill_all(drop, recs, st.cancel) end
    else
      kind = step_resume(call, step_now(), st)
    end
  end
  kill_all(drop, recs, nil)
  local stop = st.stop
  if stop == STOP_OK and last.hedge then s.hedges_won = (s.hedges_won or 0) + 1 end
  return stop, last
end

-- -------------------------------------------------------------- dry-run

-- Did the control API's dry-run on scope s let a refused call through?
-- Only a call its breaker refused at the door (stop "circuit open", no
-- attempt made), as the balancers' admission (nres_gw_admit): counted in
-- the scope's would_refuse, then it goes on.
local DRY_RUN = 1   -- NRES_GW_DRY_RUN (nres.ngx.control.DRY_RUN)
local function dry_run(s, call, stop)
  local c = s.control
  if stop ~= STOP_CIRCUIT or call.attempts ~= 0 or c == nil or band(c.flags, DRY_RUN) == 0 then
    return false
  end
  control_count(c, 0)   -- NRES_GW_WOULD_CIRCUIT
  return true
end

-- A call dry-run let through: one attempt, no retries, bounded by the
-- scope's attempt timeout (and the inbound deadline), its outcome recorded
-- nowhere (the open breaker is not fed). request()'s returns.
local function one_attempt(s, u, attempt, now, inbound, method, path, body, crit)
  local at = now + s.timeout_ms * 1e6
  if inbound >= 0 and inbound < at then at = inbound end
  local ms = floor((at - step_now()) / 1e6)
  local status, data, ctype, ra = attempt(u, at, method, path, body, ms > 0 and ms or 0, nil, crit)
  if status then
    resbox.status, resbox.retry_after = status, ra
    if s.classify(true, resbox, nil) == VERDICT_OK then return status, data, ctype end
    return nil, reasons[STOP_ATTEMPTS], status, data, ctype, nil
  end
  return nil, reasons[STOP_ATTEMPTS], nil, nil, nil, data
end

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
  if gw_key(key, #key, key_buf, key_out) ~= #key then key = ffi.string(key_buf, 32) end
  method = method or ngx.req.get_method()
  path = path or ngx.var.request_uri

  local now = step_now()
  local inbound = -1
  local hdr = ngx.var.http_x_deadline_ms
  if hdr then   -- read as the balancers read it (nres_gw_deadline_ms)
    local ms = deadline_ms(hdr, #hdr)
    if ms == ms then inbound = now + ms * 1e6 end
  end

  -- Criticality: inherited from X-Criticality (critical, default,
  -- sheddable; Google's CRITICAL_PLUS and SHEDDABLE_PLUS fold into the
  -- nearest), passed on upstream with the cosocket requests; unknown or
  -- absent: default. Under overload the scope's limiter and budget refuse
  -- sheddable calls first (limiter.reserve, nres_call_begin_class).
  local cls, crit = criticality(ngx.var.http_x_criticality)

  local ptr = s.ptr
  local cp, idx = policy_for(s, key, now)

  local attempt = u.location and capture_attempt or cosocket_attempt
  local classify, default_ms = s.classify, s.timeout_ms
  local call = take_call()
  if s.hedged and tasks and tasks.spawn and not u.location and idempotent(method) then
    local st = ffi_new("nres_step_t")
    if step_begin(call, cp, now, inbound, cls, st) == DONE and dry_run(s, call, st.stop) then
      give_call(call)
      return one_attempt(s, u, attempt, now, inbound, method, path, body, crit)
    end
    local stop, last = hedged_loop(s, u, call, st, attempt, method, path, body, crit)
    if idx >= 0 then sh_record(ptr, idx, stop, call.attempts, call.retries) end
    give_call(call)
    if stop == STOP_OK then return last.status, last.data, last.ctype end
    if last == nil then return nil, reasons[stop] end
    if last.status then return nil, reasons[stop], last.status, last.data, last.ctype, nil end
    return nil, reasons[stop], nil, nil, nil, last.data
  end
  local kind = step_begin(call, cp, now, inbound, cls, step)
  if kind == DONE and dry_run(s, call, step.stop) then
    give_call(call)
    return one_attempt(s, u, attempt, now, inbound, method, path, body, crit)
  end
  local status, data, ctype, ra, err
  while kind ~= DONE do
    if kind == ATTEMPT then
      local slot, at = step.slot, step.at
      local t = step_now()
      if at < 0 then at = t + default_ms * 1e6 end
      local ms = floor((at - t) / 1e6)
      status, data, ctype, ra = attempt(u, at, method, path, body, ms > 0 and ms or 0, nil, crit)
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
-- upstream response passes that response on; one without gets the status
-- of nres_gw_refusal's table: 503 (the gateway refused: circuit open,
-- budget exhausted, rate limited, throttled locally), 504 (out of time) or
-- 502 (the upstream could not be reached). X-Nres-Reason says
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
  -- the status of nres_gw_refusal's table (the balancers answer from it
  -- too); an attempt that timed out is a 504 whatever stopped the call
  local stop = stop_of[reason]
  local status = stop and tonumber(C.nres_gw_refusal(stop, 0, nil)) or 0
  if err == "timeout" then status = 504 elseif status == 0 then status = 502 end
  ngx.status = status
  ngx.print(reason, "\n")
end

return _M

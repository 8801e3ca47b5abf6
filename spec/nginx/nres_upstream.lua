-- SPDX-License-Identifier: MIT
-- nres_upstream: the upstream the gateway tests and benchmarks run against,
-- served by a second nginx with Lua (spec/nginx/upstream.conf.in).
--
-- Modes, set with GET /admin?mode=...:
--   healthy          every request 200
--   every&n=N        every Nth request 503 (one counter for all workers:
--                    ngx.shared.up:incr is atomic)
--   down             every request 503
--   blip&for=S[&in=D] healthy for D s, then 503 for S s, then healthy
--                    again; the stats say when it recovered (epoch s)
--   garbage          every request answered with bytes that are no
--                    HTTP status line (nginx's proxy reads an HTTP/0.9
--                    answer), then the connection closed
--   &delay=MS (with any mode) healthy answers wait MS ms first
--   &status=N (with any mode) failing answers are N (default 503)
--   &capacity=C (with any mode) at most C healthy answers in flight (on
--                    this port, all workers); one more is refused at once
--                    with the failing status, counted as failed: an
--                    overload (0: no limit, the default)
-- Each port the server listens on is its own upstream with its own mode and
-- counters (the peers of a pool): /admin on that port sets and reads them.
-- GET /admin (no mode) returns the counters as JSON; &reset=1 (also with a
-- mode) zeroes them. A request to a path under /_health (the gateway's
-- active health checks) counts as `health`, not as a request, and is
-- answered like any other (a failing mode fails it, a delay delays it)
-- unless &health=pass (with a mode) says it always passes (&health= ends
-- that): a peer whose health path lies.
-- Every request to any other path counts as an upstream request; those carrying a numeric X-Deadline-Ms header are counted too,
-- unless the environment says NRES_UPSTREAM_DEADLINES=off (the benchmarks:
-- that bookkeeping is the tests', not a cost of the header, and the
-- upstream shares the gateway's cores; callgrind, this upstream alone,
-- 3000 requests: a request with the header cost 0.94k instructions more
-- than one without while counting, 0.43k - nginx parsing the line - when
-- not; with_deadline and the extremes then stay 0 and null).
-- A healthy answer is "ok\n", chunked; a path ending in /length gets it
-- with a Content-Length, one ending in /big 200,000 bytes in four chunks.
local _M = {}

local dict = ngx.shared.up
local floor = math.floor
-- "<port>:with_deadline" holds epoch * EPOCH + count: reset() moves it to
-- the next epoch, so serve's one incr both counts and tells a worker that
-- its cached extremes are stale (no other dict read per request: the
-- upstream's bookkeeping for a gateway that sends X-Deadline-Ms costs
-- about what it costs for one that does not, so benchmarks compare the
-- gateways, not this upstream's stats).
local EPOCH = 2 ^ 32
local seen_epoch, lo, hi = {}, {}, {}   -- per port: this worker's deadline extremes
local wd_key = {}                       -- per port: its "with_deadline" key
local count_deadlines = os.getenv("NRES_UPSTREAM_DEADLINES") ~= "off"
-- Every listening port is its own upstream (a peer of a pool): its state
-- in the dict is under "<port>:". Set at the top of admin and serve.
local P = ""

local function stats()
  return {
    mode = dict:get(P .. "mode") or "healthy",
    delay = dict:get(P .. "delay"),
    n = dict:get(P .. "n"),
    requests = dict:get(P .. "requests") or 0,
    health = dict:get(P .. "health") or 0,
    failed = dict:get(P .. "failed") or 0,
    with_deadline = (dict:get(P .. "with_deadline") or 0) % EPOCH,
    deadline_min = dict:get(P .. "deadline_min"),
    deadline_max = dict:get(P .. "deadline_max"),
    blip_from = dict:get(P .. "blip_from"),
    blip_until = dict:get(P .. "blip_until"),
    now = ngx.now(),
  }
end

local function reset()
  for _, k in ipairs { "requests", "health", "failed", "seq" } do dict:set(P .. k, 0) end
  local epoch = floor((dict:get(P .. "with_deadline") or 0) / EPOCH)
  dict:set(P .. "with_deadline", (epoch + 1) * EPOCH)
  dict:delete(P .. "deadline_min")
  dict:delete(P .. "deadline_max")
end

function _M.admin()
  P = ngx.var.server_port .. ":"
  local args = ngx.req.get_uri_args()
  if args.reset then reset() end
  local mode = args.mode
  if mode then
    if mode ~= "healthy" and mode ~= "every" and mode ~= "down" and mode ~= "blip"
       and mode ~= "garbage" then
      ngx.status = 400
      ngx.say("unknown mode ", mode)
      return
    end
    local status = tonumber(args.status or 503)
    if not status or status % 1 ~= 0 or status < 400 or status > 599 then
      ngx.status = 400
      ngx.say("status: expected a whole number 400..599, got ", tostring(args.status))
      return
    end
    if args.health ~= nil then dict:set(P .. "health_pass", args.health == "pass") end
    dict:set(P .. "seq", 0)
    dict:set(P .. "n", tonumber(args.n) or 2)
    dict:set(P .. "delay", tonumber(args.delay) or 0)
    dict:set(P .. "status", status)
    dict:set(P .. "capacity", tonumber(args.capacity) or 0)
    if mode == "blip" then
      ngx.update_time()
      local from = ngx.now() + (tonumber(args["in"]) or 0)
      dict:set(P .. "blip_from", from)
      dict:set(P .. "blip_until", from + (tonumber(args["for"]) or 3))
    end
    dict:set(P .. "mode", mode)
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.say(require("cjson").encode(stats()))
end

function _M.serve()
  P = ngx.var.server_port .. ":"
  if ngx.var.uri:find("^/_health") then
    dict:incr(P .. "health", 1, 0)
    if dict:get(P .. "health_pass") then return ngx.print("ok\n") end
  else
    dict:incr(P .. "requests", 1, 0)
  end
  local d = count_deadlines and tonumber(ngx.var.http_x_deadline_ms)
  if d then
    local key = wd_key[P]
    if key == nil then key = P .. "with_deadline"; wd_key[P] = key end
    local epoch = floor(dict:incr(key, 1, 0) / EPOCH)
    -- min/max of the propagated budgets: this worker's extremes since the
    -- last reset, written to the dict only when they move (racy across
    -- workers: stats only; cheap, see EPOCH)
    if epoch ~= seen_epoch[P] then seen_epoch[P], lo[P], hi[P] = epoch, nil, nil end
    local l, h = lo[P], hi[P]
    if not l or d < l then
      lo[P] = d
      local g = dict:get(P .. "deadline_min")
      if not g or d < g then dict:set(P .. "deadline_min", d) end
    end
    if not h or d > h then
      hi[P] = d
      local g = dict:get(P .. "deadline_max")
      if not g or d > g then dict:set(P .. "deadline_max", d) end
    end
  end
  local mode = dict:get(P .. "mode") or "healthy"
  local fail = false
  if mode == "garbage" then
    dict:incr(P .. "failed", 1, 0)
    local sock = assert(ngx.req.socket(true))
    sock:send("garbage, no status line\n")
    return ngx.exit(444)
  elseif mode == "down" then
    fail = true
  elseif mode == "every" then
    local seq = dict:incr(P .. "seq", 1, 0)
    fail = seq % (dict:get(P .. "n") or 2) == 0
  elseif mode == "blip" then
    ngx.update_time()
    local now = ngx.now()
    fail = now >= dict:get(P .. "blip_from") and now < dict:get(P .. "blip_until")
  end
  local cap = dict:get(P .. "capacity") or 0
  if not fail and cap > 0 then   -- an overload: refused at once beyond capacity
    if dict:incr(P .. "inflight", 1, 0) > cap then
      dict:incr(P .. "inflight", -1, 0)
      fail = true
    else
      cap = -1   -- holds a place: given back below
    end
  end
  if fail then
    dict:incr(P .. "failed", 1, 0)
    ngx.status = dict:get(P .. "status") or 503
    ngx.header["Content-Type"] = "text/plain"
    ngx.print("unavailable\n")
    return
  end
  local delay = dict:get(P .. "delay")
  if delay and delay > 0 then ngx.sleep(delay / 1000) end
  if cap == -1 then dict:incr(P .. "inflight", -1, 0) end
  ngx.header["Content-Type"] = "text/plain"
  local uri = ngx.var.uri
  if uri:find("/big$") then     -- 200,000 bytes in four flushed chunks
    for i = 1, 4 do
      ngx.print(string.rep(tostring(i), 50000))
      ngx.flush(true)
    end
    return
  elseif uri:find("/length$") then  -- Content-Length instead of chunked
    ngx.header["Content-Length"] = 3
  end
  ngx.print("ok\n")
end

return _M

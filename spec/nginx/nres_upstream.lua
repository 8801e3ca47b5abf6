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
-- GET /admin (no mode) returns the counters as JSON; &reset=1 (also with a
-- mode) zeroes them. Every request to any other path counts as an upstream
-- request; those carrying a numeric X-Deadline-Ms header are counted too.
-- A healthy answer is "ok\n", chunked; a path ending in /length gets it
-- with a Content-Length, one ending in /big 200,000 bytes in four chunks.
local _M = {}

local dict = ngx.shared.up
local seen_epoch, lo, hi   -- this worker's deadline extremes (see serve)

local function stats()
  return {
    mode = dict:get("mode") or "healthy",
    n = dict:get("n"),
    requests = dict:get("requests") or 0,
    failed = dict:get("failed") or 0,
    with_deadline = dict:get("with_deadline") or 0,
    deadline_min = dict:get("deadline_min"),
    deadline_max = dict:get("deadline_max"),
    blip_from = dict:get("blip_from"),
    blip_until = dict:get("blip_until"),
    now = ngx.now(),
  }
end

local function reset()
  for _, k in ipairs { "requests", "failed", "seq", "with_deadline" } do dict:set(k, 0) end
  dict:delete("deadline_min")
  dict:delete("deadline_max")
  dict:incr("epoch", 1, 0)
end

function _M.admin()
  local args = ngx.req.get_uri_args()
  if args.reset then reset() end
  local mode = args.mode
  if mode then
    if mode ~= "healthy" and mode ~= "every" and mode ~= "down" and mode ~= "blip" then
      ngx.status = 400
      ngx.say("unknown mode ", mode)
      return
    end
    dict:set("seq", 0)
    dict:set("n", tonumber(args.n) or 2)
    if mode == "blip" then
      ngx.update_time()
      local from = ngx.now() + (tonumber(args["in"]) or 0)
      dict:set("blip_from", from)
      dict:set("blip_until", from + (tonumber(args["for"]) or 3))
    end
    dict:set("mode", mode)
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.say(require("cjson").encode(stats()))
end

function _M.serve()
  dict:incr("requests", 1, 0)
  local d = tonumber(ngx.var.http_x_deadline_ms)
  if d then
    dict:incr("with_deadline", 1, 0)
    -- min/max of the propagated budgets: this worker's extremes since the
    -- last reset, written to the dict only when they move (racy across
    -- workers: stats only; cheap, so a gateway that sends the header is
    -- not slowed down in benchmarks by the upstream's bookkeeping)
    local epoch = dict:get("epoch")
    if epoch ~= seen_epoch then seen_epoch, lo, hi = epoch, nil, nil end
    if not lo or d < lo then
      lo = d
      local g = dict:get("deadline_min")
      if not g or d < g then dict:set("deadline_min", d) end
    end
    if not hi or d > hi then
      hi = d
      local g = dict:get("deadline_max")
      if not g or d > g then dict:set("deadline_max", d) end
    end
  end
  local mode = dict:get("mode") or "healthy"
  local fail = false
  if mode == "down" then
    fail = true
  elseif mode == "every" then
    local seq = dict:incr("seq", 1, 0)
    fail = seq % (dict:get("n") or 2) == 0
  elseif mode == "blip" then
    ngx.update_time()
    local now = ngx.now()
    fail = now >= dict:get("blip_from") and now < dict:get("blip_until")
  end
  if fail then
    dict:incr("failed", 1, 0)
    ngx.status = 503
    ngx.header["Content-Type"] = "text/plain"
    ngx.print("unavailable\n")
    return
  end
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

-- SPDX-License-Identifier: MIT
-- nresrun.tune.trace: read a recorded trace of calls to one dependency.
--
-- Three formats, told apart by the first line that is not blank or a
-- "#" comment (the third, a line starting "{", is the gateway's JSON try
-- log: nresrun.tune.jsonl):
--   csv    "time,latency,outcome" (the header is optional): one row per
--          request to the dependency; time = when it was sent, in seconds
--          (any origin, e.g. Unix time), latency = seconds until its
--          answer, outcome = ok | error | timeout | refused (a throttled
--          answer: 429, 503, "overloaded").
--   nginx  an access log written with
--            log_format nres_tune '$msec $request_time "$upstream_response_time" '
--                                 '"$upstream_status" $status "$upstream_addr"';
--          one line per client request, its tries as nginx writes them
--          ("0.003, 0.002" and "503, 200"; a " : " between groups after
--          an internal redirect reads as a comma). The request was sent at
--          $msec - $request_time. A try's status reads: 429 and 503
--          refused, 504 or none ("-") timeout, other 5xx error, any other
--          answer ok (the dependency answered).
--
-- read(path) returns a trace { format, path, requests = { { t, tries =
-- { { latency, outcome } } } } sorted by t, t in seconds from
-- origin (the first request's whole second on the trace's clock), warnings = { "..." } } or nil, error. Bad input: a line that does
-- not parse is counted and the first one named (file:line) in a warning;
-- more bad lines than good is an error (the wrong format, not noise);
-- fewer than MIN_REQUESTS requests is an error; a clock going backwards by
-- more than BACKWARDS_S (nginx's workers append lines a little out of
-- order) is an error, by less a counted warning and the lines are sorted.
local format, tonumber = string.format, tonumber

local _M = { _VERSION = "0.1.0" }

_M.MIN_REQUESTS = 200
_M.BACKWARDS_S = 1
_M.OUTCOMES = { ok = true, error = true, timeout = true, refused = true }

_M.LOG_FORMAT = [[log_format nres_tune '$msec $request_time "$upstream_response_time" '
                     '"$upstream_status" $status "$upstream_addr"';]]

local function finite(v) return v and v == v and v > -math.huge and v < math.huge end

-- ------------------------------------------------------------------ csv

local function csv_line(line)
  local a, b, c = line:match("^%s*([^,]+),%s*([^,]+),%s*([^,%s]+)%s*$")
  if not a then return nil, "expected three fields: time,latency,outcome" end
  local t, l = tonumber(a), tonumber(b)
  if not finite(t) then return nil, format("time: expected seconds, got %q", a) end
  if not finite(l) or l < 0 then return nil, format("latency: expected seconds >= 0, got %q", b) end
  c = c:lower()
  if not _M.OUTCOMES[c] then return nil, format("outcome: expected ok, error, timeout or refused, got %q", c) end
  return t, { { latency = l, outcome = c } }
end

-- ---------------------------------------------------------------- nginx

local function status_outcome(s)
  local n = tonumber(s)
  if not n then return "timeout" end   -- "-": no answer
  if n == 429 or n == 503 then return "refused" end
  if n == 504 then return "timeout" end
  if n >= 500 then return "error" end
  return "ok"
end

local function split(list)
  local out = {}
  for item in (list .. ","):gmatch("%s*([^,:]-)%s*[,:]") do
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

local NGINX = '^(%d+%.%d+) (%d+%.%d+) "([^"]*)" "([^"]*)" (%d%d%d) "([^"]*)"%s*$'

-- The tries of nginx's lists $upstream_response_time and $upstream_status
-- (a try with no time, "-", took the request's rt seconds); nil, error.
function _M.upstream_tries(urt, ust, rt)
  local times, statuses = split(urt), split(ust)
  if #statuses == 0 then return nil, "no upstream try ($upstream_status is empty)" end
  if #times ~= #statuses then
    return nil, format("%d upstream times (%q) for %d statuses (%q)", #times, urt, #statuses, ust)
  end
  local tries = {}
  for i, s in ipairs(statuses) do
    local l = tonumber(times[i])
    tries[i] = { latency = finite(l) and l or rt, outcome = status_outcome(s) }
  end
  return tries
end

local function nginx_line(line)
  local msec, rt, urt, ust = line:match(NGINX)
  if not msec then return nil, "expected the nres_tune log_format: $msec $request_time \"$upstream_response_time\" \"$upstream_status\" $status \"$upstream_addr\"" end
  local tries, err = _M.upstream_tries(urt, ust, tonumber(rt))
  if not tries then return nil, err end
  return tonumber(msec) - tonumber(rt), tries, tonumber(msec)
end

-- ----------------------------------------------------------------- read

-- The format of a trace's first line, and its line parser.
local function detect(line)
  if line:lower():match("^%s*time%s*,%s*latency%s*,%s*outcome%s*$") then return "csv", csv_line, true end
  if csv_line(line) then return "csv", csv_line end
  if nginx_line(line) then return "nginx", nginx_line end
  if line:match("^%s*{") then return "jsonl", require("nresrun.tune.jsonl").line end   -- the gateway's try log
  return nil
end

function _M.read(path)
  local f, err = io.open(path, "r")
  if not f then return nil, format("tune: cannot read the trace: %s", tostring(err)) end
  local kind, parse
  local requests, bad, first_bad, n, refused = {}, 0, nil, 0, 0
  local back, back_max, last_clock = 0, 0, nil
  for line in f:lines() do
    n = n + 1
    if not line:match("^%s*$") and not line:match("^%s*#") then
      if not kind then
        local header
        kind, parse, header = detect(line)
        if not kind then
          f:close()
          return nil, format("%s:%d: unknown trace format: expected a CSV of time,latency,outcome, an nginx access log in the nres_tune log_format or the gateway's JSON try log (docs/tune.md), got %q",
                             path, n, line:sub(1, 120))
        end
        if header then goto continue end
      end
      local t, tries, clock, info = parse(line)
      if not t then
        bad = bad + 1
        first_bad = first_bad or format("%s:%d: %s", path, n, tries)
      else
        clock = clock or t   -- nginx: the time the line was written; csv: the time sent
        if last_clock and clock < last_clock then
          back = back + 1
          if last_clock - clock > back_max then back_max = last_clock - clock end
          if last_clock - clock > _M.BACKWARDS_S then
            f:close()
            return nil, format("%s:%d: the clock goes backwards by %.3f s (more than %g s): not one trace in time order",
                               path, n, last_clock - clock, _M.BACKWARDS_S)
          end
        else
          last_clock = clock
        end
        requests[#requests + 1] = { t = t, tries = tries }
        if info and info.refused then refused = refused + 1 end
      end
    end
    ::continue::
  end
  f:close()
  if not kind then return nil, format("%s: empty trace (no lines besides blanks and # comments)", path) end
  local warnings = {}
  if bad > 0 then
    if bad > #requests then
      return nil, format("%s: %d of %d lines do not parse as %s (first: %s)", path, bad, bad + #requests, kind, first_bad)
    end
    warnings[#warnings + 1] = format("%d line%s skipped, not parsed as %s (first: %s)", bad, bad == 1 and "" or "s",
                                     kind, first_bad)
  end
  if back > 0 then
    warnings[#warnings + 1] = format("%d line%s earlier than the line before (by at most %.3f s): sorted by time",
                                     back, back == 1 and "" or "s", back_max)
  end
  if refused > 0 then
    warnings[#warnings + 1] = format("%d request%s refused by nres itself (no try): arrivals the dependency never saw",
                                     refused, refused == 1 and "" or "s")
  end
  if #requests < _M.MIN_REQUESTS then
    return nil, format("%s: %d requests: too few to fit a model (at least %d)", path, #requests, _M.MIN_REQUESTS)
  end
  table.sort(requests, function(a, b) return a.t < b.t end)
  local origin = math.floor(requests[1].t)   -- windows start on the trace clock's whole seconds
  for _, r in ipairs(requests) do r.t = r.t - origin end
  return { format = kind, path = path, requests = requests, origin = origin, warnings = warnings,
           lines = n, skipped = bad }
end

-- The trace of a simulated scenario (a table { dependency, load,
-- duration }, as a tournament's) called with no policy on `seed`: rows {
-- sent, latency, outcome } in time order, each call one try.
function _M.simulate(sc, seed)
  local rows = {}
  -- Only the capacity refuses with "overloaded"; said as a throttled answer
  -- or as a plain error, as the scenario's dependency does.
  local said = (sc.dependency.capacity or {}).refusal == "throttled"
  local function outcome(ok, reason)
    if ok then return "ok" end
    if tostring(reason) == "overloaded" and said then return "refused" end
    if reason == "timeout" then return "timeout" end
    return "error"
  end
  require("nresrun.sim.run").run{
    policy = require("nres.policy").new({ base = "none", seed = seed }, 2),
    dependency = sc.dependency, rate = sc.load.rate, arrivals = sc.load.arrivals or "poisson",
    duration_s = sc.duration, seed = seed, max_inflight = sc.max_inflight or 100000, grace_s = 10,
    trace = function(sent, latency, ok, reason) rows[#rows + 1] = { sent, latency, outcome(ok, reason) } end,
  }
  table.sort(rows, function(a, b) return a[1] < b[1] end)
  return rows
end

-- Write `rows` ({ t, latency, outcome }) as a CSV trace at `path`.
function _M.write_csv(path, rows)
  local f = assert(io.open(path, "w"))
  f:write("time,latency,outcome\n")
  for _, r in ipairs(rows) do f:write(format("%.6f,%.6f,%s\n", r[1], r[2], r[3])) end
  f:close()
end

return _M

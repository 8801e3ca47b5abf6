-- SPDX-License-Identifier: MIT
-- bench/gateway/wrk.lua: wrk script counting 2xx and the rest per thread,
-- paced when RATE is set, and, when RECOVERY_AT (epoch seconds) is set, the first 2xx received at
-- or after it and the first and last failure received (the outage as the
-- clients saw it). Prints one "RESULT key=value ..." line.
local ffi = require "ffi"
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } nres_bench_timespec;
  int clock_gettime(int clk, nres_bench_timespec *ts);
]]
local ts = ffi.new("nres_bench_timespec")
local function now()
  ffi.C.clock_gettime(0, ts)   -- CLOCK_REALTIME: the upstream's ngx.now()
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local recovery = tonumber(os.getenv("RECOVERY_AT") or "") or 0

-- RATE (requests per second, per wrk thread): a paced run. Each request
-- after a connection's first waits for the next slot of its thread's
-- fixed schedule, so the load does not follow the answers' latency (as
-- long as a connection is free); a schedule fallen behind catches up.
local rate = tonumber(os.getenv("RATE") or "")
if rate and rate > 0 then
  local period, due = 1000 / rate, nil
  function delay()
    local t = now() * 1000
    due = (due or t) + period
    return due > t and due - t or 0
  end
end
local threads = {}

function setup(thread) threads[#threads + 1] = thread end

function init()
  ok, bad, first_ok, first_bad, last_bad = 0, 0, 0, 0, 0
end

function response(status)
  if status >= 200 and status < 300 then
    ok = ok + 1
    if recovery > 0 and first_ok == 0 then
      local t = now()
      if t >= recovery then first_ok = t end
    end
  else
    bad = bad + 1
    if recovery > 0 then
      local t = now()
      if first_bad == 0 then first_bad = t end
      last_bad = t
    end
  end
end

function done(summary, latency)
  local o, b, first, fbad, lbad = 0, 0, 0, 0, 0
  for _, t in ipairs(threads) do
    o, b = o + t:get("ok"), b + t:get("bad")
    local f = t:get("first_ok")
    if f > 0 and (first == 0 or f < first) then first = f end
    f = t:get("first_bad")
    if f > 0 and (fbad == 0 or f < fbad) then fbad = f end
    lbad = math.max(lbad, t:get("last_bad"))
  end
  local e = summary.errors
  local sec = summary.duration / 1e6
  io.write(string.format(
    "RESULT requests=%d ok=%d bad=%d sockerr=%d seconds=%.3f rps=%.1f p50_ms=%.2f p99_ms=%.2f"
    .. " first_ok=%.6f first_bad=%.6f last_bad=%.6f\n",
    summary.requests, o, b, e.connect + e.read + e.write + e.timeout, sec,
    summary.requests / sec, latency:percentile(50) / 1000, latency:percentile(99) / 1000, first,
    fbad, lbad))
end

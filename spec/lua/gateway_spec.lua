-- SPDX-License-Identifier: MIT
-- gateway_spec.lua - nres.shm and the shared-state side of nres.ngx,
-- outside nginx (on a virtual clock; nginx itself is spec/nginx/run.sh):
-- argument checking, one slot and one worker-local policy per key pointed
-- at the key's shared budget and breaker, a breaker tripped by a forked
-- process seen open by its parent, fresh state when a key moves into an
-- evicted slot, and the per-client limiter; region files (reattached with
-- their state when the layout is the same, replaced otherwise, shared by
-- unrelated processes, swept when undeclared) and balancer mode's peer
-- choice (never the peer that just failed, power of two choices over the
-- latency estimate, ejection, panic, one half-open probe), status JSON and
-- Prometheus for peers.
local ffi = require "ffi"
local nres = require "nres"
local shm = require "nres.shm"
local gw = require "nres.ngx"
local C = require("nres.cdef").C

ffi.cdef [[
int nres_budget_spend(nres_budget_t *budget, nres_time_t now);
int fork(void);
int waitpid(int pid, int *status, int options);
void _exit(int status);
]]

local T0 = 1e12   -- virtual ns
local reasons = require("nres.run").reasons

-- Run one call on cp, every attempt ending with verdict `kind`, on a
-- virtual clock from `now`; returns the stop reason and the clock after.
local step = ffi.new("nres_step_t")
local function call_once(cp, now, kind)
  local call = ffi.new("nres_call_t")
  local k = C.nres_step_begin(call, cp, now, -1, step)
  while k ~= 2 do
    if k == 0 then
      k = C.nres_step_report(call, step.slot, now, kind, 0, -1, step)
    else
      now = math.max(now, step.at)
      k = C.nres_step_resume(call, now, step)
    end
  end
  return reasons[step.stop], now
end

describe("nres.shm", function()
  it("refuses bad tables by field", function()
    expect.error(function() shm.new{ slots = 0 } end,
      "nres.shm: slots: expected an integer 1..1048576, got 0")
    expect.error(function() shm.new{ budget = 3 } end,
      "nres.shm: budget: expected a table or false, got 3")
    expect.error(function() shm.new{ limiter = 5 } end,
      "nres.shm: limiter: expected a table { rate = n, burst = n }, got 5")
  end)
  it("keeps one slot per key, with counters and a key read-back", function()
    local t = shm.new{ slots = 16, limiter = { rate = 10, burst = 2 } }
    expect.eq(t.slots, 16)
    local a = t:acquire("alpha", T0, 60e9)
    local b = t:acquire("beta", T0, 60e9)
    expect.truthy(a ~= b, "different slots")
    expect.eq(t:acquire("alpha", T0 + 1e9, 60e9), a)
    expect.eq((t:key(a)), "alpha")
    expect.eq(t:limit(a, T0), true)
    expect.eq(t:limit(a, T0), true)
    local ok, wait = t:limit(a, T0)
    expect.eq(ok, false)
    expect.near(wait, 0.1, 1e-6, "seconds until the next admission")
    local st = t:stats()
    expect.eq(st.live, 2); expect.eq(st.inserts, 2); expect.eq(st.lookups, 3)
    expect.eq(t:counts(a).calls, 3)
    expect.error(function() t:acquire(string.rep("x", 65), T0, 1) end,
      'nres.shm: key: expected a string of 1..64 bytes, got "' .. string.rep("x", 65) .. '"')
    expect.error(function() t:acquire(42, T0, 1) end,
      "nres.shm: key: expected a string of 1..64 bytes, got 42")
  end)

  it("keeps a throttle per key when asked, and refuses a bad one by field", function()
    local t = shm.new{ slots = 8, throttle = { k = 1.06, window = 3e8, buckets = 8 } }
    local i = t:acquire("k", T0, 1e9)
    local th = t:slot(i).throttle
    expect.eq(th.k, 1.06)
    expect.eq(tonumber(th.window.width), 3e8 / 8)
    expect.eq(th.fast_failure, 0)
    local f = shm.new{ slots = 8, throttle = { fast_failure = 0.1 } }
    expect.eq(f:slot(f:acquire("k", T0, 1e9)).throttle.fast_failure, 0.1)
    expect.error(function() shm.new{ slots = 8, throttle = { fast_failure = 1 } } end,
      "nres.shm: throttle.fast_failure: expected a fraction in [0, 1) of the p50, got 1")
    expect.error(function() shm.new{ slots = 8, throttle = { fast_failure = "0.1" } } end,
      'nres.shm: throttle.fast_failure: expected a fraction in [0, 1) of the p50, got "0.1"')
    expect.error(function() shm.new{ slots = 8, throttle = { k = 0.5 } } end,
      "nres.shm: throttle.k: expected a finite number from 1 to 1000, got 0.5")
    expect.error(function() shm.new{ slots = 8, throttle = { buckets = 17 } } end,
      "nres.shm: throttle.buckets: expected an integer 1..16, got 17")
    expect.error(function() shm.new{ slots = 8, throttle = { window = 4 } } end,
      "nres.shm: throttle.window: expected nanoseconds (at least one per bucket, below 2^64), got 4")
    expect.error(function() shm.new{ slots = 8, throttle = 2 } end,
      "nres.shm: throttle: expected a table { k = n, window = ns, buckets = n } or false, got 2")
  end)

  it("refuses a field it does not read rather than ignore it", function()
    expect.error(function() shm.new{ slots = 8, throttle = { k = 2, windw = 1e9 } } end,
      "nres.shm: throttle.windw: unknown field (valid: buckets, fast_failure, k, window)")
    expect.error(function() shm.new{ slots = 8, throttle = { 2 } } end,
      "nres.shm: throttle.[1]: unknown field (valid: buckets, fast_failure, k, window)")
    expect.error(function() shm.new{ slots = 8, throtle = { k = 2 } } end,
      "nres.shm: throtle: unknown field (valid: breaker, budget, extra, file, limiter, slots, throttle)")
    expect.error(function() shm.new{ slots = 8, budget = { ratio = 0.1, capacty = 5 } } end,
      "nres.shm: budget.capacty: unknown field (valid: capacity, min_per_sec, ratio)")
    expect.error(function() shm.new{ slots = 8, limiter = { rate = 5, brust = 9 } } end,
      "nres.shm: limiter.brust: unknown field (valid: burst, rate)")
  end)

  it("refuses a limiter burst or rate that C would truncate or wrap", function()
    for _, burst in ipairs{ -1, 0, 1.5, 2 ^ 32, 2 ^ 40, 0 / 0, math.huge } do
      expect.error(function() shm.new{ slots = 8, limiter = { rate = 1, burst = burst } } end,
        "nres.shm: limiter.burst: expected an integer 1..4294967295, got " .. tostring(burst))
    end
    expect.error(function() shm.new{ slots = 8, limiter = { rate = 1, burst = "2" } } end,
      'nres.shm: limiter.burst: expected an integer 1..4294967295, got "2"')
    for _, rate in ipairs{ 0, -1, 0 / 0, math.huge, -math.huge } do
      expect.error(function() shm.new{ slots = 8, limiter = { rate = rate } } end,
        "nres.shm: limiter.rate: expected admissions per second (a finite number > 0), got "
        .. tostring(rate))
    end
    local t = shm.new{ slots = 8, limiter = { rate = 1e300, burst = 2 ^ 32 - 1 } }
    local i = t:acquire("k", T0, 1e9)
    expect.eq(t:limit(i, T0), true)
  end)

  it("converts every time one way: negative and NaN raise, 2^64 and up saturate", function()
    local t = shm.new{ slots = 8, limiter = { rate = 10, burst = 1 } }
    for _, v in ipairs{ -1, -1e-9, -math.huge, 0 / 0 } do
      local shown = tostring(v)
      expect.error(function() t:acquire("k", v, 1e9) end,
        "nres.shm: now: expected nanoseconds (a number >= 0), got " .. shown)
      expect.error(function() t:acquire("k", T0, v) end,
        "nres.shm: hold: expected nanoseconds (a number >= 0), got " .. shown)
      expect.error(function() t:limit(0, v) end,
        "nres.shm: now: expected nanoseconds (a number >= 0), got " .. shown)
    end
    expect.error(function() t:acquire("k", nil, 1e9) end,
      "nres.shm: now: expected nanoseconds (a number >= 0), got nil")
    -- Before: now = -1 wrapped to the end of time and evicted live keys.
    local keep = t:acquire("keep", T0, 60e9)
    for i = 1, 7 do expect.truthy(t:acquire("f" .. i, T0, 60e9), "filled") end
    expect.error(function() t:acquire("new", -1, 0) end,
      "nres.shm: now: expected nanoseconds (a number >= 0), got -1")
    expect.eq((t:key(keep)), "keep", "a live key stays")
    expect.eq(select(2, t:acquire("new", T0 + 1e9, 0)), "full")
    -- 0 and tiny durations: leased to the next ms at most.
    local u = shm.new{ slots = 8 }
    local z = u:acquire("zero", 0, 0)
    expect.eq(select(3, u:key(z)), 0, "leased until 0: evictable at once")
    local tiny = u:acquire("tiny", T0, 1)
    expect.eq(select(3, u:key(tiny)), T0 + 1e6, "1 ns rounds up to the ms")
    -- 2^63 ns is in range; 2^64, 1e300 and inf saturate: never evicted.
    for _, hold in ipairs{ 2 ^ 63, 2 ^ 64, 1e300, math.huge } do
      local i = u:acquire("h" .. tostring(hold), T0, hold)
      expect.truthy(i, "leased for " .. tostring(hold))
      expect.eq(select(3, u:key(i)), 2 ^ 64, "a lease that never ends")
    end
    -- A now at (or past) the end of time: finite leases are over there.
    for _, now in ipairs{ 2 ^ 63, 2 ^ 64, 1e300, math.huge } do
      expect.truthy(u:acquire("end", now, 0), "acquired at " .. tostring(now))
    end
    local l = shm.new{ slots = 8, limiter = { rate = 10, burst = 1 } }
    local i = l:acquire("lim", T0, 1e9)
    expect.eq(l:limit(i, T0), true)
    local ok, wait = l:limit(i, 2 ^ 64)
    expect.eq(ok, false, "no admission fits after the end of time")
    expect.eq(wait, 2 ^ 64 / 1e9, "the wait saturates")
  end)

  it("raises on a limit take or counts from a table without a limiter or a bad slot", function()
    local t = shm.new{ slots = 8 }
    local i = t:acquire("k", T0, 1e9)
    expect.error(function() t:limit(i, T0) end,
      "nres.shm: limit: this table has no limiter (shm.new{ limiter = ... })")
    local l = shm.new{ slots = 8, limiter = { rate = 1 } }
    for _, bad in ipairs{ -1, 8, 0.5, 0 / 0 } do
      expect.error(function() l:limit(bad, T0) end,
        "nres.shm: index: expected a slot index 0..7, got " .. tostring(bad))
      -- counts of a slot out of range: a clear error, not a NULL read in C
      expect.error(function() t:counts(bad) end,
        "nres.shm: index: expected a slot index 0..7, got " .. tostring(bad))
    end
    expect.eq(t:counts(i).calls, 0, "a slot's counts before any record")
  end)
end)

describe("nres.ngx scopes", function()
  it("refuse policies the gateway cannot share or run", function()
    expect.error(function() gw.scope("s1", { policy = { base = "gateway", budget = "shared" } }) end,
      'nres.ngx.scope: policy.budget: expected a table or false (a scope keeps one budget per key), got "shared"')
    -- A hedge table is taken (idempotent cosocket requests are hedged).
    expect.eq(gw.scope("s2", { policy = { base = "gateway", hedge = { at = 0.1 } } }).hedged, true)
    expect.error(function() gw.scope("s3", { policy = { base = "gateway", deadline = false, attempt_timeout = false } }) end,
      "nres.ngx.scope: policy.deadline: expected a deadline in seconds (keys are leased for a call's length), got false")
    expect.error(function() gw.scope("s4", { slotz = 3 }) end,
      "nres.ngx.scope: slotz: expected one of policy, slots, hold, got an unknown field")
    expect.error(function() gw.scope("s5", { policy = { attemps = 3 } }) end,
      'nres.policy: attemps: unknown field (did you mean "attempts"?)')
    expect.error(function() gw.scope("s6", { slots = 0 }) end,
      "nres.shm: slots: expected an integer 1..1048576, got 0", "gateway_spec.lua")
    expect.error(function() gw.upstream("u", { host = "h", port = 0 }) end,
      "nres.ngx.upstream: port: expected an integer 1..65535, got 0")
  end)

  it("take every duration and count of the gateway's options finite and in range, or name it", function()
    local edges = { 0, 1e-12, 0/0, math.huge, -math.huge, 2^63 / 1e9, 2^64 / 1e9, 1e300, -1 }
    local n = 0
    local function try(what, fn, v, ok_when)
      n = n + 1
      local ok, err = pcall(fn, v)
      if ok_when(v) then
        expect.truthy(ok, what .. " = " .. tostring(v) .. " should be taken: " .. tostring(err))
      else
        expect.truthy(not ok and tostring(err):find(what, 1, true),
          what .. " = " .. tostring(v) .. " should be refused naming it, got " .. tostring(err))
      end
    end
    local function secs(v) return v == v and v >= 0 and v <= 1e6 end
    for _, v in ipairs(edges) do
      n = n + 1
      try("hold", function(x) gw.scope("edge" .. n, { policy = "gateway", slots = 8, hold = x }) end, v,
          function(x) return secs(x) and x >= nres.preset("gateway").deadline end)   -- keys outlive a call
      try("hold", function(x) gw.limiter("edge" .. n, { rate = 5, slots = 8, hold = x }) end, v, secs)
      try("keepalive", function(x) gw.upstream("edge" .. n, { host = "127.0.0.1", port = 80, keepalive = x }) end, v, secs)
      try("rate", function(x) gw.limiter("rate" .. n, { rate = x, slots = 8 }) end, v,
          function(x) return x == x and x > 0 and x < math.huge and x >= 1e-9 end)
      try("burst", function(x) gw.limiter("burst" .. n, { rate = 5, burst = x, slots = 8 }) end, v,
          function(x) return x == x and x >= 1 and x <= 4294967295 and x % 1 == 0 end)
      try("pool", function(x) gw.upstream("pool" .. n, { host = "127.0.0.1", port = 80, pool = x }) end, v,
          function(x) return x == x and x >= 1 and x <= 65535 and x % 1 == 0 end)
    end
    for _, v in ipairs{ "many", {}, 2.5, 70000 } do
      try("pool", function(x) gw.upstream("poolx", { host = "127.0.0.1", port = 80, pool = x }) end, v,
          function() return false end)
    end
  end)

  it("read X-Criticality as a known class, anything else as default", function()
    local crit = require("nres.ngx.config").criticality
    local cases = { { nil, 1, nil }, { "critical", 0, "critical" }, { "CRITICAL_PLUS", 0, "critical" },
                    { "Sheddable", 2, "sheddable" }, { "sheddable_plus", 2, "sheddable" },
                    { "default", 1, "default" }, { "", 1, nil }, { "bogus", 1, nil },
                    { "critical\r\nX-Evil: 1", 1, nil }, { string.rep("c", 1e5), 1, nil } }
    for _, c in ipairs(cases) do
      local cls, name = crit(c[1])
      expect.eq(cls, c[2], tostring(c[1]):sub(1, 20))
      expect.eq(name, c[3], tostring(c[1]):sub(1, 20))
    end
  end)

  it("show the fleet agent's status (gw.fleet): synced per scope, JSON and Prometheus", function()
    local path = os.tmpname()
    expect.error(function() gw.fleet(42) end,
      "nres.ngx.fleet: path: expected the path of nres-syncd's --status file, got 42")
    gw.fleet(path .. ".missing")
    local snap = gw.snapshot()
    expect.eq(snap.fleet.error, "no status file")
    expect.truthy(gw.json(snap):find('"entries":[]', 1, true), "an empty list is []")
    local f = assert(io.open(path, "w"))
    f:write('{"node":"gw1","written_unix":', os.time(), ',"connected":1,"rounds":43,"failures":0,',
            '"connects":1,"entries":[{"scope":"upstreams:api:80","kind":"budget","synced":1,',
            '"hosts":3,"fleet":30.0,"local":10.0,"demand":0.0,"prober":0}]}\n')
    f:close()
    gw.fleet(path)
    snap = gw.snapshot()
    expect.eq(snap.fleet.connected, true)
    expect.truthy(snap.fleet.age_s <= 2, "age")
    expect.eq(snap.fleet.entries[1].scope, "upstreams:api:80")
    local prom = gw.prometheus(snap)
    expect.truthy(prom:find('nres_fleet_synced{scope="upstreams:api:80",kind="budget"} 1', 1, true), prom)
    expect.truthy(prom:find("\nnres_fleet_connected 1\n", 1, true), prom)
    os.remove(path)
    require("nres.ngx.config").fleet_status = nil
  end)

  it("point each key's policy at the key's shared budget and breaker", function()
    gw.scope("hosts", { policy = "gateway", slots = 16 })
    local s = gw.scopes.hosts
    local cp1, i1 = gw.policy_for("hosts", "a.example:80", T0)
    local cp2, i2 = gw.policy_for("hosts", "b.example:80", T0)
    expect.truthy(i1 >= 0 and i2 >= 0 and i1 ~= i2, "two slots")
    expect.truthy(cp1.budget == s.shm:slot(i1).budget, "budget in the slot")
    expect.truthy(cp1.breaker == s.shm:slot(i1).breaker, "breaker in the slot")
    expect.truthy(cp1.estimator == cp1.own.estimator, "estimator of its own")
    expect.truthy(cp2.breaker == s.shm:slot(i2).breaker, "other key, other breaker")
    -- The preset's throttle, fast_failure included, lives in the slot.
    expect.truthy(cp1.throttle == s.shm:slot(i1).throttle, "throttle in the slot")
    expect.eq(cp1.throttle.k, s.policy.cp.own.throttle.k)
    expect.eq(cp1.throttle.fast_failure, 0.1)
    local again = gw.policy_for("hosts", "a.example:80", T0 + 1e9)
    expect.truthy(again == cp1, "the same policy object for the same key")
  end)

  it("share a breaker with a forked process", function()
    gw.scope("forked", { policy = { base = "gateway", breaker = { consecutive = 5, ratio = false } } })
    local cp = gw.policy_for("forked", "up:1", T0)
    local pid = ffi.C.fork()
    if pid == 0 then
      -- The child: its own policy copy, the same slot; trip the breaker.
      local child = gw.policy_for("forked", "up:1", T0)
      local now = T0
      for _ = 1, 20 do
        local _, t = call_once(child, now, 1)   -- transient
        now = t
      end
      local idx = select(2, gw.policy_for("forked", "up:1", T0))
      gw.scopes.forked.shm:record(idx, 3, 3, 2)
      ffi.C._exit(C.nres_breaker_state(child.breaker, now) == 1 and 0 or 3)
    end
    expect.truthy(pid > 0, "fork")
    local status = ffi.new("int[1]")
    expect.eq(ffi.C.waitpid(pid, status, 0), pid)
    expect.eq(status[0], 0, "child saw its breaker open")
    -- The parent's policy, made before the fork, sees it open too.
    expect.eq(C.nres_breaker_state(cp.breaker, T0 + 1e6), 1, "open in the parent")
    expect.eq((call_once(cp, T0 + 1e6, 0)), "circuit open")
    local idx = select(2, gw.policy_for("forked", "up:1", T0))
    expect.eq(gw.scopes.forked.shm:counts(idx).calls, 1, "the child's record")
  end)

  it("give a key that moves into an evicted slot fresh state", function()
    gw.scope("small", { policy = "gateway", slots = 8, hold = 10 })
    local first, idx0 = gw.policy_for("small", "k0", T0)
    call_once(first, T0, 1)
    expect.truthy(first.n_verdicts[1] > 0, "a transient verdict counted")
    for i = 1, 7 do gw.policy_for("small", "k" .. i, T0) end
    local _, full = gw.policy_for("small", "k8", T0 + 5e9)
    expect.eq(full, -1, "every slot leased: the worker's own policy")
    expect.eq(gw.scopes.small.overflow, 1)
    for i = 1, 7 do gw.policy_for("small", "k" .. i, T0 + 5e9) end
    local cp, idx = gw.policy_for("small", "k8", T0 + 10e9)
    expect.eq(idx, idx0, "k0's slot, the least recently leased")
    expect.truthy(cp == first, "the worker's policy object is reused...")
    expect.eq(tonumber(cp.n_verdicts[1]), 0, "...with its counters reset")
    -- full: the preset's capacity (10 s of its floor unless it says)
    local b = gw.scopes.small.policy.spec.budget
    expect.eq(C.nres_budget_level(cp.budget, T0 + 10e9), b.capacity or 10 * b.min_per_sec,
              "and a full budget")
  end)

  it("limit each client on its own", function()
    gw.limiter("clients", { rate = 10, burst = 2, slots = 64 })
    expect.eq(gw.limit("clients", "10.0.0.1"), true)
    expect.eq(gw.limit("clients", "10.0.0.1"), true)
    local ok, wait = gw.limit("clients", "10.0.0.1")
    expect.eq(ok, false)
    expect.truthy(wait > 0 and wait <= 0.1, "retry after <= one interval")
    expect.eq(gw.limit("clients", "10.0.0.2"), true)
    expect.error(function() gw.limiter("bad", { rate = 0 }) end,
      "nres.ngx.limiter: rate: expected admissions per second (> 0), got 0")
  end)

  it("show binary keys as text: addresses as addresses, other bytes escaped", function()
    local kt = require "nres.ngx.keytext"
    expect.eq(kt.key("\127\200\200\1"), "127.200.200.1")
    expect.eq(kt.key("\127\0\0\2", "address"), "127.0.0.2")
    expect.eq(kt.key("ABCD", "address"), "65.66.67.68")
    expect.eq(kt.key("ABCD"), "ABCD")
    local v6 = ("\0"):rep(15) .. "\1"
    expect.eq(kt.key(v6), "::1")
    expect.eq(kt.key("\32\1\13\184" .. ("\0"):rep(11) .. "\1"), "2001:db8::1")
    expect.eq(kt.key(("\0"):rep(10) .. "\255\255\10\0\0\1"), "::ffff:10.0.0.1")
    expect.eq(kt.key("\0\1\0\0\0\0\0\1\0\0\0\0\0\0\0\0"), "1:0:0:1::")
    expect.eq(kt.key("caf\195\169"), "caf\195\169", "valid UTF-8 stays")
    expect.eq(kt.key("a\255b\\c"), "a\\xffb\\x5cc", "bytes that are no UTF-8 escaped")
    expect.eq(kt.key("\237\160\128xy"), "\\xed\\xa0\\x80xy", "a surrogate is no UTF-8")
    expect.eq(kt.key("\192\175abc"), "\\xc0\\xafabc", "nor an overlong form")
    expect.error(function() gw.limiter("badtop", { rate = 1, top = 1000 }) end,
      "nres.ngx.limiter: top: expected an integer 0..100 (keys listed by name), got 1000")
    expect.error(function() gw.limiter("badkeys", { rate = 1, keys = "ip" }) end,
      'nres.ngx.limiter: keys: expected "address", "text" or nil, got "ip"')
  end)

  it("export each metric family once, its lines together, label values valid UTF-8", function()
    gw.limiter("bykey", { rate = 1, burst = 1, slots = 64, top = 3, keys = "address" })
    for i = 1, 6 do   -- six clients, 0x80 and up in their addresses, i refusals each
      local key = string.char(127, 200, 128 + i, 1)
      for _ = 1, i + 1 do gw.limit("bykey", key) end
    end
    local snap = gw.snapshot()
    local l = snap.limiters.bykey
    expect.eq(#l.keys, 3, "top 3 by name")
    expect.eq(l.keys[1].key, "127.200.134.1")
    expect.eq(l.refused, 21)
    expect.eq(l.others_refused, 1 + 2 + 3)
    local text = gw.prometheus(snap)
    local kt = require "nres.ngx.keytext"
    expect.truthy(kt.clean((text:gsub("\n", " "))), "the exposition is valid UTF-8")
    expect.truthy(kt.clean((gw.json(snap):gsub("\n", " "))), "the JSON is valid UTF-8")
    expect.truthy(text:find('\nnres_limiter_key_refused{limiter="bykey",key="127.200.134.1"} 6\n',
                            1, true), text)
    expect.truthy(text:find('\nnres_limiter_others_refused{limiter="bykey"} 6\n', 1, true))
    local seen, current = {}, nil
    for line in text:gmatch("[^\n]+") do
      local fam = line:match("^# %u+ (%S+)") or line:match("^([%w_]+)")
      fam = fam:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
      if fam ~= current then
        expect.truthy(not seen[fam], "family " .. fam .. " in one group")
        seen[fam], current = true, fam
      end
    end
    for _, f in ipairs(require("nres.ngx.status").FAMILIES) do
      expect.truthy(#f == 5 and f[2]:match("^%a+$"), "a family row: name, type, help, rows, field")
    end
  end)

  it("limit no empty key (as limit_req), and name a key that is no string", function()
    gw.limiter("anon", { rate = 1, burst = 1, slots = 8 })
    for _ = 1, 3 do expect.eq(gw.limit("anon", ""), true) end
    expect.eq(gw.limiters.anon.overflow, 0)   -- the table is not full
    expect.eq(gw.limit("anon", "x"), true)
    expect.eq(gw.limit("anon", "x"), false)
    for _, k in ipairs { 42, false } do
      expect.error(function() gw.limit("anon", k) end,
        "nres.ngx.limit: key: expected a string, got " .. tostring(k))
    end
    expect.error(function() gw.limit("anon") end, "nres.ngx.limit: key: expected a string, got nil")
  end)
end)

-- --------------------------------------------- region files, balancer mode
-- (issue 12; nginx itself: spec/nginx/balancer.sh)
ffi.cdef [[
char *mkdtemp(char *template);
int nres_breaker_record(nres_breaker_t *breaker, nres_time_t now, uint32_t permit,
                        int outcome, int slow, nres_rng_t *rng);
void nres_estimator_record(nres_estimator_t *estimator, nres_time_t now, nres_time_t latency);
]]

-- A control operation refused with status and reason (gw.apply).
local function bad(op, status, reason)
  local res, st, why = gw.apply(op)
  expect.eq(res, nil)
  expect.eq(st, status, why)
  expect.eq(why, reason)
end

local function tmpdir()
  local buf = ffi.new("char[64]", "/tmp/nres-gwspec.XXXXXX")
  return ffi.string(assert(ffi.C.mkdtemp(buf) ~= nil and buf))
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

describe("nres.shm files", function()
  it("reattach a file of the same layout and keep its state; replace any other", function()
    local dir = tmpdir()
    local path = dir .. "/t.shm"
    local a = assert(shm.new{ slots = 16, budget = { ratio = 0.1 }, file = path, extra = 100 })
    expect.eq(a.reused, false, "a new file")
    local i = a:acquire("k", T0, 1e12)
    a:record(i, 1, 2, 1)
    expect.eq(C.nres_budget_spend(a:slot(i).budget, T0), 0)   -- a level to carry over
    local level = C.nres_budget_level(a:slot(i).budget, T0)
    a.extra[7] = 42
    local b = assert(shm.new{ slots = 16, budget = { ratio = 0.1 }, file = path, extra = 100 })
    expect.eq(b.reused, true, "the same layout: attached")
    expect.eq(b:key(i), "k")
    expect.eq(b:counts(i).attempts, 2, "counters kept")
    expect.eq(C.nres_budget_level(b:slot(i).budget, T0), level, "budget level kept")
    expect.eq(b.extra[7], 42, "the caller's extra bytes kept")
    b:record(i, 1, 1, 0)
    expect.eq(a:counts(i).attempts, 3, "one memory: a sees b's record")
    -- another configuration: a new file at the path, the old mapping intact
    local c = assert(shm.new{ slots = 16, budget = { ratio = 0.2 }, file = path, extra = 100 })
    expect.eq(c.reused, false)
    expect.eq(c.replaced, "another configuration (slots, budget, breaker, limiter or throttle)")
    expect.eq(c:key(i), nil, "fresh")
    expect.eq(a:key(i), "k", "processes on the old file keep it")
    local d = assert(shm.new{ slots = 24, budget = { ratio = 0.2 }, file = path, extra = 100 })
    expect.truthy(d.replaced:find("^a size of %d+ bytes %(this layout: %d+%)$"), d.replaced)
    -- a damaged header of the right size
    local f = io.open(path, "r+b"); f:write("garbage!"); f:close()
    local e = assert(shm.new{ slots = 24, budget = { ratio = 0.2 }, file = path, extra = 100 })
    expect.eq(e.replaced, "another layout version or a damaged header")
    expect.eq(e.reused, false)
    expect.eq(e.old, nil, "nothing to move from a damaged table")
    expect.truthy(d.old, "a valid table of another layout is kept to move from")
    d:release_old()
    expect.eq(d.old, nil)
    -- another size and a damaged header: replaced, nothing moved
    f = io.open(path, "r+b"); f:write("garbage!"); f:close()
    local g = assert(shm.new{ slots = 32, budget = { ratio = 0.2 }, file = path, extra = 100 })
    expect.truthy(g.replaced:find("^a size of "), g.replaced)
    expect.eq(g.old, nil, "a damaged table of another size is not read")
    expect.eq(g:migrate(), nil)
    local _, err = shm.new{ slots = 8, file = dir .. "/no/such/dir/t.shm" }
    expect.truthy(err and err:find(": open: "), "an unwritable path is an error: " .. tostring(err))
    expect.error(function() shm.new{ slots = 8, file = "" } end, 'nres.shm: file: expected a path, got ""')
    os.execute("rm -rf " .. dir)
  end)

  it("trust no file: a link, group or other access, a truncation", function()
    local dir = tmpdir()
    local path = dir .. "/t.shm"
    local opts = { slots = 16, budget = { ratio = 0.1 }, file = path, extra = 64 }
    local a = assert(shm.new(opts))
    local i = a:acquire("k", T0, 1e12)
    os.execute("chmod 644 " .. path)
    local b = assert(shm.new(opts))
    expect.eq(b.replaced, "a file with group or other access (mode 0644, expected 0600 or 0700)")
    expect.eq(b:key(i), nil, "not attached: fresh")
    -- a link to a valid region: not followed, and its target not written
    os.execute("mv " .. path .. " " .. dir .. "/target.shm && ln -s target.shm " .. path)
    local c = assert(shm.new(opts))
    expect.eq(c.replaced, "a symbolic link")
    local f = assert(io.open(dir .. "/target.shm", "rb"))
    local target_size = #f:read("*a"); f:close()
    expect.eq(target_size, c.mapped, "the target is left as it was")
    expect.truthy(os.execute("test -L " .. path) ~= 0, "the link is replaced by a file")
    -- truncated in place after the mapping: verify() finds it before a
    -- page is touched and gives this process a fresh table of its own
    expect.eq(c:verify(), true, "whole")
    local j = c:acquire("k", T0, 1e12)
    local fresh = 0
    c.on_fresh = function(t) fresh = fresh + 1; t.extra[0] = 7 end
    os.execute("truncate -s 100 " .. path)
    local whole, why = c:verify()
    expect.eq(whole, false)
    expect.eq(why, path .. " was truncated to 100 bytes (this table maps " .. c.mapped .. ")")
    expect.eq(c.private, why)
    expect.eq(fresh, 1, "on_fresh ran once")
    expect.eq(c.extra[0], 7)
    expect.eq(c:key(j), nil, "a fresh table")
    expect.truthy(c:acquire("k", T0, 1e12), "usable")
    expect.eq(c:verify(), true, "no file any more: nothing to check")
    -- the next attach refuses the short file and makes a new one
    local d = assert(shm.new(opts))
    expect.eq(d.replaced, "a size of 100 bytes (this layout: " .. d.mapped .. ")")
    os.execute("rm -rf " .. dir)
  end)

  it("share state across processes that open the same path, not only forks", function()
    local dir = tmpdir()
    local path = dir .. "/x.shm"
    local pid = ffi.C.fork()
    if pid == 0 then
      local t = shm.new{ slots = 8, file = path }
      local i = t and t:acquire("up", T0, 1e12)
      if i then t:record(i, 1, 5, 4) end
      ffi.C._exit(i and 0 or 3)
    end
    local status = ffi.new("int[1]")
    expect.eq(ffi.C.waitpid(pid, status, 0), pid)
    expect.eq(status[0], 0, "the child made and wrote the file")
    local t = assert(shm.new{ slots = 8, file = path })
    expect.eq(t.reused, true)
    local i = t:acquire("up", T0, 1e12)
    expect.eq(t:counts(i).attempts, 5, "the child's record, read from the file")
    os.execute("rm -rf " .. dir)
  end)
end)

describe("nres.ngx region files and balancer mode", function()
  local files = require "nres.ngx.files"
  local balancer = require "nres.ngx.balancer"
  local dir = tmpdir()
  gw.region{ dir = dir, name = "spec" }

  it("put every table in a named file and sweep the ones not declared", function()
    gw.scope("filed", { policy = "gateway", slots = 8 })
    expect.eq(gw.scopes.filed.shm.file, dir .. "/spec.scope.filed.shm")
    expect.truthy(exists(dir .. "/spec.scope.filed.shm"))
    gw.limiter("who/ever", { rate = 5, slots = 8 })
    expect.eq(gw.limiters["who/ever"].shm.file, dir .. "/spec.limiter.who%2fever.shm")
    local stray = dir .. "/spec.scope.gone.shm"
    io.open(stray, "w"):close()
    local other = dir .. "/other.scope.x.shm"
    io.open(other, "w"):close()
    local gone = files.sweep()
    expect.eq(#gone, 1)
    expect.eq(gone[1], "spec.scope.gone.shm")
    expect.truthy(not exists(stray), "an undeclared region removed")
    expect.truthy(exists(other), "another nginx's region left alone")
    expect.truthy(exists(dir .. "/spec.scope.filed.shm"), "a declared one kept")
    expect.error(function() gw.region{ name = "a b" } end,
      'nres.ngx.region: name: expected letters, digits, _ or -, got a b')
  end)

  it("move the state into a table of another layout (a reload's new declaration)", function()
    local ctl = require "nres.ngx.control"
    gw.scope("moving", { policy = "gateway", slots = 8 })
    local s = gw.scopes.moving
    local slot = s.shm:slot(s.shm:acquire("k", T0, 1e12))
    C.nres_breaker_isolate(slot.breaker)
    for _ = 1, 4 do C.nres_budget_spend(slot.budget, T0) end
    local level = C.nres_budget_level(slot.budget, T0)
    C.nres_gw_control_flag(s.control, ctl.DRY_RUN, 1)
    gw.scope("moving", { policy = "gateway", slots = 16 })
    local s2 = gw.scopes.moving
    expect.truthy(s2.shm.replaced:find("^a size of "), s2.shm.replaced)
    expect.eq(s2.shm.old, nil, "the old table let go")
    local i = C.nres_shm_find(s2.ptr, "k", 1, nil)
    expect.truthy(i >= 0, "the key moved")
    expect.eq(C.nres_breaker_state(s2.shm:slot(i).breaker, T0), 3, "still isolated")
    expect.eq(C.nres_budget_level(s2.shm:slot(i).budget, T0), level, "the budget's level")
    expect.eq(ctl.flag(s2.control, ctl.DRY_RUN), true, "dry-run kept")
    -- peers: by address; an undeclared one dropped, a new one fresh;
    -- its breaker, drain flag and latency samples kept
    local u = gw.upstream("mv", { scope = "moving", peers = { "10.0.0.1:80", "10.0.0.2:80" } })
    C.nres_breaker_isolate(u.br[1])
    C.nres_gw_control_flag(ctl.block(u.controls + u.idx[1] * ctl.BYTES), ctl.DRAIN, 1)
    ctl.block(u.controls + u.idx[1] * ctl.BYTES).weight = 7   -- set at run time
    C.nres_estimator_record(u.est[1], T0, 5e6)
    local peers = { "10.0.0.3:80", "10.0.0.1:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80" }
    local u2 = gw.upstream("mv", { scope = "moving", peers = peers })
    expect.truthy(u2.shm.replaced:find("^a size of "), u2.shm.replaced)
    expect.eq(C.nres_breaker_state(u2.br[2], T0), 3, "10.0.0.1 still ejected")
    expect.eq(C.nres_breaker_state(u2.br[1], T0), 0, "10.0.0.3 fresh")
    expect.eq(ctl.flag(ctl.block(u2.controls + u2.idx[2] * ctl.BYTES), ctl.DRAIN), true)
    expect.eq(ctl.block(u2.controls + u2.idx[2] * ctl.BYTES).weight, 7, "its weight")
    expect.eq(ctl.block(u2.controls + u2.idx[1] * ctl.BYTES).weight, 0, "a new peer's: declared")
    local samples = ffi.new("uint64_t[1]")
    expect.eq(tonumber(C.nres_estimator_quantile(u2.est[2], T0, 0.5, samples)) > 0, true)
    expect.eq(tonumber(samples[0]), 1, "its latency sample")
    expect.eq(C.nres_shm_find(u2.ptr, "10.0.0.2:80", 11, nil), -11, "10.0.0.2 not moved")
    -- a limiter's rate set at run time: kept by a new layout, dropped by a
    -- new declared rate
    gw.limiter("mvl", { rate = 5, slots = 8 })
    expect.eq(C.nres_gw_control_rate(gw.limiters.mvl.control, gw.limiters.mvl.ptr, 50, 2, T0), 0)
    gw.limiter("mvl", { rate = 5, slots = 16 })
    expect.eq(ctl.state(gw.limiters.mvl.control).rate, 50, "kept")
    gw.limiter("mvl", { rate = 7, slots = 16 })
    expect.eq(ctl.state(gw.limiters.mvl.control).rate, nil, "the declared rate changed")
  end)

  it("refuse bad peer declarations by field", function()
    gw.scope("ups", { policy = "gateway", slots = 8 })
    expect.error(function() gw.upstream("b1", { scope = "ups", peers = {} }) end,
      'nres.ngx.upstream: peers: expected a list of 1..256 "host:port", got "0 peers"')
    expect.error(function() gw.upstream("b2", { scope = "ups", peers = { "h" } }) end,
      'nres.ngx.upstream: peers[1]: expected "host:port" or "[IPv6]:port", got "h"')
    expect.error(function() gw.upstream("b2", { scope = "ups", peers = { "::1:80" } }) end,
      'nres.ngx.upstream: peers[1]: expected "host:port" or "[IPv6]:port", got "::1:80"')
    -- an IPv6 peer keeps its brackets (issue 28, defect 12: refused)
    local v6 = gw.upstream("b2v6", { scope = "ups", peers = { "[::1]:8080", "127.0.0.1:80" } })
    expect.eq(v6.hosts[1], "[::1]")
    expect.eq(v6.ports[1], 8080)
    expect.error(function() gw.upstream("b3", { scope = "ups", peers = { "192.0.2.1:1", "192.0.2.1:1" } }) end,
      'nres.ngx.upstream: peers[2]: expected a peer listed once, got "192.0.2.1:1"')
    expect.error(function() gw.upstream("b4", { scope = "nope", peers = { "192.0.2.1:1" } }) end,
      'nres.ngx.upstream: scope: expected a scope declared with gw.scope before it, got "nope"')
    expect.error(function() gw.upstream("b5", { scope = "ups", peers = { "192.0.2.1:1" }, choice = "lc" }) end,
      'nres.ngx.upstream: choice: expected "p2c" or "round-robin", got "lc"')
    expect.error(function() gw.upstream("b6", { scope = "ups", peers = { "192.0.2.1:1" }, eject = { ration = 1 } }) end,
      "nres.ngx.upstream: eject.ration: expected one of consecutive, ratio, min_calls, window,"
      .. " buckets, break_for, break_max, jitter, probes, successes, lease, got an unknown field")
    expect.error(function() gw.upstream("b7", { scope = "ups", peers = { "192.0.2.1:1" }, eject = { ratio = 2 } }) end,
      "nres.ngx.upstream: eject: breaker.failure_ratio: must be in [0, 1]")
    expect.error(function() gw.upstream("b8", { scope = "ups", peers = { "192.0.2.1:1" }, panic = 1.5 }) end,
      "nres.ngx.upstream: panic: expected a share of healthy peers 0..1, got 1.5")
    -- issue 25: weights, backups, slow start
    local wb = gw.upstream("bw", { scope = "ups", slow_start = "30s", peers = {
      { "10.0.0.1:80", weight = 3 }, "10.0.0.2:80", { "10.0.0.3:80", backup = true } } })
    expect.eq(wb.gw.weighted, 1)
    expect.eq(wb.gw.peer[0].declared, 3)
    expect.eq(wb.gw.peer[1].declared, 1)
    expect.eq(wb.gw.peer[2].backup, 1)
    expect.eq(tonumber(wb.gw.slow_start), 30e9)
    expect.eq(gw.upstream("bu", { scope = "ups", peers = { "192.0.2.1:1", { "192.0.2.1:2" } } }).gw.weighted, 0)
    for _, c in ipairs {
      { { { "192.0.2.1:1", weight = 0 } }, 'peers[1].weight: expected an integer 1..10000, got 0' },
      { { { "192.0.2.1:1", weight = 1.5 } }, 'peers[1].weight: expected an integer 1..10000, got 1.5' },
      { { "192.0.2.1:1", { "192.0.2.1:2", weight = "2" } }, 'peers[2].weight: expected an integer 1..10000, got "2"' },
      { { { "192.0.2.1:1", backup = "yes" } }, 'peers[1].backup: expected true or false, got "yes"' },
      { { { "192.0.2.1:1", wieght = 2 } }, 'peers[1].wieght: expected one of [1] ("host:port"), weight,'
        .. ' backup, got an unknown field' },
      { { { weight = 2 } }, 'peers[1]: expected "host:port" or "[IPv6]:port", got nil' },
      { { { "192.0.2.1:1", backup = true } }, 'peers: expected at least one peer that is not a backup,'
        .. ' got "only backups"' },
    } do
      expect.error(function() gw.upstream("bx", { scope = "ups", peers = c[1] }) end,
        "nres.ngx.upstream: " .. c[2])
    end
    expect.error(function() gw.upstream("bx", { scope = "ups", peers = { "192.0.2.1:1" }, slow_start = "1 fortnight" }) end,
      'nres.ngx.upstream: slow_start: expected seconds (a number 0..1e6, or with a unit: "90s",'
      .. ' "2m"), got "1 fortnight"')
    -- admission names what it was given wrong before it needs nginx
    gw.upstream("b9", { scope = "ups", peers = { "192.0.2.1:1" } })
    expect.error(function() gw.admit("nope") end,
      'nres.ngx.admit: upstream: expected an upstream declared with peers, got "nope"')
    expect.error(function() gw.admit("b9", "clients", nil) end,
      "nres.ngx.admit: key: expected a string (the client's, e.g. ngx.var.remote_addr), got nil")
    expect.error(function() gw.admit("b9", "clients", 7) end,
      "nres.ngx.admit: key: expected a string (the client's, e.g. ngx.var.remote_addr), got 7")
    for _, l in ipairs { "nope", 5, false } do
      expect.error(function() gw.admit("b9", l, "k") end,
        "nres.ngx.admit: limiter: expected a limiter declared with gw.limiter, or nil, got "
        .. (type(l) == "string" and '"' .. l .. '"' or tostring(l)))
    end
    -- a key without a limiter limited nothing, unsaid
    expect.error(function() gw.admit("b9", nil, "10.0.0.1") end,
      'nres.ngx.admit: key: expected nil without a limiter (the second argument), which it'
      .. ' is for, got "10.0.0.1"')
  end)

  -- lua-nginx-module 0.10.27 added host, host_len to set_current_peer:
  -- calling it with 0.10.23's 5 arguments failed the first balanced
  -- request of a newer OpenResty (issue 26). The signature is chosen by
  -- version; a version it cannot call fails the declaration (init_by_lua:
  -- the start), never a request. Stubbed version numbers: one build here.
  it("choose set_current_peer's signature by lua-nginx-module's version, refuse older ones at start", function()
    local request = require "nres.ngx.request"
    for version, host in pairs { [10023] = false, [10026] = false, [10027] = true,
                                 [10030] = true, [20001] = true } do
      expect.eq(request.peer_host_args(version), host)
    end
    for _, bad in ipairs { 10022, 9999, "10027", 10027.5 } do
      local ok, why = request.peer_host_args(bad)
      expect.eq(ok, nil)
      expect.truthy(why:find("0.10.23 or newer", 1, true), why)
    end
    gw.scope("vers", { policy = "gateway", slots = 8 })
    local saved = rawget(_G, "ngx")
    ngx = { config = { ngx_lua_version = 10019 } }   -- luacheck: ignore
    local ok, err = pcall(gw.upstream, "old", { scope = "vers", peers = { "127.0.0.1:1" } })
    ngx = { config = { ngx_lua_version = 10027 } }   -- luacheck: ignore
    local ok2, err2 = pcall(gw.upstream, "new", { scope = "vers", peers = { "127.0.0.1:1" } })
    ngx = saved   -- luacheck: ignore
    expect.eq(ok, false)
    expect.eq(err, "nres.ngx.upstream: old: expected lua-nginx-module 0.10.23 or newer"
      .. " (ngx_lua_version 10023), got 10019")
    expect.truthy(ok2, err2)
    -- and the balancer calls the signature chosen: a stubbed binding (no
    -- nginx here) bound for each version counts set_current_peer's arguments
    local real = require "nres.ngx.request"
    local req = ffi.new("char[1]")   -- a request's address
    for version, nargs in pairs { [10023] = 5, [10027] = 7 } do
      local seen
      local stub = setmetatable({}, { __index = real })
      function stub.bind()
        stub.peer_host = real.peer_host_args(version)
        stub.exdata = function() return req end
        stub.start_time = function() return version end
        stub.var_get = function() return real.NGX_DECLINED end
        stub.set_peer = function(...)
          seen = select("#", ...)
          return real.NGX_OK
        end
        stub.set_timeouts = function() return real.NGX_OK end
        stub.set_more_tries = function() return real.NGX_OK end
        stub.status = function() return 200 end
        return stub
      end
      package.loaded["nres.ngx.request"] = stub
      package.loaded["nres.ngx.balancer"] = nil   -- a fresh one binds anew
      local balancer = require "nres.ngx.balancer"
      local ok3, err3 = pcall(balancer.balance, "new")
      balancer.log()
      package.loaded["nres.ngx.request"] = real
      expect.truthy(ok3, err3)
      expect.eq(seen, nargs)
    end
  end)

  it("refuse bad health checks by field, and show them per peer", function()
    local function bad(h, msg)
      expect.error(function() gw.upstream("hb", { scope = "ups", peers = { "192.0.2.1:1" }, health = h }) end,
        "nres.ngx.upstream: " .. msg)
    end
    bad({ path = "/h", intervall = 1 }, "health.intervall: expected one of path, interval,"
        .. " timeout, healthy, unhealthy, statuses, host, tcp, got an unknown field")
    bad(5, "health: expected a table, got 5")
    bad({}, 'health.path: expected a path such as "/health" (or tcp = true), got nil')
    bad({ path = "health" }, 'health.path: expected a path such as "/health" (or tcp = true),'
        .. ' got "health"')
    bad({ tcp = true, path = "/h" }, 'health.path: expected nil with tcp = true (a connect sends'
        .. ' nothing), got "/h"')
    bad({ tcp = "yes" }, 'health.tcp: expected true (a TCP connect) or false, got "yes"')
    bad({ path = "/h", interval = "2 s" }, 'health.interval: expected seconds (a number 0..1e6,'
        .. ' or with a unit: "90s", "2m"), got "2 s"')
    bad({ path = "/h", interval = 0 }, "health.interval: expected 0.01 s .. 1 h, got 0")
    bad({ path = "/h", interval = "1s", timeout = "2s" }, 'health.timeout: expected more than 0'
        .. ' and at most health.interval (1 s), got "2s"')
    bad({ path = "/h", healthy = 0 }, "health.healthy: expected an integer 1..255, got 0")
    bad({ path = "/h", unhealthy = 2.5 }, "health.unhealthy: expected an integer 1..255, got 2.5")
    bad({ path = "/h", statuses = { 200, 700 } }, "health.statuses[2]: expected an HTTP status"
        .. " 100..599, got 700")
    bad({ path = "/h", statuses = {} }, 'health.statuses: expected a list of HTTP statuses,'
        .. ' got "an empty list"')
    local u = gw.upstream("hc", { scope = "ups", peers = { "10.9.0.1:80", "10.9.0.2:80" },
      health = { path = "/h", interval = "1500ms", timeout = "0.5s", unhealthy = 4 } })
    expect.eq(u.health.interval, 1.5)
    expect.eq(u.health.timeout, 0.5)
    expect.eq(u.health.unhealthy, 4)
    expect.eq(u.health.healthy, 2)
    expect.eq(u.health.lease, 3)
    local t = gw.upstream("ht", { scope = "ups", peers = { "10.9.0.3:80" },
                                  health = { tcp = true, interval = 2 } })
    expect.eq(t.health.tcp, true)
    expect.eq(t.health.timeout, 1)
    -- status: the settings, nobody checking yet; an operator's ejection
    -- says so, the health checks' says active
    local ctl = require "nres.ngx.control"
    local up = require("nres.ngx.balancer").status(C.nres_step_now()).hc
    expect.eq(up.health.kind, "http")
    expect.eq(up.health.checker_pid, nil)
    expect.eq(up.peers[1].health.passed_in_a_row, 0)
    expect.eq(up.peers[1].ejected_by, nil)
    C.nres_breaker_isolate(u.br[1])
    C.nres_breaker_isolate(u.br[2])
    C.nres_gw_control_flag(ctl.block(u.controls + u.idx[2] * ctl.BYTES), 8, 1)
    up = require("nres.ngx.balancer").status(C.nres_step_now()).hc
    expect.eq(up.peers[1].ejected_by, "operator")
    expect.eq(up.peers[2].ejected_by, "active")
    local prom = gw.prometheus(gw.snapshot())
    expect.truthy(prom:find('nres_peer_ejected_by{upstream="hc",peer="10.9.0.2:80",by="active"} 1',
                            1, true))
  end)

  it("add and remove peers at run time (gw.apply), whole or not at all", function()
    local u = gw.upstream("mem", { scope = "ups", peers = { "10.7.0.1:80", "10.7.0.2:80" },
                                   max_peers = 3 })
    local res = gw.apply { action = "add", upstream = "mem", peer = "10.7.0.3:80", weight = 2 }
    expect.eq(res.changed, "upstream mem peer 10.7.0.3:80: added (weight 2)")
    expect.eq(u.n, 3)
    expect.eq(u.peer[3], "10.7.0.3:80")
    expect.eq(u.hosts[3], "10.7.0.3")
    expect.eq(u.ports[3], 80)
    expect.eq(gw.snapshot().upstreams.mem.peers[3].weight, 2)
    bad({ action = "add", upstream = "mem", peer = "10.7.0.4:80" }, 409,
        'upstream: expected an upstream with room for another peer (max_peers 3; 3 members,'
        .. ' removed ones counted until their tries end), got "mem"')
    bad({ action = "add", upstream = "mem", peer = "10.7.0.3:80" }, 409,
        'peer: expected a peer not in the upstream yet, got "10.7.0.3:80"')
    bad({ action = "add", upstream = "nope", peer = "10.7.0.3:80" }, 404,
        'upstream: expected one of ' .. (function()
          local t = {} for k, x in pairs(gw.upstreams) do if x.balancer then t[#t + 1] = k end end
          table.sort(t) return table.concat(t, ", ") end)() .. ', got "nope"')
    bad({ action = "add", upstream = "mem", peer = "host:80" }, 400,
        'peer: expected "a.b.c.d:port" or "[IPv6]:port" (an address, port 1..65535), got "host:80"')
    bad({ action = "add", upstream = "mem", peer = "10.7.0.4:80", weight = 1.5 }, 400,
        "weight: expected an integer 1..10000, got 1.5")
    bad({ action = "add", upstream = "mem", peer = "10.7.0.4:80", backup = "yes" }, 400,
        'backup: expected true or false, got "yes"')
    bad({ action = "remove", upstream = "mem", peer = "10.7.0.9:80" }, 404,
        'peer: expected one of 10.7.0.1:80, 10.7.0.2:80, 10.7.0.3:80, got "10.7.0.9:80"')
    res = gw.apply { action = "remove", upstream = "mem", peer = "10.7.0.1:80" }
    expect.eq(res.changed, "upstream mem peer 10.7.0.1:80: removed (0 tries in flight finish"
              .. " there)")
    expect.eq(gw.snapshot().upstreams.mem.peers[1].peer, "10.7.0.2:80")
    expect.eq(#gw.snapshot().upstreams.mem.peers, 2)
    expect.truthy(gw.apply { action = "drain", upstream = "mem", peer = "10.7.0.3:80" })
    bad({ action = "remove", upstream = "mem", peer = "10.7.0.2:80" }, 409,
        'peer: expected a peer whose upstream keeps another primary peer that is not drained,'
        .. ' got "10.7.0.2:80"')
    expect.truthy(gw.apply { action = "restore", upstream = "mem", peer = "10.7.0.3:80" })
    expect.truthy(gw.apply { action = "weight", upstream = "mem", peer = "10.7.0.3:80",
                             weight = 5 })
    for _ = 1, 20 do   -- the removed peer gets no pick
      local i = require("nres.ngx.balancer").pick(u, C.nres_step_now())
      expect.truthy(u.live[i], u.peer[i])
    end
    expect.error(function()
      gw.upstream("mem2", { scope = "ups", peers = { "10.7.0.1:80", "10.7.0.2:80" },
                            max_peers = 1 })
    end, "nres.ngx.upstream: max_peers: expected an integer from the number of peers (2) to"
         .. " 256, got 1")
  end)

  it("log each peer state change once, rate-limited, with why and the counts", function()
    local watch = require "nres.ngx.watch"
    local u = gw.upstream("watched", { scope = "ups", peers = { "10.9.0.1:80" } })
    local lines = {}
    local function log(level, text)
      if text:find("watched", 1, true) then lines[#lines + 1] = level .. " " .. text end
    end
    watch.reset()
    local now = T0
    watch.poll(log, now, 100)
    expect.eq(#lines, 0, "a closed peer at the first look: no line")
    local rng = ffi.new("nres_rng_t", { 1 })
    for _ = 1, 5 do C.nres_breaker_record(u.br[1], now, 0, 1, 0, rng) end
    watch.poll(log, now, 100.5)
    watch.poll(log, now, 101)
    expect.eq(#lines, 1, table.concat(lines, "\n"))
    expect.eq(lines[1], "warn nres: peer 10.9.0.1:80 of upstream watched ejected: 5 failures"
              .. " in a row; 0 tries, 0 failed; opened 1 times")
    C.nres_breaker_reset(u.br[1])
    watch.poll(log, now, 102)
    expect.eq(#lines, 1, "within 5 s of the last line: held")
    watch.poll(log, now, 105.6)
    expect.eq(lines[2], "notice nres: peer 10.9.0.1:80 of upstream watched restored; 0 tries,"
              .. " 0 failed; opened 1 times")
    watch.poll(log, now, 200)
    expect.eq(#lines, 2, "no change, no line")
  end)

  it("log the state changes of a peer another worker added", function()
    local watch = require "nres.ngx.watch"
    local u = gw.upstream("watched2", { scope = "ups", peers = { "10.9.1.1:80" } })
    -- the shared membership changed, this Lua state's mirror not told
    local slot = C.nres_gw_member_add(u.gw, "10.9.1.2:80", 11, 1, 0, C.nres_step_now())
    expect.truthy(slot >= 0)
    local lines = {}
    local function log(_, text)
      if text:find("10.9.1.2:80", 1, true) then lines[#lines + 1] = text end
    end
    watch.reset()
    watch.poll(log, T0, 100)
    C.nres_breaker_isolate(C.nres_shm_slot(u.ptr, slot).breaker)
    watch.poll(log, T0, 101)
    expect.eq(#lines, 1, table.concat(lines, "\n"))
  end)

  it("take control operations whole or not at all, naming what is wrong", function()
    gw.upstream("ctl", { scope = "ups", peers = { "10.8.0.1:80", "10.8.0.2:80" } })
    bad({ action = "isolate", upstream = "ctl", scope = "ups" }, 400,
        'upstream: expected either upstream or scope and key, got "ctl"')
    bad({ action = "eject", upstream = "ctl", peer = "10.8.0.3:80" }, 404,
        'peer: expected one of 10.8.0.1:80, 10.8.0.2:80, got "10.8.0.3:80"')
    bad({ action = "rate", limiter = "nope", rate = 1 }, 404,
        'limiter: expected one of ' .. (function()
          local t = {} for k in pairs(gw.limiters) do t[#t + 1] = k end
          table.sort(t) return table.concat(t, ", ") end)() .. ', got "nope"')
    bad({ action = "dry_run", scope = "ups", limiter = "x", on = true }, 400,
        'scope: expected either scope or limiter, got "ups"')
    expect.truthy(gw.apply { action = "drain", upstream = "ctl", peer = "10.8.0.1:80" })
    bad({ action = "drain", upstream = "ctl", peer = "10.8.0.2:80" }, 409,
        'peer: expected a peer whose upstream keeps another one not drained, got "10.8.0.2:80"')
    local res = gw.apply { action = "restore", upstream = "ctl", peer = "10.8.0.1:80" }
    expect.eq(res.drained, false)
    res = gw.apply { action = "eject", upstream = "ctl", peer = "10.8.0.2:80" }
    expect.eq(res.state, "isolated")
    expect.eq(gw.snapshot().upstreams.ctl.peers[2].state, "isolated")
    gw.apply { action = "restore", upstream = "ctl", peer = "10.8.0.2:80" }
    -- issue 25: a peer's weight at run time, read by every worker's view
    bad({ action = "weight", upstream = "ctl", peer = "10.8.0.2:80", weight = 0 }, 400,
        "weight: expected an integer 1..10000, got 0")
    bad({ action = "weight", upstream = "ctl", peer = "10.8.0.2:80" }, 400,
        "weight: expected an integer 1..10000, got nil")
    res = gw.apply { action = "weight", upstream = "ctl", peer = "10.8.0.2:80", weight = 4 }
    expect.eq(res.changed, "upstream ctl peer 10.8.0.2:80: weight 4 (was 1)")
    expect.eq(require("nres.ngx.control").snapshot().upstreams.ctl.weights["10.8.0.2:80"], 4)
    local g = gw.upstreams.ctl.gw
    C.nres_gw_refresh(g, C.nres_step_now())
    expect.eq(g.peer[1].weight, 4)
    expect.eq(g.weighted, 1)
    gw.apply { action = "weight", upstream = "ctl", peer = "10.8.0.2:80", weight = 1 }
    local control = require "nres.ngx.control"
    control.configure { allow = { "10.1.0.0/16", "2001:db8::7" } }
    for addr, want in pairs { ["127.0.0.1"] = true, ["127.9.9.9"] = true, ["::1"] = true,
                              ["10.1.200.3"] = true, ["10.2.0.1"] = false,
                              ["2001:db8::7"] = true, ["2001:db8::8"] = false } do
      expect.eq(control.allowed(addr), want, addr)
    end
    expect.error(function() control.configure { allow = { "10.0.0.0/40" } } end,
      'nres.ngx.control: allow[1]: expected an address or an IPv4 prefix (a.b.c.d/n), got "10.0.0.0/40"')
    control.configure {}
  end)

  it("pick peers: never the one that failed, not an ejected one, all of them in panic", function()
    local u = gw.upstream("pool", { scope = "ups", peers = { "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80" } })
    expect.eq(u.shm.file, dir .. "/spec.peers.pool.shm")
    local now = T0
    local seen = { 0, 0, 0 }
    for _ = 1, 300 do
      local i = balancer.pick(u, now, 2)
      seen[i] = seen[i] + 1
    end
    expect.eq(seen[2], 0, "the peer that just failed is avoided")
    expect.truthy(seen[1] > 50 and seen[3] > 50, "the others share the load")
    -- latency: peer 3 ten times slower than peer 1, peer 2 like peer 1
    for _ = 1, 50 do
      C.nres_estimator_record(u.est[1], now, 1e6)
      C.nres_estimator_record(u.est[2], now, 1e6)
      C.nres_estimator_record(u.est[3], now, 10e6)
    end
    now = now + 1e8   -- past this worker's refresh interval
    seen = { 0, 0, 0 }
    for _ = 1, 300 do
      local i = balancer.pick(u, now)
      seen[i] = seen[i] + 1
    end
    expect.eq(seen[3], 0, "power of two choices: the slow peer never wins a pair")
    expect.truthy(seen[1] > 50 and seen[2] > 50, "the fast ones share")
    -- eject peer 1: its breaker opens after 5 failures in a row
    local rng = ffi.new("nres_rng_t", { 1 })
    for _ = 1, 5 do C.nres_breaker_record(u.br[1], now, 0, 1, 0, rng) end
    expect.eq(C.nres_breaker_state(u.br[1], now), 1, "ejected")
    now = now + 1e8
    seen = { 0, 0, 0 }
    for _ = 1, 300 do
      local i, permit = balancer.pick(u, now)
      seen[i] = seen[i] + 1
      expect.eq(permit, 0, "admitted by a closed breaker")
    end
    expect.eq(seen[1], 0, "an ejected peer gets nothing while its break lasts")
    -- eject peer 2 too: 1 of 3 healthy is under the 0.5 panic share
    for _ = 1, 5 do C.nres_breaker_record(u.br[2], now, 0, 1, 0, rng) end
    now = now + 1e8
    seen = { 0, 0, 0 }
    local unasked = 0
    for _ = 1, 300 do
      local i, permit = balancer.pick(u, now)
      seen[i] = seen[i] + 1
      if permit == false then unasked = unasked + 1 end
    end
    expect.truthy(seen[1] > 0 and seen[2] > 0, "panic: ejected peers get traffic again")
    expect.eq(unasked, 300, "in panic no breaker is asked")
    -- the break ends: a half-open peer gets its probe, then nothing more
    now = now + 3e9
    local rr = gw.upstream("rr", { scope = "ups", peers = { "10.0.1.1:80", "10.0.1.2:80" },
                                   choice = "round-robin", panic = 0 })
    for _ = 1, 5 do C.nres_breaker_record(rr.br[1], now, 0, 1, 0, rng) end
    now = now + 3e9    -- past the 2 s break: half-open
    local probes = 0
    for _ = 1, 20 do
      local i, permit = balancer.pick(rr, now)
      if i == 1 then
        probes = probes + 1
        expect.truthy(permit ~= 0, "a probe permit")
      end
    end
    expect.eq(probes, 1, "one half-open probe at a time")
  end)

  it("show the peers in the status snapshot, lists as JSON arrays", function()
    local snap = gw.snapshot()
    local pool = snap.upstreams.pool
    expect.eq(#pool.peers, 3)
    expect.eq(pool.peers[1].peer, "10.0.0.1:80")
    expect.eq(pool.peers[1].ejections, 1)
    expect.eq(pool.peers[3].failures, 0)
    local cjson = require "cjson"
    gw.limiter("nobody", { rate = 1, slots = 8 })   -- no key: an empty list
    local j = cjson.decode(gw.json(gw.snapshot()))
    local nobody = gw.json(gw.snapshot()):match('"nobody":(%b{})')
    expect.truthy(nobody and nobody:find('"keys":[]', 1, true), "keys: []")
    expect.eq(type(j.upstreams.pool.peers), "table")
    local text = gw.prometheus(gw.snapshot())
    expect.truthy(text:find('\nnres_peer_ejections_total{upstream="pool",peer="10.0.0.1:80"} 1\n', 1, true),
                  "Prometheus: " .. text:sub(1, 200))
    expect.truthy(text:find("# TYPE nres_peer_tries_total counter", 1, true))
    -- a peer without an estimate has no latency figure, never 0
    for _, p in ipairs(gw.snapshot().upstreams.pool.peers) do
      expect.truthy(p.latency_p75_ms == nil or p.latency_p75_ms > 0, "p75 of " .. p.peer)
    end
    expect.truthy(not text:find("nres_peer_latency_p75_seconds{[^}]*} 0\n"), "no 0 s p75")
  end)

  gw.region{ dir = false }
  os.execute("rm -rf " .. dir)
end)

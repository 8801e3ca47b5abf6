-- SPDX-License-Identifier: MIT
-- shadow_spec.lua - p:shadow(candidate) on a virtual clock: the candidate
-- counts what it would have done (p:stats().shadow) and refuses exactly
-- the calls a live copy of it refuses on the same fixed-seed outcomes;
-- bad candidates are refused by name; the live calls do not change.
local nres = require "nres"
local driver = require "nres.driver"

local MS = 1e6

-- The live policy: 3 attempts 10 ms apart, nothing refuses.
local LIVE = { base = "none", attempts = 3, telemetry = true,
               backoff = { kind = "constant", base = 0.01, max = 0.01 } }
-- The candidate: the same retries, a breaker open 0.3 s after 5 failures
-- in a row, a budget of 20 % retries.
local CANDIDATE = { base = "none", attempts = 3, telemetry = true,
                    backoff = { kind = "constant", base = 0.01, max = 0.01 },
                    breaker = { consecutive = 5, break_for = 0.3, jitter = 0, successes = 1 },
                    budget = { ratio = 0.2, min_per_sec = 0.5, capacity = 4 } }

-- Attempt n of call i at t (ns) fails while the dependency is down (1 s
-- to 2.5 s, 5 s to 5.4 s), else with odds 35 % from a hash of (seed, i, n):
-- the same answer whichever policy asks.
local function fails(seed, i, n, t)
  if (t >= 1000 * MS and t < 2500 * MS) or (t >= 5000 * MS and t < 5400 * MS) then
    return true
  end
  local x = (seed * 1000003 + i * 7919 + n * 104729) % 2147483647
  for _ = 1, 3 do x = (x * 48271) % 2147483647 end
  return x % 100 < 35
end

-- 200 calls on p (a policy on driver d), one every 40 ms, each attempt 2 ms.
local function run_calls(p, d, seed)
  for i = 0, 199 do
    d.t = i * 40 * MS
    local n = 0
    p:run(function()
      n = n + 1
      d.sleep(2 * MS)
      if fails(seed, i, n, d.t) then return nil, "boom" end
      return "ok"
    end)
  end
end

local function on_virtual(spec)
  local d = driver.virtual(0)
  return nres.policy(spec):with_driver(d), d
end

describe("p:shadow", function()
  it("refuses exactly what a live copy of the candidate refuses", function()
    for seed = 1, 3 do
      local a, da = on_virtual(LIVE)
      local b = on_virtual(CANDIDATE)
      local bl, dl = on_virtual(CANDIDATE)
      expect.eq(a:shadow(b), a)
      run_calls(a, da, seed)
      run_calls(bl, dl, seed)
      local s, l = a:stats().shadow, bl:stats()
      expect.truthy(l.rejects.breaker > 0 and l.rejects.budget > 0, "the test bites")
      for _, field in ipairs { "calls", "retries" } do
        expect.eq(s[field], l[field], field)
      end
      for _, t in ipairs { "rejects", "stops", "verdicts" } do
        for k, v in pairs(l[t]) do expect.eq(s[t][k], v, t .. "." .. k) end
      end
      expect.eq(s.breaker, l.breaker, "breaker state")
      -- the live policy acted on none of it
      expect.eq(a:stats().rejects.breaker, 0)
      expect.eq(a:stats().calls, 200)
      expect.eq(b:stats().calls, 200)   -- the candidate's own counters
    end
  end)

  it("leaves the live calls as they were, and detaches", function()
    local a, da = on_virtual(LIVE)
    local plain, dp = on_virtual(LIVE)
    a:shadow(on_virtual(CANDIDATE))
    run_calls(a, da, 9)
    run_calls(plain, dp, 9)
    local sa, sp = a:stats(), plain:stats()
    for k, v in pairs(sp.stops) do expect.eq(sa.stops[k], v, "stops." .. k) end
    expect.eq(sa.retries, sp.retries)
    a:shadow(nil)
    expect.eq(a:stats().shadow, nil)
  end)

  it("shadows a passthrough policy too", function()
    local a, d = on_virtual { base = "none" }
    a:shadow(on_virtual(CANDIDATE))
    d.t = 1200 * MS   -- down: one attempt, which the candidate would retry
    a:run(function() return nil, "boom" end)
    local s = a:stats().shadow
    expect.eq(s.verdicts.transient, 1)
    expect.eq(s.calls, 1)
  end)

  it("refuses bad candidates by name", function()
    local a = on_virtual(LIVE)
    local b = on_virtual(CANDIDATE)
    local itself = "bad argument #1 to 'shadow' (expected another policy, got the policy itself)"
    expect.error(function() a:shadow(a) end, itself)
    expect.error(function() a:shadow(a:with { criticality = "critical" }) end, itself)
    expect.error(function() a:shadow({}) end,
                 "bad argument #1 to 'shadow' (a policy from nres.policy expected, got a table)")
    expect.error(function() a:shadow("default") end,
                 "bad argument #1 to 'shadow' (a policy from nres.policy expected, got \"default\")")
    b:shadow(on_virtual(CANDIDATE))
    expect.error(function() a:shadow(b) end,
                 "bad argument #1 to 'shadow' (expected a policy without a shadow, got one with its own:"
                 .. " a candidate's candidate would never be asked)")
    expect.eq(a:stats().shadow, nil)   -- refused: nothing attached
  end)
end)

-- SPDX-License-Identifier: MIT
-- validation_spec.lua - every bad policy is refused with a message naming
-- the field, what was expected and what was given, all problems at once,
-- raised at the caller's line (error level 2).
local nres = require "nres"

-- { policy, exact message without the "file:line: " position }; $PRESETS
-- stands for the presets folder the module found.
local bad = {
  { { attemps = 3 },
    "nres.policy: attemps: unknown field (did you mean \"attempts\"?)" },
  { { attempts = 0 },
    "nres.policy: attempts: expected an integer from 1 to 65535, got 0" },
  { { attempts = 2.5 },
    "nres.policy: attempts: expected an integer from 1 to 65535, got 2.5" },
  { { attempts = "3" },
    "nres.policy: attempts: expected an integer from 1 to 65535, got \"3\"" },
  { { attempts = 1e9 },
    "nres.policy: attempts: expected an integer from 1 to 65535, got 1000000000" },
  { { backoff = { kind = "expo" } },
    "nres.policy: backoff.kind: expected one of \"none\", \"constant\", \"linear\", \"exponential\", \"decorrelated\", got \"expo\"" },
  { { backoff = { base = -1 } },
    "nres.policy: backoff.base: expected a duration in seconds (finite number >= 0), got -1" },
  { { backoff = { base = 0/0 } },
    "nres.policy: backoff.base: expected a duration in seconds (finite number >= 0), got nan" },
  { { backoff = { max = math.huge } },
    "nres.policy: backoff.max: expected a duration in seconds (finite number >= 0), got inf" },
  { { backoff = { factor = 0.5 } },
    "nres.policy: backoff.factor: expected a finite number >= 1, got 0.5" },
  { { backoff = { jitter = "half" } },
    "nres.policy: backoff.jitter: expected one of \"none\", \"full\", \"equal\", \"decorrelated\", got \"half\"" },
  { { backoff = { base = 2, max = 1 } },
    "nres.policy: backoff.max: expected >= backoff.base (2 s), got 1" },
  { { backoff = { kind = "decorrelated", jitter = "full" } },
    "nres.policy: backoff.jitter: the decorrelated kind has its own jitter; expected \"none\", got \"full\"" },
  { { backoff = "fast" },
    "nres.policy: backoff: expected a table, \"none\" or false, got \"fast\"" },
  { { backoff = { bsae = 0.1 } },
    "nres.policy: backoff.bsae: unknown field (did you mean \"base\"?)" },
  { { deadline = -1 },
    "nres.policy: deadline: expected a duration in seconds (finite number > 0) or false, got -1" },
  { { deadline = 0 },
    "nres.policy: deadline: expected a duration in seconds (finite number > 0) or false, got 0" },
  { { deadline = true },
    "nres.policy: deadline: expected a duration in seconds (finite number > 0) or false, got true" },
  { { attempt_timeout = 40 },
    "nres.policy: attempt_timeout: 40 s is longer than the deadline (30 s)" },
  { { deadline = 1, attempt_timeout = 2 },
    "nres.policy: attempt_timeout: 2 s is longer than the deadline (1 s)" },
  { { budget = { ratio = 0 } },
    "nres.policy: budget.ratio: expected a ratio in (0, 1], got 0" },
  { { budget = { ratio = 1.5 } },
    "nres.policy: budget.ratio: expected a ratio in (0, 1], got 1.5" },
  { { budget = { min_per_sec = -3 } },
    "nres.policy: budget.min_per_sec: expected a finite number >= 0, got -3" },
  { { budget = 42 },
    "nres.policy: budget: expected a table, a budget name (string) or false, got 42" },
  { { breaker = { ratio = 2 } },
    "nres.policy: breaker.ratio: expected a ratio in (0, 1] or false, got 2" },
  { { breaker = { probes = 0 } },
    "nres.policy: breaker.probes: expected an integer from 1 to 255, got 0" },
  { { breaker = { buckets = 17 } },
    "nres.policy: breaker.buckets: expected an integer from 1 to 16, got 17" },
  { { breaker = { break_for = 10, break_max = 5 } },
    "nres.policy: breaker.break_max: expected >= breaker.break_for (10 s), got 5" },
  { { breaker = { consecutive = false, ratio = false } },
    "nres.policy: breaker: nothing can trip it; set consecutive, ratio or slow_ratio" },
  { { breaker = { slow_call = 1 } },
    "nres.policy: breaker.slow_call: has no effect without breaker.slow_ratio" },
  { { breaker = { jitter = 1 } },
    "nres.policy: breaker.jitter: expected a fraction in [0, 1), got 1" },
  { { throttle = { k = 0.9 } },
    "nres.policy: throttle.k: expected a finite number from 1 to 1000, got 0.9" },
  { { throttle = { k = "1.1" } },
    "nres.policy: throttle.k: expected a finite number from 1 to 1000, got \"1.1\"" },
  { { throttle = { k = 0/0 } },
    "nres.policy: throttle.k: expected a finite number from 1 to 1000, got nan" },
  { { throttle = { window = 0 } },
    "nres.policy: throttle.window: expected a duration in seconds (finite number > 0), got 0" },
  { { throttle = { buckets = 17 } },
    "nres.policy: throttle.buckets: expected an integer from 1 to 16, got 17" },
  { { throttle = { window = 4e-9 } },
    "nres.policy: throttle.window: expected at least 1 ns per bucket (8 buckets), got 4e-09" },
  { { throttle = { kk = 2 } },
    "nres.policy: throttle.kk: unknown field (did you mean \"k\"?)" },
  { { throttle = true },
    "nres.policy: throttle: expected a table or false, got true" },
  { { limiter = { rate = 0 } },
    "nres.policy: limiter.rate: expected a finite number > 0, got 0" },
  { { limiter = { burst = 5 } },
    "nres.policy: 2 problems:\
  limiter: expected rate (per second) or concurrency, got neither\
  limiter.burst: has no effect without limiter.rate" },
  { { limiter = { concurrency = 4, queue = 10 } },
    "nres.policy: limiter.queue_timeout: a queue needs a timeout (seconds > 0)" },
  { { limiter = { rate = 10, queue = 3 } },
    "nres.policy: 2 problems:\
  limiter.queue: has no effect without limiter.concurrency\
  limiter.queue_timeout: a queue needs a timeout (seconds > 0)" },
  { { limiter = { concurrency = 8, adaptive = { min = 10, max = 5, target = 0.1 } } },
    "nres.policy: limiter.adaptive.max: expected >= limiter.adaptive.min (10), got 5" },
  { { limiter = { concurrency = 8, adaptive = { max = 50 } } },
    "nres.policy: limiter.adaptive.target: expected a duration in seconds (finite number > 0), got nil" },
  { { hedge = { max = 2 } },
    "nres.policy: hedge.at: expected a latency quantile like \"p95\" or a fixed delay in seconds (> 0), got nil" },
  { { hedge = { at = "p100" } },
    "nres.policy: hedge.at: expected a latency quantile like \"p95\" or a fixed delay in seconds (> 0), got \"p100\"" },
  { { hedge = { at = "fast" } },
    "nres.policy: hedge.at: expected a latency quantile like \"p95\" or a duration with a unit, like \"250ms\", \"1.5s\", \"2m\" or \"1m30s\" (units: ns, us, ms, s, m, h), got \"fast\"" },
  { { hedge = { at = "p95", max = 4 } },
    "nres.policy: hedge.max: 4 attempts side by side need attempts >= 4 (hedges count as attempts), got attempts = 3" },
  { { base = "none", hedge = { at = 0.05 } },
    "nres.policy: hedge.max: 2 attempts side by side need attempts >= 2 (hedges count as attempts), got attempts = 1" },
  { { hedge = { at = "p95", max = 5 } },
    "nres.policy: hedge.max: expected an integer from 2 to 4, got 5" },
  { { hedge = { at = "p95" }, latency = false },
    "nres.policy: 2 problems:\
  hedge.at: \"p95\" needs a latency source, but latency = false\
  ceiling: a measured attempt ceiling needs a latency source, but latency = false" },
  { { ceiling = { factor = 3 }, latency = false },
    "nres.policy: ceiling: a measured attempt ceiling needs a latency source, but latency = false" },
  { { classify = "grpc" },
    "nres.policy: classify: expected \"default\", \"http\", a function or a table, got \"grpc\"" },
  { { classify = { status = { [429] = "retry" } } },
    "nres.policy: classify.status[429]: expected one of \"ok\", \"transient\", \"throttled\", \"permanent\", \"canceled\", got \"retry\"" },
  { { classify = { statuses = {} } },
    "nres.policy: classify.statuses: unknown field (did you mean \"status\"?)" },
  { { fallback = "cached" },
    "nres.policy: fallback: expected a function or false, got \"cached\"" },
  { { telemetry = "yes" },
    "nres.policy: telemetry: expected a boolean, got \"yes\"" },
  { { seed = -1 },
    "nres.policy: seed: expected an integer from 0 to 9007199254740991, got -1" },
  { { base = "nope" },
    "nres.policy: base: unknown preset \"nope\" (did you mean \"none\"? presets: batch, default, gateway, http, none, trivial)" },
  { { base = "defualt" },
    "nres.policy: base: unknown preset \"defualt\" (did you mean \"default\"? presets: batch, default, gateway, http, none, trivial)" },
  { { base = 5 },
    "nres.policy: base: expected a preset name (string), got 5" },
  { { [1] = "x" },
    "nres.policy: [1]: unknown field (valid: admit, attempt_timeout, attempts, backoff, base, breaker, budget, ceiling, classify, deadline, fallback, hedge, latency, limiter, on_event, seed, telemetry, throttle)" },
  { "nosuchpreset",
    "nres.policy: unknown preset \"nosuchpreset\" (presets: batch, default, gateway, http, none, trivial)" },
  { "gatway",
    "nres.policy: unknown preset \"gatway\" (did you mean \"gateway\"? presets: batch, default, gateway, http, none, trivial)" },
  { 42,
    "nres.policy: expected a policy table or a preset name, got 42" },
}

describe("bad policies", function()
  it("has at least 30 cases", function()
    expect.truthy(#bad >= 30, "case count")
  end)
  for i, case in ipairs(bad) do
    it(string.format("case %d: %s", i, case[2]:gsub("\n.*", " ...")), function()
      local want = case[2]:gsub("%$PRESETS", require("nres.policy").presets_dir)
      expect.error(function() nres.policy(case[1]) end, want, "validation_spec.lua")
    end)
  end
end)

describe("good policies", function()
  it("accepts every preset by name", function()
    for _, name in ipairs { "none", "trivial", "default", "http", "gateway", "batch" } do
      expect.truthy(nres.policy(name), name)
    end
  end)
  it("accepts the documented example", function()
    local p = nres.policy {
      attempts = 4,
      backoff = { kind = "exponential", base = 0.05, max = 2, jitter = "full" },
      deadline = 1.5, attempt_timeout = 0.3,
      budget = { ratio = 0.1, min_per_sec = 3 },
      breaker = { consecutive = 5, ratio = 0.5, window = 30, min_calls = 20, break_for = 15, probes = 1 },
      limiter = { rate = 200, burst = 50 },
      hedge = { at = "p95", max = 2 },
      classify = function(res, err) if err then return "transient" end return "ok" end,
      fallback = function() return "cached" end,
      admit = function() return true end,
    }
    expect.eq(p.cp.attempts, 4)
    expect.eq(tonumber(p.cp.deadline), 1.5e9)
    expect.eq(tonumber(p.cp.attempt_timeout), 0.3e9)
    expect.eq(p.cp.hedge.max, 2)
    expect.truthy(p.cp.ratelimit ~= nil and p.cp.estimator ~= nil, "limiter and estimator")
  end)
  it("turns features off with false and accepts concurrency limits", function()
    local p = nres.policy { deadline = false, attempt_timeout = false, budget = false,
                            breaker = false, ceiling = false,
                            limiter = { concurrency = 4, queue = 8, queue_timeout = 0.1 } }
    expect.eq(tonumber(p.cp.deadline), 0)
    expect.truthy(p.cp.budget == nil and p.cp.breaker == nil, "budget and breaker off")
    expect.truthy(p.cp.bulkhead ~= nil, "bulkhead")
  end)
end)

describe("tables with a metatable", function()
  it("a section whose fields come through __index is refused, naming it", function()
    expect.error(function()
      nres.policy { limiter = setmetatable({ rate = 1 }, { __index = { burst = -5, wait = -1 } }) }
    end, "nres.policy: limiter: expected a plain table, got a table with a metatable (fields read through __index would not be checked)")
  end)
  it("so is the policy table itself, a classify table and a named budget's config", function()
    expect.error(function() nres.policy(setmetatable({}, { __index = { attempts = 0 } })) end,
      "nres.policy: policy: expected a plain table, got a table with a metatable (fields read through __index would not be checked)")
    expect.error(function()
      nres.policy { classify = { status = setmetatable({}, { __index = function() return "ok" end }) } }
    end, "nres.policy: classify.status: expected a plain table, got a table with a metatable (fields read through __index would not be checked)")
    expect.error(function() nres.budget("mt", setmetatable({}, { __index = { ratio = 7 } })) end,
      "nres.budget: budget: expected a plain table, got a table with a metatable (fields read through __index would not be checked)")
  end)
end)

describe("fields of the wrong type never crash the checker", function()
  it("limiter.queue as a string, a table or a function is named", function()
    for _, v in ipairs { "x", {}, print } do
      local ok, err = pcall(nres.policy, { limiter = { concurrency = 2, queue = v } })
      expect.eq(ok, false)
      expect.truthy(tostring(err):find("limiter.queue: expected an integer from 0 to 4294967295, got ", 1, true),
        tostring(err))
    end
  end)
  it("every field of the schema, given each wrong type, gets a message naming it", function()
    local schema = require "nres.schema"
    local function walk(prefix, fields, wrap)
      for name, spec in pairs(fields) do
        local path = prefix == "" and name or prefix .. "." .. name
        if type(spec) == "table" and spec.fields then
          walk(path, spec.fields, function(v) return wrap({ [name] = v }) end)
        end
        for _, v in ipairs { "junk", { junk = true }, print, true, 0 / 0 } do
          local ok, err = pcall(nres.policy, wrap({ [name] = v }))
          if not ok then
            expect.truthy(tostring(err):find("nres.policy: ", 1, true) and not tostring(err):find("attempt to", 1, true),
              path .. " = " .. tostring(v) .. ": " .. tostring(err))
          end
        end
      end
    end
    walk("", schema.policy, function(t) t.base = "none"; return t end)
  end)
end)

describe("rates", function()
  it("a rate below one per 2^63 ns is refused, naming the minimum", function()
    expect.error(function() nres.policy { limiter = { rate = 5e-11 } } end,
      "nres.policy: limiter.rate: expected a rate of at least 1.0842021724855044e-10 per second (one per 9223372036.854775808 s (2^63 ns)), got 5e-11")
  end)
  it("the slowest rate accepted admits its first call", function()
    local p = nres.policy { base = "none", limiter = { rate = 1.1e-10 } }:with_driver(nres.driver.virtual())
    expect.eq(p:run(function() return 1 end), 1)
    local _, reason = p:run(function() return 1 end)
    expect.eq(reason, "rate limited")
  end)
  it("a burst whose tolerance passes 2^63 ns is refused", function()
    expect.error(function() nres.policy { limiter = { rate = 1e-9, burst = 10 } } end,
      "nres.policy: limiter.burst: burst / rate (10000000000 s) must be below 9223372036.854775808 s (2^63 ns)")
  end)
end)

-- Every duration field of a policy, with what it needs beside it, and
-- where the built policy keeps it (nil: not read back here).
local DURATIONS = {
  { "deadline", function(v) return { deadline = v, attempt_timeout = false } end,
    function(p) return p.cp.deadline end, positive = true, off = true },
  { "attempt_timeout", function(v) return { attempt_timeout = v, deadline = false } end,
    function(p) return p.cp.attempt_timeout end, positive = true, off = true },
  { "backoff.base", function(v) return { backoff = { base = v, max = "1e9s" } } end,
    function(p) return p.cp.backoff.base end },
  { "backoff.max", function(v) return { backoff = { base = 0, max = v } } end,
    function(p) return p.cp.backoff.max end },
  { "backoff.throttled_base", function(v) return { backoff = { throttled_base = v } } end,
    function(p) return p.cp.backoff.throttled_base end },
  { "ceiling.floor", function(v) return { ceiling = { floor = v } } end,
    function(p) return p.cp.ceiling_floor end },
  { "breaker.window", function(v) return { breaker = { consecutive = 5, window = v } } end, positive = true,
    min = 10e-9 },   -- a bucket (10 of them) covers at least 1 ns
  { "breaker.slow_call", function(v) return { breaker = { consecutive = 5, slow_ratio = 0.5, slow_call = v } } end,
    function(p) return p.cp.slow_threshold end, positive = true },
  { "breaker.break_for", function(v) return { breaker = { consecutive = 5, break_for = v, break_max = "1e9s" } } end,
    function(p) return p.cp.own.breaker.config.break_for end, positive = true },
  { "breaker.break_max", function(v) return { breaker = { consecutive = 5, break_for = 1e-12, break_max = v } } end,
    function(p) return p.cp.own.breaker.config.break_max end, positive = true },
  { "limiter.wait", function(v) return { limiter = { rate = 1, wait = v } } end,
    function(p) return p.cp.limit_wait end },
  { "limiter.queue_timeout", function(v) return { limiter = { concurrency = 1, queue = 1, queue_timeout = v } } end,
    function(p) return p.refs.bulkhead.config.queue_timeout end, positive = true },
  { "limiter.poll", function(v) return { limiter = { concurrency = 1, poll = v } } end,
    function(p) return p.refs.bulkhead.config.poll end, positive = true },
  { "limiter.adaptive.target", function(v) return { limiter = { concurrency = 1, adaptive = { target = v } } } end,
    function(p) return p.refs.bulkhead.config.latency_target end, positive = true },
  { "hedge.at", function(v) return { hedge = { at = v }, attempts = 2 } end,
    function(p) return p.cp.hedge.delay end, positive = true, what = "delay" },
  { "latency.period", function(v) return { latency = { period = v } } end, positive = true },
}

describe("durations", function()
  local values = {
    { "0", 0 }, { "1e-12", 1e-12 }, { "nan", 0 / 0 }, { "inf", math.huge }, { "-inf", -math.huge },
    { "2^63 ns", 9223372036.854775808 }, { "2^64 ns", 18446744073.709551616 },
    { "18446744074", 18446744074 }, { "1e300", 1e300 },
  }
  for _, f in ipairs(DURATIONS) do
    for _, val in ipairs(values) do
      local v = val[2]
      it(f[1] .. " = " .. val[1], function()
        local spec = f[2](v)
        spec.base = spec.base or "none"
        local ok, p = pcall(nres.policy, spec)
        local fine = v == v and v < math.huge and v * 1e9 < 2 ^ 63 and (v > 0 or (v == 0 and not f.positive))
                     and not (f.min and v < f.min)
        if fine then
          expect.truthy(ok, "accepted: " .. tostring(p))
          if f[3] then
            -- 0 stays 0; a positive duration below 1 ns is 1 ns, never 0 (= none).
            expect.eq(tonumber(f[3](p)), v == 0 and 0 or 1, "built as")
          end
        else
          expect.eq(ok, false, "refused")
          local msg = tostring(p):gsub("^[^\n]-:%d+: ", "")
          expect.truthy(msg:find("^nres.policy: " .. f[1]:gsub("%.", "%%.") .. ": expected "), msg)
          if v == v and v * 1e9 >= 2 ^ 63 and v ~= math.huge then
            expect.truthy(msg:find("below 9223372036.854775808 s (2^63 ns)", 1, true), msg)
          end
        end
      end)
    end
  end
  -- Units: every duration field takes a string with units, read as the
  -- same number of seconds; a bare number of 1000 or more is refused with
  -- the unit advice (the millisecond habit); junk strings name the field.
  for _, f in ipairs(DURATIONS) do
    it(f[1] .. ' = "250ms" is 0.25 s; "1m30s" is 90 s', function()
      for _, case in ipairs { { "250ms", 250e6 }, { "1m30s", 90e9 }, { "1.5s", 1.5e9 }, { "500us", 500e3 } } do
        local spec = f[2](case[1])
        spec.base = spec.base or "none"
        local p = nres.policy(spec)
        if f[3] then expect.eq(tonumber(f[3](p)), case[2], case[1]) end
      end
    end)
    it(f[1] .. " = 1500 (milliseconds by habit) is refused with its unit advice", function()
      local spec = f[2](1500)
      spec.base = spec.base or "none"
      local ok, err = pcall(nres.policy, spec)
      expect.eq(ok, false, "refused")
      expect.truthy(tostring(err):find(f[1] .. ': 1500 would be read as seconds (25 min); a bare number of 1000'
        .. ' or more needs its unit: write "1500ms" if you meant milliseconds, "1500s" if you meant 25 min', 1, true),
        tostring(err))
      spec = f[2]("1500s")             -- said with its unit: meant
      spec.base = spec.base or "none"
      expect.truthy(pcall(nres.policy, spec), "1500s accepted")
    end)
    it(f[1] .. ' = "25 min" (not a duration string) is refused naming the field', function()
      local spec = f[2]("25 min")
      spec.base = spec.base or "none"
      local ok, err = pcall(nres.policy, spec)
      expect.eq(ok, false, "refused")
      expect.truthy(tostring(err):find(f[1] .. ": expected ", 1, true), tostring(err))
      expect.truthy(tostring(err):find('a duration with a unit, like "250ms", "1.5s", "2m"'
        .. ' or "1m30s" (units: ns, us, ms, s, m, h)', 1, true), tostring(err))
    end)
  end
  it("the duration parser: units, sums, and what it refuses", function()
    local seconds = require("nres.schema").seconds
    for str, want in pairs { ["250ms"] = 0.25, ["1.5s"] = 1.5, ["2m"] = 120, ["500us"] = 5e-4,
                             ["5\194\181s"] = 5e-6, ["10ns"] = 1e-8, ["1h"] = 3600, ["1m30s"] = 90,
                             ["2e3ms"] = 2, [".5s"] = 0.5 } do
      expect.near(seconds(str), want, want * 1e-12, str)
    end
    for _, junk in ipairs { "1.5", "-1s", "1 s", "", "s", "3min", "1d", "ms", "1s2" } do
      expect.eq(seconds(junk), nil, junk)
    end
    -- The gateway's own durations (hold, keepalive) take units too.
    expect.eq(require("nres.ngx.config").seconds("scope", "hold", "2m", 60), 120)
  end)
  it("deadline = 1500 inside a preset's extension is caught too; 999 s is still seconds", function()
    local ok, err = pcall(nres.policy, { base = "gateway", deadline = 1500 })
    expect.eq(ok, false)
    expect.truthy(tostring(err):find("deadline: 1500 would be read as seconds", 1, true), tostring(err))
    expect.eq(tonumber(nres.policy({ deadline = 999, attempt_timeout = false }).cp.deadline), 999e9)
  end)
  it("a classify function's retry-after past 2^64 ns saturates (never wraps to a short wait)", function()
    for _, ra in ipairs { 18446744074, 9223372036.854775808, 1e300, math.huge } do
      local d = nres.driver.virtual()
      local p = nres.policy { base = "none", attempts = 2, deadline = 5,
        classify = function(_, err) if err then return "throttled", ra end return "ok" end }:with_driver(d)
      local n, t0 = 0, d.now()
      local res, reason = p:run(function() n = n + 1; if n == 1 then return nil, "busy" end return "yes" end)
      expect.eq(res, nil, tostring(ra)); expect.eq(reason, "deadline exceeded", tostring(ra))
      expect.eq(d.now(), t0, "no wait was made")
    end
  end)
  it("a classify function's retry-after of NaN or below 0 is junk: the call ends as a callback error, naming it", function()
    for _, ra in ipairs { 0 / 0, -1, -math.huge } do
      local p = nres.policy { base = "none", classify = function() return "throttled", ra end }
                  :with_driver(nres.driver.virtual())
      local _, reason, info = p:run(function() return 1 end)
      expect.eq(reason, "callback error")
      expect.truthy(info.error:find("^nres: classify returned retry_after "), info.error)
    end
  end)
  it("deadline = 18446744074 with attempt_timeout = 1 is refused by name, not by the runtime", function()
    expect.error(function() nres.policy { deadline = 18446744074, attempt_timeout = 1 } end,
      "nres.policy: deadline: expected a duration below 9223372036.854775808 s (2^63 ns) or false, got 18446744074")
  end)
end)

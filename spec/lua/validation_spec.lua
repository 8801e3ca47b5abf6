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
    "nres.policy: hedge.at: expected a latency quantile like \"p95\" or a fixed delay in seconds (> 0), got \"fast\"" },
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
    "nres.policy: base: unknown preset \"nope\" (no $PRESETS/nope.lua)" },
  { { base = 5 },
    "nres.policy: base: expected a preset name (string), got 5" },
  { { [1] = "x" },
    "nres.policy: [1]: unknown field (valid: admit, attempt_timeout, attempts, backoff, base, breaker, budget, ceiling, classify, deadline, fallback, hedge, latency, limiter, on_event, seed, telemetry)" },
  { "nosuchpreset",
    "nres.policy: unknown preset \"nosuchpreset\" (no $PRESETS/nosuchpreset.lua)" },
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

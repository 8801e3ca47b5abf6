-- SPDX-License-Identifier: MIT
-- nres.policy: declare a policy as a table, validate it, build it in C.
--
-- new(spec) resolves presets (policies/*.lua; `base` extends one, section
-- tables merge key by key, false turns a feature off), checks the merged
-- table against nres.schema (every problem at once, raised as one error
-- naming the caller's line), then fills an nres_policy_t through the FFI
-- and builds it. Shared state the policy points to (named budgets, rate
-- limiters, bulkheads) is referenced from the Lua object so the collector
-- keeps it alive as long as the policy.
local ffi = require "ffi"
local bit = require "bit"
local cdef = require "nres.cdef"
local schema = require "nres.schema"
local classify = require "nres.classify"
local driver = require "nres.driver"
local run = require "nres.run"

local C = cdef.C
local ffi_new, ffi_string = ffi.new, ffi.string
local type, pairs, error, setmetatable, getmetatable = type, pairs, error, setmetatable, getmetatable
local format, concat = string.format, table.concat

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

local BACKOFF = { none = 0, constant = 1, linear = 2, exponential = 3, decorrelated = 4 }
local JITTER = { none = 0, full = 1, equal = 2, decorrelated = 3 }

-- Seconds to ns through nres.schema's one conversion. Only checked values
-- get here: schema.check refused anything that is not a finite count of
-- ns below 2^63, so a "never" here is a gap in the schema, not a wrap.
local schema_ns, NS_LIMIT = schema.ns, schema.NS_LIMIT
local function ns(seconds)
  local n = schema_ns(seconds)
  if n == nil or n >= NS_LIMIT then
    error(format("nres.policy: the duration %s reached the builder unchecked: a gap in nres.schema, please report it",
                 schema.describe(seconds)), 0)
  end
  return n
end

-- --------------------------------------------------------------- presets

local presets_dir
do
  local env = os.getenv("NRES_POLICIES")
  local here = debug.getinfo(1, "S").source:match("^@(.*)/nres/policy%.lua$")
  local candidates = {}
  if env and env ~= "" then candidates[#candidates + 1] = env end
  if here then
    candidates[#candidates + 1] = here .. "/../policies"
    candidates[#candidates + 1] = here .. "/nres/policies"
  end
  for _, dir in ipairs(candidates) do
    local f = io.open(dir .. "/default.lua", "r")
    if f then f:close(); presets_dir = dir; break end
  end
  _M.presets_tried = candidates
  _M.presets_dir = presets_dir
end

local preset_cache = {}

-- The presets shipped in policies/ (spec/lua/layout_spec.lua checks the
-- list against the folder). A folder named by NRES_POLICIES may hold more.
local PRESETS = { "batch", "default", "gateway", "http", "none", "trivial" }
_M.presets = PRESETS

-- An unknown preset's message: the nearest name, if one is close, and the
-- presets there are - not the file that was looked for.
local function unknown_preset(name)
  local nearest = schema.nearest(name, PRESETS)
  return format('unknown preset "%s" (%spresets: %s%s)', name,
                nearest and format('did you mean "%s"? ', nearest) or "", concat(PRESETS, ", "),
                os.getenv("NRES_POLICIES") and ", and those in $NRES_POLICIES" or "")
end

-- A preset's table, loaded with an empty environment: presets are data.
local function load_preset(name)
  local cached = preset_cache[name]
  if cached then return cached end
  if type(name) ~= "string" or not name:match("^[%w_%-]+$") then
    return nil, format("expected a preset name, got %s", schema.describe(name))
  end
  if not presets_dir then
    return nil, "no policies/ folder found (tried " .. concat(_M.presets_tried, ", ")
                .. "); set NRES_POLICIES"
  end
  local path = presets_dir .. "/" .. name .. ".lua"
  local chunk, err = loadfile(path)
  if not chunk then
    local f = io.open(path, "r")
    if f == nil then return nil, unknown_preset(name) end
    f:close()
    return nil, err
  end
  setfenv(chunk, {})
  local ok, t = pcall(chunk)
  if not ok or type(t) ~= "table" then
    return nil, format("preset %s did not return a table (%s)", path, tostring(t))
  end
  preset_cache[name] = t
  return t
end
_M.load_preset = load_preset

local function merge(parent, child)
  local out = {}
  for k, v in pairs(parent) do out[k] = v end
  for k, v in pairs(child) do
    if k ~= "base" then
      local p = out[k]
      if schema.sections[k] and type(v) == "table" and type(p) == "table" then
        local m = {}
        for pk, pv in pairs(p) do m[pk] = pv end
        for ck, cv in pairs(v) do m[ck] = cv end
        -- A break_for raised past the inherited break_max takes it along,
        -- as break_max follows break_for when nothing sets it: the presets
        -- probe every 0.55 s (break_max = break_for), and a spec that asks
        -- for longer breaks means them.
        if k == "breaker" and v.break_for ~= nil and v.break_max == nil and
           type(m.break_for) == "number" and type(m.break_max) == "number" and
           m.break_max < m.break_for then
          m.break_max = m.break_for
        end
        out[k] = m
      else
        out[k] = v
      end
    end
  end
  return out
end

-- The merged table: the spec on top of its base chain ("default" unless
-- the spec says base = ...). A preset name alone is that preset.
local function resolve(spec, depth)
  depth = depth or 0
  if depth > 8 then return nil, "presets extend each other in a loop" end
  if type(spec) == "string" then
    local t, err = load_preset(spec)
    if not t then return nil, err end
    spec = t
  end
  if type(spec) ~= "table" then
    return nil, "expected a policy table or a preset name, got " .. schema.describe(spec)
  end
  local plain = schema.plain(spec)
  if #plain > 0 then return nil, concat(plain, "; ") end
  local base = spec.base
  if base == nil and spec ~= preset_cache.default then base = "default" end
  if spec == preset_cache.none then base = nil end
  -- Durations with units ("250ms") as seconds, before merging compares them.
  local problems
  spec, problems = schema.normalize(spec)
  if not spec then return nil, concat(problems, "; ") end
  if base == nil then return merge({}, spec) end
  if type(base) ~= "string" then
    return nil, "base: expected a preset name (string), got " .. schema.describe(base)
  end
  local parent, err = resolve(base, depth + 1)
  if not parent then return nil, "base: " .. err end
  return merge(parent, spec)
end
_M.resolve = resolve

-- ---------------------------------------------------------- named budgets

local budgets = {}

-- The budget named `name`, made with `cfg` (or the defaults) the first
-- time it is named.
local function named_budget(name, cfg)
  local b = budgets[name]
  if b then return b end
  cfg = cfg or {}
  b = ffi_new("nres_budget_t")
  local rc = C.nres_budget_init(b, cfg.ratio or 0.1, cfg.min_per_sec or 3, cfg.capacity or 0)
  if rc ~= 0 then return nil, ffi_string(C.nres_strerror(rc)) end
  budgets[name] = b
  return b
end
_M.named_budget = named_budget

-- ------------------------------------------------------------------ build

local function build(t)
  local refs = {}
  local cp = ffi_new("nres_policy_t")
  C.nres_policy_init(cp, 0)
  cp.attempts = t.attempts or 1
  cp.telemetry = t.telemetry == false and 0 or 1
  if t.seed then cp.seed = t.seed end

  local b = t.backoff
  C.nres_backoff_init(cp.backoff)
  if type(b) == "table" then
    cp.backoff.kind = BACKOFF[b.kind or "exponential"]
    cp.backoff.jitter = JITTER[b.jitter or (b.kind == "decorrelated" and "none" or "full")]
    if b.base then cp.backoff.base = ns(b.base) end
    if b.factor then cp.backoff.factor = b.factor end
    if b.max then cp.backoff.max = ns(b.max) end
    if b.throttled_base then cp.backoff.throttled_base = ns(b.throttled_base) end
  else
    cp.backoff.kind = BACKOFF.none
  end

  cp.deadline = t.deadline and ns(t.deadline) or 0
  cp.attempt_timeout = t.attempt_timeout and ns(t.attempt_timeout) or 0

  local br, h, c = t.breaker, t.hedge, t.ceiling
  local wants_latency = type(c) == "table"
      or (type(h) == "table" and type(h.at) == "string")
      or (type(br) == "table" and br.slow_ratio and not br.slow_call)
      or type(t.latency) == "table"
      or (type(t.throttle) == "table" and (t.throttle.fast_failure or 0) > 0)
  if wants_latency and t.latency ~= false then
    if type(t.latency) == "table" and t.latency.period then
      C.nres_estimator_init(cp.own.estimator, ns(t.latency.period))
    end
    cp.estimator = cp.own.estimator
  end

  if type(c) == "table" then
    cp.ceiling_factor = c.factor or 3
    cp.ceiling_quantile = c.quantile or 0.95
    cp.ceiling_floor = ns(c.floor or 0.05)
    cp.min_samples = c.min_samples or 20
  end

  local bu = t.budget
  if type(bu) == "string" then
    cp.budget = named_budget(bu)
    refs.budget = cp.budget
  elseif type(bu) == "table" then
    local rc = C.nres_budget_init(cp.own.budget, bu.ratio or 0.1, bu.min_per_sec or 3,
                                  bu.capacity or 0)
    if rc ~= 0 then return nil, "budget: " .. ffi_string(C.nres_strerror(rc)) end
    cp.budget = cp.own.budget
  end

  if type(br) == "table" then
    local cfg = ffi_new("nres_breaker_config_t")
    C.nres_breaker_config_init(cfg)
    cfg.consecutive = br.consecutive or 0
    cfg.failure_ratio = br.ratio or 0
    cfg.slow_ratio = br.slow_ratio or 0
    if br.window then cfg.window = ns(br.window) end
    if br.buckets then cfg.buckets = br.buckets end
    if br.min_calls then cfg.min_calls = br.min_calls end
    if br.break_for then cfg.break_for = ns(br.break_for) end
    if br.break_max then cfg.break_max = ns(br.break_max)
    elseif br.break_for and ns(br.break_for) > cfg.break_max then cfg.break_max = ns(br.break_for) end
    if br.jitter then cfg.break_jitter = br.jitter end
    if br.probes then cfg.probes = br.probes end
    if br.successes then cfg.success_threshold = br.successes end
    -- A probe's lease (docs/leases.md): as set, else the attempt timeout
    -- and a second's margin, never more than break_for (C's 0).
    if br.lease then cfg.lease = ns(br.lease)
    elseif cp.attempt_timeout > 0 then
      local lease = cp.attempt_timeout + 1e9
      if lease < cfg.break_for then cfg.lease = lease end
    end
    local rc = C.nres_breaker_init(cp.own.breaker, cfg)
    if rc ~= 0 then return nil, "breaker: " .. ffi_string(C.nres_strerror(rc)) end
    cp.breaker = cp.own.breaker
    if br.slow_call then cp.slow_threshold = ns(br.slow_call) end
  end

  local th = t.throttle
  if type(th) == "table" then
    local rc = C.nres_throttle_init(cp.own.throttle, th.k or 1.1, ns(th.window or 2), th.buckets or 8)
    if rc ~= 0 then return nil, "throttle: " .. ffi_string(C.nres_strerror(rc)) end
    cp.own.throttle.fast_failure = th.fast_failure or 0
    cp.throttle = cp.own.throttle
    cp.throttle_fail = th.wait == false and 1 or 0
  end

  local l = t.limiter
  if type(l) == "table" then
    if l.rate then
      local rl = ffi_new("nres_ratelimit_t")
      local rc = C.nres_ratelimit_init(rl, l.rate, l.burst or 1)
      if rc ~= 0 then return nil, "limiter: " .. ffi_string(C.nres_strerror(rc)) end
      cp.ratelimit = rl
      cp.limit_wait = ns(l.wait or 0)
      refs.ratelimit = rl
    end
    if l.concurrency then
      local cfg = ffi_new("nres_bulkhead_config_t")
      C.nres_bulkhead_config_init(cfg)
      cfg.limit = l.concurrency
      cfg.queue = l.queue or 0
      if l.queue_timeout then cfg.queue_timeout = ns(l.queue_timeout) end
      if l.poll then cfg.poll = ns(l.poll) end
      local a = l.adaptive
      if type(a) == "table" and a.kind == "gradient" then
        cfg.adaptive = 2
        cfg.min_limit = a.min or 1
        cfg.max_limit = a.max or 1000
        if a.tolerance then cfg.tolerance = a.tolerance end
        if a.smoothing then cfg.smoothing = a.smoothing end
        if a.long_window then cfg.long_window = a.long_window end
        if a.headroom then cfg.headroom = a.headroom end
      elseif type(a) == "table" then
        cfg.adaptive = 1
        cfg.min_limit = a.min or 1
        cfg.max_limit = a.max or 1000
        cfg.latency_target = ns(a.target)
        cfg.decrease = a.decrease or 0.9
      end
      cfg.reserve = l.reserve or 0
      local bh = ffi_new("nres_bulkhead_t")
      local rc = C.nres_bulkhead_init(bh, cfg)
      if rc ~= 0 then return nil, "limiter: " .. ffi_string(C.nres_strerror(rc)) end
      cp.bulkhead = bh
      refs.bulkhead = bh
    end
  end

  if type(h) == "table" then
    cp.hedge.max = h.max or 2
    if type(h.at) == "string" then
      cp.hedge.quantile = tonumber(h.at:sub(2)) / 100
      cp.hedge.delay = 0
    else
      cp.hedge.delay = ns(h.at)
    end
    if h.min_samples then cp.hedge.min_samples = h.min_samples end
    if h.suppress then cp.hedge.suppress_ratio = h.suppress end
  end

  cp.fallback = t.fallback and 1 or 0
  local rc = C.nres_policy_build(cp)
  if rc ~= 0 then
    return nil, "the runtime refused the checked policy (" .. ffi_string(C.nres_err_name(rc))
                .. "): a gap in nres.schema, please report it"
  end
  return cp, refs
end

-- ---------------------------------------------------------------- objects

local function fail(problems)
  if #problems == 1 then return "nres.policy: " .. problems[1] end
  return format("nres.policy: %d problems:\n  %s", #problems, concat(problems, "\n  "))
end

-- A policy from a table or a preset name. Misuse raises error(msg, level).
function _M.new(spec, level)
  level = (level or 1) + 1
  local t, err = resolve(spec)
  if not t then error("nres.policy: " .. err, level) end
  local problems = schema.check(t)
  if #problems > 0 then error(fail(problems), level) end
  local cp, refs = build(t)
  if not cp then error("nres.policy: " .. refs, level) end
  return setmetatable({
    cp = cp,
    refs = refs,            -- keeps shared state alive with the policy
    spec = t,
    classify = classify.compile(t.classify),
    -- false, not nil, when absent: p:run reads them on every call, and a
    -- missing key would also be looked up in the metatable's __index.
    fallback = t.fallback or false,
    admit = t.admit or false,
    on_event = t.on_event or false,
    driver = driver.default(),
    -- Built as a passthrough (flag 1) and nothing Lua-side to run either.
    passthrough = bit.band(cp.private_flags, 1) ~= 0 and not t.admit and not t.on_event,
    -- No decision on time (NRES__F_TIMELESS): p:run reads no clock.
    timeless = bit.band(cp.private_flags, 128) ~= 0,
    -- Attempts side by side: p:run needs a driver that can (nres.run).
    hedged = cp.hedge.max > 1,
    -- The criticality of its calls (nres_class_t): default; p:with changes it.
    class = 1,
  }, mt)
end

_M.run = run.run

-- The same policy on another driver (a virtual clock, nginx...).
function _M.with_driver(self, d)
  local ok, err = driver.check(d)
  if not ok then error("bad argument #1 to 'with_driver' (" .. err .. ")", 2) end
  local copy = setmetatable({}, mt)
  for k, v in pairs(self) do copy[k] = v end
  copy.driver = d
  copy.variants = nil
  return copy
end

-- Criticality classes, as nres_class_t.
local CLASSES = { critical = 0, default = 1, sheddable = 2 }
_M.classes = CLASSES
local class_parse = C.nres_class_parse

-- The same policy for calls of another criticality:
-- p:with{ criticality = "critical" | "default" | "sheddable" }, or any
-- name X-Criticality takes (critical_plus, sheddable_plus, any case: the
-- gateways' one parser, nres_class_parse). Under
-- overload the limiters and the budget refuse sheddable calls first and
-- keep headroom for critical ones (limiter.reserve for the concurrency
-- limit and its queue; a sheddable call takes at most half the rate
-- limiter's burst and retries or hedges only while the budget is at least
-- half full). The copy shares everything else (state, counters, driver)
-- and is made once per class and policy object: calling p:with per
-- request costs only the argument table, and p:run on the copy stays
-- garbage-free.
function _M.with(self, opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'with' (a table { criticality = ... } expected, got "
          .. schema.describe(opts) .. ")", 2)
  end
  for k in pairs(opts) do
    if k ~= "criticality" then
      error("bad argument #1 to 'with' (" .. tostring(k) .. ": unknown field; valid: criticality)", 2)
    end
  end
  local name = opts.criticality
  local cls = type(name) == "string" and class_parse(name, #name) or -1
  if cls < 0 then
    error('bad argument #1 to \'with\' (criticality: expected one of "critical", "critical_plus",'
          .. ' "default", "sheddable", "sheddable_plus" (any case; the names of X-Criticality),'
          .. ' got ' .. schema.describe(name) .. ")", 2)
  end
  if cls == self.class then return self end
  local variants = self.variants
  if variants == nil then
    variants = {}
    self.variants = variants
  end
  local copy = variants[cls]
  if copy == nil then
    copy = setmetatable({}, mt)
    for k, v in pairs(self) do copy[k] = v end
    copy.class = cls
    copy.variants = nil
    variants[cls] = copy
  end
  return copy
end

-- The same policy over C state that lives elsewhere: `cp`, an
-- nres_policy_t * (cdata, or its address as a number) built from the same
-- spec - by another Lua state of this process (one per OS thread), or by
-- C. Calls through the copy share that state (budget, breaker, estimator,
-- limiter, counters) with every other user of it. Nothing here owns it:
-- its owner keeps it alive as long as the copy is used.
function _M.on_state(self, cp)
  if type(cp) == "number" then cp = ffi.cast("nres_policy_t *", cp) end
  if not ffi.istype("nres_policy_t *", cp) or cp == nil then
    error("bad argument #1 to 'on_state' (nres_policy_t * or its address expected, got "
          .. schema.describe(cp) .. ")", 2)
  end
  local copy = setmetatable({}, mt)
  for k, v in pairs(self) do copy[k] = v end
  copy.cp, copy.refs, copy.variants = cp, {}, nil
  copy.passthrough = bit.band(cp.private_flags, 1) ~= 0 and not self.admit and not self.on_event
  copy.timeless = bit.band(cp.private_flags, 128) ~= 0
  return copy
end

local counters = ffi_new("nres_counters_t")
local bstats = ffi_new("nres_bulkhead_stats_t")
local brstats = ffi_new("nres_breaker_stats_t")
local stop_names = run.reasons
local verdict_names = classify.names
local reject_names = { [0] = "breaker", "budget", "rate", "concurrency", "draining", "throttle" }
local tstats = ffi_new("nres_throttle_stats_t")

-- The policy's counters as a table.
function _M.stats(self)
  C.nres_policy_counters(self.cp, counters)
  local s = {
    calls = tonumber(counters.calls), attempts = tonumber(counters.attempts),
    retries = tonumber(counters.retries), hedges = tonumber(counters.hedges),
    abandoned = tonumber(counters.abandoned), fallbacks = tonumber(counters.fallbacks),
    late = tonumber(counters.late), verdicts = {}, stops = {}, rejects = {},
  }
  -- Hedges sent (hedges), won (the call's answer came from a hedge) and
  -- canceled (losers abandoned unclassified: the same as abandoned);
  -- calls refused (any source) by criticality.
  s.hedges_won = tonumber(counters.hedges_won)
  -- An operator's hand on the breaker: p:isolate() and p:reset() calls.
  s.isolations, s.resets = tonumber(counters.isolations), tonumber(counters.resets)
  s.hedges_canceled = s.abandoned
  s.refused_by_class = { critical = tonumber(counters.class_rejects[0]),
                         default = tonumber(counters.class_rejects[1]),
                         sheddable = tonumber(counters.class_rejects[2]) }
  for i = 0, 4 do s.verdicts[verdict_names[i]] = tonumber(counters.verdicts[i]) end
  for i = 1, #stop_names do s.stops[stop_names[i]] = tonumber(counters.stops[i]) end
  for i = 0, 5 do s.rejects[reject_names[i]] = tonumber(counters.rejects[i]) end
  local cp, now = self.cp, self.driver.now()   -- state lives on the driver's clock
  if cp.budget ~= nil then
    s.budget = C.nres_budget_level(cp.budget, now)
  end
  -- Permits given back by their lease, not their holder (docs/leases.md).
  s.leases_expired = 0
  if cp.breaker ~= nil then
    s.breaker = ffi_string(C.nres_breaker_state_name(C.nres_breaker_state(cp.breaker, now)))
    C.nres_breaker_stats(cp.breaker, brstats)
    s.leases_expired = s.leases_expired + tonumber(brstats.leases_expired)
  end
  if cp.throttle ~= nil then
    -- The throttle's window now (requests and accepts), the refusal
    -- probability they give, and the attempts it refused locally.
    C.nres_throttle_stats(cp.throttle, now, tstats)
    s.throttle = { requests = tstats.requests, accepts = tstats.accepts,
                   probability = tstats.probability, refused = tonumber(tstats.refused) }
  end
  if cp.bulkhead ~= nil then
    C.nres_bulkhead_stats(cp.bulkhead, bstats)
    s.leases_expired = s.leases_expired + tonumber(bstats.leases_expired)
    s.limiter = {
      limit = tonumber(bstats.limit_fp) / 65536, inflight = bstats.inflight,
      waiting = bstats.waiting, refused = tonumber(bstats.refused),
      refused_by_class = { critical = tonumber(bstats.refused_class[0]),
                           default = tonumber(bstats.refused_class[1]),
                           sheddable = tonumber(bstats.refused_class[2]) },
    }
    if cp.bulkhead.config.adaptive == 2 then
      s.limiter.recent_ms = bstats.recent / 1e6
      s.limiter.baseline_ms = bstats.baseline / 1e6
    end
  end
  -- A policy synced with a fleet (nres.sync's agent:add) says so: per
  -- entry whether it follows the fleet now, and the fleet's figures.
  if self.fleet_stats then s.fleet = self.fleet_stats() end
  -- What a candidate in its shadow would have done (p:shadow).
  local candidate = self.refs.shadow
  if candidate and self.cp.shadow == candidate.cp then s.shadow = candidate:stats() end
  return s
end

function _M.reset_stats(self)
  C.nres_policy_counters_reset(self.cp)
end
function _M.drain(self, on) C.nres_policy_drain(self.cp, on == false and 0 or 1) end

-- p:shadow(candidate): run `candidate` (another nres.policy) in this
-- policy's shadow: at each attempt of p's calls it is asked what it would
-- have done (its own limiters and breaker admit or refuse, p's outcomes
-- feed its own state, its attempts, backoff, deadline and budget decide
-- whether it would retry) and counts it, acting on nothing; its counters
-- are p:stats().shadow (exec/shadow.c). p:shadow(nil) detaches it. The
-- candidate must be another policy without a shadow of its own, and run
-- no calls itself; attach before p takes calls. Outcomes reach it as p's
-- classifier judged them. Returns p.
function _M.shadow(self, candidate)
  local ccp
  if candidate ~= nil then
    if getmetatable(candidate) ~= mt then
      error("bad argument #1 to 'shadow' (a policy from nres.policy expected, got "
            .. schema.describe(candidate) .. ")", 2)
    end
    ccp = candidate.cp
    if ccp == self.cp then
      error("bad argument #1 to 'shadow' (expected another policy, got the policy itself)", 2)
    end
    if ccp.shadow ~= nil then
      error("bad argument #1 to 'shadow' (expected a policy without a shadow, got one with"
            .. " its own: a candidate's candidate would never be asked)", 2)
    end
  end
  if C.nres_policy_shadow(self.cp, ccp) ~= 0 then
    error("nres: p:shadow(): nres_policy_shadow refused the candidate", 2)
  end
  self.refs.shadow = candidate or nil   -- kept alive with the policy
  local flags = self.cp.private_flags
  self.passthrough = bit.band(flags, 1) ~= 0 and not self.admit and not self.on_event
  self.timeless = bit.band(flags, 128) ~= 0
  if self.variants then
    for _, v in pairs(self.variants) do
      v.passthrough, v.timeless = self.passthrough, self.timeless
    end
  end
  return self
end

-- An operator's hand on the breaker, shared by every user of the policy's
-- state: p:isolate() opens it until p:reset() (every call stops "circuit
-- open" meanwhile); p:reset() closes it from any state, its window
-- emptied. Each is counted in p:stats() (isolations, resets). A policy
-- without a breaker has nothing to isolate: an error naming it.
local function hand(self, on, name)
  if C.nres_policy_isolate(self.cp, on) ~= 0 then
    error(format("nres: p:%s(): this policy has no breaker (breaker = false); give it one to"
                 .. " isolate its dependency", name), 3)
  end
end
function _M.isolate(self) hand(self, 1, "isolate") end
function _M.reset(self) hand(self, 0, "reset") end

return _M

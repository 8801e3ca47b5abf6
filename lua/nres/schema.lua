-- SPDX-License-Identifier: MIT
-- nres.schema: what a policy table may say, and every way it can be wrong.
--
-- check(t) walks a policy table against the schema below and returns the
-- list of problems, each naming the field path, what was expected and what
-- was given ("backoff.base: expected a duration in seconds (finite number
-- >= 0), got -1"), all at once. Unknown keys get the nearest valid name.
-- The schema is also the documentation: every field has its unit, default
-- (in policies/default.lua) and meaning in docs/ and README.md.
--
-- Durations: every duration of a policy is a number of seconds or a
-- string with units ("250ms", "1.5s", "2m", "1m30s"; units ns, us (or
-- µs), ms, s, m, h), read by one parser, seconds() below, and converted to
-- the C core's nanoseconds by one function, ns() below. normalize(spec)
-- turns the strings of a policy table into seconds before anything else
-- reads it, and refuses the millisecond habit: a bare number of 1000 or
-- more (1000 s is 16.7 min: "deadline = 1500" meant 1.5 s far more often
-- than 25 min) must say its unit ("1500ms", "1500s", "25m"). A declared duration must
-- be finite, >= 0 (or > 0 where zero means nothing) and below 2^63 ns
-- (9223372036.854775808 s): NaN, +-inf and anything longer are refused with
-- the field named ("expected a duration below ... (2^63 ns)"; where false
-- turns a feature off, false is the way to say "none"). A
-- positive duration shorter than 1 ns counts as 1 ns, never as 0 (0 means
-- "none" for a deadline). Durations that arrive at run time (a classify
-- function's retry-after) cannot be refused: ns() saturates them to never.
-- Tables with a metatable are refused wherever a policy reads a table:
-- fields supplied through __index would be read by the builder unchecked.
local _M = { _VERSION = "0.1.0" }

local type, pairs, ipairs, tostring, format = type, pairs, ipairs, tostring, string.format
local getmetatable, pcall, find = getmetatable, pcall, string.find
local huge, floor = math.huge, math.floor
local sort, concat = table.sort, table.concat

-- How a value reads in a message.
local function describe(v)
  local t = type(v)
  if t == "number" then
    if v ~= v then return "nan" end
    if v == huge then return "inf" end
    if v == -huge then return "-inf" end
    return format("%.14g", v)
  elseif t == "string" then
    return format("%q", v)
  elseif t == "nil" or t == "boolean" then
    return tostring(v)
  end
  return "a " .. t
end
_M.describe = describe

local function finite(v) return type(v) == "number" and v == v and v > -huge and v < huge end

-- Nanoseconds from 2^63 on are not durations: the C core keeps time in
-- uint64 ns, adds durations to "now" and subtracts them.
local NS_LIMIT = 2 ^ 63
local LIMIT_TEXT = "9223372036.854775808 s (2^63 ns)"
_M.NS_LIMIT = NS_LIMIT

-- The one conversion from seconds to nanoseconds (a Lua number, exact up
-- to 2^53): NaN gives nil (the caller refuses it), <= 0 and -inf give 0,
-- a positive duration below 1 ns gives 1, and 2^63 ns or more (+inf
-- included) gives math.huge, "never" (the step API saturates it to
-- NRES_TIME_NEVER).
local function ns(seconds)
  if seconds ~= seconds then return nil end
  if seconds <= 0 then return 0 end
  local n = floor(seconds * 1e9 + 0.5)
  if n >= NS_LIMIT then return huge end
  if n < 1 then return 1 end
  return n
end
_M.ns = ns

-- Seconds in a duration string: one or more <number><unit> parts, summed
-- ("1m30s"), the number plain or with a fraction or an exponent ("1.5s",
-- "2e3ms"). nil for anything else (no sign, no unit, an unknown unit).
local UNITS = { ns = 1e-9, us = 1e-6, ["\194\181s"] = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600 }
local sfind, ssub, tonumber = string.find, string.sub, tonumber
local function seconds(s)
  if type(s) ~= "string" then return nil end
  local pos, len, total = 1, #s, 0
  if len == 0 then return nil end
  while pos <= len do
    local _, e = sfind(s, "^%d*%.?%d*", pos)
    local _, ee = sfind(s, "^[eE][+-]?%d+", e + 1)
    local n = tonumber(ssub(s, pos, ee or e))
    local _, ue = sfind(s, "^%a+", (ee or e) + 1)
    if not ue then _, ue = sfind(s, "^\194\181s", (ee or e) + 1) end
    local unit = ue and UNITS[ssub(s, (ee or e) + 1, ue)]
    if n == nil or unit == nil then return nil end
    total = total + n * unit
    pos = ue + 1
  end
  return total
end
_M.seconds = seconds
local UNIT_TEXT = 'a duration with a unit, like "250ms", "1.5s", "2m" or "1m30s" (units: ns, us, ms, s, m, h)'
_M.UNIT_TEXT = UNIT_TEXT

-- A bare number of seconds from here on must be written with its unit.
local BARE_MAX = 1000
_M.BARE_MAX = BARE_MAX

-- Value checkers: return nil when fine, else what was expected.
local function number(lo, lo_open, hi, hi_open, what)
  return function(v)
    if finite(v) and (lo == nil or v > lo or (not lo_open and v == lo))
       and (hi == nil or v < hi or (not hi_open and v == hi)) then
      return nil
    end
    return what
  end
end

local function integer(lo, hi)
  local what = hi and format("an integer from %d to %d", lo, hi)
               or format("an integer >= %d", lo)
  return function(v)
    if finite(v) and v == floor(v) and v >= lo and (hi == nil or v <= hi) then
      return nil
    end
    return what
  end
end

-- Checkers of durations (seconds, or a string with units: normalize and
-- the builder read both); `durations[check]` marks them for normalize.
local durations = {}

-- A duration: finite, >= 0 (> 0 when `positive`), and below 2^63 ns.
local function duration_check(positive)
  local what = positive and "a duration in seconds (finite number > 0)"
               or "a duration in seconds (finite number >= 0)"
  local check = function(v)
    if type(v) == "string" then
      v = seconds(v)
      if v == nil then return UNIT_TEXT end
    end
    if not finite(v) or v < 0 or (positive and v == 0) then return what end
    if ns(v) == huge then return "a duration below " .. LIMIT_TEXT end
    return nil
  end
  durations[check] = true
  return check
end
local duration = duration_check(false)
local positive_duration = duration_check(true)

-- A rate per second whose interval (1/rate) is a duration: the GCRA keeps
-- the interval in ns, so a slower rate cannot be represented (the C core
-- would saturate it and refuse every call, the first included).
local MIN_RATE = 1e9 / NS_LIMIT
local function rate(v)
  if not finite(v) or v <= 0 then return "a finite number > 0" end
  if 1e9 / v >= NS_LIMIT then
    return format("a rate of at least %.17g per second (one per %s)", MIN_RATE, LIMIT_TEXT)
  end
  return nil
end
_M.rate = rate   -- for the other faces that take a rate (nres.shm, nres.ngx)
local ratio = number(0, true, 1, false, "a ratio in (0, 1]")
local fraction = number(0, false, 1, true, "a fraction in [0, 1)")
local open_fraction = number(0, true, 1, true, "a fraction in (0, 1)")
local non_negative = number(0, false, nil, false, "a finite number >= 0")
local positive = number(0, true, nil, false, "a finite number > 0")

-- A checker that also accepts false (the feature turned off).
local function optional(check)
  local opt = function(v)
    if v == false then return nil end
    local what = check(v)
    return what and what .. " or false"
  end
  durations[opt] = durations[check]
  return opt
end

local function enum(values)
  local set, quoted = {}, {}
  for i, v in ipairs(values) do set[v] = true; quoted[i] = format("%q", v) end
  local what = "one of " .. concat(quoted, ", ")
  return function(v) if set[v] then return nil end return what end
end

local function kind_of(t, what)
  return function(v) if type(v) == t then return nil end return what end
end

local verdict = enum { "ok", "transient", "throttled", "permanent", "canceled" }

-- A section: a table of fields, or false to turn it off, or (for some) a
-- string naming shared state or a built-in.
local function section(fields, opts)
  opts = opts or {}
  return { fields = fields, off = opts.off ~= false, name = opts.name,
           what = opts.what }
end

local quantile_name = function(v)
  if type(v) == "string" and v:sub(1, 1) ~= "p" then
    v = seconds(v)
    if v == nil then return 'a latency quantile like "p95" or ' .. UNIT_TEXT end
  end
  if type(v) == "string" then
    local q = v:match("^p(%d+%.?%d*)$")
    q = tonumber(q)
    if q and q > 0 and q < 100 then return nil end
  elseif finite(v) and v > 0 then
    if ns(v) == huge then return "a delay below " .. LIMIT_TEXT end
    return nil
  end
  return 'a latency quantile like "p95" or a fixed delay in seconds (> 0)'
end
durations[quantile_name] = true

_M.policy = {
  base = kind_of("string", "a preset name (string)"),
  attempts = integer(1, 65535),
  backoff = section({
    kind = enum { "none", "constant", "linear", "exponential", "decorrelated" },
    base = duration,
    factor = number(1, false, nil, false, "a finite number >= 1"),
    max = duration,
    jitter = enum { "none", "full", "equal", "decorrelated" },
    throttled_base = duration,
  }, { name = { none = true }, what = 'a table, "none" or false' }),
  deadline = optional(positive_duration),
  attempt_timeout = optional(positive_duration),
  ceiling = section {
    factor = positive,
    quantile = ratio,
    floor = duration,
    min_samples = integer(1),
  },
  budget = section({
    ratio = ratio,
    min_per_sec = non_negative,
    capacity = positive,
  }, { name = "string", what = "a table, a budget name (string) or false" }),
  breaker = section {
    consecutive = optional(integer(1)),
    ratio = optional(ratio),
    window = positive_duration,
    buckets = integer(1, 16),
    min_calls = integer(1),
    slow_ratio = optional(ratio),
    slow_call = positive_duration,
    break_for = positive_duration,
    break_max = positive_duration,
    jitter = fraction,
    probes = integer(1, 255),
    successes = integer(1, 255),
    lease = positive_duration,
  },
  throttle = section {
    k = number(1, false, 1000, false, "a finite number from 1 to 1000"),
    window = positive_duration,
    buckets = integer(1, 16),
    fast_failure = fraction,
    wait = kind_of("boolean", "a boolean"),
  },
  limiter = section {
    rate = rate,
    burst = integer(1, 4294967295),
    wait = duration,
    concurrency = integer(1, 4294967295),
    queue = integer(0, 4294967295),
    queue_timeout = positive_duration,
    poll = positive_duration,
    adaptive = section {
      kind = enum { "aimd", "gradient" },
      min = integer(1, 4294967295),
      max = integer(1, 4294967295),
      target = positive_duration,
      decrease = open_fraction,
      tolerance = number(1, false, 1e6, true, "a finite number >= 1"),
      smoothing = ratio,
      long_window = integer(1, 4294967295),
      headroom = integer(0, 1000000),
    },
    reserve = fraction,
  },
  hedge = section {
    at = quantile_name,
    max = integer(2, 4),
    min_samples = integer(1),
    suppress = ratio,
  },
  latency = section {
    period = positive_duration,
  },
  classify = "classify",
  fallback = optional(kind_of("function", "a function")),
  admit = optional(kind_of("function", "a function")),
  on_event = optional(kind_of("function", "a function")),
  telemetry = kind_of("boolean", "a boolean"),
  seed = integer(0, 9007199254740991),
}

local classify_table = {
  status = "map", errors = "map", patterns = "map", default = verdict,
}

-- Nearest valid name, for "did you mean".
local function distance(a, b)
  local la, lb = #a, #b
  if math.abs(la - lb) > 2 then return 3 end
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    for j = 1, lb do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end

-- The name of the list `names` nearest to key (edit distance at most 2;
-- the first in alphabetical order on a tie), or nil.
local function nearest(key, names)
  local best, best_d = nil, 3
  for _, name in ipairs(names) do
    local d = distance(key, name)
    if d < best_d or (d == best_d and best and name < best) then best, best_d = name, d end
  end
  return best
end
_M.nearest = nearest

-- "did you mean" for key among the keys of `fields`, or the valid names.
function _M.hint(key, fields)
  local names = {}
  for name in pairs(fields) do names[#names + 1] = name end
  sort(names)
  local best = nearest(key, names)
  return best and format('did you mean "%s"?', best) or "valid: " .. concat(names, ", ")
end

local function unknown(problems, path, key, fields)
  problems[#problems + 1] = format("%s: unknown field (%s)", path, _M.hint(key, fields))
end

-- A table read by the builder must be plain: with a metatable, a field
-- missing from the table could still be read through __index, unchecked.
local function has_metatable(problems, path, v)
  if getmetatable(v) == nil then return false end
  problems[#problems + 1] = format(
    "%s: expected a plain table, got a table with a metatable (fields read through __index would not be checked)",
    path == "" and "policy" or path)
  return true
end
_M.has_metatable = has_metatable

local function join(prefix, key)
  if type(key) ~= "string" then return prefix .. "[" .. describe(key) .. "]" end
  return prefix == "" and key or prefix .. "." .. key
end

local check_fields

local function check_value(problems, path, spec, v)
  if type(spec) == "function" then
    local what = spec(v)
    if what then
      problems[#problems + 1] = format("%s: expected %s, got %s", path, what, describe(v))
    end
  elseif spec == "classify" then
    local t = type(v)
    if t == "function" then return end
    if t == "string" then
      if v ~= "default" and v ~= "http" then
        problems[#problems + 1] = format(
          '%s: expected "default", "http", a function or a table, got %s', path, describe(v))
      end
      return
    end
    if t ~= "table" then
      problems[#problems + 1] = format(
        '%s: expected "default", "http", a function or a table, got %s', path, describe(v))
      return
    end
    if has_metatable(problems, path, v) then return end
    for k, sub in pairs(v) do
      local s = classify_table[k]
      local p = join(path, k)
      if s == nil then
        unknown(problems, p, tostring(k), classify_table)
      elseif s == "map" then
        if type(sub) ~= "table" then
          problems[#problems + 1] = format("%s: expected a table of verdicts, got %s", p, describe(sub))
        elseif not has_metatable(problems, p, sub) then
          for code, verdict_name in pairs(sub) do
            local what = verdict(verdict_name)
            if what then
              problems[#problems + 1] = format("%s: expected %s, got %s",
                join(p, code), what, describe(verdict_name))
            end
            if k == "patterns" then
              -- A malformed pattern would raise inside every call it meets.
              local fine, err = pcall(find, "", code)
              if type(code) ~= "string" then
                problems[#problems + 1] = format("%s: expected a Lua pattern (string) as key, got %s",
                  join(p, code), describe(code))
              elseif not fine then
                problems[#problems + 1] = format("%s[%s]: expected a valid Lua pattern (%s)",
                  p, describe(code), (tostring(err):gsub("^[^:]*:%d+: ", "")))
              end
            end
          end
        end
      else
        check_value(problems, p, s, sub)
      end
    end
  else -- section
    if v == false and spec.off then return end
    if type(v) == "string" and spec.name then
      if spec.name == "string" or spec.name[v] then return end
    end
    if type(v) ~= "table" then
      problems[#problems + 1] = format("%s: expected %s, got %s", path,
        spec.what or "a table or false", describe(v))
      return
    end
    if has_metatable(problems, path, v) then return end
    check_fields(problems, path, spec.fields, v)
  end
end

check_fields = function(problems, prefix, fields, t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local spec = fields[k]
    local path = join(prefix, k)
    if spec == nil then
      unknown(problems, path, tostring(k), fields)
    else
      check_value(problems, path, spec, t[k])
    end
  end
end

local function secs(v) return format("%.14g s", v) end

-- Rules across fields, on the merged table (only where the fields
-- themselves were valid, so one mistake is reported once).
local function check_relations(problems, t)
  -- Valid durations only (a field already refused is not reported twice).
  local function ok(v) return duration(v) == nil end
  local function pos(v) return positive_duration(v) == nil end
  if pos(t.attempt_timeout) and pos(t.deadline) and t.attempt_timeout > t.deadline then
    problems[#problems + 1] = format("attempt_timeout: %s is longer than the deadline (%s)",
      secs(t.attempt_timeout), secs(t.deadline))
  end
  local b = t.backoff
  if type(b) == "table" then
    if ok(b.base) and ok(b.max) and b.max < b.base then
      problems[#problems + 1] = format("backoff.max: expected >= backoff.base (%s), got %s",
        secs(b.base), describe(b.max))
    end
    if b.kind == "decorrelated" and b.jitter ~= nil and b.jitter ~= "none" then
      problems[#problems + 1] = format(
        'backoff.jitter: the decorrelated kind has its own jitter; expected "none", got %s',
        describe(b.jitter))
    end
  end
  local br = t.breaker
  if type(br) == "table" then
    if pos(br.break_for) and pos(br.break_max) and br.break_max < br.break_for then
      problems[#problems + 1] = format("breaker.break_max: expected >= breaker.break_for (%s), got %s",
        secs(br.break_for), describe(br.break_max))
    end
    local break_for = br.break_for == nil and 15 or br.break_for
    if pos(br.lease) and pos(break_for) and br.lease > break_for then
      problems[#problems + 1] = format("breaker.lease: expected <= breaker.break_for (%s), got %s",
        secs(break_for), describe(br.lease))
    end
    local buckets = br.buckets == nil and 10 or br.buckets
    if pos(br.window) and integer(1, 16)(buckets) == nil and ns(br.window) < buckets then
      problems[#problems + 1] = format("breaker.window: expected at least 1 ns per bucket (%d buckets), got %s",
        buckets, describe(br.window))
    end
    if not br.consecutive and not br.ratio and not br.slow_ratio then
      problems[#problems + 1] = "breaker: nothing can trip it; set consecutive, ratio or slow_ratio"
    end
    if br.slow_call ~= nil and not br.slow_ratio then
      problems[#problems + 1] = "breaker.slow_call: has no effect without breaker.slow_ratio"
    end
  end
  local th = t.throttle
  if type(th) == "table" then
    local buckets = th.buckets == nil and 8 or th.buckets
    if pos(th.window) and integer(1, 16)(buckets) == nil and ns(th.window) < buckets then
      problems[#problems + 1] = format("throttle.window: expected at least 1 ns per bucket (%d buckets), got %s",
        buckets, describe(th.window))
    end
  end
  local l = t.limiter
  if type(l) == "table" then
    if l.rate == nil and l.concurrency == nil then
      problems[#problems + 1] = "limiter: expected rate (per second) or concurrency, got neither"
    end
    local r, burst = l.rate, l.burst
    if pos(r) and pos(burst) and 1e9 / r < NS_LIMIT and 1e9 / r * burst >= NS_LIMIT then
      problems[#problems + 1] = format(
        "limiter.burst: burst / rate (%s) must be below %s", secs(burst / r), LIMIT_TEXT)
    end
    for _, k in ipairs { "burst", "wait" } do
      if l[k] ~= nil and l.rate == nil then
        problems[#problems + 1] = format("limiter.%s: has no effect without limiter.rate", k)
      end
    end
    for _, k in ipairs { "queue", "queue_timeout", "poll", "adaptive", "reserve" } do
      if l[k] ~= nil and l[k] ~= false and l.concurrency == nil then
        problems[#problems + 1] = format("limiter.%s: has no effect without limiter.concurrency", k)
      end
    end
    if type(l.queue) == "number" and l.queue > 0 and l.queue_timeout == nil then
      problems[#problems + 1] = "limiter.queue_timeout: a queue needs a timeout (seconds > 0)"
    end
    local a = l.adaptive
    if type(a) == "table" then
      local gradient = a.kind == "gradient"
      if a.target == nil and not gradient then
        problems[#problems + 1] = "limiter.adaptive.target: expected a duration in seconds (finite number > 0), got nil"
      end
      for _, k in ipairs(gradient and { "target", "decrease" }
                         or { "tolerance", "smoothing", "long_window", "headroom" }) do
        if a[k] ~= nil then
          problems[#problems + 1] = format('limiter.adaptive.%s: has no effect with kind = "%s"',
            k, gradient and "gradient" or "aimd")
        end
      end
      local lo, hi, start = a.min or 1, a.max, l.concurrency
      if ok(lo) and ok(hi) and hi < lo then
        problems[#problems + 1] = format("limiter.adaptive.max: expected >= limiter.adaptive.min (%d), got %s",
          lo, describe(hi))
      elseif ok(start) and ((ok(hi) and start > hi) or (ok(lo) and start < lo)) then
        problems[#problems + 1] = format("limiter.concurrency: the adaptive start %d is outside [%s, %s]",
          start, describe(lo), describe(hi or 1000))
      end
    end
  end
  local h = t.hedge
  if type(h) == "table" then
    -- Hedges are attempts (attempts counts them): a max the attempts can
    -- never reach would build a policy that hedges less than it says.
    local max, attempts = h.max == nil and 2 or h.max, t.attempts == nil and 1 or t.attempts
    if integer(2, 4)(max) == nil and integer(1, 65535)(attempts) == nil and max > attempts then
      problems[#problems + 1] = format(
        "hedge.max: %d attempts side by side need attempts >= %d (hedges count as attempts), got attempts = %d",
        max, max, attempts)
    end
    if h.at == nil then
      problems[#problems + 1] = 'hedge.at: expected a latency quantile like "p95" or a fixed delay in seconds (> 0), got nil'
    elseif type(h.at) == "string" and t.latency == false then
      problems[#problems + 1] = format(
        "hedge.at: %s needs a latency source, but latency = false", describe(h.at))
    end
  end
  local c = t.ceiling
  if type(c) == "table" and t.latency == false then
    problems[#problems + 1] = "ceiling: a measured attempt ceiling needs a latency source, but latency = false"
  end
  if type(br) == "table" and br.slow_ratio and br.slow_call == nil and t.latency == false then
    problems[#problems + 1] = "breaker.slow_ratio: without slow_call the slow threshold is measured, but latency = false"
  end
end

-- How long a bare number of seconds is, in words, for the unit advice.
local function spoken(v)
  if v >= 86400 then return format("%.3g days", v / 86400) end
  if v >= 3600 then return format("%.3g h", v / 3600) end
  return format("%.3g min", v / 60)
end

-- A copy of a spec table (as the user wrote it, before presets merge in)
-- with every duration given as a string turned into seconds, and the
-- problems: bare numbers of BARE_MAX seconds or more (the millisecond
-- habit). A string that is no duration is kept for check to refuse, with
-- the field named; so are values past 2^63 ns (refused there as such).
local function normalize(spec, fields, prefix, problems)
  local out = {}
  for k, v in pairs(spec) do
    local f = fields[k]
    local path = join(prefix, k)
    if durations[f] and type(v) == "string" then
      out[k] = v:sub(1, 1) ~= "p" and seconds(v) or v
    elseif durations[f] and finite(v) and v >= BARE_MAX and ns(v) ~= huge then
      problems[#problems + 1] = format(
        '%s: %s would be read as seconds (%s); a bare number of %d or more needs its unit:'
        .. ' write "%sms" if you meant milliseconds, "%ss" if you meant %s',
        path, describe(v), spoken(v), BARE_MAX, describe(v), describe(v), spoken(v))
      out[k] = v
    elseif type(f) == "table" and f.fields and type(v) == "table" and getmetatable(v) == nil then
      out[k] = normalize(v, f.fields, path, problems)
    else
      out[k] = v
    end
  end
  return out
end

-- spec with its duration strings read, or nil and the problems.
function _M.normalize(spec)
  local problems = {}
  local out = normalize(spec, _M.policy, "", problems)
  if #problems > 0 then return nil, problems end
  return out
end

-- Problems with tables that have a metatable, anywhere in a spec as the
-- user wrote it (before presets are merged in with pairs, which would
-- silently drop whatever __index supplies).
function _M.plain(spec)
  local problems, seen = {}, {}
  local function walk(path, v)
    if seen[v] then return end
    seen[v] = true
    if has_metatable(problems, path, v) then return end
    local keys = {}
    for k, sub in pairs(v) do if type(sub) == "table" then keys[#keys + 1] = k end end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do walk(join(path, k), v[k]) end
  end
  if type(spec) == "table" then walk("", spec) end
  return problems
end

-- All problems of a merged policy table, in a stable order.
function _M.check(t)
  local problems = {}
  if type(t) ~= "table" then
    return { "policy: expected a table or a preset name, got " .. describe(t) }
  end
  if has_metatable(problems, "", t) then return problems end
  check_fields(problems, "", _M.policy, t)
  check_relations(problems, t)
  return problems
end

-- Sections merged key by key when a policy extends a base.
_M.sections = { backoff = true, ceiling = true, budget = true, breaker = true,
                throttle = true, limiter = true, hedge = true, latency = true }

return _M

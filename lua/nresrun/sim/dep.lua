-- SPDX-License-Identifier: MIT
-- nresrun.sim.dep: the dependency a simulation calls, modelled on a virtual clock.
--
--   dependency = {
--     latency = { lognormal = { 0.02, 0.5 } },          -- healthy spread
--     capacity = { concurrency = 16, queue = 32 },      -- and/or { rate = 500, burst = 50 }
--                                                       -- refusal = "error" | "throttled"
--     phases = { { name = "outage", from = 60, to = 90, fail = 1 },
--                { name = "brownout", from = 150, to = 210, fail = 0.1, latency_factor = 1.5 },
--                { name = "overload", from = 60, to = 120, capacity = 0.5 },
--                { name = "drift", from = 60, to = 300, latency_factor = 3, ramp = 120 } },
--   }
--
-- A phase scales capacity by `capacity` (servers and rate; the queue
-- keeps its length) and service times by `latency_factor`; with `ramp`
-- the factor grows linearly from 1 at `from` to latency_factor at
-- from + ramp, then holds until `to`.
--
-- Separate from nresrun.dep (the in-process models of real-time cells)
-- because a simulation needs what a real-time cell cannot afford or does
-- not need: its own seeded random streams (so every policy sees the same
-- arrivals), and a capacity limit. The capacity model is exact FIFO
-- queueing over `concurrency` servers: each accepted request takes the
-- server that frees first, waits in the queue until then, and holds it
-- for its service time even when the client has stopped waiting (an
-- abandoned request still costs the dependency, as in life); a request
-- that finds every server busy and the queue full, or no rate token, is
-- refused at once with "overloaded": by default a plain error (a
-- dependency that gives no sign it is shedding load), with
-- capacity.refusal = "throttled" an error table { throttled = true } that
-- prints as "overloaded" (one that says so, as a 429 or a 503 with
-- Retry-After does), which the classifiers read as throttled. A client with an attempt deadline
-- (nres.remaining()) stops waiting at it and gets "timeout".
local schema = require "nres.schema"

local type, pairs, ipairs, format, floor = type, pairs, ipairs, string.format, math.floor
local log, sqrt, cos, exp, pi = math.log, math.sqrt, math.cos, math.exp, math.pi
local describe = schema.describe

local _M = { _VERSION = "0.1.0" }

-- ----------------------------------------------------------- randomness

-- A seeded stream of uniform numbers in (0, 1) (Park-Miller, exact in
-- doubles). Small and independent of math.random, so a simulation can keep
-- one stream for arrivals and one for the dependency.
function _M.rng(seed)
  local state = floor(seed or 1) % 2147483647
  if state <= 0 then state = state + 2147483646 end
  return function()
    state = (state * 48271) % 2147483647
    return state / 2147483647
  end
end

-- ----------------------------------------------------------- validation

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function int(v, lo, hi) return finite(v) and v == floor(v) and v >= lo and v <= hi end

local fields = {
  latency = true, fail_prob = true, fail_every = true, capacity = true, phases = true,
  error = true, name = true,
}
local capacity_fields = { concurrency = true, queue = true, rate = true, burst = true, refusal = true }
local phase_fields = { name = true, from = true, to = true, fail = true, latency_factor = true,
                       capacity = true, ramp = true }

local latency_ok = require("nresrun.dep").latency_kinds
local latency_expect = require("nresrun.dep").latency_expect

local function sorted_names(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, ", ")
end

-- Every problem with dependency table `d`, as "path: what" strings, for a
-- simulation lasting `duration` seconds (nil: not checked).
function _M.check(d, path, duration)
  local problems = {}
  local function bad(fmt, ...) problems[#problems + 1] = format(fmt, ...) end
  if type(d) ~= "table" then
    bad("%s: expected a table { latency, fail_prob, fail_every, capacity, phases }, got %s", path, describe(d))
    return problems
  end
  if d.kind == "fn" or d.kind == "http" then
    bad("%s: a %s dependency needs real time; a simulation models its dependency (a table or nresrun.dep.model{...})",
        path, d.kind == "fn" and "nresrun.dep.fn" or "http")
    return problems
  end
  local from_dep = d.kind == "model"   -- made by nresrun.dep.model{...}: already checked there
  for k in pairs(d) do
    if not fields[k] and not (from_dep and (k == "kind" or k == "where")) then
      bad("%s.%s: unknown field (%s)", path, tostring(k), sorted_names(fields))
    end
  end
  if d.name ~= nil and type(d.name) ~= "string" then bad("%s.name: expected a string, got %s", path, describe(d.name)) end
  if d.error ~= nil and type(d.error) ~= "string" then bad("%s.error: expected a string, got %s", path, describe(d.error)) end
  if d.fail_prob ~= nil and not (finite(d.fail_prob) and d.fail_prob >= 0 and d.fail_prob <= 1) then
    bad("%s.fail_prob: expected a probability in [0, 1], got %s", path, describe(d.fail_prob))
  end
  if d.fail_every ~= nil and not int(d.fail_every, 1, 1e15) then
    bad("%s.fail_every: expected an integer >= 1, got %s", path, describe(d.fail_every))
  end
  if d.fail_every ~= nil and d.fail_prob ~= nil then
    bad("%s: fail_every and fail_prob are two failure models; choose one", path)
  end

  local l = d.latency
  if l ~= nil then
    if type(l) ~= "table" then
      bad("%s.latency: expected { fixed = s } or { uniform = { a, b } } or { lognormal = { median, sigma } }, got %s", path, describe(l))
    else
      local n = 0
      for k, v in pairs(l) do
        n = n + 1
        if not latency_ok[k] then
          bad("%s.latency.%s: unknown latency kind (fixed, uniform, lognormal)", path, tostring(k))
        elseif not latency_ok[k](v) then
          bad("%s.latency.%s: expected %s, got %s", path, k, latency_expect[k], describe(v))
        end
      end
      if n ~= 1 then bad("%s.latency: expected exactly one of fixed, uniform, lognormal", path) end
    end
  end

  local c = d.capacity
  if c ~= nil then
    local cp = path .. ".capacity"
    if type(c) ~= "table" then
      bad("%s: expected { concurrency = n, queue = n } and/or { rate = per second, burst = n }, got %s", cp, describe(c))
    else
      for k in pairs(c) do
        if not capacity_fields[k] then bad("%s.%s: unknown field (%s)", cp, tostring(k), sorted_names(capacity_fields)) end
      end
      if c.concurrency == nil and c.rate == nil then
        bad("%s: expected concurrency (servers) and/or rate (requests per second), got neither", cp)
      end
      if c.concurrency ~= nil and not int(c.concurrency, 1, 100000) then
        bad("%s.concurrency: expected an integer from 1 to 100000, got %s", cp, describe(c.concurrency))
      end
      if c.queue ~= nil then
        if not int(c.queue, 0, 10000000) then
          bad("%s.queue: expected an integer from 0 to 10000000, got %s", cp, describe(c.queue))
        elseif c.concurrency == nil then
          bad("%s.queue: has no effect without capacity.concurrency", cp)
        end
      end
      if c.rate ~= nil and not (finite(c.rate) and c.rate > 0) then
        bad("%s.rate: expected requests per second (> 0), got %s", cp, describe(c.rate))
      end
      if c.refusal ~= nil and c.refusal ~= "error" and c.refusal ~= "throttled" then
        bad('%s.refusal: expected "error" (a plain "overloaded") or "throttled" (a throttled answer), got %s',
            cp, describe(c.refusal))
      end
      if c.burst ~= nil then
        if not int(c.burst, 1, 1e9) then
          bad("%s.burst: expected an integer >= 1, got %s", cp, describe(c.burst))
        elseif c.rate == nil then
          bad("%s.burst: has no effect without capacity.rate", cp)
        end
      end
    end
  end

  local ph = d.phases
  if ph ~= nil then
    if type(ph) ~= "table" or (next(ph) ~= nil and ph[1] == nil) then
      bad("%s.phases: expected a list of { name, from, to, fail, latency_factor }, got %s", path, describe(ph))
    else
      for i, p in ipairs(ph) do
        local pp = format("%s.phases[%d]", path, i)
        if type(p) ~= "table" then
          bad("%s: expected a table, got %s", pp, describe(p))
        else
          for k in pairs(p) do
            if not phase_fields[k] then bad("%s.%s: unknown field (%s)", pp, tostring(k), sorted_names(phase_fields)) end
          end
          if p.name ~= nil and type(p.name) ~= "string" then bad("%s.name: expected a string, got %s", pp, describe(p.name)) end
          if not (finite(p.from) and p.from >= 0) then
            bad("%s.from: expected seconds >= 0, got %s", pp, describe(p.from))
          elseif duration and p.from >= duration then
            bad("%s.from: %s s is not before the end of the simulation (duration %s s)", pp, describe(p.from), describe(duration))
          end
          if not (finite(p.to) and p.to > 0) then
            bad("%s.to: expected seconds > 0, got %s", pp, describe(p.to))
          elseif finite(p.from) and p.to <= p.from then
            bad("%s.to: expected after from (%s s), got %s", pp, describe(p.from), describe(p.to))
          end
          if p.fail ~= nil and not (finite(p.fail) and p.fail >= 0 and p.fail <= 1) then
            bad("%s.fail: expected a probability in [0, 1], got %s", pp, describe(p.fail))
          end
          if p.latency_factor ~= nil and not (finite(p.latency_factor) and p.latency_factor >= 0) then
            bad("%s.latency_factor: expected a finite number >= 0, got %s", pp, describe(p.latency_factor))
          end
          if p.capacity ~= nil and not (finite(p.capacity) and p.capacity > 0 and p.capacity <= 1000) then
            bad("%s.capacity: expected a factor on the capacity, > 0 and <= 1000, got %s", pp, describe(p.capacity))
          elseif p.capacity ~= nil and d.capacity == nil then
            bad("%s.capacity: has no effect without dependency.capacity", pp)
          end
          if p.ramp ~= nil then
            if not (finite(p.ramp) and p.ramp > 0) then
              bad("%s.ramp: expected seconds > 0, got %s", pp, describe(p.ramp))
            elseif p.latency_factor == nil then
              bad("%s.ramp: has no effect without latency_factor", pp)
            elseif finite(p.from) and finite(p.to) and p.ramp > p.to - p.from then
              bad("%s.ramp: %s s is longer than the phase (%s s)", pp, describe(p.ramp), describe(p.to - p.from))
            end
          end
          if p.fail == nil and p.latency_factor == nil and p.capacity == nil then
            bad("%s: changes nothing; set fail, latency_factor and/or capacity", pp)
          end
        end
      end
    end
  end
  return problems
end

-- The standard normal's quantile (Acklam's rational approximation,
-- relative error < 1.2e-9 over (0, 1)).
local A = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
            1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00 }
local B = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
            6.680131188771972e+01, -1.328068155288572e+01 }
local Cq = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00 }
local Dq = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00 }
local function normal_quantile(p)
  local lo = 0.02425
  if p < lo or p > 1 - lo then
    local q = sqrt(-2 * log(p < lo and p or 1 - p))
    local x = (((((Cq[1] * q + Cq[2]) * q + Cq[3]) * q + Cq[4]) * q + Cq[5]) * q + Cq[6])
              / ((((Dq[1] * q + Dq[2]) * q + Dq[3]) * q + Dq[4]) * q + 1)
    return p < lo and x or -x
  end
  local q = p - 0.5
  local r = q * q
  return (((((A[1] * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * r + A[6]) * q
         / (((((B[1] * r + B[2]) * r + B[3]) * r + B[4]) * r + B[5]) * r + 1)
end
_M.normal_quantile = normal_quantile

-- The healthy service time, in seconds, below which a share q (0 < q < 1)
-- of requests are served by latency model `l` (nil: 0, no latency):
-- queueing and phases left out.
function _M.latency_quantile(l, q)
  if not l then return 0 end
  local k, v = next(l)
  if k == "fixed" then return v end
  if k == "uniform" then return v[1] + (v[2] - v[1]) * q end
  return v[1] * exp(v[2] * normal_quantile(q))   -- lognormal { median, sigma }
end


-- A short description for reports.
function _M.label(d)
  local parts = {}
  if d.name then parts[#parts + 1] = d.name end
  local l = d.latency
  if l then
    local k, v = next(l)
    if k == "fixed" then parts[#parts + 1] = format("latency %g ms", v * 1e3)
    elseif k == "uniform" then parts[#parts + 1] = format("latency %g-%g ms uniform", v[1] * 1e3, v[2] * 1e3)
    else parts[#parts + 1] = format("latency lognormal, median %g ms, sigma %g", v[1] * 1e3, v[2]) end
  else
    parts[#parts + 1] = "no latency"
  end
  if d.fail_prob then parts[#parts + 1] = format("fails p=%g", d.fail_prob) end
  if d.fail_every then parts[#parts + 1] = format("fails every %d", d.fail_every) end
  local c = d.capacity
  if c then
    if c.concurrency then parts[#parts + 1] = format("capacity %d servers + queue %d", c.concurrency, c.queue or 0) end
    if c.rate then parts[#parts + 1] = format("capacity %g req/s (burst %d)", c.rate, c.burst or math.max(1, floor(c.rate / 10))) end
    if c.refusal == "throttled" then parts[#parts + 1] = "refusals throttled" end
  end
  return table.concat(parts, ", ")
end

-- ------------------------------------------------------------- instance

-- An instance: inst.call(left) with `left` the client's seconds to wait
-- (nil: unbounded) returns true or nil, err; it sleeps through `sleep(ns)`
-- (the scheduler's: yields) and reads `now()` (virtual ns; `t0` = the
-- simulation's second 0). Counters: requests (every request the dependency
-- received), refused (capacity), failed (answered with an error), timeouts
-- (the client gave up), queue (requests waiting now), queue_max (reset by
-- the caller each second).
function _M.instantiate(d, rand, now, sleep, t0)
  local inst = { requests = 0, refused = 0, failed = 0, timeouts = 0, queue = 0, queue_max = 0 }
  local err = d.error or "unavailable"
  local fail_prob, fail_every = d.fail_prob, d.fail_every

  -- Service time in ns (before the phase's factor).
  local service
  local l = d.latency
  local k, v
  if l then k, v = next(l) end
  if k == "fixed" then
    local ns = v * 1e9
    service = function() return ns end
  elseif k == "uniform" then
    local lo, span = v[1] * 1e9, (v[2] - v[1]) * 1e9
    service = function() return lo + span * rand() end
  elseif k == "lognormal" then
    local median, sigma = v[1] * 1e9, v[2]
    service = function()
      return median * exp(sigma * sqrt(-2 * log(rand())) * cos(2 * pi * rand()))
    end
  else
    service = function() return 0 end
  end

  -- Phases as flat arrays, in ns from t0 (ramp: ns, 0 = none).
  local ph_from, ph_to, ph_fail, ph_factor, ph_ramp, ph_cap, nph = {}, {}, {}, {}, {}, {}, 0
  for _, p in ipairs(d.phases or {}) do
    nph = nph + 1
    ph_from[nph], ph_to[nph] = t0 + p.from * 1e9, t0 + p.to * 1e9
    ph_fail[nph], ph_factor[nph] = p.fail or 0, p.latency_factor or 1
    ph_ramp[nph], ph_cap[nph] = (p.ramp or 0) * 1e9, p.capacity or 1
  end

  -- Servers: the time each one frees; queue: start times of waiting
  -- requests (nondecreasing: FIFO), a ring of `qcap`.
  local c = d.capacity or {}
  local nsrv = c.concurrency or 0
  local free_at = {}
  for i = 1, nsrv do free_at[i] = 0 end
  local qcap = c.queue or 0
  local ring, qhead, qlen = {}, 0, 0
  for i = 0, qcap - 1 do ring[i] = 0 end
  -- Rate: a token bucket.
  local rate = c.rate
  local burst = c.burst or (rate and math.max(1, floor(rate / 10))) or 0
  local tokens, refilled = burst, nil

  -- What a refused request gets back.
  local refused = "overloaded"
  if c.refusal == "throttled" then
    refused = setmetatable({ throttled = true }, { __tostring = function() return "overloaded" end })
  end

  local count = 0
  inst.call = function(left)
    local t = now()
    count = count + 1
    inst.requests = count

    -- The phases in force: latency factor, capacity factor (the failure
    -- draw comes after the rate check, as it always has: same streams).
    local fail, factor, capf = false, 1, 1
    for i = 1, nph do
      if t >= ph_from[i] and t < ph_to[i] then
        factor = ph_factor[i]
        local r = ph_ramp[i]
        if r > 0 and t < ph_from[i] + r then
          factor = 1 + (factor - 1) * (t - ph_from[i]) / r
        end
        capf = ph_cap[i]
      end
    end

    if rate then
      if refilled then
        tokens = tokens + (t - refilled) * rate * capf / 1e9
        if tokens > burst then tokens = burst end
      end
      refilled = t
      if tokens < 1 then
        inst.refused = inst.refused + 1
        return nil, refused
      end
      tokens = tokens - 1
    end

    for i = 1, nph do
      if t >= ph_from[i] and t < ph_to[i] then
        local f = ph_fail[i]
        if f >= 1 or (f > 0 and rand() < f) then fail = true end
      end
    end
    local done = t + service() * factor

    if nsrv > 0 then
      -- With fewer servers (capf < 1) only the first ones take work; the
      -- others finish what they hold. More (capf > 1) is capped at the
      -- servers declared.
      local n = nsrv
      if capf ~= 1 then
        n = floor(nsrv * capf + 0.5)
        if n < 1 then n = 1 elseif n > nsrv then n = nsrv end
      end
      local best, best_at = 1, free_at[1]
      for i = 2, n do
        local a = free_at[i]
        if a < best_at then best, best_at = i, a end
      end
      -- Requests whose turn has come leave the queue.
      while qlen > 0 and ring[qhead] <= t do
        qhead = (qhead + 1) % qcap
        qlen = qlen - 1
      end
      if best_at > t then   -- every server busy: queue, or refuse
        if qlen >= qcap then
          inst.queue = qlen
          inst.refused = inst.refused + 1
          return nil, refused
        end
        ring[(qhead + qlen) % qcap] = best_at
        qlen = qlen + 1
        if qlen > inst.queue_max then inst.queue_max = qlen end
        done = done - t + best_at
      end
      inst.queue = qlen
      free_at[best] = done
    end

    if not fail and fail_every and count % fail_every == 0 then fail = true end
    if not fail and fail_prob and fail_prob > 0 and rand() < fail_prob then fail = true end
    if fail then inst.failed = inst.failed + 1 end

    local wait = done - t
    if left and left * 1e9 < wait then
      inst.timeouts = inst.timeouts + 1
      sleep(left * 1e9)
      return nil, "timeout"
    end
    sleep(wait)
    if fail then return nil, err end
    return true
  end

  -- Requests waiting in the queue at `t` (the counters between calls
  -- would keep the last call's view).
  inst.queued = function(t)
    local n, h = qlen, qhead
    while n > 0 and ring[h] <= t do h = (h + 1) % qcap; n = n - 1 end
    return n
  end
  -- Servers busy at `t`.
  inst.busy = function(t)
    local n = 0
    for i = 1, nsrv do if free_at[i] > t then n = n + 1 end end
    return n
  end
  return inst
end

return _M

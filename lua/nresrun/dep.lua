-- SPDX-License-Identifier: MIT
-- nresrun.dep: the dependencies a scenario calls, modelled in process.
--
--   nresrun.dep.flaky{ fail_every = 2 }            one shared counter
--   nresrun.dep.model{ fail_prob = 0.1, latency = { lognormal = { 0.002, 0.5 } } }
--   nresrun.dep.model{ phases = { { from = 10, to = 40, fail = 1 } } }  an outage
--   nresrun.dep.fn(function(n, sleep) ... end)      your own
--   nresrun.dep.http{ path = "/flaky?n=4" }          the HTTP dependency server,
--                                                 a process of its own
--
-- A constructor returns a spec (plain data plus the file:line it was
-- written at, for error messages); a cell instantiates it. An instance is a
-- function following the Lua convention: `true` on success, `nil, err` on
-- failure ("unavailable"; a throttled answer is an error table
-- { throttled = true, retry_after = seconds }, which the classifiers read),
-- and counts the requests it sees: that count is the
-- dependency's own view of the load, reported per operation.
local schema = require "nres.schema"

local type, format, floor = type, string.format, math.floor
local random, log, sqrt, cos, exp = math.random, math.log, math.sqrt, math.cos, math.exp

local _M = { _VERSION = "0.1.0" }

-- "file:line" of the function `level` frames up, or "?" when that frame
-- is gone (a tail call) or is not Lua.
local function where(level)
  local info = debug.getinfo(level + 1, "Sl")
  if not info or info.what == "C" or (info.currentline or -1) < 0 then return "?" end
  return (info.short_src or "?") .. ":" .. info.currentline
end
_M.where = where

local describe = schema.describe

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end

-- field checks: name -> function(v) -> expected-string or nil
local checks = {
  fail_every = function(v) if finite(v) and v >= 1 and v == floor(v) then return nil end
    return "an integer >= 1" end,
  fail_prob = function(v) if finite(v) and v >= 0 and v <= 1 then return nil end
    return "a probability in [0, 1]" end,
  throttle_every = function(v) if finite(v) and v >= 1 and v == floor(v) then return nil end
    return "an integer >= 1" end,
  retry_after = function(v) if finite(v) and v >= 0 then return nil end
    return "seconds >= 0" end,
  error = function(v) if type(v) == "string" then return nil end return "a string" end,
  name = function(v) if type(v) == "string" then return nil end return "a string" end,
}

local latency_kinds = {
  fixed = function(v) return finite(v) and v >= 0 end,
  uniform = function(v) return type(v) == "table" and finite(v[1]) and finite(v[2])
                               and v[1] >= 0 and v[2] >= v[1] end,
  lognormal = function(v) return type(v) == "table" and finite(v[1]) and finite(v[2])
                                 and v[1] > 0 and v[2] >= 0 end,
}
local latency_expect = {
  fixed = "seconds >= 0",
  uniform = "{ low, high } in seconds, 0 <= low <= high",
  lognormal = "{ median seconds > 0, sigma >= 0 }",
}
-- Shared with the simulator's dependency (nresrun.sim.dep).
_M.latency_kinds, _M.latency_expect = latency_kinds, latency_expect

local function check_latency(problems, path, v)
  if type(v) ~= "table" then
    problems[#problems + 1] = format("%s: expected { fixed = s } or { uniform = { a, b } } or { lognormal = { median, sigma } }, got %s", path, describe(v))
    return
  end
  local n = 0
  for k, val in pairs(v) do
    n = n + 1
    local ok = latency_kinds[k]
    if not ok then
      problems[#problems + 1] = format("%s.%s: unknown latency kind (fixed, uniform, lognormal)", path, tostring(k))
    elseif not ok(val) then
      problems[#problems + 1] = format("%s.%s: expected %s, got %s", path, k, latency_expect[k], describe(val))
    end
  end
  if n ~= 1 then
    problems[#problems + 1] = format("%s: expected exactly one of fixed, uniform, lognormal", path)
  end
end

local phase_fields = {
  from = function(v) return finite(v) and v >= 0 end,
  to = function(v) return finite(v) and v > 0 end,
  fail = function(v) return finite(v) and v >= 0 and v <= 1 end,
  latency_factor = function(v) return finite(v) and v >= 0 end,
}

local function check(t, kind)
  local problems = {}
  for k, v in pairs(t) do
    local path = "dependency." .. tostring(k)
    if k == "latency" then
      check_latency(problems, path, v)
    elseif k == "phases" then
      if type(v) ~= "table" then
        problems[#problems + 1] = format("%s: expected a list of { from, to, fail, latency_factor }, got %s", path, describe(v))
      else
        for i, ph in ipairs(v) do
          if type(ph) ~= "table" then
            problems[#problems + 1] = format("%s[%d]: expected a table, got %s", path, i, describe(ph))
          else
            for pk, pv in pairs(ph) do
              local ok = phase_fields[pk]
              if not ok then
                problems[#problems + 1] = format("%s[%d].%s: unknown field (from, to, fail, latency_factor)", path, i, tostring(pk))
              elseif not ok(pv) then
                problems[#problems + 1] = format("%s[%d].%s: got %s", path, i, pk, describe(pv))
              end
            end
            if finite(ph.from) and finite(ph.to) and ph.to <= ph.from then
              problems[#problems + 1] = format("%s[%d]: to (%s) must be after from (%s)", path, i, describe(ph.to), describe(ph.from))
            end
          end
        end
      end
    elseif checks[k] then
      local what = checks[k](v)
      if what then problems[#problems + 1] = format("%s: expected %s, got %s", path, what, describe(v)) end
    else
      local valid = { latency = true, phases = true }
      for name in pairs(checks) do valid[name] = true end
      problems[#problems + 1] = format("%s: unknown field (%s)", path, schema.hint(tostring(k), valid))
    end
  end
  if t.fail_every and t.fail_prob then
    problems[#problems + 1] = "dependency: fail_every and fail_prob are two failure models; choose one"
  end
  return problems
end

local function make(kind, t, level)
  local at = where(level + 1)
  if type(t) ~= "table" then
    error(format("%s: nresrun.dep.%s: expected a table, got %s", at, kind, describe(t)), 0)
  end
  local problems = check(t, kind)
  if #problems > 0 then
    error(at .. ": nresrun.dep." .. kind .. ": " .. table.concat(problems, "; "), 0)
  end
  local spec = { kind = "model", where = at }
  for k, v in pairs(t) do spec[k] = v end
  return spec
end

function _M.model(t)
  local spec = make("model", t, 2)   -- not a tail call: keeps the caller's line
  return spec
end

function _M.flaky(t)
  local spec = make("flaky", t, 2)
  if spec.fail_every == nil and spec.fail_prob == nil then
    error(spec.where .. ": nresrun.dep.flaky: expected fail_every or fail_prob", 0)
  end
  return spec
end

function _M.latency(t)
  local spec = make("latency", { latency = t }, 2)
  return spec
end

function _M.fn(f)
  local at = where(2)
  if type(f) ~= "function" then
    error(format("%s: nresrun.dep.fn: expected a function (n, sleep) -> res, err, got %s", at, describe(f)), 0)
  end
  return { kind = "fn", fn = f, where = at }
end

-- The HTTP dependency server (`nresrun serve`, runtime/src/depserver/
-- depserver.c): the cell starts it as a child process, resets it, and
-- reports the requests it counted. Arms run the C HTTP client (nresrun.http):
-- nresrun.raw is one attempt (the "none" preset), a preset or policy runs
-- under that policy.
local http_fields = {
  path = function(v)
    if type(v) == "string" and v:find("^/[%w%-._~!$&'()*+,;=:@/%%?]*$") and #v <= 1024 then return nil end
    return 'a path starting with "/" (e.g. "/echo", "/flaky?n=4")'
  end,
  method = function(v)
    if type(v) == "string" and v:find("^[%w!#$%%&'*+.^_`|~-]+$") and #v <= 16 then return nil end
    return "an HTTP method token"
  end,
  idempotent = function(v) if type(v) == "boolean" then return nil end return "a boolean" end,
  flaky_every = checks.fail_every,
  name = checks.name,
}

function _M.http(t)
  local at = where(2)
  if type(t) ~= "table" then
    error(format("%s: nresrun.dep.http: expected a table, got %s", at, describe(t)), 0)
  end
  local problems = {}
  for k, v in pairs(t) do
    local check_field = http_fields[k]
    if not check_field then
      problems[#problems + 1] = format("dependency.%s: unknown field (%s)", tostring(k),
                                       schema.hint(tostring(k), http_fields))
    else
      local what = check_field(v)
      if what then
        problems[#problems + 1] = format("dependency.%s: expected %s, got %s", k, what, describe(v))
      end
    end
  end
  if t.path == nil then problems[#problems + 1] = 'dependency.path: missing (e.g. "/echo")' end
  if #problems > 0 then
    table.sort(problems)
    error(at .. ": nresrun.dep.http: " .. table.concat(problems, "; "), 0)
  end
  local spec = { kind = "http", where = at }
  for k, v in pairs(t) do spec[k] = v end
  return spec
end

function _M.is_spec(v)
  return type(v) == "table" and (v.kind == "model" or v.kind == "fn" or v.kind == "http")
end

-- A short label for reports: "flaky every 2", "p=0.1 lognormal(2ms)"...
function _M.label(spec)
  if spec.name then return spec.name end
  if spec.kind == "fn" then return "custom" end
  if spec.kind == "http" then return "http " .. (spec.path or "/") end
  local parts = {}
  if spec.fail_every then parts[#parts + 1] = "fails every " .. spec.fail_every end
  if spec.fail_prob then parts[#parts + 1] = format("fails p=%g", spec.fail_prob) end
  if spec.throttle_every then parts[#parts + 1] = "throttles every " .. spec.throttle_every end
  local l = spec.latency
  if l then
    local k, v = next(l)
    if k == "fixed" then parts[#parts + 1] = format("%gms", v * 1e3)
    elseif k == "uniform" then parts[#parts + 1] = format("%g-%gms", v[1] * 1e3, v[2] * 1e3)
    else parts[#parts + 1] = format("lognormal %gms", v[1] * 1e3) end
  end
  if spec.phases then parts[#parts + 1] = #spec.phases .. " phases" end
  return #parts > 0 and table.concat(parts, ", ") or "healthy"
end

-- ------------------------------------------------------------ instances

local function gauss()
  local u1 = random()
  if u1 < 1e-300 then u1 = 1e-300 end
  return sqrt(-2 * log(u1)) * cos(2 * math.pi * random())
end

local function latency_fn(l)
  if not l then return nil end
  local k, v = next(l)
  if k == "fixed" then
    local ns = v * 1e9
    return function() return ns end
  elseif k == "uniform" then
    local lo, span = v[1] * 1e9, (v[2] - v[1]) * 1e9
    return function() return lo + span * random() end
  else
    local median, sigma = v[1] * 1e9, v[2]
    return function() return median * exp(sigma * gauss()) end
  end
end

-- An instance: { call = function(n) -> res, err, requests = 0,
-- retry_after = s }. `sleep(ns)` is the cell's (yields in a scheduler);
-- `clock()` returns seconds since the cell started, for phases.
function _M.instantiate(spec, sleep, clock)
  local inst = { requests = 0, retry_after = spec.retry_after or 0 }
  if spec.kind == "fn" then
    local f = spec.fn
    inst.call = function(n)
      inst.requests = inst.requests + 1
      return f(n, sleep)
    end
    return inst
  end
  local fail_every, fail_prob = spec.fail_every, spec.fail_prob
  local throttle_every = spec.throttle_every
  local err = spec.error or "unavailable"
  local latency = latency_fn(spec.latency)
  local phases = spec.phases
  local count = 0
  local throttled = setmetatable({ throttled = true, retry_after = spec.retry_after },
                                 { __tostring = function() return "throttled" end })
  inst.call = function()
    count = count + 1
    inst.requests = count
    local fail, factor = false, 1
    if phases then
      local t = clock()
      for i = 1, #phases do
        local ph = phases[i]
        if t >= (ph.from or 0) and t < ph.to then
          if ph.fail and random() < ph.fail then fail = true end
          factor = ph.latency_factor or factor
        end
      end
    end
    if latency then
      local ns = latency() * factor
      if ns > 0 then sleep(ns) end
    end
    if fail then return nil, err end
    if throttle_every and count % throttle_every == 0 then return nil, throttled end
    if fail_every and count % fail_every == 0 then return nil, err end
    if fail_prob and random() < fail_prob then return nil, err end
    return true
  end
  return inst
end

return _M

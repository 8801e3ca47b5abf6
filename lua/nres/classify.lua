-- SPDX-License-Identifier: MIT
-- nres.classify: turn what an attempt returned into a verdict.
--
-- compile(spec) returns one function (ok, r1, r2) -> kind, flags,
-- retry_after_ns (-1 when none), built once per policy so the hot path is a
-- single call. spec is "default", "http", a function (res, err) -> verdict
-- [, retry_after seconds], or a table of statuses, exact error strings and
-- error patterns. A thrown error reaches the classifier as (nil, err).
-- A retry-after may also be a string with a unit ("500ms", "2s").
-- A classifier function that returns junk raises here ("nres: classify
-- returned 42; ..."); nres.run catches it like a throw and ends the call
-- with every permit given back. Retry-after seconds become ns through
-- nres.schema's one conversion (saturating to never, not wrapping).
local schema = require "nres.schema"

local _M = { _VERSION = "0.1.0" }

local type, tonumber, error, pairs = type, tonumber, error, pairs
local find = string.find
local format = string.format
local ns, describe, seconds = schema.ns, schema.describe, schema.seconds

local OK, TRANSIENT, THROTTLED, PERMANENT = 0, 1, 2, 3
local VF_TIMEOUT = 2

_M.kinds = { ok = OK, transient = TRANSIENT, throttled = THROTTLED,
             permanent = PERMANENT, canceled = 4 }
_M.names = { [0] = "ok", "transient", "throttled", "permanent", "canceled" }
local kinds = _M.kinds

-- Error strings that mean "the attempt ran out of time".
local timeouts = { timeout = true, ["timed out"] = true }

local months = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7,
                 Aug = 8, Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

-- Days since 1970-01-01 of a civil date (proleptic Gregorian).
local floor = math.floor
local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * (m + (m > 2 and -3 or 9)) + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- Retry-After in seconds: delta-seconds or an IMF-fixdate HTTP-date
-- (relative to `now_epoch`, seconds since 1970). nil for garbage.
function _M.retry_after(value, now_epoch)
  if type(value) == "number" then
    return value >= 0 and value < 1e9 and value or nil
  end
  if type(value) ~= "string" then return nil end
  local secs = value:match("^%s*(%d+)%s*$")
  if secs then
    secs = tonumber(secs)
    return secs < 1e9 and secs or 1e9
  end
  local d, mon, y, h, mi, s =
    value:match("^%s*%a%a%a, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT%s*$")
  if not d or not months[mon] then return nil end
  local at = days_from_civil(tonumber(y), months[mon], tonumber(d)) * 86400
             + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
  local delta = at - (now_epoch or os.time())
  return delta > 0 and delta or 0
end

-- An error table { throttled = true, retry_after = seconds } (what the
-- modelled dependencies return) is a throttled answer.
local function error_kind(err)
  if type(err) == "table" and err.throttled then
    local ra = tonumber(err.retry_after)
    return THROTTLED, 0, ra and ra >= 0 and ns(ra) or -1
  end
  if timeouts[err] then return TRANSIENT, VF_TIMEOUT, -1 end
  return TRANSIENT, 0, -1
end

-- The error of an outcome in the Lua convention (nil, err), or nil.
local function error_of(ok, r1, r2)
  if not ok then return r1 == nil and "error" or r1 end
  if (r1 == nil or r1 == false) and r2 ~= nil then return r2 end
  return nil
end

-- res, err: an error makes it transient (timeouts flagged); else OK.
local function default(ok, r1, r2)
  local err = error_of(ok, r1, r2)
  if err ~= nil then return error_kind(err) end
  return OK, 0, -1
end

local function status_of(res)
  local t = type(res)
  if t == "number" then return res end
  if t == "table" then return tonumber(res.status) end
  return nil
end

local function header_retry_after(res)
  if type(res) ~= "table" then return nil end
  local v = res.retry_after
  if v == nil and type(res.headers) == "table" then
    v = res.headers["Retry-After"] or res.headers["retry-after"]
  end
  return v
end

-- The HTTP table: 429 throttled; 503 with Retry-After throttled; other
-- 5xx and 408 transient; other statuses are answers (OK).
local function http(ok, r1, r2)
  local err = error_of(ok, r1, r2)
  if err ~= nil then return error_kind(err) end
  local status = status_of(r1)
  if status == nil then return OK, 0, -1 end
  if status == 429 or status == 503 then
    local ra = _M.retry_after(header_retry_after(r1))
    if ra then return THROTTLED, 0, ns(ra) end
    return status == 429 and THROTTLED or TRANSIENT, 0, -1
  end
  if status == 408 or (status >= 500 and status <= 599) then
    return TRANSIENT, 0, -1
  end
  if status < 100 or status > 599 then return PERMANENT, 0, -1 end
  return OK, 0, -1
end

local function verdict_of(v, ra, where)
  local kind = kinds[v]
  if kind == nil then
    error(format('nres: %s returned %s; expected "ok", "transient", "throttled", "permanent" or "canceled"',
      where, describe(v)), 0)
  end
  if ra ~= nil then
    if type(ra) == "string" then ra = seconds(ra) or ra end   -- "2s", "500ms"
    if type(ra) ~= "number" or ra ~= ra or ra < 0 then
      error(format('nres: %s returned retry_after %s; expected seconds >= 0 (or with a unit: "500ms", "2s")',
                   where, describe(ra)), 0)
    end
    return kind, 0, ns(ra)
  end
  if kind == TRANSIENT and timeouts[v] then return kind, VF_TIMEOUT, -1 end
  return kind, 0, -1
end

local function from_function(fn)
  return function(ok, r1, r2)
    local v, ra
    if ok then v, ra = fn(r1, r2) else v, ra = fn(nil, error_of(ok, r1, r2)) end
    return verdict_of(v, ra, "classify")
  end
end

-- { status = { [429] = "throttled", ... }, errors = { timeout = "transient" },
--   patterns = { refused = "transient" }, default = "transient" }
local function from_table(spec)
  local status, errors, patterns = spec.status or {}, spec.errors or {}, spec.patterns
  local fallback = kinds[spec.default or "transient"]
  return function(ok, r1, r2)
    local err = error_of(ok, r1, r2)
    if err ~= nil then
      local v = errors[err]
      if v == nil and patterns and type(err) == "string" then
        for pattern, pv in pairs(patterns) do
          if find(err, pattern) then v = pv; break end
        end
      end
      if v ~= nil then return verdict_of(v, nil, "classify table") end
      if timeouts[err] then return fallback, VF_TIMEOUT, -1 end
      return fallback, 0, -1
    end
    local code = status_of(r1)
    local v = code and status[code]
    if v ~= nil then
      local kind = kinds[v]
      local ra = _M.retry_after(header_retry_after(r1))
      if ra and (kind == THROTTLED or kind == TRANSIENT) then
        return THROTTLED, 0, ns(ra)
      end
      return kind, 0, -1
    end
    return OK, 0, -1
  end
end

_M.error_of = error_of

function _M.compile(spec)
  if spec == nil or spec == "default" then return default end
  if spec == "http" then return http end
  if type(spec) == "function" then return from_function(spec) end
  return from_table(spec)
end

return _M

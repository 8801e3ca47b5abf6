-- SPDX-License-Identifier: MIT
-- nresrun.tune.jsonl: one line of the gateway's try log, a JSON object per
-- client request written by nginx's log_format ... escape=json
-- (LOG_FORMAT below; docs/tune.md, "The gateway's try log").
--
-- Fields: msec, request_time and status are required (numbers, or
-- strings holding numbers); upstream_status, upstream_response_time and
-- upstream_addr are nginx's lists of the tries ("503, 200"), read as the
-- nginx access log's are (nresrun.tune.trace); nres_tries, nres_retry,
-- nres_reason and nres_deadline_ms are the module's variables, optional
-- (empty when nres did not see the request, or in the Lua balancer's
-- mode). A request nres_admit refused (nres_reason set, no try) is an
-- arrival the dependency never saw: kept with no try, and counted.
--
-- line(text) returns sent, tries, written, info (info = { refused =
-- reason or nil, retry = reason or nil, deadline_ms = n or nil }) or nil,
-- error (naming the field, what was expected and what was got).
local cjson = require "cjson.safe"
local format, tonumber, type = string.format, tonumber, type

local _M = { _VERSION = "0.1.0" }

_M.LOG_FORMAT = [[log_format nres_tries escape=json
  '{"msec":$msec,"request_time":$request_time,"status":$status,'
  '"upstream_addr":"$upstream_addr","upstream_status":"$upstream_status",'
  '"upstream_response_time":"$upstream_response_time",'
  '"nres_tries":"$nres_tries","nres_retry":"$nres_retry",'
  '"nres_reason":"$nres_reason","nres_deadline_ms":"$nres_deadline_ms"}';]]

local function finite(v) return v and v == v and v > -math.huge and v < math.huge end

-- A field holding a number (a JSON number or a string of one); nil, error.
local function number(o, k, required)
  local v = o[k]
  if v == nil or v == "" or v == cjson.null then
    if required then return nil, format("%s: expected a number, got nothing", k) end
    return false
  end
  local n = tonumber(v)
  if (type(v) ~= "number" and type(v) ~= "string") or not finite(n) or n < 0 then
    return nil, format("%s: expected a number >= 0, got %s", k, type(v) == "string" and format("%q", v) or tostring(v))
  end
  return n
end

-- A field holding a string ("" when absent).
local function text(o, k)
  local v = o[k]
  if v == nil or v == cjson.null then return "" end
  if type(v) ~= "string" then return nil, format("%s: expected a string, got %s", k, type(v)) end
  return v
end

function _M.line(s)
  local o, err = cjson.decode(s)
  if type(o) ~= "table" or o[1] ~= nil then
    return nil, format("expected a JSON object (the nres_tries log_format), got %s",
                       o == nil and ("bad JSON: " .. tostring(err)) or type(o) == "table" and "an array" or type(o))
  end
  local msec, e1 = number(o, "msec", true)
  if not msec then return nil, e1 end
  local rt, e2 = number(o, "request_time", true)
  if not rt then return nil, e2 end
  local status, e3 = number(o, "status", true)
  if not status then return nil, e3 end
  local fields = {}
  for _, k in ipairs { "upstream_status", "upstream_response_time", "nres_reason", "nres_retry" } do
    local v, e = text(o, k)
    if not v then return nil, e end
    fields[k] = v
  end
  local ntries, e4 = number(o, "nres_tries", false)
  if ntries == nil then return nil, e4 end
  local deadline, e5 = number(o, "nres_deadline_ms", false)
  if deadline == nil then return nil, e5 end
  local trace = require "nresrun.tune.trace"
  local tries, why = trace.upstream_tries(fields.upstream_response_time, fields.upstream_status, rt)
  if not tries then
    -- no try: only a request nres refused itself (the dependency saw nothing)
    if fields.upstream_status ~= "" or fields.nres_reason == "" then return nil, why end
    tries = {}
  end
  if ntries and fields.nres_reason == "" and ntries ~= #tries then
    return nil, format("nres_tries: expected %d (the tries in upstream_status %q), got %d", #tries,
                       fields.upstream_status, ntries)
  end
  return msec - rt, tries, msec, {
    refused = fields.nres_reason ~= "" and fields.nres_reason or nil,
    retry = fields.nres_retry ~= "" and fields.nres_retry or nil,
    deadline_ms = deadline or nil,
  }
end

return _M

-- SPDX-License-Identifier: MIT
-- tune_jsonl_spec.lua - the gateway's JSON try log as a trace for nresrun
-- tune (nresrun.tune.jsonl, through nresrun.tune.trace's dispatch): the
-- tries as nginx lists them, nres's own refusals kept as arrivals with no
-- try and counted, and hostile lines (bad JSON, missing or mistyped
-- fields, tries that disagree with $nres_tries, a clock going backwards)
-- refused with file:line or counted.
local trace = require "nresrun.tune.trace"
local jsonl = require "nresrun.tune.jsonl"

local format = string.format
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local function put(name, lines)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  return path
end

-- One line as nginx writes it with LOG_FORMAT (escape=json: absent
-- variables are empty strings).
local function line(msec, rt, status, ust, urt, tries, extra)
  extra = extra or {}
  return format('{"msec":%.3f,"request_time":%.3f,"status":%d,"upstream_addr":"%s","upstream_status":"%s",'
                .. '"upstream_response_time":"%s","nres_tries":"%s","nres_retry":"%s","nres_reason":"%s",'
                .. '"nres_deadline_ms":"%s"}', msec, rt, status, extra.addr or "127.0.0.1:8081", ust, urt, tries,
                extra.retry or "", extra.reason or "", extra.deadline or "1999")
end

-- n requests, one every 10 ms; every 5th retried after a 503, every 7th
-- refused by nres_admit.
local function log_lines(n)
  local lines = {}
  for i = 1, n do
    local msec = 1700000000 + i * 0.01
    if i % 5 == 0 then
      lines[i] = line(msec, 0.006, 200, "503, 200", "0.003, 0.002", "2",
                      { addr = "127.0.0.1:8081, 127.0.0.1:8082" })
    elseif i % 7 == 0 then
      lines[i] = line(msec, 0.000, 503, "", "", "0", { reason = "circuit open", deadline = "" })
    else
      lines[i] = line(msec, 0.021, 200, "200", "0.020", "1")
    end
  end
  return lines
end

describe("the gateway's try log", function()
  it("is told apart by its first line and read as nginx lists the tries", function()
    local t = assert(trace.read(put("tries.log", log_lines(300))))
    expect.eq(t.format, "jsonl")
    expect.eq(#t.requests, 300)
    local two, none = 0, 0
    for _, r in ipairs(t.requests) do
      if #r.tries == 2 then
        two = two + 1
        expect.eq(r.tries[1].outcome, "refused")
        expect.eq(r.tries[1].latency, 0.003)
        expect.eq(r.tries[2].outcome, "ok")
      elseif #r.tries == 0 then
        none = none + 1
      end
    end
    expect.eq(two, 60)
    expect.eq(none, math.floor(300 / 7) - math.floor(300 / 35))
    -- nres's own refusals: arrivals the dependency never saw, counted
    expect.eq(#t.warnings, 1)
    expect.truthy(t.warnings[1]:find("^" .. none .. " requests refused by nres itself"), t.warnings[1])
    -- sent at msec - request_time
    expect.eq(t.origin, 1699999999)
    expect.near(t.requests[1].t, 1.01 - 0.021, 1e-6)
  end)
  it("reads the Lua balancer's lines, which carry no nres_tries", function()
    local s, tries, written, info = jsonl.line('{"msec":"12.5","request_time":"0.5","status":502,'
      .. '"upstream_status":"502, 504","upstream_response_time":"0.1, 0.4","nres_tries":"","nres_retry":"budget exhausted"}')
    expect.eq(s, 12.0)
    expect.eq(written, 12.5)
    expect.eq(#tries, 2)
    expect.eq(tries[2].outcome, "timeout")
    expect.eq(info.retry, "budget exhausted")
    expect.eq(info.refused, nil)
  end)
  it("names the field of a bad line: expected, got", function()
    local cases = {
      { "{not json", "bad JSON" },
      { "[1, 2]", "expected a JSON object" },
      { '{"request_time":0.1,"status":200,"upstream_status":"200","upstream_response_time":"0.1"}',
        "msec: expected a number, got nothing" },
      { '{"msec":"soon","request_time":0.1,"status":200,"upstream_status":"200","upstream_response_time":"0.1"}',
        'msec: expected a number >= 0, got "soon"' },
      { '{"msec":1,"request_time":0.1,"status":200,"upstream_status":{"a":1},"upstream_response_time":"0.1"}',
        "upstream_status: expected a string, got table" },
      { '{"msec":1,"request_time":0.1,"status":200,"upstream_status":"200, 200","upstream_response_time":"0.1"}',
        "1 upstream times" },
      { '{"msec":1,"request_time":0.1,"status":200,"upstream_status":"","upstream_response_time":""}',
        "no upstream try" },
      { '{"msec":1,"request_time":0.1,"status":200,"upstream_status":"200","upstream_response_time":"0.1",'
        .. '"nres_tries":"3"}', 'nres_tries: expected 1 (the tries in upstream_status "200"), got 3' },
      { '{"msec":1,"request_time":-2,"status":200}', "request_time: expected a number >= 0, got -2" },
    }
    for _, c in ipairs(cases) do
      local ok, err = jsonl.line(c[1])
      expect.eq(ok, nil)
      expect.truthy(err:find(c[2], 1, true), err)
    end
  end)
  it("counts bad lines with file:line, refuses a mostly bad file", function()
    local lines = log_lines(300)
    lines[12] = '{"msec":1700000000.12,"status":200}'
    lines[40] = "{truncated"
    local t = assert(trace.read(put("some-bad.log", lines)))
    expect.truthy(t.warnings[1]:find("^2 lines skipped, not parsed as jsonl"), t.warnings[1])
    expect.truthy(t.warnings[1]:find("some-bad.log:12: request_time: expected a number", 1, true), t.warnings[1])
    for i = 2, 200 do lines[i] = "{}" end
    local ok, err = trace.read(put("mostly-bad.log", lines))
    expect.eq(ok, nil)
    expect.truthy(err:find("do not parse as jsonl", 1, true), err)
  end)
  it("refuses a clock going backwards, sorts a small step back", function()
    local lines = log_lines(300)
    lines[100] = line(1699999990, 0.02, 200, "200", "0.020", "1")
    local ok, err = trace.read(put("back.log", lines))
    expect.eq(ok, nil)
    expect.truthy(err:find("back.log:100: the clock goes backwards", 1, true), err)
    lines = log_lines(300)
    lines[100] = line(1700000000.5, 0.02, 200, "200", "0.020", "1")   -- 0.5 s back
    local t = assert(trace.read(put("jitter.log", lines)))
    local found
    for _, w in ipairs(t.warnings) do found = found or w:find("earlier than the line before", 1, true) end
    expect.truthy(found, table.concat(t.warnings, "; "))
    for i = 2, #t.requests do expect.truthy(t.requests[i].t >= t.requests[i - 1].t, "sorted") end
  end)
  it("fits a model from it", function()
    local lines = {}
    for i = 1, 3000 do
      lines[i] = i % 500 == 0 and line(1700000000 + i * 0.01, 0.006, 200, "503, 200", "0.003, 0.002", "2")
                 or line(1700000000 + i * 0.01, 0.021, 200, "200", "0.020", "1")
    end
    local m = assert(require("nresrun.tune.fit").fit(assert(trace.read(put("fit.log", lines)))))
    expect.truthy(m.healthy.p99_s > 0.015 and m.healthy.p99_s < 0.03, tostring(m.healthy.p99_s))
  end)
end)

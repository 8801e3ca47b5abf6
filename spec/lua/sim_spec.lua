-- SPDX-License-Identifier: MIT
-- sim_spec.lua - the virtual-clock simulator (nresrun.sim, nresrun.sim.dep,
-- nresrun.sim.run, nresrun.sim.report, nresrun.svg): the capacity model on its own,
-- determinism under a seed, the breaker opening in an outage and closing
-- after it, the budget falling and refilling, retry amplification, the
-- accounting identity, the reports, and every validation error with its
-- exact message. Plain luajit, virtual clock only: no real time asserted.
local nres = require "nres"
local nresrun = require "nresrun"
local sim = require "nresrun.sim"
local simdep = require "nresrun.sim.dep"
local sched = require "nresrun.sched"
local report = require "nresrun.sim.report"
local svg = require "nresrun.svg"
local cjson = require "cjson.safe"

local function outage_sim(policies, seed)
  local s = nresrun.simulation{
    name = "spec-outage",
    policies = policies,
    dependency = {
      latency = { lognormal = { 0.01, 0.3 } },
      phases = { { name = "outage", from = 20, to = 35, fail = 1 } },
    },
    load = { rate = 200 },
    duration = 90,
    seed = seed or 1,
  }
  return s
end

-- The comparable part of a run (wall time and memory left out), as text.
local function fingerprint(run)
  local skip = { real_s = true, lua_kb_after = true, lua_kb_before = true, lua_bytes_per_op = true }
  local function clean(v, top)
    if v == false then return "none" end
    if type(v) ~= "table" then return v end
    local t = {}
    for k, x in pairs(v) do if not (top and skip[k]) then t[k] = clean(x) end end
    return t
  end
  return cjson.encode({ series = clean(run.series), transitions = clean(run.transitions),
                        totals = clean(run.totals, true) })
end

local function run_of(doc, name)
  for _, r in ipairs(doc.runs) do if r.policy == name then return r end end
  error("no run " .. name)
end

describe("simdep capacity", function()
  -- Four requests at the same instant against 2 servers and a queue of 1,
  -- each served in exactly 10 ms.
  it("serves, queues in FIFO order, then refuses", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ latency = { fixed = 0.010 }, capacity = { concurrency = 2, queue = 1 } },
                                    simdep.rng(1), s.now, s.driver.sleep, t0)
    local got = {}
    for i = 1, 4 do
      s:spawn(function()
        local r, err = inst.call(nil)
        got[i] = { r = r, err = err, at = (s.now() - t0) / 1e6 }
      end)
    end
    s:run_until(t0 + 1e9)
    expect.eq(got[1].r, true) expect.eq(got[1].at, 10)
    expect.eq(got[2].r, true) expect.eq(got[2].at, 10)
    expect.eq(got[3].r, true, "queued request") expect.eq(got[3].at, 20, "queued request ends after a second service")
    expect.eq(got[4].r, nil) expect.eq(got[4].err, "overloaded") expect.eq(got[4].at, 0, "refused at once")
    expect.eq(inst.requests, 4) expect.eq(inst.refused, 1)
    expect.eq(inst.busy(t0 + 15e6), 1, "one server still busy at 15 ms")
    expect.eq(inst.queued(t0 + 5e6), 1, "one waiting at 5 ms")
    expect.eq(inst.queued(t0 + 10e6), 0, "its turn came at 10 ms")
  end)

  it("a client that stops waiting gets a timeout; the server stays busy", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ latency = { fixed = 0.050 }, capacity = { concurrency = 1 } },
                                    simdep.rng(1), s.now, s.driver.sleep, t0)
    local r1, e1, at1, r2, e2
    s:spawn(function() r1, e1 = inst.call(0.020); at1 = (s.now() - t0) / 1e6 end)
    s:run_until(t0 + 30e6)
    s:spawn(function() r2, e2 = inst.call(nil) end)
    s:run_until(t0 + 1e9)
    expect.eq(r1, nil) expect.eq(e1, "timeout") expect.eq(at1, 20)
    expect.eq(inst.timeouts, 1)
    expect.eq(r2, nil, "the abandoned request still holds the only server")
    expect.eq(e2, "overloaded")
  end)

  it("a rate limit refuses beyond its burst and refills", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ capacity = { rate = 10, burst = 2 } }, simdep.rng(1), s.now, s.driver.sleep, t0)
    local out = {}
    s:spawn(function()
      for i = 1, 3 do out[i] = inst.call(nil) or "refused" end
      s.driver.sleep(100e6)          -- 1 token at 10/s
      out[4] = inst.call(nil) or "refused"
      out[5] = inst.call(nil) or "refused"
    end)
    s:run_until(t0 + 1e9)
    expect.eq(table.concat({ tostring(out[1]), tostring(out[2]), out[3], tostring(out[4]), out[5] }, " "),
              "true true refused true refused")
  end)

  it("phases: an outage fails everything inside [from, to) only", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ phases = { { from = 1, to = 2, fail = 1 } } }, simdep.rng(1), s.now, s.driver.sleep, t0)
    local out = {}
    s:spawn(function()
      for i = 1, 4 do
        out[i] = inst.call(nil) and "ok" or "fail"
        s.driver.sleep(0.5e9)
      end
    end)
    s:run_until(t0 + 10e9)
    expect.eq(table.concat(out, " "), "ok ok fail fail")
  end)

  it("rng: a seed gives a stream in (0, 1); another seed another stream", function()
    local a, b, c = simdep.rng(7), simdep.rng(7), simdep.rng(8)
    local same, differ = true, false
    for _ = 1, 1000 do
      local x, y, z = a(), b(), c()
      if x ~= y then same = false end
      if x ~= z then differ = true end
      if not (x > 0 and x < 1) then error("out of (0, 1): " .. x) end
    end
    expect.truthy(same, "same seed, same stream")
    expect.truthy(differ, "another seed, another stream")
  end)
end)

describe("simulation runs", function()
  local policy = nres.policy{ breaker = { consecutive = 5, break_for = 5, break_max = 5 } }
  local s1 = outage_sim({ default = policy, trivial = "trivial", none = "none" }, 1)
  local doc1 = s1:run()
  local doc1b = s1:run()
  local doc2 = outage_sim({ default = policy, trivial = "trivial", none = "none" }, 2):run()

  it("the same seed replays the same run, the same policy object reused", function()
    for _, name in ipairs { "default", "trivial", "none" } do
      expect.eq(fingerprint(run_of(doc1b, name)), fingerprint(run_of(doc1, name)), name)
    end
  end)

  it("another seed gives another run", function()
    expect.truthy(fingerprint(run_of(doc2, "default")) ~= fingerprint(run_of(doc1, "default")))
    expect.truthy(fingerprint(run_of(doc2, "none")) ~= fingerprint(run_of(doc1, "none")))
  end)

  it("--seed overrides the file's seed", function()
    local d = s1:run{ seed = 2, only = "^none$" }
    expect.eq(#d.runs, 1)
    expect.eq(fingerprint(d.runs[1]), fingerprint(run_of(doc2, "none")))
  end)

  it("every policy sees the same arrivals", function()
    local a, b = run_of(doc1, "none").series.arrivals, run_of(doc1, "trivial").series.arrivals
    for i = 1, 90 do expect.eq(a[i], b[i], "second " .. i) end
    expect.eq(run_of(doc1, "none").totals.arrivals, run_of(doc1, "default").totals.arrivals)
  end)

  it("the breaker opens in the outage's first second and closes after it", function()
    local tr = run_of(doc1, "default").transitions
    expect.truthy(#tr >= 3, "at least open, half-open, closed")
    expect.eq(tr[1].from, "closed") expect.eq(tr[1].to, "open")
    expect.truthy(tr[1].t >= 20 and tr[1].t < 21, "opened at " .. tr[1].t)
    for _, x in ipairs(tr) do
      if x.to == "closed" then expect.truthy(x.t >= 35, "closed only after the outage, at " .. x.t) end
    end
    expect.eq(tr[#tr].to, "closed")
    expect.truthy(tr[#tr].t < 35 + 5 + 1, "closed within one break after the outage, at " .. tr[#tr].t)
    local S = run_of(doc1, "default").series
    expect.eq(S.breaker[25], "open")
    expect.eq(S.breaker[90], "closed")
    local during = 0
    for sec = 22, 35 do during = during + S.dep_requests[sec] end
    expect.truthy(during <= 5, "only half-open probes reach it while open: " .. during)
  end)

  it("retries multiply the load on a dead dependency; the breaker removes it", function()
    local tv, no, de = run_of(doc1, "trivial").series, run_of(doc1, "none").series, run_of(doc1, "default").series
    for sec = 22, 34 do
      expect.eq(tv.dep_requests[sec] >= 2.9 * tv.arrivals[sec], true, "trivial x3 at " .. sec)
      expect.eq(tv.success_ratio[sec], 0, "trivial fails at " .. sec)
      expect.eq(no.success_ratio[sec], 0)
    end
    expect.eq(run_of(doc1, "none").totals.dep_requests_per_op, 1)
    local probes = 0
    for sec = 22, 34 do probes = probes + de.dep_requests[sec] end
    expect.truthy(probes <= 5, "default: only probes, got " .. probes)
  end)

  it("totals: every arrival ends in exactly one outcome", function()
    for _, r in ipairs(doc1.runs) do
      local T = r.totals
      expect.truthy(T.identity_ok, r.policy)
      expect.eq(T.arrivals, T.ok + T.failed + T.rejected + T.shed + T.unfinished, r.policy)
      expect.truthy(T.arrivals > 17000 and T.arrivals < 19000, "about 200/s for 90 s: " .. T.arrivals)
      local sum = 0
      for i = 1, 90 do sum = sum + r.series.arrivals[i] end
      expect.eq(sum, T.arrivals)
    end
    local T = run_of(doc1, "default").totals
    expect.truthy((T.rejected_by["circuit open"] or 0) > 0, "rejections while open")
  end)

  it("the budget falls while retries spend it and refills afterwards", function()
    local s = nresrun.simulation{
      name = "spec-brownout",
      policy = nres.policy{ breaker = false, budget = { ratio = 0.1, min_per_sec = 3 } },
      dependency = { latency = { fixed = 0.005 },
                     phases = { { name = "brownout", from = 10, to = 20, fail = 0.3 } } },
      load = { rate = 100 },
      duration = 40,
    }
    local r = s:run().runs[1]
    local B, T = r.series.budget, r.totals
    expect.eq(T.budget_capacity, 30)
    expect.eq(B[9], 30, "full before")
    expect.truthy(T.budget_min < 3, "falls during the brownout, to " .. T.budget_min)
    expect.truthy(r.series.budget_min[15] < 3, "low inside the brownout")
    expect.eq(B[40], 30, "refilled after")
    expect.truthy((T.rejected_by["budget exhausted"] or 0) > 0, "and retries were refused")
  end)

  it("max_inflight sheds arrivals and the identity still holds", function()
    local s = nresrun.simulation{
      policy = "none", max_inflight = 3,
      dependency = { latency = { fixed = 0.1 } },
      load = { rate = 100, arrivals = "fixed" },
      duration = 5,
    }
    local T = s:run().runs[1].totals
    expect.eq(T.arrivals, 500)
    expect.eq(T.ok, 150, "3 in flight, 100 ms each: 30/s")
    expect.eq(T.shed, 350)
    expect.truthy(T.identity_ok)
  end)

  it("an unbounded wait past the grace period is counted unfinished", function()
    local s = nresrun.simulation{
      policy = "none", grace = 1,
      dependency = { latency = { fixed = 10 } },
      load = { rate = 10, arrivals = "fixed" },
      duration = 2,
    }
    local T = s:run().runs[1].totals
    expect.eq(T.arrivals, 20)
    expect.eq(T.unfinished, 20)
    expect.truthy(T.identity_ok)
  end)
end)

describe("reports", function()
  local dir = os.tmpname()
  os.remove(dir)
  local s = outage_sim({ default = "default", trivial = "trivial" }, 3)
  local out = io.stdout
  local printed = {}
  io.stdout = { write = function(_, ...) for _, x in ipairs { ... } do printed[#printed + 1] = x end end }
  local real_print = print
  print = function(...) printed[#printed + 1] = table.concat({ ... }, "\t") end
  local ok, code = pcall(sim.main, s, "spec/sim.lua", { out = dir })
  io.stdout, print = out, real_print

  local function read(ext)
    local p = io.popen("ls " .. dir .. "/*." .. ext)
    local name = p:read("*l")
    p:close()
    local f = name and io.open(name)
    if not f then return nil, name end
    local text = f:read("*a")
    f:close()
    return text, name
  end

  it("main writes .md, .json and .svg and exits 0", function()
    expect.truthy(ok, tostring(code))
    expect.eq(code, 0)
    local md, md_name = read("md")
    expect.truthy(md_name:match("/spec%-outage%-%d+T%d+Z%.md$"), md_name)
    expect.truthy(md:find("## Summary", 1, true))
    expect.truthy(md:find("| outage | default |", 1, true))
    expect.truthy(md:find("![per-second plot](spec-outage-", 1, true))
    local text = table.concat(printed)
    expect.truthy(text:find("\nVerdict, ranked by success", 1, true), "the verdict went to stdout")
    expect.truthy(not text:find("Breaker transitions", 1, true), "not the transitions table")
    expect.truthy(md:find("## Verdict\n\nVerdict, ranked by success", 1, true), "the .md opens with the verdict")
    expect.truthy(md:find("## Breaker transitions", 1, true), "the .md keeps every transition")
    local _, lines = text:gsub("\n", "")
    expect.truthy(lines <= report.TERMINAL_LINES, lines .. " lines printed")
  end)

  it("the JSON holds every second of every series", function()
    local doc = cjson.decode((read("json")))
    expect.eq(doc.kind, "simulation")
    expect.eq(doc.seed, 3)
    expect.eq(#doc.runs, 2)
    for _, r in ipairs(doc.runs) do
      expect.eq(#r.series.dep_requests, 90, r.policy)
      expect.eq(#r.series.success_ratio, 90, r.policy)
      expect.eq(r.totals.identity_ok, true)
    end
    expect.eq(doc.runs[1].series.breaker[25], "open")
    expect.eq(doc.dependency.phases[1].name, "outage")
    expect.eq(doc.verdict.ranking[1].policy, "default")
    expect.eq(doc.verdict.breakers[1].opens, doc.runs[1].totals.breaker_opens)
  end)

  it("the SVG is one document with a panel per policy", function()
    local text = read("svg")
    expect.truthy(text:match("^<%?xml"), "xml header")
    expect.truthy(text:match("</svg>\n$"), "closed")
    local _, opens = text:gsub("<svg", "")
    expect.eq(opens, 1)
    local _, paths = text:gsub("<path ", "")
    expect.eq(paths, 2 * 4 + 1, "4 lines per panel, and the budget line of default")
    expect.truthy(text:find(">default  (preset default", 1, true))
    expect.truthy(text:find("breaker open", 1, true))
    -- every element closed: count tags
    local _, o = text:gsub("<(%a+)[^>]*[^/]>", "")
    local _, c = text:gsub("</%a+>", "")
    expect.eq(o, c, "open and close tags")
  end)

  os.execute("rm -rf '" .. dir .. "'")
end)

-- The verdict: a ranking and one sentence per policy from its own figures.
describe("verdict", function()
  local verdict = require "nresrun.sim.verdict"

  it("sentences from a run's figures (fixed seed, virtual clock)", function()
    local doc = report.analyse(outage_sim({ default = "default", trivial = "trivial" }, 3):run())
    local v = doc.verdict
    expect.eq(v.rule, "ranked by success; within 0.5 points, by the requests sent while the dependency"
      .. " was down, then by recovery, then by p99")
    expect.eq(v.ranking[1].sentence, "default: same success as trivial (83.2 vs 83.4 %), 176x fewer requests"
      .. " to the dead dependency in outage (3.4 vs 597.5/s), back 2 s after outage (trivial: 1 s).")
    expect.eq(v.ranking[2].sentence, "trivial: same success as default (83.4 vs 83.2 %), 176x more requests"
      .. " to the dead dependency in outage (597.5 vs 3.4/s), back 1 s after outage (default: 2 s).")
    expect.eq(v.ranking[2].rank, 2)
    -- The figures are the run's: the ratio is the outage's requests, trivial's over default's.
    local d, t = run_of(doc, "default").phases[2], run_of(doc, "trivial").phases[2]
    expect.eq(string.format("%.0fx", t.dep / d.dep), "176x")
    expect.eq(string.format("%.1f", t.dep / t.seconds), "597.5")
    expect.eq(#v.breakers, 1)
    expect.eq(v.breakers[1].text, "28 opens, a probe every 0.54 s, open 14.6 s in all")
  end)

  -- A document of made-up figures: the words follow them.
  local function fake(policies, phases)
    local doc = { duration_s = 100, dependency = { phases = phases or {} }, runs = {} }
    for i, p in ipairs(policies) do
      local rows = { { phase = "outside phases", dep = 0, seconds = 100 } }
      for j, ph in ipairs(doc.dependency.phases) do
        rows[j + 1] = { phase = ph.name, seconds = ph.to - ph.from, dep = p.dep[j], success = p.phase_success[j],
                        recovered_after_s = p.back[j] }
      end
      doc.runs[i] = { policy = p.name, phases = rows, series = { breaker = p.transitions and {} or nil },
                      transitions = p.transitions or {},
                      totals = { arrivals = 1000, ok = p.ok, ok_p99_ms = p.p99, dep_requests = p.requests or 1000,
                                 breaker_opens = p.opens or 0, breaker_open_s = p.open_s or 0 } }
    end
    return doc
  end

  it("more or less success in points; a brownout's success named; never back", function()
    local phases = { { name = "outage", from = 10, to = 20, fail = 1 },
                     { name = "brownout", from = 50, to = 70, fail = 0.1 } }
    local v = verdict.of(fake({
      { name = "a", ok = 900, p99 = 100, dep = { 40, 2200 }, phase_success = { 0, 0.99 }, back = { 2, 1 } },
      { name = "b", ok = 850, p99 = 400, dep = { 4000, 2200 }, phase_success = { 0, 0.90 }, back = { false, 1 } },
    }, phases))
    expect.eq(v.ranking[1].sentence, "a: 5.0 points more success than b (90.0 vs 85.0 %), 100x fewer requests"
      .. " to the dead dependency in outage (4.0 vs 400.0/s), 9.0 points more in brownout (99.0 vs 90.0 %),"
      .. " p99 of successes 100 vs 400 ms, back 2 s after outage (b: never).")
    expect.eq(v.ranking[2].sentence, "b: 5.0 points less success than a (85.0 vs 90.0 %), 100x more requests"
      .. " to the dead dependency in outage (400.0 vs 4.0/s), 9.0 points less in brownout (90.0 vs 99.0 %),"
      .. " p99 of successes 400 vs 100 ms, never back after outage (a: 2 s).")
    expect.eq(v.ranking[2].recovery_s, false)
  end)

  it("within half a point, fewer requests rank first; alike policies share a place", function()
    local v = verdict.of(fake({
      { name = "loud", ok = 900, p99 = 50, requests = 3000 },
      { name = "quiet", ok = 898, p99 = 50, requests = 1000 },
      { name = "quiet2", ok = 897, p99 = 55, requests = 1100 },
    }))
    expect.eq(v.ranking[1].policy, "quiet")
    expect.eq(v.ranking[2].policy, "quiet2")
    expect.eq(v.ranking[2].rank, 1, "tied: same success, load and p99 within their factors")
    expect.eq(v.ranking[3].rank, 3)
    expect.eq(v.ranking[1].sentence, "quiet: same success as quiet2 (89.8 vs 89.7 %), as many requests to the"
      .. " dependency (1.00 vs 1.10 per call).")
    expect.eq(v.ranking[3].sentence, "loud: same success as quiet (90.0 vs 89.8 %), 3.0x more requests to the"
      .. " dependency (3.00 vs 1.00 per call).")
  end)

  it("breaker flaps: opens, the gap between probes, time open", function()
    local tr = { { t = 10, to = "open" }, { t = 10.5, to = "half-open" }, { t = 10.51, to = "open" },
                 { t = 11.0, to = "half-open" }, { t = 11.02, to = "open" }, { t = 11.5, to = "half-open" },
                 { t = 11.6, to = "closed" }, { t = 50, to = "open" }, { t = 51, to = "half-open" } }
    local v = verdict.of(fake({ { name = "b", ok = 1, p99 = 1, transitions = tr, opens = 4, open_s = 2.47 },
                                { name = "none", ok = 1, p99 = 1 } }))
    expect.eq(#v.breakers, 1)
    expect.eq(v.breakers[1].text, "4 opens, a probe every 0.50 s, open 2.5 s in all")
    expect.eq(v.breakers[1].probe_every_s, 0.5)
    local quiet = verdict.of(fake({ { name = "b", ok = 1, p99 = 1, transitions = {} } }))
    expect.eq(quiet.breakers[1].text, "never opened")
  end)

  it("docs/reports.md's example prints the verdict the page quotes", function()
    local f = assert(io.open("docs/reports.md"))
    local page = f:read("*a")
    f:close()
    local code = assert(page:match("<!%-%- readme%-test: nresrun %-%->\n```lua\n(.-)```"), "the example")
    local quoted = assert(page:match("```text\n(Verdict, .-\n)```"), "the quoted verdict")
    local doc = assert(loadstring(code, "=docs/reports.md"))():run()
    local text = report.terminal(doc)
    local from = assert(text:find("Verdict, ", 1, true))
    local to = assert(text:find("\n\n", from, true))
    expect.eq(text:sub(from, to), quoted)
  end)

  it("an slo: goodput counts successes within its latency, and the verdict ranks by it", function()
    local function run_with(slo)
      return nresrun.simulation{
        policies = { none = "none", trivial = "trivial" },
        dependency = { latency = { fixed = 0.010 }, phases = { { name = "flaky", from = 5, to = 15, fail = 0.5 } } },
        load = { rate = 100, arrivals = "fixed" }, duration = 20, seed = 1, slo = slo,
      }:run()
    end
    -- Each try takes 10 ms, no backoff: three tries end within 35 ms, one within 15.
    local loose, tight = run_with{ latency = 0.035 }, run_with{ latency = 0.015 }
    local lt, tt = run_of(loose, "trivial").totals, run_of(tight, "trivial").totals
    local ln = run_of(loose, "none").totals
    expect.eq(lt.good, lt.ok, "every success of trivial within 35 ms")
    expect.eq(ln.good, ln.ok, "every success of none within 35 ms")
    -- Within 15 ms: first tries only, about as many as none's successes (the
    -- dependency's draws differ once trivial retries).
    expect.near(tt.good, run_of(tight, "none").totals.ok, 20, "within 15 ms: trivial's first tries only")
    expect.truthy(tt.good < tt.ok, "trivial's retried successes are late")
    local v = report.analyse(tight).verdict
    expect.eq(v.ranking[1].policy, "none", "same goodput, fewer requests")
    expect.eq(v.ranking[2].sentence:match("^trivial: same goodput as none %(%d+%.%d vs %d+%.%d %% within 15 ms%), "
      .. "(%d+%.%d) points more success"), string.format("%.1f", (tt.ok - run_of(tight, "none").totals.ok) / tt.arrivals * 100))
    expect.truthy(report.terminal(tight):find("- SLO: 99 % of calls succeed within 15 ms; goodput", 1, true))
    -- Without a latency it is measured: the p99 of calls with no policy, healthy.
    local measured = nresrun.simulation{ policy = "none", dependency = { latency = { fixed = 0.010 } },
                                         load = { rate = 50 }, duration = 5, slo = {} }:run()
    expect.near(measured.slo.latency, 0.010, 0.001)
    expect.eq(report.analyse(measured).verdict.ranking[1].sentence,
      string.format("none: 100.0 %% success, 100.0 %% goodput within %.3g ms.", measured.slo.latency * 1000),
      "one policy: its own figures, no comparison")
    expect.eq(measured.slo.measured, true)
    expect.eq(measured.slo.quantile, 0.99)
  end)

  it("at most 40 lines on a terminal, even with many policies", function()
    local policies = {}
    for i = 1, 40 do policies[string.format("p%02d", i)] = "default" end
    local doc = nresrun.simulation{
      name = "many", policies = policies,
      dependency = { latency = { fixed = 0.01 }, phases = { { name = "outage", from = 5, to = 8, fail = 1 },
                                                             { name = "slow", from = 12, to = 15, latency_factor = 3 } } },
      load = { rate = 50 }, duration = 20, seed = 1,
    }:run()
    local text = report.terminal(doc, { md = "x.md", json = "x.json", svg = "x.svg" })
    local _, lines = text:gsub("\n", "")
    expect.eq(lines + 1, report.TERMINAL_LINES)
    expect.truthy(text:find("^nresrun simulation: many"), "the heading first")
    expect.truthy(text:find("\n1%. p%d%d: "), "the verdict")
    expect.truthy(text:find("more lines of the verdict in the .md file", 1, true), "what was cut is said")
    expect.truthy(text:find("Not shown here: summary, by phase;", 1, true), text:sub(-200))
    expect.truthy(text:find("reports: x.md x.json x.svg", 1, true))
  end)
end)

describe("svg", function()
  it("ticks step by 1, 2 or 5 x 10^k", function()
    expect.eq(table.concat(svg.ticks(0, 300, 10), " "), "0 50 100 150 200 250 300")
    expect.eq(table.concat(svg.ticks(0, 100, 4), " "), "0 50 100")
    expect.eq(table.concat(svg.ticks(0, 1, 5), " "), "0 0.2 0.4 0.6 0.8 1")
    expect.eq(svg.nice_max(1206), 1500)
    expect.eq(svg.nice_max(0), 1)
  end)
  it("escapes text and breaks lines at gaps", function()
    local text = svg.chart{ x = { min = 0, max = 4 }, title = "a<b & \"c\"",
      panels = { { series = { { values = { 1, 2, false, 3, 4 } } } } } }
    expect.truthy(text:find("a&lt;b &amp; &quot;c&quot;", 1, true))
    local d = text:match('<path d="([^"]+)"')
    local _, moves = d:gsub("M", "")
    expect.eq(moves, 2, "a gap starts a new segment")
  end)
  it("refuses a chart without an x range", function()
    expect.error(function() svg.chart{ panels = { {} }, x = { min = 1, max = 1 } } end,
      "nresrun.svg: x: expected { min, max } with max > min")
  end)
end)

describe("the shipped simulation", function()
  it("bench/sim-outage.lua loads as a simulation", function()
    local s = dofile("bench/sim-outage.lua")
    expect.truthy(sim.is_simulation(s))
    expect.truthy(not sim.is_simulation(nresrun.scenario{ dependency = nresrun.dep.model{}, load = { workers = 1 }, arms = { raw = nresrun.raw } }))
    expect.truthy(not sim.is_simulation({}))
    local names = {}
    for _, p in ipairs(s.policies) do names[#names + 1] = p.name end
    expect.eq(table.concat(names, " "), "default default-no-budget none trivial")
  end)
end)

-- { simulation table, exact message without the "file:line: " position }
local base = function(over)
  local t = { policy = "default", dependency = { latency = { fixed = 0.01 } }, load = { rate = 10 }, duration = 60 }
  for k, v in pairs(over) do
    if v == "nil" then t[k] = nil else t[k] = v end
  end
  return t
end
local bad = {
  { base{ polcy = 1 }, 'simulation.polcy: unknown field (did you mean "policies"?)' },
  { base{ duration = "nil" }, "simulation.duration: missing (simulated seconds)" },
  { base{ duration = 0 }, "simulation.duration: expected whole simulated seconds from 1 to 86400, got 0" },
  { base{ duration = 1.5 }, "simulation.duration: expected whole simulated seconds from 1 to 86400, got 1.5" },
  { base{ seed = -1 }, "simulation.seed: expected an integer from 0 to 2147483646, got -1" },
  { base{ name = "a b" }, "simulation.name: expected a name of letters, digits, '-', '_' or '.', got \"a b\"" },
  { base{ max_inflight = 0 }, "simulation.max_inflight: expected an integer from 1 to 1000000, got 0" },
  { base{ grace = -1 }, "simulation.grace: expected simulated seconds from 0 to 3600, got -1" },
  { base{ policy = "nil" }, "simulation.policy: missing (a policy, a preset name, or policies = { name = policy, ... })" },
  { base{ policies = { a = "none" } }, "simulation.policies: give policy = ... or policies = { name = ... }, not both" },
  { base{ policy = "nope" }, 'simulation.policy: unknown preset "nope" (did you mean "none"? presets: batch, default, gateway, http, none, trivial)' },
  { base{ policy = 42 }, "simulation.policy: expected a policy (nres.policy{...}) or a preset name, got 42" },
  { base{ policy = "nil", policies = {} }, "simulation.policies: expected a table of name = policy or preset name, got a table" },
  { base{ policy = "nil", policies = { x = {} } }, "simulation.policies.x: expected a policy (nres.policy{...}) or a preset name, got a table" },
  { base{ policy = nres.policy{ budget = "shared-spec-budget" } },
    'simulation.policy.budget: the named budget "shared-spec-budget" is shared by the whole process; a simulation needs fresh state per run (give a budget table)' },
  { base{ dependency = "nil" }, "simulation.dependency: missing (a table: latency, fail_prob, fail_every, capacity, phases)" },
  { base{ dependency = 5 }, "simulation.dependency: expected a table { latency, fail_prob, fail_every, capacity, phases }, got 5" },
  { base{ dependency = nresrun.dep.fn(function() return true end) },
    "simulation.dependency: a nresrun.dep.fn dependency needs real time; a simulation models its dependency (a table or nresrun.dep.model{...})" },
  { base{ dependency = { latncy = 1 } }, "simulation.dependency.latncy: unknown field (capacity, error, fail_every, fail_prob, latency, name, phases)" },
  { base{ dependency = { latency = { normal = 1 } } }, "simulation.dependency.latency.normal: unknown latency kind (fixed, uniform, lognormal)" },
  { base{ dependency = { latency = { lognormal = { 0, 1 } } } },
    "simulation.dependency.latency.lognormal: expected { median seconds > 0, sigma >= 0 }, got a table" },
  { base{ dependency = { fail_prob = 2 } }, "simulation.dependency.fail_prob: expected a probability in [0, 1], got 2" },
  { base{ dependency = { fail_prob = 0.1, fail_every = 2 } }, "simulation.dependency: fail_every and fail_prob are two failure models; choose one" },
  { base{ dependency = { capacity = {} } }, "simulation.dependency.capacity: expected concurrency (servers) and/or rate (requests per second), got neither" },
  { base{ dependency = { capacity = { concurrency = 0 } } }, "simulation.dependency.capacity.concurrency: expected an integer from 1 to 100000, got 0" },
  { base{ dependency = { capacity = { rate = 5, queue = 3 } } }, "simulation.dependency.capacity.queue: has no effect without capacity.concurrency" },
  { base{ dependency = { capacity = { concurrency = 4, burst = 3 } } }, "simulation.dependency.capacity.burst: has no effect without capacity.rate" },
  { base{ dependency = { capacity = { concurency = 4 } } },
    "2 problems:\n  simulation.dependency.capacity.concurency: unknown field (burst, concurrency, queue, rate, refusal)\n  simulation.dependency.capacity: expected concurrency (servers) and/or rate (requests per second), got neither" },
  { base{ dependency = { phases = { { from = 10, to = 5, fail = 1 } } } }, "simulation.dependency.phases[1].to: expected after from (10 s), got 5" },
  { base{ dependency = { phases = { { from = 70, to = 80, fail = 1 } } } },
    "simulation.dependency.phases[1].from: 70 s is not before the end of the simulation (duration 60 s)" },
  { base{ dependency = { phases = { { from = 1, to = 2 } } } }, "simulation.dependency.phases[1]: changes nothing; set fail, latency_factor and/or capacity" },
  { base{ dependency = { phases = { { from = 1, to = 2, fail = 1, kind = "x" } } } },
    "simulation.dependency.phases[1].kind: unknown field (capacity, fail, from, latency_factor, name, ramp, to)" },
  { base{ dependency = { phases = { { from = 1, to = 2, capacity = 0.5 } } } },
    "simulation.dependency.phases[1].capacity: has no effect without dependency.capacity" },
  { base{ dependency = { capacity = { concurrency = 2 }, phases = { { from = 1, to = 2, capacity = 0 } } } },
    "simulation.dependency.phases[1].capacity: expected a factor on the capacity, > 0 and <= 1000, got 0" },
  { base{ dependency = { phases = { { from = 1, to = 2, fail = 1, ramp = 1 } } } },
    "simulation.dependency.phases[1].ramp: has no effect without latency_factor" },
  { base{ dependency = { phases = { { from = 1, to = 2, latency_factor = 2, ramp = 5 } } } },
    "simulation.dependency.phases[1].ramp: 5 s is longer than the phase (1 s)" },
  { base{ dependency = { phases = { { from = 1, to = 2, latency_factor = 2, ramp = -1 } } } },
    "simulation.dependency.phases[1].ramp: expected seconds > 0, got -1" },
  { base{ dependency = { phases = { { from = 1, to = 2, fail = 1.5 } } } }, "simulation.dependency.phases[1].fail: expected a probability in [0, 1], got 1.5" },
  { base{ load = "nil" }, "simulation.load: expected { rate = arrivals per second }, got nil" },
  { base{ load = { rate = 0 } }, "simulation.load.rate: expected arrivals per second (> 0), got 0" },
  { base{ load = { rate = 10, arival = "fixed" } }, 'simulation.load.arival: unknown field (valid: arrivals, rate)' },
  { base{ load = { rate = 10, arrivals = "burst" } }, 'simulation.load.arrivals: expected "poisson" or "fixed", got "burst"' },
  { base{ slo = 0.25 }, "simulation.slo: expected { latency = seconds, quantile = share }, got 0.25" },
  { base{ slo = { latency = 0 } }, "simulation.slo.latency: expected seconds (> 0, at most 3600), got 0" },
  { base{ slo = { quantile = 1 } }, "simulation.slo.quantile: expected a share of calls in (0, 1), e.g. 0.99, got 1" },
  { base{ slo = { latncy = 1 } }, 'simulation.slo.latncy: unknown field (did you mean "latency"?)' },
  { base{ load = { rate = 1e6 }, duration = 3600 },
    "simulation.load.rate: 1000000 arrivals/s for 3600 s is 3600000000 arrivals per policy; at most 20000000 (lower the rate or the duration)" },
}

-- The tournament form: scenarios and seeds instead of one dependency.
local function tour(over, sc_over)
  local sc = { name = "s1", dependency = { latency = { fixed = 0.01 } }, load = { rate = 10 }, duration = 10 }
  for k, v in pairs(sc_over or {}) do
    if v == "nil" then sc[k] = nil else sc[k] = v end
  end
  local t = { policies = { "none", "default" }, seeds = { 1, 2 }, scenarios = { sc } }
  for k, v in pairs(over) do
    if v == "nil" then t[k] = nil else t[k] = v end
  end
  return t
end
local bad_tour = {
  { tour{ duration = 10 }, "simulation.duration: give it per scenario (simulation.scenarios[i].duration) in a tournament" },
  { tour{ seed = 1 }, "simulation.seed: a tournament takes seeds = { ... }" },
  { tour{ seeds = "nil" }, "simulation.seeds: missing (a list of integer seeds, e.g. { 1, 2, 3, 4, 5 })" },
  { tour{ seeds = { 1, -2 } }, "simulation.seeds[2]: expected an integer from 0 to 2147483646, got -2" },
  { tour{ seeds = {} }, "simulation.seeds: expected a list of 1 to 1000 integer seeds, got a table" },
  { tour{ scenarios = {} }, "simulation.scenarios: expected a list of { name, dependency, load, duration }, got a table" },
  { tour({}, { name = "nil" }), "simulation.scenarios[1].name: expected a name of letters, digits, '-', '_' or '.', got nil" },
  { tour({}, { duration = 0 }), "simulation.scenarios[1].duration: expected whole simulated seconds from 1 to 86400, got 0" },
  { tour({}, { loads = 1 }), 'simulation.scenarios[1].loads: unknown field (did you mean "load"?)' },
  { tour({}, { dependency = { phases = { { from = 1, to = 2, fail = 3 } } } }),
    "simulation.scenarios[1].dependency.phases[1].fail: expected a probability in [0, 1], got 3" },
  { tour{ scenarios = { { name = "a", dependency = {}, load = { rate = 1 }, duration = 5 },
                        { name = "a", dependency = {}, load = { rate = 1 }, duration = 5 } } },
    'simulation.scenarios[2].name: "a" is also scenarios[1]' },
  { tour{ policies = { "none", "none" } }, 'simulation.policies[2]: "none" is also policies[1]' },
  { tour{ policies = { "none", 5 } },
    "simulation.policies[2]: expected a preset name in a list (name = nres.policy{...} in a table), got 5" },
  { base{ seeds = { 1 } }, "simulation.seeds: only with scenarios = { ... } (one run takes seed = n)" },
  { tour({}, { slo = { quantile = 0 } }),
    "simulation.scenarios[1].slo.quantile: expected a share of calls in (0, 1), e.g. 0.99, got 0" },
}

-- One test per { simulation table, message } case.
local function refused(label, cases)
  for i, case in ipairs(cases) do
    it(string.format("bad %s %d: %s", label, i, case[2]:sub(1, 60)), function()
      expect.error(function()
        local s = nresrun.simulation(case[1])   -- not a tail call: keeps the position
        return s
      end, case[2], "sim_spec.lua")
    end)
  end
end

describe("tournament", function()
  local tmod = require "nresrun.sim.tournament"
  refused("tournament", bad_tour)
  it("a capacity phase halves the servers: a second request at once queues", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ latency = { fixed = 0.010 }, capacity = { concurrency = 2, queue = 0 },
                                      phases = { { from = 1, to = 2, capacity = 0.5 } } },
                                    simdep.rng(1), s.now, s.driver.sleep, t0)
    local got = {}
    for i, at in ipairs { 0.5, 0.5, 1.5, 1.5 } do
      s:spawn(function()
        s.driver.sleep(at * 1e9)
        local r, err = inst.call(nil)
        got[i] = { at = at, r = r, err = err }
      end)
    end
    s:run_until(t0 + 3e9)
    expect.eq(got[1].r, true) expect.eq(got[2].r, true, "two servers before the phase")
    expect.eq(got[3].r, true) expect.eq(got[4].err, "overloaded", "one server inside it")
  end)
  it("a ramp grows the latency factor linearly from 1", function()
    local s = sched.new{ virtual = true }
    local t0 = s.now()
    local inst = simdep.instantiate({ latency = { fixed = 0.010 },
                                      phases = { { from = 10, to = 30, latency_factor = 3, ramp = 10 } } },
                                    simdep.rng(1), s.now, s.driver.sleep, t0)
    local took = {}
    for _, at in ipairs { 5, 10, 15, 25 } do
      s:spawn(function()
        s.driver.sleep(at * 1e9)
        local t = s.now()
        inst.call(nil)
        took[#took + 1] = (s.now() - t) / 1e6
      end)
    end
    s:run_until(t0 + 40e9)
    expect.near(took[1], 10, 1e-6) expect.near(took[2], 10, 1e-6)
    expect.near(took[3], 20, 1e-6, "halfway up the ramp: x2") expect.near(took[4], 30, 1e-6, "held at x3")
  end)
  it("runs every policy on every seed; measures downtime, recovery and overload", function()
    local t = nresrun.simulation{
      policies = { "none", "default" }, seeds = { 3, 4 },
      scenarios = {
        { name = "out", dependency = { latency = { fixed = 0.01 }, phases = { { name = "o", from = 10, to = 20, fail = 1 } } },
          load = { rate = 100 }, duration = 30 },
        { name = "ov", dependency = { latency = { fixed = 0.01 }, capacity = { concurrency = 2, queue = 2 },
                                      phases = { { name = "h", from = 5, to = 15, capacity = 0.5 } } },
          load = { rate = 150 }, duration = 20 },
      },
    }
    local doc = tmod.run(t)
    expect.eq(table.concat(doc.policies, " "), "none default")
    local out = doc.scenarios[1]
    expect.eq(#out.results.none, 2)
    local n, d = out.results.none[1], out.results.default[1]
    expect.near(n.down_req_per_op, 1, 1e-9, "none sends every arrival to a dead dependency")
    expect.truthy(d.down_req_per_op < 0.2, "the default's breaker keeps most of it away")
    expect.eq(n.recovery_s, 1)
    expect.near(n.success, 2 / 3, 0.02)
    local ov = doc.scenarios[2].results.none[1]
    expect.near(ov.capacity_rps, 100, 1e-9, "one server of 10 ms")
    expect.near(ov.offered_rps, 150, 15)
    expect.truthy(ov.served_rps <= 101 and ov.served_rps > 90)
    -- check: a target that cannot hold is reported for the policy and seed.
    local misses = tmod.check(doc, { policies = { "default" }, none_margin = 0, trivial_share = 1,
                                     trivial_scenarios = {}, down_req_per_op = 0, recovery_s = 0,
                                     overload_load = 0 })
    local seen = {}
    for _, m in ipairs(misses) do seen[m.scenario .. " " .. m.target .. " " .. m.seed] = true end
    expect.truthy(seen["out dep req/arrival while down 3"])
    expect.truthy(seen["out recovery s 4"])
    expect.truthy(seen["ov overload dep req/s (x capacity) 3"])
    local md = tmod.markdown(doc, { misses = misses })
    expect.truthy(md:find("| none |", 1, true))
    expect.truthy(md:find("## Targets", 1, true))
    expect.truthy(tmod.plot(doc, out):find("<svg", 1, true))
  end)
  it("goodput within each scenario's SLO beside success; the interactive presets side by side", function()
    local t = nresrun.simulation{
      policies = { "none", "trivial", "http" }, seeds = { 1 },
      slo = { latency = 0.015 },
      scenarios = {
        { name = "flaky", dependency = { latency = { fixed = 0.01 }, phases = { { name = "f", from = 5, to = 15, fail = 0.5 } } },
          load = { rate = 100, arrivals = "fixed" }, duration = 20 },
        { name = "measured", slo = { quantile = 0.9 }, dependency = { latency = { fixed = 0.02 } },
          load = { rate = 50 }, duration = 10 },
      },
    }
    local doc = tmod.run(t)
    local flaky, measured = doc.scenarios[1], doc.scenarios[2]
    expect.eq(flaky.slo.latency, 0.015, "the tournament's slo")
    expect.eq(flaky.slo.measured, false)
    expect.near(measured.slo.latency, 0.02, 0.002, "the scenario's quantile, its latency measured")
    expect.eq(measured.slo.quantile, 0.9)
    local tr = flaky.results.trivial[1]
    expect.truthy(tr.goodput < tr.success - 0.1, "trivial's retried successes come after 15 ms")
    expect.near(flaky.results.none[1].goodput, flaky.results.none[1].success, 1e-9, "none has no late success")
    local md = tmod.markdown(doc, {})
    expect.truthy(md:find("| policy | success % | goodput % |", 1, true), "the column")
    expect.truthy(md:find("SLO: 99 % of calls within 15 ms.", 1, true), "the scenario's SLO")
    expect.truthy(md:find("## Interactive presets: success and goodput", 1, true))
    expect.truthy(md:find("| scenario | SLO ms | none | http |", 1, true), md)
    expect.truthy(md:find(string.format("| flaky | 15 | %.1f / %.1f |", flaky.results.none[1].success * 100,
                                        flaky.results.none[1].goodput * 100), 1, true), "a row from the figures")
  end)

  it("prints at most 40 lines: success / goodput per scenario, the misses that fit, the report's path", function()
    local scenarios = {}
    for i = 1, 45 do
      scenarios[i] = { name = "s" .. i, dependency = { latency = { fixed = 0.01 } }, load = { rate = 20 }, duration = 3 }
    end
    local doc = tmod.run(nresrun.simulation{ policies = { "none", "trivial" }, seeds = { 1 }, scenarios = scenarios })
    local misses = {}
    for i = 1, 50 do misses[i] = { scenario = "s1", policy = "none", seed = 1, target = "t", got = 1, want = 2 } end
    for _, m in ipairs { misses, {} } do
      local text = tmod.terminal(doc, m, "x.md")
      local _, lines = text:gsub("\n", "")
      expect.truthy(lines + 1 <= tmod.TERMINAL_LINES, (lines + 1) .. " lines")
      expect.truthy(text:find("| s1 | 10", 1, true), "the first scenario's row")
      expect.truthy(text:find("more scenarios in the report", 1, true))
      expect.truthy(text:find("report: x.md", 1, true))
    end
    expect.truthy(tmod.terminal(doc, {}, "x.md"):find("Targets: all met.", 1, true))
    expect.truthy(tmod.terminal(doc, misses, "x.md"):find("Targets: 50 missed (the first", 1, true))
  end)

  it("bench/tournament.lua loads as a tournament of the six presets", function()
    local s = dofile("bench/tournament.lua")
    expect.truthy(sim.is_simulation(s) and s.scenarios ~= nil)
    local names = {}
    for _, p in ipairs(s.policies) do names[#names + 1] = p.name end
    expect.eq(table.concat(names, " "), "none trivial default http gateway batch")
  end)
end)

describe("validation", function()
  refused("simulation", bad)
  it("a dependency made with nresrun.dep.model is accepted", function()
    local s = nresrun.simulation(base{ dependency = nresrun.dep.model{ fail_prob = 0.1, latency = { fixed = 0.01 } } })
    expect.truthy(sim.is_simulation(s))
  end)
  it("not a table", function()
    expect.error(function() local s = nresrun.simulation(5) return s end,
      "nresrun.simulation: expected a table, got 5", "sim_spec.lua")
  end)
end)

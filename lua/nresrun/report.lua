-- SPDX-License-Identifier: MIT
-- nresrun.report: nresrun's reports, JSON (every repetition) and Markdown.
--
-- The JSON keeps machine facts, versions, the seed, the settings and every
-- repetition of every cell under stable names, so anything the Markdown
-- says can be recomputed from it. The Markdown shows, per section, each
-- cell's medians with their spread (± half the range, as % of the median),
-- a ratio against the section's baseline arm under the same dependency and
-- load, what differs from that arm (completion, dependency requests per
-- operation; throughput only in a closed loop), and a warning block for untrusted or failed cells. A section whose
-- cells ran the HTTP client (they report client_requests_per_op) gets a
-- second table: the handler's own cost, i.e. heap B/op minus dependency
-- requests/op x the transport's B/request (the baseline arm's heap B/op /
-- its dependency requests/op, same dependency and load: raw on /flaky is
-- the issue's raw-flaky). Every section also gets a table of load, memory
-- and GC: latency of admitted work (not rejected), rejections by reason,
-- RSS at the window's start and end and the peak, the share of the window
-- paused in garbage collection, and for threads cells whether the shared
-- policy's calls and attempts matched the threads' exactly.
local cjson = require "cjson.safe"
local load = require "nresrun.load"

local format, concat, sort = string.format, table.concat, table.sort
local floor = math.floor

local _M = { _VERSION = "0.1.0" }

local function read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function cmd(c)
  local p = io.popen(c .. " 2>/dev/null")
  if not p then return nil end
  local s = p:read("*a")
  p:close()
  return s and s:gsub("%s+$", "") or nil
end

function _M.machine()
  local cpuinfo = read("/proc/cpuinfo") or ""
  local meminfo = read("/proc/meminfo") or ""
  return {
    cpu = cpuinfo:match("model name%s*:%s*([^\n]+)") or "unknown",
    cores = select(2, cpuinfo:gsub("\nprocessor%s*:", "")) + (cpuinfo:match("^processor") and 1 or 0),
    memory_kb = tonumber(meminfo:match("MemTotal:%s*(%d+)")),
    kernel = cmd("uname -sr"),
    hostname = cmd("hostname"),
  }
end

local function median(list)
  local c = {}
  for i, v in ipairs(list) do c[i] = v end
  sort(c)
  local n = #c
  if n == 0 then return nil end
  return n % 2 == 1 and c[(n + 1) / 2] or (c[n / 2] + c[n / 2 + 1]) / 2
end
_M.median = median

-- ± half the range as % of the median.
local function spread(list)
  local m = median(list)
  if not m or m == 0 or #list < 2 then return 0 end
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(list) do lo = math.min(lo, v); hi = math.max(hi, v) end
  return (hi - lo) / 2 / math.abs(m) * 100
end
_M.spread = spread

local function num(v, digits)
  if v == nil then return "-" end
  if v ~= v then return "nan" end
  local a = math.abs(v)
  if a >= 1e6 then return format("%.2fM", v / 1e6) end
  if a >= 1e4 then return format("%.1fk", v / 1e3) end
  if a >= 100 then return format("%.0f", v) end
  return format("%." .. (digits or 2) .. "f", v)
end

-- Group results (one per repetition) into cells, in plan order.
local function cells_of(results)
  local by_key, by_arm, order = {}, {}, {}
  for _, r in ipairs(results) do
    local c = by_key[r.key]
    if not c then
      c = { key = r.key, section = r.section, arm = r.arm, dependency = r.dependency,
            load = r.load, load_value = r.load_value, baseline = r.baseline,
            group = r.group, index = r.index, reps = {} }
      by_key[r.key] = c
      by_arm[r.group .. "\0" .. r.arm] = c
      order[#order + 1] = c
    end
    c.reps[#c.reps + 1] = r
  end
  sort(order, function(a, b) return a.index < b.index end)
  return order, by_arm
end

local function values(c, field)
  local out = {}
  for _, r in ipairs(c.reps) do
    if r.ok and type(r[field]) == "number" then out[#out + 1] = r[field] end
  end
  return out
end

local function cell_ok(c)
  for _, r in ipairs(c.reps) do if not r.ok then return false end end
  return true
end

local function cell_trusted(c)
  for _, r in ipairs(c.reps) do if not (r.ok and r.trusted) then return false end end
  return true
end

local function is_http(c)
  for _, r in ipairs(c.reps) do
    if r.ok and r.client_requests_per_op ~= nil then return true end
  end
  return false
end

-- The handler's own cost table of one section's http cells (w: writer).
local function own_cost(w, cells, by_arm)
  local rows = {}
  for _, c in ipairs(cells) do if is_http(c) then rows[#rows + 1] = c end end
  if #rows == 0 then return end
  w("")
  w("Handler's own cost: own B/op = heap B/op − dep req/op × transport B/req, where transport"
    .. " B/req is the baseline arm's heap B/op ÷ its dep req/op under the same dependency and"
    .. " load (raw on /flaky = raw-flaky). Heap = libnres's allocator (the C client);"
    .. " GC = the Lua state. ops/s ratio against the baseline arm, as above.")
  w("")
  w("| arm | dependency | heap B/op | dep req/op | transport B/req | own B/op | GC B/op | client req/op | ops/s ratio |")
  w("|---|---|---|---|---|---|---|---|---|")
  for _, c in ipairs(rows) do
    local heap = median(values(c, "heap_bytes_per_op"))
    local req = median(values(c, "dependency_requests_per_op"))
    local b = c.baseline and by_arm[c.group .. "\0" .. c.baseline]
    local per_req, own, ratio
    if b then
      local bh, br = median(values(b, "heap_bytes_per_op")), median(values(b, "dependency_requests_per_op"))
      if bh and br and br > 0 then per_req = bh / br end
      local m, bm = median(values(c, "ops_per_sec")), median(values(b, "ops_per_sec"))
      if m and bm and bm > 0 then ratio = m / bm end
    end
    if heap and req and per_req then own = heap - req * per_req end
    w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", c.arm, c.dependency,
      num(heap, 1), num(req), num(per_req, 1), num(own, 1),
      num(median(values(c, "gc_bytes_per_op")), 1), num(median(values(c, "client_requests_per_op"))),
      ratio and format("%.2f", ratio) or "-")
  end
end

-- What differs between each arm and its baseline under the same dependency
-- and load: completion and dependency requests per operation, then the
-- throughput ratio in a closed loop. In an open loop every arm is offered
-- the same rate, so its ops/s ratio reads about 1.00 whatever the arm does;
-- the line says so (w: writer).
_M.SAME_COMPLETION = 0.005    -- completion within half a point reads "as much"
_M.SAME_REQUESTS = 1.05       -- requests per op within 5 % read "as many"
_M.SAME_OPS = 1.05            -- closed-loop throughput within 5 % reads "as fast"

local function x(r) return format("%.2fx", r) end

local function differs(c, b)
  local mc, bc = median(values(c, "completion_ratio")), median(values(b, "completion_ratio"))
  local mr, br = median(values(c, "dependency_requests_per_op")), median(values(b, "dependency_requests_per_op"))
  local m, bm = median(values(c, "ops_per_sec")), median(values(b, "ops_per_sec"))
  local parts = {}
  if mc and bc and math.abs(mc - bc) >= _M.SAME_COMPLETION then
    parts[#parts + 1] = format("completes %.3f of its operations where %s completes %.3f", mc, b.arm, bc)
  end
  if mr and br and br > 0 and mr > 0 and (mr >= br * _M.SAME_REQUESTS or br >= mr * _M.SAME_REQUESTS) then
    parts[#parts + 1] = format("%s the dependency requests per operation (%.2f vs %.2f)", x(mr / br), mr, br)
  end
  local open = load.is_open(c.load)
  if not open and m and bm and bm > 0 and (m >= bm * _M.SAME_OPS or bm >= m * _M.SAME_OPS) then
    parts[#parts + 1] = m / bm >= 0.01 and format("%s the operations per second", x(m / bm))
                        or format("%.0fx fewer operations per second", bm / m)
  end
  if #parts == 0 then return nil end
  return format("%s vs %s (%s, %s=%s): %s%s.", c.arm, b.arm, c.dependency, c.load, tostring(c.load_value),
    concat(parts, ", "), open and "; both were offered the same rate, so ops/s does not tell them apart" or "")
end

local function differences(w, cells, by_arm)
  local lines, compared = {}, 0
  for _, c in ipairs(cells) do
    local b = c.baseline and c.baseline ~= c.arm and by_arm[c.group .. "\0" .. c.baseline]
    if b and cell_ok(c) and cell_ok(b) then
      compared = compared + 1
      local l = differs(c, b)
      if l then lines[#lines + 1] = l end
    end
  end
  if compared == 0 then return end
  w("")
  if #lines == 0 then
    w("What differs: every arm completes as much as its baseline with as many dependency requests per operation.")
    return
  end
  w("What differs from the baseline (completion, dependency requests per operation, and throughput in a closed loop;"
    .. " arms not listed read the same as their baseline):")
  w("")
  for _, l in ipairs(lines) do w("- %s", l) end
end

-- Rejection reasons of a cell, summed over repetitions: "budget exhausted 12, shed 3".
local function reasons_of(c)
  local sum, keys = {}, {}
  for _, r in ipairs(c.reps) do
    for k, v in pairs(r.rejected_by or {}) do
      if sum[k] == nil then keys[#keys + 1] = k end
      sum[k] = (sum[k] or 0) + v
    end
    for k, v in pairs(r.rejected_by_source or {}) do
      local key = "source " .. k
      if sum[key] == nil then keys[#keys + 1] = key end
      sum[key] = (sum[key] or 0) + v
    end
    for k, v in pairs(r.rejected_by_class or {}) do
      local key = "class " .. k
      if sum[key] == nil then keys[#keys + 1] = key end
      sum[key] = (sum[key] or 0) + v
    end
  end
  sort(keys)
  local out = {}
  for _, k in ipairs(keys) do out[#out + 1] = format("%s %d", k, sum[k]) end
  return #out > 0 and concat(out, ", ") or "-"
end

local function exact_of(c)
  local any, all = false, true
  for _, r in ipairs(c.reps) do
    if r.calls_exact ~= nil then
      any = true
      all = all and r.calls_exact and r.requests_exact
    end
  end
  if not any then return "-" end
  return all and "yes" or "**no**"
end

-- A table as data: { header, text(c, x) } per column; x is what the
-- caller worked out for the cell (the main table's ops/s and ratio).
local function med(field, digits)
  return function(c) return num(median(values(c, field)), digits) end
end
local function arm(c) return c.arm end
local function dependency(c) return c.dependency end
local function load_of(c) return c.load .. "=" .. tostring(c.load_value) end

local function table_rows(w, columns, cells, x_of)
  local head, rule = {}, {}
  for i, col in ipairs(columns) do head[i], rule[i] = col[1], "---" end
  w("%s", "| " .. concat(head, " | ") .. " |")
  w("%s", "|" .. concat(rule, "|") .. "|")
  for _, c in ipairs(cells) do
    local x, row = x_of and x_of(c) or nil, {}
    for i, col in ipairs(columns) do row[i] = col[2](c, x) end
    w("%s", "| " .. concat(row, " | ") .. " |")
  end
end

-- The main table of a section: medians, the ratio against the baseline.
_M.MAIN_COLUMNS = {
  { "arm", arm }, { "dependency", dependency }, { "load", load_of },
  { "ops/s", function(_, x) return format("%s ±%.0f%%", x.ok and num(x.m) or "FAILED", spread(x.ops)) end },
  { "ratio", function(_, x) return x.ratio end },
  { "p50 µs", med("p50_us", 1) }, { "p99 µs", med("p99_us", 1) },
  { "attempts/op", med("attempts_per_op") }, { "retries/op", med("retries_per_op") },
  { "dep req/op", med("dependency_requests_per_op") }, { "completion", med("completion_ratio", 3) },
  { "heap B/op", med("heap_bytes_per_op", 1) }, { "GC B/op", med("gc_bytes_per_op", 1) },
  { "trusted", function(c) return cell_trusted(c) and "yes" or "**no**" end },
}

-- Load, memory and GC of a section's cells.
_M.LOAD_COLUMNS = {
  { "arm", arm }, { "dependency", dependency }, { "load", load_of },
  { "admitted p50 µs", med("p50_admitted_us", 1) }, { "admitted p99 µs", med("p99_admitted_us", 1) },
  { "rejections", reasons_of },
  { "hedges/op (won, canceled)", function(c)
      local hedges = median(values(c, "hedges_per_op"))
      return (hedges and hedges > 0) and format("%s (%s, %s)", num(hedges, 3),
        num(median(values(c, "hedges_won_per_op")), 3), num(median(values(c, "hedges_canceled_per_op")), 3)) or "-"
    end },
  { "RSS start→end KiB", function(c)
      return num(median(values(c, "rss_start_kb")), 0) .. "→" .. num(median(values(c, "rss_end_kb")), 0)
    end },
  { "peak RSS KiB", med("peak_rss_kb", 0) },
  { "GC pause %", function(c)
      local share = median(values(c, "gc_pause_share"))
      return share and format("%.2f", share * 100) or "-"
    end },
  { "GC collections", med("gc_collections", 0) },
  { "exact", exact_of },
}

-- Load, memory and GC of one section's cells (w: writer).
local function load_table(w, cells)
  if #cells == 0 then return end
  w("")
  w("Load, memory and GC: admitted = not rejected; rejections summed over repetitions"
    .. " (\"source\" = the policy's own count by where it refused, over the whole run in threads"
    .. " cells); GC = share of the window"
    .. " paused in garbage collection (LuaJIT: collections run by the cell at LuaJIT's pacing and"
    .. " timed; node: perf_hooks 'gc' entries), with collections per run; exact = threads cells:"
    .. " the shared policy's calls and attempts = the threads' operations and dependency requests;"
    .. " \"class\" = refusals by criticality; hedges/op = further attempts sent, the share of calls"
    .. " a hedge answered, losers canceled.")
  w("")
  table_rows(w, _M.LOAD_COLUMNS, cells)
end

-- What follows a section's main table, in order (w, cells, by_arm).
_M.SECTION_PARTS = { differences, own_cost, load_table }

local function section_end(w, cells, by_arm)
  for _, part in ipairs(_M.SECTION_PARTS) do part(w, cells, by_arm) end
end

-- Markdown.
function _M.markdown(doc)
  local out = {}
  local function w(...) out[#out + 1] = format(...) end
  w("# nresrun: %s", doc.scenario)
  w("")
  w("%s UTC · seed %d · %s · %d run(s) · %s, %d cores · nres %s · %s",
    doc.started, doc.seed, doc.settings.quick and "quick" or "full", #doc.results,
    doc.machine.cpu, doc.machine.cores, doc.versions.nres, doc.versions.luajit)
  w("")
  w("Medians over repetitions, ± half the range as %% of the median. ratio = ops/s"
    .. " against the section's baseline arm under the same dependency and load; \"(offered)\":"
    .. " an open loop offers every arm the same rate, so the ratio is about 1.00 whatever the arm does"
    .. " (what differs is listed under each table).")
  local cells, by_arm = cells_of(doc.results)
  local warnings = {}
  -- The x of a main-table row: ops/s, its spread and the ratio.
  local function main_x(c)
    local ops = values(c, "ops_per_sec")
    local m = median(ops)
    local ratio = "-"
    if c.baseline and c.baseline ~= c.arm then
      local b = by_arm[c.group .. "\0" .. c.baseline]
      local bm = b and median(values(b, "ops_per_sec"))
      if bm and bm > 0 and m then ratio = format("%.2f", m / bm) end
    end
    local open = load.is_open(c.load)
    if c.baseline == c.arm then
      ratio = open and "1.00 (baseline, offered)" or "1.00 (baseline)"
    elseif open and ratio ~= "-" then
      ratio = ratio .. " (offered)"
    end
    return { ops = ops, m = m, ratio = ratio, ok = cell_ok(c) }
  end
  local sections, by_name = {}, {}
  for _, c in ipairs(cells) do
    local sec = by_name[c.section]
    if not sec or sections[#sections] ~= sec then
      sec = { name = c.section, cells = {} }
      by_name[c.section] = sec
      sections[#sections + 1] = sec
    end
    sec.cells[#sec.cells + 1] = c
  end
  for _, sec in ipairs(sections) do
    w("")
    w("## %s", sec.name)
    w("")
    table_rows(w, _M.MAIN_COLUMNS, sec.cells, main_x)
    section_end(w, sec.cells, by_arm)
  end
  for _, c in ipairs(cells) do
    if not cell_ok(c) then
      for _, r in ipairs(c.reps) do
        if not r.ok then
          warnings[#warnings + 1] = format("- **failed** %s rep %d: %s%s", c.key, r.repetition,
            r.error or "?", r.stderr and r.stderr ~= "" and (" — stderr: `" .. r.stderr:sub(-300):gsub("\n", " ⏎ ") .. "`") or "")
        end
      end
    elseif not cell_trusted(c) then
      for _, r in ipairs(c.reps) do
        if not r.trusted then
          warnings[#warnings + 1] = format("- untrusted %s rep %d: missed %d of %d arrivals, shed %d%s",
            c.key, r.repetition, r.missed or 0, r.arrivals or 0, r.shed or 0,
            (r.identity_ok == false and ", accounting identity broken" or "")
            .. ((r.calls_exact == false or r.requests_exact == false)
                and ", the shared policy's counts differ from the threads'" or ""))
        end
      end
    end
  end
  if #warnings > 0 then
    w("")
    w("## Warnings")
    w("")
    for _, l in ipairs(warnings) do w("%s", l) end
  end
  w("")
  return concat(out, "\n")
end

function _M.json(doc)
  cjson.encode_sparse_array(true)
  return cjson.encode(doc)
end

-- Write both files under dir; returns their paths.
function _M.write(doc, dir, stem)
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  local base = dir .. "/" .. stem
  local f = assert(io.open(base .. ".json", "w"))
  f:write(_M.json(doc), "\n")
  f:close()
  f = assert(io.open(base .. ".md", "w"))
  f:write(_M.markdown(doc))
  f:close()
  return base .. ".json", base .. ".md"
end

_M.floor = floor
return _M

-- SPDX-License-Identifier: MIT
-- nres.ngx.page: the status as one self-contained HTML page (no external
-- asset, no script: it reloads itself every `refresh` s), for
-- /nres/status?format=html or an Accept: text/html request. It shows each
-- upstream with its peers (state, drained, avoided, score, p75, share of
-- recent tries), the scopes' breakers and budgets, the limiters, the
-- control API's dry-runs, and recent rates: per second since this
-- worker's previous page (a worker keeps the counters it last showed).
local keytext = require "nres.ngx.keytext"

local format, concat, pairs, ipairs, tostring, next = string.format, table.concat,
  pairs, ipairs, tostring, next
local sort = table.sort

local _M = { refresh = 2 }

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
              ["'"] = "&#39;" }
local function h(v)
  if v == nil then return "" end
  return (keytext.text(tostring(v)):gsub("[&<>\"']", ESC))
end

local function sorted(map)
  local t = {}
  for k in pairs(map or {}) do t[#t + 1] = k end
  sort(t)
  return t
end

local function num(v, fmt)
  if v == nil then return "&ndash;" end
  return format(fmt or "%d", v)
end

-- Rates: counter values this worker showed last, and when (s).
local last, last_at = {}, nil

local function rate(now, id, value)
  local prev = last[id]
  if value == nil then return nil end
  _M.next[id] = value
  if prev == nil or last_at == nil or now <= last_at then return nil end
  return math.max(0, (value - prev) / (now - last_at))
end

local CSS = [[
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
h3{font-size:1em;margin:.8em 0 .3em}p.meta{color:#666;margin:0}
table{border-collapse:collapse;background:#fff;margin-bottom:.6em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right;white-space:nowrap}
th{background:#f0f0f0}td.name,th.name{text-align:left}
.state{font-weight:600;border-radius:3px;padding:0 .4em}
.closed{color:#1a7f37}.open,.isolated{color:#fff;background:#cf222e}
.half-open{color:#000;background:#f2cc60}.flag{color:#9a6700;font-weight:600}
]]

local function state_cell(s)
  return format('<td class="name"><span class="state %s">%s</span></td>', h(s), h(s))
end

local function upstreams(out, snap, now)
  out[#out + 1] = "<h2>Upstreams</h2>"
  local ups = snap.upstreams or {}
  if next(ups) == nil then out[#out + 1] = "<p>none (balancer mode not declared)</p>" end
  for _, name in ipairs(sorted(ups)) do
    local u = ups[name]
    local req = u.request_seconds
    local rps = rate(now, "u/" .. name, req and req.count)
    out[#out + 1] = format('<h3 data-upstream="%s">%s</h3><p class="meta">scope %s, key %s,'
      .. ' %s, panic below %s%s; requests %s (%s/s), mean %s ms</p>', h(name), h(name),
      h(u.scope), h(u.key), h(u.choice), h(u.panic),
      u.panicking and ' <span class="flag">PANIC: every peer gets traffic</span>' or "",
      num(req and req.count), num(rps, "%.1f"),
      num(req and req.count > 0 and req.sum / req.count * 1e3 or nil, "%.2f"))
    out[#out + 1] = "<table><tr><th class=name>peer</th><th class=name>state</th>"
      .. "<th class=name>choice</th><th>score ms</th><th>p75 ms</th><th>recent share</th>"
      .. "<th>tries</th><th>tries/s</th><th>failures</th><th>failures/s</th>"
      .. "<th>ejections</th></tr>"
    for _, p in ipairs(u.peers) do
      local id = "p/" .. name .. "/" .. p.peer
      local how = p.drained and "drained" or p.avoided and "avoided" or ""
      out[#out + 1] = format('<tr data-peer="%s" data-state="%s" data-drained="%s"'
        .. ' data-avoided="%s"><td class="name">%s</td>%s<td class="name flag">%s</td>'
        .. "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
        .. "<td>%s</td></tr>", h(p.peer), h(p.state), tostring(p.drained == true),
        tostring(p.avoided == true), h(p.peer), state_cell(p.state), h(how),
        num(p.score_ms, "%.2f"), num(p.latency_p75_ms, "%.2f"),
        num(p.recent_share and p.recent_share * 100, "%.0f %%"), num(p.tries),
        num(rate(now, id .. "/t", p.tries), "%.1f"), num(p.failures),
        num(rate(now, id .. "/f", p.failures), "%.1f"), num(p.ejections))
    end
    out[#out + 1] = "</table>"
  end
end

local function would(w)
  local t = {}
  for _, r in ipairs(sorted(w)) do t[#t + 1] = h(r) .. " " .. w[r] end
  return concat(t, ", ")
end

local function scopes(out, snap, now)
  out[#out + 1] = "<h2>Breakers and budgets</h2>"
  for _, name in ipairs(sorted(snap.scopes)) do
    local s = snap.scopes[name]
    out[#out + 1] = format('<h3 data-scope="%s">scope %s</h3><p class="meta">%d of %d keys'
      .. "%s%s</p>", h(name), h(name), s.live or 0, s.slots or 0,
      s.dry_run and ' &middot; <span class="flag">DRY-RUN</span>' or "",
      s.would_refuse and next(s.would_refuse) and " &middot; would refuse: "
      .. would(s.would_refuse) or "")
    out[#out + 1] = "<table><tr><th class=name>key</th><th class=name>breaker</th>"
      .. "<th>trips</th><th>rejected</th><th>rejected/s</th><th>budget tokens</th>"
      .. "<th>calls</th><th>calls/s</th><th>retries</th></tr>"
    for _, k in ipairs(s.keys) do
      local id = "k/" .. name .. "/" .. k.key
      out[#out + 1] = format('<tr data-key="%s" data-state="%s"><td class="name">%s</td>%s'
        .. "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
        h(k.key), h(k.breaker or "none"), h(k.key), state_cell(k.breaker or "none"),
        num(k.breaker_trips), num(k.breaker_rejected),
        num(rate(now, id .. "/r", k.breaker_rejected), "%.1f"), num(k.budget, "%.1f"),
        num(k.calls), num(rate(now, id .. "/c", k.calls), "%.1f"), num(k.retries))
    end
    out[#out + 1] = "</table>"
  end
end

local function limiters(out, snap, now)
  out[#out + 1] = "<h2>Limiters</h2>"
  if next(snap.limiters) == nil then out[#out + 1] = "<p>none declared</p>" end
  for _, name in ipairs(sorted(snap.limiters)) do
    local l = snap.limiters[name]
    out[#out + 1] = format('<h3 data-limiter="%s">limiter %s</h3><p class="meta">%s/s, burst'
      .. " %s%s; asked %s, refused %s (%s/s)%s%s</p>", h(name), h(name), h(l.rate),
      h(l.burst), l.rate_set and " (set by the control API)" or "", num(l.asked),
      num(l.refused), num(rate(now, "l/" .. name, l.refused), "%.1f"),
      l.dry_run and ' &middot; <span class="flag">DRY-RUN</span>' or "",
      l.would_refuse and next(l.would_refuse) and " &middot; would refuse: "
      .. would(l.would_refuse) or "")
    if #l.keys > 0 then
      out[#out + 1] = "<table><tr><th class=name>most refused keys</th><th>asked</th>"
        .. "<th>refused</th></tr>"
      for _, k in ipairs(l.keys) do
        out[#out + 1] = format('<tr data-client="%s"><td class="name">%s</td><td>%s</td>'
          .. "<td>%s</td></tr>", h(k.key), h(k.key), num(k.calls), num(k.rate_refused))
      end
      out[#out + 1] = format("<tr><td class=name>others</td><td></td><td>%s</td></tr></table>",
                             num(l.others_refused))
    end
  end
end

-- The page for snapshot `snap` at `now` (s, this worker's clock).
function _M.html(snap, now)
  _M.next = {}
  local out = { format('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    .. '<meta http-equiv="refresh" content="%d"><title>nres status</title><style>%s</style>'
    .. "</head><body><h1>nres status</h1><p class=\"meta\">worker %s (pid %s) &middot; %s"
    .. " &middot; reloads every %d s; rates per second since this worker's previous page%s"
    .. "</p>", _M.refresh, CSS, h(snap.worker), h(snap.pid), os.date("!%Y-%m-%d %H:%M:%S UTC"),
    _M.refresh, last_at and format(" (%.1f s ago)", now - last_at) or " (none yet)") }
  upstreams(out, snap, now)
  scopes(out, snap, now)
  limiters(out, snap, now)
  out[#out + 1] = "</body></html>\n"
  last, last_at = _M.next, now
  return concat(out)
end

return _M

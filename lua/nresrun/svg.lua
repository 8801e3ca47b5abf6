-- SPDX-License-Identifier: MIT
-- nresrun.svg: a small SVG line-chart writer, no dependencies.
--
--   local svg = require "nresrun.svg"
--   local text = svg.chart{
--     title = "sim-outage", width = 960,
--     x = { min = 0, max = 300, label = "simulated seconds" },
--     legend = { { label = "requests/s", color = "#1f77b4" },
--                { label = "breaker open", color = "#d62728", band = true } },
--     panels = {
--       { title = "default", height = 200,
--         y = { min = 0, max = 1200, label = "per second" },
--         y2 = { min = 0, max = 100, label = "%" },               -- optional right axis
--         bands = { { from = 60, to = 90, color = "#999", opacity = 0.2, label = "outage" } },
--         series = { { values = { ... }, color = "#1f77b4" },        -- x = x0 + (i - 1) * dx
--                    { values = { ... }, axis = 2, dash = "4 3", x0 = 1, dx = 1 } } },
--     },
--   }
--
-- Panels stack vertically and share the x axis. A value `false` (or nil
-- inside the length) breaks the line. Separate from the simulator's report
-- so any report can draw with it; it knows nothing of nres.
local format, concat, floor, ceil, log10 = string.format, table.concat, math.floor, math.ceil, math.log10
local max, min, abs = math.max, math.min, math.abs

local _M = { _VERSION = "0.1.0" }

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end
_M.escape = esc

local function num(v)
  if v == floor(v) and abs(v) < 1e15 then return format("%d", v) end
  return format("%.2f", v)
end

-- Tick values from lo to hi: about `n` of them, steps of 1, 2 or 5 x 10^k.
function _M.ticks(lo, hi, n)
  n = n or 5
  if not (hi > lo) then return { lo } end
  local raw = (hi - lo) / n
  local mag = 10 ^ floor(log10(raw))
  local step = mag
  for _, m in ipairs { 1, 2, 5, 10 } do
    step = m * mag
    if step >= raw then break end
  end
  local out = {}
  local v = ceil(lo / step - 1e-9) * step
  while v <= hi + step * 1e-9 do
    out[#out + 1] = abs(v) < step * 1e-9 and 0 or v
    v = v + step
  end
  return out
end

-- A "nice" upper bound >= v (for an axis maximum).
function _M.nice_max(v)
  if not (v > 0) then return 1 end
  local mag = 10 ^ floor(log10(v))
  for _, m in ipairs { 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10 } do
    if m * mag >= v then return m * mag end
  end
  return 10 * mag
end

local function label_of(v, fmt)
  if fmt then return fmt(v) end
  if abs(v) >= 1e6 then return format("%gM", v / 1e6) end
  if abs(v) >= 1e4 then return format("%gk", v / 1e3) end
  return format("%g", v)
end

local function check(cond, msg)
  if not cond then error("nresrun.svg: " .. msg, 3) end
end

function _M.chart(c)
  check(type(c) == "table", "chart: expected a table")
  check(type(c.x) == "table" and type(c.x.min) == "number" and type(c.x.max) == "number"
        and c.x.max > c.x.min, "x: expected { min, max } with max > min")
  check(type(c.panels) == "table" and #c.panels > 0, "panels: expected a non-empty list")
  local W = c.width or 960
  local ML, MR, MT = 64, 56, 16
  local out = {}
  local function w(...) out[#out + 1] = format(...) end

  local top = MT
  local head = {}
  if c.title then
    head[#head + 1] = format('<text x="%d" y="%d" font-size="16" font-weight="bold">%s</text>', ML, top + 14, esc(c.title))
    top = top + 22
  end
  if c.subtitle then
    head[#head + 1] = format('<text x="%d" y="%d" font-size="11" fill="#555">%s</text>', ML, top + 11, esc(c.subtitle))
    top = top + 18
  end
  if c.legend and #c.legend > 0 then
    local x, y = ML, top + 10
    for _, l in ipairs(c.legend) do
      local width = 28 + 6.2 * #tostring(l.label)
      if x + width > W - MR then x, y = ML, y + 16 end
      if l.band then
        head[#head + 1] = format('<rect x="%d" y="%d" width="18" height="10" fill="%s" fill-opacity="%s"/>',
          x, y - 9, l.color, l.opacity or 0.25)
      else
        head[#head + 1] = format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>',
          x, y - 4, x + 18, y - 4, l.color, l.dash and format(' stroke-dasharray="%s"', l.dash) or "")
      end
      head[#head + 1] = format('<text x="%d" y="%d" font-size="11">%s</text>', x + 22, y, esc(l.label))
      x = x + width
    end
    top = y + 12
  end

  local plot_w = W - ML - MR
  local x0, x1 = c.x.min, c.x.max
  local function px(x) return ML + (x - x0) / (x1 - x0) * plot_w end
  local xticks = _M.ticks(x0, x1, c.x.ticks or 10)

  local body = {}
  local function b(...) body[#body + 1] = format(...) end
  for pi, p in ipairs(c.panels) do
    local H = p.height or 180
    local y = p.y or {}
    local ylo, yhi = y.min or 0, y.max or 1
    if not (yhi > ylo) then yhi = ylo + 1 end
    local ptop = top + (p.title and 18 or 4)
    local pbot = ptop + H
    local function py(v, lo, hi) return pbot - (v - lo) / (hi - lo) * H end
    if p.title then
      b('<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>', ML, ptop - 5, esc(p.title))
    end
    b('<rect x="%d" y="%.1f" width="%d" height="%d" fill="#fff" stroke="#bbb"/>', ML, ptop, plot_w, H)
    -- bands behind everything
    for _, band in ipairs(p.bands or {}) do
      local a, z = max(band.from, x0), min(band.to, x1)
      if z > a then
        b('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" fill-opacity="%s"><title>%s</title></rect>',
          px(a), ptop, px(z) - px(a), H, band.color or "#999", band.opacity or 0.2,
          esc(band.label or format("%s-%s", num(band.from), num(band.to))))
        if band.label and band.show_label ~= false then
          b('<text x="%.1f" y="%.1f" font-size="10" fill="#444">%s</text>', px(a) + 2, ptop + 11, esc(band.label))
        end
      end
    end
    -- grid and axes
    for _, v in ipairs(_M.ticks(ylo, yhi, 4)) do
      local yy = py(v, ylo, yhi)
      b('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>', ML, yy, ML + plot_w, yy)
      b('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>', ML - 4, yy + 3, label_of(v, y.format))
    end
    if y.label then
      b('<text transform="translate(%d,%.1f) rotate(-90)" font-size="10" text-anchor="middle" fill="#555">%s</text>',
        14, ptop + H / 2, esc(y.label))
    end
    local y2 = p.y2
    if y2 then
      local lo2, hi2 = y2.min or 0, y2.max or 1
      for _, v in ipairs(_M.ticks(lo2, hi2, 4)) do
        b('<text x="%d" y="%.1f" font-size="10">%s</text>', ML + plot_w + 4, py(v, lo2, hi2) + 3, label_of(v, y2.format))
      end
      if y2.label then
        b('<text transform="translate(%d,%.1f) rotate(90)" font-size="10" text-anchor="middle" fill="#555">%s</text>',
          W - 10, ptop + H / 2, esc(y2.label))
      end
    end
    for _, v in ipairs(xticks) do
      local xx = px(v)
      b('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb"/>', xx, pbot, xx, pbot + 4)
      if pi == #c.panels or c.x.every_panel then
        b('<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>', xx, pbot + 14, label_of(v, c.x.format))
      end
    end
    -- series
    for _, s in ipairs(p.series or {}) do
      local vals, sx0, dx = s.values or {}, s.x0 or x0, s.dx or 1
      local lo, hi = ylo, yhi
      if s.axis == 2 then
        check(y2 ~= nil, "a series on axis 2 needs the panel's y2")
        lo, hi = y2.min or 0, y2.max or 1
      end
      local d, pen = {}, false
      local n = s.n or #vals
      for i = 1, n do
        local v = vals[i]
        if type(v) == "number" and v == v then
          if v > hi then v = hi elseif v < lo then v = lo end
          d[#d + 1] = format("%s%.1f %.1f", pen and "L" or "M", px(sx0 + (i - 1) * dx), py(v, lo, hi))
          pen = true
        else
          pen = false
        end
      end
      if #d > 0 then
        b('<path d="%s" fill="none" stroke="%s" stroke-width="%s"%s%s/>', concat(d, " "), s.color or "#000",
          s.width or 1.5, s.dash and format(' stroke-dasharray="%s"', s.dash) or "",
          s.opacity and format(' stroke-opacity="%s"', s.opacity) or "")
      end
    end
    top = pbot + ((pi == #c.panels) and 20 or 8)
  end
  if c.x.label then
    b('<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="#555">%s</text>',
      ML + plot_w / 2, top + 10, esc(c.x.label))
    top = top + 16
  end
  local H = top + 8
  w('<?xml version="1.0" encoding="UTF-8"?>')
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">', W, H, W, H)
  w('<rect width="%d" height="%d" fill="#fafafa"/>', W, H)
  for _, l in ipairs(head) do out[#out + 1] = l end
  for _, l in ipairs(body) do out[#out + 1] = l end
  w('</svg>')
  return concat(out, "\n") .. "\n"
end

return _M

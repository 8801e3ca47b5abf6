-- SPDX-License-Identifier: MIT
-- nres.ngx.keytext: a shared table's key (any bytes: a limiter keyed by
-- $binary_remote_addr holds 4- or 16-byte addresses) as text that is
-- valid UTF-8, for the JSON status, Prometheus label values and the
-- status page. An address is written as its address (IPv6 after RFC 5952);
-- any other byte that would not be valid UTF-8 text is written \xNN.
local byte, format, concat = string.byte, string.format, table.concat
local find, gsub = string.find, string.gsub

local _M = {}

-- Whether s is valid UTF-8 (as Go's utf8.ValidString: no overlong form,
-- no surrogate, nothing past U+10FFFF) with no control character.
local function clean(s)
  if not find(s, "[^\32-\126]") then return true end
  local i, n = 1, #s
  while i <= n do
    local c = byte(s, i)
    if c < 32 or c == 127 then return false end
    if c < 128 then
      i = i + 1
    else
      local len, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then len = 2
      elseif c >= 0xE0 and c <= 0xEF then
        len = 3
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then
        len = 4
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      else
        return false
      end
      if i + len - 1 > n then return false end
      local d = byte(s, i + 1)
      if d < lo or d > hi then return false end
      for j = i + 2, i + len - 1 do
        d = byte(s, j)
        if d < 0x80 or d > 0xBF then return false end
      end
      i = i + len
    end
  end
  return true
end
_M.clean = clean

-- A 4- or 16-byte binary address as text (nil for another length).
function _M.address(s)
  if #s == 4 then return format("%d.%d.%d.%d", byte(s, 1, 4)) end
  if #s ~= 16 then return nil end
  local w = {}
  for i = 1, 8 do w[i] = byte(s, 2 * i - 1) * 256 + byte(s, 2 * i) end
  if w[1] == 0 and w[2] == 0 and w[3] == 0 and w[4] == 0 and w[5] == 0 and w[6] == 0xffff then
    return format("::ffff:%d.%d.%d.%d", byte(s, 13, 16))   -- IPv4-mapped
  end
  -- the longest run of two or more zero words (the first of equals) is "::"
  local best, blen, run, rlen = 0, 0, 0, 0
  for i = 1, 8 do
    if w[i] == 0 then
      if rlen == 0 then run = i end
      rlen = rlen + 1
      if rlen > blen then best, blen = run, rlen end
    else
      rlen = 0
    end
  end
  local parts = {}
  local i = 1
  while i <= 8 do
    if blen >= 2 and i == best then
      parts[#parts + 1] = (i == 1 and ":" or "") .. (i + blen > 8 and ":" or "")
      i = i + blen
    else
      parts[#parts + 1] = format("%x", w[i])
      i = i + 1
    end
  end
  return concat(parts, ":")
end

local function escape_byte(c) return format("\\x%02x", byte(c)) end

-- Any bytes as valid UTF-8 text: s itself when it is clean text, else each
-- byte outside printable ASCII (and the backslash) written \xNN.
function _M.text(s)
  if clean(s) then return s end
  return (gsub(s, "[%z\1-\31\\\127-\255]", escape_byte))
end

-- A key of a table whose keys are `kind`: "address" (binary addresses,
-- e.g. $binary_remote_addr), "text", or nil (any: clean text as itself,
-- otherwise a 4- or 16-byte key as an address).
function _M.key(s, kind)
  if kind ~= "address" and (kind == "text" or clean(s)) then return _M.text(s) end
  return _M.address(s) or _M.text(s)
end

return _M

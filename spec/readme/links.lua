-- SPDX-License-Identifier: MIT
-- spec/readme/links.lua REPO - the link check of the project's pages:
-- README.md, every page under docs/ and bench/README.md. Every relative
-- link must name a file or folder inside the repository, and every #anchor
-- a heading of its page, spelt as GitHub spells anchors. Links to the web
-- (a scheme such as https:) are not followed. Code blocks and inline code
-- are not read. Prints one line per broken link, then a count; exits 1 if
-- any link is broken.
local repo = assert(arg[1], "usage: luajit spec/readme/links.lua REPO")

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function is_dir(path)
  local f = io.open(path .. "/.", "rb")   -- opening a folder's "." works on Linux
  if f then f:close(); return true end
  return false
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close(); return true end
  return is_dir(path)
end

-- The page's lines outside fenced code blocks.
local function prose_lines(text)
  local lines, fence = {}, nil
  local n = 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local mark = line:match("^%s*(```+)") or line:match("^%s*(~~~+)")
    if fence then
      if mark and mark:sub(1, 1) == fence:sub(1, 1) and #mark >= #fence then fence = nil end
    elseif mark then
      fence = mark
    else
      -- text: for links (inline code holds none); raw: for headings,
      -- whose anchors keep inline code's text.
      lines[#lines + 1] = { n = n, raw = line, text = line:gsub("``.-``", ""):gsub("`[^`]*`", "") }
    end
  end
  return lines
end

-- GitHub's anchor of a heading: lower case; markup and punctuation
-- dropped (letters, digits, spaces, hyphens and underscores stay, and
-- letters beyond ASCII); spaces become hyphens; a repeated anchor gets
-- -1, -2...
-- Symbols and dashes beyond ASCII that GitHub drops from an anchor.
local dropped = {}
for ch in ("× ÷ – — … → ← ≤ ≥ ± · ° √ « » ’ “ ”"):gmatch("%S+") do dropped[ch] = true end

local function slug(heading)
  local s = heading:gsub("%[([^%]]*)%]%b()", "%1")   -- a link keeps its text
  s = s:gsub("<[^>]*>", ""):lower()
  local out = {}
  for ch in s:gmatch("[%z\1-\127\194-\244][\128-\191]*") do
    if ch:match("^[%w_%- ]$") then
      out[#out + 1] = ch
    elseif #ch > 1 and not dropped[ch] then
      out[#out + 1] = ch
    end
  end
  return (table.concat(out):gsub(" ", "-"))
end

local anchors_of = {}
local function anchors(path)
  if anchors_of[path] then return anchors_of[path] end
  local set, seen = {}, {}
  local text = read(path) or ""
  for _, l in ipairs(prose_lines(text)) do
    local h = l.raw:match("^#+%s+(.-)%s*#*%s*$")
    if h then
      local a = slug(h)
      if seen[a] then
        seen[a] = seen[a] + 1
        a = a .. "-" .. seen[a]
      else
        seen[a] = 0
      end
      set[a] = true
    end
    for name in l.text:gmatch('<a%s+[^>]*name="([^"]+)"') do set[name] = true end
    for name in l.text:gmatch('<a%s+[^>]*id="([^"]+)"') do set[name] = true end
  end
  anchors_of[path] = set
  return set
end

-- Normalise a/b/../c to a/c; nil when it climbs out of the repository.
local function normalise(path)
  local parts = {}
  for p in path:gmatch("[^/]+") do
    if p == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif p ~= "." then
      parts[#parts + 1] = p
    end
  end
  return table.concat(parts, "/")
end

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- The anchor rule against anchors GitHub gives these headings.
for heading, want in pairs {
  ["Lua face: what `p:run(fn)` costs (`bench/lua/run_cost.lua`)"] = "lua-face-what-prunfn-costs-benchluarun_costlua",
  ["A 502 or 504 without X-Nres-Reason"] = "a-502-or-504-without-x-nres-reason",
  ["Why `deadline = 1500` is refused"] = "why-deadline--1500-is-refused",
  ["nginx -s reload fails"] = "nginx--s-reload-fails",
  ["Threads on one policy (`bench/c/bench_threads.c`, the `threads` load)"] =
    "threads-on-one-policy-benchcbench_threadsc-the-threads-load",
  ["Quick start: a policy in Lua"] = "quick-start-a-policy-in-lua",
  ["How nres is put together — in short"] = "how-nres-is-put-together--in-short",
  ["Which preset?"] = "which-preset",
} do
  local got = slug(heading)
  if got ~= want then
    print(("links.lua: the anchor of %q is %q, GitHub's is %q"):format(heading, got, want))
    os.exit(1)
  end
end

local pages = { "README.md", "bench/README.md" }
local find = io.popen("cd '" .. repo .. "' && find docs -name '*.md' 2>/dev/null | LC_ALL=C sort")
for p in find:lines() do pages[#pages + 1] = p end
find:close()

local broken, checked = 0, 0
local function bad(page, n, target, why)
  broken = broken + 1
  print(("%s:%d: %s: %s"):format(page, n, target, why))
end

local function check(page, n, target)
  target = target:match("^<(.*)>$") or target
  target = target:gsub('%s+".*"$', ""):gsub("%s+'.*'$", "")
  if target:match("^[%a][%w+.-]*:") then return end   -- https:, mailto: ...
  checked = checked + 1
  local file, anchor = target:match("^([^#]*)#?(.*)$")
  local dir = page:match("^(.*)/[^/]*$") or ""
  local path
  if file == "" then
    path = page
  elseif file:sub(1, 1) == "/" then
    path = normalise(unescape(file))
  else
    path = normalise((dir ~= "" and dir .. "/" or "") .. unescape(file))
  end
  if not path then return bad(page, n, target, "leaves the repository") end
  local full = repo .. "/" .. path
  if path ~= "" and not exists(full) then return bad(page, n, target, "no such file") end
  if target:find("#", 1, true) then
    if not path:match("%.md$") then return bad(page, n, target, "an anchor into a page that is not markdown") end
    if anchor == "" or not anchors(full)[unescape(anchor)] then
      return bad(page, n, target, "no heading with this anchor in " .. path)
    end
  end
end

for _, page in ipairs(pages) do
  local text = read(repo .. "/" .. page)
  if text then
    for _, l in ipairs(prose_lines(text)) do
      -- [text](target) and ![alt](target); the text may hold brackets.
      for target in l.text:gmatch("%]%(([^%)%s]+[^%)]*)%)") do check(page, l.n, target) end
      -- [label]: target
      local ref = l.text:match("^%s*%[[^%]]+%]:%s*(%S+)")
      if ref then check(page, l.n, ref) end
      -- <a href="target">
      for target in l.text:gmatch('href="([^"]+)"') do check(page, l.n, target) end
    end
  elseif page == "README.md" or page == "bench/README.md" then
    bad(page, 0, page, "missing")
  end
end

print(("%d links checked, %d broken"):format(checked, broken))
os.exit(broken == 0 and 0 or 1)

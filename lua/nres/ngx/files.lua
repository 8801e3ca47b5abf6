-- SPDX-License-Identifier: MIT
-- nres.ngx.files: where the gateway's shared tables live, so protection
-- survives a reload.
--
-- Under nginx every table (a scope, a limiter, an upstream's peers) is a
-- file, <dir>/<name>.<kind>.<table>.shm, mapped MAP_SHARED by the master in
-- init_by_lua and inherited by the workers (nres.shm, `file`). dir is
-- $NRES_REGION_DIR (read by the master at start), or gw.region{ dir = ... },
-- or by default <nginx prefix>/nres: a private directory the master
-- creates 0700 and refuses if it is a symbolic link, another user's, or
-- open to the group or others. Where it cannot be created (a read-only
-- prefix) the tables are anonymous, with one [warn]: state then does not
-- survive a reload. name defaults to "nres-" and a hash of nginx's prefix.
-- Whatever the directory, each file is checked before it is attached
-- (nres.shm: no symbolic link, ours, mode 0600, the layout's size) and a
-- new one has its space reserved: a full filesystem fails the declaration
-- with one line ([emerg] at start; [warn] at a reload, which then fails
-- and keeps the running configuration and its tables). A HUP reload runs
-- init_by_lua again in the master: the same path with the same layout
-- (slots, policy, peers) is attached, and open breakers, budget levels,
-- limiter buckets, latency estimates and counters carry on in the new
-- workers; a file of another layout is replaced by a new one (the old
-- workers keep theirs until they exit) and its state moved into it
-- (nres.ngx.config, nres/shm.h "migration"), with one log line saying
-- what moved and what was reset and why; a file of another owner or
-- mode, version or a damaged one is replaced and starts fresh, with one
-- log line saying why. A binary upgrade (USR2) runs the same init_by_lua with the
-- same prefix, so old and new workers share the same tables during the
-- overlap (the new binary's environment holds only what `env` directives
-- name: `env NRES_REGION_DIR;` if the dir comes from it).
-- gw.init_worker() (init_worker_by_lua) checks, in every worker, that no
-- file was truncated since the master mapped it (a worker touching a page
-- past a truncated file's end dies of SIGBUS): a truncated table becomes
-- that worker's own fresh table, with one [alert], until the next reload
-- makes a new file. Worker 0 then removes the files under <dir>/<name>.*
-- that no declaration of this configuration uses (a scope renamed or
-- dropped) if it may (workers running as another user than the master
-- may not read a private directory: the files then stay); files of a
-- stopped nginx stay for its next start. Outside nginx (plain LuaJIT)
-- tables are anonymous mappings unless gw.region{ dir = ... } is called.
local ffi = require "ffi"
local bit = require "bit"

local type, error, format, tostring = type, error, string.format, tostring

ffi.cdef [[
typedef struct nres_ngx_dir_s nres_ngx_dir_t;
nres_ngx_dir_t *opendir(const char *name);
int closedir(nres_ngx_dir_t *dir);
struct nres_ngx_dirent { uint64_t ino; int64_t off; unsigned short reclen;
                         unsigned char type; char name[256]; };
struct nres_ngx_dirent *readdir(nres_ngx_dir_t *dir);
int unlink(const char *path);
int setenv(const char *name, const char *value, int overwrite);
char *strerror(int errnum);
]]
local C = ffi.C

local _M = {}

-- FNV-1a, 32 bits, as 8 hex digits: a short stable name for a prefix.
local function fnv(s)
  local h = 0x811c9dc5
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i))
    h = bit.tobit(h * 0x01000193 % 2 ^ 32)
  end
  return bit.tohex(h)
end
_M.fnv = fnv

local ngx = ngx
local in_nginx = ngx ~= nil and ngx.config ~= nil and ngx.config.prefix ~= nil

local cdef = require "nres.cdef"
local ffi_string = ffi.string

local dir = os.getenv("NRES_REGION_DIR")
if dir == "" then dir = nil end
-- The default directory is checked (and made) when the first table needs
-- it: `private` is true until then.
local private = false
if not dir and in_nginx then
  dir = ngx.config.prefix():gsub("/*$", "") .. "/nres"
  private = true
end
local name = in_nginx and ("nres-" .. fnv(ngx.config.prefix())) or ("nres-" .. fnv(tostring(os.time())))
-- A reload runs init_by_lua again in the process the first load ran in
-- (the master keeps its environment; a binary upgrade's new master starts
-- with only what `env` names): the mark says this is not the first load.
local MARK = "NRES_NGX_LOADED_BEFORE"
local reload = in_nginx and os.getenv(MARK) == "1"
if in_nginx then C.setenv(MARK, "1", 1) end
local used = {}            -- path -> true: declared by this configuration
local tables = {}          -- every file-backed table made, for init_worker
_M.used = used

-- gw.region{ dir = "/dev/shm", name = "nres-<hash of the prefix>" }: call
-- before the declarations. dir = false: anonymous mappings (state lost on
-- reload, as before).
function _M.configure(opts)
  if type(opts) ~= "table" then error("nres.ngx.region: expected a table, got " .. type(opts), 2) end
  if opts.dir ~= nil then
    if opts.dir ~= false and (type(opts.dir) ~= "string" or opts.dir == "") then
      error("nres.ngx.region: dir: expected a directory or false, got " .. tostring(opts.dir), 2)
    end
    dir = opts.dir or nil
    private = false
  end
  if opts.name ~= nil then
    if type(opts.name) ~= "string" or not opts.name:match("^[%w_%-]+$") then
      error("nres.ngx.region: name: expected letters, digits, _ or -, got " .. tostring(opts.name), 2)
    end
    name = opts.name
  end
end

local function log(level, msg)
  if in_nginx then ngx.log(level, msg) else io.stderr:write(msg, "\n") end
end

-- The default directory, made private (nres_shm_dir_private) once: on
-- success tables go there; where it cannot be made they are anonymous
-- (one [warn]); a directory that is there but not private is refused.
local EAGAIN = -11
local function make_private()
  private = false
  local why = ffi.new("char[256]")
  local rc = cdef.C.nres_shm_dir_private(dir, why, 256)
  if rc == 0 then return end
  if rc == EAGAIN then
    log(ngx and ngx.WARN, format("nres: cannot make the region directory %s (%s);"
        .. " tables are anonymous and their state does not survive a reload"
        .. " (set gw.region{ dir = ... } or NRES_REGION_DIR)", dir, ffi_string(why)))
    dir = nil
    return
  end
  error(format("nres: region directory %s: expected a directory of this user with"
    .. " no group or other access (mode 0700), got %s; remove it or set"
    .. " gw.region{ dir = ... }", dir, ffi_string(why)), 0)
end

-- The file for table `tname` of `kind`, or nil (anonymous).
function _M.path(kind, tname)
  if private then make_private() end
  if not dir then return nil end
  local safe = tname:gsub("[^%w_%-]", function(c) return format("%%%02x", c:byte()) end)
  return format("%s/%s.%s.%s.shm", dir, name, kind, safe)
end

function _M.where() return dir, name end

-- Record what shm.new did with a file: a reuse is a notice, a replacement
-- a warning with the reason; a replacement whose state moved into the new
-- table (`moved`: what moved, what was reset and why; nres.ngx.config) a
-- notice, or a warning if keys were left out; each one line.
function _M.opened(kind, tname, tbl, moved, left_out)
  if not tbl.file then return end
  used[tbl.file] = true
  tables[#tables + 1] = { kind = kind, name = tname, tbl = tbl }
  if tbl.reused then
    log(ngx and ngx.NOTICE, format("nres: %s \"%s\": kept the state in %s", kind, tname, tbl.file))
  elseif tbl.replaced and moved then
    log(ngx and (left_out and ngx.WARN or ngx.NOTICE), format("nres: %s \"%s\": %s: %s;"
        .. " made a new region there and moved the state into it (%s)", kind, tname,
        tbl.file, tbl.replaced, moved))
  elseif tbl.replaced then
    log(ngx and ngx.WARN, format("nres: %s \"%s\": %s: %s; made a new region there"
        .. " (its state starts fresh; processes still using the old one keep it)",
        kind, tname, tbl.file, tbl.replaced))
  end
end

-- Remove the files under <dir>/<name>.* that this configuration does not
-- use: the list of names removed, or nil and why the directory cannot be
-- read.
function _M.sweep()
  if not dir then return {} end
  local d = C.opendir(dir)
  if d == nil then return nil, ffi_string(C.strerror(ffi.errno())) end
  local gone, lead = {}, name .. "."
  while true do
    local e = C.readdir(d)
    if e == nil then break end
    local n = ffi.string(e.name)
    if n:sub(1, #lead) == lead and (n:match("%.shm$") or n:match("%.shm%.%d+%.tmp$")) then
      local p = dir .. "/" .. n
      if not used[p] then
        C.unlink(p)
        gone[#gone + 1] = n
      end
    end
  end
  C.closedir(d)
  return gone
end

-- A declaration's table could not be made for want of space: one line,
-- [emerg] when nginx starts, [warn] at a reload (which fails, keeping the
-- running configuration and its tables).
function _M.full(kind, tname, err)
  local msg = format("nres: %s \"%s\": no room for its region file (%s)%s", kind, tname,
                     err, reload and "; the reload fails and the running tables are kept" or "")
  log(ngx and (reload and ngx.WARN or ngx.EMERG), msg)
  return msg
end

-- Every file-backed table still whole? (nres.shm verify: a table whose
-- file was truncated becomes this process's own fresh table.)
function _M.verify()
  for _, e in ipairs(tables) do
    local whole, why = e.tbl:verify()
    if not whole then
      log(ngx and ngx.ALERT, format("nres: %s \"%s\": %s; this worker keeps its own"
          .. " fresh table (not shared) until a reload makes a new file", e.kind, e.name, why))
    end
  end
end

-- gw.init_worker(): every worker verifies, worker 0 sweeps (see the top
-- of the file).
function _M.init_worker()
  if not in_nginx then return end
  _M.verify()
  if ngx.worker.id() ~= 0 then return end
  local gone, err = _M.sweep()
  if not gone then
    ngx.log(ngx.NOTICE, "nres: cannot read the region directory ", dir, " (", err,
            "): files no declaration uses stay")
  elseif #gone > 0 then
    ngx.log(ngx.NOTICE, "nres: removed regions no declaration uses: ", table.concat(gone, " "))
  end
end

return _M

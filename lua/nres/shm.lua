-- SPDX-License-Identifier: MIT
-- nres.shm: keyed policy state in shared memory (runtime/include/nres/shm.h).
--
--   local shm = require "nres.shm"
--   local t = shm.new{ slots = 256, budget = { ratio = 0.1, min_per_sec = 5 },
--                      breaker = breaker_config_cdata, limiter = { rate = 50, burst = 100 } }
--   local i, gen = t:acquire("api.example", now_ns, hold_ns)   -- or nil, "full"
--   local slot = t:slot(i)     -- nres_shm_slot_t*: .budget .breaker .ratelimit
--   local c = t:counts(i)      -- { calls, attempts, retries, stops = { [stop code] = n } }
--
-- The table is one mmap(MAP_SHARED | MAP_ANONYMOUS) region: made before a
-- fork (nginx: init_by_lua, in the master), it is the same memory in every
-- child. Its header and slots hold no pointers. The region is unmapped when
-- the object is collected (in nginx: when the master's Lua VM closes on a
-- reload; workers inherited their own mapping and keep it until they exit).
--
-- File-backed. With `file = path` the table lives in that file, mapped
-- MAP_SHARED (put it on a tmpfs: no disk writes): any process that opens
-- the same path shares it, including a reloaded nginx master and its new
-- workers. A file is input, so an existing one is attached only if it
-- passes every check (nres/shm.h, "Region files"): opened without
-- following a symbolic link, a regular file of this process's user with
-- no group or other access, exactly this layout's size, then
-- nres_shm_attach's magic, version and layout, and a configuration byte for
-- byte this one's; then t.reused is true and every slot's state (open
-- breakers, budget levels, counters) carries on. Anything else is not
-- touched in place (old processes may still use it): a new file is made
-- (mode 0600, its blocks reserved with posix_fallocate, laid out, then
-- renamed over the path, so an attacher never sees it half made and a
-- full filesystem is an error, not a SIGBUS); t.replaced then says why.
-- When the old file is a valid table of this build of another layout or
-- configuration (a reload that changed the slots or a policy field), it
-- stays mapped as t.old: t:migrate() moves its keys' state into the new
-- table (nres_shm_migrate), t:release_old() lets it go.
-- The file's descriptor is kept (t.fd) so t:verify() can find a file
-- truncated after it was mapped. `extra = bytes` reserves zeroed memory
-- after the table (t.extra, 64-byte aligned) for the caller's own state
-- (without a file: a MAP_SHARED anonymous mapping of its own).
--
-- Times. Every time and duration (now, hold) is nanoseconds on one clock,
-- converted by one function, ns(): a number >= 0; from 2^64 up (+inf
-- included) it saturates to the end of time, NRES_TIME_NEVER (a hold that
-- long never ends); negative numbers, -inf and NaN are misuse and raise,
-- naming the field. A negative time used to wrap to a huge one and evict
-- every live key.
--
-- Its declarations live with the rest in nres.cdef; the slot's size is
-- checked against the library's at load.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local rate_problem = require("nres.schema").rate   -- one rule for rates, as in policies

local C = cdef.C
local ffi_new, ffi_string, ffi_gc, ffi_sizeof = ffi.new, ffi.string, ffi.gc, ffi.sizeof
local type, error, tonumber, format = type, error, tonumber, string.format

if tonumber(C.nres_shm_slot_size()) ~= ffi_sizeof("nres_shm_slot_t") then
  error(format("nres.shm: nres_shm_slot_t is %d bytes in %s but %d in lua/nres/shm.lua;"
    .. " the library and the Lua module are out of step",
    tonumber(C.nres_shm_slot_size()), cdef.path, ffi_sizeof("nres_shm_slot_t")), 0)
end

-- The file-backed table's calls (libnres and libc); redeclaring an
-- identical prototype is allowed, so nres.cdef may carry them too.
ffi.cdef [[
int nres_shm_init(void *mem, size_t size, const nres_shm_config_t *config);
int nres_shm_attach(void *mem, size_t size, nres_shm_t **out);
const nres_shm_config_t *nres_shm_config(nres_shm_t *shm);
int close(int fd);
int64_t lseek(int fd, int64_t off, int whence);
void *mmap(void *addr, size_t len, int prot, int flags, int fd, int64_t off);
int munmap(void *addr, size_t len);
int rename(const char *from, const char *to);
int unlink(const char *path);
int getpid(void);
char *strerror(int errnum);
]]

local _M = { _VERSION = "0.1.0", KEY_MAX = 64, MAX_SLOTS = 2 ^ 20 }
local mt = { __index = _M }

_M.BUDGET, _M.BREAKER, _M.RATELIMIT, _M.THROTTLE = 1, 2, 4, 8

local acquire, record, limit = C.nres_shm_acquire, C.nres_shm_record, C.nres_shm_limit
local EFULL, EBUSY, ELIMITED = -1009, -16, -1006
local TWO64 = 2 ^ 64
local NEVER = 0xffffffffffffffffULL   -- NRES_TIME_NEVER

-- Out-parameters: one per module, read before anything can yield.
local gen_box = ffi_new("uint32_t[1]")
local wait_box = ffi_new("double[1]")
local lease_box = ffi_new("double[1]")
local key_buf = ffi_new("char[64]")

local function bad(field, expected, got)
  return format("nres.shm: %s: expected %s, got %s", field, expected,
                type(got) == "string" and format("%q", got) or tostring(got))
end

-- The one conversion of a time or duration (see the top of the file);
-- raises at the level of the caller's caller.
local function ns(v, field)
  if type(v) ~= "number" or not (v >= 0) then
    error(bad(field, "nanoseconds (a number >= 0)", v), 3)
  end
  if v >= TWO64 then return NEVER end
  return v
end

-- Refuse a field of table t (named `where`) that shm.new does not read:
-- a misspelt throttle.windw or throtle would otherwise be ignored,
-- leaving the default in force unsaid.
local function only(where, t, allowed)
  for k in pairs(t) do
    if not allowed[k] then
      local names = {}
      for name in pairs(allowed) do names[#names + 1] = name end
      table.sort(names)
      error(format("nres.shm: %s%s: unknown field (valid: %s)", where,
                   type(k) == "string" and k or "[" .. tostring(k) .. "]",
                   table.concat(names, ", ")), 3)
    end
  end
end
local FIELDS = {
  [""] = { slots = true, budget = true, breaker = true, limiter = true,
           throttle = true, file = true, extra = true },
  budget = { ratio = true, min_per_sec = true, capacity = true },
  limiter = { rate = true, burst = true },
  throttle = { k = true, window = true, buckets = true, fast_failure = true },
}

-- shm.new{ slots, budget = { ratio, min_per_sec, capacity } or false,
--          breaker = nres_breaker_config_t cdata (nres.policy's) or false,
--          limiter = { rate, burst } or false,
--          throttle = { k, window (ns), buckets, fast_failure } or false }
-- Returns the table, or raises error(msg, 2) on a bad configuration, or
-- returns nil, err when the mapping fails (nil, err, "full" when a region
-- file's filesystem has no room for it).
function _M.new(opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'new' (table expected, got " .. type(opts) .. ")", 2)
  end
  only("", opts, FIELDS[""])
  for _, name in ipairs { "budget", "limiter", "throttle" } do
    if type(opts[name]) == "table" then only(name .. ".", opts[name], FIELDS[name]) end
  end
  local cfg = ffi_new("nres_shm_config_t")
  C.nres_shm_config_init(cfg)
  cfg.flags = 0
  local slots = opts.slots or 1024
  if type(slots) ~= "number" or slots < 1 or slots > _M.MAX_SLOTS or slots % 1 ~= 0 then
    error(bad("slots", "an integer 1..1048576", slots), 2)
  end
  cfg.slots = slots
  local b = opts.budget
  if b then
    if type(b) ~= "table" then error(bad("budget", "a table or false", b), 2) end
    cfg.flags = cfg.flags + _M.BUDGET
    cfg.budget_ratio = b.ratio or 0.1
    cfg.budget_min_per_sec = b.min_per_sec or 3
    cfg.budget_capacity = b.capacity or 0
  end
  local br = opts.breaker
  if br then
    if type(br) ~= "cdata" then
      error(bad("breaker", "an nres_breaker_config_t (cdata) or false", br), 2)
    end
    cfg.flags = cfg.flags + _M.BREAKER
    cfg.breaker = br
  end
  local l = opts.limiter
  if l then
    if type(l) ~= "table" or type(l.rate) ~= "number" then
      error(bad("limiter", "a table { rate = n, burst = n }", l), 2)
    end
    -- Checked here: the C field is a uint32_t, so -1 or 2^32 + 1 would
    -- arrive truncated to a burst nobody asked for.
    local rate, burst = l.rate, l.burst or 1
    local why = rate_problem(rate)
    if why then
      error(bad("limiter.rate", "admissions per second (" .. why .. ")", rate), 2)
    end
    if type(burst) ~= "number" or not (burst >= 1 and burst <= 4294967295)
       or burst % 1 ~= 0 then
      error(bad("limiter.burst", "an integer 1..4294967295", burst), 2)
    end
    cfg.flags = cfg.flags + _M.RATELIMIT
    cfg.rate = rate
    cfg.burst = burst
  end
  local th = opts.throttle
  if th then
    if type(th) ~= "table" then
      error(bad("throttle", "a table { k = n, window = ns, buckets = n } or false", th), 2)
    end
    local k, window, buckets = th.k or 1.03, th.window or 3e8, th.buckets or 8
    local fast = th.fast_failure or 0
    if type(k) ~= "number" or not (k >= 1 and k <= 1000) then
      error(bad("throttle.k", "a finite number from 1 to 1000", k), 2)
    end
    if type(buckets) ~= "number" or not (buckets >= 1 and buckets <= 16) or buckets % 1 ~= 0 then
      error(bad("throttle.buckets", "an integer 1..16", buckets), 2)
    end
    if type(window) ~= "number" or not (window >= buckets and window < TWO64) then
      error(bad("throttle.window", "nanoseconds (at least one per bucket, below 2^64)", window), 2)
    end
    if type(fast) ~= "number" or not (fast >= 0 and fast < 1) then
      error(bad("throttle.fast_failure", "a fraction in [0, 1) of the p50", fast), 2)
    end
    cfg.flags = cfg.flags + _M.THROTTLE
    cfg.throttle_k, cfg.throttle_window, cfg.throttle_buckets = k, window, buckets
    cfg.throttle_fast_failure = fast
  end
  if C.nres_shm_size(cfg) == 0 then
    error("nres.shm: the runtime refused the configuration (a budget, breaker,"
          .. " limiter or throttle value out of range)", 2)
  end
  local t = {
    slots = tonumber(cfg.slots + (8 - cfg.slots % 8) % 8),
    flags = cfg.flags,
    limited = l and true or false,
    bytes = tonumber(C.nres_shm_size(cfg)),
  }
  if opts.file ~= nil then
    if type(opts.file) ~= "string" or opts.file == "" then
      error(bad("file", "a path", opts.file), 2)
    end
    local extra = opts.extra or 0
    if type(extra) ~= "number" or extra < 0 or extra % 1 ~= 0 then
      error(bad("extra", "bytes (an integer >= 0)", extra), 2)
    end
    cfg.slots = t.slots   -- as nres_shm_init stores it, for the comparison
    local ok, err, kind = _M.map_file(t, cfg, opts.file, extra)
    if not ok then return nil, err, kind end
    return setmetatable(t, mt)
  end
  local out = ffi_new("nres_shm_t *[1]")
  local rc = C.nres_shm_new(cfg, out)
  if rc ~= 0 then return nil, ffi_string(C.nres_strerror(rc)) end
  t.shm = ffi_gc(out[0], C.nres_shm_free)   -- unmapped when collected
  local extra = opts.extra or 0
  if extra > 0 then   -- shared with children forked after this, as the table
    local mem = C.mmap(nil, extra, 3, 0x21, -1, 0)   -- MAP_SHARED | MAP_ANONYMOUS
    if mem == ffi.cast("void *", -1) then return nil, "mmap: out of memory" end
    t.extra = ffi_gc(ffi.cast("uint8_t *", mem), function(p) C.munmap(p, extra) end)
    t.extra_bytes = extra
  end
  return setmetatable(t, mt)
end

-- ------------------------------------------------------- file-backed

local PROT_RW, MAP_SHARED, MAP_FIXED_ANON, SEEK_END = 3, 1, 0x30, 2
local MAP_FAILED = ffi.cast("void *", -1)
local EAGAIN, EINVAL, EFULL_FILE = -11, -22, -1009

local why_buf = ffi_new("char[256]")
local fd_box = ffi_new("int[1]")

local function round64(n) return n + (64 - n % 64) % 64 end

local function errno_str(what, path)
  return format("%s %s: %s", what, path, ffi_string(C.strerror(ffi.errno())))
end

-- Map `len` bytes of the open file fd: the pointer, or nil, err.
local function map(fd, len, path)
  local mem = C.mmap(nil, len, PROT_RW, MAP_SHARED, fd, 0)
  if mem == MAP_FAILED then return nil, errno_str("mmap", path) end
  return mem
end

-- The mapping as the table's handle, unmapped when collected (the file
-- stays: other processes may use it), and the checked file's descriptor,
-- closed when collected: t:verify() measures the file through it (the
-- path may name another file by then).
local function own(t, mem, len, fd)
  t.shm = ffi_gc(ffi.cast("nres_shm_t *", mem), function(p) C.munmap(p, len) end)
  t.mem, t.mapped = mem, len
  t.fd = ffi_gc(ffi_new("int[1]", fd), function(b) C.close(b[0]) end)
end

-- The old table in a file of another layout (or configuration), mapped
-- len bytes from its open descriptor fd, kept as t.old for t:migrate() if
-- it is a valid table of this build (nres_shm_attach: magic, version,
-- a header that agrees with itself); else unmapped and closed.
local function keep_old(t, fd, mem, len)
  local out = ffi_new("nres_shm_t *[1]")
  if C.nres_shm_attach(mem, len, out) ~= 0 then
    C.munmap(mem, len); C.close(fd)
    return false
  end
  local at = round64(tonumber(C.nres_shm_size(C.nres_shm_config(out[0]))))
  local old = { mapped = len, extra_bytes = math.max(0, len - at) }
  old.shm = ffi_gc(out[0], function(p) C.munmap(p, len) end)
  old.extra = old.extra_bytes > 0 and ffi.cast("uint8_t *", mem) + at or nil
  old.fd = ffi_gc(ffi_new("int[1]", fd), function(b) C.close(b[0]) end)
  t.old = old
  return true
end

-- Attach t to the file at path if it holds this very table: true; false
-- and why not (the file is then left alone; t.old is its table when it
-- is one of another layout, to migrate from); nil, err if it cannot be
-- read. nres_shm_file_open refuses a symbolic link or a file of another
-- user or with group or other access before a page is mapped; a file of
-- another size is mapped only to read its state (t.old), whole: its size
-- is measured on the open descriptor first.
local function try_attach(t, cfg, path, total)
  local rc = C.nres_shm_file_open(path, 0, fd_box, why_buf, 256)   -- any size
  if rc == EAGAIN then return false, nil end   -- none yet
  if rc == EINVAL then return false, ffi_string(why_buf) end
  if rc ~= 0 then return nil, path .. ": " .. ffi_string(why_buf) end
  local fd = fd_box[0]
  local len = tonumber(C.lseek(fd, 0, SEEK_END))
  if len ~= total then
    local why = format("a size of %d bytes (this layout: %d)", len, total)
    local mem = len >= 64 and map(fd, len, path)
    if mem then keep_old(t, fd, mem, len) else C.close(fd) end
    return false, why
  end
  local mem, err = map(fd, total, path)
  if not mem then C.close(fd); return nil, err end
  local out = ffi_new("nres_shm_t *[1]")
  if C.nres_shm_attach(mem, total, out) ~= 0 then
    C.munmap(mem, total); C.close(fd)
    return false, "another layout version or a damaged header"
  end
  local have = C.nres_shm_config(out[0])
  local size = ffi_sizeof("nres_shm_config_t")
  if ffi_string(have, size) ~= ffi_string(cfg, size) then
    keep_old(t, fd, mem, total)
    return false, "another configuration (slots, budget, breaker, limiter or throttle)"
  end
  own(t, mem, total, fd)
  return true
end

-- Used by new(): attach to path or make it anew (see File-backed above).
-- nil, err, "full" when the filesystem has no room for a new file; the
-- file at path, if any, is then left as it was.
function _M.map_file(t, cfg, path, extra)
  local size = t.bytes
  local total = round64(size) + round64(extra)
  t.file, t.extra_at, t.extra_bytes = path, round64(size), extra
  t.cfg = ffi_new("nres_shm_config_t", cfg)   -- for verify()'s fresh table
  local ok, why = try_attach(t, cfg, path, total)
  if ok == nil then return nil, why end
  if ok then
    t.reused = true
    t.extra = ffi.cast("uint8_t *", t.mem) + t.extra_at
    return true
  end
  t.replaced = why
  -- Laid out in a file of our own, then renamed over the path: processes
  -- that mapped the old file keep it, and nothing else sees a file half
  -- made. The old file is not unlinked first: a new one that cannot be
  -- made leaves it in place.
  local tmp = format("%s.%d.tmp", path, C.getpid())
  C.unlink(tmp)
  local rc = C.nres_shm_file_create(tmp, total, fd_box, why_buf, 256)
  if rc ~= 0 then
    return nil, format("%s: %s", tmp, ffi_string(why_buf)), rc == EFULL_FILE and "full" or nil
  end
  local fd = fd_box[0]
  local mem, err = map(fd, total, tmp)
  if not mem then C.close(fd); C.unlink(tmp); return nil, err end
  rc = C.nres_shm_init(mem, size, cfg)
  if rc ~= 0 then
    C.munmap(mem, total); C.close(fd); C.unlink(tmp)
    return nil, "nres_shm_init: " .. ffi_string(C.nres_strerror(rc))
  end
  if C.rename(tmp, path) ~= 0 then
    err = errno_str("rename", tmp)
    C.munmap(mem, total); C.close(fd); C.unlink(tmp)
    return nil, err
  end
  own(t, mem, total, fd)
  t.reused = false
  t.extra = ffi.cast("uint8_t *", t.mem) + t.extra_at
  return true
end

-- Is the file under a file-backed table still as long as its mapping?
-- true; or, when it was truncated in place (every page past its new end
-- would fault with SIGBUS), false and why, after this process's mapping
-- was replaced, at the same address, by a fresh table of its own (state
-- not shared; t.private says why) and t.on_fresh(t), if set, ran to lay
-- out its extra memory again. Call it before touching a mapping inherited
-- or kept across a pause (nginx: in init_worker). A table without a file
-- is always whole.
function _M.verify(self)
  if not self.fd then return true end
  local len = C.lseek(self.fd[0], 0, SEEK_END)
  if len >= self.mapped then return true end
  local why = format("%s was truncated to %d bytes (this table maps %d)",
                     self.file, tonumber(len), self.mapped)
  local mem = C.mmap(self.mem, self.mapped, PROT_RW, MAP_SHARED + MAP_FIXED_ANON, -1, 0)
  if mem ~= self.mem then
    return false, why .. "; " .. errno_str("mmap", "(anonymous)")
  end
  C.nres_shm_init(mem, self.bytes, self.cfg)
  self.fd, self.private = nil, why   -- the descriptor is closed when collected
  if self.on_fresh then self.on_fresh(self) end
  return false, why
end

-- Move the old table's state (t.old: a file of another layout that this
-- table replaced) into this one (nres_shm_migrate, nres/shm.h): a report
-- { moved, keys, full, gone, changed, reset, adjusted (NRES_SHM_RESET_*
-- and NRES_SHM_ADJUST_* bits), text (one line for a log), map (old slot
-- -> new slot, UINT32_MAX if it did not move: the caller's own per-slot
-- memory moves by it), slots (the old table's), old (t.old) }, or nil
-- without an old table, or nil, err. present: only keys this table
-- already holds get state. Call t:release_old() when done.
local NOT_MOVED = 0xffffffff
_M.NOT_MOVED = NOT_MOVED
function _M.migrate(self, present, now)
  local old = self.old
  if not old then return nil end
  local n = tonumber(C.nres_shm_slots(old.shm))
  local map = ffi_new("uint32_t[?]", n)
  local m = ffi_new("nres_shm_migration_t")
  local rc = C.nres_shm_migrate(old.shm, self.shm, now or C.nres_step_now(),
                                present and 1 or 0, map, m)
  if rc ~= 0 then return nil, ffi_string(C.nres_strerror(rc)) end
  local from, to = C.nres_shm_config(old.shm), C.nres_shm_config(self.shm)
  local cap = 512
  local buf = ffi_new("char[?]", cap)
  local need = C.nres_shm_migration_text(m, from, to, buf, cap)
  if need >= cap then
    cap = need + 1
    buf = ffi_new("char[?]", cap)
    C.nres_shm_migration_text(m, from, to, buf, cap)
  end
  return { moved = m.moved, keys = m.keys, full = m.full, gone = m.gone,
           changed = m.changed, reset = m.reset, adjusted = m.adjusted,
           text = ffi_string(buf), map = map, slots = n, old = old }
end

-- Let go of the old table now (unmapped, its descriptor closed) rather
-- than when collected.
function _M.release_old(self)
  local old = self.old
  if not old then return end
  self.old = nil
  C.munmap(ffi_gc(old.shm, nil), old.mapped)
  C.close(ffi_gc(old.fd, nil)[0])
end

-- The slot index of key (inserted if new) and its generation, or nil and
-- "full" (every slot of the key's set is leased) / "busy". now and hold in
-- ns (see Times). The key must be a string of 1..64 bytes.
function _M.acquire(self, key, now, hold)
  if type(key) ~= "string" then
    error(bad("key", "a string of 1..64 bytes", key), 2)
  end
  local i = acquire(self.shm, key, #key, ns(now, "now"), ns(hold, "hold"), gen_box)
  if i >= 0 then return i, gen_box[0] end
  if i == EFULL then return nil, "full" end
  if i == EBUSY then return nil, "busy" end
  error(bad("key", "a string of 1..64 bytes", key), 2)
end

function _M.slot(self, i)
  return C.nres_shm_slot(self.shm, i)
end

-- Slot i's counts, summed over its shards (each process writes its own
-- copy of the words every call writes): { calls, attempts, retries,
-- stops = { [stop code 0..NRES_STOP_COUNT - 1] = n } }.
local counts_box = ffi_new("nres_shm_counts_t")
local STOP_LAST = ffi.sizeof(counts_box.stops) / 8 - 1   -- NRES_STOP_COUNT - 1
function _M.counts(self, i)
  if type(i) ~= "number" or not (i >= 0 and i < self.slots) or i % 1 ~= 0 then
    error(bad("index", "a slot index 0.." .. (self.slots - 1), i), 2)
  end
  C.nres_shm_slot_counts(C.nres_shm_slot(self.shm, i), counts_box)
  local stops = {}
  for k = 0, STOP_LAST do stops[k] = tonumber(counts_box.stops[k]) end
  return { calls = tonumber(counts_box.calls), attempts = tonumber(counts_box.attempts),
           retries = tonumber(counts_box.retries), stops = stops }
end

-- The key of slot i, its generation and lease end (ns; 2^64 for a lease
-- that never ends), or nil if free.
function _M.key(self, i)
  local n = C.nres_shm_key(self.shm, i, key_buf, 64, gen_box, lease_box)
  if n < 0 then return nil end
  return ffi_string(key_buf, n), gen_box[0], lease_box[0]
end

function _M.record(self, i, stop, attempts, retries)
  record(self.shm, i, stop, attempts, retries)
end

-- One admission from slot i's rate limiter: true, or false and the
-- seconds until one would be allowed. A table made without a limiter, or
-- a slot index out of range, is misuse.
function _M.limit(self, i, now)
  if not self.limited then
    error("nres.shm: limit: this table has no limiter (shm.new{ limiter = ... })", 2)
  end
  if type(i) ~= "number" or not (i >= 0 and i < self.slots) or i % 1 ~= 0 then
    error(bad("index", "a slot index 0.." .. (self.slots - 1), i), 2)
  end
  local rc = limit(self.shm, i, ns(now, "now"), wait_box)
  if rc == 0 then return true end
  if rc == ELIMITED then return false, wait_box[0] / 1e9 end
  error("nres.shm: limit: " .. ffi_string(C.nres_strerror(rc)), 2)
end

local stats = ffi_new("nres_shm_stats_t")

function _M.stats(self)
  C.nres_shm_stats(self.shm, stats)
  return {
    slots = tonumber(stats.slots), live = tonumber(stats.live),
    lookups = tonumber(stats.lookups), inserts = tonumber(stats.inserts),
    evictions = tonumber(stats.evictions), full = tonumber(stats.full),
    races = tonumber(stats.races), bytes = self.bytes,
  }
end

return _M

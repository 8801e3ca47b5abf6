-- SPDX-License-Identifier: MIT
-- nresrun.host: the services of the nresrun executable, through the FFI.
--
-- Only available inside nresrun (its functions are exported by the
-- executable); `available` says whether they are. See runtime/src/nresrun/host.h.
local ffi = require "ffi"

ffi.cdef [[
double nres_host_lua_bytes(void);
double nres_host_thread_lua_bytes(void);
int nres_host_threads_run(int n, const char *chunk, const char *arg, char *out, size_t cap,
                          int *status, size_t *len);
double nres_host_threads_start(void);
double nres_host_heap_bytes(void);
long nres_host_peak_rss_kb(void);
const char *nres_host_exe(void);
int nres_host_isatty(int fd);
typedef struct nres_host_child_s {
  int status; int timed_out; double seconds; size_t out_len, err_len;
} nres_host_child_t;
int nres_host_spawn(const char *const *argv, double timeout_s, char *out, size_t out_cap,
                    char *err, size_t err_cap, nres_host_child_t *child);
]]

-- The cells' event loop and the dependency server child (host.h; only in
-- an nresrun built with the http component). Policies and counters are
-- passed as void * so this block needs no other declarations.
ffi.cdef [[
typedef struct nres_host_http_s {
  int32_t id; int32_t running; int32_t status; int32_t status_code; int32_t error;
  uint32_t attempts; uint32_t stop; double resp_len;
} nres_host_http_t;
int nres_host_loop_init(void);
nres_host_http_t *nres_host_http_new(void);
int nres_host_http_start(nres_host_http_t *slot, const char *url, const char *method,
                         uint32_t flags, void *policy);
int nres_host_loop_run(double timeout_ns);
int nres_host_loop_take(int32_t *ids, int cap);
int nres_host_http_counters(void *out, double client_out[4]);
int nres_host_loop_close(void);
typedef struct nres_host_server_s { int pid; int stdin_fd; int port; int status; } nres_host_server_t;
int nres_host_server_start(const char *const *argv, double timeout_s, nres_host_server_t *srv);
int nres_host_server_stop(nres_host_server_t *srv);
int nres_host_http_get(int port, const char *path, double timeout_s, char *out, size_t out_cap);
]]

-- Pool jobs on the same loop (host.h; only with the pool component too).
ffi.cdef [[
typedef struct nres_host_job_s {
  int32_t id; int32_t running; int32_t status; int32_t result; int32_t worker;
  int32_t kind; double arg;
} nres_host_job_t;
int nres_host_pool_init(uint32_t threads, double max_wait);
nres_host_job_t *nres_host_job_new(void);
int nres_host_job_start(nres_host_job_t *job, int kind, double arg);
int nres_host_pool_stats(double out[6]);
]]

local C = ffi.C
local _M = { _VERSION = "0.1.0" }

_M.available = pcall(function() return C.nres_host_exe end)
-- A cell's OS threads, each with its own Lua state (threads.c).
_M.threads_available = _M.available and pcall(function() return C.nres_host_threads_run end)
-- The http cells' loop (lua/nresrun/http.lua uses it).
_M.http_available = _M.available and pcall(function() return C.nres_host_loop_init end)
-- The pool on that loop (lua/nresrun/pool.lua uses it).
_M.pool_available = _M.http_available and pcall(function() return C.nres_host_pool_init end)
if not _M.available then return _M end

function _M.lua_bytes() return C.nres_host_lua_bytes() end
-- This thread's Lua state's bytes (each state lives on one thread).
-- In a thread of a threads cell: wait until every thread of the cell is
-- ready, and return their common start time (ns, the runtime's clock).
function _M.threads_start()
  return C.nres_host_threads_start()
end

function _M.thread_lua_bytes()
  if not _M.threads_available then return C.nres_host_lua_bytes() end
  return C.nres_host_thread_lua_bytes()
end
function _M.heap_bytes() return C.nres_host_heap_bytes() end
function _M.peak_rss_kb() return tonumber(C.nres_host_peak_rss_kb()) end
function _M.exe() return ffi.string(C.nres_host_exe()) end
function _M.isatty(fd) return C.nres_host_isatty(fd) == 1 end

local OUT_CAP, ERR_CAP = 1024 * 1024, 64 * 1024
local out_buf, err_buf = ffi.new("char[?]", OUT_CAP), ffi.new("char[?]", ERR_CAP)
local child = ffi.new("nres_host_child_t")

-- Run argv (argv[1] a path) for at most timeout seconds. Returns
-- { status, timed_out, seconds, stdout, stderr } or nil, err.
function _M.spawn(argv, timeout)
  local cargv = ffi.new("const char *[?]", #argv + 1)
  for i, a in ipairs(argv) do cargv[i - 1] = a end
  cargv[#argv] = nil
  local rc = C.nres_host_spawn(cargv, timeout, out_buf, OUT_CAP, err_buf, ERR_CAP, child)
  if rc ~= 0 then return nil, "cannot start " .. argv[1] end
  return {
    status = child.status,
    timed_out = child.timed_out == 1,
    seconds = child.seconds,
    stdout = ffi.string(out_buf, child.out_len),
    stderr = ffi.string(err_buf, child.err_len),
  }
end

return _M

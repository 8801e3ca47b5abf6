-- SPDX-License-Identifier: MIT
-- nres.cdef: the ffi.cdef of nres.h (shm.h's: nres.cdef.shm), and the library.
--
-- The declarations mirror runtime/include/nres.h (atomics declared as their
-- plain types: same size and alignment). Loading checks the library's ABI
-- version and the size of every struct declared here against what the
-- library reports, so a stale or mismatched libnres is a clear error, not
-- memory corruption. libnres is looked for in $NRES_LIB, then in the
-- process (a module's), then on package.cpath, then where an installed one
-- is (see candidates below); the error lists every path tried.
-- nres needs LuaJIT's FFI: say so under any other Lua (plain Lua 5.1, as
-- LuaRocks may run, would otherwise fail with "module 'ffi' not found").
if not jit then
  error("nres needs LuaJIT (its FFI): this is " .. tostring(_VERSION)
        .. "; run it with luajit or in OpenResty", 2)
end
local ffi = require "ffi"

-- The library's ABI this binding matches: the one place it is written
-- (CMakeLists.txt reads this line into nres/version.h's NRES_ABI_VERSION).
local ABI_VERSION = 9

ffi.cdef [[
typedef uint64_t nres_time_t;
typedef struct nres_rng_s { uint64_t state; } nres_rng_t;

typedef struct nres_verdict_s {
  uint8_t kind, flags; uint16_t reserved_; int32_t code; nres_time_t retry_after;
} nres_verdict_t;

typedef struct nres_backoff_s {
  uint8_t kind, jitter; uint8_t reserved_[6];
  double factor; nres_time_t base, max, throttled_base;
} nres_backoff_t;

typedef struct nres_backoff_state_s { nres_time_t prev; double curve; } nres_backoff_state_t;

typedef struct nres_budget_s {
  int64_t deposit, capacity; uint64_t refill_per_sec;
  int64_t tokens; uint64_t refilled_at, spent, refused;
} nres_budget_t;

typedef struct nres_window_s {
  nres_time_t width; uint32_t count, reserved_; uint64_t bucket[16];
  struct { uint64_t pending; uint64_t reserved_[7]; } shard[8];
} nres_window_t;

typedef struct nres_breaker_config_s {
  uint32_t consecutive, min_calls; double failure_ratio, slow_ratio;
  nres_time_t window; uint32_t buckets, probes, success_threshold, reserved_;
  nres_time_t break_for, break_max; double break_jitter; nres_time_t lease;
} nres_breaker_config_t;

typedef struct nres_breaker_s {
  nres_breaker_config_t config; uint64_t word; uint32_t consecutive, level;
  uint64_t trips, rejected, leases_expired; nres_window_t window;
} nres_breaker_t;

typedef struct nres_throttle_s {
  double k; nres_time_t refresh; uint64_t next, odds, refused, due, refused_at; double fast_failure;
  nres_window_t window;
} nres_throttle_t;

typedef struct nres_ratelimit_s {
  nres_time_t interval, tolerance; uint64_t tat, refused;
} nres_ratelimit_t;

typedef struct nres_bulkhead_config_s {
  uint32_t limit, queue; nres_time_t queue_timeout, poll;
  uint32_t adaptive, min_limit, max_limit, reserved_;
  nres_time_t latency_target; double decrease;
  double tolerance, smoothing; uint32_t long_window, headroom; double reserve;
} nres_bulkhead_config_t;

typedef struct nres_bulkhead_s {
  nres_bulkhead_config_t config; uint32_t inflight, waiting; uint64_t limit_fp, refused;
  uint64_t recent, baseline, samples; uint32_t probe_left, holes; uint64_t refused_class[3];
  uint64_t tickets, head, free_at, leases_expired;
} nres_bulkhead_t;

typedef struct nres_estimator_s {
  nres_time_t period; uint64_t epoch[2]; uint32_t count[2][608];
  struct { uint64_t entry[24]; uint64_t reserved_[8]; } shard[8];
} nres_estimator_t;

typedef struct nres_hedge_s {
  uint32_t max, min_samples; nres_time_t delay; double quantile, suppress_ratio;
  nres_window_t window;
} nres_hedge_t;

typedef struct nres_counters_s {
  uint64_t calls, attempts, retries, hedges, abandoned, fallbacks, late;
  uint64_t verdicts[5]; uint64_t stops[12]; uint64_t rejects[6];
  uint64_t hedges_won, class_rejects[3], isolations, resets;
} nres_counters_t;

typedef struct nres_policy_s {
  uint32_t attempts, telemetry; nres_backoff_t backoff;
  nres_time_t deadline, attempt_timeout;
  double ceiling_factor, ceiling_quantile; nres_time_t ceiling_floor;
  uint32_t min_samples, reserved0_; nres_time_t slow_threshold; double slow_factor;
  nres_time_t limit_wait; uint32_t fallback, throttle_fail; uint64_t seed;
  nres_hedge_t hedge;
  nres_budget_t *budget; nres_breaker_t *breaker; nres_ratelimit_t *ratelimit;
  nres_bulkhead_t *bulkhead; nres_estimator_t *estimator; nres_throttle_t *throttle;
  void *on_event; void *event_data; struct nres_policy_s *shadow;
  struct { nres_budget_t budget; nres_breaker_t breaker; nres_estimator_t estimator;
           nres_throttle_t throttle; } own;
  uint32_t private_flags, private_magic, draining;
  uint64_t sequence, quantile_next, quantile_samples, quantile_ceiling, quantile_slow,
           quantile_hedge, quantile_fast;
  uint64_t n_verdicts[5], n_stops[12], n_rejects[6];
  uint64_t n_retries, n_hedges, n_abandoned, n_fallbacks, n_late;
  uint64_t n_hedges_won, n_class_rejects[3], n_isolations, n_resets;
  struct { uint64_t verdicts, stops, reserved_[14]; } n_ok[8];
} nres_policy_t;

typedef struct nres_attempt_rec_s {
  nres_time_t start, end; uint16_t number; uint8_t slot, hedge, kind, flags; uint16_t reserved_;
} nres_attempt_rec_t;

typedef struct nres_call_s {
  nres_policy_t *policy; nres_time_t start, deadline, resume_at;
  uint8_t phase, stop, inflight, fallback; uint16_t attempts, retries, hedges;
  uint8_t queued, seeded, charged, throttled, criticality, deferred;
  uint8_t shadow, shadow_slot; uint16_t shadow_attempts; uint32_t shadow_permit;
  nres_time_t queue_end; uint64_t ticket;
  nres_verdict_t last; nres_backoff_state_t backoff; nres_rng_t rng;
  struct { nres_time_t start, deadline; uint32_t permit; uint16_t number;
           uint8_t hedge, held; } slot[4];
  nres_attempt_rec_t log[8];
} nres_call_t;

typedef struct nres_step_s {
  int32_t kind, slot, hedge, stop, cancel, fallback, attempt, reserved_;
  double at, resume_at;
} nres_step_t;

typedef struct nres_budget_stats_s {
  int64_t tokens; nres_time_t refilled_at; uint64_t spent, refused;
} nres_budget_stats_t;
typedef struct nres_breaker_stats_s {
  uint32_t state, probes, successes, consecutive, level, reserved_;
  uint64_t trips, rejected, leases_expired;
} nres_breaker_stats_t;
typedef struct nres_ratelimit_stats_s { nres_time_t tat; uint64_t refused; } nres_ratelimit_stats_t;
typedef struct nres_throttle_stats_s {
  uint32_t requests, accepts; uint64_t refused; double probability;
} nres_throttle_stats_t;
typedef struct nres_bulkhead_stats_s {
  uint32_t inflight, waiting, limit, reserved_; uint64_t limit_fp, refused;
  double recent, baseline; uint64_t refused_class[3]; uint64_t leases_expired;
} nres_bulkhead_stats_t;

const char *nres_strerror(int err);
const char *nres_err_name(int err);
const char *nres_version_string(void);
unsigned nres_abi_version(void);
size_t nres_sizeof(int kind);
const char *nres_stop_name(int stop);
const char *nres_breaker_state_name(int state);

nres_time_t nres_time_from_sec(double seconds);

void nres_backoff_init(nres_backoff_t *backoff);
int nres_backoff_check(const nres_backoff_t *backoff);
const char *nres_backoff_error(const nres_backoff_t *backoff);
void nres_budget_stats(const nres_budget_t *budget, nres_budget_stats_t *out);
void nres_breaker_stats(const nres_breaker_t *breaker, nres_breaker_stats_t *out);
int nres_breaker_peek(const nres_breaker_t *breaker, nres_time_t now, nres_time_t *until);
const char *nres_breaker_config_error(const nres_breaker_config_t *config);
void nres_ratelimit_stats(const nres_ratelimit_t *limit, nres_ratelimit_stats_t *out);
void nres_bulkhead_stats(const nres_bulkhead_t *bulkhead, nres_bulkhead_stats_t *out);
const char *nres_bulkhead_config_error(const nres_bulkhead_config_t *config);
int nres_budget_init(nres_budget_t *budget, double ratio, double min_per_sec, double capacity);
double nres_budget_level(nres_budget_t *budget, nres_time_t now);
void nres_breaker_config_init(nres_breaker_config_t *config);
int nres_breaker_init(nres_breaker_t *breaker, const nres_breaker_config_t *config);
int nres_breaker_state(const nres_breaker_t *breaker, nres_time_t now);
void nres_breaker_isolate(nres_breaker_t *breaker);
void nres_breaker_reset(nres_breaker_t *breaker);
void nres_breaker_release(nres_breaker_t *breaker, uint32_t permit);
int nres_breaker_acquire(nres_breaker_t *breaker, nres_time_t now, uint32_t *permit);
int nres_breaker_record(nres_breaker_t *breaker, nres_time_t now, uint32_t permit, int outcome,
                        int slow, nres_rng_t *rng);
void nres_shard_set(unsigned index);
int nres_ratelimit_init(nres_ratelimit_t *limit, double rate, uint32_t burst);
int nres_throttle_init(nres_throttle_t *throttle, double k, nres_time_t window, uint32_t buckets);
const char *nres_throttle_error(double k, nres_time_t window, uint32_t buckets);
void nres_throttle_stats(const nres_throttle_t *throttle, nres_time_t now,
                         nres_throttle_stats_t *out);
void nres_bulkhead_config_init(nres_bulkhead_config_t *config);
int nres_bulkhead_init(nres_bulkhead_t *bulkhead, const nres_bulkhead_config_t *config);
uint32_t nres_bulkhead_limit(const nres_bulkhead_t *bulkhead);
int nres_estimator_init(nres_estimator_t *estimator, nres_time_t period);
nres_time_t nres_estimator_quantile(const nres_estimator_t *estimator, nres_time_t now,
                                    double q, uint64_t *samples);
int nres_window_init(nres_window_t *window, nres_time_t span, uint32_t buckets);
uint32_t nres_hist_index(uint64_t value);
uint64_t nres_hist_upper(uint32_t index);

int nres_policy_init(nres_policy_t *policy, int preset);
int nres_policy_build(nres_policy_t *policy);
const char *nres_policy_error(const nres_policy_t *policy);
void nres_policy_drain(nres_policy_t *policy, int on);
int nres_policy_isolate(nres_policy_t *policy, int on);
int nres_policy_shadow(nres_policy_t *policy, nres_policy_t *candidate);
void nres_policy_counters(const nres_policy_t *policy, nres_counters_t *out);
void nres_policy_counters_reset(nres_policy_t *policy);
const nres_attempt_rec_t *nres_call_log(const nres_call_t *call, unsigned i);

int nres_step_begin(nres_call_t *call, nres_policy_t *policy, double now, double inbound,
                    nres_step_t *out);
int nres_step_begin_class(nres_call_t *call, nres_policy_t *policy, double now,
                          double inbound, int cls, nres_step_t *out);
const char *nres_class_name(int cls);
int nres_class_parse(const char *name, size_t len);
int nres_step_report(nres_call_t *call, unsigned slot, double now, int kind, int flags,
                     double retry_after, nres_step_t *out);
int nres_step_resume(nres_call_t *call, double now, nres_step_t *out);
int nres_step_cancel(nres_call_t *call, double now, nres_step_t *out);
int nres_step_abort(nres_call_t *call, double now, nres_step_t *out);
int nres_step_log(const nres_call_t *call, double *out);
int nres_step_sync_begin(nres_call_t *call, nres_policy_t *policy, double now, int cls,
                         double *at);
int nres_step_sync_report(nres_call_t *call, unsigned slot, double now, int kind, int flags,
                          double retry_after, double *at);
int nres_step_sync_resume(nres_call_t *call, double now, double *at);
double nres_step_now(void);
void nres_step_sleep(double ns);
]]

-- The shared-memory state of the nginx gateway (nres/shm.h): its own cdef
-- module, declared with the rest before the library is checked.
require "nres.cdef.shm"

-- The library. In order: $NRES_LIB; a libnres already loaded into the
-- process (nginx with ngx_http_nres_module: the module's own, found by
-- its rpath, so Lua and the module share one registry); package.cpath's
-- absolute templates with "libnres" for "?" (nginx: lua_package_cpath
-- "/path/to/build/?.so;;"); the soname through the system's loader (an
-- installed library: ld.so.cache, LD_LIBRARY_PATH); the usual install
-- directories. A relative template ("./?.so") is not tried: a library is
-- never loaded from whatever the current directory is.
ffi.cdef [[
typedef struct { const char *dli_fname; void *dli_fbase; const char *dli_sname;
                 void *dli_saddr; } nres_dl_info_t;
int dladdr(const void *addr, nres_dl_info_t *info);
]]

local function candidates()
  local list = {}
  local env = os.getenv("NRES_LIB")
  if env and env ~= "" then list[#list + 1] = env end
  for template in package.cpath:gmatch("[^;]+") do
    if template:sub(1, 1) == "/" then
      list[#list + 1] = (template:gsub("%?", "libnres"))
    end
  end
  list[#list + 1] = "libnres.so.0"
  -- libnres.so comes with the -dev files; libnres.so.0 (its soname, the
  -- CMake project's major version) alone with the runtime package libnres0.
  for _, dir in ipairs { "/usr/local/lib", "/usr/local/lib/x86_64-linux-gnu",
                         "/usr/local/lib/aarch64-linux-gnu", "/usr/lib",
                         "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu" } do
    list[#list + 1] = dir .. "/libnres.so"
    list[#list + 1] = dir .. "/libnres.so.0"
  end
  return list
end

-- The libnres this process already has (nil if none): ffi.C resolves in
-- the global namespace, where nginx's dlopen of a module puts the
-- module's libraries.
local function loaded()
  local ok, sym = pcall(function() return ffi.C.nres_abi_version end)
  if not ok then return nil end
  local info = ffi.new("nres_dl_info_t")
  if ffi.C.dladdr(sym, info) == 0 or info.dli_fname == nil then return nil end
  return ffi.string(info.dli_fname)
end

local function load_library()
  local env = os.getenv("NRES_LIB")
  local have = loaded()
  if have and not (env and env ~= "") then return ffi.C, have end
  local tried = {}
  for _, path in ipairs(candidates()) do
    local ok, lib = pcall(ffi.load, path)
    if ok then return lib, path end
    tried[#tried + 1] = "  " .. path
  end
  error("nres: cannot load libnres; tried:\n" .. table.concat(tried, "\n")
        .. "\nin nginx: lua_package_cpath \"/path/to/nres/build/?.so;;\"; or"
        .. " `env NRES_LIB;` and NRES_LIB=/path/to/libnres.so in nginx's environment;"
        .. " elsewhere NRES_LIB (see docs/gateway-regions.md)", 0)
end

local C, path = load_library()

local abi = tonumber(C.nres_abi_version())
if abi ~= ABI_VERSION then
  error(string.format("nres: %s has ABI version %d, this Lua module expects %d;"
    .. " rebuild or point NRES_LIB at a matching library", path, abi, ABI_VERSION), 0)
end

-- Sizes the library publishes (nres_sizeof_t order) against our declarations.
local sizes = {
  [0] = "nres_policy_t", "nres_call_t", false, "nres_verdict_t", "nres_budget_t",
  "nres_breaker_t", "nres_ratelimit_t", "nres_bulkhead_t", "nres_estimator_t",
  "nres_counters_t", "nres_step_t", "nres_window_t", "nres_budget_stats_t",
  "nres_breaker_stats_t", "nres_ratelimit_stats_t", "nres_bulkhead_stats_t",
  "nres_throttle_t", "nres_throttle_stats_t",
}
for kind = 0, #sizes do
  local name = sizes[kind]
  if name then
    local theirs, ours = tonumber(C.nres_sizeof(kind)), ffi.sizeof(name)
    if theirs ~= ours then
      error(string.format("nres: %s is %d bytes in %s but %d in lua/nres/cdef.lua;"
        .. " the library and the Lua module are out of step", name, theirs, path, ours), 0)
    end
  end
end

-- The name of an NRES_E* code ("ECIRCUIT"), cached: error paths use it.
local err_names = {}
local function err_name(rc)
  local n = err_names[rc]
  if not n then
    n = ffi.string(C.nres_err_name(rc))
    err_names[rc] = n
  end
  return n
end

return { C = C, path = path, err_name = err_name }

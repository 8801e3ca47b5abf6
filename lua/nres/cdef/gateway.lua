-- SPDX-License-Identifier: MIT
-- nres.cdef.gateway: the ffi.cdef of runtime/include/nres/gateway.h (the
-- gateway's balancer-mode decisions), once for every module that calls
-- them (nres.ngx.balancer, nres.ngx.limiter, nres.ngx.cosocket). Pointers
-- to types this binding does not declare (nres_shm_slot_t) are void *.
-- Loading checks each struct's size against what the library reports.
local ffi = require "ffi"
local cdef = require "nres.cdef"

local C = cdef.C

ffi.cdef [[
typedef struct nres_gw_control_s {
  uint32_t flags; uint32_t burst; double rate; nres_time_t interval, tolerance;
  uint64_t would_refuse[4]; uint32_t weight, reserved32_; uint64_t reserved_[1];
} nres_gw_control_t;
typedef struct nres_gw_config_s {
  const char *name; const char *key; nres_shm_t *scope; nres_shm_t *peers;
  nres_estimator_t *estimators; const char *const *peer_names; const uint32_t *peer_slots;
  uint32_t npeers, attempts; nres_time_t deadline, attempt_timeout, hold;
  int choice; double panic; int budget, breaker;
  void *try_hists; void *request_hist; void *control; void *peer_controls;
  const uint32_t *peer_weights; const uint8_t *peer_backup; nres_time_t slow_start;
  struct nres_gw_members_s *members;
} nres_gw_config_t;
typedef struct nres_gw_peer_s {
  nres_breaker_t *breaker; nres_estimator_t *estimator; void *counters; void *hist;
  void *control; uint32_t slot, inflight;
  double cost; int state, drained, windowed; uint32_t declared, weight; int backup, up;
  nres_time_t since; double share, current; char name[65];
  int removed; uint32_t socklen; union { uint8_t bytes[28]; uint64_t align_; } sockaddr;
} nres_gw_peer_t;
typedef struct nres_gw_upstream_s {
  struct nres_gw_upstream_s *next; char name[65]; char key[65];
  nres_shm_t *scope, *peers; nres_time_t deadline, attempt_timeout, hold;
  uint32_t attempts, n; int choice, budget, breaker, windowed; double panic;
  int32_t sidx; void *sslot; nres_time_t lookup_at, checked; uint32_t rr; int panicking;
  uint64_t overflow; nres_rng_t rng; void *hist; void *control;
  nres_time_t slow_start; int weighted, tier; int declared_weighted, windowed_peers;
  nres_estimator_t *estimators; void *try_hists; void *peer_controls;
  struct nres_gw_members_s *members; uint64_t gen; uint32_t cap, view, row_words, reserved_;
  uint32_t *inflight;
  nres_gw_peer_t peer[?];
} nres_gw_upstream_t;
typedef struct nres_gw_request_s {
  nres_time_t deadline, t0; void *slot; int32_t idx, peer; uint32_t upermit, ppermit;
  uint8_t has_upermit, has_ppermit, reserved, budget_refused; int8_t cls; uint8_t reserved_[3];
  uint32_t tries, retries; nres_time_t begun;
} nres_gw_request_t;
typedef struct nres_gw_limiter_s {
  struct nres_gw_limiter_s *next; char name[65]; nres_shm_t *table; nres_time_t hold;
  uint64_t overflow; void *control;
} nres_gw_limiter_t;

nres_gw_upstream_t *nres_gw_upstream_new(const nres_gw_config_t *cfg);
void nres_gw_upstream_free(nres_gw_upstream_t *u);
void nres_gw_register(nres_gw_upstream_t *u);
nres_gw_upstream_t *nres_gw_find(const char *name, size_t len);
void nres_gw_registry_clear(void);
void nres_gw_seed(nres_gw_upstream_t *u, uint64_t seed);
size_t nres_gw_struct_size(int which);
void nres_gw_refresh(nres_gw_upstream_t *u, nres_time_t now);

nres_gw_limiter_t *nres_gw_limiter_new(const char *name, nres_shm_t *table, nres_time_t hold);
void nres_gw_limiter_free(nres_gw_limiter_t *l);
void nres_gw_limiter_register(nres_gw_limiter_t *l);
nres_gw_limiter_t *nres_gw_limiter_find(const char *name, size_t len);
int nres_gw_limit(nres_gw_limiter_t *l, const char *key, size_t len, nres_time_t now,
                  nres_time_t *wait);

int nres_gw_admit(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                  double inbound_ms);
void nres_gw_unadmitted(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now);
int64_t nres_gw_left_ms(const nres_gw_request_t *r, nres_time_t now);
int nres_gw_pick(nres_gw_upstream_t *u, nres_time_t now, int avoid, uint32_t *permit,
                 int *has_permit);
uint64_t nres_gw_try_begin(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                           int i, uint32_t permit, int has_permit);
int nres_gw_grant(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now, int cls);
double nres_gw_deadline_ms(const char *value, size_t len);
int nres_gw_refusal(int stop, int client, const char **reason);
size_t nres_gw_key(const char *key, size_t len, char *buf, const char **out);
int nres_gw_class(const char *value, size_t len);
int nres_gw_try_end(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                    int failed, int timed_out);
void nres_gw_try_abandon(nres_gw_upstream_t *u, nres_gw_request_t *r);
void nres_gw_request_end(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                         int status);
uint64_t nres_gw_hist_bound(int i);
uint64_t nres_gw_hist_read(const void *h, uint64_t *counts, uint64_t *sum);

void nres_gw_control_flag(nres_gw_control_t *c, uint32_t flag, int on);
typedef struct nres_gw_lease_s { uint64_t word; } nres_gw_lease_t;
int nres_gw_lease_take(nres_gw_lease_t *l, uint32_t id, nres_time_t now, nres_time_t lease);
void nres_gw_lease_drop(nres_gw_lease_t *l, uint32_t id);
uint32_t nres_gw_lease_holder(nres_gw_lease_t *l, nres_time_t now);
typedef struct nres_gw_health_peer_s {   /* Lua's only: nres.ngx.health's record of a peer */
  double at, took; uint32_t ok_run, fail_run, last, status;
  uint32_t by_result[4];
} nres_gw_health_peer_t;
typedef struct nres_gw_member_s {
  uint32_t state, weight, backup, socklen; uint64_t removed_at; uint32_t key_gen, reserved_;
  union { uint8_t bytes[28]; uint64_t align_; } sockaddr; char name[72];
} nres_gw_member_t;
typedef struct nres_gw_members_s {
  uint64_t gen; nres_gw_lease_t lock; uint32_t slots, capacity; uint64_t declared;
  nres_time_t linger; uint64_t reserved_[3];
} nres_gw_members_t;
size_t nres_gw_members_size(uint32_t slots);
nres_gw_member_t *nres_gw_member(nres_gw_members_t *m, uint32_t slot);
uint32_t nres_gw_member_inflight(nres_gw_members_t *m, uint32_t slot);
int nres_gw_members_declare(nres_gw_members_t *m, size_t size, nres_shm_t *peers,
                            uint32_t capacity, const char *const *names, const uint32_t *weights,
                            const uint8_t *backup, uint32_t n, nres_time_t linger, nres_time_t now);
uint32_t nres_gw_parse_addr(const char *s, size_t len, void *out);
int nres_gw_member_add(nres_gw_upstream_t *u, const char *name, size_t len, uint32_t weight,
                       int backup, nres_time_t now);
int nres_gw_member_remove(nres_gw_upstream_t *u, const char *name, size_t len, nres_time_t now);
int nres_gw_members_reap(nres_gw_upstream_t *u, nres_time_t now);
void nres_gw_sync(nres_gw_upstream_t *u, nres_time_t now);
int nres_gw_control_rate(nres_gw_control_t *c, nres_shm_t *table, double rate, uint32_t burst,
                         nres_time_t now);
]]

-- nres_gw_struct_size's numbering (gateway.h) against our declarations
-- (nres_gw_hist_t, 4, is opaque here: its size is read from the library).
local structs = { [0] = "nres_gw_upstream_t", "nres_gw_peer_t", "nres_gw_request_t",
                  "nres_gw_limiter_t", [5] = "nres_gw_control_t", [6] = "nres_gw_members_t",
                  [7] = "nres_gw_member_t" }
for which, ct in pairs(structs) do
  local theirs = tonumber(C.nres_gw_struct_size(which))
  local ours = which == 0 and ffi.sizeof(ct, 0) or ffi.sizeof(ct)
  if theirs ~= ours then
    error(string.format("nres: %s is %d bytes in %s but %d in lua/nres/cdef/gateway.lua;"
      .. " the library and the Lua module are out of step", ct, theirs, cdef.path, ours), 0)
  end
end

return { C = C }

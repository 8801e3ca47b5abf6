-- SPDX-License-Identifier: MIT
-- nres.cdef.shm: the ffi.cdef of runtime/include/nres/shm.h (the shared
-- tables of the nginx gateway: nres.shm, nres.ngx), one module per public
-- header. nres.cdef loads it with nres.h's declarations (the struct sizes
-- it checks include these); require "nres.cdef", not this, to bind.
local ffi = require "ffi"

ffi.cdef [[
typedef struct nres_shm_s nres_shm_t;

typedef struct nres_shm_config_s {
  uint32_t slots, flags;
  double budget_ratio, budget_min_per_sec, budget_capacity;
  nres_breaker_config_t breaker;
  double rate; uint32_t burst, reserved_;
  double throttle_k; nres_time_t throttle_window; uint32_t throttle_buckets, reserved2_;
  double throttle_fast_failure;
} nres_shm_config_t;

typedef struct nres_shm_slot_s {
  uint64_t key[8];
  uint64_t ticket, created;
  uint64_t stops[12];
  nres_budget_t budget;
  nres_breaker_t breaker;
  nres_ratelimit_t ratelimit;
  nres_throttle_t throttle;
  struct { uint64_t calls, attempts, retries, ok, reserved_[12]; } shard[8];
} nres_shm_slot_t;

typedef struct nres_shm_counts_s {
  uint64_t calls, attempts, retries;
  uint64_t stops[12];
} nres_shm_counts_t;

typedef struct nres_shm_migration_s {
  uint32_t keys, moved, full, gone, changed, reset, adjusted, reserved_;
} nres_shm_migration_t;

typedef struct nres_shm_stats_s {
  uint64_t slots, live, lookups, inserts, evictions, full, races;
} nres_shm_stats_t;

void nres_shm_config_init(nres_shm_config_t *config);
size_t nres_shm_size(const nres_shm_config_t *config);
int nres_shm_new(const nres_shm_config_t *config, nres_shm_t **out);
void nres_shm_free(nres_shm_t *shm);
int nres_shm_acquire(nres_shm_t *shm, const char *key, size_t len, nres_time_t now,
                     nres_time_t hold, uint32_t *gen);
nres_shm_slot_t *nres_shm_slot(nres_shm_t *shm, uint32_t index);
int nres_shm_key(nres_shm_t *shm, uint32_t index, char *buf, size_t cap,
                 uint32_t *gen, double *lease);
void nres_shm_record(nres_shm_t *shm, uint32_t index, int stop, uint32_t attempts,
                     uint32_t retries);
int nres_shm_limit(nres_shm_t *shm, uint32_t index, nres_time_t now, double *retry_after);
void nres_shm_stats(nres_shm_t *shm, nres_shm_stats_t *out);
void nres_shm_slot_counts(const nres_shm_slot_t *slot, nres_shm_counts_t *out);
size_t nres_shm_slot_size(void);
int nres_shm_find(nres_shm_t *shm, const char *key, size_t len, uint32_t *gen);
uint32_t nres_shm_slots(nres_shm_t *shm);
int nres_shm_migrate(nres_shm_t *from, nres_shm_t *to, nres_time_t now, unsigned flags,
                     uint32_t *map, nres_shm_migration_t *out);
int nres_shm_migration_text(const nres_shm_migration_t *m, const nres_shm_config_t *from,
                            const nres_shm_config_t *to, char *buf, size_t cap);
int nres_shm_file_check(int fd, uint64_t size, char *why, size_t cap);
int nres_shm_file_open(const char *path, uint64_t size, int *fd, char *why, size_t cap);
int nres_shm_file_create(const char *path, uint64_t size, int *fd, char *why, size_t cap);
int nres_shm_dir_private(const char *path, char *why, size_t cap);
]]

return true

/* SPDX-License-Identifier: MIT */
/* nres/shm.h - keyed policy state in memory shared between processes.
 *
 * A gateway runs several worker processes; a breaker that opens in one of
 * them must be open in all, and a retry budget or a rate limit must be one
 * bucket, not one per worker. A shm table is a fixed table of slots in one
 * region of memory; each slot holds a key (an upstream host, a client id),
 * the state a scoped policy needs (a budget, a breaker, a rate limiter, a
 * throttle, all atomics and no pointers) and counters. Any process that
 * maps the region (nginx workers forked from the master that created it)
 * finds a key's slot and updates its state with atomics only: lookups,
 * inserts and evictions are compare-and-swaps on one word per slot, with
 * no lock anywhere, so a process killed at any instruction cannot wedge
 * the others: an insert it left half done is finished by the next lookup
 * of its key, or its slot is taken back when the claim's lease ends
 * (spec/c/test_shm.c kills a process at every step of the protocol,
 * NRES_SHM_STEP_*, to prove it).
 *
 * Bounds. A key is at most NRES_SHM_KEY_MAX bytes. The table holds `slots`
 * keys (a multiple of NRES_SHM_WAYS); a key lives in one of the
 * NRES_SHM_WAYS slots of the set its hash picks, so a set that is full of
 * keys in use refuses a new key (NRES_EFULL) before the whole table is.
 * Every lookup leases its slot for `hold`: a slot is evicted (least
 * recently leased first) only when its lease has run out, so a call that
 * holds slot state for at most `hold` never sees it handed to another key.
 * Size: nres_shm_size(config), about 1.1 KB per slot (most of it the
 * breaker window's per-thread shards, see nres_window_t).
 *
 * Time is nres_time_t nanoseconds on one clock for every process (the
 * drivers use CLOCK_MONOTONIC, which is system-wide); leases keep ms, up
 * to 2^42 - 1 ms (about 139 years): a lease that would end later, such as
 * hold = NRES_TIME_NEVER, never ends. Sums saturate; no time wraps.
 *
 * A region made elsewhere (a file mapped by several programs) goes through
 * nres_shm_attach, which checks its magic, layout version and layout
 * against the mapping's size; every other entry point refuses a header
 * that does not agree with itself (NRES_EINVAL, NULL, or nothing done).
 */
#ifndef NRES_SHM_H
#define NRES_SHM_H

#include "../nres.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRES_SHM_KEY_MAX 64            /* bytes of a key */
#define NRES_SHM_WAYS 8                /* slots a key may live in */
#define NRES_SHM_MAX_SLOTS (1u << 20)

/* Which state each slot keeps (nres_shm_config_t.flags). */
enum {
  NRES_SHM_BUDGET = 1,
  NRES_SHM_BREAKER = 2,
  NRES_SHM_RATELIMIT = 4,
  NRES_SHM_THROTTLE = 8
};

typedef struct nres_shm_s nres_shm_t;  /* the region's header; opaque */
typedef struct nres_shm_slot_s nres_shm_slot_t;
typedef struct nres_shm_config_s nres_shm_config_t;
typedef struct nres_shm_stats_s nres_shm_stats_t;

/* The template every slot's state is made from when a key moves in. */
struct nres_shm_config_s {
  uint32_t slots;               /* keys the table holds; rounded up to a
                                   multiple of NRES_SHM_WAYS. Default 1024 */
  uint32_t flags;               /* NRES_SHM_*; 0 = counters only */
  double budget_ratio;          /* nres_budget_init's arguments */
  double budget_min_per_sec;
  double budget_capacity;
  nres_breaker_config_t breaker;
  double rate;                  /* nres_ratelimit_init's arguments */
  uint32_t burst;
  uint32_t reserved_;
  double throttle_k;            /* nres_throttle_init's arguments */
  nres_time_t throttle_window;
  uint32_t throttle_buckets;
  uint32_t reserved2_;
  double throttle_fast_failure; /* the throttle's fast_failure: 0 (off, as
                                   nres_shm_config_init leaves it) or a
                                   fraction in (0, 1) of the p50 */
};

/* One key's slot. The state and the counters are the caller's to use
 * between nres_shm_acquire and the end of the lease; the other fields are
 * the table's. */
struct nres_shm_slot_s {
  NRES_ATOMIC(uint64_t) key[NRES_SHM_KEY_MAX / 8];
  NRES_ATOMIC(uint64_t) ticket;         /* settles two inserts of one key */
  NRES_ATOMIC(uint64_t) created;        /* ns, when the key moved in */
  /* Calls that ended with each stop but NRES_STOP_OK (counted in
   * shard[].ok; stops[NRES_STOP_OK] stays 0). nres_shm_slot_counts sums. */
  NRES_ATOMIC(uint64_t) stops[NRES_STOP_COUNT];
  nres_budget_t budget;
  nres_breaker_t breaker;
  nres_ratelimit_t ratelimit;
  nres_throttle_t throttle;
  /* What every call writes, in the calling thread's shard (the process's,
   * for single-threaded workers sharing the table): one line written by
   * every worker would move between their cores on every request. 128
   * bytes apart, the words at the start, so no two shards' words share a
   * line whatever the slot's alignment. */
  struct {
    NRES_ATOMIC(uint64_t) calls;
    NRES_ATOMIC(uint64_t) attempts;
    NRES_ATOMIC(uint64_t) retries;
    NRES_ATOMIC(uint64_t) ok;           /* calls that ended with NRES_STOP_OK */
    uint64_t reserved_[12];
  } shard[NRES_SHARDS];
};

/* A slot's counts, summed over its shards (nres_shm_slot_counts). */
typedef struct nres_shm_counts_s {
  uint64_t calls;               /* nres_shm_record's calls, and
                                   nres_shm_limit's admissions asked */
  uint64_t attempts;
  uint64_t retries;
  uint64_t stops[NRES_STOP_COUNT];
} nres_shm_counts_t;

/* The table's own counters. */
struct nres_shm_stats_s {
  uint64_t slots;               /* capacity */
  uint64_t live;                /* slots holding a key now */
  uint64_t lookups;             /* nres_shm_acquire calls that succeeded */
  uint64_t inserts;             /* keys moved in */
  uint64_t evictions;           /* keys moved out to make room */
  uint64_t full;                /* refusals: every slot of the set leased */
  uint64_t races;               /* inserts that lost to a concurrent insert
                                   of the same key */
};

/* Defaults: 1024 slots, budget + breaker with the default preset's
 * configuration (ratio 0.1, 3/s, capacity 30; nres_breaker_config_init),
 * no rate limit (rate 100/s, burst 1 when turned on). */
NRES_EXTERN void nres_shm_config_init(nres_shm_config_t *config);
/* Bytes of a region for this configuration; 0 if it is invalid (slots 0 or
 * above NRES_SHM_MAX_SLOTS, unknown flags, a state's arguments that its
 * init refuses). */
NRES_EXTERN size_t nres_shm_size(const nres_shm_config_t *config);
/* Lay a table out in caller-owned memory of `size` bytes (at least
 * nres_shm_size, 64-byte aligned). Every slot starts free. Not safe while
 * another process uses the memory. NRES_EINVAL on a bad config or size. */
NRES_EXTERN int nres_shm_init(void *mem, size_t size,
                              const nres_shm_config_t *config);
/* mmap(MAP_SHARED | MAP_ANONYMOUS) a region and nres_shm_init it: shared
 * with every child forked after this (nginx: call it in init_by_lua, in
 * the master). NRES_ENOMEM if the mapping fails. */
NRES_EXTERN int nres_shm_new(const nres_shm_config_t *config,
                             nres_shm_t **out);
/* Check that `size` bytes at mem (64-byte aligned) hold a table laid out
 * by nres_shm_init of this build: magic, layout version, a header that
 * agrees with itself and a region no longer than the mapping, a valid
 * configuration. 0 and *out = the table, or NRES_EINVAL (a truncated file,
 * a corrupted header, another version). Writes nothing. */
NRES_EXTERN int nres_shm_attach(void *mem, size_t size, nres_shm_t **out);
/* Unmap a region from nres_shm_new (in this process only; other processes
 * keep their mapping). NULL is ignored. */
NRES_EXTERN void nres_shm_free(nres_shm_t *shm);

/* The slot of `key` (len bytes, 1..NRES_SHM_KEY_MAX), inserted if it is
 * not there, leased until at least now + hold. Returns its index (>= 0) and
 * *gen, a number that changes whenever the slot gets a new key (gen may be
 * NULL). NRES_EFULL: every slot of the key's set is leased by other keys.
 * NRES_EBUSY: other inserts of the set kept winning (64 rounds; only under
 * heavy concurrent inserting; a dead process cannot cause it). NRES_EINVAL:
 * bad arguments or header. Lock-free; never allocates. */
NRES_EXTERN int nres_shm_acquire(nres_shm_t *shm, const char *key, size_t len,
                                 nres_time_t now, nres_time_t hold,
                                 uint32_t *gen);
/* The slot at `index` (from nres_shm_acquire), or NULL if out of range. */
NRES_EXTERN nres_shm_slot_t *nres_shm_slot(nres_shm_t *shm, uint32_t index);
/* Copy the key of slot `index` into buf (cap bytes) if the slot holds one:
 * its length (which may exceed cap: the copy is cut), and *gen and *lease
 * (ns, NRES_TIME_NEVER for a lease that never ends; either may be NULL). A negative NRES_E* if the slot is free or being
 * filled (NRES_EAGAIN) or out of range (NRES_EINVAL). For status pages. */
NRES_EXTERN int nres_shm_key(nres_shm_t *shm, uint32_t index, char *buf,
                             size_t cap, uint32_t *gen, double *lease);
/* Count one call that ended with `stop` after `attempts` attempts of which
 * `retries` were retries. Relaxed atomics. */
NRES_EXTERN void nres_shm_record(nres_shm_t *shm, uint32_t index, int stop,
                                 uint32_t attempts, uint32_t retries);
/* The same into a slot from nres_shm_slot, held while its key's lease
 * lasts (no header check: for callers that count every request). */
NRES_EXTERN void nres_shm_slot_record(nres_shm_slot_t *slot, int stop,
                                      uint32_t attempts, uint32_t retries);
/* Take one admission from slot `index`'s rate limiter: 0, or NRES_ELIMITED
 * with *retry_after (ns, may be NULL) until one would be allowed. Counted
 * in the slot's calls, refusals also in stops[NRES_STOP_LIMITED].
 * NRES_EINVAL if the table keeps no rate limit. */
NRES_EXTERN int nres_shm_limit(nres_shm_t *shm, uint32_t index,
                               nres_time_t now, double *retry_after);
NRES_EXTERN void nres_shm_stats(nres_shm_t *shm, nres_shm_stats_t *out);
/* The configuration the table was made with. */
NRES_EXTERN const nres_shm_config_t *nres_shm_config(nres_shm_t *shm);
/* The slot's counts: every shard's summed, at the moment each word is
 * read (counts added meanwhile may be seen in one field, not yet in
 * another). A NULL slot reads all 0. */
NRES_EXTERN void nres_shm_slot_counts(const nres_shm_slot_t *slot,
                                      nres_shm_counts_t *out);

/* The slot of `key` if the table holds it (LIVE), without inserting it
 * or touching its lease: its index and *gen (may be NULL), or
 * NRES_EAGAIN if the key is not there, NRES_EINVAL on bad arguments. */
NRES_EXTERN int nres_shm_find(nres_shm_t *shm, const char *key, size_t len,
                              uint32_t *gen);

/* ------------------------------------------------------- migration
 *
 * A reload whose table has another layout (slots, configuration) makes a
 * new table. nres_shm_migrate moves each key's state from the old table
 * into it, so a reload keeps what the gateway has learnt: an open breaker
 * stays open until the same moment, a half-open one keeps its probes and
 * their lease, a budget keeps its level, a limiter the admissions it made
 * ahead of time, the counters their counts; the key keeps its lease. Times
 * are kept as they are (one monotonic clock for every process).
 *
 * Only a part whose meaning the new configuration changed starts fresh,
 * and `reset` says which (NRES_SHM_RESET_*): a breaker's or throttle's
 * window counts when the window's span or buckets changed (counts of
 * 5 s buckets are not counts of 10 s ones). Other changes keep the state
 * under the new rules: a budget level above the new capacity is cut to
 * it (NRES_SHM_ADJUST_BUDGET), a limiter's admissions ahead are rescaled
 * to the new rate as nres_ratelimit_set_rate does (NRES_SHM_ADJUST_RATE),
 * a breaker's thresholds apply from its next outcome. A kind of state the
 * new table keeps and the old did not starts fresh; one it no longer keeps
 * is dropped.
 *
 * Keys move in the order of their leases, the latest first: where a set
 * of the new table (a smaller one) cannot hold every key that hashes to
 * it, the keys used most recently are kept and the rest counted in
 * `full`. With NRES_SHM_MIGRATE_PRESENT only keys the new table already
 * holds get state (a gateway's peers: the declared ones, laid out first);
 * the others are counted in `gone`.
 *
 * The old table may be in use while it is read (a reload's old workers):
 * each slot is read word by word and kept only if its key did not change
 * meanwhile (else counted in `changed` and left out). What the old users
 * write after a slot was read stays in the old table. The new table must
 * not be in use by anyone else. */
enum {
  NRES_SHM_MIGRATE_PRESENT = 1   /* only keys the new table holds */
};

/* Parts left fresh because their meaning changed. */
enum {
  NRES_SHM_RESET_BREAKER_WINDOW = 1,    /* the breaker's window counts */
  NRES_SHM_RESET_THROTTLE_WINDOW = 2    /* the throttle's window counts
                                           and its cached odds */
};

/* Parts kept under the new rules. */
enum {
  NRES_SHM_ADJUST_BUDGET = 1,           /* a level cut to the new capacity */
  NRES_SHM_ADJUST_RATE = 2              /* admissions ahead, at the new rate */
};

typedef struct nres_shm_migration_s {
  uint32_t keys;                /* keys the old table held */
  uint32_t moved;               /* keys whose state moved */
  uint32_t full;                /* left out: their set in the new table
                                   was full of keys used more recently */
  uint32_t gone;                /* left out: not in the new table
                                   (NRES_SHM_MIGRATE_PRESENT) */
  uint32_t changed;             /* left out: the key changed while read */
  uint32_t reset;               /* NRES_SHM_RESET_* that happened */
  uint32_t adjusted;            /* NRES_SHM_ADJUST_* that happened */
  uint32_t reserved_;
} nres_shm_migration_t;

/* Move every key's state from `from` into `to` (see above), at `now`.
 * map, if not NULL, has room for `from`'s slots (nres_shm_slots): map[i]
 * is the new index of old slot i's key, or UINT32_MAX if it did not move
 * (a caller's own per-slot memory moves by it). Allocates a work list
 * (NRES_ENOMEM); never at a request. 0 and *out filled, or NRES_EINVAL
 * (a table that is not valid, from == to, out NULL). */
NRES_EXTERN int nres_shm_migrate(nres_shm_t *from, nres_shm_t *to,
                                 nres_time_t now, unsigned flags,
                                 uint32_t *map, nres_shm_migration_t *out);
/* One line for a log: what moved, what was left out and why, what was
 * reset or adjusted and which setting's change caused it (`from` and `to`
 * the two tables' configurations). The length it needed (snprintf's). */
NRES_EXTERN int nres_shm_migration_text(const nres_shm_migration_t *m,
                                        const nres_shm_config_t *from,
                                        const nres_shm_config_t *to,
                                        char *buf, size_t cap);
/* The table's slots (as rounded up), 0 for an invalid table. */
NRES_EXTERN uint32_t nres_shm_slots(nres_shm_t *shm);

/* ----------------------------------------------------- region files
 *
 * A table other programs attach to by path lives in a file (the nginx
 * gateway's tables; nres.shm's `file`). Such a file is input: these are
 * the checks it passes before it is mapped. Each returns 0, or a negative
 * code with one line for a log in why[cap] (may be NULL) saying what was
 * wrong. NRES_EINVAL: the file or directory is unfit (replace it or
 * refuse); NRES_ESTATE: a system call failed; see each for the rest. */

/* Is the open file fd fit to hold a region of `size` bytes: a regular
 * file owned by this process's effective user, no group or other access,
 * exactly size bytes long (fstat of fd: what is checked is what is
 * mapped)? Call it again before touching a mapping after a pause (a file
 * truncated in place faults every page past its new end). size 0: any
 * size but empty, for a file read to migrate its state or for a program
 * that attaches to a region it did not make (nres-syncd): it maps the
 * file's size and nres_shm_attach checks that against the layout in the
 * header. */
NRES_EXTERN int nres_shm_file_check(int fd, uint64_t size, char *why,
                                    size_t cap);
/* Open an existing region file without following a symbolic link
 * (O_NOFOLLOW) and check it (nres_shm_file_check): *fd, or -1.
 * NRES_EAGAIN: there is no such file. */
NRES_EXTERN int nres_shm_file_open(const char *path, uint64_t size, int *fd,
                                   char *why, size_t cap);
/* Create a new region file (O_EXCL, O_NOFOLLOW, mode 0600) of `size`
 * bytes with its blocks reserved (posix_fallocate): *fd, or -1 and the
 * file removed. NRES_EFULL: the filesystem has no room (or a quota). */
NRES_EXTERN int nres_shm_file_create(const char *path, uint64_t size, int *fd,
                                     char *why, size_t cap);
/* Make `path` a private directory for region files: created 0700 if
 * missing, then refused unless it is a directory (not a symbolic link)
 * of this process's effective user with no group or other access.
 * NRES_EAGAIN: it could not be created here (no permission, read-only). */
NRES_EXTERN int nres_shm_dir_private(const char *path, char *why, size_t cap);
/* sizeof(nres_shm_slot_t), for bindings that declare it themselves. */
NRES_EXTERN size_t nres_shm_slot_size(void);

/* The steps of nres_shm_acquire at which a process may be stopped, each
 * between two of its shared writes; a build with NRES_SHM_TEST_HOOKS (the
 * tests') calls nres_shm_test_hook at each. There is no release: a holder
 * lets go by letting its lease end. An eviction is an insert whose VICTIM
 * is a LIVE slot whose lease is over. */
enum {
  NRES_SHM_STEP_FOUND = 1,    /* key found LIVE, lease not yet extended */
  NRES_SHM_STEP_EXTENDED,     /* its lease extended */
  NRES_SHM_STEP_HELP,         /* key found KEYED, before finishing it */
  NRES_SHM_STEP_HELPED,       /* a KEYED slot made LIVE by a lookup */
  NRES_SHM_STEP_VICTIM,       /* a free or stale slot picked, not claimed */
  NRES_SHM_STEP_CLAIMED,      /* INIT: claimed, nothing written */
  NRES_SHM_STEP_FILLING,      /* key and tag written, no ticket or state */
  NRES_SHM_STEP_FILLED,       /* all written, still INIT */
  NRES_SHM_STEP_KEYED,        /* KEYED published, twins not checked */
  NRES_SHM_STEP_TWIN_FREED,   /* a younger KEYED twin freed */
  NRES_SHM_STEP_ABANDONED,    /* lost to a twin: own slot freed */
  NRES_SHM_STEP_SETTLED,      /* no twin wins, not yet LIVE */
  NRES_SHM_STEP_LIVE,         /* LIVE, not yet returned */
  NRES_SHM_STEP_COUNT
};

#ifdef NRES_SHM_TEST_HOOKS
/* Called (if not NULL) at every NRES_SHM_STEP_*; tests only. */
extern void (*nres_shm_test_hook)(nres_shm_t *shm, int step);
#endif

#ifdef __cplusplus
}
#endif
#endif /* NRES_SHM_H */

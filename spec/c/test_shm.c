/* SPDX-License-Identifier: MIT */
/* test_shm.c - keyed policy state in shared memory (core/shm.c).
 *
 * Single-threaded first, on a virtual clock: sizes and argument checks,
 * one slot per key, fresh state when a key moves in, leases that protect a
 * key in use from eviction and let the least recently leased one go, the
 * per-key rate limit and counters. Then the properties the table exists
 * for, in 4 forked processes sharing an nres_shm_new region and in 8
 * threads (run under TSan): every process gets the same slot for a key
 * even when they insert it at the same instant; a budget of C tokens hands
 * out exactly C, a rate limit of burst B admits exactly B at one instant
 * and a breaker trips exactly once however the processes interleave (a
 * read-then-write race, as with lua_shared_dict get/set, would over-admit);
 * and under constant eviction no key is ever held by two slots.
 *
 * Then processes killed in the middle (shm.c is built here with
 * NRES_SHM_TEST_HOOKS): one killed at each step of the protocol, in every
 * scenario that reaches it, must leave the key to the survivor at once or
 * after the claim's lease, never NRES_EBUSY; four of eight churning
 * processes killed at arbitrary steps leave no key in two slots. Last,
 * region headers checked on attach (truncated, corrupted, wrong magic or
 * version), times at their limits (0, 1 ns, 2^63 ns, NRES_TIME_NEVER) and
 * limiter arguments, and the fuzzer's op-script driver (shm_ops.h) on
 * random scripts from a fixed seed.
 */
#include <math.h>
#include <signal.h>
#include <string.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nres_test.h"
#include "nres/shm.h"
#include "shm_ops.h"
#include "shm_table.h"

#define T0 (1000 * NRES_SEC)
#define HOLD (10 * NRES_SEC)

static nres_shm_config_t base_config(uint32_t slots) {
  nres_shm_config_t c;

  nres_shm_config_init(&c);
  c.slots = slots;
  return c;
}

static int acquire_str(nres_shm_t *shm, const char *key, nres_time_t now,
                       nres_time_t hold, uint32_t *gen) {
  return nres_shm_acquire(shm, key, strlen(key), now, hold, gen);
}

static void config_and_sizes(void **state) {
  nres_shm_config_t c;
  char buf[256];
  void *mem;

  (void) state;
  c = base_config(1024);
  assert_int_equal(c.flags, NRES_SHM_BUDGET | NRES_SHM_BREAKER);
  assert_true(nres_shm_size(&c) >= 1024 * nres_shm_slot_size());
  assert_true(nres_shm_slot_size() == sizeof(nres_shm_slot_t));
  /* What every call writes is per shard, the words of one shard within
   * 32 bytes and the shards 128 apart: no line holds two shards' words. */
  assert_int_equal(offsetof(nres_shm_slot_t, shard[1]) - offsetof(nres_shm_slot_t, shard[0]), 128);
  assert_true(offsetof(nres_shm_slot_t, shard[0].ok) + 8 -
              offsetof(nres_shm_slot_t, shard[0].calls) <= 32);
  {   /* no slot (nres_shm_slot's NULL for a bad index): all 0, no read */
    nres_shm_counts_t counts;
    memset(&counts, 0xff, sizeof(counts));
    nres_shm_slot_counts(NULL, &counts);
    assert_int_equal(counts.calls, 0);
    assert_int_equal(counts.stops[NRES_STOP_OK], 0);
  }

  c.slots = 0;
  assert_int_equal(nres_shm_size(&c), 0);
  c.slots = NRES_SHM_MAX_SLOTS + 1;
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.flags = 16;                                 /* no such state */
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.flags |= NRES_SHM_THROTTLE;                 /* the default preset's */
  assert_true(nres_shm_size(&c) > 0);
  c.throttle_k = 0.5;                           /* the throttle refuses it */
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.flags |= NRES_SHM_THROTTLE;
  c.throttle_fast_failure = 1;                  /* a fraction below 1 */
  assert_int_equal(nres_shm_size(&c), 0);
  c.throttle_fast_failure = -0.1;
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.budget_ratio = 0;                           /* budget refuses it */
  assert_int_equal(nres_shm_size(&c), 0);
  c.flags = NRES_SHM_BREAKER;                   /* ...unless unused */
  assert_true(nres_shm_size(&c) > 0);
  c = base_config(8);
  c.flags |= NRES_SHM_RATELIMIT;
  c.rate = 0;
  assert_int_equal(nres_shm_size(&c), 0);
  assert_int_equal(nres_shm_size(NULL), 0);

  /* 5 slots round up to one set of 8. */
  c = base_config(5);
  assert_int_equal(nres_shm_size(&c), nres_shm_size(&(nres_shm_config_t){
      .slots = 8, .flags = c.flags, .budget_ratio = c.budget_ratio,
      .budget_min_per_sec = c.budget_min_per_sec, .breaker = c.breaker}));

  /* Memory too small or misaligned. */
  c = base_config(8);
  mem = aligned_alloc(64, nres_shm_size(&c) + 64);
  assert_int_equal(nres_shm_init(mem, nres_shm_size(&c) - 1, &c), NRES_EINVAL);
  assert_int_equal(nres_shm_init((char *) mem + 8, nres_shm_size(&c), &c),
                   NRES_EINVAL);
  assert_int_equal(nres_shm_init(NULL, 1 << 20, &c), NRES_EINVAL);
  assert_int_equal(nres_shm_init(mem, nres_shm_size(&c), &c), 0);
  assert_int_equal(nres_shm_config((nres_shm_t *) mem)->slots, 8);

  /* A region that is not a table is refused, not read. */
  memset(buf, 0, sizeof(buf));
  assert_int_equal(acquire_str((nres_shm_t *) buf, "a", T0, HOLD, NULL),
                   NRES_EINVAL);
  assert_null(nres_shm_slot((nres_shm_t *) buf, 0));
  assert_null(nres_shm_config((nres_shm_t *) buf));
  free(mem);
}

static void one_slot_per_key(void **state) {
  nres_shm_config_t c = base_config(64);
  nres_shm_t *shm = test_shm_table(&c);
  char key[NRES_SHM_KEY_MAX + 1];
  char buf[NRES_SHM_KEY_MAX];
  int idx[20];
  uint32_t gen, gen2;
  nres_shm_stats_t st;
  int i, j;

  (void) state;
  for (i = 0; i < 20; i++) {
    snprintf(key, sizeof(key), "host-%d.example", i);
    idx[i] = acquire_str(shm, key, T0, HOLD, &gen);
    assert_true(idx[i] >= 0 && idx[i] < 64);
    for (j = 0; j < i; j++)
      assert_int_not_equal(idx[i], idx[j]);
  }
  for (i = 0; i < 20; i++) {
    snprintf(key, sizeof(key), "host-%d.example", i);
    assert_int_equal(acquire_str(shm, key, T0 + NRES_SEC, HOLD, &gen), idx[i]);
    assert_int_equal(nres_shm_key(shm, (uint32_t) idx[i], buf, sizeof(buf),
                                  &gen2, NULL), (int) strlen(key));
    assert_memory_equal(buf, key, strlen(key));
    assert_int_equal(gen, gen2);
  }
  /* Keys are bytes: a prefix, or one with a NUL inside, is another key. */
  assert_true(nres_shm_acquire(shm, "host-1.exampl", 13, T0, HOLD, NULL) != idx[1]);
  assert_true(nres_shm_acquire(shm, "ab\0c", 4, T0, HOLD, NULL) !=
              nres_shm_acquire(shm, "ab", 2, T0, HOLD, NULL));

  memset(key, 'k', NRES_SHM_KEY_MAX);
  assert_true(nres_shm_acquire(shm, key, NRES_SHM_KEY_MAX, T0, HOLD, NULL) >= 0);
  assert_int_equal(nres_shm_acquire(shm, key, NRES_SHM_KEY_MAX + 1, T0, HOLD, NULL),
                   NRES_EINVAL);
  assert_int_equal(nres_shm_acquire(shm, key, 0, T0, HOLD, NULL), NRES_EINVAL);
  assert_int_equal(nres_shm_acquire(shm, NULL, 3, T0, HOLD, NULL), NRES_EINVAL);
  assert_int_equal(nres_shm_acquire(NULL, key, 3, T0, HOLD, NULL), NRES_EINVAL);

  /* Free slots and bad indexes read as such. */
  nres_shm_stats(shm, &st);
  assert_int_equal(st.slots, 64);
  assert_int_equal(st.live, 24);
  assert_int_equal(st.inserts, 24);
  assert_int_equal(st.evictions, 0);
  for (i = 0, j = 0; i < 64; i++)
    j += nres_shm_key(shm, (uint32_t) i, NULL, 0, NULL, NULL) == NRES_EAGAIN;
  assert_int_equal(j, 64 - 24);
  assert_int_equal(nres_shm_key(shm, 64, buf, sizeof(buf), NULL, NULL), NRES_EINVAL);
  assert_null(nres_shm_slot(shm, 64));
  free(shm);
}

static void a_key_moves_into_fresh_state(void **state) {
  nres_shm_config_t c = base_config(8);   /* one set: keys evict each other */
  nres_shm_t *shm;
  nres_shm_slot_t *s;
  nres_shm_counts_t counts;
  uint32_t permit, gen0, gen1;
  char key[16];
  int i, a, b;

  (void) state;
  c.budget_min_per_sec = 0;
  c.budget_capacity = 4;
  c.breaker.consecutive = 3;
  shm = test_shm_table(&c);

  a = acquire_str(shm, "a", T0, HOLD, &gen0);
  s = nres_shm_slot(shm, (uint32_t) a);
  assert_true(nres_budget_level(&s->budget, T0) == 4.0);
  for (i = 0; i < 4; i++)
    assert_int_equal(nres_budget_spend(&s->budget, T0), 0);
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_breaker_acquire(&s->breaker, T0, &permit), 0);
    nres_breaker_record(&s->breaker, T0, permit, NRES_BREAKER_FAILURE, 0, NULL);
  }
  assert_int_equal(nres_breaker_state(&s->breaker, T0), NRES_BREAKER_OPEN);
  nres_shm_record(shm, (uint32_t) a, NRES_STOP_CIRCUIT, 3, 2);
  nres_shm_slot_counts(s, &counts);
  assert_int_equal(counts.calls, 1);
  assert_int_equal(counts.attempts, 3);
  assert_int_equal(counts.retries, 2);
  assert_int_equal(counts.stops[NRES_STOP_CIRCUIT], 1);

  /* Seven more keys fill the set; "a" is leased until T0 + HOLD. */
  for (i = 0; i < 7; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    assert_true(acquire_str(shm, key, T0, HOLD, NULL) >= 0);
  }
  assert_int_equal(acquire_str(shm, "new", T0 + HOLD - NRES_MSEC, HOLD, NULL),
                   NRES_EFULL);
  /* Re-lease everything but "a"; then "a" is the one to go. */
  for (i = 0; i < 7; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    assert_true(acquire_str(shm, key, T0 + HOLD / 2, HOLD, NULL) >= 0);
  }
  b = acquire_str(shm, "new", T0 + HOLD, HOLD, &gen1);
  assert_int_equal(b, a);
  assert_int_not_equal(gen1, gen0);
  assert_true(nres_budget_level(&s->budget, T0 + HOLD) == 4.0);
  assert_int_equal(nres_breaker_state(&s->breaker, T0 + HOLD), NRES_BREAKER_CLOSED);
  nres_shm_slot_counts(s, &counts);
  assert_int_equal(counts.calls, 0);
  assert_int_equal(counts.stops[NRES_STOP_CIRCUIT], 0);
  {
    nres_shm_stats_t st;
    nres_shm_stats(shm, &st);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.full, 1);
    assert_int_equal(st.live, 8);
  }
  /* Later only "new" (leased at T0 + HOLD) is past its lease: "a" comes
   * back into that slot. */
  assert_int_equal(acquire_str(shm, "a", T0 + 2 * HOLD + HOLD / 4, HOLD, NULL), b);
  free(shm);
}

/* Leases: set at insert, extended only once they would end within `hold`,
 * so steady lookups of a busy key write nothing. */
static void leases_extend_rarely(void **state) {
  nres_shm_config_t c = base_config(8);
  nres_shm_t *shm = test_shm_table(&c);
  double lease0, lease1, lease2;
  int i;

  (void) state;
  i = acquire_str(shm, "a", T0, HOLD, NULL);
  nres_shm_key(shm, (uint32_t) i, NULL, 0, NULL, &lease0);
  assert_true(lease0 == (double) (T0 + HOLD));
  acquire_str(shm, "a", T0 + NRES_SEC, HOLD, NULL);   /* < now + hold: extend */
  nres_shm_key(shm, (uint32_t) i, NULL, 0, NULL, &lease1);
  assert_true(lease1 == (double) (T0 + NRES_SEC + 2 * HOLD));
  acquire_str(shm, "a", T0 + 2 * NRES_SEC, HOLD, NULL);
  nres_shm_key(shm, (uint32_t) i, NULL, 0, NULL, &lease2);
  assert_true(lease2 == lease1);
  /* A hold past the end of time saturates: never evictable. */
  acquire_str(shm, "b", T0, NRES_TIME_NEVER, NULL);
  free(shm);
}

static void rate_limit_per_key(void **state) {
  nres_shm_config_t c = base_config(8);
  nres_shm_slot_t *s;
  nres_shm_t *shm;
  double wait = -1;
  int i, k;

  (void) state;
  shm = test_shm_table(&c);
  i = acquire_str(shm, "client", T0, HOLD, NULL);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, &wait), NRES_EINVAL);
  free(shm);

  c.flags = NRES_SHM_RATELIMIT;
  c.rate = 10;
  c.burst = 3;
  shm = test_shm_table(&c);
  i = acquire_str(shm, "client", T0, HOLD, NULL);
  k = acquire_str(shm, "other", T0, HOLD, NULL);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, &wait), 0);
  assert_true(wait == 0);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, NULL), 0);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, NULL), 0);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, &wait), NRES_ELIMITED);
  assert_true(wait > 0 && wait <= 100e6);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) k, T0, NULL), 0);   /* own bucket */
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0 + 100 * NRES_MSEC, NULL), 0);
  assert_int_equal(nres_shm_limit(shm, 8, T0, NULL), NRES_EINVAL);
  s = nres_shm_slot(shm, (uint32_t) i);
  assert_non_null(s);
  nres_shm_counts_t counts;
  nres_shm_slot_counts(s, &counts);
  assert_int_equal(counts.calls, 5);
  assert_int_equal(counts.stops[NRES_STOP_LIMITED], 1);
  free(shm);
}

/* ---------------------------------------------------------- concurrency */

#define NKEYS 4
#define CAPACITY 100
#define BURST 50
#define OPS 20000

/* What every worker (process or thread) adds up. */
typedef struct {
  atomic_uint start;                    /* a barrier */
  atomic_ulong spent[NKEYS];
  atomic_ulong admitted[NKEYS];
  atomic_ulong records[NKEYS];
  atomic_ulong wrong;                   /* lookups that got another key */
  atomic_ulong failed;                  /* lookups that failed */
  atomic_ulong churn_failed;            /* EFULL/EBUSY while churning */
  atomic_int index[NKEYS][8];           /* [key][worker] */
  atomic_int twin_index[64][8];         /* [key][worker] */
  atomic_ulong clock;                   /* churn: one clock for everyone */
} tally_t;

typedef struct {
  nres_shm_t *shm;
  nres_shm_t *churn;                    /* the small table of phase 2 */
  tally_t *tally;
  int id;
  int workers;
} worker_t;

static void barrier(tally_t *t, unsigned n) {
  atomic_fetch_add(&t->start, 1);
  while (atomic_load(&t->start) < n)
    sched_yield();
}

/* Every worker hammers the same NKEYS keys at one instant T0: budget
 * spends, rate-limit admissions and breaker failures, plus the counters. */
static void hammer(worker_t *w) {
  tally_t *t = w->tally;
  char key[16], buf[16];
  uint32_t permit;
  int i, k, idx;

  barrier(t, (unsigned) w->workers);
  for (i = 0; i < OPS; i++) {
    k = (i + w->id) % NKEYS;
    snprintf(key, sizeof(key), "upstream-%d", k);
    idx = acquire_str(w->shm, key, T0, HOLD, NULL);
    if (idx < 0) {
      atomic_fetch_add(&t->failed, 1);
      continue;
    }
    if (nres_shm_key(w->shm, (uint32_t) idx, buf, sizeof(buf), NULL, NULL) !=
            (int) strlen(key) || memcmp(buf, key, strlen(key)) != 0)
      atomic_fetch_add(&t->wrong, 1);
    atomic_store(&t->index[k][w->id], idx);
    nres_shm_slot_t *s = nres_shm_slot(w->shm, (uint32_t) idx);
    if (nres_budget_spend(&s->budget, T0) == 0)
      atomic_fetch_add(&t->spent[k], 1);
    if (nres_shm_limit(w->shm, (uint32_t) idx, T0, NULL) == 0)
      atomic_fetch_add(&t->admitted[k], 1);
    if (nres_breaker_acquire(&s->breaker, T0, &permit) == 0)
      nres_breaker_record(&s->breaker, T0, permit, NRES_BREAKER_FAILURE, 0, NULL);
    nres_shm_record(w->shm, (uint32_t) idx, NRES_STOP_ATTEMPTS, 2, 1);
    atomic_fetch_add(&t->records[k], 1);
  }
}

/* Every worker inserts the same 64 new keys at once, round after round:
 * they must all end up with the same slot for each key. */
static void twins(worker_t *w) {
  tally_t *t = w->tally;
  char key[32];
  int k, idx;

  barrier(t, (unsigned) w->workers * 2);
  for (k = 0; k < 64; k++) {
    snprintf(key, sizeof(key), "twin-%d", k);
    idx = acquire_str(w->shm, key, T0, HOLD, NULL);
    atomic_store(&t->twin_index[k][w->id], idx);
  }
}

/* Constant eviction: 48 keys into 16 slots with leases of 0 (every live
 * slot may be taken at once), on one clock that each lookup moves 20 us
 * (3.2 s in all: inside the 10 s a slot being filled is protected).
 * A lookup's slot can change key right after it returns; the end state
 * must hold no key twice. */
static void churn(worker_t *w) {
  tally_t *t = w->tally;
  char key[16];
  uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t) (w->id + 1);
  int i, idx;

  barrier(t, (unsigned) w->workers * 3);
  for (i = 0; i < OPS; i++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    snprintf(key, sizeof(key), "c%d", (int) (r % 48));
    idx = acquire_str(w->shm, key, T0 + atomic_fetch_add(&t->clock, 20 * NRES_USEC), 0,
                      NULL);
    if (idx < 0)
      atomic_fetch_add(&t->churn_failed, 1);
  }
}

/* Churn on past the worker's share until the kill hook fires: how many
 * protocol steps a share takes depends on the scheduler (and on TSan),
 * so a kill placed by count must not depend on the share being long
 * enough. Exits 3 if the hook never fires, which the test reports. */
static void churn_until_killed(worker_t *w) {
  tally_t *t = w->tally;
  char key[16];
  unsigned long i;

  for (i = 0; i < 50ul * 1000 * 1000; i++) {
    snprintf(key, sizeof(key), "c%lu", (i * 7 + (unsigned long) w->id) % 48);
    (void) acquire_str(w->shm, key, T0 + atomic_fetch_add(&t->clock, 20 * NRES_USEC),
                       0, NULL);
  }
  _exit(3);
}

static void run_worker(worker_t *w, int phase) {
  if (phase == 0) {
    hammer(w);
  } else if (phase == 1) {
    twins(w);
  } else {
    w->shm = w->churn;
    churn(w);
  }
}

static void check_hammer(nres_shm_t *shm, tally_t *t, int workers) {
  nres_shm_stats_t st;
  char key[16];
  int k, i, idx;

  assert_int_equal(atomic_load(&t->wrong), 0);
  assert_int_equal(atomic_load(&t->failed), 0);
  nres_shm_stats(shm, &st);
  /* The hammered keys and the 64 twins, each inserted once. */
  assert_int_equal(st.live, NKEYS + 64);
  assert_int_equal(st.inserts, NKEYS + 64);
  assert_int_equal(st.evictions, 0);
  for (k = 0; k < NKEYS; k++) {
    nres_shm_slot_t *s;
    snprintf(key, sizeof(key), "upstream-%d", k);
    idx = acquire_str(shm, key, T0, HOLD, NULL);
    for (i = 0; i < workers; i++)
      assert_int_equal(atomic_load(&t->index[k][i]), idx);
    s = nres_shm_slot(shm, (uint32_t) idx);
    /* Exactly the budget's capacity, the limiter's burst, one trip. */
    assert_int_equal(atomic_load(&t->spent[k]), CAPACITY);
    assert_int_equal(s->budget.spent, CAPACITY);
    assert_int_equal(atomic_load(&t->admitted[k]), BURST);
    assert_int_equal(s->breaker.trips, 1);
    assert_int_equal(nres_breaker_state(&s->breaker, T0), NRES_BREAKER_OPEN);
    /* Counters: one record and one rate-limit take per operation. */
    uint64_t n = atomic_load(&t->records[k]);
    assert_int_equal(n, (uint64_t) OPS * workers / NKEYS);
    nres_shm_counts_t c;
    nres_shm_slot_counts(s, &c);
    assert_int_equal(c.calls, 2 * n);
    assert_int_equal(c.attempts, 2 * n);
    assert_int_equal(c.retries, n);
    assert_int_equal(c.stops[NRES_STOP_ATTEMPTS], n);
    assert_int_equal(c.stops[NRES_STOP_LIMITED], n - BURST);
  }
}

static void check_twins(nres_shm_t *shm, tally_t *t, int workers) {
  nres_shm_stats_t st;
  int k, i, idx;

  nres_shm_stats(shm, &st);
  print_message("twins: %d workers, %llu inserts lost a race\n", workers,
                (unsigned long long) st.races);

  for (k = 0; k < 64; k++) {
    idx = atomic_load(&t->twin_index[k][0]);
    assert_true(idx >= 0);
    for (i = 1; i < workers; i++)
      assert_int_equal(atomic_load(&t->twin_index[k][i]), idx);
  }
}

/* No key in two slots; every live slot's key is one of the churn keys. */
static void check_no_twins(nres_shm_t *shm) {
  char keys[16][NRES_SHM_KEY_MAX];
  int lens[16];
  nres_shm_stats_t st;
  int n = 0, i, j, len;

  nres_shm_stats(shm, &st);
  print_message("churn: %llu inserts, %llu evictions, %llu lost races, %llu full\n",
                (unsigned long long) st.inserts, (unsigned long long) st.evictions,
                (unsigned long long) st.races, (unsigned long long) st.full);
  assert_true(st.evictions > 0);
  assert_true(st.live <= 16);
  for (i = 0; i < 16; i++) {
    len = nres_shm_key(shm, (uint32_t) i, keys[n], NRES_SHM_KEY_MAX, NULL, NULL);
    if (len < 0)
      continue;
    assert_true(len >= 2 && len <= 3 && keys[n][0] == 'c');
    for (j = 0; j < n; j++)
      assert_false(lens[j] == len && memcmp(keys[j], keys[n], (size_t) len) == 0);
    lens[n++] = len;
  }
  assert_int_equal((uint64_t) n, st.live);
}

static nres_shm_config_t hammer_config(uint32_t slots) {
  nres_shm_config_t c = base_config(slots);

  c.flags = NRES_SHM_BUDGET | NRES_SHM_BREAKER | NRES_SHM_RATELIMIT;
  c.budget_min_per_sec = 0;
  c.budget_capacity = CAPACITY;
  c.rate = 1;
  c.burst = BURST;
  c.breaker.consecutive = 5;
  return c;
}

static void processes_share_one_table(void **state) {
  enum { PROCS = 4 };
  nres_shm_config_t c = hammer_config(1024);
  nres_shm_config_t cc = base_config(16);
  nres_shm_t *shm = NULL, *small = NULL;
  tally_t *t;
  pid_t pid[PROCS];
  int i, phase, status;

  (void) state;
  assert_int_equal(nres_shm_new(&c, &shm), 0);
  assert_int_equal(nres_shm_new(&cc, &small), 0);
  t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(t != MAP_FAILED);
  memset(t, 0, sizeof(*t));

  for (i = 0; i < PROCS; i++) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      worker_t w = { shm, small, t, i, PROCS };
      for (phase = 0; phase < 3; phase++)
        run_worker(&w, phase);
      _exit(0);
    }
  }
  for (i = 0; i < PROCS; i++) {
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  check_hammer(shm, t, PROCS);
  check_twins(shm, t, PROCS);
  check_no_twins(small);
  nres_shm_free(shm);
  nres_shm_free(small);
  munmap(t, sizeof(*t));
}

/* Processes that set their shard (nres_shard_set: nginx workers, by their
 * number) write only their own shard's counters, the index taken modulo
 * NRES_SHARDS. */
static void processes_given_a_shard_write_only_its_lines(void **state) {
  enum { PROCS = 3, CALLS = 1000 };
  nres_shm_config_t c = base_config(16);
  nres_shm_t *shm = NULL;
  nres_shm_counts_t n;
  pid_t pid[PROCS];
  int i, idx, status;

  (void) state;
  assert_int_equal(nres_shm_new(&c, &shm), 0);
  idx = nres_shm_acquire(shm, "upstream", 8, 0, NRES_TIME_NEVER, NULL);
  assert_true(idx >= 0);
  for (i = 0; i < PROCS; i++) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      nres_shard_set((unsigned) (i * NRES_SHARDS + 2 * i + 1));   /* shard 2i + 1 */
      for (int j = 0; j < CALLS; j++)
        nres_shm_record(shm, (uint32_t) idx, NRES_STOP_OK, 1, 0);
      _exit(0);
    }
  }
  for (i = 0; i < PROCS; i++) {
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (unsigned k = 0; k < NRES_SHARDS; k++) {
    uint64_t want = k % 2 == 1 && k < 2 * PROCS ? CALLS : 0;
    assert_int_equal(nres_shm_slot(shm, (uint32_t) idx)->shard[k].calls, want);
    assert_int_equal(nres_shm_slot(shm, (uint32_t) idx)->shard[k].ok, want);
  }
  nres_shm_slot_counts(nres_shm_slot(shm, (uint32_t) idx), &n);
  assert_int_equal(n.calls, PROCS * CALLS);
  nres_shm_free(shm);
}

static void *thread_main(void *arg) {
  worker_t *w = arg;
  int phase;

  for (phase = 0; phase < 3; phase++)
    run_worker(w, phase);
  return NULL;
}

static void threads_share_one_table(void **state) {
  enum { THREADS = 8 };
  nres_shm_config_t c = hammer_config(1024);
  nres_shm_config_t cc = base_config(16);
  nres_shm_t *shm = test_shm_table(&c), *small = test_shm_table(&cc);
  worker_t w[THREADS];
  tally_t *t;
  int i;

  (void) state;
  t = calloc(1, sizeof(*t));
  assert_non_null(t);
  for (i = 0; i < THREADS; i++)
    w[i] = (worker_t) { shm, small, t, i, THREADS };
  test_run_threads(THREADS, thread_main, w, sizeof(w[0]));
  check_hammer(shm, t, THREADS);
  check_twins(shm, t, THREADS);
  check_no_twins(small);
  free(t);
  free(shm);
  free(small);
}

/* ------------------------------------------------------ killed processes */

/* A process dies (SIGKILL) at one step of nres_shm_acquire, on the same
 * virtual clock as its survivor. Scenarios put the step on its path:
 *   FRESH   the key goes into an empty table;
 *   FULL    seven other keys are leased: the key goes into the last slot;
 *   EVICT   the same, the last slot held by a key whose lease is over;
 *   EXTEND  the key is there and its lease needs extending;
 *   HELP    a claimer of the key was already killed at KEYED;
 *   LOSE    while we hold our slot in INIT, an older claimer of the key is
 *           killed at KEYED: we lose to it;
 *   WIN     the same once we have our ticket: the dead claimer is younger.
 * After each death the survivor looks the key up at once: it must get it,
 * or NRES_EFULL exactly when the dead process left its slot claimed (INIT)
 * in a full set; and after the claim's lease (10 s, virtual) it gets it
 * in every case, in exactly one slot. Never NRES_EBUSY. */
enum { FRESH, FULL, EVICT, EXTEND, HELP, LOSE, WIN };

#define KILL_T0 (1000 * NRES_SEC)
#define KILL_HOLD NRES_SEC
#define KILL_LATE (KILL_T0 + 11 * NRES_SEC)

static int kill_at;                     /* this process dies there */
static int plant_at;                    /* ...and first plants a dead twin */

static void kill_hook(nres_shm_t *shm, int step);

/* In a child, acquire "k" at KILL_T0 and die at step `at`; returns the
 * child's wait status. The child exits 0 if it never reached the step. */
static int claim_and_die(nres_shm_t *shm, int at, int plant) {
  int status = -1;
  pid_t pid;

  pid = fork();
  if (pid == 0) {
    kill_at = at;
    plant_at = plant;
    acquire_str(shm, "k", KILL_T0, KILL_HOLD, NULL);
    _exit(0);
  }
  if (pid < 0 || waitpid(pid, &status, 0) != pid)
    return -1;
  return status;
}

static int killed(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void kill_hook(nres_shm_t *shm, int step) {
  if (step == plant_at) {
    plant_at = 0;
    /* A twin killed at KEYED; if it was not, this process fails too. */
    if (!killed(claim_and_die(shm, NRES_SHM_STEP_KEYED, 0)))
      _exit(3);
  }
  if (step == kill_at)
    raise(SIGKILL);
}

static int slots_holding(nres_shm_t *shm, const char *key) {
  char buf[NRES_SHM_KEY_MAX];
  int i, n = 0, len;

  for (i = 0; i < 8; i++) {
    len = nres_shm_key(shm, (uint32_t) i, buf, sizeof(buf), NULL, NULL);
    n += len == (int) strlen(key) && memcmp(buf, key, (size_t) len) == 0;
  }
  return n;
}

static void kill_one(int scenario, int step) {
  nres_shm_config_t c = base_config(8);   /* one set */
  nres_shm_t *shm = NULL;
  uint32_t gen0 = 0, gen;
  char key[8];
  int i, rc, late, status;

  assert_int_equal(nres_shm_new(&c, &shm), 0);
  kill_at = plant_at = 0;
  if (scenario == FULL || scenario == EVICT) {
    for (i = 0; i < 7; i++) {
      snprintf(key, sizeof(key), "o%d", i);
      assert_true(acquire_str(shm, key, KILL_T0, KILL_HOLD, NULL) >= 0);
    }
  }
  if (scenario == EVICT)
    assert_true(acquire_str(shm, "old", KILL_T0 - 2 * KILL_HOLD, KILL_HOLD,
                            NULL) >= 0);
  if (scenario == EXTEND)
    assert_true(acquire_str(shm, "k", KILL_T0 - KILL_HOLD + NRES_MSEC,
                            KILL_HOLD, &gen0) >= 0);
  if (scenario == HELP)
    assert_true(killed(claim_and_die(shm, NRES_SHM_STEP_KEYED, 0)));

  status = claim_and_die(shm, step, scenario == LOSE ? NRES_SHM_STEP_CLAIMED
                                    : scenario == WIN ? NRES_SHM_STEP_FILLED
                                    : 0);
  if (!killed(status))
    fail_msg("scenario %d: never reached step %d (status %d)", scenario, step,
             status);

  /* The survivor, at once: only a claimed (INIT) last slot refuses. */
  rc = acquire_str(shm, "k", KILL_T0 + NRES_MSEC, KILL_HOLD, &gen);
  if ((scenario == FULL || scenario == EVICT) &&
      (step == NRES_SHM_STEP_CLAIMED || step == NRES_SHM_STEP_FILLING ||
       step == NRES_SHM_STEP_FILLED))
    assert_int_equal(rc, NRES_EFULL);
  else
    assert_true(rc >= 0);
  if (scenario == EXTEND)
    assert_int_equal(gen, gen0);   /* the same key in the same slot */
  assert_int_equal(slots_holding(shm, "k"), rc >= 0);
  if (scenario == FULL || scenario == EVICT)
    for (i = 0; i < 7; i++) {   /* leased keys untouched by the dead */
      snprintf(key, sizeof(key), "o%d", i);
      assert_int_equal(slots_holding(shm, key), 1);
    }
  /* After the claim's lease, in every case. */
  late = acquire_str(shm, "k", KILL_LATE, KILL_HOLD, NULL);
  assert_true(late >= 0);
  if (rc >= 0)
    assert_int_equal(late, rc);
  assert_int_equal(slots_holding(shm, "k"), 1);
  nres_shm_free(shm);
}

static void killed_processes_never_wedge_a_key(void **state) {
  static const struct { int scenario, step; } kills[] = {
#define CLAIM_STEPS(sc)                                                       \
    { sc, NRES_SHM_STEP_VICTIM }, { sc, NRES_SHM_STEP_CLAIMED },              \
    { sc, NRES_SHM_STEP_FILLING }, { sc, NRES_SHM_STEP_FILLED },              \
    { sc, NRES_SHM_STEP_KEYED }, { sc, NRES_SHM_STEP_SETTLED },               \
    { sc, NRES_SHM_STEP_LIVE }
    CLAIM_STEPS(FRESH), CLAIM_STEPS(FULL), CLAIM_STEPS(EVICT),
#undef CLAIM_STEPS
    { EXTEND, NRES_SHM_STEP_FOUND }, { EXTEND, NRES_SHM_STEP_EXTENDED },
    { HELP, NRES_SHM_STEP_HELP }, { HELP, NRES_SHM_STEP_HELPED },
    { LOSE, NRES_SHM_STEP_ABANDONED }, { WIN, NRES_SHM_STEP_TWIN_FREED },
  };
  int covered[NRES_SHM_STEP_COUNT] = { 0 };
  size_t i;
  int step;

  (void) state;
  nres_shm_test_hook = kill_hook;
  for (i = 0; i < sizeof(kills) / sizeof(kills[0]); i++) {
    kill_one(kills[i].scenario, kills[i].step);
    covered[kills[i].step] = 1;
  }
  nres_shm_test_hook = NULL;
  for (step = 1; step < NRES_SHM_STEP_COUNT; step++)
    if (!covered[step])
      fail_msg("no process is killed at step %d", step);
}

/* The reported case: a claimer killed right after publishing KEYED left an
 * older twin that every later insert lost to, NRES_EBUSY for good while
 * free slots remained. The next lookup finishes the claim instead. */
static void a_claimer_killed_at_keyed_is_finished_by_the_next_lookup(void **state) {
  nres_shm_config_t c = base_config(64);
  nres_shm_stats_t st;
  nres_shm_t *shm = NULL;
  int i, first;

  (void) state;
  assert_int_equal(nres_shm_new(&c, &shm), 0);
  nres_shm_test_hook = kill_hook;
  assert_true(killed(claim_and_die(shm, NRES_SHM_STEP_KEYED, 0)));
  nres_shm_test_hook = NULL;
  first = acquire_str(shm, "k", KILL_T0, KILL_HOLD, NULL);
  assert_true(first >= 0);
  for (i = 0; i < 100; i++)
    assert_int_equal(acquire_str(shm, "k", KILL_T0 + (nres_time_t) i * NRES_MSEC,
                                 KILL_HOLD, NULL), first);
  nres_shm_stats(shm, &st);
  assert_int_equal(st.inserts, 1);   /* the dead claimer's, finished */
  assert_int_equal(st.races, 0);
  assert_int_equal(st.live, 1);
  nres_shm_free(shm);
}

/* The same under contention: eight processes churn 48 keys through 16
 * slots on one clock, and four of them are killed at whatever step their
 * count of protocol steps reaches. Afterwards every key can be had once
 * the claims' leases are over, and none is in two slots. */
static unsigned long hook_calls, kill_after;

static void counting_kill_hook(nres_shm_t *shm, int step) {
  (void) shm;
  (void) step;
  if (kill_after != 0 && ++hook_calls == kill_after)
    raise(SIGKILL);
}

static void processes_killed_while_churning(void **state) {
  enum { PROCS = 8 };
  nres_shm_config_t cc = base_config(16);
  nres_shm_t *small = NULL;
  nres_time_t late;
  char key[16];
  pid_t pid[PROCS];
  tally_t *t;
  int i, status;

  (void) state;
  assert_int_equal(nres_shm_new(&cc, &small), 0);
  t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(t != MAP_FAILED);
  memset(t, 0, sizeof(*t));
  atomic_store(&t->start, 2 * PROCS);   /* churn's barrier is its third */
  nres_shm_test_hook = counting_kill_hook;
  for (i = 0; i < PROCS; i++) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      worker_t w = { small, small, t, i, PROCS };
      kill_after = i % 2 == 0 ? 0 : 500 + 3331 * (unsigned long) i;
      run_worker(&w, 2);
      if (kill_after != 0)
        churn_until_killed(&w);
      _exit(0);
    }
  }
  nres_shm_test_hook = NULL;
  for (i = 0; i < PROCS; i++) {
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    if (i % 2 == 0)
      assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    else
      assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  /* A ms apart: a hold of 0 leases to the next ms. */
  late = T0 + atomic_load(&t->clock) + 11 * NRES_SEC;
  for (i = 0; i < 48; i++) {
    snprintf(key, sizeof(key), "c%d", i);
    assert_in_range(acquire_str(small, key, late + (nres_time_t) i * NRES_MSEC,
                                0, NULL), 0, 15);
  }
  check_no_twins(small);
  nres_shm_free(small);
  munmap(t, sizeof(*t));
}

/* ------------------------------------------------------ region headers */

/* A region laid out in a file, then damaged: each mapping of it must be
 * refused by nres_shm_attach, and the entry points must refuse a header
 * that disagrees with itself instead of following it out of the region. */
static void attach_checks_the_layout(void **state) {
  nres_shm_config_t c = base_config(64);
  char path[] = "/tmp/nres-shm-XXXXXX";
  size_t size = nres_shm_size(&c);
  nres_shm_t *shm, *got;
  uint32_t word;
  uint64_t big;
  void *mem;
  int fd, i;

  (void) state;
  fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  assert_int_equal(ftruncate(fd, (off_t) size), 0);
  mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(mem != MAP_FAILED);
  assert_int_equal(nres_shm_init(mem, size, &c), 0);
  assert_int_equal(nres_shm_attach(mem, size, &got), 0);
  shm = got;
  assert_true(shm == mem);
  assert_true(acquire_str(shm, "a", T0, HOLD, NULL) >= 0);
  /* Misuse. */
  assert_int_equal(nres_shm_attach(mem, size, NULL), NRES_EINVAL);
  assert_int_equal(nres_shm_attach(NULL, size, &got), NRES_EINVAL);
  assert_null(got);
  assert_int_equal(nres_shm_attach((char *) mem + 8, size - 8, &got), NRES_EINVAL);
  assert_int_equal(nres_shm_attach(mem, 16, &got), NRES_EINVAL);

  /* Truncated: a mapping shorter than the header says. */
  assert_int_equal(nres_shm_attach(mem, size - 1, &got), NRES_EINVAL);
  assert_int_equal(nres_shm_attach(mem, size / 2, &got), NRES_EINVAL);
  assert_null(got);

  /* Each header word damaged in turn (offsets of the private layout:
   * magic 0, version 8, size 16, slots 24, sets 28, stride 32, index and
   * slot offsets 40 and 48, config.slots 56): refused by attach and by
   * every entry point, restored, accepted again. */
  for (i = 0; i < 15; i++) {
    unsigned char saved[64];
    size_t at = (size_t[]) { 0, 8, 16, 24, 28, 32, 40, 48, 56, 24, 24, 28,
                             16, 8, 0 }[i];
    memcpy(saved, mem, sizeof(saved));
    switch (i) {
    case 9:  word = 128; memcpy((char *) mem + at, &word, 4); break;  /* more slots */
    case 10: word = 0; memcpy((char *) mem + at, &word, 4); break;
    case 11: word = 0; memcpy((char *) mem + at, &word, 4); break;
    case 12: big = 1ull << 40; memcpy((char *) mem + at, &big, 8); break;
    case 13: word = 1; memcpy((char *) mem + at, &word, 4); break;    /* old version */
    case 14: big = 0x316d687373657272ull; memcpy((char *) mem + at, &big, 8); break;
    default: ((unsigned char *) mem)[at] ^= 0x41; break;
    }
    assert_int_equal(nres_shm_attach(mem, size, &got), NRES_EINVAL);
    assert_int_equal(acquire_str(shm, "b", T0, HOLD, NULL), NRES_EINVAL);
    assert_null(nres_shm_slot(shm, 0));
    assert_null(nres_shm_config(shm));
    assert_int_equal(nres_shm_key(shm, 0, NULL, 0, NULL, NULL), NRES_EINVAL);
    assert_int_equal(nres_shm_limit(shm, 0, T0, NULL), NRES_EINVAL);
    nres_shm_record(shm, 0, 0, 1, 0);   /* nothing done, no crash */
    memcpy(mem, saved, sizeof(saved));
    assert_int_equal(nres_shm_attach(mem, size, &got), 0);
  }
  /* The config word inside the header: a state's arguments corrupted. */
  {
    nres_shm_config_t bad = c;
    size_t off;

    bad.flags = 0x80;
    for (off = 0; off + sizeof(bad) <= 4096; off += 8)
      if (memcmp((char *) mem + off, &c, sizeof(c)) == 0)
        break;
    assert_true(off + sizeof(bad) <= 4096);
    memcpy((char *) mem + off, &bad, sizeof(bad));
    assert_int_equal(nres_shm_attach(mem, size, &got), NRES_EINVAL);
  }
  munmap(mem, size);

  /* The file cut short under the region: map what is left, refused. */
  assert_int_equal(ftruncate(fd, (off_t) size / 2), 0);
  mem = mmap(NULL, size / 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(mem != MAP_FAILED);
  assert_int_equal(nres_shm_attach(mem, size / 2, &got), NRES_EINVAL);
  munmap(mem, size / 2);
  close(fd);
}

/* ------------------------------------------------------ times and limits */

/* Every time the C face takes is nres_time_t ns and saturates: 0, 1 ns,
 * 2^63 ns and NRES_TIME_NEVER as a now or a hold, and a limiter rate that
 * is 0, NaN, infinite, 1e300 or 1e-300, a burst of 0 or 2^32 - 1. */
static void times_saturate_and_limits_are_checked(void **state) {
  static const double bad_rates[] = { 0, -1, NAN, INFINITY, -INFINITY };
  nres_shm_config_t c = base_config(8);
  nres_shm_t *shm;
  double lease, wait;
  char key[8];
  size_t i;
  int a, b;

  (void) state;
  /* now 0, hold 0: leased until 0, so at once evictable. */
  shm = test_shm_table(&c);
  for (i = 0; i < 8; i++) {
    snprintf(key, sizeof(key), "z%d", (int) i);
    assert_true(acquire_str(shm, key, 0, 0, NULL) >= 0);
  }
  assert_true(acquire_str(shm, "ninth", 0, 0, NULL) >= 0);
  free(shm);

  /* 1 ns rounds up to the next ms: leased at now, free a ms later. */
  shm = test_shm_table(&c);
  for (i = 0; i < 8; i++) {
    snprintf(key, sizeof(key), "t%d", (int) i);
    assert_true(acquire_str(shm, key, T0, 1, NULL) >= 0);
  }
  assert_int_equal(acquire_str(shm, "ninth", T0, 1, NULL), NRES_EFULL);
  assert_true(acquire_str(shm, "ninth", T0 + NRES_MSEC, 1, NULL) >= 0);
  free(shm);

  /* 2^63 ns and NRES_TIME_NEVER holds: past the lease range, never end,
   * even at the end of time; reported as NRES_TIME_NEVER. Before the fix
   * of the (-1) wrap a now of NRES_TIME_NEVER evicted every key. */
  shm = test_shm_table(&c);
  for (i = 0; i < 8; i++) {
    snprintf(key, sizeof(key), "n%d", (int) i);
    a = acquire_str(shm, key, T0, i % 2 ? NRES_TIME_NEVER : (nres_time_t) 1 << 63,
                    NULL);
    assert_true(a >= 0);
    assert_true(nres_shm_key(shm, (uint32_t) a, NULL, 0, NULL, &lease) > 0);
    assert_true(lease == (double) NRES_TIME_NEVER);
  }
  assert_int_equal(acquire_str(shm, "ninth", NRES_TIME_NEVER, 0, NULL), NRES_EFULL);
  assert_int_equal(acquire_str(shm, "ninth", (nres_time_t) 1 << 63, 0, NULL),
                   NRES_EFULL);
  free(shm);

  /* now = NRES_TIME_NEVER: finite leases are over; a key put in at the
   * end of time stays. */
  shm = test_shm_table(&c);
  a = acquire_str(shm, "a", T0, HOLD, NULL);
  for (i = 0; i < 7; i++) {
    snprintf(key, sizeof(key), "e%d", (int) i);
    assert_true(acquire_str(shm, key, NRES_TIME_NEVER, NRES_TIME_NEVER, NULL) >= 0);
  }
  b = acquire_str(shm, "b", NRES_TIME_NEVER, 0, NULL);
  assert_int_equal(b, a);   /* "a" was the one with a lease that ended */
  assert_int_equal(acquire_str(shm, "c", NRES_TIME_NEVER, 0, NULL), NRES_EFULL);
  free(shm);

  /* Limiter arguments: refused at sizing, init and mapping. */
  for (i = 0; i < sizeof(bad_rates) / sizeof(bad_rates[0]); i++) {
    nres_shm_t *none = NULL;
    c = base_config(8);
    c.flags |= NRES_SHM_RATELIMIT;
    c.rate = bad_rates[i];
    assert_int_equal(nres_shm_size(&c), 0);
    assert_int_equal(nres_shm_new(&c, &none), NRES_EINVAL);
    assert_null(none);
  }
  c = base_config(8);
  c.flags |= NRES_SHM_RATELIMIT;
  c.burst = 0;
  assert_int_equal(nres_shm_size(&c), 0);
  /* Extreme but valid: saturate, answer, never wrap. */
  c.rate = 1e300;
  c.burst = UINT32_MAX;
  shm = test_shm_table(&c);
  a = acquire_str(shm, "a", 0, HOLD, NULL);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) a, 0, &wait), 0);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) a, T0, &wait), 0);
  /* At the end of time the next admission cannot be stored: refused, the
   * wait saturated (not wrapped to a small number). */
  assert_int_equal(nres_shm_limit(shm, (uint32_t) a, NRES_TIME_NEVER, &wait),
                   NRES_ELIMITED);
  assert_true(wait == (double) NRES_TIME_NEVER);
  free(shm);
  c.rate = 1e-300;                 /* one admission per end of time */
  c.burst = 1;
  shm = test_shm_table(&c);
  a = acquire_str(shm, "a", T0, HOLD, NULL);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) a, T0, &wait), NRES_ELIMITED);
  assert_true(wait == (double) NRES_TIME_NEVER);
  free(shm);
  /* Budget arguments the budget refuses. */
  c = base_config(8);
  c.budget_ratio = NAN;
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.budget_min_per_sec = INFINITY;
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.budget_capacity = 1e300;
  assert_int_equal(nres_shm_size(&c), 0);
}

/* ------------------------------------------------------ op scripts */

/* The fuzzer's driver on random scripts from a fixed seed: every script
 * keeps every invariant it checks (it returns the failing line). */
static void random_op_scripts_keep_the_invariants(void **state) {
  uint8_t script[512];
  uint64_t r = 0x2545f4914f6cdd1dull;
  int n, i, len, err;

  (void) state;
  for (n = 0; n < 3000; n++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    len = 1 + (int) (r % sizeof(script));
    for (i = 0; i < len; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      script[i] = (uint8_t) (r >> 24);
    }
    err = nres_test_shm_ops(script, (size_t) len);
    if (err != 0)
      fail_msg("script %d (%d bytes): check at shm_ops.h:%d failed", n, len, err);
  }
  /* The empty script and one that only configures. */
  assert_int_equal(nres_test_shm_ops(NULL, 0), 0);
  assert_int_equal(nres_test_shm_ops((const uint8_t *) "\xff", 1), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(config_and_sizes),
    cmocka_unit_test(one_slot_per_key),
    cmocka_unit_test(a_key_moves_into_fresh_state),
    cmocka_unit_test(leases_extend_rarely),
    cmocka_unit_test(rate_limit_per_key),
    cmocka_unit_test(processes_share_one_table),
    cmocka_unit_test(threads_share_one_table),
    cmocka_unit_test(processes_given_a_shard_write_only_its_lines),
    cmocka_unit_test(killed_processes_never_wedge_a_key),
    cmocka_unit_test(a_claimer_killed_at_keyed_is_finished_by_the_next_lookup),
    cmocka_unit_test(processes_killed_while_churning),
    cmocka_unit_test(attach_checks_the_layout),
    cmocka_unit_test(times_saturate_and_limits_are_checked),
    cmocka_unit_test(random_op_scripts_keep_the_invariants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

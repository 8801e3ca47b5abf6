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
 */
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nres_test.h"
#include "nres/shm.h"

#define T0 (1000 * NRES_SEC)
#define HOLD (10 * NRES_SEC)

static nres_shm_config_t base_config(uint32_t slots) {
  nres_shm_config_t c;

  nres_shm_config_init(&c);
  c.slots = slots;
  return c;
}

/* A table in ordinary aligned memory (threads share it). */
static nres_shm_t *local_table(const nres_shm_config_t *c) {
  size_t size = nres_shm_size(c);
  void *mem;

  assert_true(size > 0);
  mem = aligned_alloc(64, (size + 63) / 64 * 64);
  assert_non_null(mem);
  assert_int_equal(nres_shm_init(mem, size, c), 0);
  return mem;
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

  c.slots = 0;
  assert_int_equal(nres_shm_size(&c), 0);
  c.slots = NRES_SHM_MAX_SLOTS + 1;
  assert_int_equal(nres_shm_size(&c), 0);
  c = base_config(8);
  c.flags = 8;
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
  nres_shm_t *shm = local_table(&c);
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
  uint32_t permit, gen0, gen1;
  char key[16];
  int i, a, b;

  (void) state;
  c.budget_min_per_sec = 0;
  c.budget_capacity = 4;
  c.breaker.consecutive = 3;
  shm = local_table(&c);

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
  assert_int_equal(s->calls, 1);
  assert_int_equal(s->attempts, 3);
  assert_int_equal(s->retries, 2);
  assert_int_equal(s->stops[NRES_STOP_CIRCUIT], 1);

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
  assert_int_equal(s->calls, 0);
  assert_int_equal(s->stops[NRES_STOP_CIRCUIT], 0);
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
  nres_shm_t *shm = local_table(&c);
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
  shm = local_table(&c);
  i = acquire_str(shm, "client", T0, HOLD, NULL);
  assert_int_equal(nres_shm_limit(shm, (uint32_t) i, T0, &wait), NRES_EINVAL);
  free(shm);

  c.flags = NRES_SHM_RATELIMIT;
  c.rate = 10;
  c.burst = 3;
  shm = local_table(&c);
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
  assert_int_equal(atomic_load(&s->calls), 5);
  assert_int_equal(atomic_load(&s->stops[NRES_STOP_LIMITED]), 1);
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
    assert_int_equal(s->calls, 2 * n);
    assert_int_equal(s->attempts, 2 * n);
    assert_int_equal(s->retries, n);
    assert_int_equal(s->stops[NRES_STOP_ATTEMPTS], n);
    assert_int_equal(s->stops[NRES_STOP_LIMITED], n - BURST);
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
  nres_shm_t *shm = local_table(&c), *small = local_table(&cc);
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

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(config_and_sizes),
    cmocka_unit_test(one_slot_per_key),
    cmocka_unit_test(a_key_moves_into_fresh_state),
    cmocka_unit_test(leases_extend_rarely),
    cmocka_unit_test(rate_limit_per_key),
    cmocka_unit_test(processes_share_one_table),
    cmocka_unit_test(threads_share_one_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

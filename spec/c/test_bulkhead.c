/* SPDX-License-Identifier: MIT */
/* test_bulkhead.c - the concurrency limiter, its wait queue and its AIMD
 * limit.
 *
 * Checks the defaults and the validation of configs, that the limit is
 * enforced and a release frees a slot, that the queue is bounded and a queued
 * caller is never overtaken by a new arrival, what `refused` counts, that the
 * adaptive limit grows by about one per `limit` fast successes, shrinks on
 * slow completions and on TRANSIENT or THROTTLED, ignores other kinds and
 * stays within [min_limit, max_limit], that an unmatched release does not
 * wrap the counters, that criticality classes get ordered headroom around
 * the limit and the queue (refusals counted per class), and that eight
 * threads sharing one bulkhead never hold more slots than the limit. The
 * gradient limit has its own file, test_gradient.c.
 */
#include <math.h>

#include <sched.h>

#include "nres_test.h"

/* Counters through the public reader, not the atomic fields. */
static nres_bulkhead_stats_t stats(const nres_bulkhead_t *x) {
  nres_bulkhead_stats_t st;
  nres_bulkhead_stats(x, &st);
  return st;
}

static void fixed_config(nres_bulkhead_config_t *c, uint32_t limit,
                         uint32_t queue) {
  nres_bulkhead_config_init(c);
  c->limit = limit;
  c->queue = queue;
  c->queue_timeout = queue ? 100 * NRES_MSEC : 0;
}

static void adaptive_config(nres_bulkhead_config_t *c, uint32_t limit,
                            uint32_t min, uint32_t max) {
  nres_bulkhead_config_init(c);
  c->adaptive = 1;
  c->limit = limit;
  c->min_limit = min;
  c->max_limit = max;
  c->latency_target = 10 * NRES_MSEC;
  c->decrease = 0.5;
}

static void config_defaults(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  nres_bulkhead_config_init(&c);
  assert_int_equal(c.limit, 64);
  assert_int_equal(c.queue, 0);
  assert_int_equal(c.queue_timeout, 0);
  assert_int_equal(c.poll, NRES_MSEC);
  assert_int_equal(c.adaptive, 0);
  assert_int_equal(c.min_limit, 1);
  assert_int_equal(c.max_limit, 1000);
  assert_int_equal(c.latency_target, 0);
  assert_true(c.decrease == 0.9);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_limit(&b), 64);
  assert_int_equal(stats(&b).limit_fp, (uint64_t) 64 << 16);
}

static void invalid_configs_are_einval(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  nres_bulkhead_config_init(&c);
  assert_int_equal(nres_bulkhead_init(NULL, &c), NRES_EINVAL);
  assert_int_equal(nres_bulkhead_init(&b, NULL), NRES_EINVAL);

  fixed_config(&c, 0, 0);
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);

  fixed_config(&c, 4, 2);
  c.queue_timeout = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  fixed_config(&c, 4, 2);
  c.poll = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  fixed_config(&c, 4, 2);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);

  fixed_config(&c, 4, 0);
  c.adaptive = 3;   /* 0 off, 1 AIMD, 2 gradient */
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);

  /* A fixed bulkhead ignores the adaptive fields. */
  fixed_config(&c, 4, 0);
  c.min_limit = 10;
  c.decrease = 7;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);

  adaptive_config(&c, 10, 0, 20);
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  adaptive_config(&c, 10, 11, 20);
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  adaptive_config(&c, 21, 1, 20);
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  adaptive_config(&c, 10, 1, 20);
  c.latency_target = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  adaptive_config(&c, 10, 1, 20);
  c.decrease = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  c.decrease = 1;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  c.decrease = NAN;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  adaptive_config(&c, 10, 10, 10);   /* bounds inclusive */
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
}

static void limit_is_enforced_and_release_frees_a_slot(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  fixed_config(&c, 3, 0);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  assert_int_equal(stats(&b).inflight, 3);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);
  assert_int_equal(stats(&b).refused, 2);
  assert_int_equal(stats(&b).inflight, 3);

  nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  assert_int_equal(stats(&b).inflight, 2);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);
  /* A fixed limit ignores latency and verdicts. */
  for (int i = 0; i < 3; i++)
    nres_bulkhead_release(&b, NRES_SEC, NRES_TRANSIENT);
  assert_int_equal(nres_bulkhead_limit(&b), 3);
  assert_int_equal(stats(&b).inflight, 0);
}

static void queue_is_bounded(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  fixed_config(&c, 1, 2);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_enqueue(&b), 0);
  assert_int_equal(nres_bulkhead_enqueue(&b), 0);
  assert_int_equal(nres_bulkhead_enqueue(&b), NRES_EFULL);
  assert_int_equal(stats(&b).waiting, 2);
  assert_int_equal(stats(&b).refused, 1);
  nres_bulkhead_dequeue(&b);
  assert_int_equal(nres_bulkhead_enqueue(&b), 0);
  assert_int_equal(stats(&b).waiting, 2);

  /* No queue at all: enqueue always refuses. */
  fixed_config(&c, 1, 0);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_enqueue(&b), NRES_EFULL);
  assert_int_equal(stats(&b).waiting, 0);
}

static void queued_caller_is_not_overtaken_by_a_new_arrival(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  fixed_config(&c, 1, 2);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);

  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);           /* A runs */
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);  /* B full */
  assert_int_equal(nres_bulkhead_enqueue(&b), 0);              /* B waits */
  assert_int_equal(nres_bulkhead_acquire(&b, 1), NRES_EFULL);  /* B polls */
  nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);               /* A done */

  /* A slot is free, but C arrived after B: C is refused, B gets it. */
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);
  assert_int_equal(nres_bulkhead_acquire(&b, 1), 0);
  nres_bulkhead_dequeue(&b);
  assert_int_equal(stats(&b).waiting, 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);  /* limit */
  nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);           /* C now */

  /* With a queue, refusals that lead to enqueue are not counted. */
  assert_int_equal(stats(&b).refused, 0);
}

static void aimd_grows_by_one_per_limit_fast_successes(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  adaptive_config(&c, 10, 1, 1000);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  /* + 1/10 in 16.16, rounded: 65536 / 10 = 6553.6 */
  assert_int_equal(stats(&b).limit_fp, (10u << 16) + 6554);

  /* Each step adds 1/limit of the moment, so the tenth leaves it just
   * under 11 and the eleventh crosses. */
  for (int i = 0; i < 9; i++) {
    assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
    nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  }
  assert_int_equal(nres_bulkhead_limit(&b), 10);
  assert_true(stats(&b).limit_fp > (uint64_t) (10.9 * 65536));
  nres_bulkhead_release(&b, c.latency_target, NRES_OK);   /* on target */
  assert_int_equal(nres_bulkhead_limit(&b), 11);

  /* dL/dn = 1/L: after n more, L ~ sqrt(L0^2 + 2n); 200 more -> ~22.8 */
  for (int i = 0; i < 200; i++)
    nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  assert_in_range(nres_bulkhead_limit(&b), 21, 23);
  assert_int_equal(stats(&b).inflight, 0);
}

static void aimd_shrinks_on_slow_and_on_transient_and_throttled(
    void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  adaptive_config(&c, 64, 1, 100);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  nres_bulkhead_release(&b, c.latency_target + 1, NRES_OK);
  assert_int_equal(nres_bulkhead_limit(&b), 32);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_TRANSIENT);
  assert_int_equal(nres_bulkhead_limit(&b), 16);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_THROTTLED);
  assert_int_equal(nres_bulkhead_limit(&b), 8);
  /* Slow of any kind shrinks: the dependency was slow. */
  nres_bulkhead_release(&b, NRES_SEC, NRES_PERMANENT);
  assert_int_equal(nres_bulkhead_limit(&b), 4);

  /* Fast PERMANENT and CANCELED, negative kinds and unknown kinds: no
   * change, whatever the latency for kind < 0. */
  nres_bulkhead_release(&b, NRES_MSEC, NRES_PERMANENT);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_CANCELED);
  nres_bulkhead_release(&b, NRES_SEC, -1);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_VERDICT_COUNT);
  nres_bulkhead_release(&b, NRES_SEC, NRES_VERDICT_COUNT);
  assert_int_equal(stats(&b).limit_fp, (uint64_t) 4 << 16);
}

static void aimd_stays_within_min_and_max(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  adaptive_config(&c, 8, 3, 12);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  for (int i = 0; i < 50; i++)
    nres_bulkhead_release(&b, NRES_SEC, NRES_TRANSIENT);
  assert_int_equal(nres_bulkhead_limit(&b), 3);
  assert_int_equal(stats(&b).limit_fp, (uint64_t) 3 << 16);
  /* At min_limit the bulkhead still admits min_limit callers. */
  for (int i = 0; i < 3; i++)
    assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);

  for (int i = 0; i < 1000; i++)
    nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  assert_int_equal(nres_bulkhead_limit(&b), 12);
  assert_int_equal(stats(&b).limit_fp, (uint64_t) 12 << 16);
}

static void unmatched_release_does_not_wrap_inflight_and_lock_out_everyone(
    void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  fixed_config(&c, 2, 1);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  nres_bulkhead_release(&b, NRES_MSEC, NRES_OK);
  nres_bulkhead_dequeue(&b);
  assert_int_equal(stats(&b).inflight, 0);
  assert_int_equal(stats(&b).waiting, 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);
}

static void no_allocation(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  test_count_allocations();
  adaptive_config(&c, 4, 1, 8);
  c.queue = 2;
  c.queue_timeout = NRES_SEC;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  for (int i = 0; i < 100; i++) {
    if (nres_bulkhead_acquire(&b, 0) == 0)
      nres_bulkhead_release(&b, (nres_time_t) i * NRES_MSEC, i % 3);
    if (nres_bulkhead_enqueue(&b) == 0)
      nres_bulkhead_dequeue(&b);
  }
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
}

/* Criticality: sheddable calls stop at limit * (1 - reserve), critical ones
 * may go on to limit * (1 + reserve); the queue the same; refusals are
 * counted per class; reserve 0 treats every class alike. */
static void classes_get_ordered_headroom(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  int n;
  (void) state;

  fixed_config(&c, 10, 0);
  c.reserve = 0.2;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  for (n = 0; nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE) == 0; n++) {
  }
  assert_int_equal(n, 8);
  for (; nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_DEFAULT) == 0; n++) {
  }
  assert_int_equal(n, 10);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), NRES_EFULL);   /* default */
  for (; nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_CRITICAL) == 0; n++) {
  }
  assert_int_equal(n, 12);
  assert_int_equal(stats(&b).refused_class[NRES_CLASS_SHEDDABLE], 1);
  assert_int_equal(stats(&b).refused_class[NRES_CLASS_DEFAULT], 2);
  assert_int_equal(stats(&b).refused_class[NRES_CLASS_CRITICAL], 1);
  assert_int_equal(stats(&b).refused, 4);
  /* Out of range: the default class. */
  nres_bulkhead_release(&b, 0, -1);
  nres_bulkhead_release(&b, 0, -1);
  nres_bulkhead_release(&b, 0, -1);   /* 9 held */
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, 7), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, -1), NRES_EFULL);

  /* The queue: 10 places, sheddable 8, critical 12. */
  fixed_config(&c, 1, 10);
  c.reserve = 0.2;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  for (n = 0; nres_bulkhead_enqueue_class(&b, NRES_CLASS_SHEDDABLE) == 0; n++) {
  }
  assert_int_equal(n, 8);
  for (; nres_bulkhead_enqueue(&b) == 0; n++) {
  }
  assert_int_equal(n, 10);
  for (; nres_bulkhead_enqueue_class(&b, NRES_CLASS_CRITICAL) == 0; n++) {
  }
  assert_int_equal(n, 12);

  /* reserve 0: one limit for all. */
  fixed_config(&c, 4, 0);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_CRITICAL), NRES_EFULL);

  /* A limit of 1 with a reserve: sheddable still gets the one slot when
   * nothing else runs. */
  fixed_config(&c, 1, 0);
  c.reserve = 0.5;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_SHEDDABLE), NRES_EFULL);
  /* 1.5 slots for critical: whole slots only. */
  assert_int_equal(nres_bulkhead_acquire_class(&b, 0, NRES_CLASS_CRITICAL), NRES_EFULL);
}

/* Eight threads, one bulkhead, a counter of callers holding a slot. */
#define HOLD_THREADS 8
#define HOLD_ITERS 20000
#define HOLD_LIMIT 3

static nres_bulkhead_t hold_b;
static atomic_uint hold_holders;
static atomic_uint hold_max;
static atomic_ulong hold_admitted;
static atomic_ulong hold_refused;

/* All threads start together, so they really overlap. */
static atomic_int hold_ready;

static void hold_gate(void) {
  atomic_fetch_add(&hold_ready, 1);
  while (atomic_load(&hold_ready) < HOLD_THREADS)
    sched_yield();
}

static void *hold(void *arg) {
  unsigned id = *(unsigned *) arg;
  hold_gate();
  for (int i = 0; i < HOLD_ITERS; i++) {
    unsigned h, m;
    if (nres_bulkhead_acquire(&hold_b, 0) != 0) {
      atomic_fetch_add(&hold_refused, 1);
      continue;
    }
    atomic_fetch_add(&hold_admitted, 1);
    h = atomic_fetch_add(&hold_holders, 1) + 1;
    m = atomic_load(&hold_max);
    while (h > m && !atomic_compare_exchange_weak(&hold_max, &m, h))
      ;
    atomic_fetch_sub(&hold_holders, 1);
    /* Adaptive runs see a mix of kinds and latencies. */
    nres_bulkhead_release(&hold_b, (nres_time_t) ((i + id) % 20) * NRES_MSEC,
                          (int) ((i + id) % 4));
  }
  return NULL;
}

static void run_holders(void) {
  unsigned ids[HOLD_THREADS];
  for (unsigned i = 0; i < HOLD_THREADS; i++)
    ids[i] = i;
  atomic_store(&hold_holders, 0);
  atomic_store(&hold_max, 0);
  atomic_store(&hold_admitted, 0);
  atomic_store(&hold_refused, 0);
  atomic_store(&hold_ready, 0);
  test_run_threads(HOLD_THREADS, hold, ids, sizeof(ids[0]));
  assert_int_equal(atomic_load(&hold_admitted) + atomic_load(&hold_refused),
                   (unsigned long) HOLD_THREADS * HOLD_ITERS);
  assert_true(atomic_load(&hold_admitted) > 0);
  assert_int_equal(stats(&hold_b).inflight, 0);
  assert_int_equal(stats(&hold_b).waiting, 0);
}

static void threads_never_hold_more_slots_than_the_limit(void **state) {
  nres_bulkhead_config_t c;
  (void) state;

  fixed_config(&c, HOLD_LIMIT, 0);
  assert_int_equal(nres_bulkhead_init(&hold_b, &c), 0);
  run_holders();
  assert_in_range(atomic_load(&hold_max), 1, HOLD_LIMIT);
  assert_int_equal(stats(&hold_b).refused, atomic_load(&hold_refused));
}

static void threads_keep_the_adaptive_limit_within_bounds(void **state) {
  nres_bulkhead_config_t c;
  (void) state;

  adaptive_config(&c, 4, 2, 6);
  c.decrease = 0.9;
  assert_int_equal(nres_bulkhead_init(&hold_b, &c), 0);
  run_holders();
  /* A decrease racing an acquire may let one extra caller in for a moment,
   * but never past max_limit. */
  assert_in_range(atomic_load(&hold_max), 1, 6);
  assert_in_range(nres_bulkhead_limit(&hold_b), 2, 6);
  assert_in_range(stats(&hold_b).limit_fp, (uint64_t) 2 << 16,
                  (uint64_t) 6 << 16);
}

/* Issue 28, randomized (fixed seeds): callers join the queue of a
 * bulkhead of limit 2; each step (a quarter to a whole poll) every live
 * waiter looks once, in random order, and may give up; any waiter may
 * vanish (never looks again, never leaves); slot holders finish at random.
 * Live waiters are served in the order they joined; a vanished waiter's
 * place at the head of the line lapses within two polls and a step of a
 * slot left free for it (so k vanished in a row cost 2k polls at most); at
 * the end nothing is held and every vanished place has lapsed. */
#define SOAK_WAITERS 32

struct soak_waiter {
  uint64_t ticket;
  int state;   /* 0 none, 1 waiting, 2 vanished */
};

static void soak(uint64_t seed) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  nres_rng_t rng;
  struct soak_waiter w[SOAK_WAITERS] = { { 0, 0 } };
  int order[SOAK_WAITERS];
  uint64_t last_served = 0, vanished = 0, stuck_ticket = 0;
  uint32_t holders = 0;
  nres_time_t now = NRES_SEC, stuck_since = 0;
  int i, j, k, t, served_any = 0;

  fixed_config(&c, 2, SOAK_WAITERS);
  c.queue_timeout = 3600 * NRES_SEC;
  c.poll = 10 * NRES_MSEC;
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  nres_rng_seed(&rng, seed);

  for (i = 0; i < 5000; i++) {
    now += (nres_time_t) (2 + nres_rng_below(&rng, 7)) * c.poll / 8;
    /* holders finish */
    for (j = (int) holders; j > 0; j--)
      if (nres_rng_below(&rng, 3) == 0) {
        nres_bulkhead_release(&b, 0, -1);
        holders--;
      }
    /* arrivals: into a free slot only when nobody waits, else the line */
    for (j = (int) nres_rng_below(&rng, 3); j > 0; j--) {
      if (nres_bulkhead_acquire(&b, 0) == 0) {
        holders++;
        continue;
      }
      for (k = 0; k < SOAK_WAITERS && w[k].state != 0; k++)
        ;
      if (k < SOAK_WAITERS &&
          nres_bulkhead_join(&b, NRES_CLASS_DEFAULT, now, &w[k].ticket) == 0)
        w[k].state = 1;
    }
    /* every live waiter looks once, in random order */
    for (j = 0; j < SOAK_WAITERS; j++)
      order[j] = j;
    for (j = SOAK_WAITERS - 1; j > 0; j--) {
      k = (int) nres_rng_below(&rng, (uint64_t) j + 1);
      t = order[j]; order[j] = order[k]; order[k] = t;
    }
    for (j = 0; j < SOAK_WAITERS; j++) {
      struct soak_waiter *x = &w[order[j]];
      if (x->state != 1)
        continue;
      switch (nres_rng_below(&rng, 40)) {
        case 0:
          x->state = 2;   /* vanishes */
          vanished++;
          continue;
        case 1:
          nres_bulkhead_leave(&b, x->ticket);   /* gives up */
          x->state = 0;
          continue;
      }
      if (nres_bulkhead_turn(&b, NRES_CLASS_DEFAULT, x->ticket, now) == 0) {
        /* first come, first served among the living */
        if (served_any)
          assert_true(x->ticket > last_served);
        last_served = x->ticket;
        served_any = 1;
        holders++;
        x->state = 0;
      }
    }
    /* a vanished place at the head, a slot free and someone alive behind
     * it looking: it lapses in time */
    k = -1;
    t = 0;
    for (j = 0; j < SOAK_WAITERS; j++) {
      if (w[j].state == 2 && w[j].ticket == atomic_load(&b.head))
        k = j;
      t += w[j].state == 1;
    }
    if (k >= 0 && holders < 2 && t > 0) {
      if (stuck_since == 0 || stuck_ticket != w[k].ticket)
        stuck_since = now;
      stuck_ticket = w[k].ticket;
      assert_true(now - stuck_since <= 2 * c.poll + c.poll);
    } else {
      stuck_since = 0;
    }
    for (j = 0; j < SOAK_WAITERS; j++)   /* places passed: forget them */
      if (w[j].state == 2 && w[j].ticket < atomic_load(&b.head))
        w[j].state = 0;
  }
  assert_true(vanished > 20);

  /* the end: holders finish, the living give up, arrivals keep coming
   * until every vanished place has lapsed */
  while (holders > 0) {
    nres_bulkhead_release(&b, 0, -1);
    holders--;
  }
  for (j = 0; j < SOAK_WAITERS; j++)
    if (w[j].state == 1) {
      nres_bulkhead_leave(&b, w[j].ticket);
      w[j].state = 0;
    }
  {   /* one more caller waits its turn: every place before it lapses */
    uint64_t tk;
    assert_int_equal(nres_bulkhead_join(&b, NRES_CLASS_DEFAULT, now, &tk), 0);
    for (i = 0; i < 3 * SOAK_WAITERS &&
                nres_bulkhead_turn(&b, NRES_CLASS_DEFAULT, tk, now) != 0;
         i++)
      now += c.poll;
    assert_int_equal(atomic_load(&b.head), tk + 1);
    nres_bulkhead_release(&b, 0, -1);
  }
  assert_int_equal(stats(&b).waiting, 0);
  assert_int_equal(stats(&b).inflight, 0);
  assert_true(stats(&b).leases_expired >= 1);
  assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);   /* a new arrival */
  nres_bulkhead_release(&b, 0, -1);
}

static void no_queue_place_outlives_its_lease_whoever_vanishes(void **state) {
  (void) state;
  for (uint64_t seed = 1; seed <= 8; seed++)
    soak(seed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(config_defaults),
    cmocka_unit_test(invalid_configs_are_einval),
    cmocka_unit_test(limit_is_enforced_and_release_frees_a_slot),
    cmocka_unit_test(queue_is_bounded),
    cmocka_unit_test(queued_caller_is_not_overtaken_by_a_new_arrival),
    cmocka_unit_test(aimd_grows_by_one_per_limit_fast_successes),
    cmocka_unit_test(aimd_shrinks_on_slow_and_on_transient_and_throttled),
    cmocka_unit_test(aimd_stays_within_min_and_max),
    cmocka_unit_test(
        unmatched_release_does_not_wrap_inflight_and_lock_out_everyone),
    cmocka_unit_test(no_allocation),
    cmocka_unit_test(classes_get_ordered_headroom),
    cmocka_unit_test(no_queue_place_outlives_its_lease_whoever_vanishes),
    cmocka_unit_test(threads_never_hold_more_slots_than_the_limit),
    cmocka_unit_test(threads_keep_the_adaptive_limit_within_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_budget.c - the retry budget (core/budget.c) on a virtual clock.
 *
 * Checks the token arithmetic one rule at a time (starts full, deposits of
 * `ratio`, the per-second floor, the capacity clamp, argument checking),
 * then the property the budget exists for: over any run, the retries it
 * allows are at most ratio * successes + floor * seconds + capacity, and
 * not far below that when retries are in demand. The bound is checked on
 * one thread and on 8 threads sharing a budget and an atomic clock (run
 * this one under TSan too). A deposit into a full bucket is proved to write
 * nothing by making the budget's page read-only while it runs.
 */
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nres_test.h"

#define T0 NRES_SEC   /* virtual clocks start at 1 s, not at the epoch */

/* Counters through the public reader, not the atomic fields. */
static nres_budget_stats_t stats(const nres_budget_t *budget) {
  nres_budget_stats_t st;
  nres_budget_stats(budget, &st);
  return st;
}

static void starts_full(void **state) {
  nres_budget_t b;
  int i;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 0.1, 0, 5), 0);
  assert_true(nres_budget_level(&b, T0) == 5.0);
  for (i = 0; i < 5; i++)
    assert_int_equal(nres_budget_spend(&b, T0), 0);
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);
  assert_int_equal(nres_budget_spend(&b, T0 + 3600 * NRES_SEC), NRES_EBUDGET);
  assert_int_equal(stats(&b).spent, 5);
  assert_int_equal(stats(&b).refused, 2);
  assert_true(nres_budget_level(&b, T0) == 0.0);
}

static void ten_deposits_at_ratio_one_tenth_make_one_token(void **state) {
  nres_budget_t b;
  int i;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 0.1, 0, 5), 0);
  for (i = 0; i < 5; i++)
    assert_int_equal(nres_budget_spend(&b, T0), 0);
  for (i = 0; i < 9; i++)
    nres_budget_deposit(&b);
  assert_true(fabs(nres_budget_level(&b, T0) - 0.9) < 1e-9);
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);
  nres_budget_deposit(&b);
  assert_true(nres_budget_level(&b, T0) == 1.0);
  assert_int_equal(nres_budget_spend(&b, T0), 0);
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);
}

static void floor_refills_on_virtual_clock(void **state) {
  nres_budget_t b;
  int i;

  (void) state;
  /* 3 per second; capacity defaults to 10 s of floor. */
  assert_int_equal(nres_budget_init(&b, 0.1, 3, 0), 0);
  assert_int_equal(b.capacity, 30 * 1000000);
  for (i = 0; i < 30; i++)
    assert_int_equal(nres_budget_spend(&b, T0), 0);
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);

  /* level() shows credit not yet taken, and taking a look changes nothing */
  assert_true(nres_budget_level(&b, T0 + NRES_SEC) == 3.0);
  assert_true(nres_budget_level(&b, T0 + NRES_SEC) == 3.0);
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_budget_spend(&b, T0 + NRES_SEC), 0);
  assert_int_equal(nres_budget_spend(&b, T0 + NRES_SEC), NRES_EBUDGET);

  /* half a second is 1.5 tokens: one spend, and half a token left over */
  assert_int_equal(nres_budget_spend(&b, T0 + 1500 * NRES_MSEC), 0);
  assert_int_equal(nres_budget_spend(&b, T0 + 1500 * NRES_MSEC), NRES_EBUDGET);
  assert_true(fabs(nres_budget_level(&b, T0 + 1500 * NRES_MSEC) - 0.5) < 1e-9);

  /* a caller whose clock reads earlier gets no credit, and takes none */
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);
  assert_int_equal(nres_budget_spend(&b, T0 + 1500 * NRES_MSEC + 166667),
                   NRES_EBUDGET);
  assert_int_equal(nres_budget_spend(&b, T0 + 1500 * NRES_MSEC + 166666667),
                   0);
}

/* Spenders calling far more often than the floor earns a micro-token
 * (every 777 ns at 3 tokens/s is 2.331 micro-tokens) must still get the
 * full floor: crediting floor((now - r) * rate) at each call and moving r
 * to now would throw 14 % of it away. */
static void floor_is_not_lost_to_frequent_callers(void **state) {
  nres_budget_t b;
  nres_time_t t;
  int ok;
  int i;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 0.1, 3, 3), 0);
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_budget_spend(&b, T0), 0);
  ok = 0;
  for (t = T0 + 777; t < T0 + NRES_SEC; t += 777)
    ok += nres_budget_spend(&b, t) == 0;
  assert_int_equal(ok, 2);   /* at 1/3 s and 2/3 s */
  assert_int_equal(nres_budget_spend(&b, T0 + NRES_SEC), 0);
  assert_int_equal(nres_budget_spend(&b, T0 + NRES_SEC), NRES_EBUDGET);
}

static void capacity_clamps_deposits_and_refill(void **state) {
  nres_budget_t b;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 1, 1, 2), 0);
  for (int i = 0; i < 100; i++)
    nres_budget_deposit(&b);
  assert_true(nres_budget_level(&b, T0) == 2.0);
  assert_int_equal(nres_budget_spend(&b, T0), 0);
  assert_int_equal(nres_budget_spend(&b, T0), 0);
  assert_int_equal(nres_budget_spend(&b, T0), NRES_EBUDGET);

  /* 100 s of floor at 1/s still fills only 2 */
  assert_true(nres_budget_level(&b, T0 + 100 * NRES_SEC) == 2.0);
  assert_int_equal(nres_budget_spend(&b, T0 + 100 * NRES_SEC), 0);
  assert_int_equal(nres_budget_spend(&b, T0 + 100 * NRES_SEC), 0);
  assert_int_equal(nres_budget_spend(&b, T0 + 100 * NRES_SEC), NRES_EBUDGET);

  /* the end of time does not overflow the credit */
  assert_true(nres_budget_level(&b, NRES_TIME_NEVER) == 2.0);
  assert_int_equal(nres_budget_spend(&b, NRES_TIME_NEVER), 0);
}

static void invalid_init_is_einval(void **state) {
  nres_budget_t b;

  (void) state;
  assert_int_equal(nres_budget_init(NULL, 0.1, 1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0, 1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, -0.1, 1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 1.01, 1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, NAN, 1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, -1, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, NAN, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, INFINITY, 0), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, 1, -1), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, 1, NAN), NRES_EINVAL);
  assert_int_equal(nres_budget_init(&b, 0.1, 1, INFINITY), NRES_EINVAL);

  /* the edges that are allowed, and the default capacity */
  assert_int_equal(nres_budget_init(&b, 1, 0, 0), 0);
  assert_int_equal(b.deposit, 1000000);
  assert_int_equal(b.capacity, 1000000);   /* max(10 * 0, 1) */
  assert_int_equal(nres_budget_init(&b, 0.2, 0.05, 0), 0);
  assert_int_equal(b.deposit, 200000);
  assert_int_equal(b.capacity, 1000000);   /* max(0.5, 1) */
  assert_int_equal(b.refill_per_sec, 50000);
  assert_int_equal(nres_budget_init(&b, 0.2, 7, 0), 0);
  assert_int_equal(b.capacity, 70 * 1000000);
}

/* One simulated run: successes deposit, failures ask to retry. Returns the
 * retries allowed; *bound gets ratio * successes + floor * elapsed +
 * capacity. (Asserts allow 1e-6 over it: the floor is credited in whole
 * micro-tokens, rounded at the instant its clock starts.) */
static uint64_t simulate(double ratio, double floor, double capacity,
                         uint64_t success_per_mille, uint64_t seed,
                         double *bound) {
  nres_budget_t b;
  nres_rng_t rng;
  nres_time_t t;
  uint64_t successes = 0, failures = 0, allowed = 0;

  assert_int_equal(nres_budget_init(&b, ratio, floor, capacity), 0);
  nres_rng_seed(&rng, seed);
  for (t = T0; t < T0 + 60 * NRES_SEC; t += nres_rng_below(&rng, 2 * NRES_MSEC)) {
    if (nres_rng_below(&rng, 1000) < success_per_mille) {
      nres_budget_deposit(&b);
      successes++;
    } else {
      failures++;
      allowed += nres_budget_spend(&b, t) == 0;
    }
  }
  assert_int_equal(stats(&b).spent, allowed);
  assert_int_equal(stats(&b).refused, failures - allowed);
  *bound = ratio * (double) successes +
           floor * (double) (t - T0) / NRES_SEC + (double) b.capacity / 1e6;
  return allowed;
}

static void allowed_retries_stay_within_bound(void **state) {
  double bound;
  uint64_t allowed;
  uint64_t seed;

  (void) state;
  for (seed = 1; seed <= 4; seed++) {
    /* Retries in demand (half the calls fail): the budget runs dry, so
     * what it allowed is the bound, less at most a token left over. */
    allowed = simulate(0.1, 3, 0, 500, seed, &bound);
    assert_true((double) allowed <= bound + 1e-6);
    assert_true((double) allowed >= bound - 1.0);

    allowed = simulate(0.2, 0, 5, 300, seed, &bound);
    assert_true((double) allowed <= bound + 1e-6);
    assert_true((double) allowed >= bound - 1.0);
  }
}

/* Eight threads, one budget, one virtual clock they all advance. */
struct shared_run {
  nres_budget_t budget;
  _Atomic uint64_t clock;
};

struct worker {
  struct shared_run *run;
  uint64_t seed;
  uint64_t successes;
  uint64_t allowed;
};

static void *budget_worker(void *arg) {
  struct worker *w = arg;
  nres_rng_t rng;
  nres_time_t step;
  nres_time_t now;
  int i;

  nres_rng_seed(&rng, w->seed);
  for (i = 0; i < 20000; i++) {
    step = nres_rng_below(&rng, 1 * NRES_MSEC);
    now = atomic_fetch_add(&w->run->clock, step) + step;
    if (nres_rng_below(&rng, 2) == 0) {
      nres_budget_deposit(&w->run->budget);
      w->successes++;
    } else {
      w->allowed += nres_budget_spend(&w->run->budget, now) == 0;
    }
  }
  return NULL;
}

static void allowed_retries_stay_within_bound_on_8_threads(void **state) {
  static struct shared_run run;
  struct worker w[8];
  uint64_t successes = 0, allowed = 0;
  double bound;
  int i;

  (void) state;
  assert_int_equal(nres_budget_init(&run.budget, 0.1, 3, 0), 0);
  atomic_store(&run.clock, T0);
  for (i = 0; i < 8; i++) {
    w[i].run = &run;
    w[i].seed = 100 + (uint64_t) i;
    w[i].successes = w[i].allowed = 0;
  }
  test_run_threads(8, budget_worker, w, sizeof(w[0]));
  for (i = 0; i < 8; i++) {
    successes += w[i].successes;
    allowed += w[i].allowed;
  }
  bound = 0.1 * (double) successes +
          3.0 * (double) (atomic_load(&run.clock) - T0) / NRES_SEC + 30.0;
  assert_int_equal(stats(&run.budget).spent, allowed);
  assert_true((double) allowed <= bound + 1e-6);
  /* Demand is far above supply, so nearly all of it was handed out. */
  assert_true((double) allowed >= bound - 3.0);
}

/* By class: a sheddable spend is refused (and counted) once the bucket is
 * under half full; the other classes spend down to the last token. */
static void sheddable_spends_only_from_the_upper_half(void **state) {
  nres_budget_t b;
  int i;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 0.1, 0, 10), 0);   /* no floor */
  for (i = 0; i < 6; i++)   /* 10 -> 4 tokens: the last from exactly half */
    assert_int_equal(nres_budget_spend_class(&b, 0, NRES_CLASS_SHEDDABLE), 0);
  assert_int_equal(nres_budget_spend_class(&b, 0, NRES_CLASS_SHEDDABLE), NRES_EBUDGET);
  assert_int_equal(stats(&b).refused, 1);
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_budget_spend_class(&b, 0, NRES_CLASS_DEFAULT), 0);
  assert_int_equal(nres_budget_spend_class(&b, 0, NRES_CLASS_CRITICAL), 0);
  assert_int_equal(nres_budget_spend_class(&b, 0, NRES_CLASS_CRITICAL), NRES_EBUDGET);
  assert_int_equal(stats(&b).spent, 10);
  assert_int_equal(nres_budget_spend_class(NULL, 0, NRES_CLASS_DEFAULT), NRES_EINVAL);
}

/* A deposit into a full bucket must not write the shared line: no store and
 * no CAS (a locked compare-and-swap needs write access even when it fails).
 * Run it on a read-only page: any write would fault. */
static void deposit_into_full_bucket_writes_nothing(void **state) {
  long page = sysconf(_SC_PAGESIZE);
  nres_budget_t *b;
  void *mem;
  int64_t before;
  int i;

  (void) state;
  mem = mmap(NULL, (size_t) page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(mem != MAP_FAILED);
  b = mem;
  assert_int_equal(nres_budget_init(b, 0.1, 1, 4), 0);
  before = stats(b).tokens;
  assert_int_equal(before, 4 * 1000000);

  assert_int_equal(mprotect(mem, (size_t) page, PROT_READ), 0);
  for (i = 0; i < 1000; i++)
    nres_budget_deposit(b);
  assert_int_equal(mprotect(mem, (size_t) page, PROT_READ | PROT_WRITE), 0);
  assert_int_equal(stats(b).tokens, before);

  /* and a bucket one micro-token short is written to (the page would
   * fault here: this is what the check above rules out) */
  assert_int_equal(nres_budget_spend(b, T0), 0);
  nres_budget_deposit(b);
  assert_int_equal(stats(b).tokens, before - 1000000 + 100000);
  assert_int_equal(munmap(mem, (size_t) page), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(starts_full),
    cmocka_unit_test(ten_deposits_at_ratio_one_tenth_make_one_token),
    cmocka_unit_test(floor_refills_on_virtual_clock),
    cmocka_unit_test(floor_is_not_lost_to_frequent_callers),
    cmocka_unit_test(capacity_clamps_deposits_and_refill),
    cmocka_unit_test(invalid_init_is_einval),
    cmocka_unit_test(allowed_retries_stay_within_bound),
    cmocka_unit_test(allowed_retries_stay_within_bound_on_8_threads),
    cmocka_unit_test(deposit_into_full_bucket_writes_nothing),
    cmocka_unit_test(sheddable_spends_only_from_the_upper_half),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_ratelimit.c - the GCRA rate limiter on a virtual clock.
 *
 * Checks that a burst admits exactly `burst` callers at once, that a refusal
 * names the exact time an admission succeeds again, that a sustained stream
 * is held to the rate, that invalid arguments are refused, that a rate too
 * low to represent does not open the gate, and that eight threads sharing one
 * limiter (and one atomic virtual clock) are never admitted beyond
 * rate * elapsed + burst.
 */
#include <math.h>

#include <sched.h>

#include "nres_test.h"

/* Counters through the public reader, not the atomic fields. */
static nres_ratelimit_stats_t stats(const nres_ratelimit_t *x) {
  nres_ratelimit_stats_t st;
  nres_ratelimit_stats(x, &st);
  return st;
}

static void burst_admits_exactly_burst_then_refuses(void **state) {
  nres_ratelimit_t rl;
  nres_time_t retry = 0;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 10.0, 4), 0);
  assert_int_equal(rl.interval, 100 * NRES_MSEC);
  assert_int_equal(rl.tolerance, 400 * NRES_MSEC);

  for (int i = 0; i < 4; i++)
    assert_int_equal(nres_ratelimit_acquire(&rl, 0, &retry), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, 0, &retry), NRES_ELIMITED);
  assert_int_equal(retry, 100 * NRES_MSEC);
  assert_int_equal(nres_ratelimit_acquire(&rl, 0, NULL), NRES_ELIMITED);
  assert_int_equal(stats(&rl).refused, 2);
}

/* By class: a sheddable caller gets half of the burst, the others all of
 * it; the sheddable refusal names when it would be admitted. */
static void sheddable_gets_half_the_burst(void **state) {
  nres_ratelimit_t rl;
  nres_time_t retry = 0;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 10.0, 4), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(nres_ratelimit_acquire_class(&rl, 0, NRES_CLASS_SHEDDABLE, &retry), 0);
  assert_int_equal(nres_ratelimit_acquire_class(&rl, 0, NRES_CLASS_SHEDDABLE, &retry), NRES_ELIMITED);
  assert_int_equal(retry, 100 * NRES_MSEC);
  for (int i = 0; i < 2; i++)
    assert_int_equal(nres_ratelimit_acquire_class(&rl, 0, NRES_CLASS_DEFAULT, &retry), 0);
  assert_int_equal(nres_ratelimit_acquire_class(&rl, 0, NRES_CLASS_CRITICAL, NULL), NRES_ELIMITED);
  assert_int_equal(stats(&rl).refused, 2);
  assert_int_equal(nres_ratelimit_acquire_class(&rl, 100 * NRES_MSEC, NRES_CLASS_SHEDDABLE, NULL), NRES_ELIMITED);
  assert_int_equal(nres_ratelimit_acquire_class(&rl, 300 * NRES_MSEC, NRES_CLASS_SHEDDABLE, NULL), 0);
}

static void admitted_again_exactly_at_retry_after(void **state) {
  nres_ratelimit_t rl;
  nres_time_t retry = 0;
  nres_time_t t = 5 * NRES_SEC;   /* not starting at 0 */
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 3.0, 2), 0);
  assert_int_equal(rl.interval, 333333333);
  assert_int_equal(nres_ratelimit_acquire(&rl, t, NULL), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, t, NULL), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, t + 1000, &retry),
                   NRES_ELIMITED);
  assert_int_equal(retry, 333333333 - 1000);

  /* One ns early is still refused (and says one ns); on time is admitted. */
  assert_int_equal(nres_ratelimit_acquire(&rl, t + 1000 + retry - 1, &retry),
                   NRES_ELIMITED);
  assert_int_equal(retry, 1);
  assert_int_equal(nres_ratelimit_acquire(&rl, t + 333333333, &retry), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, t + 333333333, &retry),
                   NRES_ELIMITED);
  assert_int_equal(retry, 333333333);
}

static void refusals_do_not_use_up_the_rate(void **state) {
  nres_ratelimit_t rl;
  nres_time_t retry = 0;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 1.0, 1), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, 0, NULL), 0);
  for (nres_time_t t = 0; t < NRES_SEC; t += NRES_MSEC)
    assert_int_equal(nres_ratelimit_acquire(&rl, t, NULL), NRES_ELIMITED);
  assert_int_equal(nres_ratelimit_acquire(&rl, NRES_SEC, &retry), 0);
  assert_int_equal(stats(&rl).refused, 1000);
}

static void sustained_stream_is_held_to_the_rate(void **state) {
  static const struct { double rate; uint32_t burst; } cases[] = {
    { 100.0, 1 }, { 100.0, 20 }, { 7.0, 3 }, { 1000.0, 50 }, { 0.5, 2 },
  };
  (void) state;

  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    nres_ratelimit_t rl;
    uint64_t admitted = 0;
    uint64_t attempts = 0;
    double expect = cases[c].rate * 10 + cases[c].burst;

    assert_int_equal(nres_ratelimit_init(&rl, cases[c].rate,
                                         cases[c].burst), 0);
    /* An attempt every 100 us for 10 virtual seconds, both ends included. */
    for (nres_time_t t = 0; t <= 10 * NRES_SEC; t += 100 * NRES_USEC) {
      attempts++;
      if (nres_ratelimit_acquire(&rl, t, NULL) == 0)
        admitted++;
    }
    assert_true(fabs((double) admitted - expect) <= 1.0);
    assert_int_equal(admitted + stats(&rl).refused, attempts);
  }
}

static void invalid_init_is_einval(void **state) {
  nres_ratelimit_t rl;
  (void) state;

  assert_int_equal(nres_ratelimit_init(NULL, 1.0, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, 0.0, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, -1.0, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, NAN, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, INFINITY, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, 1.0, 0), NRES_EINVAL);
}

static void interval_is_rounded_and_saturates(void **state) {
  nres_ratelimit_t rl;
  (void) state;

  /* Rounded to the nearest ns, not truncated. */
  assert_int_equal(nres_ratelimit_init(&rl, 6.0, 1), 0);
  assert_int_equal(rl.interval, 166666667);
  assert_int_equal(nres_ratelimit_init(&rl, 3e8, 1), 0);
  assert_int_equal(rl.interval, 3);
  /* Too slow to represent: interval and tolerance saturate. */
  assert_int_equal(nres_ratelimit_init(&rl, 1e-300, 4), 0);
  assert_int_equal(rl.interval, NRES_TIME_NEVER);
  assert_int_equal(rl.tolerance, NRES_TIME_NEVER);
}

static void rate_above_one_per_ns_keeps_a_nonzero_interval(void **state) {
  nres_ratelimit_t rl;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 1e12, 1), 0);
  assert_int_equal(rl.interval, 1);
  assert_int_equal(nres_ratelimit_acquire(&rl, 100, NULL), 0);
  assert_int_equal(nres_ratelimit_acquire(&rl, 100, NULL), NRES_ELIMITED);
  assert_int_equal(nres_ratelimit_acquire(&rl, 101, NULL), 0);
}

/* With interval 1e18 ns a burst of 100 saturates the tolerance; tat then
 * reached NRES_TIME_NEVER and, saturating there, let every caller in. */
static void tiny_rate_does_not_admit_without_limit_once_tat_saturates(
    void **state) {
  nres_ratelimit_t rl;
  nres_time_t retry = 0;
  int admitted = 0;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, 1e-9, 100), 0);
  assert_int_equal(rl.interval, 1000000000000000000ull);
  assert_int_equal(rl.tolerance, NRES_TIME_NEVER);
  for (int i = 0; i < 200; i++)
    if (nres_ratelimit_acquire(&rl, 0, NULL) == 0)
      admitted++;
  assert_int_equal(admitted, 18);   /* 18e18 is the last tat that fits */
  assert_int_equal(nres_ratelimit_acquire(&rl, 1000 * NRES_SEC, &retry),
                   NRES_ELIMITED);
  assert_int_equal(retry, NRES_TIME_NEVER);
}

static void no_allocation(void **state) {
  nres_ratelimit_t rl;
  (void) state;

  test_count_allocations();
  assert_int_equal(nres_ratelimit_init(&rl, 50.0, 5), 0);
  for (nres_time_t t = 0; t < NRES_SEC; t += NRES_MSEC)
    (void) nres_ratelimit_acquire(&rl, t, NULL);
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
}

/* Eight threads, one limiter, one shared virtual clock. */
#define HAMMER_THREADS 8
#define HAMMER_ITERS 20000
#define HAMMER_STEP (10 * NRES_USEC)
#define HAMMER_RATE 1000.0
#define HAMMER_BURST 5

static nres_ratelimit_t hammer_rl;
static atomic_uint_least64_t hammer_clock;
static atomic_uint_least64_t hammer_admitted;
static atomic_uint_least64_t hammer_refused;

/* All threads start together, so they really overlap. */
static atomic_int hammer_ready;

static void hammer_gate(void) {
  atomic_fetch_add(&hammer_ready, 1);
  while (atomic_load(&hammer_ready) < HAMMER_THREADS)
    sched_yield();
}

static void *hammer(void *arg) {
  (void) arg;
  hammer_gate();
  for (int i = 0; i < HAMMER_ITERS; i++) {
    uint64_t now = atomic_fetch_add(&hammer_clock, HAMMER_STEP) + HAMMER_STEP;
    if (nres_ratelimit_acquire(&hammer_rl, now, NULL) == 0)
      atomic_fetch_add(&hammer_admitted, 1);
    else
      atomic_fetch_add(&hammer_refused, 1);
  }
  return NULL;
}

static void threads_never_exceed_rate_times_elapsed_plus_burst(void **state) {
  char args[HAMMER_THREADS];
  double elapsed_sec;
  double bound;
  uint64_t admitted;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&hammer_rl, HAMMER_RATE,
                                       HAMMER_BURST), 0);
  atomic_store(&hammer_clock, 0);
  atomic_store(&hammer_admitted, 0);
  atomic_store(&hammer_refused, 0);
  atomic_store(&hammer_ready, 0);
  test_run_threads(HAMMER_THREADS, hammer, args, 1);

  elapsed_sec = (double) atomic_load(&hammer_clock) / 1e9;
  bound = HAMMER_RATE * elapsed_sec + HAMMER_BURST + 1;
  admitted = atomic_load(&hammer_admitted);
  assert_true((double) admitted <= bound);
  /* Not refusing everything either: clock readings are dense (100 per
   * interval), so the stream keeps up with the rate. */
  assert_true((double) admitted >= 0.9 * HAMMER_RATE * elapsed_sec);
  assert_int_equal(stats(&hammer_rl).refused,
                   atomic_load(&hammer_refused));
  assert_int_equal(admitted + atomic_load(&hammer_refused),
                   (uint64_t) HAMMER_THREADS * HAMMER_ITERS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(burst_admits_exactly_burst_then_refuses),
    cmocka_unit_test(admitted_again_exactly_at_retry_after),
    cmocka_unit_test(refusals_do_not_use_up_the_rate),
    cmocka_unit_test(sustained_stream_is_held_to_the_rate),
    cmocka_unit_test(invalid_init_is_einval),
    cmocka_unit_test(interval_is_rounded_and_saturates),
    cmocka_unit_test(rate_above_one_per_ns_keeps_a_nonzero_interval),
    cmocka_unit_test(tiny_rate_does_not_admit_without_limit_once_tat_saturates),
    cmocka_unit_test(no_allocation),
    cmocka_unit_test(sheddable_gets_half_the_burst),
    cmocka_unit_test(threads_never_exceed_rate_times_elapsed_plus_burst),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

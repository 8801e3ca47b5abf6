/* SPDX-License-Identifier: MIT */
/* test_breaker.c - the circuit breaker (core/breaker.c) on a virtual clock.
 *
 * Walks the state machine one transition at a time: when CLOSED trips (a
 * run of failures, a failure ratio over min_calls, a slow-call ratio), how
 * long OPEN refuses (break_for, doubled per reopening up to break_max,
 * jittered down by at most break_jitter, never early), how many probes
 * HALF_OPEN admits and what closes or reopens it, isolate and reset, and
 * that outcomes which arrive late (calls admitted before a trip, probes of
 * an older half-open period) change nothing. Two regression tests replay
 * resilience4j bugs: more probes admitted than configured under contention
 * (#1432, 8 threads, run under TSan too) and a breaker stuck half-open
 * after its probe was canceled (#903). Probe permits whose holder vanished
 * lapse after their lease (issue 28). Threads sharing a closed breaker
 * (their outcomes in per-thread shards of the window) trip it on the ratio
 * of all their outcomes, counted exactly. The closed hot path is proved to
 * write nothing by running it on a read-only page.
 */
#include <math.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nres_test.h"
#include "core/breaker.h"

#define T0 NRES_SEC
#define REFUSED (-100)
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Defaults with no jitter, so break lengths are exact. */
static void plain_config(nres_breaker_config_t *c) {
  nres_breaker_config_init(c);
  c->break_jitter = 0;
}

/* One whole call: admission and outcome. REFUSED if not admitted. */
static int call(nres_breaker_t *b, nres_time_t now, int outcome, int slow,
                nres_rng_t *rng) {
  uint32_t permit;

  if (nres_breaker_acquire(b, now, &permit) != 0)
    return REFUSED;
  return nres_breaker_record(b, now, permit, outcome, slow, rng);
}

/* The first ms (from `from`, up to `limit` ms) at which the breaker reads
 * half-open. state() is a pure read and monotonic in time while the
 * breaker is left alone, so a binary search finds it. */
static nres_time_t opens_after(const nres_breaker_t *b, nres_time_t from,
                               nres_time_t limit_ms) {
  nres_time_t lo = 0, hi = limit_ms, mid;

  assert_int_equal(nres_breaker_state(b, from + hi * NRES_MSEC),
                   NRES_BREAKER_HALF_OPEN);
  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (nres_breaker_state(b, from + mid * NRES_MSEC) == NRES_BREAKER_HALF_OPEN)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo * NRES_MSEC;
}

/* Counters through the public reader, not the atomic fields. */
static nres_breaker_stats_t stats(const nres_breaker_t *breaker) {
  nres_breaker_stats_t st;
  nres_breaker_stats(breaker, &st);
  return st;
}

static void config_defaults(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;

  (void) state;
  nres_breaker_config_init(&c);
  assert_int_equal(c.consecutive, 5);
  assert_int_equal(c.min_calls, 20);
  assert_true(c.failure_ratio == 0.5);
  assert_true(c.slow_ratio == 0);
  assert_int_equal(c.window, 30 * NRES_SEC);
  assert_int_equal(c.buckets, 10);
  assert_int_equal(c.probes, 1);
  assert_int_equal(c.success_threshold, 2);
  assert_int_equal(c.break_for, 15 * NRES_SEC);
  assert_int_equal(c.break_max, 120 * NRES_SEC);
  assert_true(c.break_jitter == 0.1);
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_CLOSED);
  assert_int_equal(b.window.width, 3 * NRES_SEC);
}

static void invalid_config_is_einval(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;

  (void) state;
#define BAD(field, value)                                                    \
  do {                                                                       \
    nres_breaker_config_init(&c);                                            \
    c.field = value;                                                         \
    assert_int_equal(nres_breaker_init(&b, &c), NRES_EINVAL);                \
    assert_non_null(nres_breaker_config_error(&c));                          \
    assert_true(strncmp(nres_breaker_config_error(&c), "breaker." #field ":", \
                        strlen("breaker." #field ":")) == 0);                \
  } while (0)
  BAD(failure_ratio, -0.1);
  BAD(failure_ratio, 1.1);
  BAD(failure_ratio, NAN);
  BAD(slow_ratio, -0.1);
  BAD(slow_ratio, 1.5);
  BAD(probes, 0);
  BAD(probes, 256);
  BAD(success_threshold, 0);
  BAD(success_threshold, 256);
  BAD(break_for, 0);
  BAD(break_max, 14 * NRES_SEC);   /* below break_for */
  BAD(break_jitter, -0.1);
  BAD(break_jitter, 1.0);
  BAD(window, 0);
  BAD(buckets, 0);
  BAD(buckets, NRES_WINDOW_MAX_BUCKETS + 1);
  BAD(break_for, nres_time_from_sec(NAN));
  BAD(break_max, nres_time_from_sec(-1));
  BAD(window, nres_time_from_sec(NAN));
#undef BAD
  nres_breaker_config_init(&c);
  assert_int_equal(nres_breaker_init(NULL, &c), NRES_EINVAL);
  assert_int_equal(nres_breaker_init(&b, NULL), NRES_EINVAL);

  /* the edges that are allowed */
  c.failure_ratio = 1;
  c.slow_ratio = 1;
  c.probes = 255;
  c.success_threshold = 255;
  c.break_max = c.break_for;
  c.break_jitter = 0.999;
  c.consecutive = 0;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  assert_null(nres_breaker_config_error(&c));
}

static void trips_on_n_consecutive_failures_and_not_before(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t permit = 7;
  int i;

  (void) state;
  plain_config(&c);
  c.failure_ratio = 0;   /* the run alone decides */
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 4; i++) {
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
    assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_CLOSED);
  }
  assert_int_equal(stats(&b).trips, 0);
  assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_OPEN);
  assert_int_equal(stats(&b).trips, 1);
  assert_int_equal(nres_breaker_acquire(&b, T0, &permit), NRES_ECIRCUIT);
  assert_int_equal(permit, 0);
  assert_int_equal(stats(&b).rejected, 1);
}

static void success_resets_the_failure_run(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  int i;

  (void) state;
  plain_config(&c);
  c.failure_ratio = 0;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 4; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 0, NULL), -1);
  assert_int_equal(stats(&b).consecutive, 0);
  for (i = 0; i < 4; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  /* an ignored outcome (canceled) neither breaks nor extends the run */
  assert_int_equal(call(&b, T0, NRES_BREAKER_IGNORE, 0, NULL), -1);
  assert_int_equal(stats(&b).consecutive, 4);
  assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
}

static void failure_ratio_trip_honours_min_calls(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  int i;

  (void) state;
  plain_config(&c);
  c.consecutive = 0;   /* the ratio alone decides */
  assert_int_equal(nres_breaker_init(&b, &c), 0);

  /* all failures, but fewer than min_calls (20) */
  for (i = 0; i < 19; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_CLOSED);
  assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);

  /* enough calls, the ratio reached on the dot: 11 of 22 */
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 11; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 0, NULL), -1);
  for (i = 0; i < 10; i++)   /* 10 of 21 is below 0.5 */
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);

  /* failures that have left the window (30 s) no longer count */
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 19; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, T0 + 31 * NRES_SEC, NRES_BREAKER_FAILURE, 0, NULL),
                   -1);
  assert_int_equal(nres_breaker_state(&b, T0 + 31 * NRES_SEC),
                   NRES_BREAKER_CLOSED);
}

/* Issue 28: the success that brings the window to min_calls trips the
 * breaker when the failure ratio is over the threshold then (resilience4j
 * does; a ratio checked on failures only never saw it). Through the inline
 * common case (nres__breaker_record_common), as the executor and the
 * gateway record. Failures that left the window no longer make it due. */
static void success_reaching_min_calls_trips_on_the_ratio(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t permit;
  int i;

  (void) state;
  plain_config(&c);
  c.consecutive = 0;
  c.min_calls = 10;
  c.failure_ratio = 0.5;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 5; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  for (i = 0; i < 4; i++)   /* 9 calls: under min_calls */
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 0, NULL), -1);
  assert_int_equal(nres_breaker_acquire(&b, T0, &permit), 0);
  assert_int_equal(permit, 0);
  assert_true(nres__breaker_record_common(&b, nres__shard_if_taken(), T0, 0,
                                          NRES_BREAKER_SUCCESS, 0, 1) == 0);
  assert_int_equal(nres__breaker_record_other(&b, T0, 0, NRES_BREAKER_SUCCESS,
                                              0, NULL),
                   NRES_BREAKER_OPEN);   /* 5 of 10 */

  /* under the ratio at min_calls: no trip, and successes go back to the
   * common case */
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 4; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  for (i = 0; i < 12; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 0, NULL), -1);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_CLOSED);
  assert_true(nres__breaker_record_common(&b, nres__shard_if_taken(), T0, 0,
                                          NRES_BREAKER_SUCCESS, 0, 1) == 1);

  /* the failures left the window (30 s) before min_calls: no trip */
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 5; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  for (i = 0; i < 10; i++)
    assert_int_equal(call(&b, T0 + 31 * NRES_SEC, NRES_BREAKER_SUCCESS, 0,
                          NULL),
                     -1);
  assert_int_equal(nres_breaker_state(&b, T0 + 31 * NRES_SEC),
                   NRES_BREAKER_CLOSED);
  assert_true(nres__breaker_record_common(&b, nres__shard_if_taken(),
                                          T0 + 31 * NRES_SEC, 0,
                                          NRES_BREAKER_SUCCESS, 0, 1) == 1);
}

static void slow_call_ratio_trips_on_slow_successes(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  int i;

  (void) state;
  plain_config(&c);
  c.consecutive = 0;
  c.failure_ratio = 0;
  c.slow_ratio = 0.5;
  c.min_calls = 10;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 5; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 0, NULL), -1);
  for (i = 0; i < 4; i++)   /* 4 slow of 9: below min_calls anyway */
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 1, NULL), -1);
  assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 1, NULL),
                   NRES_BREAKER_OPEN);

  /* with the slow ratio off, slowness means nothing */
  c.slow_ratio = 0;
  c.failure_ratio = 0.5;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 50; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_SUCCESS, 1, NULL), -1);
}

/* Trip a fresh breaker with c at `at` (by a run of failures). */
static void trip_at(nres_breaker_t *b, const nres_breaker_config_t *c,
                    nres_time_t at, nres_rng_t *rng) {
  uint32_t i;

  assert_int_equal(nres_breaker_init(b, c), 0);
  for (i = 1; i < c->consecutive; i++)
    assert_int_equal(call(b, at, NRES_BREAKER_FAILURE, 0, rng), -1);
  assert_int_equal(call(b, at, NRES_BREAKER_FAILURE, 0, rng),
                   NRES_BREAKER_OPEN);
}

static void open_refuses_until_break_then_admits_exactly_probes(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p[4];
  nres_time_t t;
  int i;

  (void) state;
  plain_config(&c);
  c.probes = 3;
  c.break_for = 10 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);

  t = T0 + 10 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t - NRES_MSEC, &p[0]),
                   NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_state(&b, t - 1), NRES_BREAKER_OPEN);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_HALF_OPEN);
  assert_int_equal(stats(&b).rejected, 1);
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_breaker_acquire(&b, t, &p[i]), 0);
    assert_int_not_equal(p[i], 0);
    assert_int_equal(p[i], p[0]);   /* one half-open period, one permit */
  }
  assert_int_equal(nres_breaker_acquire(&b, t, &p[3]), NRES_ECIRCUIT);
  /* held until their lease (break_for here) runs out */
  assert_int_equal(nres_breaker_acquire(&b, t + 10 * NRES_SEC - NRES_MSEC,
                                        &p[3]),
                   NRES_ECIRCUIT);
  assert_int_equal(stats(&b).rejected, 3);
  assert_int_equal(stats(&b).leases_expired, 0);

  /* a trip between ms ticks is rounded up: never a moment early */
  trip_at(&b, &c, T0 + 123456, NULL);
  t = T0 + 123456 + 10 * NRES_SEC;
  assert_int_equal(nres_breaker_state(&b, t - 1), NRES_BREAKER_OPEN);
  assert_int_equal(nres_breaker_acquire(&b, t - 1, &p[0]), NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_state(&b, t - 123456 + NRES_MSEC),
                   NRES_BREAKER_HALF_OPEN);
}

/* Regression guard: open-until is kept in 38 bits of ms. Saturating it
 * would leave a breaker open for good under a clock counting from 1970
 * (ngx.now) instead of from boot; it wraps instead, and a break that
 * crosses the wrap must still end on time. */
static void break_ends_on_time_whatever_the_clock_epoch(void **state) {
  static const nres_time_t starts[] = {
    1700000000 * NRES_SEC + 123 * NRES_MSEC,          /* ns since 1970 */
    ((nres_time_t) 3 << 38) * NRES_MSEC - 5 * NRES_SEC /* across the wrap */
  };
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_time_t t;
  uint32_t p;
  size_t i;

  (void) state;
  plain_config(&c);
  c.success_threshold = 1;
  c.break_for = 10 * NRES_SEC;
  for (i = 0; i < COUNT_OF(starts); i++) {
    t = starts[i];
    trip_at(&b, &c, t, NULL);
    assert_int_equal(nres_breaker_state(&b, t + 10 * NRES_SEC - 1),
                     NRES_BREAKER_OPEN);
    assert_int_equal(nres_breaker_acquire(&b, t + 5 * NRES_SEC, &p),
                     NRES_ECIRCUIT);
    assert_int_equal(nres_breaker_state(&b, t + 10 * NRES_SEC),
                     NRES_BREAKER_HALF_OPEN);
    assert_int_equal(call(&b, t + 10 * NRES_SEC, NRES_BREAKER_SUCCESS, 0,
                          NULL),
                     NRES_BREAKER_CLOSED);
  }
}

static void success_threshold_probe_successes_close_it(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p;
  uint32_t calls;
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.break_for = 10 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);
  t = T0 + 10 * NRES_SEC;

  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   -1);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_HALF_OPEN);
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   NRES_BREAKER_CLOSED);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_CLOSED);
  assert_int_equal(stats(&b).consecutive, 0);
  assert_int_equal(stats(&b).level, 0);
  nres_window_sum(&b.window, t, &calls, NULL, NULL);
  assert_int_equal(calls, 0);
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(p, 0);

  /* the old probe permit means nothing now */
  assert_int_equal(nres_breaker_record(&b, t, 1, NRES_BREAKER_FAILURE, 0, NULL),
                   -1);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_CLOSED);
}

static void failed_probe_reopens_with_doubled_break_capped(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.success_threshold = 1;
  c.break_for = 10 * NRES_SEC;
  c.break_max = 35 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);
  t = T0;
  assert_int_equal(opens_after(&b, t, 200000), 10 * NRES_SEC);

  t += 10 * NRES_SEC;
  assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
  assert_int_equal(opens_after(&b, t, 200000), 20 * NRES_SEC);

  t += 20 * NRES_SEC;
  assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
  assert_int_equal(opens_after(&b, t, 200000), 35 * NRES_SEC);   /* not 40 */

  t += 35 * NRES_SEC;
  assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
  assert_int_equal(opens_after(&b, t, 200000), 35 * NRES_SEC);
  assert_int_equal(stats(&b).trips, 4);

  /* closing forgets the level: the next trip breaks for break_for */
  t += 35 * NRES_SEC;
  assert_int_equal(call(&b, t, NRES_BREAKER_SUCCESS, 0, NULL),
                   NRES_BREAKER_CLOSED);
  for (int i = 1; i < 5; i++)
    assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);
  assert_int_equal(opens_after(&b, t, 200000), 10 * NRES_SEC);
}

static void jitter_keeps_break_within_bounds(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_rng_t rng;
  nres_time_t d, lo = NRES_TIME_NEVER, hi = 0, capped_lo = NRES_TIME_NEVER;
  uint64_t seed;

  (void) state;
  nres_breaker_config_init(&c);
  c.break_for = 8 * NRES_SEC;
  c.break_max = 8 * NRES_SEC;
  c.break_jitter = 0.25;
  for (seed = 1; seed <= 200; seed++) {
    nres_rng_seed(&rng, seed);
    trip_at(&b, &c, T0, &rng);
    d = opens_after(&b, T0, 8000);
    /* in [d * (1 - j), d], rounded up to the ms */
    assert_true(d >= 6 * NRES_SEC && d <= 8 * NRES_SEC);
    if (d < lo)
      lo = d;
    if (d > hi)
      hi = d;

    /* a capped break is jittered too, after the cap */
    assert_int_equal(call(&b, T0 + d, NRES_BREAKER_FAILURE, 0, &rng),
                     NRES_BREAKER_OPEN);
    d = opens_after(&b, T0 + d, 8000);
    assert_true(d >= 6 * NRES_SEC && d <= 8 * NRES_SEC);
    if (d < capped_lo)
      capped_lo = d;
  }
  /* and it is actually spread over the range */
  assert_true(lo < 6200 * NRES_MSEC);
  assert_true(hi > 7800 * NRES_MSEC);
  assert_true(capped_lo < 6200 * NRES_MSEC);
}

static void isolate_holds_until_reset(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p;
  uint32_t probe;
  nres_time_t t;
  int i;

  (void) state;
  plain_config(&c);
  c.failure_ratio = 0;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 4; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  nres_breaker_isolate(&b);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_ISOLATED);
  assert_int_equal(nres_breaker_state(&b, T0 + 3600 * NRES_SEC),
                   NRES_BREAKER_ISOLATED);
  assert_int_equal(nres_breaker_acquire(&b, T0 + 3600 * NRES_SEC, &p),
                   NRES_ECIRCUIT);
  assert_int_equal(stats(&b).rejected, 1);
  assert_int_equal(stats(&b).trips, 0);   /* an operator's isolation is no trip */
  assert_int_equal(nres_breaker_record(&b, T0, 0, NRES_BREAKER_FAILURE, 0, NULL),
                   -1);

  nres_breaker_reset(&b);
  assert_int_equal(nres_breaker_state(&b, T0), NRES_BREAKER_CLOSED);
  assert_int_equal(nres_breaker_acquire(&b, T0, &p), 0);
  assert_int_equal(p, 0);
  /* the run of 4 was forgotten: 4 more do not trip it */
  for (i = 0; i < 4; i++)
    assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, T0, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);

  /* isolating a half-open breaker strands its probe: the probe's outcome
   * neither closes nor reopens anything after a reset */
  t = T0 + 15 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t, &probe), 0);
  assert_int_not_equal(probe, 0);
  nres_breaker_isolate(&b);
  assert_int_equal(nres_breaker_record(&b, t, probe, NRES_BREAKER_SUCCESS, 0,
                                       NULL),
                   -1);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_ISOLATED);
  nres_breaker_reset(&b);
  assert_int_equal(nres_breaker_record(&b, t, probe, NRES_BREAKER_FAILURE, 0,
                                       NULL),
                   -1);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_CLOSED);
  assert_int_equal(stats(&b).level, 0);
}

static void outcomes_admitted_before_trip_leave_open_breaker_alone(
    void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p[10];
  uint32_t calls;
  uint32_t consecutive;
  int i;

  (void) state;
  plain_config(&c);
  c.break_for = 10 * NRES_SEC;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < 10; i++) {
    assert_int_equal(nres_breaker_acquire(&b, T0, &p[i]), 0);
    assert_int_equal(p[i], 0);
  }
  for (i = 0; i < 4; i++)
    assert_int_equal(nres_breaker_record(&b, T0, p[i], NRES_BREAKER_FAILURE,
                                         0, NULL),
                     -1);
  assert_int_equal(nres_breaker_record(&b, T0, p[4], NRES_BREAKER_FAILURE, 0,
                                       NULL),
                   NRES_BREAKER_OPEN);
  consecutive = stats(&b).consecutive;
  nres_window_sum(&b.window, T0, &calls, NULL, NULL);
  assert_int_equal(calls, 5);

  /* the other five finish later, some well, some not */
  for (i = 5; i < 10; i++)
    assert_int_equal(nres_breaker_record(&b, T0 + NRES_SEC, p[i],
                                         i % 2 ? NRES_BREAKER_SUCCESS
                                               : NRES_BREAKER_FAILURE,
                                         0, NULL),
                     -1);
  assert_int_equal(nres_breaker_state(&b, T0 + NRES_SEC), NRES_BREAKER_OPEN);
  assert_int_equal(stats(&b).consecutive, consecutive);
  assert_int_equal(stats(&b).trips, 1);
  nres_window_sum(&b.window, T0 + NRES_SEC, &calls, NULL, NULL);
  assert_int_equal(calls, 5);
  /* nor did they move the end of the break */
  assert_int_equal(opens_after(&b, T0, 200000), 10 * NRES_SEC);
}

static void stale_probe_permit_from_older_generation_is_ignored(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t old, cur, extra;
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.success_threshold = 1;
  c.break_for = 10 * NRES_SEC;
  c.break_max = 10 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);
  /* a probe of the first half-open period fails, and a second begins */
  t = T0 + 10 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t, &old), 0);
  assert_int_equal(nres_breaker_record(&b, t, old, NRES_BREAKER_FAILURE, 0,
                                       NULL),
                   NRES_BREAKER_OPEN);
  t += 10 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t, &cur), 0);
  assert_int_not_equal(cur, old);

  /* the old permit can neither close, reopen nor free a probe slot */
  assert_int_equal(nres_breaker_record(&b, t, old, NRES_BREAKER_SUCCESS, 0,
                                       NULL),
                   -1);
  assert_int_equal(nres_breaker_record(&b, t, old, NRES_BREAKER_FAILURE, 0,
                                       NULL),
                   -1);
  nres_breaker_release(&b, old);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_HALF_OPEN);
  assert_int_equal(nres_breaker_acquire(&b, t, &extra), NRES_ECIRCUIT);
  assert_int_equal(stats(&b).trips, 2);

  assert_int_equal(nres_breaker_record(&b, t, cur, NRES_BREAKER_SUCCESS, 0,
                                       NULL),
                   NRES_BREAKER_CLOSED);
}

/* Issue 28: a probe whose holder vanished (a worker killed with -9, a
 * request that never reported) kept a half-open breaker refusing for good.
 * Every probe permit has a lease: once all `probes` permits have been out
 * for `lease` since the latest was taken, the next caller takes their
 * place; the lapsed permits are counted. */
static void probe_of_a_vanished_holder_lapses_after_its_lease(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t gone, p, q;
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.break_for = 10 * NRES_SEC;
  c.lease = 2 * NRES_SEC;
  c.success_threshold = 2;
  trip_at(&b, &c, T0, NULL);
  t = T0 + 10 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t, &gone), 0);   /* vanishes */

  assert_int_equal(nres_breaker_acquire(&b, t + 2 * NRES_SEC - NRES_MSEC, &p),
                   NRES_ECIRCUIT);
  assert_int_equal(stats(&b).leases_expired, 0);
  assert_int_equal(nres_breaker_acquire(&b, t + 2 * NRES_SEC, &p), 0);
  assert_int_equal(p, gone);   /* the same half-open period goes on */
  assert_int_equal(stats(&b).leases_expired, 1);
  assert_int_equal(stats(&b).probes, 1);
  /* the new holder has a lease of its own, from its admission */
  assert_int_equal(nres_breaker_acquire(&b, t + 4 * NRES_SEC - NRES_MSEC, &q),
                   NRES_ECIRCUIT);

  /* and it can close the breaker */
  t += 3 * NRES_SEC;
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   -1);
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   NRES_BREAKER_CLOSED);
  assert_int_equal(stats(&b).leases_expired, 1);
}

/* The lease runs from the latest admission, and every lapsed permit is
 * counted. With no lease set it is break_for; it may not exceed it. */
static void lease_runs_from_the_latest_probe_and_defaults_to_break_for(
    void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p[3];
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.probes = 2;
  c.break_for = 4 * NRES_SEC;
  c.break_max = 4 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);
  t = T0 + 4 * NRES_SEC;
  assert_int_equal(nres_breaker_acquire(&b, t, &p[0]), 0);
  assert_int_equal(nres_breaker_acquire(&b, t + NRES_SEC, &p[1]), 0);
  /* the first's 4 s are over, not the second's */
  assert_int_equal(nres_breaker_acquire(&b, t + 4 * NRES_SEC, &p[2]),
                   NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_acquire(&b, t + 5 * NRES_SEC, &p[2]), 0);
  assert_int_equal(stats(&b).leases_expired, 2);
  assert_int_equal(stats(&b).probes, 1);

  /* a lapsed probe that reports late is still heard */
  assert_int_equal(nres_breaker_record(&b, t + 5 * NRES_SEC, p[0],
                                       NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);

  nres_breaker_config_init(&c);
  assert_true(c.lease == 0);
  c.lease = c.break_for;
  assert_null(nres_breaker_config_error(&c));
  c.lease = c.break_for + 1;
  assert_string_equal(nres_breaker_config_error(&c),
                      "breaker.lease: above breaker.break_for");
  c.lease = NRES_TIME_INVALID;
  assert_string_equal(nres_breaker_config_error(&c),
                      "breaker.lease: not a number or negative");
}

/* Issue 28, randomized (fixed seeds): callers acquire, report success,
 * failure or nothing (canceled), and any probe holder may vanish at any
 * step, on a clock that moves 0..400 ms a step. No state outlives its
 * bound: OPEN never lasts past break_max after the trip that set it (the
 * ms rounding aside), and a half-open breaker with every probe permit out
 * admits the next caller once `lease` has passed since the latest was
 * taken. At the end, with everyone gone, successes close it. */
#define SOAK_HOLDERS 8

static void soak(uint64_t seed) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_rng_t rng;
  uint32_t held[SOAK_HOLDERS] = { 0 };   /* probe permits held; 0 none */
  nres_time_t now = T0, opened_at = 0, probe_at = 0, lease;
  uint32_t permit;
  int i, k, rc, state, vanished = 0;

  plain_config(&c);
  c.consecutive = 2;
  c.probes = 2;
  c.success_threshold = 2;
  c.break_for = 1 * NRES_SEC;
  c.break_max = 2 * NRES_SEC;
  c.lease = 700 * NRES_MSEC;
  lease = c.lease;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  nres_rng_seed(&rng, seed);

  for (i = 0; i < 20000; i++) {
    now += nres_rng_below(&rng, 400) * NRES_MSEC;
    k = (int) nres_rng_below(&rng, SOAK_HOLDERS);
    state = nres_breaker_state(&b, now);
    /* the bounds, before anything else happens at this instant */
    if (state == NRES_BREAKER_OPEN)
      assert_true(now < opened_at + c.break_max + NRES_MSEC);
    if (state == NRES_BREAKER_HALF_OPEN &&
        now >= probe_at + lease + NRES_MSEC) {
      assert_int_equal(nres_breaker_acquire(&b, now, &permit), 0);
      assert_int_not_equal(permit, 0);
      probe_at = now;
      nres_breaker_release(&b, permit);   /* only looked */
    }
    if (held[k] == 0) {
      rc = nres_breaker_acquire(&b, now, &permit);
      if (rc != 0)
        continue;
      if (permit == 0) {   /* closed: an outcome now */
        if (nres_breaker_record(&b, now, 0,
                                nres_rng_below(&rng, 3) == 0
                                    ? NRES_BREAKER_FAILURE
                                    : NRES_BREAKER_SUCCESS,
                                0, NULL) == NRES_BREAKER_OPEN)
          opened_at = now;
        continue;
      }
      held[k] = permit;
      probe_at = now;
      continue;
    }
    switch (nres_rng_below(&rng, 4)) {
      case 0:   /* vanishes: killed, hung, never reports */
        vanished++;
        break;
      case 1:
        nres_breaker_release(&b, held[k]);
        break;
      default:
        if (nres_breaker_record(&b, now, held[k],
                                nres_rng_below(&rng, 2) ? NRES_BREAKER_FAILURE
                                                        : NRES_BREAKER_SUCCESS,
                                0, NULL) == NRES_BREAKER_OPEN)
          opened_at = now;
        break;
    }
    held[k] = 0;
  }
  assert_true(vanished > 100);
  assert_true(stats(&b).leases_expired > 0);

  /* everyone is gone: within break_max + lease it admits, and closes on
   * successes */
  now += c.break_max + lease + NRES_MSEC;
  for (i = 0; i < 4 && nres_breaker_state(&b, now) != NRES_BREAKER_CLOSED;
       i++) {
    assert_int_equal(nres_breaker_acquire(&b, now, &permit), 0);
    nres_breaker_record(&b, now, permit, NRES_BREAKER_SUCCESS, 0, NULL);
  }
  assert_int_equal(nres_breaker_state(&b, now), NRES_BREAKER_CLOSED);
}

static void no_state_outlives_its_lease_whoever_vanishes(void **state) {
  (void) state;
  for (uint64_t seed = 1; seed <= 8; seed++)
    soak(seed);
}

/* Regression, resilience4j #1432: "half-open admits more probes than
 * configured". Eight threads acquire probes, hold them a moment and give
 * them back (release, success, or a failure that reopens); each admitted
 * probe counts itself in an in-flight counter for its permit (one per
 * half-open period), which must never exceed `probes`. */
struct hammer {
  nres_breaker_t breaker;
  _Atomic uint64_t clock;
  _Atomic uint32_t inflight[257];   /* by permit: 1..256 */
  _Atomic uint32_t max_inflight;
  _Atomic uint32_t stop;            /* half-open periods nearly wrapped */
  _Atomic uint32_t busy;            /* threads taking or holding a probe */
  int allow_failures;
};

struct hammer_arg {
  struct hammer *h;
  uint64_t seed;
};

static void *hammer_worker(void *arg) {
  struct hammer_arg *a = arg;
  struct hammer *h = a->h;
  nres_rng_t rng;
  nres_time_t now;
  uint32_t permit, n, m;
  uint64_t roll;
  int successes = 0;
  int i;

  nres_rng_seed(&rng, a->seed);
  for (i = 0; i < 20000 && !atomic_load(&h->stop); i++) {
    /* Time moves only while nobody holds or is taking a probe, so no
     * permit lapses here (leases have tests of their own): 50 us per
     * refusal that finds the breaker idle. */
    atomic_fetch_add(&h->busy, 1);
    now = atomic_load(&h->clock);
    if (nres_breaker_acquire(&h->breaker, now, &permit) != 0) {
      if (atomic_fetch_sub(&h->busy, 1) == 1)
        atomic_fetch_add(&h->clock, 50 * NRES_USEC);
      continue;
    }
    if (permit == 0) {   /* it closed: trip it again */
      nres_breaker_record(&h->breaker, now, 0, NRES_BREAKER_FAILURE, 0, &rng);
      atomic_fetch_sub(&h->busy, 1);
      continue;
    }
    if (permit >= 200)   /* stop before permits could come round again */
      atomic_store(&h->stop, 1);
    n = atomic_fetch_add(&h->inflight[permit], 1) + 1;
    m = atomic_load(&h->max_inflight);
    while (n > m && !atomic_compare_exchange_weak(&h->max_inflight, &m, n))
      ;
    if (nres_rng_below(&rng, 4) == 0)
      sched_yield();   /* hold the probe while others try */
    atomic_fetch_sub(&h->inflight[permit], 1);

    roll = nres_rng_below(&rng, 100);
    if (h->allow_failures && roll < 10) {
      nres_breaker_record(&h->breaker, now, permit, NRES_BREAKER_FAILURE, 0,
                          &rng);
    } else if (roll < 30 && (h->allow_failures || successes < 30)) {
      successes++;
      nres_breaker_record(&h->breaker, now, permit, NRES_BREAKER_SUCCESS, 0,
                          &rng);
    } else if (roll < 65) {
      nres_breaker_release(&h->breaker, permit);
    } else {
      nres_breaker_record(&h->breaker, now, permit, NRES_BREAKER_IGNORE, 0,
                          &rng);
    }
    atomic_fetch_sub(&h->busy, 1);
  }
  return NULL;
}

static void hammer(uint32_t probes, int allow_failures) {
  static struct hammer h;
  struct hammer_arg a[8];
  nres_breaker_config_t c;
  nres_time_t t;
  uint32_t p;
  uint32_t i;

  memset(&h, 0, sizeof(h));
  plain_config(&c);
  c.consecutive = 1;
  c.probes = probes;
  c.break_for = NRES_MSEC;
  c.break_max = 4 * NRES_MSEC;
  /* Without failures, 8 threads record at most 240 successes: the breaker
   * stays in one half-open period the whole time. */
  c.success_threshold = allow_failures ? 3 : 255;
  trip_at(&h.breaker, &c, T0, NULL);
  atomic_store(&h.clock, T0);
  h.allow_failures = allow_failures;
  for (i = 0; i < 8; i++) {
    a[i].h = &h;
    a[i].seed = 1000 * probes + i;
  }
  test_run_threads(8, hammer_worker, a, sizeof(a[0]));

  assert_true(atomic_load(&h.max_inflight) >= 1);
  assert_true(atomic_load(&h.max_inflight) <= probes);
  /* probes were refused for want of a slot: the limit was contended */
  assert_true(stats(&h.breaker).rejected > 0);
  assert_int_equal(stats(&h.breaker).leases_expired, 0);

  if (!allow_failures) {
    /* Every permit came back: exactly `probes` can be had again. */
    t = atomic_load(&h.clock);
    assert_int_equal(nres_breaker_state(&h.breaker, t), NRES_BREAKER_HALF_OPEN);
    for (i = 0; i < probes; i++)
      assert_int_equal(nres_breaker_acquire(&h.breaker, t, &p), 0);
    assert_int_equal(nres_breaker_acquire(&h.breaker, t, &p), NRES_ECIRCUIT);
  }
}

static void half_open_admits_more_probes_than_configured(void **state) {
  (void) state;
  hammer(1, 0);
  hammer(3, 0);
  hammer(1, 1);
  hammer(3, 1);
}

/* Regression, resilience4j #903: "breaker stuck half-open after a canceled
 * probe". A probe given back without an outcome must free its slot, so the
 * next caller can probe and the breaker can still close. */
static void breaker_stuck_half_open_after_a_canceled_probe(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  uint32_t p, q;
  nres_time_t t;

  (void) state;
  plain_config(&c);
  c.break_for = 10 * NRES_SEC;
  trip_at(&b, &c, T0, NULL);
  t = T0 + 10 * NRES_SEC;

  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_acquire(&b, t, &q), NRES_ECIRCUIT);
  nres_breaker_release(&b, p);                     /* canceled */
  nres_breaker_release(&b, p);                     /* twice: no effect */
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_acquire(&b, t, &q), NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_IGNORE, 0, NULL),
                   -1);                            /* canceled, as outcome */
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_HALF_OPEN);

  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   -1);
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  nres_breaker_release(&b, p);                     /* canceled in between */
  assert_int_equal(nres_breaker_acquire(&b, t, &p), 0);
  assert_int_equal(nres_breaker_record(&b, t, p, NRES_BREAKER_SUCCESS, 0, NULL),
                   NRES_BREAKER_CLOSED);
}

/* Threads sharing a closed breaker feed its window through their own
 * shards (core/shard.h); the ratio that trips it is over all of them. 8
 * threads record 1000 successes and 100 failures each (no trip: 800 of
 * 8800), then failures from this thread trip it at exactly the 8000th: the
 * decision read every shard, not only this thread's. */
#define SHARE_THREADS 8

struct share_arg {
  nres_breaker_t *b;
  uint32_t seed;
  int changes;          /* records that changed the state: none expected */
};

static void *share_worker(void *arg) {
  struct share_arg *a = arg;
  nres_rng_t rng;

  nres_rng_seed(&rng, a->seed);
  for (int i = 0; i < 1100; i++)
    if (call(a->b, T0 + (nres_time_t) i * NRES_USEC,
             i % 11 == 10 ? NRES_BREAKER_FAILURE : NRES_BREAKER_SUCCESS, 0,
             &rng) != -1)
      a->changes++;
  return NULL;
}

static void threads_sharing_a_breaker_trip_on_the_merged_ratio(void **state) {
  static nres_breaker_t b;
  struct share_arg a[SHARE_THREADS];
  nres_breaker_config_t c;
  uint32_t calls, failures;
  nres_time_t t = T0 + 2 * NRES_SEC;
  int i;

  (void) state;
  plain_config(&c);
  c.consecutive = 0;
  c.min_calls = 1;
  c.failure_ratio = 0.5;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  for (i = 0; i < SHARE_THREADS; i++) {
    a[i].b = &b;
    a[i].seed = (uint32_t) i + 1;
    a[i].changes = 0;
  }
  test_run_threads(SHARE_THREADS, share_worker, a, sizeof(a[0]));
  for (i = 0; i < SHARE_THREADS; i++)
    assert_int_equal(a[i].changes, 0);
  nres_window_sum(&b.window, t, &calls, &failures, NULL);
  assert_int_equal(calls, SHARE_THREADS * 1100);
  assert_int_equal(failures, SHARE_THREADS * 100);

  for (i = 0; i < 7199; i++)
    assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL), -1);
  assert_int_equal(call(&b, t, NRES_BREAKER_FAILURE, 0, NULL),
                   NRES_BREAKER_OPEN);   /* 8000 of 16000 */
  assert_int_equal(stats(&b).trips, 1);
}

/* Closed, the breaker is read by every call: admission, and a success with
 * no failure run and no ratios to feed, must not write its memory. */
static void closed_hot_path_writes_nothing(void **state) {
  long page = sysconf(_SC_PAGESIZE);
  nres_breaker_config_t c;
  nres_breaker_t *b;
  void *mem;
  uint32_t p;
  int i;

  (void) state;
  assert_true(sizeof(*b) <= (size_t) page);
  mem = mmap(NULL, (size_t) page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(mem != MAP_FAILED);
  b = mem;
  plain_config(&c);
  c.failure_ratio = 0;
  assert_int_equal(nres_breaker_init(b, &c), 0);

  assert_int_equal(mprotect(mem, (size_t) page, PROT_READ), 0);
  for (i = 0; i < 1000; i++) {
    p = 99;
    assert_int_equal(nres_breaker_acquire(b, T0, &p), 0);
    assert_int_equal(p, 0);
    assert_int_equal(nres_breaker_record(b, T0, p, NRES_BREAKER_SUCCESS, 0,
                                         NULL),
                     -1);
  }
  assert_int_equal(mprotect(mem, (size_t) page, PROT_READ | PROT_WRITE), 0);
  assert_int_equal(munmap(mem, (size_t) page), 0);
}

static void state_names(void **state) {
  (void) state;
  assert_string_equal(nres_breaker_state_name(NRES_BREAKER_CLOSED), "closed");
  assert_string_equal(nres_breaker_state_name(NRES_BREAKER_OPEN), "open");
  assert_string_equal(nres_breaker_state_name(NRES_BREAKER_HALF_OPEN),
                      "half-open");
  assert_string_equal(nres_breaker_state_name(NRES_BREAKER_ISOLATED),
                      "isolated");
  assert_string_equal(nres_breaker_state_name(4), "unknown");
  assert_string_equal(nres_breaker_state_name(-1), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(config_defaults),
    cmocka_unit_test(invalid_config_is_einval),
    cmocka_unit_test(trips_on_n_consecutive_failures_and_not_before),
    cmocka_unit_test(success_resets_the_failure_run),
    cmocka_unit_test(failure_ratio_trip_honours_min_calls),
    cmocka_unit_test(success_reaching_min_calls_trips_on_the_ratio),
    cmocka_unit_test(slow_call_ratio_trips_on_slow_successes),
    cmocka_unit_test(open_refuses_until_break_then_admits_exactly_probes),
    cmocka_unit_test(break_ends_on_time_whatever_the_clock_epoch),
    cmocka_unit_test(success_threshold_probe_successes_close_it),
    cmocka_unit_test(failed_probe_reopens_with_doubled_break_capped),
    cmocka_unit_test(jitter_keeps_break_within_bounds),
    cmocka_unit_test(isolate_holds_until_reset),
    cmocka_unit_test(outcomes_admitted_before_trip_leave_open_breaker_alone),
    cmocka_unit_test(stale_probe_permit_from_older_generation_is_ignored),
    cmocka_unit_test(probe_of_a_vanished_holder_lapses_after_its_lease),
    cmocka_unit_test(lease_runs_from_the_latest_probe_and_defaults_to_break_for),
    cmocka_unit_test(no_state_outlives_its_lease_whoever_vanishes),
    cmocka_unit_test(half_open_admits_more_probes_than_configured),
    cmocka_unit_test(breaker_stuck_half_open_after_a_canceled_probe),
    cmocka_unit_test(threads_sharing_a_breaker_trip_on_the_merged_ratio),
    cmocka_unit_test(closed_hot_path_writes_nothing),
    cmocka_unit_test(state_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

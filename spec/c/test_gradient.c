/* SPDX-License-Identifier: MIT */
/* test_gradient.c - the gradient concurrency limit (bulkhead adaptive = 2)
 * on a virtual clock, against a modelled dependency.
 *
 * The model: `capacity` servers; with n attempts in flight each takes
 * base * max(1, n / capacity) (work queues once every server is busy).
 * Demand is unbounded (a closed loop that always wants more), so the limit
 * alone decides the load. Checks: from a small start the limit grows to
 * where latency is about `tolerance` times the no-load latency, and no
 * further; when capacity halves it follows within a few thousand
 * completions, admitted latency stays under 2x the no-load latency, and the
 * baseline does not learn the overload; when capacity comes back the limit
 * recovers; a real latency step (the dependency itself slower) is learnt:
 * the limit dips, then comes back as the baseline follows; throttled
 * answers shrink the limit, permanent ones say nothing; the ranges of the
 * config; and the whole path allocates nothing.
 */
#include <math.h>

#include "nres_test.h"

#define BASE (10 * NRES_MSEC)

typedef struct {
  nres_bulkhead_t b;
  double capacity;
  nres_time_t base;
  double worst;       /* the slowest latency admitted in a phase, / base */
} model_t;

static void gradient_config(nres_bulkhead_config_t *c, uint32_t start) {
  nres_bulkhead_config_init(c);
  c->adaptive = NRES_ADAPTIVE_GRADIENT;
  c->limit = start;
  c->min_limit = 1;
  c->max_limit = 1000;
}

static nres_time_t latency(const model_t *m, uint32_t inflight) {
  double f = inflight > m->capacity ? inflight / m->capacity : 1;
  return (nres_time_t) ((double) m->base * f);
}

/* n completions: fill every slot the limit allows, then one ends with the
 * latency of the load it ran under. Tracks the worst latency in the last
 * `tail` completions. */
static void run(model_t *m, int n, int tail) {
  nres_bulkhead_stats_t st;

  m->worst = 0;
  for (int i = 0; i < n; i++) {
    while (nres_bulkhead_acquire(&m->b, 0) == 0) {
    }
    nres_bulkhead_stats(&m->b, &st);
    nres_time_t l = latency(m, st.inflight);
    if (i >= n - tail && (double) l / (double) m->base > m->worst)
      m->worst = (double) l / (double) m->base;
    nres_bulkhead_release(&m->b, l, NRES_OK);
  }
}

static uint32_t limit_of(model_t *m) { return nres_bulkhead_limit(&m->b); }

static double baseline_of(model_t *m) {
  nres_bulkhead_stats_t st;
  nres_bulkhead_stats(&m->b, &st);
  return st.baseline;
}

static void setup(model_t *m, uint32_t start, double capacity) {
  nres_bulkhead_config_t c;

  gradient_config(&c, start);
  assert_int_equal(nres_bulkhead_init(&m->b, &c), 0);
  m->capacity = capacity;
  m->base = BASE;
}

static void grows_to_the_knee_and_no_further(void **state) {
  model_t m;
  (void) state;

  setup(&m, 4, 20);
  run(&m, 20000, 5000);
  /* Equilibrium: latency = tolerance (1.5) x baseline plus the headroom:
   * limit ~ 1.5 * 20 + 4 = 34. */
  assert_true(limit_of(&m) >= 25);
  assert_true(limit_of(&m) <= 40);
  assert_true(m.worst <= 2.0);
  assert_true(fabs(baseline_of(&m) - (double) BASE) < 0.05 * BASE);
}

static void follows_a_capacity_drop_and_recovers(void **state) {
  model_t m;
  uint32_t before;
  (void) state;

  setup(&m, 4, 20);
  run(&m, 20000, 0);
  before = limit_of(&m);

  m.capacity = 10;                      /* half the servers */
  run(&m, 3000, 1000);
  assert_true(limit_of(&m) < before * 2 / 3);
  assert_true(m.worst <= 2.0);          /* admitted p100 <= 2x no-load */
  run(&m, 60000, 60000);                /* a long overload */
  assert_true(m.worst <= 2.0);
  assert_true(limit_of(&m) >= 10 && limit_of(&m) <= 22);
  /* The overload is not learnt as the new normal. */
  assert_true(baseline_of(&m) < 1.3 * BASE);

  m.capacity = 20;                      /* capacity is back */
  run(&m, 3000, 0);
  assert_true(limit_of(&m) >= 25);
}

static void learns_a_real_latency_step(void **state) {
  model_t m;
  uint32_t before, low = UINT32_MAX;
  (void) state;

  setup(&m, 4, 20);
  run(&m, 20000, 0);
  before = limit_of(&m);

  m.base = 4 * BASE;                    /* the dependency is 4x slower */
  for (int i = 0; i < 100; i++) {
    run(&m, 100, 0);
    if (limit_of(&m) < low)
      low = limit_of(&m);
  }
  assert_true(low < before / 2);        /* first taken as overload */
  run(&m, 100000, 0);
  /* ... then learnt: the baseline follows and the limit comes back. */
  assert_true(baseline_of(&m) > 2 * BASE);
  assert_true(limit_of(&m) >= 25);

  m.base = BASE;                        /* and back: learnt by the next probe */
  run(&m, 40000, 0);
  assert_true(baseline_of(&m) < 1.5 * BASE);
  assert_true(limit_of(&m) >= 25);
}

static void throttled_shrinks_permanent_says_nothing(void **state) {
  model_t m;
  uint32_t l0;
  (void) state;

  setup(&m, 4, 20);
  run(&m, 20000, 0);
  l0 = limit_of(&m);
  for (int i = 0; i < 500; i++) {
    while (nres_bulkhead_acquire(&m.b, 0) == 0) {
    }
    nres_bulkhead_release(&m.b, BASE, NRES_PERMANENT);
  }
  assert_int_equal(limit_of(&m), l0);
  for (int i = 0; i < 500; i++) {
    while (nres_bulkhead_acquire(&m.b, 0) == 0) {
    }
    nres_bulkhead_release(&m.b, BASE, NRES_THROTTLED);
  }
  assert_true(limit_of(&m) < l0 * 2 / 3);
}

static void app_limited_does_not_grow(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  gradient_config(&c, 10);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);
  /* One call at a time: never more than limit / 2 in flight. */
  for (int i = 0; i < 10000; i++) {
    assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
    nres_bulkhead_release(&b, BASE, NRES_OK);
  }
  assert_int_equal(nres_bulkhead_limit(&b), 10);
}

static void config_ranges(void **state) {
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  nres_bulkhead_config_init(&c);
  assert_true(c.tolerance == 1.5);
  assert_true(c.smoothing == 0.2);
  assert_int_equal(c.long_window, 600);
  assert_int_equal(c.headroom, 4);
  assert_true(c.reserve == 0);

  gradient_config(&c, 10);
  assert_int_equal(nres_bulkhead_init(&b, &c), 0);   /* no latency target */
  c.tolerance = 0.9;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  assert_string_equal(nres_bulkhead_config_error(&c),
                      "bulkhead.tolerance: must be >= 1");
  gradient_config(&c, 10);
  c.smoothing = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  c.smoothing = NAN;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  gradient_config(&c, 10);
  c.long_window = 0;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  gradient_config(&c, 10);
  c.min_limit = 11;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  gradient_config(&c, 10);
  c.reserve = 1;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
  c.reserve = -0.1;
  assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
}

static void no_allocation(void **state) {
  model_t m;
  (void) state;

  test_count_allocations();
  setup(&m, 4, 20);
  run(&m, 5000, 0);
  m.capacity = 5;
  run(&m, 5000, 0);
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(grows_to_the_knee_and_no_further),
    cmocka_unit_test(follows_a_capacity_drop_and_recovers),
    cmocka_unit_test(learns_a_real_latency_step),
    cmocka_unit_test(throttled_shrinks_permanent_says_nothing),
    cmocka_unit_test(app_limited_does_not_grow),
    cmocka_unit_test(config_ranges),
    cmocka_unit_test(no_allocation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

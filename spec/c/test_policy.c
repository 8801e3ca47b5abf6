/* test_policy.c - presets, build-time validation and counters of a policy.
 *
 * The presets must carry the documented defaults, nres_policy_build must
 * refuse every inconsistent configuration with NRES_EINVAL, and the
 * counters must read back what the executor recorded.
 */
#include <math.h>

#include "nres_test.h"

static void presets_carry_the_documented_defaults(void **state) {
  nres_policy_t p;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_NONE), 0);
  assert_int_equal(p.attempts, 1);
  assert_int_equal(p.telemetry, 0);
  assert_null(p.budget);
  assert_null(p.breaker);
  assert_int_equal(nres_policy_build(&p), 0);

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(p.attempts, 3);
  assert_int_equal(p.backoff.kind, NRES_BACKOFF_NONE);
  assert_true(p.deadline == 0 && p.attempt_timeout == 0);

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(p.attempts, 3);
  assert_int_equal(p.backoff.kind, NRES_BACKOFF_EXPONENTIAL);
  assert_int_equal(p.backoff.jitter, NRES_JITTER_FULL);
  assert_true(p.backoff.base == 100 * NRES_MSEC);
  assert_true(p.backoff.max == 30 * NRES_SEC);
  assert_true(p.backoff.throttled_base == 1 * NRES_SEC);
  assert_true(p.deadline == 30 * NRES_SEC);
  assert_true(p.attempt_timeout == 10 * NRES_SEC);
  assert_ptr_equal(p.budget, &p.own.budget);
  assert_true(p.budget->capacity == 30 * 1000000);
  assert_true(p.budget->deposit == 100000);
  assert_ptr_equal(p.breaker, &p.own.breaker);
  assert_int_equal(p.breaker->config.consecutive, 5);
  assert_true(p.ceiling_factor == 3 && p.ceiling_floor == 50 * NRES_MSEC);
  assert_int_equal(p.min_samples, 20);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_policy_init(&p, 99), NRES_EINVAL);
  assert_int_equal(nres_policy_init(NULL, NRES_PRESET_NONE), NRES_EINVAL);
}

static void build_refuses_inconsistent_configurations(void **state) {
  nres_policy_t p;
  (void) state;

#define REFUSED(mutation)                                                    \
  do {                                                                       \
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);          \
    mutation;                                                                \
    assert_int_equal(nres_policy_build(&p), NRES_EINVAL);                    \
  } while (0)

  REFUSED(p.attempts = 0);
  REFUSED(p.attempts = 70000);
  REFUSED(p.backoff.factor = 0.5);
  REFUSED(p.backoff.kind = 42);
  REFUSED(p.attempt_timeout = p.deadline + 1);
  REFUSED(p.ceiling_factor = -1);
  REFUSED(p.ceiling_factor = NAN);
  REFUSED(p.ceiling_quantile = 1.5);
  REFUSED(p.estimator = NULL);                         /* ceiling needs it */
  REFUSED(p.hedge.max = NRES_MAX_INFLIGHT + 1);
  REFUSED((p.hedge.max = 2, p.ceiling_factor = 0, p.estimator = NULL));
  REFUSED(p.hedge.suppress_ratio = 2);
  REFUSED((p.own.breaker.config.slow_ratio = 0.5, p.slow_factor = 0));
  REFUSED(p.slow_factor = -1; p.own.breaker.config.slow_ratio = 0.5);
#undef REFUSED
  assert_int_equal(nres_policy_build(NULL), NRES_EINVAL);
  /* The same fields, set right, are accepted. */
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.hedge.max = 2;
  p.own.breaker.config.slow_ratio = 0.5;
  assert_int_equal(nres_policy_build(&p), 0);
}

static void counters_sum_up_and_reset(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_counters_t c;
  nres_action_t a;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  for (int i = 0; i < 4; i++) {
    a = nres_call_begin(&call, &p, 0);
    a = nres_call_report(&call, a.slot, 0, nres_verdict(i % 2 ? NRES_OK : NRES_PERMANENT));
  }
  nres_policy_counters(&p, &c);
  assert_int_equal(c.calls, 4);
  assert_int_equal(c.attempts, 4);
  assert_int_equal(c.stops[NRES_STOP_OK], 2);
  assert_int_equal(c.stops[NRES_STOP_PERMANENT], 2);
  nres_policy_counters_reset(&p);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.calls, 0);
  assert_int_equal(c.verdicts[NRES_OK], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(presets_carry_the_documented_defaults),
    cmocka_unit_test(build_refuses_inconsistent_configurations),
    cmocka_unit_test(counters_sum_up_and_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

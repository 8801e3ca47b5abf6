/* SPDX-License-Identifier: MIT */
/* test_policy.c - presets, build-time validation and counters of a policy.
 *
 * The presets must carry the documented defaults, nres_policy_build must
 * refuse every inconsistent configuration with NRES_EINVAL and
 * nres_policy_error must name the field it refused, and the counters must
 * read back what the executor recorded.
 */
#include <math.h>
#include <string.h>

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
  /* The values of policies/default.lua (bench/tournament.lua chose them). */
  assert_int_equal(p.breaker->config.consecutive, 20);
  assert_true(p.breaker->config.failure_ratio == 0.9);
  assert_true(p.breaker->config.window == 100 * NRES_MSEC);
  assert_int_equal(p.breaker->config.buckets, 4);
  assert_int_equal(p.breaker->config.min_calls, 8);
  assert_true(p.breaker->config.break_for == 550 * NRES_MSEC);
  assert_true(p.breaker->config.break_max == 550 * NRES_MSEC);
  assert_true(p.ceiling_factor == 5 && p.ceiling_quantile == 0.99);
  assert_true(p.ceiling_floor == 250 * NRES_MSEC);
  assert_int_equal(p.min_samples, 100);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_policy_init(&p, 99), NRES_EINVAL);
  assert_int_equal(nres_policy_init(NULL, NRES_PRESET_NONE), NRES_EINVAL);
}

/* Each refusal names its field first, then the rule ("field: rule"). */
static void refused_naming(nres_policy_t *p, const char *why_prefix) {
  const char *why;

  assert_int_equal(nres_policy_build(p), NRES_EINVAL);
  why = nres_policy_error(p);
  assert_non_null(why);
  if (strncmp(why, why_prefix, strlen(why_prefix)) != 0)
    fail_msg("refused with \"%s\", expected \"%s...\"", why, why_prefix);
}

static void build_refuses_inconsistent_configurations(void **state) {
  nres_policy_t p;
  (void) state;

#define REFUSED(why, mutation)                                               \
  do {                                                                       \
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);          \
    mutation;                                                                \
    refused_naming(&p, why);                                                 \
  } while (0)

  REFUSED("attempts: ", p.attempts = 0);
  REFUSED("attempts: ", p.attempts = 70000);
  REFUSED("backoff.factor: ", p.backoff.factor = 0.5);
  REFUSED("backoff.factor: ", p.backoff.factor = NAN);
  REFUSED("backoff.kind: ", p.backoff.kind = 42);
  REFUSED("backoff.jitter: unknown", p.backoff.jitter = 9);
  REFUSED("backoff.max: below backoff.base", p.backoff.max = 1 * NRES_MSEC);
  REFUSED("backoff.jitter: must be NONE",
          p.backoff.kind = NRES_BACKOFF_DECORRELATED);
  REFUSED("attempt_timeout: exceeds deadline",
          p.attempt_timeout = p.deadline + 1);
  REFUSED("deadline: not a number", p.deadline = nres_time_from_sec(NAN));
  REFUSED("attempt_timeout: not a number",
          p.attempt_timeout = nres_time_from_sec(-1));
  REFUSED("ceiling_factor: ", p.ceiling_factor = -1);
  REFUSED("ceiling_factor: ", p.ceiling_factor = NAN);
  REFUSED("ceiling_quantile: ", p.ceiling_quantile = 1.5);
  REFUSED("estimator: needed by ceiling_factor", p.estimator = NULL);
  REFUSED("hedge.max: ", p.hedge.max = NRES_MAX_INFLIGHT + 1);
  REFUSED("estimator: needed by hedging",
          (p.hedge.max = 2, p.ceiling_factor = 0, p.estimator = NULL));
  REFUSED("hedge.quantile: ", (p.hedge.max = 2, p.hedge.quantile = 0));
  REFUSED("hedge.suppress_ratio: ", p.hedge.suppress_ratio = 2);
  REFUSED("hedge.window: ", (p.hedge.max = 2, p.hedge.window.width = 0));
  REFUSED("slow_factor: ",
          (p.own.breaker.config.slow_ratio = 0.5, p.slow_factor = 0));
  REFUSED("slow_factor: ",
          (p.slow_factor = -1, p.own.breaker.config.slow_ratio = 0.5));
  REFUSED("estimator: needed by breaker.slow_ratio",
          (p.own.breaker.config.slow_ratio = 0.5, p.ceiling_factor = 0,
           p.estimator = NULL));
  REFUSED("breaker.probes: ", p.own.breaker.config.probes = 0);
#undef REFUSED
  assert_int_equal(nres_policy_build(NULL), NRES_EINVAL);
  assert_non_null(nres_policy_error(NULL));
  /* The same fields, set right, are accepted, and nothing is refused. */
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.hedge.max = 2;
  p.own.breaker.config.slow_ratio = 0.5;
  assert_null(nres_policy_error(&p));
  assert_int_equal(nres_policy_build(&p), 0);
  /* An attempt timeout equal to the deadline is no conflict. */
  p.attempt_timeout = p.deadline;
  assert_null(nres_policy_error(&p));
  assert_int_equal(nres_policy_build(&p), 0);
}

/* README's "A policy in C": the DEFAULT preset with a 2 s deadline is
 * refused for its 10 s attempt timeout, and the error says so; with the
 * timeout lowered too it builds and runs. */
static nres_verdict_t answer_ok(void *arg, const nres_attempt_t *attempt) {
  (void) arg;
  assert_true(attempt->deadline != NRES_TIME_NEVER);
  return nres_verdict(NRES_OK);
}

static void readme_policy_needs_its_attempt_timeout_lowered(void **state) {
  nres_policy_t policy;
  nres_call_t call;
  (void) state;

  assert_int_equal(nres_policy_init(&policy, NRES_PRESET_DEFAULT), 0);
  policy.attempts = 4;
  policy.deadline = 2 * NRES_SEC;
  assert_int_equal(nres_policy_build(&policy), NRES_EINVAL);
  assert_string_equal(nres_policy_error(&policy),
                      "attempt_timeout: exceeds deadline");
  policy.attempt_timeout = 500 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&policy), 0);
  assert_int_equal(nres_run(&policy, answer_ok, NULL, &call), 0);
  assert_int_equal(call.attempts, 1);
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

/* A negative backoff.base wraps to a huge duration (-1 to
 * NRES_TIME_NEVER): the refusal names base, not the max it now exceeds. */
static void wrapped_negative_base_is_named(void **state) {
  nres_policy_t p;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.backoff.base = (nres_time_t) -1;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_non_null(strstr(nres_policy_error(&p), "backoff.base: "));
  p.backoff.base = (nres_time_t) -5 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_non_null(strstr(nres_policy_error(&p), "backoff.base: "));
  /* A base that is merely longer than max still blames max. */
  p.backoff.base = 60 * NRES_SEC;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_string_equal(nres_policy_error(&p), "backoff.max: below backoff.base");
}

/* An operator isolates the policy's breaker (every call stops "circuit
 * open") and resets it; both are counted. No breaker: EINVAL. */
static void isolate_and_reset_are_counted(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_counters_t c;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_policy_isolate(&p, 1), 0);
  assert_int_equal(nres_breaker_state(p.breaker, 0), NRES_BREAKER_ISOLATED);
  assert_int_equal(nres_call_begin(&call, &p, 0).stop, NRES_STOP_CIRCUIT);
  assert_int_equal(nres_policy_isolate(&p, 0), 0);
  assert_int_equal(nres_breaker_state(p.breaker, 0), NRES_BREAKER_CLOSED);
  assert_int_equal(nres_call_begin(&call, &p, 0).kind, NRES_ATTEMPT);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.isolations, 1);
  assert_int_equal(c.resets, 1);
  nres_policy_counters_reset(&p);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.isolations + c.resets, 0);

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_policy_isolate(&p, 1), NRES_EINVAL);
  assert_int_equal(nres_policy_isolate(NULL, 0), NRES_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(presets_carry_the_documented_defaults),
    cmocka_unit_test(build_refuses_inconsistent_configurations),
    cmocka_unit_test(readme_policy_needs_its_attempt_timeout_lowered),
    cmocka_unit_test(counters_sum_up_and_reset),
    cmocka_unit_test(isolate_and_reset_are_counted),
    cmocka_unit_test(wrapped_negative_base_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

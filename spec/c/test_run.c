/* SPDX-License-Identifier: MIT */
/* test_run.c - the sync driver, and the executor's zero-allocation promise.
 *
 * nres_run runs real attempts and real (short) sleeps; timing is only ever
 * checked as a lower bound. The allocation tests install a counting
 * allocator and push a million calls through each path - success, retries,
 * breaker rejections - plus thousands with real waits: not one byte may be
 * allocated once the policy is built.
 */
#include <string.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"

typedef struct {
  int calls;
  int fail_first;         /* transient verdicts before OK */
  int kind_after;         /* verdict after the failures */
  nres_attempt_t seen;    /* the last attempt's description */
} job_t;

static nres_verdict_t job_fn(void *arg, const nres_attempt_t *attempt) {
  job_t *job = arg;
  job->seen = *attempt;
  if (job->calls++ < job->fail_first)
    return nres_verdict(NRES_TRANSIENT);
  return nres_verdict(job->kind_after);
}

static nres_verdict_t retry_twice(void *arg, const nres_attempt_t *attempt) {
  (void) arg;
  return nres_verdict(attempt->number <= 2 ? NRES_TRANSIENT : NRES_OK);
}

static void succeeds_after_two_failures(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t job = { 0, 2, NRES_OK, { 0, 0, 0, 0 } };
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_run(&p, job_fn, &job, &call), 0);
  assert_int_equal(job.calls, 3);
  assert_int_equal(call.attempts, 3);
  assert_int_equal(job.seen.number, 3);
  assert_int_equal(call.stop, NRES_STOP_OK);
}

static void failures_return_the_stop_reason_code(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t always = { 0, 100, NRES_OK, { 0, 0, 0, 0 } };
  job_t perm = { 0, 0, NRES_PERMANENT, { 0, 0, 0, 0 } };
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_run(&p, job_fn, &always, &call), NRES_EATTEMPTS);
  assert_int_equal(always.calls, 3);
  assert_int_equal(nres_run(&p, job_fn, &perm, &call), NRES_EPERMANENT);
  assert_int_equal(perm.calls, 1);
}

static void misuse_never_calls_the_function(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t job = { 0, 0, NRES_OK, { 0, 0, 0, 0 } };
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_run(&p, job_fn, &job, &call), NRES_EINVAL); /* unbuilt */
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_run(NULL, job_fn, &job, &call), NRES_EINVAL);
  assert_int_equal(nres_run(&p, NULL, &job, &call), NRES_EINVAL);
  assert_int_equal(nres_run(&p, job_fn, &job, NULL), NRES_EINVAL);
  assert_int_equal(job.calls, 0);
}

static void attempt_learns_its_deadline_and_time_left(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t job = { 0, 0, NRES_OK, { 0, 0, 0, 0 } };
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.deadline = 2 * NRES_SEC;
  p.attempt_timeout = 300 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_run(&p, job_fn, &job, &call), 0);
  assert_true(job.seen.remaining > 0 && job.seen.remaining <= 300 * NRES_MSEC);
  assert_true(job.seen.deadline == call.start + 300 * NRES_MSEC);
}

/* Outlives its deadline, then says OK. */
static nres_verdict_t overrun(void *arg, const nres_attempt_t *attempt) {
  (void) arg;
  while (nres_clock_now() <= attempt->deadline)
    nres_step_sleep((double) NRES_MSEC);
  return nres_verdict(NRES_OK);
}

/* nres.h: a blocking driver cannot interrupt an attempt whose time is up;
 * the verdict it returns counts as given, even after the deadline. */
static void late_verdict_of_a_blocking_attempt_counts(void **state) {
  nres_policy_t p;
  nres_call_t call;
  const nres_attempt_rec_t *rec;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempt_timeout = 2 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(nres_run(&p, overrun, NULL, &call), 0);
  assert_int_equal(call.attempts, 1);
  rec = nres_call_log(&call, 0);
  assert_non_null(rec);
  assert_int_equal(rec->kind, NRES_OK);
  assert_int_equal(rec->flags, 0);
  assert_true(rec->end > call.slot[rec->slot].deadline);
}

static void backoff_really_sleeps(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t job = { 0, 2, NRES_OK, { 0, 0, 0, 0 } };
  nres_time_t t0;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.base = p.backoff.max = 5 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&p), 0);
  t0 = nres_clock_now();
  assert_int_equal(nres_run(&p, job_fn, &job, &call), 0);
  assert_true(nres_clock_now() - t0 >= 10 * NRES_MSEC);   /* lower bound */
  assert_true(nres_call_log(&call, 0)->start - nres_call_log(&call, 1)->end >=
              5 * NRES_MSEC);
}

static void passthrough_leaves_a_fully_described_call(void **state) {
  nres_policy_t p;
  nres_call_t call;
  job_t job = { 0, 0, NRES_OK, { 0, 0, 0, 0 } };
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_NONE), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  memset(&call, 0xaa, sizeof(call));
  assert_int_equal(nres_run(&p, job_fn, &job, &call), 0);
  assert_int_equal(call.attempts, 1);
  assert_int_equal(call.retries, 0);
  assert_int_equal(call.hedges, 0);
  assert_true(call.deadline == NRES_TIME_NEVER);
  assert_true(nres_call_remaining(&call, 5) == NRES_TIME_NEVER);
  assert_int_equal(nres_call_log(&call, 0)->number, 1);
  assert_int_equal(nres_call_log(&call, 0)->kind, NRES_OK);
  nres_policy_drain(&p, 1);
  assert_int_equal(nres_run(&p, job_fn, &job, &call), NRES_EDRAINING);
  assert_int_equal(job.calls, 1);
}

/* ----------------------------------------------------------- allocations */

static nres_verdict_t always_ok(void *arg, const nres_attempt_t *attempt) {
  (void) arg;
  (void) attempt;
  return nres_verdict(NRES_OK);
}

static void run_many(nres_policy_t *p, nres_attempt_fn fn, long n,
                     int expect) {
  nres_call_t call;
  for (long i = 0; i < n; i++)
    if (nres_run(p, fn, NULL, &call) != expect)
      fail_msg("call %ld ended with %s", i, nres_stop_name(call.stop));
}

static void million_calls_allocate_nothing(void **state) {
  static nres_policy_t none, trivial, deflt, rejecting, waiting;
  (void) state;

  assert_int_equal(nres_policy_init(&none, NRES_PRESET_NONE), 0);
  assert_int_equal(nres_policy_init(&trivial, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_init(&deflt, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_init(&rejecting, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_init(&waiting, NRES_PRESET_TRIVIAL), 0);
  waiting.backoff.kind = NRES_BACKOFF_EXPONENTIAL;
  waiting.backoff.jitter = NRES_JITTER_FULL;
  waiting.backoff.base = 2 * NRES_USEC;
  waiting.backoff.max = 10 * NRES_USEC;
  nres_breaker_isolate(rejecting.breaker);
  assert_int_equal(nres_policy_build(&none), 0);
  assert_int_equal(nres_policy_build(&trivial), 0);
  assert_int_equal(nres_policy_build(&deflt), 0);
  assert_int_equal(nres_policy_build(&rejecting), 0);
  assert_int_equal(nres_policy_build(&waiting), 0);

  test_count_allocations();
  test_arm_malloc_count(1);
  run_many(&none, always_ok, 1000000, 0);
  run_many(&deflt, always_ok, 1000000, 0);
  run_many(&trivial, retry_twice, 1000000, 0);
  run_many(&rejecting, always_ok, 1000000, NRES_ECIRCUIT);
  run_many(&waiting, retry_twice, 2000, 0);
  test_arm_malloc_count(0);
  assert_int_equal(atomic_load(&test_malloc_calls), 0);
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
  assert_int_equal(atomic_load(&test_alloc_bytes), 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(succeeds_after_two_failures),
    cmocka_unit_test(failures_return_the_stop_reason_code),
    cmocka_unit_test(misuse_never_calls_the_function),
    cmocka_unit_test(attempt_learns_its_deadline_and_time_left),
    cmocka_unit_test(late_verdict_of_a_blocking_attempt_counts),
    cmocka_unit_test(backoff_really_sleeps),
    cmocka_unit_test(passthrough_leaves_a_fully_described_call),
    cmocka_unit_test(million_calls_allocate_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_uv.c - the libuv driver: asynchronous attempts, timers, late
 * completions, hedges, cancellation, a clean close, and no allocation.
 *
 * Attempts are simulated with uv timers that complete them after a chosen
 * delay (or never), so everything runs on a real loop. Times are only
 * checked as lower bounds. Each test ends by closing the request and
 * proving the loop has nothing left (uv_loop_close returns 0).
 */
#include <string.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"
#include "nres/uv.h"

#define MAX_TIMERS 16

typedef struct {
  uv_loop_t loop;
  nres_uv_t req;
  nres_policy_t policy;
  /* behaviour: attempt n completes after delay_ms[n-1] (or at once if
   * negative... -1 = at once, -2 = never) with kind[n-1] */
  int delay_ms[8];
  int kind[8];
  /* observations */
  int attempts, abandoned, done, status, late_rejected;
  uint32_t tokens[8];
  uv_timer_t timers[MAX_TIMERS];
  uint32_t timer_token[MAX_TIMERS];
  int timers_used;
  nres_time_t started, ended;
} fixture_t;

static void complete_later(uv_timer_t *timer) {
  fixture_t *f = timer->data;
  int i = (int) (timer - f->timers);
  uint32_t token = f->timer_token[i];
  int n = (int) (token >> 2);   /* serial == attempt number in these tests */
  nres_verdict_t v = nres_verdict(f->kind[(n - 1) % 8]);
  if (nres_uv_complete(&f->req, token, v) == NRES_ECANCELED)
    f->late_rejected++;
}

static void on_attempt(nres_uv_t *req, uint32_t token,
                       const nres_attempt_t *attempt) {
  fixture_t *f = req->data;
  int n = (int) attempt->number;
  int delay = f->delay_ms[(n - 1) % 8];

  f->tokens[(n - 1) % 8] = token;
  f->attempts++;
  if (delay == -1) {
    nres_uv_complete(req, token, nres_verdict(f->kind[(n - 1) % 8]));
  } else if (delay >= 0) {
    int i = f->timers_used++;
    assert_true(i < MAX_TIMERS);
    uv_timer_init(&f->loop, &f->timers[i]);
    f->timers[i].data = f;
    f->timer_token[i] = token;
    uv_timer_start(&f->timers[i], complete_later, (uint64_t) delay, 0);
  }
}

static void on_abandon(nres_uv_t *req, uint32_t token) {
  fixture_t *f = req->data;
  (void) token;
  f->abandoned++;
}

static void on_done(nres_uv_t *req, int status) {
  fixture_t *f = req->data;
  f->done++;
  f->status = status;
  f->ended = uv_hrtime();
}

static fixture_t *setup(int preset) {
  fixture_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  assert_int_equal(nres_uv_init(&f->loop, &f->req), 0);
  f->req.data = f;
  assert_int_equal(nres_policy_init(&f->policy, preset), 0);
  for (int i = 0; i < 8; i++) {
    f->delay_ms[i] = -1;
    f->kind[i] = NRES_OK;
  }
  return f;
}

static void start(fixture_t *f) {
  assert_int_equal(nres_policy_build(&f->policy), 0);
  uv_update_time(&f->loop);   /* timers count from the loop's time */
  f->started = uv_hrtime();
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, on_abandon, on_done), 0);
}

static void close_timer(uv_handle_t *h) { (void) h; }

static void teardown(fixture_t *f) {
  nres_uv_close(&f->req, NULL);
  for (int i = 0; i < f->timers_used; i++)
    uv_close((uv_handle_t *) &f->timers[i], close_timer);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f);
}

static void async_attempt_completes_the_call(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  f->delay_ms[0] = 5;
  start(f);
  assert_int_equal(f->done, 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, 0);
  assert_int_equal(f->attempts, 1);
  /* The simulated attempt is a libuv timer, which counts from the loop's
   * time truncated to the millisecond: it may end up to 1 ms early. */
  assert_true(f->ended - f->started >= 4 * NRES_MSEC);
  teardown(f);
}

static void retries_wait_out_the_backoff_on_a_timer(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  f->policy.backoff.kind = NRES_BACKOFF_CONSTANT;
  f->policy.backoff.base = f->policy.backoff.max = 5 * NRES_MSEC;
  f->kind[0] = f->kind[1] = NRES_TRANSIENT;
  start(f);
  assert_int_equal(f->attempts, 1);   /* the first runs inside start */
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, 0);
  assert_int_equal(f->attempts, 3);
  assert_true(f->ended - f->started >= 10 * NRES_MSEC);
  teardown(f);
}

static void attempt_timeout_abandons_and_late_completion_is_ignored(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  nres_counters_t c;
  (void) state;

  f->policy.attempts = 2;
  f->policy.attempt_timeout = 10 * NRES_MSEC;
  f->delay_ms[0] = 40;   /* long after its 10 ms timeout */
  f->delay_ms[1] = 30;
  start(f);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, NRES_EATTEMPTS);
  assert_int_equal(f->attempts, 2);
  assert_int_equal(f->abandoned, 2);
  assert_int_equal(f->late_rejected, 2);
  assert_int_equal(f->req.late, 2);
  /* nres.h: a driver that can stop an attempt whose time is up abandons
   * it and reports it TRANSIENT with NRES_VF_TIMEOUT. */
  assert_int_equal(nres_call_log(&f->req.call, 0)->flags, NRES_VF_TIMEOUT);
  assert_int_equal(nres_call_log(&f->req.call, 0)->kind, NRES_TRANSIENT);
  assert_int_equal(nres_call_log(&f->req.call, 1)->kind, NRES_TRANSIENT);
  nres_policy_counters(&f->policy, &c);
  assert_int_equal(c.late, 2);
  assert_int_equal(c.verdicts[NRES_TRANSIENT], 2);
  teardown(f);
}

static void hedge_wins_and_loser_is_abandoned(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  f->policy.hedge.max = 2;
  f->policy.hedge.delay = 10 * NRES_MSEC;
  f->delay_ms[0] = 200;
  f->delay_ms[1] = 5;
  start(f);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, 0);
  assert_int_equal(f->attempts, 2);
  assert_int_equal(f->req.call.hedges, 1);
  assert_int_equal(f->abandoned, 1);
  assert_int_equal(f->late_rejected, 1);
  assert_true(f->ended - f->started < 200 * NRES_MSEC);
  teardown(f);
}

static void cancel_abandons_and_reports_canceled(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  f->delay_ms[0] = -2;   /* never completes */
  start(f);
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, on_abandon, on_done), NRES_EBUSY);
  assert_int_equal(nres_uv_cancel(&f->req), 0);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, NRES_ECANCELED);
  assert_int_equal(f->abandoned, 1);
  assert_int_equal(nres_uv_cancel(&f->req), NRES_ESTATE);
  assert_int_equal(nres_uv_complete(&f->req, f->tokens[0], nres_verdict(NRES_OK)),
                   NRES_ECANCELED);
  teardown(f);
}

static void refusal_is_reported_from_the_loop_not_from_start(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  nres_policy_drain(&f->policy, 1);
  start(f);
  assert_int_equal(f->done, 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, NRES_EDRAINING);
  assert_int_equal(f->attempts, 0);
  teardown(f);
}

static void misuse_is_refused_without_callbacks(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, on_abandon, on_done),
                   NRES_EINVAL);   /* policy not built */
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 NULL, on_abandon, on_done), NRES_EINVAL);
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, on_abandon, NULL), NRES_EINVAL);
  assert_int_equal(nres_uv_init(NULL, &f->req), NRES_EINVAL);
  uv_run(&f->loop, UV_RUN_NOWAIT);
  assert_int_equal(f->attempts + f->done, 0);
  teardown(f);
}

static void cancel_on_abandon(nres_uv_t *req, uint32_t token) {
  fixture_t *f = req->data;
  (void) token;
  f->abandoned++;
  nres_uv_cancel(req);
}

static void timeout_whose_abandon_cancels_ends_the_call_once(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  f->policy.attempt_timeout = 10 * NRES_MSEC;
  f->delay_ms[0] = -2;   /* never completes */
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, cancel_on_abandon, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  assert_int_equal(f->status, NRES_ECANCELED);
  assert_int_equal(f->attempts, 1);
  teardown(f);
}

static void closed_request_refuses_to_start(void **state) {
  fixture_t *f = setup(NRES_PRESET_TRIVIAL);
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  nres_uv_close(&f->req, NULL);
  nres_uv_close(&f->req, NULL);   /* twice: nothing */
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                 on_attempt, on_abandon, on_done), NRES_EINVAL);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f);
}

/* ----------------------------------------------------------- allocations */

static void *uv_count_malloc(size_t n) { return test_count_malloc(n); }
static void *uv_count_realloc(void *p, size_t n) { return test_count_realloc(p, n); }
static void *uv_count_calloc(size_t c, size_t n) { return test_count_calloc(c, n); }

static void run_calls(fixture_t *f, long n) {
  for (long i = 0; i < n; i++) {
    f->done = 0;
    assert_int_equal(nres_uv_start(&f->req, &f->policy, NRES_TIME_NEVER,
                                   on_attempt, on_abandon, on_done), 0);
    if (!f->done)
      uv_run(&f->loop, UV_RUN_DEFAULT);
    if (f->done != 1)
      fail_msg("call %ld did not end once", i);
  }
}

static void million_calls_allocate_nothing(void **state) {
  fixture_t *ok, *retry, *reject, *wait;
  (void) state;

  assert_int_equal(uv_replace_allocator(uv_count_malloc, uv_count_realloc,
                                        uv_count_calloc, test_count_free), 0);
  ok = setup(NRES_PRESET_DEFAULT);
  retry = setup(NRES_PRESET_TRIVIAL);
  retry->kind[0] = retry->kind[1] = NRES_TRANSIENT;
  reject = setup(NRES_PRESET_DEFAULT);
  nres_breaker_isolate(reject->policy.breaker);
  wait = setup(NRES_PRESET_TRIVIAL);
  wait->kind[0] = NRES_TRANSIENT;
  wait->policy.backoff.kind = NRES_BACKOFF_CONSTANT;
  wait->policy.backoff.base = wait->policy.backoff.max = 1 * NRES_USEC;
  assert_int_equal(nres_policy_build(&ok->policy), 0);
  assert_int_equal(nres_policy_build(&retry->policy), 0);
  assert_int_equal(nres_policy_build(&reject->policy), 0);
  assert_int_equal(nres_policy_build(&wait->policy), 0);

  test_count_allocations();
  test_arm_malloc_count(1);
  run_calls(ok, 1000000);
  run_calls(retry, 1000000);
  run_calls(reject, 300000);
  run_calls(wait, 2000);
  test_arm_malloc_count(0);
  assert_int_equal(reject->status, NRES_ECIRCUIT);
  assert_int_equal(retry->status, 0);
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
  assert_int_equal(atomic_load(&test_malloc_calls), 0);
  teardown(ok);
  teardown(retry);
  teardown(reject);
  teardown(wait);
  nres_replace_allocator(malloc, realloc, calloc, free);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(async_attempt_completes_the_call),
    cmocka_unit_test(retries_wait_out_the_backoff_on_a_timer),
    cmocka_unit_test(attempt_timeout_abandons_and_late_completion_is_ignored),
    cmocka_unit_test(hedge_wins_and_loser_is_abandoned),
    cmocka_unit_test(cancel_abandons_and_reports_canceled),
    cmocka_unit_test(refusal_is_reported_from_the_loop_not_from_start),
    cmocka_unit_test(misuse_is_refused_without_callbacks),
    cmocka_unit_test(timeout_whose_abandon_cancels_ends_the_call_once),
    cmocka_unit_test(closed_request_refuses_to_start),
    cmocka_unit_test(million_calls_allocate_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

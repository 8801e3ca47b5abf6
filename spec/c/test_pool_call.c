/* SPDX-License-Identifier: MIT */
/* test_pool_call.c - a policy wrapping a pool job.
 *
 * Attempts run on workers and the executor's state machine decides: a
 * call that fails twice then succeeds ends OK after 3 attempts and at
 * least two backoff delays (lower bound); the backoff holds no worker (on
 * a one-thread pool another job runs and finishes during it); permanent
 * failures stop at once; a cancel during the backoff ends the call
 * CANCELED; a pool closing during the backoff still delivers the end; a
 * call started from a loop ends on the loop thread. No allocation per
 * call in steady state.
 */
#include <string.h>
#include <time.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"
#include "nres/pool.h"

static void nap_us(long us) {
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  nanosleep(&ts, NULL);
}

#define WAIT_FOR(cond)                                                       \
  do {                                                                       \
    nres_time_t until_ = nres_clock_now() + 10 * NRES_SEC;                   \
    while (!(cond) && nres_clock_now() < until_)                             \
      nap_us(100);                                                           \
    assert_true(cond);                                                       \
  } while (0)

typedef struct {
  nres_pool_t *pool;
  int fail_first, kind_after;
  atomic_int attempts;
  int worker_ok;
  nres_time_t attempt_at[8];
  nres_job_t side;          /* submitted during the first backoff */
  nres_time_t side_done_at;
  atomic_int side_done;
  atomic_int done;
  int status;
  pthread_t loop_thread;
  int on_loop;
} ctx_t;

static int side_fn(nres_job_t *job) {
  ctx_t *c = job->arg;
  c->side_done_at = nres_clock_now();
  atomic_store(&c->side_done, 1);
  return 0;
}

static nres_verdict_t attempt_fn(void *arg, const nres_attempt_t *attempt) {
  ctx_t *c = arg;
  int n = atomic_fetch_add(&c->attempts, 1);
  c->attempt_at[n & 7] = nres_clock_now();
  c->worker_ok += nres_pool_worker(c->pool) >= 0;
  if (n == 0 && c->side.fn != NULL)
    nres_pool_submit(c->pool, &c->side);
  (void) attempt;
  return nres_verdict(n < c->fail_first ? NRES_TRANSIENT : c->kind_after);
}

static void done_cb(nres_pool_call_t *pc, int status) {
  ctx_t *c = pc->data;
  c->status = status;
  c->on_loop = pthread_equal(pthread_self(), c->loop_thread);
  atomic_store(&c->done, 1);
}

static void backoff_policy(nres_policy_t *p, nres_time_t base) {
  assert_int_equal(nres_policy_init(p, NRES_PRESET_TRIVIAL), 0);
  p->backoff.kind = NRES_BACKOFF_CONSTANT;
  p->backoff.jitter = NRES_JITTER_NONE;
  p->backoff.base = base;
  p->backoff.max = base;
  assert_int_equal(nres_policy_build(p), 0);
}

static nres_pool_t *new_pool(uint32_t threads) {
  nres_pool_t *pool = calloc(1, sizeof(*pool));
  nres_pool_options_t opt;
  nres_pool_options_init(&opt);
  opt.threads = threads;
  assert_int_equal(nres_pool_init(pool, &opt), 0);
  return pool;
}

static void retries_wait_without_holding_a_worker(void **state) {
  static ctx_t c;
  nres_pool_t *pool = new_pool(1);
  nres_policy_t policy;
  nres_pool_call_t pc;
  nres_time_t t0;
  (void) state;

  backoff_policy(&policy, 20 * NRES_MSEC);
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.fail_first = 2;
  c.kind_after = NRES_OK;
  nres_job_init(&c.side, side_fn, &c);
  pc.data = &c;
  t0 = nres_clock_now();
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        done_cb), 0);
  WAIT_FOR(atomic_load(&c.done));
  assert_int_equal(c.status, 0);
  assert_int_equal(atomic_load(&c.attempts), 3);
  assert_int_equal(c.worker_ok, 3);
  assert_int_equal(pc.call.attempts, 3);
  assert_int_equal(pc.call.stop, NRES_STOP_OK);
  assert_true(c.attempt_at[1] - c.attempt_at[0] >= 20 * NRES_MSEC);
  assert_true(c.attempt_at[2] - c.attempt_at[1] >= 20 * NRES_MSEC);
  assert_true(nres_clock_now() - t0 >= 40 * NRES_MSEC);
  /* The only worker was free during the backoff: the side job, queued
   * during attempt 1, ran before attempt 2. */
  assert_true(atomic_load(&c.side_done));
  assert_true(c.side_done_at < c.attempt_at[1]);
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

static void a_permanent_failure_stops_at_once(void **state) {
  static ctx_t c;
  nres_pool_t *pool = new_pool(2);
  nres_policy_t policy;
  nres_pool_call_t pc;
  (void) state;

  backoff_policy(&policy, NRES_MSEC);
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.kind_after = NRES_PERMANENT;
  pc.data = &c;
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        done_cb), 0);
  WAIT_FOR(atomic_load(&c.done));
  assert_int_equal(c.status, NRES_EPERMANENT);
  assert_int_equal(atomic_load(&c.attempts), 1);
  /* exhausted: 3 transient attempts */
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.fail_first = 100;
  pc.data = &c;
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        done_cb), 0);
  WAIT_FOR(atomic_load(&c.done));
  assert_int_equal(c.status, NRES_EATTEMPTS);
  assert_int_equal(atomic_load(&c.attempts), 3);
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

static void a_cancel_during_the_backoff_ends_the_call(void **state) {
  static ctx_t c;
  nres_pool_t *pool = new_pool(1);
  nres_policy_t policy;
  nres_pool_call_t pc;
  (void) state;

  backoff_policy(&policy, 30 * NRES_MSEC);
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.fail_first = 100;
  pc.data = &c;
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        done_cb), 0);
  WAIT_FOR(atomic_load(&c.attempts) >= 1);
  nres_pool_call_cancel(&pc);
  WAIT_FOR(atomic_load(&c.done));
  assert_int_equal(c.status, NRES_ECANCELED);
  assert_int_equal(atomic_load(&c.attempts), 1);
  assert_int_equal(pc.call.stop, NRES_STOP_CANCELED);
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

static void closing_the_pool_during_a_backoff_still_ends_the_call(
    void **state) {
  static ctx_t c;
  nres_pool_t *pool = new_pool(1);
  nres_policy_t policy;
  nres_pool_call_t pc;
  (void) state;

  backoff_policy(&policy, 60 * NRES_SEC);
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.fail_first = 100;
  pc.data = &c;
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        done_cb), 0);
  WAIT_FOR(atomic_load(&c.attempts) >= 1 && atomic_load(&pool->timer_next_) !=
                                  NRES_TIME_NEVER);
  /* Returns at once, not in a minute: the waiting step is canceled. */
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  assert_true(atomic_load(&c.done));
  assert_int_equal(c.status, NRES_ECANCELED);
  assert_int_equal(atomic_load(&c.attempts), 1);
  free(pool);
}

static void a_call_from_the_loop_ends_on_the_loop(void **state) {
  static ctx_t c;
  nres_pool_t *pool = new_pool(2);
  nres_policy_t policy;
  nres_pool_call_t pc;
  nres_pool_uv_t bridge;
  uv_loop_t loop;
  (void) state;

  backoff_policy(&policy, 5 * NRES_MSEC);
  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(nres_pool_uv_init(&loop, pool, &bridge), 0);
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.fail_first = 1;
  c.kind_after = NRES_OK;
  c.loop_thread = pthread_self();
  pc.data = &c;
  assert_int_equal(nres_pool_call_start_uv(&pc, &bridge, &policy, attempt_fn,
                                           &c, done_cb), 0);
  assert_false(atomic_load(&c.done));   /* never from inside start */
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_true(atomic_load(&c.done));
  assert_true(c.on_loop);
  assert_int_equal(c.status, 0);
  assert_int_equal(atomic_load(&c.attempts), 2);
  assert_int_equal(nres_pool_uv_close(&bridge, NULL), 0);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&loop), 0);
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

static void pool_call_misuse_is_refused(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_policy_t policy, unbuilt;
  nres_pool_call_t pc;
  ctx_t c;
  (void) state;

  backoff_policy(&policy, NRES_MSEC);
  nres_policy_init(&unbuilt, NRES_PRESET_TRIVIAL);
  assert_int_equal(nres_pool_call_start(&pc, pool, &unbuilt, attempt_fn, &c,
                                        done_cb), NRES_EINVAL);
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, NULL, &c,
                                        done_cb), NRES_EINVAL);
  assert_int_equal(nres_pool_call_start(&pc, pool, &policy, attempt_fn, &c,
                                        NULL), NRES_EINVAL);
  assert_int_equal(nres_pool_call_start(NULL, pool, &policy, attempt_fn, &c,
                                        done_cb), NRES_EINVAL);
  assert_int_equal(nres_pool_call_start_uv(&pc, NULL, &policy, attempt_fn, &c,
                                           done_cb), NRES_EINVAL);
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

/* ---------------------------------------------------------- allocations */

static atomic_int calls_done;
static nres_verdict_t retry_once(void *arg, const nres_attempt_t *attempt) {
  (void) arg;
  return nres_verdict(attempt->number < 2 ? NRES_TRANSIENT : NRES_OK);
}
static void count_done(nres_pool_call_t *pc, int status) {
  (void) pc;
  if (status == 0)
    atomic_fetch_add(&calls_done, 1);
}

static void pool_calls_allocate_nothing(void **state) {
  static nres_pool_call_t pcs[64];
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_policy_t policy;
  unsigned long before = 0;
  (void) state;

  test_count_allocations();
  nres_pool_options_init(&opt);
  opt.threads = 2;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  backoff_policy(&policy, 10 * NRES_USEC);
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      before = atomic_load(&test_alloc_calls);
      test_arm_malloc_count(1);
    }
    for (int batch = 0; batch < 50; batch++) {
      atomic_store(&calls_done, 0);
      for (int i = 0; i < 64; i++)
        assert_int_equal(nres_pool_call_start(&pcs[i], &pool, &policy,
                                              retry_once, NULL, count_done),
                         0);
      WAIT_FOR(atomic_load(&calls_done) == 64);
      /* the records are free once every callback returned */
      WAIT_FOR(atomic_load(&pcs[63].job_.state) == 0 &&
               atomic_load(&pcs[0].job_.state) == 0);
      for (int i = 0; i < 64; i++)
        WAIT_FOR(atomic_load(&pcs[i].job_.state) == 0);
    }
  }
  test_arm_malloc_count(0);
  assert_int_equal(atomic_load(&test_alloc_calls) - before, 0);
  if (TEST_MALLOC_INTERPOSED)
    assert_int_equal(atomic_load(&test_malloc_calls), 0);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(retries_wait_without_holding_a_worker),
    cmocka_unit_test(a_permanent_failure_stops_at_once),
    cmocka_unit_test(a_cancel_during_the_backoff_ends_the_call),
    cmocka_unit_test(closing_the_pool_during_a_backoff_still_ends_the_call),
    cmocka_unit_test(a_call_from_the_loop_ends_on_the_loop),
    cmocka_unit_test(pool_call_misuse_is_refused),
    cmocka_unit_test(pool_calls_allocate_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_pool_uv.c - pool jobs completing on a libuv loop.
 *
 * Jobs submitted through the bridge run on workers and call back on the
 * loop thread, each exactly once; a callback may submit again (a chain
 * driven from the loop); gate jobs too; the loop exits by itself once
 * nothing is in flight (the async handle is unreferenced when idle), and
 * each test ends proving the loop closes cleanly (uv_loop_close returns
 * 0). No allocation per job once warmed up.
 */
#include <string.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"
#include "nres/pool.h"

typedef struct {
  uv_loop_t loop;
  nres_pool_t pool;
  nres_pool_uv_t bridge;
  pthread_t loop_thread;
  int callbacks, wrong_thread, closed;
  int chain_left;
  atomic_int ran;
} fixture_t;

static fixture_t *setup(uint32_t threads) {
  fixture_t *f = calloc(1, sizeof(*f));
  nres_pool_options_t opt;
  nres_pool_options_init(&opt);
  opt.threads = threads;
  assert_int_equal(uv_loop_init(&f->loop), 0);
  assert_int_equal(nres_pool_init(&f->pool, &opt), 0);
  assert_int_equal(nres_pool_uv_init(&f->loop, &f->pool, &f->bridge), 0);
  f->bridge.data = f;
  f->loop_thread = pthread_self();
  return f;
}

static void on_closed(nres_pool_uv_t *bridge) {
  ((fixture_t *) bridge->data)->closed = 1;
}

static void teardown(fixture_t *f) {
  assert_int_equal(nres_pool_uv_close(&f->bridge, on_closed), 0);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->closed, 1);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  assert_int_equal(nres_pool_close(&f->pool, NRES_POOL_DRAIN), 0);
  free(f);
}

static int work_fn(nres_job_t *job) {
  fixture_t *f = job->arg;
  atomic_fetch_add(&f->ran, 1);
  return nres_pool_worker(&f->pool) >= 0 ? 0 : -1;   /* ran on a worker */
}

static void count_cb(nres_job_t *job) {
  fixture_t *f = job->arg;
  f->callbacks++;
  if (!pthread_equal(pthread_self(), f->loop_thread))
    f->wrong_thread++;
  assert_int_equal(nres_job_status(job), NRES_JOB_OK);
}

static void completions_arrive_on_the_loop_thread(void **state) {
  enum { N = 2000 };
  fixture_t *f = setup(2);
  nres_job_t *jobs = calloc(N, sizeof(*jobs));
  (void) state;

  for (int i = 0; i < N; i++) {
    nres_job_init(&jobs[i], work_fn, f);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_uv_submit(&f->bridge, &jobs[i]), 0);
  }
  /* Returns once every completion was delivered: nothing else is alive. */
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->callbacks, N);
  assert_int_equal(f->wrong_thread, 0);
  assert_int_equal(f->bridge.completed, N);
  assert_int_equal(atomic_load(&f->ran), N);
  teardown(f);
  free(jobs);
}

static void chain_cb(nres_job_t *job) {
  fixture_t *f = job->arg;
  f->callbacks++;
  if (--f->chain_left > 0)
    assert_int_equal(nres_pool_uv_submit(&f->bridge, job), 0);
}

static void a_callback_may_submit_again(void **state) {
  fixture_t *f = setup(2);
  nres_job_t job;
  (void) state;

  f->chain_left = 500;
  nres_job_init(&job, work_fn, f);
  job.done_cb = chain_cb;
  assert_int_equal(nres_pool_uv_submit(&f->bridge, &job), 0);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->callbacks, 500);
  assert_int_equal(atomic_load(&f->ran), 500);
  teardown(f);
}

static void gate_jobs_can_complete_on_the_loop(void **state) {
  fixture_t *f = setup(2);
  nres_gate_t gate;
  nres_job_t jobs[50];
  (void) state;

  nres_gate_init(&gate, &f->pool);
  for (int i = 0; i < 50; i++) {
    nres_job_init(&jobs[i], work_fn, f);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_uv_gate_add(&f->bridge, &gate, &jobs[i]), 0);
  }
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->callbacks, 50);
  /* Every callback ran: the gate is released and done. */
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_OK), 50);
  assert_int_equal(atomic_load(&gate.released_), 50);
  nres_gate_close(&gate);
  teardown(f);
}

static void bridge_misuse_is_refused(void **state) {
  fixture_t *f = setup(1);
  nres_job_t job;
  nres_pool_uv_t other;
  (void) state;

  assert_int_equal(nres_pool_uv_init(NULL, &f->pool, &other), NRES_EINVAL);
  assert_int_equal(nres_pool_uv_init(&f->loop, NULL, &other), NRES_EINVAL);
  nres_job_init(&job, work_fn, f);
  /* no done_cb: nothing would ever report it */
  assert_int_equal(nres_pool_uv_submit(&f->bridge, &job), NRES_EINVAL);
  job.done_cb = count_cb;
  assert_int_equal(nres_pool_uv_submit(&f->bridge, &job), 0);
  /* in flight: the bridge cannot close yet */
  assert_int_equal(nres_pool_uv_close(&f->bridge, NULL), NRES_EBUSY);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->callbacks, 1);
  teardown(f);
}

static void the_bridge_allocates_nothing_per_job(void **state) {
  fixture_t *f;
  nres_job_t job;
  unsigned long before;
  (void) state;

  test_count_allocations();
  f = setup(2);
  f->chain_left = 1000;   /* warm-up */
  nres_job_init(&job, work_fn, f);
  job.done_cb = chain_cb;
  assert_int_equal(nres_pool_uv_submit(&f->bridge, &job), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  before = atomic_load(&test_alloc_calls);
  test_arm_malloc_count(1);
  f->chain_left = 20000;
  assert_int_equal(nres_pool_uv_submit(&f->bridge, &job), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  test_arm_malloc_count(0);
  assert_int_equal(f->callbacks, 21000);
  assert_int_equal(atomic_load(&test_alloc_calls) - before, 0);
  if (TEST_MALLOC_INTERPOSED)
    assert_int_equal(atomic_load(&test_malloc_calls), 0);
  teardown(f);
  nres_replace_allocator(malloc, realloc, calloc, free);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(completions_arrive_on_the_loop_thread),
    cmocka_unit_test(a_callback_may_submit_again),
    cmocka_unit_test(gate_jobs_can_complete_on_the_loop),
    cmocka_unit_test(bridge_misuse_is_refused),
    cmocka_unit_test(the_bridge_allocates_nothing_per_job),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_gate.c - fan-out/join: all, the first K, a timeout, a cancel.
 *
 * Each job's outcome is checked (OK, ERROR, TIMEOUT, CANCELED), that jobs
 * the gate gave up on never run when still queued and can see it when
 * running, that a fan-out nested inside a job of a one-thread pool cannot
 * deadlock it (the waiting worker helps), the parallel-for, and misuse.
 * Times only as lower bounds; every wait for a stuck job is bounded.
 */
#include <string.h>
#include <time.h>

#include "nres_test.h"
#include "nres/pool.h"

static void nap_us(long us) {
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  nanosleep(&ts, NULL);
}

static nres_pool_t *new_pool(uint32_t threads) {
  nres_pool_t *pool = calloc(1, sizeof(*pool));
  nres_pool_options_t opt;
  nres_pool_options_init(&opt);
  opt.threads = threads;
  assert_int_equal(nres_pool_init(pool, &opt), 0);
  return pool;
}

static void free_pool(nres_pool_t *pool) {
  assert_int_equal(nres_pool_close(pool, NRES_POOL_DRAIN), 0);
  free(pool);
}

static atomic_int ran;

static int ok_fn(nres_job_t *job) {
  (void) job;
  atomic_fetch_add(&ran, 1);
  return 0;
}

static int err_fn(nres_job_t *job) {
  (void) job;
  atomic_fetch_add(&ran, 1);
  return -5;
}

/* Runs until the gate no longer wants it (bounded: 10 s). */
static atomic_int saw_cancel;
static int stubborn_fn(nres_job_t *job) {
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  (void) job;
  atomic_fetch_add(&ran, 1);
  while (!nres_job_canceled(job) && nres_clock_now() < until)
    nap_us(100);
  if (nres_job_canceled(job))
    atomic_fetch_add(&saw_cancel, 1);
  return 0;
}

static void wait_all_gives_every_outcome(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t jobs[100];
  (void) state;

  atomic_store(&ran, 0);
  assert_int_equal(nres_gate_init(&gate, pool), 0);
  for (int i = 0; i < 100; i++) {
    nres_job_init(&jobs[i], i % 10 == 0 ? err_fn : ok_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &jobs[i]), 0);
  }
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), 0);
  nres_gate_close(&gate);
  assert_int_equal(atomic_load(&ran), 100);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_OK), 90);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_ERROR), 10);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_PENDING), 0);
  for (int i = 0; i < 100; i++) {
    assert_int_equal(nres_job_status(&jobs[i]),
                     i % 10 == 0 ? NRES_JOB_ERROR : NRES_JOB_OK);
    assert_int_equal(jobs[i].result, i % 10 == 0 ? -5 : 0);
  }
  free_pool(pool);
}

static void the_first_k_cancel_the_rest(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t jobs[10];
  (void) state;

  atomic_store(&ran, 0);
  atomic_store(&saw_cancel, 0);
  nres_gate_init(&gate, pool);
  /* The shared queue is FIFO: the three quick ones start first. */
  for (int i = 0; i < 10; i++) {
    nres_job_init(&jobs[i], i < 3 ? ok_fn : stubborn_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &jobs[i]), 0);
  }
  assert_int_equal(nres_gate_wait(&gate, 3, NRES_TIME_NEVER), 0);
  nres_gate_close(&gate);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_OK), 3);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_CANCELED), 7);
  /* Those running saw it and stopped; those queued never ran. */
  assert_int_equal(atomic_load(&saw_cancel), atomic_load(&ran) - 3);
  assert_true(atomic_load(&ran) - 3 <= 2);
  free_pool(pool);
}

static void a_timeout_ends_the_wait_and_marks_the_rest(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t jobs[5];
  nres_time_t t0;
  (void) state;

  atomic_store(&ran, 0);
  atomic_store(&saw_cancel, 0);
  nres_gate_init(&gate, pool);
  nres_job_init(&jobs[0], ok_fn, NULL);
  assert_int_equal(nres_gate_add(&gate, &jobs[0]), 0);
  for (int i = 1; i < 5; i++) {
    nres_job_init(&jobs[i], stubborn_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &jobs[i]), 0);
  }
  t0 = nres_clock_now();
  assert_int_equal(nres_gate_wait(&gate, 0, 20 * NRES_MSEC), NRES_ETIMEDOUT);
  assert_true(nres_clock_now() - t0 >= 20 * NRES_MSEC);
  nres_gate_close(&gate);
  assert_int_equal(nres_job_status(&jobs[0]), NRES_JOB_OK);
  for (int i = 1; i < 5; i++)
    assert_int_equal(nres_job_status(&jobs[i]), NRES_JOB_TIMEOUT);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_TIMEOUT), 4);
  assert_int_equal(atomic_load(&saw_cancel), atomic_load(&ran) - 1);
  free_pool(pool);
}

static void *cancel_later(void *arg) {
  nap_us(10000);
  nres_gate_cancel(arg);
  return NULL;
}

static void a_cancel_from_another_thread_ends_the_wait(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t jobs[4];
  pthread_t t;
  (void) state;

  atomic_store(&saw_cancel, 0);
  atomic_store(&ran, 0);
  nres_gate_init(&gate, pool);
  for (int i = 0; i < 4; i++) {
    nres_job_init(&jobs[i], stubborn_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &jobs[i]), 0);
  }
  assert_int_equal(pthread_create(&t, NULL, cancel_later, &gate), 0);
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), NRES_ECANCELED);
  pthread_join(t, NULL);
  nres_gate_close(&gate);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_CANCELED), 4);
  assert_int_equal(atomic_load(&saw_cancel), atomic_load(&ran));
  /* Added after the stop: ends CANCELED without running. */
  nres_job_t late;
  atomic_store(&ran, 0);
  nres_job_init(&late, ok_fn, NULL);
  assert_int_equal(nres_gate_add(&gate, &late), 0);
  nres_gate_close(&gate);
  assert_int_equal(nres_job_status(&late), NRES_JOB_CANCELED);
  assert_int_equal(atomic_load(&ran), 0);
  free_pool(pool);
}

static void too_few_successes_is_permanent(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t jobs[5];
  (void) state;

  nres_gate_init(&gate, pool);
  for (int i = 0; i < 5; i++) {
    nres_job_init(&jobs[i], i == 0 ? ok_fn : err_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &jobs[i]), 0);
  }
  assert_int_equal(nres_gate_wait(&gate, 2, NRES_TIME_NEVER), NRES_EPERMANENT);
  nres_gate_close(&gate);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_OK), 1);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_ERROR), 4);
  free_pool(pool);
}

/* ------------------------------------------------ nested, one thread */

typedef struct {
  nres_pool_t *pool;
  nres_job_t inner[100];
  int rc;
  atomic_int inner_ran;
} nest_t;

static int inner_fn(nres_job_t *job) {
  nest_t *n = job->arg;
  atomic_fetch_add(&n->inner_ran, 1);
  return 0;
}

static int outer_fn(nres_job_t *job) {
  nest_t *n = job->arg;
  nres_gate_t gate;
  nres_gate_init(&gate, n->pool);
  for (int i = 0; i < 100; i++) {
    nres_job_init(&n->inner[i], inner_fn, n);
    if (nres_gate_add(&gate, &n->inner[i]) != 0)
      return -1;
  }
  /* The only worker waits: it must run the inner jobs itself. */
  n->rc = nres_gate_wait(&gate, 0, NRES_TIME_NEVER);
  nres_gate_close(&gate);
  return n->rc;
}

static void a_nested_fan_out_on_one_thread_does_not_deadlock(void **state) {
  static nest_t n;
  nres_pool_t *pool = new_pool(1);
  nres_job_t outer;
  (void) state;

  memset(&n, 0, sizeof(n));
  n.pool = pool;
  nres_job_init(&outer, outer_fn, &n);
  assert_int_equal(nres_pool_submit(pool, &outer), 0);
  free_pool(pool);
  assert_int_equal(nres_job_status(&outer), NRES_JOB_OK);
  assert_int_equal(atomic_load(&n.inner_ran), 100);
}

/* Stages: each job of the gate adds the next stage's job to it. */
static int stage_fn(nres_job_t *job) {
  nres_job_t *next = job->data;
  atomic_fetch_add(&ran, 1);
  if (next != NULL)
    return nres_gate_add(job->gate, next);
  return 0;
}

static void jobs_of_a_gate_can_add_to_it(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_gate_t gate;
  nres_job_t first[50], second[50];
  (void) state;

  atomic_store(&ran, 0);
  nres_gate_init(&gate, pool);
  for (int i = 0; i < 50; i++) {
    nres_job_init(&second[i], stage_fn, NULL);
    nres_job_init(&first[i], stage_fn, NULL);
    first[i].data = &second[i];
    assert_int_equal(nres_gate_add(&gate, &first[i]), 0);
  }
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), 0);
  /* Settled once all 100 ran: the second stage was waited for too. */
  assert_int_equal(atomic_load(&ran), 100);
  nres_gate_close(&gate);
  assert_int_equal(nres_gate_count(&gate, NRES_JOB_OK), 100);
  free_pool(pool);
}

/* ---------------------------------------------------------- parallel for */

typedef struct {
  nres_pool_t *pool;
  atomic_uchar *hits;
  atomic_ulong sum;
} for_t;

static void for_body(void *arg, uint64_t i) {
  for_t *f = arg;
  atomic_fetch_add(&f->hits[i], 1);
  atomic_fetch_add(&f->sum, i);
}

static void inner_for(void *arg, uint64_t i) {
  for_t *f = arg;
  (void) i;
  /* A parallel-for inside a parallel-for, on the pool's own workers. */
  assert_int_equal(nres_pool_for(f->pool, 100, for_body, f), 0);
}

static void parallel_for_visits_each_index_once(void **state) {
  enum { N = 200000 };
  nres_pool_t *pool = new_pool(2);
  for_t f;
  (void) state;

  f.pool = pool;
  f.hits = calloc(N, 1);
  atomic_init(&f.sum, 0);
  assert_int_equal(nres_pool_for(pool, N, for_body, &f), 0);
  for (int i = 0; i < N; i++)
    assert_int_equal(atomic_load(&f.hits[i]), 1);
  assert_int_equal(atomic_load(&f.sum), (unsigned long) N * (N - 1) / 2);

  memset(f.hits, 0, N);
  atomic_store(&f.sum, 0);
  assert_int_equal(nres_pool_for(pool, 50, inner_for, &f), 0);
  for (int i = 0; i < 100; i++)
    assert_int_equal(atomic_load(&f.hits[i]), 50);
  assert_int_equal(nres_pool_for(pool, 0, for_body, &f), 0);
  assert_int_equal(nres_pool_for(pool, 10, NULL, &f), NRES_EINVAL);
  assert_int_equal(nres_pool_for(NULL, 10, for_body, &f), NRES_EINVAL);
  free(f.hits);
  free_pool(pool);
}

static void gate_misuse_is_refused(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_gate_t gate;
  nres_job_t job;
  (void) state;

  assert_int_equal(nres_gate_init(NULL, pool), NRES_EINVAL);
  assert_int_equal(nres_gate_init(&gate, NULL), NRES_EINVAL);
  nres_gate_init(&gate, pool);
  memset(&job, 0, sizeof(job));
  assert_int_equal(nres_gate_add(&gate, &job), NRES_EINVAL);
  assert_int_equal(nres_gate_add(&gate, NULL), NRES_EINVAL);
  assert_int_equal(nres_gate_wait(NULL, 0, 0), NRES_EINVAL);
  /* An empty gate is done at once. */
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), 0);
  nres_gate_close(&gate);
  nres_gate_cancel(NULL);
  nres_gate_close(NULL);
  free_pool(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(wait_all_gives_every_outcome),
    cmocka_unit_test(the_first_k_cancel_the_rest),
    cmocka_unit_test(a_timeout_ends_the_wait_and_marks_the_rest),
    cmocka_unit_test(a_cancel_from_another_thread_ends_the_wait),
    cmocka_unit_test(too_few_successes_is_permanent),
    cmocka_unit_test(a_nested_fan_out_on_one_thread_does_not_deadlock),
    cmocka_unit_test(jobs_of_a_gate_can_add_to_it),
    cmocka_unit_test(parallel_for_visits_each_index_once),
    cmocka_unit_test(gate_misuse_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

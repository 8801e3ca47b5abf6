/* SPDX-License-Identifier: MIT */
/* test_pool.c - the work pool: every job runs exactly once, where it should.
 *
 * Completion guarantees (every submitted job's fn and done_cb run once),
 * the local queue (a chain of jobs each submitting the next stays on one
 * worker and wakes nobody), stealing (jobs queued behind a blocked worker
 * are taken by another), 1,000,000 submissions from 4 threads with none
 * lost or duplicated (100,000 under TSan, which is ~20x slower), delayed
 * jobs (never early, holding no thread), shutdown with jobs in flight
 * (drain or cancel: every completion still runs, every byte is freed),
 * idle workers parked, misuse, no allocation per job in steady state, and
 * admission by expected wait (max_wait: decided on counts, with a service
 * time so long that the few ms the test takes cannot change a decision).
 * Times are only checked as lower bounds; waits for the pool are bounded
 * (10 s) so a bug fails a test instead of hanging it.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"
#include "nres/pool.h"

#if defined(__SANITIZE_THREAD__)
# define MILLION 100000u   /* TSan runs ~20x slower: a tenth */
#else
# define MILLION 1000000u
#endif

static void nap_us(long us) {
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  nanosleep(&ts, NULL);
}

/* Poll `cond` for up to 10 s. */
#define WAIT_FOR(cond)                                                       \
  do {                                                                       \
    nres_time_t until_ = nres_clock_now() + 10 * NRES_SEC;                   \
    while (!(cond) && nres_clock_now() < until_)                             \
      nap_us(100);                                                           \
    assert_true(cond);                                                       \
  } while (0)

static nres_pool_t *new_pool(uint32_t threads) {
  nres_pool_t *pool = calloc(1, sizeof(*pool));
  nres_pool_options_t opt;
  nres_pool_options_init(&opt);
  opt.threads = threads;
  assert_int_equal(nres_pool_init(pool, &opt), 0);
  return pool;
}

static void free_pool(nres_pool_t *pool, int how) {
  assert_int_equal(nres_pool_close(pool, how), 0);
  free(pool);
}

static int all_parked(nres_pool_t *pool) {
  return atomic_load(&pool->sleepers_) == pool->threads;
}

/* ------------------------------------------------------------- counting */

static atomic_uint ran, called;

static int count_fn(nres_job_t *job) {
  atomic_fetch_add(&ran, 1);
  atomic_fetch_add((atomic_uint *) job->arg, 1);
  return 0;
}

static void count_cb(nres_job_t *job) {
  (void) job;
  atomic_fetch_add(&called, 1);
}

static void every_job_runs_once_and_calls_back_once(void **state) {
  enum { N = 20000 };
  nres_pool_t *pool = new_pool(2);
  nres_job_t *jobs = calloc(N, sizeof(*jobs));
  atomic_uint *hits = calloc(N, sizeof(*hits));
  nres_pool_stats_t st;
  (void) state;

  atomic_store(&ran, 0);
  atomic_store(&called, 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(nres_job_init(&jobs[i], count_fn, &hits[i]), 0);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_submit(pool, &jobs[i]), 0);
  }
  WAIT_FOR(atomic_load(&called) == N);
  for (int i = 0; i < N; i++) {
    assert_int_equal(atomic_load(&hits[i]), 1);
    assert_int_equal(nres_job_status(&jobs[i]), NRES_JOB_OK);
    assert_true(jobs[i].worker < 2);
  }
  nres_pool_stats(pool, &st);
  assert_int_equal(st.executed, N);
  assert_int_equal(st.submitted, N);
  assert_int_equal(st.injected, N);
  free_pool(pool, NRES_POOL_DRAIN);
  assert_int_equal(atomic_load(&ran), N);
  free(jobs);
  free(hits);
}

static int fail_fn(nres_job_t *job) {
  (void) job;
  return NRES_ETIMEDOUT;
}

static void a_failing_job_keeps_its_error(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_job_t job;
  (void) state;

  nres_job_init(&job, fail_fn, NULL);
  assert_int_equal(nres_pool_submit(pool, &job), 0);
  free_pool(pool, NRES_POOL_DRAIN);   /* drains: the job has run */
  assert_int_equal(nres_job_status(&job), NRES_JOB_ERROR);
  assert_int_equal(job.result, NRES_ETIMEDOUT);
  assert_string_equal(nres_job_status_name(NRES_JOB_ERROR), "error");
  assert_string_equal(nres_job_status_name(99), "unknown");
}

/* ---------------------------------------------------- the local queue */

typedef struct {
  nres_pool_t *pool;
  nres_job_t *jobs;
  int n;
  int worker[1000];
  atomic_int done;
} chain_t;

static int chain_fn(nres_job_t *job) {
  chain_t *c = job->arg;
  int i = (int) (job - c->jobs);
  c->worker[i] = nres_pool_worker(c->pool);
  if (i + 1 < c->n)
    assert_int_equal(nres_pool_submit(c->pool, &c->jobs[i + 1]), 0);
  else
    atomic_store(&c->done, 1);
  return 0;
}

/* Regression guard: a job submitted from a worker must run on that worker
 * and must not wake a parked one (the chain would bounce between cores). */
static void a_chain_stays_on_its_worker_and_wakes_nobody(void **state) {
  static chain_t c;
  nres_pool_t *pool = new_pool(2);
  nres_pool_stats_t before, after;
  (void) state;

  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.n = 1000;
  c.jobs = calloc((size_t) c.n, sizeof(nres_job_t));
  for (int i = 0; i < c.n; i++)
    nres_job_init(&c.jobs[i], chain_fn, &c);
  WAIT_FOR(all_parked(pool));
  nres_pool_stats(pool, &before);
  assert_int_equal(nres_pool_submit(pool, &c.jobs[0]), 0);
  WAIT_FOR(atomic_load(&c.done));
  nres_pool_stats(pool, &after);
  for (int i = 1; i < c.n; i++)
    assert_int_equal(c.worker[i], c.worker[0]);
  assert_int_equal(after.wakes - before.wakes, 1);   /* the first submit */
  assert_int_equal(after.local - before.local, c.n - 1);
  assert_int_equal(after.stolen - before.stolen, 0);
  free_pool(pool, NRES_POOL_DRAIN);
  free(c.jobs);
}

/* ------------------------------------------------------------- stealing */

typedef struct {
  nres_pool_t *pool;
  nres_job_t parent, child[8];
  int parent_worker;
  int child_worker[8];
  atomic_int children_done;
} steal_t;

static int child_fn(nres_job_t *job) {
  steal_t *s = job->arg;
  s->child_worker[job - s->child] = nres_pool_worker(s->pool);
  atomic_fetch_add(&s->children_done, 1);
  return 0;
}

static int parent_fn(nres_job_t *job) {
  steal_t *s = job->arg;
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  s->parent_worker = nres_pool_worker(s->pool);
  for (int i = 0; i < 8; i++)
    assert_int_equal(nres_pool_submit(s->pool, &s->child[i]), 0);
  /* Block this worker: the children sit in its own queue, so only a
   * thief can run them. */
  while (atomic_load(&s->children_done) < 8 && nres_clock_now() < until)
    nap_us(50);
  return 0;
}

static void jobs_behind_a_blocked_worker_are_stolen(void **state) {
  static steal_t s;
  nres_pool_t *pool = new_pool(2);
  nres_pool_stats_t st;
  (void) state;

  memset(&s, 0, sizeof(s));
  s.pool = pool;
  nres_job_init(&s.parent, parent_fn, &s);
  for (int i = 0; i < 8; i++)
    nres_job_init(&s.child[i], child_fn, &s);
  assert_int_equal(nres_pool_submit(pool, &s.parent), 0);
  /* Regression: closing at once used to let the idle worker exit before
   * the parent queued its children (seen under TSan); then only the
   * blocked parent's worker was left to run them. DRAIN now lets every
   * job end before any worker stops. */
  free_pool(pool, NRES_POOL_DRAIN);
  assert_int_equal(atomic_load(&s.children_done), 8);
  for (int i = 0; i < 8; i++)
    assert_int_not_equal(s.child_worker[i], s.parent_worker);
  (void) st;
}

static void stealing_is_counted(void **state) {
  static steal_t s;
  nres_pool_t *pool = new_pool(2);
  nres_pool_stats_t st;
  (void) state;

  memset(&s, 0, sizeof(s));
  s.pool = pool;
  nres_job_init(&s.parent, parent_fn, &s);
  for (int i = 0; i < 8; i++)
    nres_job_init(&s.child[i], child_fn, &s);
  assert_int_equal(nres_pool_submit(pool, &s.parent), 0);
  WAIT_FOR(atomic_load(&s.children_done) == 8);
  nres_pool_stats(pool, &st);
  assert_true(st.stolen >= 8);
  assert_int_equal(st.local, 8);
  free_pool(pool, NRES_POOL_DRAIN);
}

/* ----------------------------------------- a million from four threads */

static atomic_uchar *million_hits;
static atomic_uint million_ran;

static int million_fn(nres_job_t *job) {
  atomic_fetch_add_explicit(&million_hits[(uintptr_t) job->arg], 1,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&million_ran, 1, memory_order_relaxed);
  return 0;
}

typedef struct {
  nres_pool_t *pool;
  uint32_t first, count;
  uint64_t full;          /* times no record was free */
} submitter_t;

static void *submitter(void *arg) {
  submitter_t *s = arg;
  for (uint32_t i = s->first; i < s->first + s->count; i++) {
    nres_job_t *job;
    while ((job = nres_pool_job_get(s->pool)) == NULL) {
      s->full++;
      sched_yield();
    }
    job->fn = million_fn;
    job->arg = (void *) (uintptr_t) i;
    if (nres_pool_submit(s->pool, job) != 0)
      abort();
  }
  return NULL;
}

static void a_million_submissions_from_4_threads_none_lost_or_twice(
    void **state) {
  nres_pool_t *pool = calloc(1, sizeof(*pool));
  nres_pool_options_t opt;
  submitter_t sub[4];
  nres_pool_stats_t st;
  (void) state;

  nres_pool_options_init(&opt);
  opt.threads = 2;
  opt.records = 8192;
  assert_int_equal(nres_pool_init(pool, &opt), 0);
  million_hits = calloc(MILLION, 1);
  atomic_store(&million_ran, 0);
  for (int i = 0; i < 4; i++) {
    sub[i].pool = pool;
    sub[i].first = (uint32_t) i * (MILLION / 4);
    sub[i].count = MILLION / 4;
    sub[i].full = 0;
  }
  test_run_threads(4, submitter, sub, sizeof(sub[0]));
  free_pool(pool, NRES_POOL_DRAIN);
  assert_int_equal(atomic_load(&million_ran), MILLION);
  for (uint32_t i = 0; i < MILLION; i++)
    if (atomic_load(&million_hits[i]) != 1)
      fail_msg("job %u ran %d times", i, atomic_load(&million_hits[i]));
  free(million_hits);
  (void) st;
}

/* Jobs submitted from inside jobs too, from 4 outside threads at once,
 * with records of the caller's: a fan-out tree. */
typedef struct {
  nres_pool_t *pool;
  nres_job_t job[64];
  atomic_int ran[64];
} tree_t;

static int tree_fn(nres_job_t *job) {
  tree_t *t = job->arg;
  long i = job - t->job;
  atomic_fetch_add(&t->ran[i], 1);
  if (2 * i + 2 < 64) {
    assert_int_equal(nres_pool_submit(t->pool, &t->job[2 * i + 1]), 0);
    assert_int_equal(nres_pool_submit(t->pool, &t->job[2 * i + 2]), 0);
  } else if (2 * i + 1 < 64) {
    assert_int_equal(nres_pool_submit(t->pool, &t->job[2 * i + 1]), 0);
  }
  return 0;
}

static void *tree_thread(void *arg) {
  tree_t *t = arg;
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 64; i++)
      nres_job_init(&t->job[i], tree_fn, t);
    if (nres_pool_submit(t->pool, &t->job[0]) != 0)
      abort();
    /* The tree is done when every record is idle again. */
    for (int i = 63; i >= 0; i--)
      while (nres_job_status(&t->job[i]) == NRES_JOB_PENDING ||
             atomic_load(&t->job[i].state) != 0)
        sched_yield();
  }
  return NULL;
}

static void fan_out_trees_from_4_threads(void **state) {
  static tree_t trees[4];
  nres_pool_t *pool = new_pool(3);
  (void) state;

  memset(trees, 0, sizeof(trees));
  for (int i = 0; i < 4; i++)
    trees[i].pool = pool;
  test_run_threads(4, tree_thread, trees, sizeof(trees[0]));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 64; j++)
      assert_int_equal(atomic_load(&trees[i].ran[j]), 200);
  free_pool(pool, NRES_POOL_DRAIN);
}

/* -------------------------------------------------------- delayed jobs */

typedef struct {
  nres_time_t ran_at;
  atomic_int done;
  int order;
} timed_t;

static atomic_int order_counter;

static int timed_fn(nres_job_t *job) {
  timed_t *t = job->arg;
  t->ran_at = nres_clock_now();
  t->order = atomic_fetch_add(&order_counter, 1);
  atomic_store(&t->done, 1);
  return 0;
}

static void delayed_jobs_never_run_early_and_run_in_due_order(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_job_t job[3];
  timed_t t[3];
  nres_time_t now = nres_clock_now();
  nres_time_t due[3] = { now + 30 * NRES_MSEC, now + 10 * NRES_MSEC,
                         now + 20 * NRES_MSEC };
  nres_pool_stats_t st;
  (void) state;

  memset(t, 0, sizeof(t));
  atomic_store(&order_counter, 0);
  for (int i = 0; i < 3; i++) {
    nres_job_init(&job[i], timed_fn, &t[i]);
    assert_int_equal(nres_pool_submit_at(pool, &job[i], due[i]), 0);
  }
  assert_int_equal(nres_pool_submit_at(pool, &job[0], due[0]), NRES_EBUSY);
  WAIT_FOR(atomic_load(&t[0].done) && atomic_load(&t[1].done) &&
           atomic_load(&t[2].done));
  for (int i = 0; i < 3; i++)
    assert_true(t[i].ran_at >= due[i]);
  assert_int_equal(t[1].order, 0);
  assert_int_equal(t[2].order, 1);
  assert_int_equal(t[0].order, 2);
  nres_pool_stats(pool, &st);
  assert_int_equal(st.timers_fired, 3);
  assert_int_equal(st.submitted, 3);
  free_pool(pool, NRES_POOL_DRAIN);
}

/* A waiting job holds no thread: with one worker, a job submitted after a
 * long-delayed one runs first. */
static void a_delayed_job_holds_no_thread(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_job_t later, now_job;
  timed_t t_later, t_now;
  (void) state;

  memset(&t_later, 0, sizeof(t_later));
  memset(&t_now, 0, sizeof(t_now));
  atomic_store(&order_counter, 0);
  nres_job_init(&later, timed_fn, &t_later);
  nres_job_init(&now_job, timed_fn, &t_now);
  /* 500 ms: a busy machine may keep the worker off the CPU for tens of
   * ms, after which a due delayed job may rightly run first. */
  assert_int_equal(
      nres_pool_submit_at(pool, &later, nres_clock_now() + 500 * NRES_MSEC), 0);
  assert_int_equal(nres_pool_submit(pool, &now_job), 0);
  WAIT_FOR(atomic_load(&t_now.done) && atomic_load(&t_later.done));
  assert_int_equal(t_now.order, 0);    /* the one worker was not held */
  assert_int_equal(t_later.order, 1);
  free_pool(pool, NRES_POOL_DRAIN);
}

static void the_timer_heap_is_bounded(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_job_t job[3];
  nres_time_t far = nres_clock_now() + 3600 * NRES_SEC;
  (void) state;

  nres_pool_options_init(&opt);
  opt.threads = 1;
  opt.timers = 2;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  atomic_store(&called, 0);
  for (int i = 0; i < 3; i++) {
    nres_job_init(&job[i], count_fn, &ran);
    job[i].done_cb = count_cb;
  }
  assert_int_equal(nres_pool_submit_at(&pool, &job[0], far), 0);
  assert_int_equal(nres_pool_submit_at(&pool, &job[1], far), 0);
  assert_int_equal(nres_pool_submit_at(&pool, &job[2], far), NRES_EFULL);
  /* Closing ends the waiting ones CANCELED, with their callbacks. */
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(atomic_load(&called), 2);
  assert_int_equal(nres_job_status(&job[0]), NRES_JOB_CANCELED);
  assert_int_equal(nres_job_status(&job[1]), NRES_JOB_CANCELED);
}

/* ------------------------------------------------------------- shutdown */

static atomic_long outstanding;   /* allocations not yet freed */
static void *track_malloc(size_t n) {
  void *p = malloc(n);
  if (p) atomic_fetch_add(&outstanding, 1);
  return p;
}
static void *track_calloc(size_t c, size_t n) {
  void *p = calloc(c, n);
  if (p) atomic_fetch_add(&outstanding, 1);
  return p;
}
static void *track_realloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (q && !p) atomic_fetch_add(&outstanding, 1);
  return q;
}
static void track_free(void *p) {
  if (p) atomic_fetch_sub(&outstanding, 1);
  free(p);
}

static int slow_fn(nres_job_t *job) {
  (void) job;
  nap_us(20);
  atomic_fetch_add(&ran, 1);
  return 0;
}

static void closing_drains_jobs_in_flight_and_frees_everything(void **state) {
  enum { N = 5000 };
  nres_pool_t pool;
  nres_job_t *jobs = calloc(N, sizeof(*jobs));
  (void) state;

  atomic_store(&outstanding, 0);
  nres_replace_allocator(track_malloc, track_realloc, track_calloc,
                         track_free);
  assert_int_equal(nres_pool_init(&pool, NULL), 0);
  assert_true(atomic_load(&outstanding) > 0);
  atomic_store(&ran, 0);
  atomic_store(&called, 0);
  for (int i = 0; i < N; i++) {
    nres_job_init(&jobs[i], slow_fn, NULL);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_submit(&pool, &jobs[i]), 0);
  }
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(atomic_load(&ran), N);
  assert_int_equal(atomic_load(&called), N);
  assert_int_equal(atomic_load(&outstanding), 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
  free(jobs);
}

static atomic_int blocker_started;
static int blocker_fn(nres_job_t *job) {
  nres_pool_t *pool = job->arg;
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  atomic_store(&blocker_started, 1);
  /* Hold the only worker until close has begun. */
  while (atomic_load(&pool->closing_) == 0 && nres_clock_now() < until)
    nap_us(50);
  return 0;
}

static void closing_with_cancel_ends_queued_jobs_unrun(void **state) {
  enum { N = 999 };
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_job_t blocker, *jobs = calloc(N, sizeof(*jobs));
  nres_job_t delayed;
  (void) state;

  atomic_store(&outstanding, 0);
  nres_replace_allocator(track_malloc, track_realloc, track_calloc,
                         track_free);
  nres_pool_options_init(&opt);
  opt.threads = 1;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  atomic_store(&ran, 0);
  atomic_store(&called, 0);
  nres_job_init(&blocker, blocker_fn, &pool);
  atomic_store(&blocker_started, 0);
  assert_int_equal(nres_pool_submit(&pool, &blocker), 0);
  WAIT_FOR(atomic_load(&blocker_started));   /* running, not queued */
  for (int i = 0; i < N; i++) {
    nres_job_init(&jobs[i], slow_fn, NULL);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_submit(&pool, &jobs[i]), 0);
  }
  nres_job_init(&delayed, slow_fn, NULL);
  delayed.done_cb = count_cb;
  assert_int_equal(
      nres_pool_submit_at(&pool, &delayed, nres_clock_now() + 60 * NRES_SEC),
      0);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_CANCEL), 0);
  assert_int_equal(atomic_load(&ran), 0);
  assert_int_equal(atomic_load(&called), N + 1);
  for (int i = 0; i < N; i++)
    assert_int_equal(nres_job_status(&jobs[i]), NRES_JOB_CANCELED);
  assert_int_equal(nres_job_status(&delayed), NRES_JOB_CANCELED);
  assert_int_equal(nres_job_status(&blocker), NRES_JOB_OK);
  assert_int_equal(atomic_load(&outstanding), 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
  free(jobs);
}

typedef struct {
  nres_pool_t *pool;
  nres_job_t next, outside;
  atomic_int started, closing_seen, outside_rc, outside_done;
  int inside_rc;
} closing_t;

static int submit_after_close_fn(nres_job_t *job) {
  closing_t *c = job->arg;
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  atomic_store(&c->started, 1);
  while (atomic_load(&c->pool->closing_) == 0 && nres_clock_now() < until)
    nap_us(50);
  atomic_store(&c->closing_seen, 1);
  /* Hold the pool open until the outside thread has tried. */
  while (!atomic_load(&c->outside_done) && nres_clock_now() < until)
    nap_us(50);
  c->inside_rc = nres_pool_submit(c->pool, &c->next);
  return 0;
}

static void *submit_from_outside(void *arg) {
  closing_t *c = arg;
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  while (!atomic_load(&c->closing_seen) && nres_clock_now() < until)
    nap_us(50);
  atomic_store(&c->outside_rc, nres_pool_submit(c->pool, &c->outside));
  atomic_store(&c->outside_done, 1);
  return NULL;
}

/* While closing, nobody outside may submit; with DRAIN the pool's own jobs
 * still may (their fan-outs complete), with CANCEL they may not. */
static void a_closing_pool_refuses_new_jobs(void **state) {
  static closing_t c;
  (void) state;

  for (int how = NRES_POOL_DRAIN; how <= NRES_POOL_CANCEL; how++) {
    nres_job_t job;
    pthread_t t;
    memset(&c, 0, sizeof(c));
    c.pool = new_pool(1);
    atomic_store(&ran, 0);
    nres_job_init(&c.next, count_fn, &ran);
    nres_job_init(&c.outside, count_fn, &ran);
    nres_job_init(&job, submit_after_close_fn, &c);
    assert_int_equal(nres_pool_submit(c.pool, &job), 0);
    WAIT_FOR(atomic_load(&c.started));
    assert_int_equal(pthread_create(&t, NULL, submit_from_outside, &c), 0);
    free_pool(c.pool, how);
    pthread_join(t, NULL);
    assert_int_equal(nres_job_status(&job), NRES_JOB_OK);
    assert_int_equal(atomic_load(&c.outside_rc), NRES_ESTATE);
    assert_int_equal(nres_job_status(&c.outside), NRES_JOB_PENDING);
    assert_int_equal(atomic_load(&c.outside.state), 0);
    if (how == NRES_POOL_DRAIN) {
      assert_int_equal(c.inside_rc, 0);
      assert_int_equal(nres_job_status(&c.next), NRES_JOB_OK);
      assert_int_equal(atomic_load(&ran), 2);   /* count_fn counts twice */
    } else {
      assert_int_equal(c.inside_rc, NRES_ESTATE);
      assert_int_equal(atomic_load(&ran), 0);
    }
  }
}

/* --------------------------------------------------------------- idle */

static void idle_workers_park(void **state) {
  nres_pool_t *pool = new_pool(2);
  nres_job_t jobs[100];
  nres_pool_stats_t st;
  (void) state;

  atomic_store(&called, 0);
  for (int i = 0; i < 100; i++) {
    nres_job_init(&jobs[i], count_fn, &ran);
    jobs[i].done_cb = count_cb;
    assert_int_equal(nres_pool_submit(pool, &jobs[i]), 0);
  }
  WAIT_FOR(atomic_load(&called) == 100);
  /* Nothing left to do: both go to sleep on their futex, not spin. */
  WAIT_FOR(all_parked(pool));
  assert_int_equal(atomic_load(&pool->spinning_), 0);
  nres_pool_stats(pool, &st);
  assert_true(st.parks >= 2);
  free_pool(pool, NRES_POOL_DRAIN);
}

/* --------------------------------------------------------------- misuse */

static int close_self_fn(nres_job_t *job) {
  return nres_pool_close(job->pool, NRES_POOL_DRAIN);
}

static int hold_fn(nres_job_t *job) {
  atomic_int *release = job->arg;
  nres_time_t until = nres_clock_now() + 10 * NRES_SEC;
  while (!atomic_load(release) && nres_clock_now() < until)
    nap_us(50);
  return 0;
}

static void misuse_is_refused(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_job_t job, self;
  atomic_int release = 0;
  (void) state;

  nres_pool_options_init(&opt);
  assert_int_equal(nres_pool_init(NULL, NULL), NRES_EINVAL);
  opt.queue_size = 3;
  assert_int_equal(nres_pool_init(&pool, &opt), NRES_EINVAL);
  opt.queue_size = 0;
  opt.threads = 5000;
  assert_int_equal(nres_pool_init(&pool, &opt), NRES_EINVAL);
  opt.threads = 1;
  opt.max_wait = NRES_TIME_INVALID;   /* a NaN or negative from a binding */
  assert_int_equal(nres_pool_init(&pool, &opt), NRES_EINVAL);
  opt.max_wait = NRES_MSEC;
  opt.service = NRES_TIME_NEVER;
  assert_int_equal(nres_pool_init(&pool, &opt), NRES_EINVAL);
  opt.service = NRES_TIME_INVALID;
  assert_int_equal(nres_pool_init(&pool, &opt), NRES_EINVAL);
  nres_pool_options_init(&opt);
  assert_int_equal(nres_job_init(NULL, count_fn, NULL), NRES_EINVAL);
  assert_int_equal(nres_job_init(&job, NULL, NULL), NRES_EINVAL);

  setenv("NRES_THREADS", "many", 1);
  assert_int_equal(nres_pool_init(&pool, NULL), NRES_EINVAL);
  setenv("NRES_THREADS", "0", 1);
  assert_int_equal(nres_pool_init(&pool, NULL), NRES_EINVAL);
  setenv("NRES_THREADS", "3", 1);
  assert_int_equal(nres_pool_init(&pool, NULL), 0);
  unsetenv("NRES_THREADS");
  assert_int_equal(pool.threads, 3);

  memset(&job, 0, sizeof(job));
  assert_int_equal(nres_pool_submit(&pool, &job), NRES_EINVAL);   /* no fn */
  assert_int_equal(nres_pool_submit(&pool, NULL), NRES_EINVAL);
  assert_int_equal(nres_pool_submit(NULL, &job), NRES_EINVAL);
  nres_job_init(&job, hold_fn, &release);
  assert_int_equal(nres_pool_submit(&pool, &job), 0);
  assert_int_equal(nres_pool_submit(&pool, &job), NRES_EBUSY);
  atomic_store(&release, 1);

  nres_job_init(&self, close_self_fn, NULL);
  assert_int_equal(nres_pool_submit(&pool, &self), 0);
  assert_int_equal(nres_pool_close(&pool, 7), NRES_EINVAL);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(self.result, NRES_EINVAL);   /* not from its own worker */
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), NRES_EINVAL);
  assert_int_equal(nres_pool_submit(&pool, &job), NRES_EINVAL);
  assert_int_equal(nres_pool_worker(&pool), -1);
  assert_null(nres_pool_job_get(&pool));
}

/* ------------------------------------------------ admission by wait */

static atomic_int holding;
static atomic_uint finished;   /* count_fn's own count of these tests' jobs */

static int counted_hold_fn(nres_job_t *job) {
  atomic_fetch_add(&holding, 1);
  return hold_fn(job);
}

static void max_wait_refuses_what_would_wait_too_long(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_pool_stats_t st;
  nres_job_t hold[2], job[5];
  nres_gate_t gate;
  atomic_int release = 0;
  (void) state;

  /* Service 100 s a job, 2 workers, max_wait 220 s. With both workers
   * holding, free in ~100 s each, a job queued behind Q others expects
   * max(100, (200 + 100 Q) / 2) s: 100, 150, 200, then 250 > 220. */
  nres_pool_options_init(&opt);
  opt.threads = 2;
  opt.max_wait = 220 * NRES_SEC;
  opt.service = 100 * NRES_SEC;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  atomic_store(&holding, 0);
  atomic_store(&finished, 0);
  for (int i = 0; i < 2; i++) {
    nres_job_init(&hold[i], counted_hold_fn, &release);
    assert_int_equal(nres_pool_submit(&pool, &hold[i]), 0);
  }
  WAIT_FOR(atomic_load(&holding) == 2);
  for (int i = 0; i < 5; i++)
    nres_job_init(&job[i], count_fn, &finished);
  for (int i = 0; i < 3; i++)
    assert_int_equal(nres_pool_submit(&pool, &job[i]), 0);
  job[3].result = 7;   /* as a record that ran before */
  atomic_store(&job[3].status, NRES_JOB_ERROR);
  assert_int_equal(nres_pool_submit(&pool, &job[3]), NRES_ELIMITED);
  assert_int_equal(job[3].result, 7);   /* refused: left as it was */
  assert_int_equal(nres_job_status(&job[3]), NRES_JOB_ERROR);
  nres_pool_stats(&pool, &st);
  assert_int_equal(st.shed, 1);
  assert_int_equal(st.submitted, 5);
  assert_int_equal(st.service, 100 * NRES_SEC);   /* nothing measured yet */
  /* Part of a fan-out: never refused (its gate decides), but counted. */
  assert_int_equal(nres_gate_init(&gate, &pool), 0);
  assert_int_equal(nres_gate_add(&gate, &job[4]), 0);
  assert_int_equal(atomic_load(&pool.queued_), 4);

  atomic_store(&release, 1);
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), 0);
  nres_gate_close(&gate);
  WAIT_FOR(atomic_load(&finished) == 4);
  WAIT_FOR(all_parked(&pool));
  /* Idle again: the refused record goes in, and the estimate has learnt
   * from the jobs that ran (each took far less than 100 s). */
  assert_int_equal(atomic_load(&pool.queued_), 0);
  assert_int_equal(nres_pool_submit(&pool, &job[3]), 0);
  WAIT_FOR(atomic_load(&finished) == 5);
  nres_pool_stats(&pool, &st);
  assert_int_equal(st.shed, 1);
  assert_true(st.service > 0 && st.service < 100 * NRES_SEC);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(atomic_load(&pool.queued_), 0);
}

static void max_wait_off_counts_nothing(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_pool_stats_t st;
  nres_job_t job;
  (void) state;

  nres_pool_options_init(&opt);
  opt.threads = 1;
  opt.max_wait = NRES_TIME_NEVER;   /* as 0: off */
  opt.service = NRES_SEC;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  atomic_store(&finished, 0);
  nres_job_init(&job, count_fn, &finished);
  assert_int_equal(nres_pool_submit(&pool, &job), 0);
  WAIT_FOR(atomic_load(&finished) == 1);
  nres_pool_stats(&pool, &st);
  assert_int_equal(st.shed, 0);
  assert_int_equal(st.service, 0);
  assert_int_equal(job.flags, 0);   /* never counted */
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
}

/* Delayed jobs that come due together (their worker was busy, or off the
 * CPU) still run in due order: the worker runs its own queue newest
 * first, so they must go in latest first. */
static void jobs_due_together_run_in_due_order(void **state) {
  nres_pool_t *pool = new_pool(1);
  nres_job_t hold, job[3];
  timed_t t[3];
  atomic_int release = 0;
  nres_time_t now = nres_clock_now();
  nres_time_t due[3] = { now + 3 * NRES_MSEC, now + 1 * NRES_MSEC,
                         now + 2 * NRES_MSEC };
  (void) state;

  memset(t, 0, sizeof(t));
  atomic_store(&order_counter, 0);
  atomic_store(&holding, 0);
  nres_job_init(&hold, counted_hold_fn, &release);
  assert_int_equal(nres_pool_submit(pool, &hold), 0);
  WAIT_FOR(atomic_load(&holding) == 1);
  for (int i = 0; i < 3; i++) {
    nres_job_init(&job[i], timed_fn, &t[i]);
    assert_int_equal(nres_pool_submit_at(pool, &job[i], due[i]), 0);
  }
  WAIT_FOR(nres_clock_now() > due[0]);   /* all due, the worker still held */
  atomic_store(&release, 1);
  WAIT_FOR(atomic_load(&t[0].done) && atomic_load(&t[1].done) &&
           atomic_load(&t[2].done));
  assert_int_equal(t[1].order, 0);
  assert_int_equal(t[2].order, 1);
  assert_int_equal(t[0].order, 2);
  free_pool(pool, NRES_POOL_DRAIN);
}

static void pooled_records_run_out_and_come_back(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_job_t *rec[4];
  (void) state;

  nres_pool_options_init(&opt);
  opt.threads = 1;
  opt.records = 4;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  for (int i = 0; i < 4; i++)
    assert_non_null(rec[i] = nres_pool_job_get(&pool));
  assert_null(nres_pool_job_get(&pool));
  nres_pool_job_put(&pool, rec[3]);
  assert_ptr_equal(nres_pool_job_get(&pool), rec[3]);
  atomic_store(&called, 0);
  for (int i = 0; i < 4; i++) {
    rec[i]->fn = count_fn;
    rec[i]->arg = &ran;
    rec[i]->done_cb = count_cb;
    assert_int_equal(nres_pool_submit(&pool, rec[i]), 0);
  }
  WAIT_FOR(atomic_load(&called) == 4);
  /* All four are back: four more can be taken. */
  WAIT_FOR(all_parked(&pool));
  for (int i = 0; i < 4; i++)
    assert_non_null(rec[i] = nres_pool_job_get(&pool));
  for (int i = 0; i < 4; i++)
    nres_pool_job_put(&pool, rec[i]);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
}

/* ------------------------------------------------------- allocations */

typedef struct {
  nres_pool_t *pool;
  nres_job_t reuse;
  long left;
  atomic_int done;
} steady_t;

static int pooled_hop_fn(nres_job_t *job);

static int pooled_hop_fn(nres_job_t *job) {
  steady_t *s = job->arg;
  nres_job_t *next;
  if (--s->left <= 0) {
    atomic_store(&s->done, 1);
    return 0;
  }
  next = nres_pool_job_get(s->pool);   /* a new record per hop */
  if (next == NULL)
    abort();
  next->fn = pooled_hop_fn;
  next->arg = s;
  return nres_pool_submit(s->pool, next);
}

static void reuse_cb(nres_job_t *job);
static int reuse_fn(nres_job_t *job) {
  (void) job;
  return 0;
}
static void reuse_cb(nres_job_t *job) {
  steady_t *s = job->data;
  if (--s->left <= 0)
    atomic_store(&s->done, 1);
  else if (nres_pool_submit(s->pool, job) != 0)   /* one record, reused */
    abort();
}

static void steady_state_allocates_nothing_per_job(void **state) {
  static steady_t s;
  nres_pool_t pool;
  nres_pool_options_t opt;
  static nres_job_t ext[1000];
  unsigned long before;
  (void) state;

  test_count_allocations();
  nres_pool_options_init(&opt);
  opt.threads = 2;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  assert_true(atomic_load(&test_alloc_calls) > 0);   /* set-up allocates */
  memset(&s, 0, sizeof(s));
  s.pool = &pool;

  /* warm up every path once */
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      before = atomic_load(&test_alloc_calls);
      test_arm_malloc_count(1);
    }
    /* 1. pooled records, a new one per hop */
    s.left = 100000;
    atomic_store(&s.done, 0);
    nres_job_t *first = nres_pool_job_get(&pool);
    first->fn = pooled_hop_fn;
    first->arg = &s;
    assert_int_equal(nres_pool_submit(&pool, first), 0);
    WAIT_FOR(atomic_load(&s.done));
    /* 2. one record reused from its callback */
    s.left = 100000;
    atomic_store(&s.done, 0);
    nres_job_init(&s.reuse, reuse_fn, NULL);
    s.reuse.data = &s;
    s.reuse.done_cb = reuse_cb;
    assert_int_equal(nres_pool_submit(&pool, &s.reuse), 0);
    WAIT_FOR(atomic_load(&s.done));
    /* 3. caller-owned records from outside, with delayed jobs */
    atomic_store(&called, 0);
    for (int i = 0; i < 1000; i++) {
      nres_job_init(&ext[i], count_fn, &ran);
      ext[i].done_cb = count_cb;
      if (i % 10 == 0)
        assert_int_equal(nres_pool_submit_at(&pool, &ext[i], nres_clock_now()),
                         0);
      else
        assert_int_equal(nres_pool_submit(&pool, &ext[i]), 0);
    }
    WAIT_FOR(atomic_load(&called) == 1000);
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
    cmocka_unit_test(every_job_runs_once_and_calls_back_once),
    cmocka_unit_test(a_failing_job_keeps_its_error),
    cmocka_unit_test(a_chain_stays_on_its_worker_and_wakes_nobody),
    cmocka_unit_test(jobs_behind_a_blocked_worker_are_stolen),
    cmocka_unit_test(stealing_is_counted),
    cmocka_unit_test(a_million_submissions_from_4_threads_none_lost_or_twice),
    cmocka_unit_test(fan_out_trees_from_4_threads),
    cmocka_unit_test(delayed_jobs_never_run_early_and_run_in_due_order),
    cmocka_unit_test(a_delayed_job_holds_no_thread),
    cmocka_unit_test(the_timer_heap_is_bounded),
    cmocka_unit_test(closing_drains_jobs_in_flight_and_frees_everything),
    cmocka_unit_test(closing_with_cancel_ends_queued_jobs_unrun),
    cmocka_unit_test(a_closing_pool_refuses_new_jobs),
    cmocka_unit_test(idle_workers_park),
    cmocka_unit_test(misuse_is_refused),
    cmocka_unit_test(pooled_records_run_out_and_come_back),
    cmocka_unit_test(max_wait_refuses_what_would_wait_too_long),
    cmocka_unit_test(max_wait_off_counts_nothing),
    cmocka_unit_test(jobs_due_together_run_in_due_order),
    cmocka_unit_test(steady_state_allocates_nothing_per_job),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

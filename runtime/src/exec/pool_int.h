/* SPDX-License-Identifier: MIT */
/* pool_int.h - what the work pool's files share, never installed.
 *
 * The futex (or condvar-free fallback) the pool's sleepers use, the job
 * record's private states and flags, and the hooks by which pool.c hands a
 * finished job to its gate (gate.c) or to a loop (pool_uv.c), and by which
 * a gate's waiter helps run jobs. Names are nres__ (internal across files).
 */
#ifndef NRES_EXEC_POOL_INT_H
#define NRES_EXEC_POOL_INT_H

#include "nres/pool.h"
#include "internal.h"

#define NRES__POOL_MAGIC 0x706f6f6cu   /* "pool" */

/* job->state */
enum {
  NRES__JOB_IDLE = 0,     /* the caller's */
  NRES__JOB_QUEUED,       /* in a queue */
  NRES__JOB_DELAYED,      /* in the timer heap */
  NRES__JOB_RUNNING
};

/* job->flags */
enum {
  NRES__JOB_POOLED = 1,   /* one of the pool's records */
  NRES__JOB_COUNTED = 2   /* counted in pool->queued_ (max_wait on) */
};

/* ------------------------------------------------------------- futexes */

#if defined(__linux__)
# include <linux/futex.h>
# include <sys/syscall.h>
# include <time.h>
# include <unistd.h>

/* Sleep while *word == expected, at most timeout ns (NRES_TIME_NEVER: no
 * limit). Returns early on a wake, a signal or a spurious wake-up: callers
 * re-check their condition. */
static inline void nres__futex_wait(NRES_ATOMIC(uint32_t) *word,
                                    uint32_t expected, nres_time_t timeout) {
  struct timespec ts, *tsp = NULL;
  if (timeout != NRES_TIME_NEVER) {
    ts.tv_sec = (time_t) (timeout / NRES_SEC);
    ts.tv_nsec = (long) (timeout % NRES_SEC);
    tsp = &ts;
  }
  syscall(SYS_futex, (uint32_t *) word, FUTEX_WAIT_PRIVATE, expected, tsp,
          NULL, 0);
}

static inline void nres__futex_wake(NRES_ATOMIC(uint32_t) *word, int n) {
  syscall(SYS_futex, (uint32_t *) word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#else
/* Elsewhere: a short sleep re-checked by the caller (correct, less
 * prompt). */
# include <time.h>
static inline void nres__futex_wait(NRES_ATOMIC(uint32_t) *word,
                                    uint32_t expected, nres_time_t timeout) {
  struct timespec ts = { 0, 200000 };
  if (timeout < 200000)
    ts.tv_nsec = (long) timeout;
  if (atomic_load(word) == expected)
    nanosleep(&ts, NULL);
}
static inline void nres__futex_wake(NRES_ATOMIC(uint32_t) *word, int n) {
  (void) word;
  (void) n;
}
#endif

static inline void nres__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ----------------------------------------------------------- pool.c */

/* Queue an accepted job (job->gate / job->loop already set). */
int nres__pool_submit(nres_pool_t *pool, nres_job_t *job);
/* From a worker of `pool`: run one queued job if there is one; 1 if it
 * ran one. 0 on any other thread. For waits that help. */
int nres__pool_help(nres_pool_t *pool);
/* 1 if the calling thread is one of pool's workers. */
int nres__pool_on_worker(const nres_pool_t *pool);
/* The last steps of a job, run on the loop thread for bridged jobs:
 * state IDLE, done_cb, record back, gate released. */
void nres__job_finish(nres_job_t *job);

/* ----------------------------------------------------------- gate.c */

/* Give the job its outcome unless it already has one (CAS from PENDING);
 * counts it in its gate and wakes the gate's waiter when that ends the
 * wait. 1 if this call decided the outcome. */
int nres__gate_settle(nres_job_t *job, uint32_t status);
/* The pool is done with one job of the gate. */
void nres__gate_release(nres_gate_t *gate);
/* nres_gate_add, the job completing on `loop` when that is not NULL. */
int nres__gate_add(nres_gate_t *gate, nres_job_t *job, nres_pool_uv_t *loop);

/* --------------------------------------------------------- pool_uv.c */

/* A bridged job is over on a worker: hand it to the loop. */
void nres__pool_uv_push(nres_pool_uv_t *bridge, nres_job_t *job);
/* Count a job in (+1) or out (-1) of the bridge's in-flight total
 * (loop thread): pool calls finish through the bridge without a submit
 * of their own. */
void nres__pool_uv_account(nres_pool_uv_t *bridge, int delta);

#endif /* NRES_EXEC_POOL_INT_H */

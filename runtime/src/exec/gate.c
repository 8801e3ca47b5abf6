/* SPDX-License-Identifier: MIT */
/* gate.c - fan-out/join: wait for N pool jobs, the first K, or a limit.
 *
 * A gate counts the jobs added to it, those that have an outcome
 * (settled) and, of those, the successes; a waiter sleeps on a futex word
 * that is bumped only when a settle makes its condition true (all ended,
 * or the K-th success), so a large fan-out costs one wake-up, not one per
 * job. An outcome is decided once, by a CAS on the job's status from
 * PENDING: the worker that ran the job, or the waiter that gave up (time
 * out, cancel, K reached) sweeping the gate's list of jobs, whichever is
 * first; a queued job found already decided is never run.
 *
 * A second count, released, says when the pool is done with a record
 * (its callback returned): nres_gate_close waits for it, so records and
 * gate may be reused or freed right after. The releasing worker's last
 * touch of the gate is that atomic increment; it may wake the closer on a
 * futex word that is then already gone, which is harmless (a spurious
 * wake-up for whoever reuses the address, which futex users tolerate),
 * and the closer re-checks at least every millisecond in case a wake-up
 * was skipped.
 *
 * On a worker of the pool a wait helps: it runs queued jobs instead of
 * sleeping, so a job fanning out and joining inside the pool cannot
 * deadlock it. nres_pool_for builds a dynamic parallel-for on a gate.
 */
#include <limits.h>
#include <string.h>

#include "exec/pool_int.h"

#define HELP_POLL NRES_MSEC   /* a helping or closing waiter re-checks */

static void notify(nres_gate_t *gate) {
  atomic_fetch_add_explicit(&gate->wake_, 1, memory_order_seq_cst);
  nres__futex_wake(&gate->wake_, INT_MAX);
}

int nres__gate_settle(nres_job_t *job, uint32_t status) {
  uint32_t pending = NRES_JOB_PENDING, ok = 0, settled, want;
  nres_gate_t *gate = job->gate;

  if (!atomic_compare_exchange_strong_explicit(&job->status, &pending, status,
                                               memory_order_acq_rel,
                                               memory_order_relaxed))
    return 0;
  if (gate == NULL)
    return 1;
  if (status == NRES_JOB_OK)
    ok = atomic_fetch_add_explicit(&gate->ok_, 1, memory_order_seq_cst) + 1;
  settled = atomic_fetch_add_explicit(&gate->settled_, 1,
                                      memory_order_seq_cst) + 1;
  /* The waiter announced itself before checking the counts: either it
   * sees ours, or we see it waiting. */
  if (atomic_load_explicit(&gate->waiting_, memory_order_seq_cst)) {
    want = atomic_load_explicit(&gate->want_, memory_order_relaxed);
    if (settled >= atomic_load_explicit(&gate->total_, memory_order_seq_cst) ||
        (want != 0 && ok == want))
      notify(gate);
  }
  return 1;
}

void nres__gate_release(nres_gate_t *gate) {
  uint32_t total = atomic_load_explicit(&gate->total_, memory_order_seq_cst);
  uint32_t released = atomic_fetch_add_explicit(&gate->released_, 1,
                                                memory_order_seq_cst) + 1;
  /* The gate may be gone from here on (see the top of the file). */
  if (released >= total)
    nres__futex_wake(&gate->released_, INT_MAX);
}

int nres_gate_init(nres_gate_t *gate, nres_pool_t *pool) {
  if (gate == NULL || pool == NULL || pool->magic_ != NRES__POOL_MAGIC)
    return NRES_EINVAL;
  memset(gate, 0, sizeof(*gate));
  gate->pool = pool;
  gate->id = nres__add(&pool->next_id_, 1) + 1;
  return 0;
}

int nres__gate_add(nres_gate_t *gate, nres_job_t *job, nres_pool_uv_t *loop) {
  nres_job_t *head;
  int rc;

  if (gate == NULL || gate->pool == NULL || job == NULL || job->fn == NULL)
    return NRES_EINVAL;
  if (nres__load(&job->state) != NRES__JOB_IDLE)
    return NRES_EBUSY;
  job->gate = gate;
  job->loop = loop;
  atomic_fetch_add_explicit(&gate->total_, 1, memory_order_seq_cst);
  head = atomic_load_explicit(&gate->jobs_, memory_order_relaxed);
  do
    job->gate_next = head;
  while (!atomic_compare_exchange_weak_explicit(&gate->jobs_, &head, job,
                                                memory_order_release,
                                                memory_order_relaxed));
  if ((rc = nres__pool_submit(gate->pool, job)) == 0)
    return 0;
  /* It is on the list and counted: end it here, unrun. */
  atomic_store_explicit(&job->status, NRES_JOB_CANCELED,
                        memory_order_release);
  atomic_fetch_add_explicit(&gate->settled_, 1, memory_order_seq_cst);
  atomic_fetch_add_explicit(&gate->released_, 1, memory_order_seq_cst);
  notify(gate);
  nres__futex_wake(&gate->released_, INT_MAX);
  return rc;
}

int nres_gate_add(nres_gate_t *gate, nres_job_t *job) {
  return nres__gate_add(gate, job, NULL);
}

void nres_gate_cancel(nres_gate_t *gate) {
  uint32_t none = 0;

  if (gate == NULL)
    return;
  if (atomic_compare_exchange_strong_explicit(&gate->stop_, &none,
                                              NRES_JOB_CANCELED,
                                              memory_order_seq_cst,
                                              memory_order_relaxed))
    notify(gate);
}

/* Give every job still without an outcome `status`. */
static void sweep(nres_gate_t *gate, uint32_t status) {
  nres_job_t *job = atomic_load_explicit(&gate->jobs_, memory_order_acquire);

  for (; job != NULL; job = job->gate_next)
    nres__gate_settle(job, status);
}

int nres_gate_wait(nres_gate_t *gate, uint32_t k, nres_time_t timeout) {
  nres_pool_t *pool;
  nres_time_t deadline, now;
  uint32_t none = 0, status;
  int helper, rc;

  if (gate == NULL || (pool = gate->pool) == NULL ||
      pool->magic_ != NRES__POOL_MAGIC)
    return NRES_EINVAL;
  helper = nres__pool_on_worker(pool);
  now = nres_clock_now();
  deadline = nres_time_add(now, timeout);
  atomic_store_explicit(&gate->want_, k, memory_order_relaxed);
  atomic_store_explicit(&gate->waiting_, 1, memory_order_seq_cst);
  for (;;) {
    uint32_t seen = atomic_load_explicit(&gate->wake_, memory_order_seq_cst);
    uint32_t total = atomic_load_explicit(&gate->total_, memory_order_seq_cst);
    uint32_t settled = atomic_load_explicit(&gate->settled_,
                                            memory_order_seq_cst);
    uint32_t ok = atomic_load_explicit(&gate->ok_, memory_order_seq_cst);
    nres_time_t wait;

    /* A cancel wins over an end reached at the same time. */
    if (atomic_load_explicit(&gate->stop_, memory_order_seq_cst) != 0) {
      rc = NRES_ECANCELED;
      break;
    }
    if (k == 0 ? settled >= total : ok >= k) {
      rc = 0;
      break;
    }
    if (settled >= total) {
      rc = NRES_EPERMANENT;   /* all ended, too few succeeded */
      break;
    }
    if (helper && nres__pool_help(pool))
      continue;
    now = nres_clock_now();
    if (now >= deadline) {
      rc = NRES_ETIMEDOUT;
      break;
    }
    wait = deadline - now;
    if (helper && wait > HELP_POLL)
      wait = HELP_POLL;
    nres__futex_wait(&gate->wake_, seen, wait);
  }
  atomic_store_explicit(&gate->waiting_, 0, memory_order_seq_cst);
  if (rc == 0 && k == 0)
    return 0;
  if (rc == NRES_EPERMANENT)
    return rc;
  /* The wait is over before every job ended: the rest are unwanted. */
  status = rc == NRES_ETIMEDOUT ? NRES_JOB_TIMEOUT : NRES_JOB_CANCELED;
  atomic_compare_exchange_strong_explicit(&gate->stop_, &none, status,
                                          memory_order_seq_cst,
                                          memory_order_relaxed);
  sweep(gate, atomic_load_explicit(&gate->stop_, memory_order_seq_cst));
  return rc;
}

void nres_gate_close(nres_gate_t *gate) {
  int helper;

  if (gate == NULL || gate->pool == NULL)
    return;
  helper = gate->pool->magic_ == NRES__POOL_MAGIC &&
           nres__pool_on_worker(gate->pool);
  for (;;) {
    uint32_t released = atomic_load_explicit(&gate->released_,
                                             memory_order_seq_cst);
    if (released >= atomic_load_explicit(&gate->total_, memory_order_seq_cst))
      break;
    if (helper && nres__pool_help(gate->pool))
      continue;
    nres__futex_wait(&gate->released_, released, HELP_POLL);
  }
}

uint32_t nres_gate_count(const nres_gate_t *gate, int status) {
  const nres_job_t *job;
  uint32_t n = 0;

  if (gate == NULL)
    return 0;
  if (status == NRES_JOB_OK)
    return atomic_load_explicit(&gate->ok_, memory_order_acquire);
  if (status == NRES_JOB_PENDING)
    return atomic_load_explicit(&gate->total_, memory_order_acquire) -
           atomic_load_explicit(&gate->settled_, memory_order_acquire);
  for (job = atomic_load_explicit(&gate->jobs_, memory_order_acquire);
       job != NULL; job = job->gate_next)
    n += nres_job_status(job) == status;
  return n;
}

/* ---------------------------------------------------------- parallel for */

#define FOR_MAX_JOBS 64

typedef struct {
  nres_pool_for_fn fn;
  void *arg;
  uint64_t n;
  NRES_ATOMIC(uint64_t) next;
} for_ctx_t;

static void for_run(for_ctx_t *ctx) {
  uint64_t i;
  while ((i = atomic_fetch_add_explicit(&ctx->next, 1,
                                        memory_order_relaxed)) < ctx->n)
    ctx->fn(ctx->arg, i);
}

static int for_job(nres_job_t *job) {
  for_run(job->arg);
  return 0;
}

int nres_pool_for(nres_pool_t *pool, uint64_t n, nres_pool_for_fn fn,
                  void *arg) {
  nres_job_t jobs[FOR_MAX_JOBS];
  nres_gate_t gate;
  for_ctx_t ctx;
  uint32_t count, i;
  int rc = 0;

  if (pool == NULL || pool->magic_ != NRES__POOL_MAGIC || fn == NULL)
    return NRES_EINVAL;
  if (n == 0)
    return 0;
  ctx.fn = fn;
  ctx.arg = arg;
  ctx.n = n;
  atomic_init(&ctx.next, 0);
  count = pool->threads < FOR_MAX_JOBS ? pool->threads : FOR_MAX_JOBS;
  if (count > n)
    count = (uint32_t) n;
  nres_gate_init(&gate, pool);
  for (i = 0; i < count && rc == 0; i++) {
    nres_job_init(&jobs[i], for_job, &ctx);
    rc = nres_gate_add(&gate, &jobs[i]);
  }
  /* A worker calling takes part (it is one of the T); a thread outside
   * only waits, so T threads run the loop either way. */
  if (nres__pool_on_worker(pool))
    for_run(&ctx);
  nres_gate_wait(&gate, 0, NRES_TIME_NEVER);
  nres_gate_close(&gate);
  /* Whatever a failed add or a canceling close left undone. */
  for_run(&ctx);
  return rc;
}

/* SPDX-License-Identifier: MIT */
/* pool_call.c - a policy wrapping a pool job: attempts on workers, waits on
 * the pool's timers.
 *
 * The flat executor's pull API decides (nres_call_begin / report / resume /
 * cancel); this file only maps its actions onto the pool: ATTEMPT runs the
 * blocking attempt function on the worker that runs the step (an immediate
 * retry runs at once, in the same step); WAIT ends the step and re-queues
 * the same record as a delayed job due at the wait's end
 * (nres_pool_submit_at); DONE hands the record to done_cb. One record per
 * call, reused for every step: nothing is allocated.
 *
 * Why the pool's timers rather than the libuv loop's: a worker never holds
 * a wait (the delayed job is a heap entry; one parked worker sleeps until
 * the earliest due time), C callers need no loop, and a retry does not
 * cross to the loop thread and back. Calls started from the loop
 * (nres_pool_call_start_uv) still end on the loop: only their last step
 * goes through the bridge.
 *
 * Attempts run one at a time (no hedging), bounded only by themselves, as
 * with the sync driver: a worker cannot be preempted.
 */
#include <string.h>

#include "exec/pool_int.h"
#include "core/policy.h"

enum { PC_STEP = 1, PC_WAIT, PC_DONE };

/* Runs on a worker: act until the call must wait or is over. */
static int step(nres_job_t *job) {
  nres_pool_call_t *pc = job->arg;
  nres_time_t now = nres_clock_now();
  nres_action_t act = pc->act_;

  if (pc->phase_ == PC_WAIT)
    act = nres_call_resume(&pc->call, now);
  for (;;) {
    if (act.kind != NRES_DONE &&
        atomic_load_explicit(&pc->cancel_, memory_order_acquire)) {
      act = nres_call_cancel(&pc->call, now);
      continue;
    }
    if (act.kind == NRES_ATTEMPT) {
      nres_attempt_t attempt;
      nres_verdict_t verdict;
      attempt.number = act.attempt;
      attempt.hedge = act.hedge;
      attempt.deadline = act.at;
      attempt.remaining = act.at == NRES_TIME_NEVER
                              ? NRES_TIME_NEVER
                              : nres_time_sub(act.at, now);
      verdict = pc->fn_(pc->arg_, &attempt);
      now = nres_clock_now();
      act = nres_call_report(&pc->call, act.slot, now, verdict);
    } else if (act.kind == NRES_WAIT) {
      if (act.at == NRES_TIME_NEVER) {
        /* Nothing runs beside this attempt, so a wait without an end
         * would never end: stop rather than hang (as the sync driver). */
        act = nres_call_cancel(&pc->call, now);
        pc->status = NRES_ESTATE;
        continue;
      }
      if (act.at <= now) {
        act = nres_call_resume(&pc->call, now);
        continue;
      }
      pc->act_ = act;
      pc->phase_ = PC_WAIT;
      return 0;
    } else {
      pc->act_ = act;
      pc->phase_ = PC_DONE;
      if (pc->status == 0)
        pc->status = nres_stop_error(pc->call.stop);
      if (pc->bridge_ != NULL)
        job->loop = pc->bridge_;   /* the end is reported on the loop */
      return 0;
    }
  }
}

/* The record is free again (on a worker, or on the loop for the last
 * step of a bridged call): queue the next step, or report the end. */
static void step_done(nres_job_t *job) {
  nres_pool_call_t *pc = job->arg;
  int rc;

  if (pc->phase_ != PC_DONE &&
      nres_job_status(job) == NRES_JOB_CANCELED) {
    /* The pool is closing: the step never ran. */
    nres_call_cancel(&pc->call, nres_clock_now());
    pc->phase_ = PC_DONE;
    pc->status = NRES_ECANCELED;
  }
  if (pc->phase_ == PC_WAIT) {
    rc = nres_pool_submit_at(pc->pool_, job, pc->act_.at);
    if (rc == 0)
      return;
    nres_call_cancel(&pc->call, nres_clock_now());
    pc->phase_ = PC_DONE;
    pc->status = rc == NRES_ESTATE ? NRES_ECANCELED : rc;
  }
  if (pc->bridge_ != NULL && job->loop != pc->bridge_) {
    /* Ended on a worker: finish on the loop thread. */
    job->loop = pc->bridge_;
    nres__pool_uv_push(pc->bridge_, job);
    return;
  }
  pc->done_cb_(pc, pc->status);
}

static int start(nres_pool_call_t *pc, nres_pool_t *pool,
                 nres_pool_uv_t *bridge, nres_policy_t *policy,
                 nres_attempt_fn fn, void *arg, nres_pool_call_cb done_cb) {
  void *data;
  int rc;

  if (pc == NULL || pool == NULL || pool->magic_ != NRES__POOL_MAGIC ||
      policy == NULL || policy->private_magic != NRES__POLICY_MAGIC ||
      fn == NULL || done_cb == NULL)
    return NRES_EINVAL;
  data = pc->data;
  memset(pc, 0, sizeof(*pc));
  pc->data = data;
  pc->pool_ = pool;
  pc->bridge_ = bridge;
  pc->policy_ = policy;
  pc->fn_ = fn;
  pc->arg_ = arg;
  pc->done_cb_ = done_cb;
  nres_job_init(&pc->job_, step, pc);
  pc->job_.done_cb = step_done;
  pc->phase_ = PC_STEP;
  /* Even a call refused at once ends through a step, never from here. */
  pc->act_ = nres_call_begin(&pc->call, policy, nres_clock_now());
  if (bridge != NULL)
    nres__pool_uv_account(bridge, +1);
  if ((rc = nres_pool_submit(pool, &pc->job_)) != 0) {
    nres_call_cancel(&pc->call, nres_clock_now());
    if (bridge != NULL)
      nres__pool_uv_account(bridge, -1);
    pc->phase_ = 0;
  }
  return rc;
}

int nres_pool_call_start(nres_pool_call_t *pc, nres_pool_t *pool,
                         nres_policy_t *policy, nres_attempt_fn fn, void *arg,
                         nres_pool_call_cb done_cb) {
  return start(pc, pool, NULL, policy, fn, arg, done_cb);
}

int nres_pool_call_start_uv(nres_pool_call_t *pc, nres_pool_uv_t *bridge,
                            nres_policy_t *policy, nres_attempt_fn fn,
                            void *arg, nres_pool_call_cb done_cb) {
  if (bridge == NULL || bridge->closed_)
    return NRES_EINVAL;
  return start(pc, bridge->pool, bridge, policy, fn, arg, done_cb);
}

void nres_pool_call_cancel(nres_pool_call_t *pc) {
  if (pc != NULL)
    atomic_store_explicit(&pc->cancel_, 1, memory_order_release);
}

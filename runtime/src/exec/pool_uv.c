/* SPDX-License-Identifier: MIT */
/* pool_uv.c - pool jobs completing on a libuv loop, through one uv_async_t.
 *
 * A job submitted with nres_pool_uv_submit runs on a worker like any other;
 * when it is over the worker pushes it on the bridge's lock-free list (a
 * Treiber stack: the loop takes the whole list at once with an exchange, so
 * there is no ABA) and signals the one async handle, only when the list was
 * empty before: a burst of completions costs one wake-up of the loop. On
 * the loop thread the handle's callback reverses the list (completion
 * order) and calls each job's done_cb. libuv coalesces signals, so one
 * handle serves any number of jobs; nothing is allocated per job.
 *
 * The handle is referenced only while jobs are in flight: an idle bridge
 * lets uv_run return, as a finished request would. That bookkeeping is on
 * the loop thread, so submits through a bridge come from the loop thread
 * (nresrun's coroutine scheduler, or libuv callbacks).
 */
#include <string.h>

#include "exec/pool_int.h"

void nres__pool_uv_push(nres_pool_uv_t *bridge, nres_job_t *job) {
  nres_job_t *head = atomic_load_explicit(&bridge->done_, memory_order_relaxed);

  do
    job->next = head;
  while (!atomic_compare_exchange_weak_explicit(&bridge->done_, &head, job,
                                                memory_order_release,
                                                memory_order_relaxed));
  if (head == NULL)
    uv_async_send(&bridge->async_);
}

static void on_async(uv_async_t *async) {
  nres_pool_uv_t *bridge = async->data;
  nres_job_t *list, *ordered = NULL, *job;

  list = atomic_exchange_explicit(&bridge->done_, NULL, memory_order_acquire);
  while (list != NULL) {   /* newest first: reverse */
    job = list;
    list = job->next;
    job->next = ordered;
    ordered = job;
  }
  while (ordered != NULL) {
    job = ordered;
    ordered = job->next;
    bridge->pending_--;
    bridge->completed++;
    if (bridge->pending_ == 0)
      uv_unref((uv_handle_t *) &bridge->async_);
    /* done_cb may submit the job again (pending_ goes up again) */
    nres__job_finish(job);
  }
}

int nres_pool_uv_init(uv_loop_t *loop, nres_pool_t *pool,
                      nres_pool_uv_t *bridge) {
  int rc;

  if (loop == NULL || pool == NULL || bridge == NULL ||
      pool->magic_ != NRES__POOL_MAGIC)
    return NRES_EINVAL;
  memset(bridge, 0, sizeof(*bridge));
  bridge->loop = loop;
  bridge->pool = pool;
  if ((rc = uv_async_init(loop, &bridge->async_, on_async)) != 0)
    return rc == UV_ENOMEM ? NRES_ENOMEM : NRES_EINVAL;
  bridge->async_.data = bridge;
  uv_unref((uv_handle_t *) &bridge->async_);
  return 0;
}

static void account(nres_pool_uv_t *bridge) {
  if (bridge->pending_++ == 0)
    uv_ref((uv_handle_t *) &bridge->async_);
}

static void unaccount(nres_pool_uv_t *bridge) {
  if (--bridge->pending_ == 0)
    uv_unref((uv_handle_t *) &bridge->async_);
}

int nres_pool_uv_submit(nres_pool_uv_t *bridge, nres_job_t *job) {
  int rc;

  if (bridge == NULL || bridge->closed_ || job == NULL || job->done_cb == NULL)
    return NRES_EINVAL;
  if (nres__load(&job->state) != NRES__JOB_IDLE)
    return NRES_EBUSY;
  job->gate = NULL;
  job->loop = bridge;
  account(bridge);
  if ((rc = nres__pool_submit(bridge->pool, job)) != 0) {
    job->loop = NULL;
    unaccount(bridge);
  }
  return rc;
}

int nres_pool_uv_gate_add(nres_pool_uv_t *bridge, nres_gate_t *gate,
                          nres_job_t *job) {
  int rc;

  if (bridge == NULL || bridge->closed_ || gate == NULL ||
      gate->pool != bridge->pool || job == NULL || job->done_cb == NULL)
    return NRES_EINVAL;
  if (nres__load(&job->state) != NRES__JOB_IDLE)
    return NRES_EBUSY;
  account(bridge);
  if ((rc = nres__gate_add(gate, job, bridge)) != 0) {
    job->loop = NULL;
    unaccount(bridge);
  }
  return rc;
}

void nres__pool_uv_account(nres_pool_uv_t *bridge, int delta) {
  if (delta > 0)
    account(bridge);
  else
    unaccount(bridge);
}

static void on_close(uv_handle_t *handle) {
  nres_pool_uv_t *bridge = handle->data;
  if (bridge->close_cb_ != NULL)
    bridge->close_cb_(bridge);
}

int nres_pool_uv_close(nres_pool_uv_t *bridge,
                       void (*close_cb)(nres_pool_uv_t *bridge)) {
  if (bridge == NULL || bridge->closed_)
    return NRES_EINVAL;
  if (bridge->pending_ != 0)
    return NRES_EBUSY;
  bridge->closed_ = 1;
  bridge->close_cb_ = close_cb;
  uv_close((uv_handle_t *) &bridge->async_, on_close);
  return 0;
}

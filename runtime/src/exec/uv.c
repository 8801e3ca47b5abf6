/* SPDX-License-Identifier: MIT */
/* uv.c - the libuv driver: runs the flat executor's actions on a loop.
 *
 * Each action maps onto the request's embedded timers: ATTEMPT arms the
 * slot's attempt timer at the attempt's deadline and calls attempt_cb;
 * WAIT (and an ATTEMPT's hedge time) arms the one resume timer; DONE stops
 * every timer and calls done_cb. Tokens carry a serial number beside the
 * slot, so a completion that arrives after its attempt was timed out or
 * abandoned is recognised, ignored and counted. Nothing is allocated.
 *
 * Re-entrancy: every timer is armed before a user callback runs, and
 * nothing of the request is touched after one returns, so callbacks may
 * complete attempts at once or start the next call.
 */
#include <string.h>

#include "nres/uv.h"
#include "internal.h"
#include "core/policy.h"
#include "exec/call.h"

#define SLOT_MASK 3u
#define SLOT_BITS 2

static uint64_t ms_until(nres_time_t when, nres_time_t now) {
  if (when <= now)
    return 0;
  return (when - now + NRES_MSEC - 1) / NRES_MSEC;   /* never early */
}

static void arm_resume(nres_uv_t *req, nres_time_t until, nres_time_t now);
static void dispatch(nres_uv_t *req, nres_action_t act, nres_time_t now);

static void on_resume(uv_timer_t *timer) {
  nres_uv_t *req = timer->data;
  nres_time_t now = nres_clock_now();

  if (req->done_pending) {
    req->done_pending = 0;
    req->active = 0;
    req->generation++;
    req->done_cb(req, nres_stop_error(req->call.stop));
    return;
  }
  dispatch(req, nres_call_resume(&req->call, now), now);
}

static void on_attempt_timeout(uv_timer_t *timer) {
  nres_uv_t *req = timer->data;
  unsigned slot = (unsigned) (timer - req->attempt_timer);
  uint32_t token = req->token[slot];
  nres_time_t now = nres_clock_now();
  nres_verdict_t v = nres_verdict(NRES_TRANSIENT);

  if (token == 0)
    return;
  /* libuv measures timers from the loop's cached time, which may be
   * behind: a timer can fire before the deadline. Then wait the rest. */
  if (now < req->call.slot[slot].deadline) {
    uv_timer_start(timer, on_attempt_timeout,
                   ms_until(req->call.slot[slot].deadline, now), 0);
    return;
  }
  req->token[slot] = 0;
  if (req->abandon_cb != NULL) {
    uint32_t generation = req->generation;
    req->abandon_cb(req, token);
    /* The callback may have ended this call (cancel, close, a sibling's
     * completion) or even started another: then this timeout is stale. */
    if (!req->active || req->generation != generation)
      return;
  }
  v.flags = NRES_VF_TIMEOUT;
  v.code = NRES_ETIMEDOUT;
  dispatch(req, nres_call_report(&req->call, slot, now, v), now);
}

static void arm_resume(nres_uv_t *req, nres_time_t until, nres_time_t now) {
  if (until == NRES_TIME_NEVER)
    uv_timer_stop(&req->resume_timer);
  else
    uv_timer_start(&req->resume_timer, on_resume, ms_until(until, now), 0);
}

/* The call is over: stop every timer and forget every token before any
 * callback runs, so a callback that completes or starts again sees a
 * finished request. */
static void finish(nres_uv_t *req, nres_action_t act) {
  uint32_t tokens[NRES_MAX_INFLIGHT];
  unsigned slot;

  req->active = 0;
  req->generation++;
  uv_timer_stop(&req->resume_timer);
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    tokens[slot] = req->token[slot];
    req->token[slot] = 0;
    uv_timer_stop(&req->attempt_timer[slot]);
  }
  if (req->abandon_cb == NULL)
    return;
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++)
    if (tokens[slot] != 0 && (act.cancel & (1u << slot)))
      req->abandon_cb(req, tokens[slot]);
}

static void dispatch(nres_uv_t *req, nres_action_t act, nres_time_t now) {
  nres_attempt_t attempt;
  uint32_t token;

  switch (act.kind) {
    case NRES_ATTEMPT:
      req->serial++;
      token = (req->serial << SLOT_BITS) | act.slot;
      if (token >> SLOT_BITS == 0)   /* 0 means "no attempt" */
        token = (++req->serial << SLOT_BITS) | act.slot;
      req->token[act.slot] = token;
      if (act.at != NRES_TIME_NEVER)
        uv_timer_start(&req->attempt_timer[act.slot], on_attempt_timeout,
                       ms_until(act.at, now), 0);
      arm_resume(req, req->call.resume_at, now);   /* a hedge may be due */
      attempt = nres__attempt_of(act, now);
      req->attempt_cb(req, token, &attempt);
      return;
    case NRES_WAIT:
      arm_resume(req, act.at, now);
      return;
    default:
      finish(req, act);
      req->done_cb(req, nres_stop_error(act.stop));
      return;
  }
}

int nres_uv_init(uv_loop_t *loop, nres_uv_t *req) {
  unsigned slot;

  if (loop == NULL || req == NULL)
    return NRES_EINVAL;
  memset(req, 0, sizeof(*req));
  req->loop = loop;
  uv_timer_init(loop, &req->resume_timer);
  req->resume_timer.data = req;
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    uv_timer_init(loop, &req->attempt_timer[slot]);
    req->attempt_timer[slot].data = req;
  }
  return 0;
}

int nres_uv_start(nres_uv_t *req, nres_policy_t *policy, nres_time_t inbound,
                  nres_uv_attempt_cb attempt_cb, nres_uv_abandon_cb abandon_cb,
                  nres_uv_done_cb done_cb) {
  nres_time_t now;
  nres_action_t act;

  if (req == NULL || policy == NULL || attempt_cb == NULL || done_cb == NULL ||
      policy->private_magic != NRES__POLICY_MAGIC || req->loop == NULL ||
      req->closed)
    return NRES_EINVAL;
  if (req->active)
    return NRES_EBUSY;
  req->attempt_cb = attempt_cb;
  req->abandon_cb = abandon_cb;
  req->done_cb = done_cb;
  req->active = 1;
  req->generation++;
  now = nres_clock_now();
  act = nres_call_begin_within(&req->call, policy, now, inbound);
  if (act.kind == NRES_DONE) {
    /* Never call back from inside start: report from the loop. */
    req->done_pending = 1;
    uv_timer_start(&req->resume_timer, on_resume, 0, 0);
    return 0;
  }
  dispatch(req, act, now);
  return 0;
}

int nres_uv_complete(nres_uv_t *req, uint32_t token, nres_verdict_t verdict) {
  unsigned slot = token & SLOT_MASK;
  nres_time_t now;

  if (!req->active || token == 0 || req->token[slot] != token) {
    req->late++;
    if (req->call.policy != NULL &&
        (req->call.policy->private_flags & NRES__F_TELEMETRY))
      nres__add(&req->call.policy->n_late, 1);
    return NRES_ECANCELED;
  }
  req->token[slot] = 0;
  uv_timer_stop(&req->attempt_timer[slot]);
  now = nres_clock_now();
  dispatch(req, nres_call_report(&req->call, slot, now, verdict), now);
  return 0;
}

int nres_uv_cancel(nres_uv_t *req) {
  nres_time_t now;

  if (req == NULL || !req->active)
    return NRES_ESTATE;
  if (req->done_pending) {   /* already over; deliver it now */
    req->done_pending = 0;
    uv_timer_stop(&req->resume_timer);
    req->active = 0;
    req->generation++;
    req->done_cb(req, nres_stop_error(req->call.stop));
    return 0;
  }
  now = nres_clock_now();
  dispatch(req, nres_call_cancel(&req->call, now), now);
  return 0;
}

static void on_timer_closed(uv_handle_t *handle) {
  nres_uv_t *req = handle->data;

  if (--req->closing == 0 && req->close_cb != NULL)
    req->close_cb(req);
}

void nres_uv_close(nres_uv_t *req, nres_uv_close_cb close_cb) {
  unsigned slot;

  if (req->closed)
    return;   /* closing twice would close the timers twice */
  req->closed = 1;
  if (req->active) {
    nres_action_t act = nres_call_cancel(&req->call, nres_clock_now());
    req->done_pending = 0;
    finish(req, act);
  }
  req->close_cb = close_cb;
  req->closing = 1 + NRES_MAX_INFLIGHT;
  uv_close((uv_handle_t *) &req->resume_timer, on_timer_closed);
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++)
    uv_close((uv_handle_t *) &req->attempt_timer[slot], on_timer_closed);
}

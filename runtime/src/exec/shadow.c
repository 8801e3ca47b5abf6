/* SPDX-License-Identifier: MIT */
/* shadow.c - a candidate policy in the shadow of a live one.
 *
 * A policy with a shadow (nres_policy_shadow) asks its candidate, at each
 * of a call's decisions, what the candidate would have done, and the
 * candidate counts it in its own counters; nothing it decides reaches the
 * call. The candidate's shared state is its own (its breaker, budget,
 * limiters, estimator), fed the live outcomes of the attempts it would
 * have made, so it evolves as a live copy of it would on the same
 * outcomes. Per call it keeps a few bytes in nres_call_t (shadow*): whether
 * it still follows the call, the attempt it follows, its attempts, its
 * breaker permit, its bulkhead slot and retry token.
 *
 * Where the candidate would have waited (a rate limiter's refusal within
 * its limit_wait, a full bulkhead with a queue) it is taken to have been
 * admitted after the wait; a throttle refusal ends its call (a live copy
 * would wait a throttled backoff and ask again); hedges of the live policy
 * are not followed, and a hedge the candidate would have sent is counted
 * when a followed attempt outlived its hedge delay. A call the live policy
 * ends while the candidate still follows it counts the live stop.
 *
 * Called from exec/call.c only for policies with NRES__F_SHADOW; nothing
 * here allocates.
 */
#include "internal.h"
#include "core/breaker.h"
#include "core/policy.h"
#include "core/shard.h"
#include "core/throttle.h"
#include "exec/call.h"
#include "exec/shadow.h"

/* A generator for the candidate's draws (throttle, jitter), from its own
 * seed and sequence: the live call's generator is the live policy's. */
static nres_rng_t *shadow_rng(nres_policy_t *c, nres_rng_t *rng) {
  uint64_t seq = nres__add(&c->sequence, 1);

  nres_rng_seed(rng, c->seed ^ (seq * 0x9e3779b97f4a7c15ull));
  return rng;
}

/* The candidate's end of a call: its stop counted, whatever it still
 * holds given back. */
static void finish(nres_call_t *call, nres_policy_t *c, int stop) {
  if (call->shadow & NRES__SHADOW_HELD)
    nres_bulkhead_release(c->bulkhead, 0, -1);
  if (call->shadow_permit)
    nres_breaker_release(c->breaker, call->shadow_permit);
  if (call->shadow & NRES__SHADOW_CHARGED)
    nres_budget_refund(c->budget);
  call->shadow_permit = 0;
  call->shadow = 0;
  if (stop == NRES_STOP_OK)
    nres__add(&c->n_ok[0].stops, 1);
  else
    nres__add(&c->n_stops[stop], 1);
}

/* The candidate would have refused the call here (source: NRES_REJECT_*). */
static void refuse(nres_call_t *call, nres_policy_t *c, int source,
                   int stop) {
  nres__add(&c->n_rejects[source], 1);
  nres__add(&c->n_class_rejects[call->criticality], 1);
  finish(call, c, stop);
}

void nres__shadow_begin(nres_call_t *call) {
  call->shadow = NRES__SHADOW_FOLLOW;
  call->shadow_slot = 0;
  call->shadow_attempts = 0;
  call->shadow_permit = 0;
}

void nres__shadow_admit(nres_call_t *call, nres_time_t now, int hedge) {
  nres_policy_t *c = call->policy->shadow;
  nres_time_t retry_after;
  uint32_t permit = 0;
  nres_rng_t rng;

  if (!(call->shadow & NRES__SHADOW_FOLLOW) || hedge)
    return;
  if (c->throttle != NULL && nres__throttle_odds(c->throttle, now) != 0 &&
      nres_throttle_acquire(c->throttle, now, shadow_rng(c, &rng)) != 0)
    return refuse(call, c, NRES_REJECT_THROTTLE, NRES_STOP_THROTTLED);
  if (c->ratelimit != NULL &&
      nres_ratelimit_acquire_class(c->ratelimit, now, call->criticality,
                                   &retry_after) != 0 &&
      retry_after > c->limit_wait)
    return refuse(call, c, NRES_REJECT_RATE, NRES_STOP_LIMITED);
  if (c->bulkhead != NULL) {
    if (nres_bulkhead_acquire_class(c->bulkhead, 0, call->criticality) == 0)
      call->shadow |= NRES__SHADOW_HELD;
    else if (c->bulkhead->config.queue == 0)
      return refuse(call, c, NRES_REJECT_CONCURRENCY, NRES_STOP_LIMITED);
  }
  if (c->breaker != NULL && nres__breaker_acquire(c->breaker, now, &permit))
    return refuse(call, c, NRES_REJECT_BREAKER, NRES_STOP_CIRCUIT);
  if (call->shadow_attempts > 0) {   /* a retry it would have made */
    nres__add(&c->n_retries, 1);
    call->shadow &= (uint8_t) ~NRES__SHADOW_CHARGED;   /* the token is used */
  }
  call->shadow_attempts++;
  call->shadow_slot = 0;   /* a first attempt or a retry: slot 0 */
  call->shadow_permit = permit;
  call->shadow |= NRES__SHADOW_RUNNING;
}

/* The followed attempt's outcome into the candidate's shared state, as
 * the executor's record does for a live policy. */
static void learn(nres_call_t *call, nres_policy_t *c, nres_time_t now,
                  nres_time_t latency, const nres_verdict_t *v) {
  int kind = v->kind;
  int self = (v->flags & NRES_VF_SELF) || kind == NRES_CANCELED;
  nres_rng_t rng;

  if (call->shadow & NRES__SHADOW_HELD) {
    nres_bulkhead_release(c->bulkhead, latency, self ? -1 : kind);
    call->shadow &= (uint8_t) ~NRES__SHADOW_HELD;
  }
  if (c->breaker != NULL && (!self || call->shadow_permit)) {
    int outcome = self                     ? NRES_BREAKER_IGNORE
                  : kind == NRES_TRANSIENT ? NRES_BREAKER_FAILURE
                                           : NRES_BREAKER_SUCCESS;
    int slow = 0;
    if (c->private_flags & NRES__F_SLOW) {
      nres_time_t threshold = c->slow_threshold;
      if (threshold == 0)
        threshold = nres__call_quantile(c, now, &c->quantile_slow);
      slow = threshold != 0 && latency > threshold;
    }
    nres_rng_seed(&rng, c->seed ^ now);   /* as a live call not seeded */
    nres__breaker_record(c->breaker, now, call->shadow_permit, outcome, slow,
                         &rng);
    call->shadow_permit = 0;
  }
  if (c->throttle != NULL && !self)
    nres__throttle_record(c->throttle, nres__shard_if_taken(), now,
                          kind != NRES_THROTTLED);
  if (kind == NRES_OK && c->estimator != NULL)
    nres_estimator_record(c->estimator, now, latency);
  if (c->private_flags & NRES__F_HEDGE) {
    nres_time_t delay = c->hedge.delay;
    if (!self)
      nres_window_add(&c->hedge.window, now, kind == NRES_TRANSIENT, 0);
    if (delay == 0)
      delay = nres__call_quantile(c, now, &c->quantile_hedge);
    if (delay != NRES_TIME_NEVER && latency > delay)
      nres__add(&c->n_hedges, 1);   /* it would have hedged this one */
  }
}

/* Would the candidate retry after this failure? The stop it would have
 * ended the call with, or NRES_STOP_NONE (it retries: its token taken). */
static int would_retry(nres_call_t *call, nres_policy_t *c, nres_time_t now,
                       const nres_verdict_t *v) {
  nres_time_t deadline = c->deadline ? nres_time_add(call->start, c->deadline)
                                     : NRES_TIME_NEVER;
  nres_backoff_state_t state;
  nres_time_t delay = 0;
  nres_rng_t rng;

  if (call->shadow_attempts >= c->attempts)
    return NRES_STOP_ATTEMPTS;
  if (now >= deadline)
    return NRES_STOP_DEADLINE;
  if (c->backoff.kind != NRES_BACKOFF_NONE ||
      (v->flags & NRES_VF_RETRY_AFTER)) {
    nres_backoff_state_reset(&state);
    delay = nres_backoff_next(&c->backoff, &state, call->shadow_attempts, v,
                              (c->private_flags & NRES__F_DRAWS)
                                  ? shadow_rng(c, &rng) : NULL);
  }
  if (delay > 0 && nres_time_add(now, delay) >= deadline)
    return NRES_STOP_DEADLINE;
  if (c->budget != NULL && !(v->flags & NRES_VF_SELF)) {
    if (nres_budget_spend_class(c->budget, now, call->criticality) != 0)
      return NRES_STOP_BUDGET;
    call->shadow |= NRES__SHADOW_CHARGED;
  }
  return NRES_STOP_NONE;
}

void nres__shadow_report(nres_call_t *call, unsigned slot, nres_time_t now,
                         const nres_verdict_t *v) {
  nres_policy_t *c = call->policy->shadow;
  int kind = v->kind, stop;

  if (!(call->shadow & NRES__SHADOW_RUNNING) || slot != call->shadow_slot) {
    /* Another attempt (a hedge) whose answer ends the live call: the
     * candidate still following counts that end. */
    if ((call->shadow & NRES__SHADOW_FOLLOW) && kind != NRES_TRANSIENT &&
        kind != NRES_THROTTLED)
      finish(call, c, kind == NRES_OK          ? NRES_STOP_OK
                      : kind == NRES_CANCELED  ? NRES_STOP_CANCELED
                                               : NRES_STOP_PERMANENT);
    return;
  }
  call->shadow &= (uint8_t) ~NRES__SHADOW_RUNNING;
  learn(call, c, now, nres_time_sub(now, call->slot[slot].start), v);
  if (kind != NRES_OK)
    nres__add(&c->n_verdicts[kind], 1);
  switch (kind) {
    case NRES_OK:
      if (c->budget != NULL && !(v->flags & NRES_VF_SELF))
        nres_budget_deposit(c->budget);
      return finish(call, c, NRES_STOP_OK);
    case NRES_CANCELED:
      return finish(call, c, NRES_STOP_CANCELED);
    case NRES_PERMANENT:
      return finish(call, c, NRES_STOP_PERMANENT);
  }
  stop = would_retry(call, c, now, v);
  if (stop == NRES_STOP_BUDGET)
    return refuse(call, c, NRES_REJECT_BUDGET, stop);
  if (stop != NRES_STOP_NONE)
    finish(call, c, stop);
}

void nres__shadow_done(nres_call_t *call, int stop) {
  if (call->shadow & NRES__SHADOW_FOLLOW)
    finish(call, call->policy->shadow, stop);
}

/* SPDX-License-Identifier: MIT */
/* call.c - the flat executor: one per-call state machine, driven by pulls.
 *
 * Every driver (sync, libuv, Lua, nginx) runs this one machine, so they
 * cannot drift. The machine never runs work, sleeps or reads a clock: it is
 * told the time and what happened, and answers with the next action -
 * ATTEMPT (run one, bounded by a deadline), WAIT (until a time, or until an
 * attempt in flight ends) or DONE (with the reason).
 *
 * Order of operations, per attempt: throttle -> rate limiter -> bulkhead (queue) ->
 * breaker admission -> attempt ceiling = min(attempt timeout, measured
 * ceiling, time left) -> run -> classify (the driver) -> record (log,
 * bulkhead, breaker, estimator, hedge window, telemetry) -> decide: OK
 * deposits and ends; CANCELED and PERMANENT end; attempts used up ends;
 * deadline spent ends; backoff that would end past the deadline ends;
 * budget refusal ends; otherwise wait the backoff and go round again.
 * Hedges are extra attempts started while others run; they spend budget,
 * count as attempts, and the losers are abandoned, never classified.
 *
 * Nothing here allocates. Every permit taken (probe, bulkhead slot, queue
 * place) is given back on every exit path: report, win of another attempt,
 * cancel.
 */
#include <string.h>

#include "internal.h"
#include "core/breaker.h"
#include "core/estimator.h"
#include "core/policy.h"
#include "core/shard.h"
#include "core/throttle.h"
#include "exec/call.h"
#include "exec/shadow.h"


#define NRES__ABANDONED 0xff   /* log flags of an attempt never classified */

static NRES__COLD void emit(nres_call_t *call, int type, int value,
                            unsigned attempt, nres_time_t now,
                            nres_time_t duration) {
  nres_event_t ev;

  ev.type = (uint8_t) type;
  ev.value = (uint8_t) value;
  ev.attempt = (uint16_t) attempt;
  ev.reserved_ = 0;
  ev.now = now;
  ev.duration = duration;
  ev.call = call;
  call->policy->on_event(&ev, call->policy->event_data);
}

/* An event of `call`, whose policy is `policy` (call->policy, passed in
 * a register where the caller has it: a call's byte fields may alias it,
 * so after storing one the compiler would load call->policy again). */
#define EMIT(policy, call, ...)                                              \
  do {                                                                       \
    if ((policy)->on_event != NULL)                                          \
      emit((call), __VA_ARGS__);                                             \
  } while (0)

#define COUNT(policy, field)                                                 \
  do {                                                                       \
    if ((policy)->private_flags & NRES__F_TELEMETRY)                         \
      nres__add(&(policy)->field, 1);                                        \
  } while (0)

static nres_rng_t *call_rng(nres_call_t *call) {
  if (!call->seeded) {
    uint64_t seq = nres__add(&call->policy->sequence, 1);
    nres_rng_seed(&call->rng, call->policy->seed ^ (seq * 0x9e3779b97f4a7c15ull));
    call->seeded = 1;
  }
  return &call->rng;
}

/* The breaker only draws a random number when it trips, so it gets the
 * call's generator if seeded, else one seeded from the time: no shared
 * write on the path of every outcome. */
static nres_rng_t *breaker_rng(nres_call_t *call, nres_time_t now,
                               nres_rng_t *scratch) {
  if (call->seeded)
    return &call->rng;
  nres_rng_seed(scratch, call->policy->seed ^ now);
  return scratch;
}

static nres_time_t scaled(uint64_t value, double factor) {
  return nres__time_from_double((double) value * factor);
}

/* The decisions the executor takes from the latency estimator, cached in
 * the policy and recomputed at most every NRES__QUANTILE_REFRESH (one
 * caller wins the refresh, the rest read). Each cached word is whole on
 * its own, scaled and floored already, so a reader needs one load:
 * quantile_ceiling the measured attempt ceiling (NRES_TIME_NEVER until
 * min_samples), quantile_slow the slow threshold (0 until min_samples),
 * quantile_hedge the hedge delay (NRES_TIME_NEVER until
 * hedge.min_samples); quantile_fast the throttle's fast-failure bound (0
 * until min_samples or without one); quantile_samples the sample count
 * they came from. */
static NRES__COLD void refresh_quantiles(nres_policy_t *p, nres_time_t now,
                                         uint64_t next) {
  uint64_t samples;
  nres_time_t q;

  if (!nres__cas(&p->quantile_next, &next,
                 nres_time_add(now, NRES__QUANTILE_REFRESH)))
    return;
  q = nres_estimator_quantile(p->estimator, now, p->ceiling_quantile,
                              &samples);
  if (samples >= p->min_samples) {
    uint64_t median = nres_estimator_quantile(p->estimator, now, 0.5, NULL);
    q = scaled(q, p->ceiling_factor);
    nres__store(&p->quantile_ceiling,
                q < p->ceiling_floor ? p->ceiling_floor : q);
    nres__store(&p->quantile_slow, scaled(median, p->slow_factor));
    nres__store(&p->quantile_fast,
                p->throttle != NULL ? scaled(median, p->throttle->fast_failure)
                                    : 0);
  } else {
    nres__store(&p->quantile_ceiling, NRES_TIME_NEVER);
    nres__store(&p->quantile_slow, 0);
    nres__store(&p->quantile_fast, 0);
  }
  nres__store(&p->quantile_hedge,
              samples >= p->hedge.min_samples
                  ? nres_estimator_quantile(p->estimator, now,
                                            p->hedge.quantile, NULL)
                  : NRES_TIME_NEVER);
  nres__store(&p->quantile_samples, samples);
}

/* One of the cached words above (&p->quantile_*), refreshed first if
 * stale. */
static inline uint64_t quantile(nres_policy_t *p, nres_time_t now,
                                _Atomic uint64_t *word) {
  uint64_t next = nres__load(&p->quantile_next);

  if (__builtin_expect(now >= next, 0))
    refresh_quantiles(p, now, next);
  return nres__load(word);
}

NRES__COLD uint64_t nres__call_quantile(nres_policy_t *p, nres_time_t now,
                                        NRES_ATOMIC(uint64_t) *word) {
  return quantile(p, now, word);
}

/* ----------------------------------------------------------- bookkeeping */

static nres_attempt_rec_t *log_of(nres_call_t *call, unsigned number) {
  return &call->log[(number - 1) % NRES_LOG_CAP];
}

/* Give back what an attempt in flight holds, without an outcome. */
static void abandon(nres_call_t *call, unsigned slot, nres_time_t now) {
  nres_policy_t *p = call->policy;

  if (call->slot[slot].held)
    nres_bulkhead_release(p->bulkhead, 0, -1);
  if (call->slot[slot].permit)
    nres_breaker_release(p->breaker, call->slot[slot].permit);
  call->slot[slot].held = 0;
  call->slot[slot].permit = 0;
  call->inflight &= (uint8_t) ~(1u << slot);
  log_of(call, call->slot[slot].number)->end = now;
  log_of(call, call->slot[slot].number)->flags = NRES__ABANDONED;
  COUNT(p, n_abandoned);
}

/* What a call still holds when it ends: attempts in flight (a hedge race's
 * losers, a cancel), a bulkhead queue place, a budget token for a retry
 * that never started. Given back here, off the path of a plain end. */
static NRES__COLD void release_all(nres_call_t *call, nres_time_t now,
                                   int stop) {
  nres_policy_t *p = call->policy;
  unsigned slot;

  if (call->charged) {   /* the retry it paid for never started */
    nres_budget_refund(p->budget);
    call->charged = 0;
  }
  for (slot = 0; call->inflight; slot++)
    if (call->inflight & (1u << slot)) {
      /* A hedge race's loser has run at least this long: a censored
       * sample, without which the estimator would only see the attempts
       * fast enough to win, and the hedge quantile would sink (more
       * hedges than the quantile says). */
      if (stop == NRES_STOP_OK && p->estimator != NULL)
        nres_estimator_record(p->estimator, now,
                              nres_time_sub(now, call->slot[slot].start));
      abandon(call, slot, now);
    }
  if (call->queued) {
    nres_bulkhead_leave(p->bulkhead, call->ticket);
    call->queued = 0;
  }
  if (p->private_flags & NRES__F_SHADOW)
    nres__shadow_done(call, stop);
}

/* A failed call of a policy with a fallback: marked for the driver. */
static NRES__COLD void mark_fallback(nres_call_t *call) {
  call->fallback = 1;
  COUNT(call->policy, n_fallbacks);
}

/* A call's end, in its own fields. */
static NRES__HOT void mark_done(nres_call_t *call, int stop) {
  call->phase = NRES__PHASE_DONE;
  call->stop = (uint8_t) stop;
  call->resume_at = NRES_TIME_NEVER;
}

/* A call's end in the counters: the stop (an OK one to the thread's
 * shard k, n_ok[].stops; k is read only then), and the call's retries in
 * one add. */
static NRES__HOT void count_end(nres_policy_t *p, const nres_call_t *call,
                                int stop, unsigned k) {
  if (p->private_flags & NRES__F_TELEMETRY) {
    if (stop == NRES_STOP_OK)
      nres__add(&p->n_ok[k].stops, 1);
    else
      nres__add(&p->n_stops[stop], 1);
    if (call->retries)
      nres__add(&p->n_retries, call->retries);   /* one add a call */
  }
}

static NRES__HOT nres_action_t done(nres_call_t *call, nres_time_t now,
                                    int stop) {
  nres_policy_t *p = call->policy;
  nres_action_t a;

  a.kind = NRES_DONE;
  a.slot = 0;
  a.hedge = 0;
  a.stop = (uint8_t) stop;
  a.cancel = call->inflight;
  a.fallback = 0;
  a.attempt = call->attempts;
  a.at = NRES_TIME_NEVER;
  if (__builtin_expect(call->inflight | call->queued | call->charged, 0))
    release_all(call, now, stop);
  mark_done(call, stop);
  if (__builtin_expect(stop != NRES_STOP_OK, 0) && p->fallback &&
      stop != NRES_STOP_CANCELED && stop != NRES_STOP_CALLBACK) {
    mark_fallback(call);
    a.fallback = 1;
  }
  count_end(p, call, stop,
            (p->private_flags & NRES__F_TELEMETRY) && stop == NRES_STOP_OK
                ? nres__shard()
                : 0);
  EMIT(p, call, NRES_EV_DONE, stop, call->attempts, now,
       nres_time_sub(now, call->start));
  return a;
}

/* done, for a call that ends before an attempt's report could end it
 * (a refusal, attempts or time used up, a cancel): a shadow candidate
 * still following it counts the stop (exec/shadow.c; the ends an attempt's
 * report makes, it sees at the report). Apart from done, whose every extra
 * test the success path pays. */
static NRES__COLD nres_action_t end_early(nres_call_t *call, nres_time_t now,
                                          int stop) {
  if (call->policy->private_flags & NRES__F_SHADOW)
    nres__shadow_done(call, stop);
  return done(call, now, stop);
}

static nres_action_t reject(nres_call_t *call, nres_time_t now, int source,
                            int stop) {
  COUNT(call->policy, n_rejects[source]);
  COUNT(call->policy, n_class_rejects[call->criticality]);
  EMIT(call->policy, call, NRES_EV_REJECT, source, call->attempts, now, 0);
  return end_early(call, now, stop);
}

static nres_action_t wait_until(nres_call_t *call, int phase,
                                nres_time_t until) {
  nres_action_t a;

  memset(&a, 0, sizeof(a));
  a.kind = NRES_WAIT;
  a.at = until;
  call->phase = (uint8_t) phase;
  call->resume_at = until;
  return a;
}

/* What the call is waiting for right now (for late reports). */
static nres_action_t pending(nres_call_t *call) {
  nres_action_t a;

  if (call->phase == NRES__PHASE_DONE || call->phase == NRES__PHASE_IDLE) {
    memset(&a, 0, sizeof(a));
    a.kind = NRES_DONE;
    a.stop = call->stop;
    a.fallback = call->fallback;
    a.at = NRES_TIME_NEVER;
    return a;
  }
  return wait_until(call, call->phase, call->resume_at);
}

static unsigned inflight_count(const nres_call_t *call) {
  return (unsigned) __builtin_popcount(call->inflight);
}

/* When the next hedge may start, or NRES_TIME_NEVER. */
static nres_time_t next_hedge(nres_call_t *call, nres_time_t now) {
  nres_policy_t *p = call->policy;
  nres_time_t delay = p->hedge.delay;

  if (!(p->private_flags & NRES__F_HEDGE) || call->throttled ||
      inflight_count(call) >= p->hedge.max || call->attempts >= p->attempts)
    return NRES_TIME_NEVER;
  if (delay == 0)
    delay = quantile(p, now, &p->quantile_hedge);   /* NEVER: too few samples */
  delay = nres_time_add(now, delay);
  return delay < call->deadline ? delay : NRES_TIME_NEVER;
}

static int hedge_suppressed(nres_call_t *call, nres_time_t now) {
  const nres_hedge_t *h = &call->policy->hedge;
  uint32_t calls, failures, slow;

  nres_window_sum(&h->window, now, &calls, &failures, &slow);
  return calls >= h->min_samples && calls > 0 &&
         (double) failures >= h->suppress_ratio * (double) calls;
}

/* A budget token for a retry or a hedge, by the call's class (a
 * sheddable call leaves the lower half of the bucket to the others). */
static int spend(nres_call_t *call, nres_time_t now) {
  return nres_budget_spend_class(call->policy->budget, now, call->criticality);
}

/* The rate limiter's admission, by the call's class (a sheddable call
 * leaves half of the burst to the others). */
static int rate_refuses(nres_call_t *call, nres_time_t now,
                        nres_time_t *retry_after) {
  return nres_ratelimit_acquire_class(call->policy->ratelimit, now,
                                      call->criticality, retry_after) != 0;
}

/* ------------------------------------------------------------- admission */

/* A hedge that cannot start: keep waiting for the attempts in flight. */
static nres_action_t skip(nres_call_t *call, int *skipped) {
  *skipped = 1;
  return wait_until(call, NRES__PHASE_RUNNING, NRES_TIME_NEVER);
}

static NRES__COLD void hedge_started(nres_call_t *call, unsigned number,
                                     nres_time_t now) {
  call->hedges++;
  COUNT(call->policy, n_hedges);
  EMIT(call->policy, call, NRES_EV_HEDGE, 0, number, now, 0);
}

/* The slot and log record of attempt `number`, started at `now`. */
static NRES__HOT void fill_slot(nres_call_t *call, unsigned slot,
                                unsigned number, nres_time_t now, int hedge,
                                uint32_t permit, nres_time_t ceiling,
                                int held) {
  call->slot[slot].start = now;
  call->slot[slot].deadline = ceiling;
  call->slot[slot].permit = permit;
  call->slot[slot].number = (uint16_t) number;
  call->slot[slot].hedge = (uint8_t) hedge;
  call->slot[slot].held = (uint8_t) held;
  *log_of(call, number) = (nres_attempt_rec_t) {
    now, 0, (uint16_t) number, (uint8_t) slot, (uint8_t) hedge, 0, 0, 0
  };
}

/* The ATTEMPT action of a started attempt. */
static NRES__HOT nres_action_t attempt_action(unsigned slot, int hedge,
                                              unsigned number,
                                              nres_time_t ceiling) {
  nres_action_t a;

  a.kind = NRES_ATTEMPT;
  a.slot = (uint8_t) slot;
  a.hedge = (uint8_t) hedge;
  a.stop = 0;
  a.cancel = 0;
  a.fallback = 0;
  a.attempt = (uint16_t) number;
  a.at = ceiling;
  return a;
}

/* Start an admitted attempt in the first free slot, bounded by ceiling. */
static NRES__HOT nres_action_t start_attempt(nres_call_t *call, nres_time_t now,
                                   int hedge, uint32_t permit,
                                   nres_time_t ceiling) {
  nres_policy_t *p = call->policy;
  unsigned slot, number;

  /* A first attempt or a retry starts with none in flight (begin, retry
   * and resume after a wait all follow the end of the last): slot 0. */
  slot = hedge ? (unsigned) __builtin_ctz(~(unsigned) call->inflight) : 0;
  number = ++call->attempts;
  call->inflight |= (uint8_t) (1u << slot);
  fill_slot(call, slot, number, now, hedge, permit, ceiling,
            p->bulkhead != NULL);
  if (__builtin_expect(hedge, 0)) {
    hedge_started(call, number, now);
  } else if (number > 1) {
    call->charged = 0;   /* the token is now used */
    call->retries++;     /* counted in n_retries when the call ends */
  }

  call->phase = NRES__PHASE_RUNNING;
  call->resume_at = (p->private_flags & NRES__F_HEDGE) ? next_hedge(call, now)
                                                      : NRES_TIME_NEVER;
  return attempt_action(slot, hedge, number, ceiling);
}

/* An attempt's deadline: the call's, the attempt timeout's, the measured
 * ceiling's, whichever comes first. refresh: 0 when the caller has seen
 * the cached quantiles fresh (quantile_next ahead of now), so that this
 * calls nothing. */
static NRES__HOT nres_time_t bounded_ceiling(nres_policy_t *p, nres_time_t now,
                                             nres_time_t deadline,
                                             int refresh) {
  nres_time_t bound;

  if (!(p->private_flags & NRES__F_BOUNDED))
    return deadline;
  /* The shorter of the two bounds, then one saturating add (the same as
   * the earlier of now + each: the add only grows with what is added). */
  bound = p->attempt_timeout ? p->attempt_timeout : NRES_TIME_NEVER;
  if (p->private_flags & NRES__F_CEILING)   /* NEVER: too few samples */
    bound = nres_time_min(bound, refresh ? quantile(p, now, &p->quantile_ceiling)
                                         : nres__load(&p->quantile_ceiling));
  return nres_time_min(deadline, nres_time_add(now, bound));
}

static NRES__HOT nres_time_t attempt_ceiling(nres_policy_t *p, nres_time_t now,
                                             nres_time_t deadline) {
  return bounded_ceiling(p, now, deadline, 1);
}

/* Admit and start an attempt. For a hedge (hedge = 1) a refusal is not the
 * end of the call: the running attempts go on, so *skipped is set and the
 * caller keeps waiting. */
/* The admission gates before the breaker: rate limiter, then bulkhead
 * (with its queue). 1: the attempt may go on to the breaker. 0: *refusal
 * is what happens instead. */
static int pass_limits(nres_call_t *call, nres_time_t now, int hedge,
                       int *skipped, nres_action_t *refusal) {
  nres_policy_t *p = call->policy;
  nres_time_t retry_after;
  nres_time_t wake;

  /* A call queued for the bulkhead was admitted by the rate limiter
   * already: polling again must not take more admissions. */
  if (p->ratelimit != NULL && !call->queued &&
      rate_refuses(call, now, &retry_after)) {
    if (hedge)
      return *refusal = skip(call, skipped), 0;
    /* limit_wait is the whole wait of one admission, however many times
     * the call loses the token it waited for to another: its first
     * refusal sets the end (in queue_end, unused until a queue place is
     * taken, which only happens once the limiter has admitted). */
    if (call->phase != NRES__PHASE_ADMIT)
      call->queue_end = nres_time_add(now, p->limit_wait);
    wake = nres_time_add(now, retry_after);
    if (wake <= call->queue_end && wake < call->deadline)
      return *refusal = wait_until(call, NRES__PHASE_ADMIT, wake), 0;
    return *refusal = reject(call, now, NRES_REJECT_RATE, NRES_STOP_LIMITED), 0;
  }

  if (p->bulkhead != NULL) {
    if ((call->queued
             ? nres_bulkhead_turn(p->bulkhead, call->criticality,
                                  call->ticket, now)
             : nres_bulkhead_acquire_class(p->bulkhead, 0,
                                           call->criticality)) != 0) {
      const nres_bulkhead_config_t *bc = &p->bulkhead->config;
      if (hedge)
        return *refusal = skip(call, skipped), 0;
      if (!call->queued) {
        if (bc->queue == 0 ||
            nres_bulkhead_join(p->bulkhead, call->criticality, now,
                               &call->ticket) != 0)
          return *refusal = reject(call, now, NRES_REJECT_CONCURRENCY,
                                   NRES_STOP_LIMITED), 0;
        call->queued = 1;
        call->queue_end = nres_time_min(nres_time_add(now, bc->queue_timeout),
                                        call->deadline);
      }
      wake = nres_time_min(nres_time_add(now, bc->poll), call->queue_end);
      /* A next look past the end of time (a huge poll, no deadline, no
       * queue timeout) would never come: give up now, as a backoff past
       * the deadline does. */
      if (now >= call->queue_end || wake == NRES_TIME_NEVER)
        return *refusal = reject(call, now, NRES_REJECT_CONCURRENCY,
                                 NRES_STOP_LIMITED), 0;
      return *refusal = wait_until(call, NRES__PHASE_ADMIT, wake), 0;
    }
    call->queued = 0;   /* nres_bulkhead_turn took it out of the queue */
  }

  return 1;
}

/* The breaker refused an attempt that holds a bulkhead slot if any. */
static NRES__COLD nres_action_t breaker_refused(nres_call_t *call,
                                                nres_time_t now, int hedge,
                                                int *skipped) {
  if (call->policy->bulkhead != NULL)
    nres_bulkhead_release(call->policy->bulkhead, 0, -1);
  if (hedge)
    return skip(call, skipped);
  return reject(call, now, NRES_REJECT_BREAKER, NRES_STOP_CIRCUIT);
}

/* Does the throttle refuse this attempt? No draw while its odds are 0,
 * nor for a call back from waiting for a limiter or a queue place (it
 * drew before it waited). */
static inline int throttle_refuses(nres_call_t *call, nres_time_t now) {
  nres_throttle_t *t = call->policy->throttle;

  if (__builtin_expect(nres__throttle_odds(t, now) == 0, 1) ||
      call->phase == NRES__PHASE_ADMIT)
    return 0;
  return nres_throttle_acquire(t, now, call_rng(call)) != 0;
}

/* The throttle refused an attempt (nothing is held yet): a hedge is
 * skipped. A first attempt or a retry is refused as the dependency would
 * have refused it, so the call does what a throttled answer makes it do:
 * while its tries (attempts and earlier local refusals) leave one more, it
 * waits a throttled backoff and asks again (call->deferred counts these),
 * so a call refused just before the dependency has room again is served
 * then instead of failed (bench/README.md, the tournament: the throttle's
 * odds trail the dependency's recovery by a few windows). Its last try, or
 * one whose backoff would end past the deadline, ends it "throttled
 * locally", as the budget's refusal ends it "budget exhausted" (a retry's
 * token goes back; the last attempt's verdict stays in call->last). The
 * dependency saw nothing: no budget is spent, and the breaker and the
 * throttle's counts are as the refusal left them. With
 * policy->throttle_fail every refusal ends the call so, at once. */
static NRES__COLD nres_action_t throttle_refused(nres_call_t *call,
                                                 nres_time_t now, int hedge,
                                                 int *skipped) {
  nres_policy_t *p = call->policy;
  nres_verdict_t v = nres_verdict(NRES_THROTTLED);
  nres_time_t delay = 0;

  if (hedge)
    return skip(call, skipped);
  v.flags = NRES_VF_SELF;
  if (!p->throttle_fail &&
      (unsigned) call->attempts + call->deferred + 1u < p->attempts &&
      call->deferred < UINT8_MAX)   /* its counter's bound */
    delay = nres_backoff_next(&p->backoff, &call->backoff,
                              call->retries + call->deferred + 1u, &v,
                              (p->private_flags & NRES__F_DRAWS)
                                  ? call_rng(call) : NULL);
  if (delay == 0 || nres_time_add(now, delay) >= call->deadline)
    return reject(call, now, NRES_REJECT_THROTTLE, NRES_STOP_THROTTLED);
  call->deferred++;
  call->throttled = 1;   /* asked to slow down: no hedges */
  return wait_until(call, NRES__PHASE_BACKOFF, nres_time_add(now, delay));
}

/* admit, once the call's deadline is known not to have passed. */
static NRES__HOT nres_action_t admit_gates(nres_call_t *call, nres_time_t now,
                                           int hedge, int *skipped) {
  nres_policy_t *p = call->policy;
  nres_time_t ceiling;
  uint32_t permit = 0;
  nres_action_t a;

  /* The admission gates in order: throttle, rate limiter, bulkhead,
   * breaker (which may give a probe permit). */
  if (p->private_flags & NRES__F_GATED) {
    if (p->throttle != NULL && throttle_refuses(call, now))
      return throttle_refused(call, now, hedge, skipped);
    if ((p->private_flags & NRES__F_LIMITED) &&
        !pass_limits(call, now, hedge, skipped, &a))
      return a;
    if (p->breaker != NULL &&
        nres__breaker_acquire(p->breaker, now, &permit) != 0)
      return breaker_refused(call, now, hedge, skipped);
    /* Admitted (nothing after refuses a first attempt or a retry, which
     * start in slot 0): would a shadow candidate be? (A shadowed policy
     * is gated.) */
    if (p->private_flags & NRES__F_SHADOW)
      nres__shadow_admit(call, now, hedge);
  }

  if (hedge && p->budget != NULL && spend(call, now) != 0) {
    if (permit)
      nres_breaker_release(p->breaker, permit);
    if (p->bulkhead != NULL)
      nres_bulkhead_release(p->bulkhead, 0, -1);
    return skip(call, skipped);
  }

  ceiling = attempt_ceiling(p, now, call->deadline);
  return start_attempt(call, now, hedge, permit, ceiling);
}

static NRES__HOT nres_action_t admit(nres_call_t *call, nres_time_t now,
                                     int hedge, int *skipped) {
  if (now >= call->deadline)
    return hedge ? skip(call, skipped) : end_early(call, now, NRES_STOP_DEADLINE);
  return admit_gates(call, now, hedge, skipped);
}

static NRES__HOT nres_action_t admit_next(nres_call_t *call,
                                          nres_time_t now) {
  return admit(call, now, 0, NULL);   /* not a hedge: never skipped */
}

/* ---------------------------------------------------------------- begin */

/* A call's deadline: the policy's from now, tightened by an inherited
 * one. */
static NRES__HOT nres_time_t call_deadline(const nres_policy_t *policy,
                                           nres_time_t now,
                                           nres_time_t inbound) {
  nres_time_t deadline = NRES_TIME_NEVER;

  if (policy->deadline)
    deadline = nres_time_add(now, policy->deadline);
  return inbound < deadline ? inbound : deadline;
}

/* A call on a built policy, not a passthrough's shortcut, that begin_first
 * did not start: reset, its deadline, then its first admission. */
static NRES__COLD nres_action_t begin_general(nres_call_t *call,
                                              nres_policy_t *policy,
                                              nres_time_t now,
                                              nres_time_t inbound, int cls) {
  nres__call_reset(call, policy, now);
  call->criticality = (uint8_t) cls;
  call->deadline = call_deadline(policy, now, inbound);
  nres_backoff_state_reset(&call->backoff);
  if (policy->private_flags & NRES__F_SHADOW)
    nres__shadow_begin(call);

  if (atomic_load_explicit(&policy->draining, memory_order_acquire))
    return reject(call, now, NRES_REJECT_DRAINING, NRES_STOP_DRAINING);
  return admit_next(call, now);
}

/* The common beginning of a call on a built policy, not a passthrough's
 * shortcut: no rate limiter, bulkhead or hedging, a closed breaker or
 * none, a throttle refusing nothing or none, time left, not draining.
 * Decided first, then the call is written once, as nres__call_reset and
 * start_attempt would leave it (attempt 1 in slot 0, bounded by
 * *ceiling): 1. Otherwise nothing is written: 0, and begin_general does
 * it all. leaf (a constant): call nothing, so that a step made of this
 * needs no stack frame on its way - a measured ceiling's cached word due
 * for its refresh is then one more case for begin_general, which
 * refreshes it. */
static NRES__HOT int begin_first(nres_call_t *call, nres_policy_t *policy,
                                 nres_time_t now, nres_time_t inbound, int cls,
                                 nres_time_t *ceiling, int leaf) {
  nres_time_t deadline = call_deadline(policy, now, inbound);
  unsigned flags = policy->private_flags;

  if (__builtin_expect((flags & (NRES__F_LIMITED | NRES__F_HEDGE |
                                 NRES__F_SHADOW)) ||
                           now >= deadline ||
                           atomic_load_explicit(&policy->draining,
                                                memory_order_acquire) ||
                           (policy->breaker != NULL &&
                            !NRES__BREAKER_PLAIN(nres__load(
                                &policy->breaker->word))) ||
                           (policy->throttle != NULL &&
                            nres__throttle_due(policy->throttle, now)) ||
                           (leaf && (flags & NRES__F_CEILING) &&
                            now >= nres__load(&policy->quantile_next)),
                       0))
    return 0;
  *ceiling = bounded_ceiling(policy, now, deadline, !leaf);   /* leaf: fresh */

  nres__call_write(call, policy, now, deadline, NRES__PHASE_RUNNING, 1, cls);
  nres_backoff_state_reset(&call->backoff);
  fill_slot(call, 0, 1, now, 0, 0, *ceiling, 0);
  return 1;
}

/* A call on a built policy, not a passthrough's shortcut: its deadline,
 * then its first admission. */
static NRES__HOT nres_action_t begin(nres_call_t *call, nres_policy_t *policy,
                                     nres_time_t now, nres_time_t inbound,
                                     int cls) {
  nres_time_t ceiling;

  if (__builtin_expect(
          begin_first(call, policy, now, inbound, cls, &ceiling, 0), 1))
    return attempt_action(0, 0, 1, ceiling);
  return begin_general(call, policy, now, inbound, cls);
}

nres_action_t nres_call_begin_class(nres_call_t *call, nres_policy_t *policy,
                                    nres_time_t now, nres_time_t inbound,
                                    int cls) {
  if (cls < 0 || cls >= NRES_CLASS_COUNT)
    cls = NRES_CLASS_DEFAULT;
  if (policy == NULL || policy->private_magic != NRES__POLICY_MAGIC) {
    nres__call_reset(call, policy, now);
    call->criticality = (uint8_t) cls;
    return pending(call);   /* misuse: DONE with stop NONE */
  }

  if ((policy->private_flags & NRES__F_PASSTHROUGH) &&
      inbound == NRES_TIME_NEVER &&
      !atomic_load_explicit(&policy->draining, memory_order_relaxed)) {
    nres__call_reset(call, policy, now);
    call->criticality = (uint8_t) cls;
    return start_attempt(call, now, 0, 0, NRES_TIME_NEVER);
  }
  return begin(call, policy, now, inbound, cls);
}

NRES__HOT nres_action_t nres__call_begin(nres_call_t *call,
                                         nres_policy_t *policy,
                                         nres_time_t now) {
  return begin(call, policy, now, NRES_TIME_NEVER, NRES_CLASS_DEFAULT);
}

NRES__HOT int nres__call_begin_first(nres_call_t *call, nres_policy_t *policy,
                                     nres_time_t now, nres_time_t *ceiling) {
  return begin_first(call, policy, now, NRES_TIME_NEVER, NRES_CLASS_DEFAULT,
                     ceiling, 1);
}

nres_action_t nres_call_begin_within(nres_call_t *call, nres_policy_t *policy,
                                     nres_time_t now, nres_time_t inbound) {
  return nres_call_begin_class(call, policy, now, inbound, NRES_CLASS_DEFAULT);
}

nres_action_t nres_call_begin(nres_call_t *call, nres_policy_t *policy,
                              nres_time_t now) {
  return nres_call_begin_within(call, policy, now, NRES_TIME_NEVER);
}

/* ---------------------------------------------------------------- decide */

static NRES__HOT nres_action_t retry(nres_call_t *call, nres_time_t now,
                           const nres_verdict_t *v) {
  nres_policy_t *p = call->policy;
  nres_time_t delay;

  if (call->attempts >= p->attempts)
    return end_early(call, now, NRES_STOP_ATTEMPTS);
  if (now >= call->deadline)
    return end_early(call, now, NRES_STOP_DEADLINE);
  if (p->backoff.kind == NRES_BACKOFF_NONE &&
      !(v->flags & NRES_VF_RETRY_AFTER)) {
    call->backoff.prev = 0;   /* nres_backoff_next's answer for kind NONE */
    delay = 0;
  } else {
    /* The call's generator is seeded (a shared counter bumped) only for a
     * policy that draws: a backoff with jitter, a breaker with break
     * jitter (which takes the call's generator once seeded). */
    delay = nres_backoff_next(&p->backoff, &call->backoff, call->retries + 1u,
                              v, (p->private_flags & NRES__F_DRAWS)
                                     ? call_rng(call) : NULL);
  }
  if (delay > 0 && nres_time_add(now, delay) >= call->deadline)
    return end_early(call, now, NRES_STOP_DEADLINE);
  /* Self-imposed refusals neither spend nor deposit. The token is taken
   * now, before the wait, so an empty budget ends the call at once; it is
   * given back if the retry never starts. */
  if (p->budget != NULL && !(v->flags & NRES_VF_SELF)) {
    if (spend(call, now) != 0)
      return reject(call, now, NRES_REJECT_BUDGET, NRES_STOP_BUDGET);
    call->charged = 1;
  }
  EMIT(p, call, NRES_EV_RETRY, v->kind, call->attempts, now, delay);
  if (delay == 0)
    return admit_gates(call, now, 0, NULL);   /* deadline checked above */
  return wait_until(call, NRES__PHASE_BACKOFF, nres_time_add(now, delay));
}

/* ---------------------------------------------------------------- report */

/* Is this answer a refusal that does not say so? A transient one faster
 * than throttle.fast_failure x the p50 of successes: an overloaded
 * dependency that sheds with a plain error answers at once, where an
 * outage's or a brownout's failures take about the usual latency
 * (bench/README.md, the tournament: overload-mute). */
static int fast_failure(nres_policy_t *p, nres_time_t now, int kind,
                        nres_time_t latency) {
  return kind == NRES_TRANSIENT && p->throttle->fast_failure > 0 &&
         p->estimator != NULL &&
         latency < quantile(p, now, &p->quantile_fast);
}

/* An attempt's outcome into the shared state that learns from outcomes:
 * bulkhead (its slot and latency), breaker, throttle, latency estimator,
 * hedge window (and the count of hedges that won). Only for policies with
 * any of them (NRES__F_RECORDS); the usual answer takes record()'s short
 * way below. */
static __attribute__((noinline)) void record_any(nres_call_t *call,
                                                 unsigned slot,
                                                 nres_time_t now,
                                                 const nres_verdict_t *v) {
  nres_policy_t *p = call->policy;
  int kind = v->kind;
  nres_time_t latency = nres_time_sub(now, call->slot[slot].start);
  int self = (v->flags & NRES_VF_SELF) || kind == NRES_CANCELED;
  unsigned k = nres__shard_if_taken();
  nres_rng_t rng;

  if (p->private_flags & NRES__F_SHADOW)   /* before a shed's THROTTLED */
    nres__shadow_report(call, slot, now, v);
  if (call->slot[slot].held) {
    nres_bulkhead_release(p->bulkhead, latency, self ? -1 : kind);
    call->slot[slot].held = 0;
  }
  if (p->breaker != NULL && (!self || call->slot[slot].permit)) {
    int outcome = self                      ? NRES_BREAKER_IGNORE
                  : kind == NRES_TRANSIENT  ? NRES_BREAKER_FAILURE
                                            : NRES_BREAKER_SUCCESS;
    int slow = 0, entered;
    if (p->private_flags & NRES__F_SLOW) {
      nres_time_t threshold = p->slow_threshold;
      if (threshold == 0)   /* 0: too few samples */
        threshold = quantile(p, now, &p->quantile_slow);
      slow = threshold != 0 && latency > threshold;
    }
    entered = -1;
    if (!nres__breaker_record_common(p->breaker, k, now,
                                     call->slot[slot].permit, outcome, slow,
                                     p->private_flags & NRES__F_BREAKER_WINDOW))
      entered = nres__breaker_record_other(p->breaker, now,
                                           call->slot[slot].permit, outcome,
                                           slow, breaker_rng(call, now, &rng));
    call->slot[slot].permit = 0;
    if (entered >= 0)
      EMIT(p, call, NRES_EV_BREAKER, entered, call->slot[slot].number, now,
           0);
  }
  if (p->throttle != NULL && !self) {   /* only an overload refusal is no accept */
    int shed = fast_failure(p, now, kind, latency);
    nres__throttle_record(p->throttle, k, now, kind != NRES_THROTTLED && !shed);
    if (shed) {
      /* Its retry waits the throttled backoff, as after a refusal that
       * says so. report()'s verdict is its callers' own copy (a by-value
       * argument, run.c's and step.c's locals), read after this only by
       * the retry's backoff; call->last, copied before, keeps the answer
       * as it came. Here, so that the usual failure's way pays nothing. */
      ((nres_verdict_t *) v)->kind = NRES_THROTTLED;
      call->throttled = 1;   /* asked to slow down: no hedges */
    }
  }
  if (kind == NRES_OK && p->estimator != NULL)
    nres__estimator_record_in(p->estimator, k, now, latency);
  if (p->private_flags & NRES__F_HEDGE) {
    if (!self)
      nres_window_add(&p->hedge.window, now, kind == NRES_TRANSIENT, 0);
    if (kind == NRES_OK && call->slot[slot].hedge)
      COUNT(p, n_hedges_won);
  }
}

/* record()'s short way (below), as stages, each one shared word's add:
 * the latency estimator's sample (first: the latency is then no longer
 * needed), the breaker's success, the throttle's accepted request. */
enum { SHORT_ESTIMATOR = 1, SHORT_BREAKER, SHORT_THROTTLE };

/* The short way's adds from stage `from` on, each by its common case,
 * which calls nothing: 0 when all are done, else the stage whose add
 * needs its slow path (nothing of it written; short_record_from goes on
 * from there). k < NRES_SHARDS. */
static NRES__HOT int short_record_try(nres_policy_t *p, unsigned k,
                                      nres_time_t now, nres_time_t latency,
                                      int from) {
  if (k >= NRES_SHARDS)
    __builtin_unreachable();   /* the adds need not test it again */
  if (from <= SHORT_ESTIMATOR && p->estimator != NULL &&
      !nres__estimator_try_record_in(p->estimator, k, now, latency))
    return SHORT_ESTIMATOR;
  if (from <= SHORT_BREAKER && p->breaker != NULL &&
      nres__breaker_try_success(p->breaker, k, now,
                                p->private_flags & NRES__F_BREAKER_WINDOW) <= 0)
    return SHORT_BREAKER;
  if (from <= SHORT_THROTTLE && p->throttle != NULL &&
      !nres__throttle_try_accepted(p->throttle, k, now))
    return SHORT_THROTTLE;
  return 0;
}

/* The short way's adds from stage `stage` on, whose add needs its slow
 * path: that add, then the later stages. */
static NRES__COLD void short_record_from(nres_call_t *call, unsigned slot,
                                         nres_policy_t *p, unsigned k,
                                         nres_time_t now, nres_time_t latency,
                                         int stage) {
  nres_rng_t rng;
  int entered;

  while (stage != 0) {
    switch (stage) {
      case SHORT_BREAKER:
        /* the window's slow add, or a success that may trip the breaker
         * (NRES__BREAKER_RATIO_DUE): the long way takes either */
        entered = nres__breaker_record_other(p->breaker, now, 0,
                                             NRES_BREAKER_SUCCESS, 0,
                                             breaker_rng(call, now, &rng));
        if (entered >= 0)
          EMIT(p, call, NRES_EV_BREAKER, entered, call->slot[slot].number,
               now, 0);
        break;
      case SHORT_THROTTLE:
        nres__window_add_slow(&p->throttle->window,
                              now / p->throttle->window.width,
                              NRES__WINDOW_CALL);
        break;
      default:
        nres__estimator_record_slow(p->estimator, now, latency);
        break;
    }
    stage = short_record_try(p, k, now, latency, stage + 1);
  }
}

/* Can an OK outcome (not the caller's own) of the attempt in `slot` take
 * record()'s short way: no probe permit, a policy without
 * bulkhead, slow-call or hedge accounting (NRES__F_SHORT_RECORD), a
 * thread with a shard (k)? */
static NRES__HOT int short_record_fits(const nres_call_t *call,
                                       const nres_policy_t *p, unsigned slot,
                                       unsigned k) {
  return (p->private_flags & NRES__F_SHORT_RECORD) &&
         !call->slot[slot].permit && k < NRES_SHARDS;
}

/* record_any, with a short way for the usual answer (short_record_fits):
 * what record_any does then, without its tests, reading the thread's
 * shard index once for the three shared words it writes. Inline: the
 * sync driver compiles a copy of its loop for policies that record and
 * one for those that do not (report's `records`), so that the registers
 * this takes cost nothing to a policy that never records (inlined into
 * the one loop, it cost trivial 9 instructions a call, retry-twice 19;
 * out of line, it cost default 16). */
static NRES__HOT void record(nres_call_t *call, unsigned slot,
                             nres_time_t now, const nres_verdict_t *v) {
  nres_policy_t *p = call->policy;
  unsigned k = nres__shard_if_taken();   /* NRES_SHARDS: record_any's */

  if (__builtin_expect(v->kind == NRES_OK && !(v->flags & NRES_VF_SELF) &&
                           short_record_fits(call, p, slot, k),
                       1)) {
    nres_time_t latency = nres_time_sub(now, call->slot[slot].start);
    int stage = short_record_try(p, k, now, latency, SHORT_ESTIMATOR);
    if (__builtin_expect(stage != 0, 0))
      short_record_from(call, slot, p, k, now, latency, stage);
    return;
  }
  record_any(call, slot, now, v);
}

/* The attempt in `slot` (its number) has ended at now with verdict v: out
 * of flight, in the call's last verdict and in its log. */
static NRES__HOT void end_attempt(nres_call_t *call, unsigned slot,
                                  unsigned number, nres_time_t now,
                                  const nres_verdict_t *v) {
  nres_attempt_rec_t *rec;

  call->inflight &= (uint8_t) ~(1u << slot);
  call->last = *v;
  rec = log_of(call, number);
  rec->end = now;
  rec->kind = (uint8_t) v->kind;
  rec->flags = v->flags;
}

/* An attempt's outcome, checked already: record it, then decide. number
 * is the slot's attempt (call->slot[slot].number); records is whether the
 * policy records outcomes (NRES__F_RECORDS), a constant where the caller
 * has compiled a copy for each answer. */
static NRES__HOT nres_action_t report(nres_call_t *call, unsigned slot,
                                      unsigned number, nres_time_t now,
                                      const nres_verdict_t *v, int records) {
  nres_policy_t *p = call->policy;
  int kind = v->kind;

  end_attempt(call, slot, number, now, v);
  if (records)
    record(call, slot, now, v);
  /* An OK verdict always ends its call with stop OK: done's count of the
   * stop (n_ok[].stops) serves for both. */
  if (kind != NRES_OK)
    COUNT(p, n_verdicts[kind]);
  EMIT(p, call, NRES_EV_ATTEMPT, kind, number, now,
       nres_time_sub(now, call->slot[slot].start));

  /* The common failure, TRANSIENT without a retry-after, goes straight
   * on to the retry below: one test. */
  if (__builtin_expect(kind != NRES_TRANSIENT ||
                           (v->flags & NRES_VF_RETRY_AFTER),
                       1)) {
    switch (kind) {
      case NRES_OK:
        if (p->budget != NULL && !(v->flags & NRES_VF_SELF))
          nres_budget_deposit(p->budget);
        return done(call, now, NRES_STOP_OK);
      case NRES_CANCELED:
        return done(call, now, NRES_STOP_CANCELED);
      case NRES_PERMANENT:
        return done(call, now, NRES_STOP_PERMANENT);
    }
    call->throttled = 1;   /* THROTTLED or told when: no more hedges */
  }
  if (call->inflight) {
    /* Others still run: wait for them, and for the next hedge if due. */
    if (call->resume_at == NRES_TIME_NEVER)
      call->resume_at = next_hedge(call, now);
    return wait_until(call, NRES__PHASE_RUNNING, call->resume_at);
  }
  return retry(call, now, v);
}

nres_action_t nres_call_report(nres_call_t *call, unsigned slot,
                               nres_time_t now, nres_verdict_t verdict) {
  nres_policy_t *p = call->policy;

  if (slot >= NRES_MAX_INFLIGHT || !(call->inflight & (1u << slot)) ||
      verdict.kind >= NRES_VERDICT_COUNT) {
    if (p != NULL)
      COUNT(p, n_late);
    return pending(call);
  }
  if (p->private_flags & NRES__F_PASSTHROUGH) {
    nres__call_passthrough(call, p, verdict);
    return pending(call);
  }
  return report(call, slot, call->slot[slot].number, now, &verdict,
                (p->private_flags & NRES__F_RECORDS) != 0);
}

NRES__HOT nres_action_t nres__call_report(nres_call_t *call, unsigned slot,
                                          unsigned number, nres_time_t now,
                                          const nres_verdict_t *v,
                                          int records) {
  return report(call, slot, number, now, v, records);
}

/* report of an OK verdict (nres_verdict(NRES_OK)) for the attempt in
 * slot 0 when that attempt is all the call holds, on a policy without
 * events whose record, if it records, takes the short way: the call ends
 * OK. Decided before anything is written, and done without calling
 * anything, so that a step made of it needs no stack frame: the shared
 * words the record writes come last, and an add that needs its slow path
 * is left to the caller (nres__call_record_from). */
NRES__HOT int nres__call_report_ok(nres_call_t *call, nres_time_t now) {
  nres_verdict_t ok = nres_verdict(NRES_OK);
  unsigned k = nres__shard_if_taken();
  nres_policy_t *p;
  unsigned flags;

  if (__builtin_expect(call->inflight != 1 || call->queued || call->charged,
                       0))
    return -1;
  p = call->policy;
  flags = p->private_flags;
  if (__builtin_expect((flags & (NRES__F_PASSTHROUGH | NRES__F_SHADOW)) ||
                           p->on_event != NULL ||
                           ((flags & (NRES__F_TELEMETRY | NRES__F_RECORDS)) &&
                            k >= NRES_SHARDS) ||
                           ((flags & NRES__F_RECORDS) &&
                            !short_record_fits(call, p, 0, k)),
                       0))
    return -1;
  end_attempt(call, 0, call->slot[0].number, now, &ok);
  if (p->budget != NULL)
    nres_budget_deposit(p->budget);
  mark_done(call, NRES_STOP_OK);
  count_end(p, call, NRES_STOP_OK, k);
  if (!(flags & NRES__F_RECORDS))
    return 0;
  return short_record_try(p, k, now, nres_time_sub(now, call->slot[0].start),
                          SHORT_ESTIMATOR);
}

NRES__COLD void nres__call_record_from(nres_call_t *call, nres_time_t now,
                                       int stage) {
  short_record_from(call, 0, call->policy, nres__shard_if_taken(), now,
                    nres_time_sub(now, call->slot[0].start), stage);
}

const nres_attempt_t nres__passthrough_attempt = {
  1, 0, NRES_TIME_NEVER, NRES_TIME_NEVER
};

/* A passthrough attempt that did not succeed: its stop and error, and the
 * log's kind (an out-of-range kind reads as TRANSIENT). */
int nres__passthrough_failed(nres_call_t *call, unsigned kind) {
  static const uint8_t stop_of[NRES_VERDICT_COUNT] = {
    NRES_STOP_OK, NRES_STOP_ATTEMPTS, NRES_STOP_ATTEMPTS, NRES_STOP_PERMANENT,
    NRES_STOP_CANCELED
  };
  static const int8_t error_of[NRES_VERDICT_COUNT] = { 0, 1, 1, 2, 3 };
  static const int errors[] = { 0, NRES_EATTEMPTS, NRES_EPERMANENT,
                                NRES_ECANCELED };

  if (kind >= NRES_VERDICT_COUNT)
    kind = NRES_TRANSIENT;
  call->stop = stop_of[kind];
  call->log[0].kind = (uint8_t) kind;
  return errors[error_of[kind]];
}

nres_action_t nres_call_resume(nres_call_t *call, nres_time_t now) {
  int skipped = 0;

  switch (call->phase) {
    case NRES__PHASE_BACKOFF:
    case NRES__PHASE_ADMIT:
      if (now < call->resume_at)
        return pending(call);
      return admit_next(call, now);
    case NRES__PHASE_RUNNING:
      if (call->resume_at == NRES_TIME_NEVER || now < call->resume_at)
        return pending(call);
      call->resume_at = NRES_TIME_NEVER;
      if (now >= call->deadline || hedge_suppressed(call, now))
        return pending(call);
      return admit(call, now, 1, &skipped);
  }
  return pending(call);
}

nres_action_t nres_call_cancel(nres_call_t *call, nres_time_t now) {
  if (call->phase == NRES__PHASE_DONE || call->phase == NRES__PHASE_IDLE)
    return pending(call);
  return end_early(call, now, NRES_STOP_CANCELED);
}

nres_action_t nres_call_abort(nres_call_t *call, nres_time_t now) {
  if (call->phase == NRES__PHASE_DONE || call->phase == NRES__PHASE_IDLE)
    return pending(call);
  return end_early(call, now, NRES_STOP_CALLBACK);
}

nres_time_t nres_call_remaining(const nres_call_t *call, nres_time_t now) {
  if (call->deadline == NRES_TIME_NEVER)
    return NRES_TIME_NEVER;
  return nres_time_sub(call->deadline, now);
}

const nres_attempt_rec_t *nres_call_log(const nres_call_t *call, unsigned i) {
  if (i >= call->attempts || i >= NRES_LOG_CAP)
    return NULL;
  return &call->log[(call->attempts - 1u - i) % NRES_LOG_CAP];
}

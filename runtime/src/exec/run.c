/* SPDX-License-Identifier: MIT */
/* run.c - the sync driver: a call run to its end on the calling thread.
 *
 * Attempts are the caller's blocking function; waits sleep with nanosleep
 * until nres_clock_now reaches the end (relative sleeps, re-checked, since
 * nres_clock_now may count TSC ticks rather than CLOCK_MONOTONIC). An attempt always ends before a hedge could be due, so
 * this driver never hedges; the policy's other features all apply.
 */
#include <time.h>

#include "internal.h"
#include "core/clock.h"
#include "core/policy.h"
#include "exec/call.h"

static nres_time_t sleep_until(nres_time_t until) {
  nres_time_t now;

  while ((now = nres__clock_now()) < until) {
    struct timespec ts;
    ts.tv_sec = (time_t) ((until - now) / NRES_SEC);
    ts.tv_nsec = (long) ((until - now) % NRES_SEC);
    nanosleep(&ts, NULL);   /* EINTR: the loop sleeps the rest */
  }
  return now;
}

/* Run the attempt of an ATTEMPT action (slot, attempt number: the
 * action's) and report its verdict; *now becomes its end. records: the
 * policy's NRES__F_RECORDS (nres__call_report's). */
static inline __attribute__((always_inline)) nres_action_t run_attempt(
    nres_call_t *call, nres_attempt_fn fn, void *arg, nres_action_t act,
    unsigned slot, unsigned number, int timeless, int records,
    nres_time_t *now) {
  nres_attempt_t attempt = nres__attempt_of(act, *now);
  nres_verdict_t verdict;

  attempt.number = number;
  verdict = fn(arg, &attempt);
  if (!timeless)
    *now = nres__clock_now();
  if (__builtin_expect(verdict.kind >= NRES_VERDICT_COUNT, 0))
    return nres_call_report(call, slot, *now, verdict);   /* misuse */
  return nres__call_report(call, slot, number, *now, &verdict, records);
}

/* A call on a built policy that is not a passthrough, run to its end.
 * records: the policy's NRES__F_RECORDS, a constant in each of nres_run's
 * two copies of this loop. */
static inline __attribute__((always_inline)) int run_call(
    nres_policy_t *policy, nres_attempt_fn fn, void *arg, nres_call_t *call,
    int records) {
  nres_action_t act;
  nres_time_t now;
  int timeless;

  /* The copy that records its own register for the policy: an empty asm
   * that "changes" it starts a new live range there, so that this copy
   * (which needs more registers) does not make the compiler keep the
   * policy on the stack for the passthrough and the other copy too
   * (callgrind, instructions a call: passthrough 47 -> 45, trivial 136
   * -> 126, default 317 -> 292; the same asm in both copies, or for the
   * attempt function and the call too, did less). */
  if (records)
    __asm__("" : "+r"(policy));
  /* A policy that makes no decision on time needs no clock: its time
   * starts at 0 and moves only by the waits it asks for. A policy that
   * records outcomes always decides on time. */
  timeless = !records && (policy->private_flags & NRES__F_TIMELESS) != 0;
  now = timeless ? 0 : nres__clock_now();
  act = nres__call_begin(call, policy, now);
  /* The first attempt, peeled off the loop: attempt 1 in slot 0, which
   * the compiler can then fold into the report. */
  if (__builtin_expect(act.kind == NRES_ATTEMPT, 1))
    act = run_attempt(call, fn, arg, act, 0, 1, timeless, records, &now);
  /* Every attempt here is in slot 0: each is reported before the next is
   * asked for, so none is in flight when one starts (the machine starts
   * an attempt in the lowest free slot). */
  while (act.kind != NRES_DONE) {
    if (act.kind == NRES_ATTEMPT) {
      act = run_attempt(call, fn, arg, act, 0, act.attempt, timeless,
                        records, &now);
    } else {
      /* Nothing runs in the background here, so a WAIT always has an end;
       * one without would be a bug in the machine: end, never spin. */
      if (act.at == NRES_TIME_NEVER) {
        nres_call_cancel(call, now);
        return NRES_ESTATE;
      }
      if (timeless) {
        sleep_until(nres_time_add(nres__clock_now(), act.at - now));
        now = act.at;
      } else {
        now = sleep_until(act.at);
      }
      act = nres_call_resume(call, now);
    }
  }
  return call->stop == NRES_STOP_OK ? 0 : nres_stop_error(call->stop);
}

/* always_inline (through LTO, into a caller linked with the library):
 * with its two loops it grew past what LTO inlines by itself, and a
 * passthrough call paid the call (45 -> 70 instructions). */
__attribute__((always_inline)) inline int nres_run(nres_policy_t *policy,
                                                   nres_attempt_fn fn,
                                                   void *arg,
                                                   nres_call_t *call) {
  if (policy == NULL || fn == NULL || call == NULL ||
      policy->private_magic != NRES__POLICY_MAGIC)
    return NRES_EINVAL;

  /* A passthrough is one attempt and nothing else (unless draining).
   * Laid out as the straight path (its whole cost is a few instructions,
   * so a jump there and back would be a visible share of it), but with
   * even odds: a plain "likely" would make the machine below cold code,
   * compiled for size. */
  if (NRES__EVEN_ODDS((policy->private_flags & NRES__F_PASSTHROUGH) &&
                      !atomic_load_explicit(&policy->draining,
                                            memory_order_relaxed)))
    return nres__call_passthrough(call, policy,
                                  fn(arg, &nres__passthrough_attempt));
  /* One copy of the loop for a policy that records outcomes (breaker,
   * estimator, throttle, bulkhead, hedge window), one for a policy that
   * does not: the record inlined into the first takes registers the
   * second's path then keeps. */
  if (policy->private_flags & NRES__F_RECORDS)
    return run_call(policy, fn, arg, call, 1);
  return run_call(policy, fn, arg, call, 0);
}

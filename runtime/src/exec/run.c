/* run.c - the sync driver: a call run to its end on the calling thread.
 *
 * Attempts are the caller's blocking function; waits sleep on
 * CLOCK_MONOTONIC with clock_nanosleep (absolute, so signals do not
 * stretch them). An attempt always ends before a hedge could be due, so
 * this driver never hedges; the policy's other features all apply.
 */
#include <errno.h>
#include <time.h>

#include "internal.h"
#include "core/policy.h"

static void sleep_until(nres_time_t until) {
  struct timespec ts;

  ts.tv_sec = (time_t) (until / NRES_SEC);
  ts.tv_nsec = (long) (until % NRES_SEC);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
    ;
}

int nres_run(nres_policy_t *policy, nres_attempt_fn fn, void *arg,
             nres_call_t *call) {
  nres_attempt_t attempt;
  nres_action_t act;
  nres_verdict_t verdict;
  nres_time_t now;

  if (policy == NULL || fn == NULL || call == NULL ||
      policy->private_magic != NRES__POLICY_MAGIC)
    return NRES_EINVAL;

  /* A passthrough needs no time: skip the clock reads. */
  if (policy->private_flags & NRES__F_PASSTHROUGH) {
    act = nres_call_begin(call, policy, 0);
    attempt.number = 1;
    attempt.hedge = 0;
    attempt.deadline = NRES_TIME_NEVER;
    attempt.remaining = NRES_TIME_NEVER;
    verdict = fn(arg, &attempt);
    nres_call_report(call, 0, 0, verdict);
    return nres_stop_error(call->stop);
  }

  now = nres_clock_now();
  act = nres_call_begin(call, policy, now);
  while (act.kind != NRES_DONE) {
    if (act.kind == NRES_ATTEMPT) {
      attempt.number = act.attempt;
      attempt.hedge = act.hedge;
      attempt.deadline = act.deadline;
      attempt.remaining = act.deadline == NRES_TIME_NEVER
                              ? NRES_TIME_NEVER
                              : nres_time_sub(act.deadline, now);
      verdict = fn(arg, &attempt);
      now = nres_clock_now();
      act = nres_call_report(call, act.slot, now, verdict);
    } else {
      /* Nothing runs in the background here, so a WAIT always has an end;
       * one without would be a bug in the machine: end, never spin. */
      if (act.until == NRES_TIME_NEVER) {
        nres_call_cancel(call, now);
        return NRES_ESTATE;
      }
      sleep_until(act.until);
      now = nres_clock_now();
      act = nres_call_resume(call, now);
    }
  }
  return nres_stop_error(call->stop);
}

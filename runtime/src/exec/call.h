/* SPDX-License-Identifier: MIT */
/* call.h - the executor's internal entry points for the drivers.
 *
 * What every driver needs beside the public steps: the attempt description
 * built from an ATTEMPT action, and the passthrough record. A passthrough
 * policy (everything off) has exactly one attempt and no bookkeeping, so a
 * driver that already ran that attempt records it here instead of walking
 * the state machine: the call reads the same afterwards.
 */
#ifndef NRES_EXEC_CALL_H
#define NRES_EXEC_CALL_H

#include "nres.h"

/* Rare paths (failures, refusals, events, hedges) kept out of line, so the
 * success path they branch off stays short and needs few registers. */
#define NRES__COLD __attribute__((cold, noinline))
/* A branch laid out as the fall-through path without making the other
 * side cold (a plain __builtin_expect(x, 1) would: compiled for size). */
#if defined(__has_builtin)
# if __has_builtin(__builtin_expect_with_probability)
#  define NRES__EVEN_ODDS(x) __builtin_expect_with_probability(!!(x), 1, 0.5)
# endif
#endif
#ifndef NRES__EVEN_ODDS
# define NRES__EVEN_ODDS(x) (x)
#endif
/* The steps of the success path, inlined into each step function. */
#define NRES__HOT inline __attribute__((always_inline))

/* What a driver tells an attempt about itself, from its ATTEMPT action. */
static inline nres_attempt_t nres__attempt_of(nres_action_t act,
                                              nres_time_t now) {
  nres_attempt_t a;
  a.number = act.attempt;
  a.hedge = act.hedge;
  a.deadline = act.at;
  a.remaining = act.at == NRES_TIME_NEVER ? NRES_TIME_NEVER
                                          : nres_time_sub(act.at, now);
  return a;
}

/* nres_call_begin after its checks, for a driver that has checked the
 * policy (built) and taken the passthrough shortcut itself if it could. */
nres_action_t nres__call_begin(nres_call_t *call, nres_policy_t *policy,
                               nres_time_t now);

/* nres__call_begin's usual case alone: 1 when it started attempt 1 in
 * slot 0 (the ATTEMPT's time in *ceiling), 0 when it wrote nothing and the
 * call must begin the general way (nres_call_begin_class). Calls nothing.
 * For a driver that has checked the policy as for nres__call_begin. */
int nres__call_begin_first(nres_call_t *call, nres_policy_t *policy,
                           nres_time_t now, nres_time_t *ceiling);

/* nres_call_report after its checks, for a driver whose reports answer
 * its own ATTEMPT actions: the slot has an attempt in flight, number is
 * that attempt's (the action's attempt), the kind is in range, and the
 * call is not a passthrough's (begun by the shortcut of nres_call_begin).
 * A call's first action, when it is an ATTEMPT, is attempt 1 in slot 0.
 * records: whether the policy records outcomes (private_flags &
 * NRES__F_RECORDS, as 0 or 1); a driver may compile a copy of its loop
 * for each answer, passing a constant. */
nres_action_t nres__call_report(nres_call_t *call, unsigned slot,
                                unsigned number, nres_time_t now,
                                const nres_verdict_t *v, int records);

/* nres__call_report's usual success alone: an OK verdict (no flags, no
 * retry-after) for the attempt in slot 0, all the call holds, on a policy
 * without on_event. -1 when it is not that case (nothing written: report
 * the general way); 0 when the call has ended OK (the answer: DONE, stop
 * OK); a stage > 0 when it has ended OK but for the outcome's record
 * from that stage on, which nres__call_record_from(call, now, stage) must
 * finish. Calls nothing. */
int nres__call_report_ok(nres_call_t *call, nres_time_t now);
void nres__call_record_from(nres_call_t *call, nres_time_t now, int stage);

/* Where a call's machine is (nres_call_t.phase). */
enum {
  NRES__PHASE_IDLE = 0,     /* not begun */
  NRES__PHASE_RUNNING,      /* attempts in flight; resume_at may be a hedge
                               time */
  NRES__PHASE_BACKOFF,      /* waiting out a retry delay */
  NRES__PHASE_ADMIT,        /* waiting for a rate limiter or a bulkhead slot */
  NRES__PHASE_DONE
};

/* Every field of a call's header, written once: nres__call_reset's
 * values, or a call whose first attempt is already decided (begin's
 * common case: RUNNING, attempt 1 in flight). Inline with constants, so
 * each writer compiles to its own stores. */
static inline void nres__call_write(nres_call_t *call, nres_policy_t *policy,
                                    nres_time_t now, nres_time_t deadline,
                                    int phase, unsigned attempts, int cls) {
  call->policy = policy;
  call->start = now;
  call->deadline = deadline;
  call->resume_at = NRES_TIME_NEVER;
  call->phase = (uint8_t) phase;
  call->stop = NRES_STOP_NONE;
  call->inflight = (uint8_t) attempts;   /* 0, or attempt 1 in slot 0 */
  call->fallback = 0;
  call->attempts = (uint16_t) attempts;
  call->retries = 0;
  call->hedges = 0;
  call->queued = 0;
  call->seeded = 0;
  call->charged = 0;
  call->throttled = 0;
  call->criticality = (uint8_t) cls;
  call->deferred = 0;
  call->last = nres_verdict(NRES_OK);
}

/* A call's fields before its first step (and a passthrough's record). */
static inline void nres__call_reset(nres_call_t *call, nres_policy_t *policy,
                                    nres_time_t now) {
  nres__call_write(call, policy, now, NRES_TIME_NEVER, NRES__PHASE_IDLE, 0,
                   NRES_CLASS_DEFAULT);
}

/* A cached quantile word of p (&p->quantile_*), refreshed first if
 * stale: exec/shadow.c's way to read its candidate's. */
NRES__COLD uint64_t nres__call_quantile(nres_policy_t *p, nres_time_t now,
                                        NRES_ATOMIC(uint64_t) *word);

/* The attempt every passthrough call runs. */
extern const nres_attempt_t nres__passthrough_attempt;

/* The stop and the error of a passthrough attempt that did not succeed. */
NRES__COLD int nres__passthrough_failed(nres_call_t *call, unsigned kind);

/* Record the outcome of a passthrough call's only attempt; returns what
 * nres_run returns (0 or the stop reason's NRES_E*). Inline: it is the
 * whole of a passthrough call besides the attempt itself. */
static inline int nres__call_passthrough(nres_call_t *call,
                                         nres_policy_t *policy,
                                         nres_verdict_t verdict) {
  nres__call_reset(call, policy, 0);   /* a passthrough reads no clock */
  call->phase = NRES__PHASE_DONE;
  call->attempts = 1;
  call->last = verdict;
  call->log[0] = (nres_attempt_rec_t) {
    0, 0, 1, 0, 0, verdict.kind, verdict.flags, 0
  };
  if (__builtin_expect(verdict.kind == NRES_OK, 1)) {
    call->stop = NRES_STOP_OK;
    return 0;
  }
  return nres__passthrough_failed(call, verdict.kind);
}

#endif /* NRES_EXEC_CALL_H */

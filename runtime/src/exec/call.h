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

/* The attempt every passthrough call runs. */
extern const nres_attempt_t nres__passthrough_attempt;

/* Record the outcome of a passthrough call's only attempt; returns what
 * nres_run returns (0 or the stop reason's NRES_E*). */
int nres__call_passthrough(nres_call_t *call, nres_policy_t *policy,
                           nres_verdict_t verdict);

#endif /* NRES_EXEC_CALL_H */

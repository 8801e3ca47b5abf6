/* call.h - the executor's internal entry points for the drivers.
 *
 * A passthrough policy (everything off) has exactly one attempt and no
 * bookkeeping, so a driver that already ran that attempt records it here
 * instead of walking the state machine: the call reads the same afterwards.
 */
#ifndef NRES_EXEC_CALL_H
#define NRES_EXEC_CALL_H

#include "nres.h"

/* The attempt every passthrough call runs. */
extern const nres_attempt_t nres__passthrough_attempt;

/* Record the outcome of a passthrough call's only attempt; returns what
 * nres_run returns (0 or the stop reason's NRES_E*). */
int nres__call_passthrough(nres_call_t *call, nres_policy_t *policy,
                           nres_verdict_t verdict);

#endif /* NRES_EXEC_CALL_H */

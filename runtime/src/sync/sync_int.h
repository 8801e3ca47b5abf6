/* sync_int.h - what the fleet sync agent's files share (never installed):
 * the script texts (scripts.c) for the agent (sync.c).
 */
#ifndef NRES_SYNC_INT_H
#define NRES_SYNC_INT_H

#include "nres/sync.h"

extern const char nres__sync_budget_lua[];
extern const char nres__sync_rate_lua[];
extern const char nres__sync_breaker_lua[];

#endif /* NRES_SYNC_INT_H */

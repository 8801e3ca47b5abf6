/* SPDX-License-Identifier: MIT */
/* version.c - release and ABI versions, and the published struct sizes.
 *
 * Bindings (the Lua FFI face) compare these at load time with what they
 * declared, so a stale library is an error rather than memory corruption.
 * The release numbers come from the generated nres/version.h (CMake's
 * project version).
 */
#include "internal.h"

unsigned nres_version(void) {
  return NRES_VERSION_HEX;
}

const char *nres_version_string(void) {
  return NRES_VERSION_STRING;   /* the CMake project version */
}

unsigned nres_abi_version(void) {
  return NRES_ABI_VERSION;
}

size_t nres_sizeof(int kind) {
  switch (kind) {
    case NRES_SIZEOF_POLICY: return sizeof(nres_policy_t);
    case NRES_SIZEOF_CALL: return sizeof(nres_call_t);
    case NRES_SIZEOF_ACTION: return sizeof(nres_action_t);
    case NRES_SIZEOF_VERDICT: return sizeof(nres_verdict_t);
    case NRES_SIZEOF_BUDGET: return sizeof(nres_budget_t);
    case NRES_SIZEOF_BREAKER: return sizeof(nres_breaker_t);
    case NRES_SIZEOF_RATELIMIT: return sizeof(nres_ratelimit_t);
    case NRES_SIZEOF_BULKHEAD: return sizeof(nres_bulkhead_t);
    case NRES_SIZEOF_ESTIMATOR: return sizeof(nres_estimator_t);
    case NRES_SIZEOF_COUNTERS: return sizeof(nres_counters_t);
    case NRES_SIZEOF_STEP: return sizeof(nres_step_t);
    case NRES_SIZEOF_WINDOW: return sizeof(nres_window_t);
    case NRES_SIZEOF_BUDGET_STATS: return sizeof(nres_budget_stats_t);
    case NRES_SIZEOF_BREAKER_STATS: return sizeof(nres_breaker_stats_t);
    case NRES_SIZEOF_RATELIMIT_STATS: return sizeof(nres_ratelimit_stats_t);
    case NRES_SIZEOF_BULKHEAD_STATS: return sizeof(nres_bulkhead_stats_t);
    case NRES_SIZEOF_THROTTLE: return sizeof(nres_throttle_t);
    case NRES_SIZEOF_THROTTLE_STATS: return sizeof(nres_throttle_stats_t);
  }
  return 0;
}

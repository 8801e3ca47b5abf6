/* SPDX-License-Identifier: MIT */
/* errors.c - names and messages of error codes and stop reasons.
 *
 * Both tables are generated from the X-macro maps in the public headers
 * (NRES_ERRNO_MAP, NRES_STOP_MAP), so a code can never lack a name.
 */
#include "internal.h"

const char *nres_strerror(int err) {
  switch (err) {
#define XX(code, value, message) case value: return message;
    NRES_ERRNO_MAP(XX)
#undef XX
  }
  return "unknown error";
}

const char *nres_err_name(int err) {
  switch (err) {
#define XX(code, value, _) case value: return #code;
    NRES_ERRNO_MAP(XX)
#undef XX
  }
  return "UNKNOWN";
}

const char *nres_stop_name(int stop) {
  static const char *const names[] = {
#define XX(name, text) text,
    NRES_STOP_MAP(XX)
#undef XX
  };
  if (stop < 0 || stop >= NRES_STOP_COUNT)
    return "unknown";
  return names[stop];
}

int nres_stop_error(int stop) {
  switch (stop) {
    case NRES_STOP_OK: return 0;
    case NRES_STOP_PERMANENT: return NRES_EPERMANENT;
    case NRES_STOP_ATTEMPTS: return NRES_EATTEMPTS;
    case NRES_STOP_DEADLINE: return NRES_EDEADLINE;
    case NRES_STOP_BUDGET: return NRES_EBUDGET;
    case NRES_STOP_CIRCUIT: return NRES_ECIRCUIT;
    case NRES_STOP_LIMITED: return NRES_ELIMITED;
    case NRES_STOP_CANCELED: return NRES_ECANCELED;
    case NRES_STOP_DRAINING: return NRES_EDRAINING;
    case NRES_STOP_THROTTLED: return NRES_ETHROTTLED;
    case NRES_STOP_CALLBACK: return NRES_ECALLBACK;
  }
  /* NONE: the call has not ended, or nres_call_begin refused it as misuse
   * (an unbuilt policy), which nres_run reports as NRES_EINVAL too. */
  return NRES_EINVAL;
}

const char *nres_verdict_name(int kind) {
  switch (kind) {
    case NRES_OK: return "ok";
    case NRES_TRANSIENT: return "transient";
    case NRES_THROTTLED: return "throttled";
    case NRES_PERMANENT: return "permanent";
    case NRES_CANCELED: return "canceled";
  }
  return "unknown";
}

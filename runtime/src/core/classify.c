/* SPDX-License-Identifier: MIT */
/* classify.c - turning an errno or an HTTP status into a verdict.
 *
 * A verdict is the one judgement that retry, breaker, budget and telemetry
 * all act on, so the mapping lives here, once, as plain rule tables searched
 * in order. The default tables are exported so a caller can copy and extend
 * them instead of re-deriving them. Only the Retry-After rule of HTTP (which
 * needs a second input) is code rather than data. Nothing here allocates or
 * keeps state.
 */
#include <errno.h>

#include "internal.h"

/* A kind outside the enum would index past per-kind arrays downstream
 * (counters, events); the safe reading of a nonsense kind is "never retry". */
static uint8_t sane_kind(int kind) {
  return kind >= 0 && kind < NRES_VERDICT_COUNT ? (uint8_t) kind
                                                : (uint8_t) NRES_PERMANENT;
}

nres_verdict_t nres_classify_code(const nres_rule_t *rules, size_t count,
                                  int32_t code, int fallback_kind) {
  nres_verdict_t v = nres_verdict(sane_kind(fallback_kind));
  size_t i;

  v.code = code;
  if (rules == NULL)
    return v;
  for (i = 0; i < count; i++) {
    if (rules[i].lo <= code && code <= rules[i].hi) {
      v.kind = sane_kind(rules[i].kind);
      /* RETRY_AFTER needs a value a rule cannot carry; a rule never sets it. */
      v.flags = (uint8_t) (rules[i].flags & ~NRES_VF_RETRY_AFTER);
      return v;
    }
  }
  return v;
}

#define ERRNO_RULE(e, kind, flags) { -(e), -(e), (kind), (flags) }

/* Errors of the network or of the moment: another try may well succeed.
 * Everything not listed is PERMANENT (the fallback), including positive
 * values, which are a caller passing errno unnegated. */
static const nres_rule_t errno_rules[] = {
  { 0, 0, NRES_OK, 0 },
  ERRNO_RULE(ETIMEDOUT, NRES_TRANSIENT, NRES_VF_TIMEOUT),
  ERRNO_RULE(ECONNREFUSED, NRES_TRANSIENT, 0),
  ERRNO_RULE(ECONNRESET, NRES_TRANSIENT, 0),
  ERRNO_RULE(ECONNABORTED, NRES_TRANSIENT, 0),
  ERRNO_RULE(EHOSTUNREACH, NRES_TRANSIENT, 0),
  ERRNO_RULE(ENETUNREACH, NRES_TRANSIENT, 0),
  ERRNO_RULE(ENETDOWN, NRES_TRANSIENT, 0),
  ERRNO_RULE(ENETRESET, NRES_TRANSIENT, 0),
  ERRNO_RULE(EPIPE, NRES_TRANSIENT, 0),
  ERRNO_RULE(EAGAIN, NRES_TRANSIENT, 0),
  ERRNO_RULE(EINTR, NRES_TRANSIENT, 0),
  ERRNO_RULE(ENOTCONN, NRES_TRANSIENT, 0),
  ERRNO_RULE(EADDRNOTAVAIL, NRES_TRANSIENT, 0),
  ERRNO_RULE(ECANCELED, NRES_CANCELED, 0),
};

/* Order matters: 408 and 429 must come before the 4xx catch-all. */
static const nres_rule_t http_rules[] = {
  { 100, 399, NRES_OK, 0 },
  { 408, 408, NRES_TRANSIENT, 0 },
  { 429, 429, NRES_THROTTLED, 0 },
  { 400, 499, NRES_OK, 0 },          /* it answered: a retry gets the same */
  { 500, 599, NRES_TRANSIENT, 0 },
};

nres_verdict_t nres_classify_errno(int err) {
  return nres_classify_code(errno_rules, NRES__ARRAY_SIZE(errno_rules), err,
                            NRES_PERMANENT);
}

nres_verdict_t nres_classify_http(int status, nres_time_t retry_after) {
  nres_verdict_t v = nres_classify_code(http_rules,
                                        NRES__ARRAY_SIZE(http_rules), status,
                                        NRES_PERMANENT);

  /* 503 with Retry-After is the server saying "not now, come back then",
   * which is throttling; a bare 503 is just a failure. */
  if (retry_after != NRES_TIME_NEVER &&
      (v.kind == NRES_THROTTLED || status == 503)) {
    v.kind = NRES_THROTTLED;
    v.flags |= NRES_VF_RETRY_AFTER;
    v.retry_after = retry_after;
  }
  return v;
}

const nres_rule_t *nres_errno_rules(size_t *count) {
  if (count != NULL)
    *count = NRES__ARRAY_SIZE(errno_rules);
  return errno_rules;
}

const nres_rule_t *nres_http_rules(size_t *count) {
  if (count != NULL)
    *count = NRES__ARRAY_SIZE(http_rules);
  return http_rules;
}

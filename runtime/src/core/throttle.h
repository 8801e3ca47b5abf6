/* SPDX-License-Identifier: MIT */
/* throttle.h - the client-side throttle's common cases, inline for the
 * executor: the first admission's test (one load and a compare while the
 * cached probability is 0 and fresh), the admission that refuses nothing
 * (two loads and a compare) and an answer's count (the window's one-CAS
 * add). The rest, and what the throttle is, is in throttle.c. */
#ifndef NRES_THROTTLE_H
#define NRES_THROTTLE_H

#include "core/window.h"

/* Recompute the cached refusal odds if `now` is past their refresh time
 * (one caller wins; the others read the old odds). */
void nres__throttle_refresh(nres_throttle_t *throttle, nres_time_t now);

/* Must an attempt at `now` look at the throttle (refresh its odds, or
 * draw against them)? No while the odds are 0 and fresh: one load. */
static inline int nres__throttle_due(nres_throttle_t *throttle,
                                     nres_time_t now) {
  return now >= nres__load(&throttle->due);
}

/* The refusal probability * 2^32 at now; 0: send without a draw. */
static inline uint64_t nres__throttle_odds(nres_throttle_t *throttle,
                                           nres_time_t now) {
  if (__builtin_expect(now >= nres__load(&throttle->next), 0))
    nres__throttle_refresh(throttle, now);
  return nres__load(&throttle->odds);
}

/* nres_throttle_record: a request, and a non-accept unless accepted (the
 * dependency refused it: its time is kept); k is the calling thread's
 * nres__shard_if_taken. */
static inline void nres__throttle_record(nres_throttle_t *throttle,
                                         unsigned k, nres_time_t now,
                                         int accepted) {
  nres__window_add_in(&throttle->window, k, now,
                      NRES__WINDOW_CALL +
                          (accepted ? 0 : NRES__WINDOW_FAILURE));
  if (!accepted)
    nres__store(&throttle->refused_at, now);
}

/* nres__throttle_record of an accepted request by the window's common
 * case alone (nres__window_try_add_in's answer: 0, nothing written, when
 * nres__window_add_slow must add the request). */
static inline int nres__throttle_try_accepted(nres_throttle_t *throttle,
                                              unsigned k, nres_time_t now) {
  return nres__window_try_add_in(&throttle->window, k, now,
                                 NRES__WINDOW_CALL);
}

#endif /* NRES_THROTTLE_H */

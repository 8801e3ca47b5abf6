/* SPDX-License-Identifier: MIT */
/* breaker.h - the breaker's common cases, inline for the executor: acquire
 * while CLOSED (one load, no write) and a plain success of a call admitted
 * while CLOSED (one load, and the window's one-CAS add). Every other case
 * goes to breaker.c, which describes the state word. */
#ifndef NRES_BREAKER_H
#define NRES_BREAKER_H

#include "core/window.h"

#define NRES__BREAKER_STATE(w) ((unsigned) ((w) & 3))
/* A CLOSED word's bit 26 (open-until's lowest, unused while closed): the
 * window holds too few calls for the ratios yet, but enough failures (or
 * slow calls) that the success bringing it to min_calls trips the
 * breaker. While it is set successes take the long way, which checks. */
#define NRES__BREAKER_RATIO_DUE (1ull << 26)
/* A word is "plainly closed" (a success needs no check) when these bits
 * are all 0: one test, as cheap as the state's alone. */
#define NRES__BREAKER_PLAIN(w) (((w) & (3 | NRES__BREAKER_RATIO_DUE)) == 0)

/* Every outcome but the inline common case of nres__breaker_record. */
int nres__breaker_record_other(nres_breaker_t *breaker, nres_time_t now,
                               uint32_t permit, int outcome, int slow,
                               nres_rng_t *rng);

/* nres_breaker_acquire, for a non-NULL breaker and permit. */
static inline int nres__breaker_acquire(nres_breaker_t *breaker,
                                        nres_time_t now, uint32_t *permit) {
  if (__builtin_expect(NRES__BREAKER_STATE(nres__load(&breaker->word)) ==
                           NRES_BREAKER_CLOSED,
                       1)) {
    *permit = 0;
    return 0;
  }
  return nres_breaker_acquire(breaker, now, permit);
}

/* Does a breaker of this configuration count calls in its window (a
 * ratio to trip on)? */
static inline int nres__breaker_config_windowed(
    const nres_breaker_config_t *config) {
  return config->failure_ratio > 0 || config->slow_ratio > 0;
}

/* The same of a breaker. A policy keeps the answer in its flags
 * (NRES__F_BREAKER_WINDOW), the gateway in its upstream and peers, so
 * that a success does not read the configuration's line. */
static inline int nres__breaker_windowed(const nres_breaker_t *breaker) {
  return nres__breaker_config_windowed(&breaker->config);
}

/* A plain success (no probe permit, not slow) of a call admitted while
 * closed, by its common case alone: nothing if the breaker tripped while
 * the call ran (old news); else clear the failure run if there is one and
 * add a call to the window if windowed (nres__breaker_windowed's answer).
 * 1 when done, 0 when the window's add must take its slow path
 * (nres__window_add_slow, the call not added yet), -1 when the success
 * may trip the breaker (NRES__BREAKER_RATIO_DUE: nothing done,
 * nres__breaker_record_other must take it). Calls nothing. k is the
 * calling thread's nres__shard_if_taken. */
static inline int nres__breaker_try_success(nres_breaker_t *breaker,
                                            unsigned k, nres_time_t now,
                                            int windowed) {
  uint64_t w = nres__load(&breaker->word);
  if (!NRES__BREAKER_PLAIN(w))
    return NRES__BREAKER_STATE(w) == NRES_BREAKER_CLOSED ? -1 : 1;
  if (nres__load(&breaker->consecutive) != 0)
    nres__store(&breaker->consecutive, 0);
  return !windowed ||
         nres__window_try_add_in(&breaker->window, k, now, NRES__WINDOW_CALL);
}

/* The common case of nres_breaker_record, inline: a success while closed
 * that cannot trip (NRES__BREAKER_RATIO_DUE clear),
 * nres__breaker_try_success's. 1 when it took the outcome
 * (nres_breaker_record's answer is then -1), 0 when
 * nres__breaker_record_other must. Apart so that a caller prepares the
 * other case's generator only when it is needed. */
static inline int nres__breaker_record_common(nres_breaker_t *breaker,
                                              unsigned k, nres_time_t now,
                                              uint32_t permit, int outcome,
                                              int slow, int windowed) {
  if (__builtin_expect(permit == 0 && outcome == NRES_BREAKER_SUCCESS &&
                           !slow,
                       1)) {
    int done = nres__breaker_try_success(breaker, k, now, windowed);
    if (__builtin_expect(done == 0, 0))
      nres__window_add_slow(&breaker->window, now / breaker->window.width,
                            NRES__WINDOW_CALL);
    return done >= 0;
  }
  return 0;
}

/* nres_breaker_record, for a non-NULL breaker. */
static inline int nres__breaker_record(nres_breaker_t *breaker,
                                       nres_time_t now, uint32_t permit,
                                       int outcome, int slow,
                                       nres_rng_t *rng) {
  if (nres__breaker_record_common(breaker, nres__shard_if_taken(), now,
                                  permit, outcome, slow,
                                  nres__breaker_windowed(breaker)))
    return -1;
  return nres__breaker_record_other(breaker, now, permit, outcome, slow, rng);
}

#endif /* NRES_BREAKER_H */

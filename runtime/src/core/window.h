/* SPDX-License-Identifier: MIT */
/* window.h - the common case of nres_window_add, inline for the breaker's
 * success path: this thread's pending bucket already holds the current
 * slice and is not full, so the add is one CAS on the shard's own line.
 * Everything else goes to nres__window_add_slow (window.c, which describes
 * the bucket layout). */
#ifndef NRES_WINDOW_H
#define NRES_WINDOW_H

#include "core/shard.h"

#define NRES__WINDOW_CALL (1ull << 16)
#define NRES__WINDOW_FAILURE (1ull << 32)
#define NRES__WINDOW_SLOW (1ull << 48)

/* Add inc (counts, slice bits 0) for slice s when the fast test fails. */
void nres__window_add_slow(nres_window_t *window, uint64_t s, uint64_t inc);

/* nres__window_add_in's common case alone: 1 when it took the add (or
 * dropped it whole, the bucket being full), 0 when nothing was written and
 * nres__window_add_slow must take it. Calls nothing. */
static inline int nres__window_try_add_in(nres_window_t *window, unsigned k,
                                          nres_time_t now, uint64_t inc) {
  _Atomic uint64_t *p;
  uint64_t s;
  uint64_t w;
  uint32_t d;

  if (__builtin_expect(k >= NRES_SHARDS, 0))
    return 0;
  s = now / window->width;
  /* The pending bucket is of slice s and not saturated, both in one test.
   * The low 32 bits of w less s's low 16 are calls << 16 | 0 when the
   * slice is s (nonzero low half otherwise); rotated by 16 that is calls,
   * below 0xffff exactly when the slice is s and the bucket not full,
   * 0xffff when it is full. */
  p = &window->shard[k].pending;
  w = nres__load(p);
  d = (uint32_t) w - (uint16_t) s;
  d = d >> 16 | d << 16;
  if (__builtin_expect(d < 0xffff, 1) && nres__cas(p, &w, w + inc))
    return 1;
  return d == 0xffff;   /* saturated: drop the whole sample */
}

/* Add inc (NRES__WINDOW_* counts) at now, for the thread of shard k
 * (nres__shard_if_taken: a caller adding to several windows reads it
 * once). */
static inline void nres__window_add_in(nres_window_t *window, unsigned k,
                                       nres_time_t now, uint64_t inc) {
  if (!nres__window_try_add_in(window, k, now, inc))
    nres__window_add_slow(window, now / window->width, inc);
}

/* Add inc (NRES__WINDOW_* counts) at now. */
static inline void nres__window_add(nres_window_t *window, nres_time_t now,
                                    uint64_t inc) {
  nres__window_add_in(window, nres__shard_if_taken(), now, inc);
}

#endif /* NRES_WINDOW_H */

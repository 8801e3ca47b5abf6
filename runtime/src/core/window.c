/* SPDX-License-Identifier: MIT */
/* window.c - outcome counts over a sliding time window.
 *
 * The breaker's ratios and hedging's suppression both ask "of the calls in
 * the last N seconds, how many failed, how many were slow?". The window
 * answers with a ring of buckets, each covering `width` ns. A bucket is one
 * atomic 64-bit word, so an add is a single compare-and-swap and a bucket is
 * never seen half-rotated:
 *
 *   bits  0-15  slice: the low 16 bits of now / width
 *   bits 16-31  calls
 *   bits 32-47  failures
 *   bits 48-63  slow calls
 *
 * Threads sharing a window (every call of a policy adds to its breaker's)
 * do not add to the ring directly: each adds to its shard's pending bucket
 * (shard.h), a word of the same layout on a line of its own, and the first
 * add of a newer slice moves the pending bucket's counts into the ring.
 * A sum reads the ring and the pending buckets, so counts are where a sum
 * finds them at every moment but the instant of that move (a sum running
 * then may miss them once). With one thread, the ring and its one pending
 * bucket hold exactly what a ring alone would.
 *
 * A sample lands in the bucket of slice now / width, ring bucket
 * (now / width) % count. If that bucket still holds an older slice, the
 * sample replaces it with a fresh word, which is how expired counts leave
 * the window without a sweeper. Counts saturate: once a bucket holds 65535
 * calls, further samples for that slice are dropped whole, so failures/calls
 * and slow/calls stay a consistent sample; likewise a pending bucket's
 * counts move into a ring bucket only if they fit whole. failures <= calls
 * and slow <= calls, so no field can carry into the next.
 *
 * Slices are compared modulo 2^16: a bucket left untouched for exactly a
 * multiple of 65536 slices (with the breaker's 3 s default width, 2.3 days)
 * would be taken for current. That is the price of one word per bucket.
 */
#include "core/window.h"

#define SLICE_MASK 0xffffull
#define CALL_ONE NRES__WINDOW_CALL
#define FAILURE_ONE NRES__WINDOW_FAILURE
#define SLOW_ONE NRES__WINDOW_SLOW

#define SLICE(w) ((uint16_t) ((w) & SLICE_MASK))
#define CALLS(w) ((uint32_t) (((w) >> 16) & 0xffff))
#define FAILURES(w) ((uint32_t) (((w) >> 32) & 0xffff))
#define SLOWS(w) ((uint32_t) (((w) >> 48) & 0xffff))

int nres_window_init(nres_window_t *window, nres_time_t span,
                     uint32_t buckets) {
  if (window == NULL || span == 0 || span == NRES_TIME_INVALID ||
      buckets < 1 || buckets > NRES_WINDOW_MAX_BUCKETS)
    return NRES_EINVAL;
  if (span / buckets == 0)
    return NRES_EINVAL;   /* a bucket must cover at least a nanosecond */
  window->width = span / buckets;
  window->count = buckets;
  window->reserved_ = 0;
  for (uint32_t i = 0; i < NRES_SHARDS; i++)
    for (uint32_t k = 0; k < NRES__ARRAY_SIZE(window->shard[i].reserved_); k++)
      window->shard[i].reserved_[k] = 0;
  nres_window_clear(window);
  return 0;
}

/* Is a bucket holding w, on ring of `count`, ahead of slice s: a newer
 * slice at most `count` slices on, with calls in it? A sample of s that
 * arrives then (a thread that read the clock long ago) has already left
 * the window, and replacing the bucket would erase current counts. */
static int ahead_of(uint64_t w, uint64_t s, uint32_t count) {
  uint16_t ahead = (uint16_t) (SLICE(w) - (uint16_t) s);
  return ahead != 0 && ahead <= count && CALLS(w) != 0;
}

/* Add inc (counts of slice s, slice bits 0) to the ring bucket of s. */
static void ring_add(nres_window_t *window, uint64_t s, uint64_t inc) {
  _Atomic uint64_t *b = &window->bucket[s % window->count];
  uint64_t w = nres__load(b);
  uint64_t n;

  for (;;) {
    if (SLICE(w) == (uint16_t) s) {
      if (CALLS(w) + CALLS(inc) > 0xffff)
        return;   /* saturated: drop the whole sample */
      n = w + inc;
    } else {
      if (ahead_of(w, s, window->count))
        return;
      n = (s & SLICE_MASK) + inc;
    }
    if (nres__cas(b, &w, n))
      return;
  }
}

/* An add the common case (window.h) does not cover (this thread has no
 * shard yet, its pending bucket holds another slice or is full, or the CAS
 * lost). Out of line, so that the common case calls nothing. */
__attribute__((noinline)) void nres__window_add_slow(nres_window_t *window,
                                                     uint64_t s,
                                                     uint64_t inc) {
  _Atomic uint64_t *p = &window->shard[nres__shard()].pending;
  uint64_t w = nres__load(p);

  for (;;) {
    if (SLICE(w) == (uint16_t) s) {
      if (CALLS(w) == 0xffff)
        return;   /* saturated: drop the whole sample */
      if (nres__cas(p, &w, w + inc))
        return;
    } else if (ahead_of(w, s, window->count)) {
      /* This shard has moved on: the late sample goes to its own slice's
       * ring bucket, where ring_add keeps it only if still current. */
      ring_add(window, s, inc);
      return;
    } else if (nres__cas(p, &w, (s & SLICE_MASK) + inc)) {
      /* This shard's first sample of slice s: the older slice it held
       * moves into the ring. Its slice number comes back from 16 bits:
       * the latest slice <= s with those bits. */
      if (CALLS(w) != 0)
        ring_add(window, s - (uint16_t) ((uint16_t) s - SLICE(w)),
                 w & ~SLICE_MASK);
      return;
    }
  }
}

void nres_window_add(nres_window_t *window, nres_time_t now, int failure,
                     int slow) {
  nres__window_add(window, now,
                   CALL_ONE + (failure ? FAILURE_ONE : 0) +
                       (slow ? SLOW_ONE : 0));
}

void nres_window_sum(const nres_window_t *window, nres_time_t now,
                     uint32_t *calls, uint32_t *failures, uint32_t *slow) {
  uint32_t c;
  uint32_t f;
  uint32_t sl;
  uint32_t i;
  uint16_t cur;
  uint64_t w;

  c = f = sl = 0;
  cur = (uint16_t) (now / window->width);
  /* The ring's buckets, then the shards' pending ones. */
  for (i = 0; i < window->count + NRES_SHARDS; i++) {
    if (i < window->count)
      w = nres__load(&window->bucket[i]);
    else
      w = nres__load(&window->shard[i - window->count].pending);
    if ((uint16_t) (cur - SLICE(w)) < window->count) {
      c += CALLS(w);
      f += FAILURES(w);
      sl += SLOWS(w);
    }
  }
  if (calls != NULL)
    *calls = c;
  if (failures != NULL)
    *failures = f;
  if (slow != NULL)
    *slow = sl;
}

void nres_window_clear(nres_window_t *window) {
  uint32_t i;

  for (i = 0; i < NRES_WINDOW_MAX_BUCKETS; i++)
    nres__store(&window->bucket[i], 0);
  for (i = 0; i < NRES_SHARDS; i++)
    nres__store(&window->shard[i].pending, 0);
}

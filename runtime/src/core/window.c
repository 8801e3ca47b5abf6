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
 * A sample lands in bucket (now / width) % count. If that bucket still
 * holds an older slice, the sample replaces it with a fresh word, which is
 * how expired counts leave the window without a sweeper. Counts saturate:
 * once a bucket holds 65535 calls, further samples for that slice are
 * dropped whole, so failures/calls and slow/calls stay a consistent sample.
 * failures <= calls and slow <= calls, so no field can carry into the next.
 *
 * Slices are compared modulo 2^16: a bucket left untouched for exactly a
 * multiple of 65536 slices (with the breaker's 3 s default width, 2.3 days)
 * would be taken for current. That is the price of one word per bucket.
 */
#include "internal.h"

#define SLICE_MASK 0xffffull
#define CALL_ONE (1ull << 16)
#define FAILURE_ONE (1ull << 32)
#define SLOW_ONE (1ull << 48)

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
  nres_window_clear(window);
  return 0;
}

void nres_window_add(nres_window_t *window, nres_time_t now, int failure,
                     int slow) {
  uint64_t s;
  uint64_t w;
  uint64_t n;
  uint64_t inc;
  uint16_t ahead;
  _Atomic uint64_t *b;

  s = now / window->width;
  b = &window->bucket[s % window->count];
  inc = CALL_ONE + (failure ? FAILURE_ONE : 0) + (slow ? SLOW_ONE : 0);

  w = nres__load(b);
  for (;;) {
    if (SLICE(w) == (uint16_t) s) {
      if (CALLS(w) == 0xffff)
        return;   /* saturated: drop the whole sample */
      n = w + inc;
    } else {
      /* A thread that read the clock long ago may arrive after the bucket
       * has moved on to a newer slice; its sample has already left the
       * window, and replacing the bucket would erase current counts. */
      ahead = (uint16_t) (SLICE(w) - (uint16_t) s);
      if (ahead <= window->count && CALLS(w) != 0)
        return;
      n = (s & SLICE_MASK) + inc;
    }
    if (nres__cas(b, &w, n))
      return;
  }
}

void nres_window_sum(const nres_window_t *window, nres_time_t now,
                     uint32_t *calls, uint32_t *failures, uint32_t *slow) {
  uint32_t c;
  uint32_t f;
  uint32_t sl;
  uint32_t i;
  uint16_t cur;
  uint16_t age;
  uint64_t w;

  c = f = sl = 0;
  cur = (uint16_t) (now / window->width);
  for (i = 0; i < window->count; i++) {
    w = nres__load(&window->bucket[i]);
    age = (uint16_t) (cur - SLICE(w));
    if (age < window->count) {
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
}

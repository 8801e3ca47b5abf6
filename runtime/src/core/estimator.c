/* estimator.c - latency quantiles from a log-linear histogram kept over two
 * rotating windows.
 *
 * Hedging, the adaptive attempt ceiling and the slow-call threshold all ask
 * "what is the recent p50 / p95?". A histogram answers in fixed memory with
 * a lock-free record: values below 16 ns have a bucket each, above that each
 * power of two is cut into 16 sub-buckets, so a bucket's width is at most
 * 1/16 (6.25 %) of its lower bound. Two windows of `period` rotate: a record
 * lands in the window of now / period, and a quantile reads the current and
 * the previous window, so the answer covers between one and two periods and
 * never the whole past. It is separate from the window of outcome counts
 * (window.c) because it stores a distribution, not three counters.
 *
 * Approximations, chosen so that record is a handful of relaxed atomic adds:
 * - When a window is reused for a new period, the thread whose CAS moves its
 *   epoch forward zeroes its counts. A sample another thread adds in the
 *   same instant may be wiped by that reset, and a thread that read the old
 *   epoch just before the rotation may add its (old) sample to the new
 *   period. Both are a few samples at a period boundary.
 * - A sample whose period is older than the window's (a thread's `now` read
 *   late) is dropped; it would be too old to count anyway.
 * - A quantile read during a record or a reset sees counts that may be a few
 *   samples off. Counts are 32-bit: more than 2^32 samples in one bucket in
 *   one period would wrap.
 */
#include <math.h>

#include "internal.h"

#define SUB_BITS 4    /* log2(NRES_HIST_SUB) */
#define LAST_BUCKET (NRES_HIST_BUCKETS - 1)

uint32_t nres_hist_index(uint64_t value) {
  uint32_t e;
  uint32_t index;

  if (value < NRES_HIST_SUB)
    return (uint32_t) value;
  e = 63 - (uint32_t) __builtin_clzll(value);      /* >= SUB_BITS */
  index = (e - (SUB_BITS - 1)) * NRES_HIST_SUB +
          (uint32_t) ((value >> (e - SUB_BITS)) & (NRES_HIST_SUB - 1));
  return index < LAST_BUCKET ? index : LAST_BUCKET;
}

uint64_t nres_hist_upper(uint32_t index) {
  uint32_t shift;
  uint64_t lower;

  if (index < NRES_HIST_SUB)
    return index;
  if (index >= LAST_BUCKET)
    return UINT64_MAX;    /* the last bucket takes everything above */
  shift = index / NRES_HIST_SUB - 1;   /* e - SUB_BITS */
  lower = (uint64_t) (NRES_HIST_SUB + index % NRES_HIST_SUB) << shift;
  return lower + ((uint64_t) 1 << shift) - 1;
}

int nres_estimator_init(nres_estimator_t *estimator, nres_time_t period) {
  if (estimator == NULL || period == 0 || period == NRES_TIME_INVALID)
    return NRES_EINVAL;
  estimator->period = period;
  for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++) {
    nres__store(&estimator->epoch[w], 0);
    for (int i = 0; i < NRES_HIST_BUCKETS; i++)
      nres__store(&estimator->count[w][i], 0);
  }
  return 0;
}

/* The epoch tag of now's period: period number + 1, so 0 means "unused".
 * Saturates (only reachable with period 1 and now NRES_TIME_NEVER). */
static uint64_t epoch_of(const nres_estimator_t *estimator, nres_time_t now) {
  uint64_t p = now / estimator->period;
  return p == UINT64_MAX ? p : p + 1;
}

void nres_estimator_record(nres_estimator_t *estimator, nres_time_t now,
                           nres_time_t latency) {
  uint64_t tag;
  uint64_t seen;
  uint32_t w;

  tag = epoch_of(estimator, now);
  w = (uint32_t) ((tag - 1) % NRES_ESTIMATOR_WINDOWS);
  seen = nres__load(&estimator->epoch[w]);
  while (seen != tag) {
    if (seen > tag)
      return;   /* a later period owns this window: the sample is stale */
    if (nres__cas(&estimator->epoch[w], &seen, tag)) {
      for (int i = 0; i < NRES_HIST_BUCKETS; i++)
        nres__store(&estimator->count[w][i], 0);
      break;
    }
  }
  nres__add(&estimator->count[w][nres_hist_index(latency)], 1);
}

nres_time_t nres_estimator_quantile(const nres_estimator_t *estimator,
                                    nres_time_t now, double q,
                                    uint64_t *samples) {
  uint64_t tag;
  uint64_t total;
  uint64_t rank;
  uint64_t seen;
  uint64_t cum;
  int use[NRES_ESTIMATOR_WINDOWS];
  uint32_t last;

  tag = epoch_of(estimator, now);
  for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++) {
    seen = nres__load(&estimator->epoch[w]);
    use[w] = seen != 0 && (seen == tag || seen + 1 == tag);
  }

  total = 0;
  for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++)
    if (use[w])
      for (int i = 0; i < NRES_HIST_BUCKETS; i++)
        total += nres__load(&estimator->count[w][i]);
  if (samples != NULL)
    *samples = total;
  if (total == 0)
    return 0;

  /* q outside (0, 1] is clamped into it: q <= 0 (or NaN) asks for the
   * smallest sample, q > 1 for the largest. */
  if (!(q > 0))
    rank = 1;
  else if (q >= 1)
    rank = total;
  else {
    rank = (uint64_t) ceil(q * (double) total);
    if (rank < 1)
      rank = 1;
    if (rank > total)
      rank = total;
  }

  /* Counts may move under us (records, a reset); if the second pass falls
   * short of rank, the highest bucket seen answers. */
  cum = 0;
  last = 0;
  for (uint32_t i = 0; i < NRES_HIST_BUCKETS; i++) {
    uint64_t n = 0;
    for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++)
      if (use[w])
        n += nres__load(&estimator->count[w][i]);
    if (n == 0)
      continue;
    last = i;
    cum += n;
    if (cum >= rank)
      return nres_hist_upper(i);
  }
  return nres_hist_upper(last);
}

/* SPDX-License-Identifier: MIT */
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
 * Threads sharing an estimator (every OK attempt of a policy records) would
 * all add to the one histogram line their common latency falls in. So a
 * record goes first to its thread's shard (shard.h): entry[bucket % 24] of
 * the shard counts the samples of one bucket in one period, packed in one
 * word:
 *
 *   bits  0-31  samples
 *   bits 32-41  bucket
 *   bits 42-63  period number (now / period), low 22 bits
 *
 * A record of the same bucket and period adds one to the entry (a CAS on
 * the shard's own line); any other takes the entry over and moves what it
 * held into the histogram: a shared line, written by every process that
 * records (nginx workers), so the entries span one and a half powers of
 * two (24 buckets): any 24 consecutive buckets (latencies within x2.5 of
 * one another) keep to their own entries (with 16, one power of two, a gateway's healthy tries moved a
 * batch into the histogram on about every other try under callgrind;
 * with 24, about one in eighty). Quantiles read the histogram and the
 * entries, so a sample is counted once wherever it sits. A tag of 22 bits wraps
 * after 4 million periods: an entry left untouched that long would be
 * taken for current (with the default 30 s period, 4 years).
 *
 * Approximations, chosen so that record is a handful of relaxed atomics:
 * - When a window is reused for a new period, a thread zeroes its counts
 *   and then moves its epoch forward with a CAS. Two threads doing so at
 *   once may wipe what a third adds in between (a sample, or an entry's
 *   batch), and a thread that read the old epoch just before the rotation
 *   may add its (old) sample to the new period. Both are at a period
 *   boundary; an entry more than one period old is dropped rather than
 *   moved, so no old batch lands in a new period.
 * - A sample whose period is older than the window's (a thread's `now` read
 *   late) is dropped; it would be too old to count anyway.
 * - A quantile read during a record, a reset, or while an entry moves into
 *   the histogram sees counts that may be a few samples off. Counts are
 *   32-bit: more than 2^32 samples in one bucket in one period would wrap.
 */
#include <math.h>

#include "core/estimator.h"
#include "core/shard.h"

#define SUB_BITS 4    /* log2(NRES_HIST_SUB) */
#define LAST_BUCKET (NRES_HIST_BUCKETS - 1)

#define TAG_BITS 22
#define TAG_MASK ((1ull << TAG_BITS) - 1)
/* The entry key of bucket `index` in period number `period` (now / the
 * estimator's period; its tag - 1): bits 42-63 keep its low 22 bits. */
#define ENTRY(period, index) \
  ((uint64_t) (period) << 42 | (uint64_t) (index) << 32)
#define E_COUNT(e) ((uint32_t) (e))
#define E_INDEX(e) ((uint32_t) ((e) >> 32) & 0x3ff)
#define E_TAG(e) ((e) >> 42)

/* nres_hist_index, inline for record's common case. With e the top bit's
 * position (>= SUB_BITS) and shift = e - SUB_BITS, the bucket is
 * (e - SUB_BITS + 1) * 16 + the 4 bits below the top one; value >> shift
 * is 16 + those 4 bits, so that is shift * 16 + (value >> shift). Below
 * 16, value | 16 has its top bit at SUB_BITS: shift 0, bucket value. */
static inline __attribute__((always_inline)) uint32_t hist_index(
    uint64_t value) {
  uint32_t shift;
  uint32_t index;

  shift = 63 - SUB_BITS - (uint32_t) __builtin_clzll(value | NRES_HIST_SUB);
  index = shift * NRES_HIST_SUB + (uint32_t) (value >> shift);
  return index < LAST_BUCKET ? index : LAST_BUCKET;
}

uint32_t nres_hist_index(uint64_t value) {
  return hist_index(value);
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
  for (int k = 0; k < NRES_SHARDS; k++) {
    for (int j = 0; j < NRES_ESTIMATOR_PENDING; j++)
      nres__store(&estimator->shard[k].entry[j], 0);
    for (size_t j = 0; j < NRES__ARRAY_SIZE(estimator->shard[k].reserved_); j++)
      estimator->shard[k].reserved_[j] = 0;
  }
  return 0;
}

/* The epoch tag of now's period: period number + 1, so 0 means "unused".
 * Saturates (only reachable with period 1 and now NRES_TIME_NEVER). */
static uint64_t epoch_of(const nres_estimator_t *estimator, nres_time_t now) {
  uint64_t p = now / estimator->period;
  return p == UINT64_MAX ? p : p + 1;
}

/* How many periods an entry's tag is behind `tag` (full), from its low
 * bits: more than TAG_MASK / 2 means it is ahead (recorded by a thread
 * whose clock read ran later than this one's). */
static uint64_t behind(uint64_t e, uint64_t tag) {
  return (tag - 1 - E_TAG(e)) & TAG_MASK;
}

/* Add n samples of bucket `index` to the histogram window of `tag`. */
static void hist_add(nres_estimator_t *estimator, uint64_t tag,
                     uint32_t index, uint32_t n) {
  uint64_t seen;
  uint32_t w;

  w = (uint32_t) ((tag - 1) % NRES_ESTIMATOR_WINDOWS);
  seen = nres__load(&estimator->epoch[w]);
  while (seen != tag) {
    if (seen > tag)
      return;   /* a later period owns this window: the sample is stale */
    /* Zero, then claim: a thread that sees the new epoch adds after the
     * zeroing, so only a second thread zeroing at the same time can wipe
     * its add (claiming first would let every add of the first moments be
     * wiped, and an add here can be an entry's whole batch). */
    for (int i = 0; i < NRES_HIST_BUCKETS; i++)
      nres__store(&estimator->count[w][i], 0);
    if (nres__cas(&estimator->epoch[w], &seen, tag))
      break;
  }
  nres__add(&estimator->count[w][index], n);
}

/* A record the common case (nres__estimator_try_record_in) does not cover (this thread has no
 * shard yet, its entry holds another bucket or period, or is full, or the
 * CAS lost): take the entry over and move what it held into the
 * histogram. An entry of a later period stays (this thread's clock read
 * is late): the sample goes to the histogram, which drops it if its window
 * has moved on too. Out of line, so that the common case calls nothing. */
__attribute__((noinline)) void nres__estimator_record_slow(
    nres_estimator_t *estimator, nres_time_t now, nres_time_t latency) {
  _Atomic uint64_t *slot;
  uint64_t tag;
  uint64_t key;
  uint64_t late;
  uint64_t e;
  uint32_t index;

  tag = epoch_of(estimator, now);
  index = nres_hist_index(latency);
  key = ENTRY(tag - 1, index);
  slot = &estimator->shard[nres__shard()].entry[index % NRES_ESTIMATOR_PENDING];
  e = nres__load(slot);
  for (;;) {
    if ((e & ~(uint64_t) UINT32_MAX) == key && E_COUNT(e) != UINT32_MAX) {
      if (nres__cas(slot, &e, e + 1))
        return;
      continue;
    }
    late = behind(e, tag);
    if (E_COUNT(e) != 0 && late > TAG_MASK / 2) {
      hist_add(estimator, tag, index, 1);
      return;
    }
    if (nres__cas(slot, &e, key + 1)) {
      /* Only the current and the previous period are ever read: an older
       * entry's samples are dropped, not moved into a window that a
       * newer period may be reclaiming. */
      if (E_COUNT(e) != 0 && late <= 1 && late < tag)
        hist_add(estimator, tag - late, E_INDEX(e), E_COUNT(e));
      return;
    }
  }
}

/* Inline into the executor (LTO): it runs on every successful call. k is
 * the calling thread's nres__shard_if_taken. */
__attribute__((always_inline)) inline int nres__estimator_try_record_in(
    nres_estimator_t *estimator, unsigned k, nres_time_t now,
    nres_time_t latency) {
  _Atomic uint64_t *slot;
  uint64_t e;
  uint64_t n;
  uint32_t index;

  /* The common case: this shard's entry already counts this bucket in
   * this period. The key's period is now / period, where the slow path
   * takes epoch_of(now) - 1 (epoch_of saturates: the two differ only at
   * now = NRES_TIME_NEVER with period 1, where this test fails and the
   * slow path does it right). One more sample
   * would carry out of a full count into the bucket bits: then n's key
   * differs too. */
  if (__builtin_expect(k >= NRES_SHARDS, 0))
    return 0;
  index = hist_index(latency);
  slot = &estimator->shard[k].entry[index % NRES_ESTIMATOR_PENDING];
  e = nres__load(slot);
  n = e + 1;
  return (n & ~(uint64_t) UINT32_MAX) ==
             ENTRY(now / estimator->period, index) &&
         nres__cas(slot, &e, n);
}

__attribute__((always_inline)) inline void nres__estimator_record_in(
    nres_estimator_t *estimator, unsigned k, nres_time_t now,
    nres_time_t latency) {
  if (!nres__estimator_try_record_in(estimator, k, now, latency))
    nres__estimator_record_slow(estimator, now, latency);
}

void nres_estimator_record(nres_estimator_t *estimator, nres_time_t now,
                           nres_time_t latency) {
  nres__estimator_record_in(estimator, nres__shard_if_taken(), now, latency);
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
  /* The shards' entries of the current and the previous period, read once
   * and sorted by bucket. */
  struct {
    uint32_t index;
    uint32_t n;
  } held[NRES_SHARDS * NRES_ESTIMATOR_PENDING], one;
  int nheld;
  int h;

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
  nheld = 0;
  for (int k = 0; k < NRES_SHARDS; k++)
    for (int j = 0; j < NRES_ESTIMATOR_PENDING; j++) {
      uint64_t e = nres__load(&estimator->shard[k].entry[j]);
      uint64_t late = behind(e, tag);
      if (E_COUNT(e) == 0 || late > 1 || late >= tag)
        continue;
      one.index = E_INDEX(e);
      one.n = E_COUNT(e);
      total += one.n;
      for (h = nheld++; h > 0 && held[h - 1].index > one.index; h--)
        held[h] = held[h - 1];
      held[h] = one;
    }
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

  /* Counts may move under us (records, a reset, an entry moving into the
   * histogram after it was read above); if the second pass falls short of
   * rank, the highest bucket seen answers. */
  cum = 0;
  last = 0;
  h = 0;
  for (uint32_t i = 0; i < NRES_HIST_BUCKETS; i++) {
    uint64_t n = 0;
    for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++)
      if (use[w])
        n += nres__load(&estimator->count[w][i]);
    for (; h < nheld && held[h].index == i; h++)
      n += held[h].n;
    if (n == 0)
      continue;
    last = i;
    cum += n;
    if (cum >= rank)
      return nres_hist_upper(i);
  }
  return nres_hist_upper(last);
}

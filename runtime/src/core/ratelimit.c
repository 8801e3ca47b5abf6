/* SPDX-License-Identifier: MIT */
/* ratelimit.c - the GCRA rate limiter: `rate` admissions per second with a
 * burst of `burst`.
 *
 * GCRA (the generic cell rate algorithm) keeps one number, the theoretical
 * arrival time (tat): when the next admission would be due if callers came
 * exactly at the rate. An admission moves tat one interval forward; it is
 * allowed while tat stays within `tolerance` (burst intervals) of now. One
 * atomic word and one CAS per admission, so the limiter can be shared by
 * threads and by processes mapping the same memory. It is separate from the
 * bulkhead because it bounds a rate, not a concurrency.
 */
#include <math.h>

#include "internal.h"

int nres_ratelimit_init(nres_ratelimit_t *limit, double rate, uint32_t burst) {
  nres_time_t interval;

  if (limit == NULL || !(rate > 0) || !isfinite(rate) || burst < 1)
    return NRES_EINVAL;

  /* Rounded to the nearest ns; a rate above 1e9/s is capped at one
   * admission per ns, a rate too low to represent saturates. */
  interval = nres__time_from_double(1e9 / rate + 0.5);
  if (interval == 0)
    interval = 1;

  limit->interval = interval;
  limit->tolerance = nres__mul_sat(interval, burst);
  nres__store(&limit->tat, 0);
  nres__store(&limit->refused, 0);
  return 0;
}

int nres_ratelimit_acquire(nres_ratelimit_t *limit, nres_time_t now,
                           nres_time_t *retry_after) {
  uint64_t tat;
  uint64_t from;
  uint64_t new_tat;
  nres_time_t wait;
  nres_time_t interval;
  nres_time_t tolerance;

  /* Relaxed atomic loads: nres_ratelimit_set_rate may change the rate of
   * a limiter in use (the fleet sync agent moves a host's quota). A pair
   * read across a change mixes old and new for one admission, no more. */
  interval = __atomic_load_n(&limit->interval, __ATOMIC_RELAXED);
  tolerance = __atomic_load_n(&limit->tolerance, __ATOMIC_RELAXED);
  tat = nres__load(&limit->tat);
  for (;;) {
    from = tat > now ? tat : now;
    /* A tat past the end of time cannot be stored: saturating it would
     * leave tat stuck at NRES_TIME_NEVER and, with a saturated tolerance,
     * admit everything after. Such a rate (one admission per centuries)
     * refuses instead. */
    if (from > NRES_TIME_NEVER - interval) {
      wait = NRES_TIME_NEVER;
      break;
    }
    new_tat = from + interval;
    if (new_tat - now > tolerance) {
      wait = new_tat - now - tolerance;
      break;
    }
    if (nres__cas(&limit->tat, &tat, new_tat))
      return 0;
  }

  /* A refusal leaves tat alone: refused callers do not use up the rate. */
  nres__add(&limit->refused, 1);
  if (retry_after != NULL)
    *retry_after = wait;
  return NRES_ELIMITED;
}

int nres_ratelimit_acquire_class(nres_ratelimit_t *limit, nres_time_t now,
                                 int cls, nres_time_t *retry_after) {
  if (__builtin_expect(cls == NRES_CLASS_SHEDDABLE, 0) && limit != NULL) {
    nres_time_t interval = __atomic_load_n(&limit->interval, __ATOMIC_RELAXED);
    nres_time_t half = __atomic_load_n(&limit->tolerance, __ATOMIC_RELAXED) / 2;
    nres_time_t tat = nres__load(&limit->tat);
    nres_time_t next = nres_time_add(tat > now ? tat : now, interval);
    if (next - now > half) {
      if (retry_after != NULL)
        *retry_after = next - now - half;
      nres__add(&limit->refused, 1);
      return NRES_ELIMITED;
    }
  }
  return nres_ratelimit_acquire(limit, now, retry_after);
}

void nres_ratelimit_stats(const nres_ratelimit_t *limit,
                          nres_ratelimit_stats_t *out) {
  nres_ratelimit_t *l = (nres_ratelimit_t *) limit;   /* loads only */

  out->tat = nres__load(&l->tat);
  out->refused = nres__load(&l->refused);
}

int nres_ratelimit_set_rate(nres_ratelimit_t *limit, double rate,
                            uint32_t burst, nres_time_t now) {
  nres_time_t interval, old;
  uint64_t tat, n;
  unsigned __int128 debt;

  if (limit == NULL || !(rate > 0) || !isfinite(rate) || burst < 1)
    return NRES_EINVAL;
  interval = nres__time_from_double(1e9 / rate + 0.5);
  if (interval == 0)
    interval = 1;
  old = __atomic_load_n(&limit->interval, __ATOMIC_RELAXED);
  __atomic_store_n(&limit->interval, interval, __ATOMIC_RELAXED);
  __atomic_store_n(&limit->tolerance, nres__mul_sat(interval, burst),
                   __ATOMIC_RELAXED);
  /* The admissions tat is ahead of now by keep counting, at the new rate:
   * a limiter that was slow (one admission a second, tat seconds ahead)
   * and is made fast must not refuse until the old tat comes. */
  tat = nres__load(&limit->tat);
  while (tat > now && old != 0 && old != interval) {
    debt = (unsigned __int128) (tat - now) * interval / old;
    if (debt > nres__mul_sat(interval, burst))
      debt = nres__mul_sat(interval, burst);
    n = nres_time_add(now, (nres_time_t) debt);
    if (nres__cas(&limit->tat, &tat, n))
      break;
  }
  return 0;
}

double nres_ratelimit_rate(const nres_ratelimit_t *limit) {
  nres_time_t interval;

  if (limit == NULL)
    return 0;
  interval = __atomic_load_n(&limit->interval, __ATOMIC_RELAXED);
  return interval == 0 ? 0 : 1e9 / (double) interval;
}

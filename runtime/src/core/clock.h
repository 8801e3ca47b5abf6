/* SPDX-License-Identifier: MIT */
/* clock.h - nres_clock_now's fast path, inline for the drivers.
 *
 * A sync call reads the clock twice (its start, its attempt's end): once
 * the TSC is calibrated (clock.c says how), a read is a load, rdtsc and a
 * multiply, cheaper inline than the call to nres_clock_now. Everything
 * else - calibration, CLOCK_MONOTONIC - stays in clock.c.
 */
#ifndef NRES_CORE_CLOCK_H
#define NRES_CORE_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "nres.h"

#if defined(__x86_64__)
# include <x86intrin.h>
#endif

enum {
  NRES__TSC_UNKNOWN = 0, NRES__TSC_CALIBRATING, NRES__TSC_SWITCHING,
  NRES__TSC_READY, NRES__TSC_OFF
};

/* The scale, written by the thread that calibrates, published by
 * nres__tsc_state = NRES__TSC_READY (release). */
typedef struct {
  uint64_t base_tsc, base_ns;
  uint64_t mult;                /* ns per tick, 32.32 */
} nres__tsc_scale_t;

extern atomic_int nres__tsc_state;
extern nres__tsc_scale_t nres__tsc_scale;

nres_time_t nres__clock_slow(int state);

/* nres__clock_now's usual read: 1 with the time in *now while the TSC is
 * in use, 0 (nothing read) when nres__clock_now would take its slow path.
 * It calls nothing, so a caller that hands the 0 case on keeps a path
 * without a stack frame. */
static inline int nres__clock_tsc(nres_time_t *now) {
#if defined(__x86_64__)
  int state = atomic_load_explicit(&nres__tsc_state, memory_order_acquire);
  if (__builtin_expect(state == NRES__TSC_READY, 1)) {
    uint64_t ticks = __rdtsc() - nres__tsc_scale.base_tsc;
    if (ticks < (UINT64_C(1) << 62))   /* a TSC going back reads as huge */
      *now = nres__tsc_scale.base_ns +
             (nres_time_t) (((unsigned __int128) ticks *
                             nres__tsc_scale.mult) >> 32);
    else
      *now = nres__tsc_scale.base_ns;
    return 1;
  }
#else
  (void) now;
#endif
  return 0;
}

static inline nres_time_t nres__clock_now(void) {
  nres_time_t now;

  if (__builtin_expect(nres__clock_tsc(&now), 1))
    return now;
  return nres__clock_slow(
      atomic_load_explicit(&nres__tsc_state, memory_order_acquire));
}

#endif /* NRES_CORE_CLOCK_H */

/* clock.c - the runtime's one clock, and seconds-to-ns conversion.
 *
 * The decision engine never reads a clock: time is passed in, so tests run
 * on a virtual clock. Drivers call nres_clock_now, CLOCK_MONOTONIC in ns.
 *
 * A call needs two clock reads (its start and its attempt's end), and
 * clock_gettime costs ~30 ns in a VM: as much as the rest of the call. So
 * on x86-64, when the kernel itself keeps time with the TSC (clocksource
 * "tsc", invariant TSC), the clock counts TSC ticks instead, scaled to ns.
 * The scale is learned without a busy wait: the first read pairs a TSC
 * value with CLOCK_MONOTONIC, reads keep using clock_gettime until 50 ms
 * have passed, and the next read pairs them again and derives ticks per ns
 * from the interval (error ~1e-6). From then on the clock continues from
 * that pair, so it never jumps backwards at the switch. NRES_CLOCK=monotonic
 * in the environment keeps clock_gettime.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#if defined(__x86_64__)
# include <x86intrin.h>
# define HAVE_TSC 1
#else
# define HAVE_TSC 0
#endif

#define CALIBRATION_SPAN (50 * NRES_MSEC)

enum { TSC_UNKNOWN = 0, TSC_CALIBRATING, TSC_SWITCHING, TSC_READY, TSC_OFF };

static struct {
  atomic_int state;
  uint64_t tsc0;        /* a TSC value ... */
  nres_time_t ns0;      /* ... and CLOCK_MONOTONIC at the same moment */
  uint64_t mult;        /* ns per tick, 32.32 fixed point */
} tsc;

static nres_time_t monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (nres_time_t) ts.tv_sec * NRES_SEC + (nres_time_t) ts.tv_nsec;
}

#if HAVE_TSC
static int kernel_trusts_tsc(void) {
  char name[32] = "";
  const char *env = getenv("NRES_CLOCK");
  FILE *f;

  if (env != NULL && strcmp(env, "monotonic") == 0)
    return 0;
  f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "r");
  if (f == NULL)
    return 0;
  if (fgets(name, sizeof(name), f) == NULL)
    name[0] = '\0';
  fclose(f);
  return strncmp(name, "tsc", 3) == 0 && (name[3] == '\n' || name[3] == '\0');
}

/* Slow path: before the scale is known. One thread at a time calibrates;
 * the others read CLOCK_MONOTONIC meanwhile. */
static nres_time_t calibrate(int state) {
  nres_time_t now;
  uint64_t ticks;

  if (state == TSC_UNKNOWN) {
    int expected = TSC_UNKNOWN;
    if (!atomic_compare_exchange_strong(&tsc.state, &expected, TSC_OFF))
      return monotonic();
    if (!kernel_trusts_tsc())
      return monotonic();   /* stays OFF */
    tsc.tsc0 = __rdtsc();
    tsc.ns0 = monotonic();
    atomic_store_explicit(&tsc.state, TSC_CALIBRATING, memory_order_release);
    return tsc.ns0;
  }
  now = monotonic();
  if (state != TSC_CALIBRATING || now - tsc.ns0 < CALIBRATION_SPAN)
    return now;
  {
    int expected = TSC_CALIBRATING;
    /* Claim the switch; others read CLOCK_MONOTONIC while it is made. */
    if (!atomic_compare_exchange_strong(&tsc.state, &expected, TSC_SWITCHING))
      return now;
  }
  ticks = __rdtsc();
  now = monotonic();
  if (ticks <= tsc.tsc0 || now <= tsc.ns0) {
    atomic_store_explicit(&tsc.state, TSC_OFF, memory_order_release);
    return now;
  }
  tsc.mult = (uint64_t) (((unsigned __int128) (now - tsc.ns0) << 32) /
                         (ticks - tsc.tsc0));
  tsc.tsc0 = ticks;
  tsc.ns0 = now;
  atomic_store_explicit(&tsc.state, TSC_READY, memory_order_release);
  return now;
}
#endif

nres_time_t nres_clock_now(void) {
#if HAVE_TSC
  int state = atomic_load_explicit(&tsc.state, memory_order_acquire);
  if (__builtin_expect(state == TSC_READY, 1)) {
    uint64_t ticks = __rdtsc() - tsc.tsc0;
    if (ticks < (UINT64_C(1) << 62))   /* a TSC going back reads as huge */
      return tsc.ns0 + (nres_time_t) (((unsigned __int128) ticks * tsc.mult) >> 32);
    return tsc.ns0;
  }
  if (state != TSC_OFF)
    return calibrate(state);
#endif
  return monotonic();
}

nres_time_t nres_time_from_sec(double seconds) {
  return nres__time_from_double(seconds * 1e9);
}

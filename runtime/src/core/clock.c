/* SPDX-License-Identifier: MIT */
/* clock.c - the runtime's one clock, and seconds-to-ns conversion.
 *
 * The decision engine never reads a clock: time is passed in, so tests run
 * on a virtual clock. Drivers call nres_clock_now, CLOCK_MONOTONIC in ns.
 *
 * A call needs two clock reads (its start and its attempt's end), and
 * clock_gettime costs ~30 ns in a VM: as much as the rest of the call. So
 * on x86-64, when the kernel itself keeps time with the TSC (clocksource
 * "tsc"), the clock counts TSC ticks instead, scaled to ns. The scale is
 * learned without a busy wait: the first read pairs a TSC value with
 * CLOCK_MONOTONIC, reads keep using clock_gettime until 50 ms have passed,
 * and the next read pairs them again and derives ns per tick from the
 * interval. Each pair brackets the TSC read between two clock_gettime
 * calls at most 2 us apart (retried; when no try manages it, as on a
 * loaded machine, the clock stays on CLOCK_MONOTONIC), after a warm-up
 * call, so the scale is off by a few ppm, not hundreds. From then on the clock
 * continues from the second pair: it never jumps backwards at the switch.
 * There is no later recalibration: over an hour it may drift a few ms from
 * CLOCK_MONOTONIC, which no decision here notices (they use differences);
 * NRES_CLOCK=monotonic in the environment keeps clock_gettime.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "core/clock.h"

#if defined(__x86_64__)
# include <x86intrin.h>
# define HAVE_TSC 1
#else
# define HAVE_TSC 0
#endif

#define CALIBRATION_SPAN (50 * NRES_MSEC)
#define PAIR_TOLERANCE (2 * NRES_USEC)


/* The first pair, written once before CALIBRATING is published. */
static atomic_uint_fast64_t first_tsc, first_ns;

/* The state, and the scale the switching thread writes (core/clock.h). */
atomic_int nres__tsc_state;
nres__tsc_scale_t nres__tsc_scale;

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

/* A TSC value and the CLOCK_MONOTONIC time of the same moment: the TSC
 * read bracketed by two clock reads, the pair taken at their midpoint.
 * 0, or -1 when no try bracketed it within PAIR_TOLERANCE: on a loaded
 * machine a thread preempted between the reads would otherwise give a
 * pair off by half the preemption (milliseconds), a scale off by percents
 * and a clock under which delayed work runs early (seen: test_pool with
 * the other core busy). The caller then stays on CLOCK_MONOTONIC. */
static int pair(uint64_t *ticks, nres_time_t *ns) {
  for (int tries = 0; tries < 64; tries++) {
    nres_time_t before = monotonic();
    uint64_t t = __rdtsc();
    nres_time_t after = monotonic();
    if (after - before <= PAIR_TOLERANCE) {
      *ticks = t;
      *ns = before + (after - before) / 2;
      return 0;
    }
  }
  return -1;
}

/* Slow path: before the scale is known. One thread at a time moves the
 * state on; the others read CLOCK_MONOTONIC meanwhile. */
static __attribute__((cold, noinline)) nres_time_t calibrate(int state) {
  uint64_t ticks, t0;
  nres_time_t now, n0;

  if (state == NRES__TSC_UNKNOWN) {
    int expected = NRES__TSC_UNKNOWN;
    if (!atomic_compare_exchange_strong(&nres__tsc_state, &expected,
                                        NRES__TSC_OFF))
      return monotonic();
    if (!kernel_trusts_tsc())
      return monotonic();   /* stays OFF */
    monotonic();            /* warm-up: the first call is slow */
    if (pair(&ticks, &now) != 0)
      return monotonic();   /* stays OFF */
    atomic_store_explicit(&first_tsc, ticks, memory_order_relaxed);
    atomic_store_explicit(&first_ns, now, memory_order_relaxed);
    atomic_store_explicit(&nres__tsc_state, NRES__TSC_CALIBRATING,
                          memory_order_release);
    return now;
  }
  now = monotonic();
  if (state != NRES__TSC_CALIBRATING)
    return now;
  n0 = atomic_load_explicit(&first_ns, memory_order_relaxed);
  if (now - n0 < CALIBRATION_SPAN)
    return now;
  {
    int expected = NRES__TSC_CALIBRATING;
    if (!atomic_compare_exchange_strong(&nres__tsc_state, &expected,
                                        NRES__TSC_SWITCHING))
      return now;
  }
  t0 = atomic_load_explicit(&first_tsc, memory_order_relaxed);
  if (pair(&ticks, &now) != 0 || ticks <= t0 || now <= n0) {
    atomic_store_explicit(&nres__tsc_state, NRES__TSC_OFF,
                          memory_order_release);
    return now;
  }
  nres__tsc_scale.mult =
      (uint64_t) (((unsigned __int128) (now - n0) << 32) / (ticks - t0));
  nres__tsc_scale.base_tsc = ticks;
  nres__tsc_scale.base_ns = now;
  atomic_store_explicit(&nres__tsc_state, NRES__TSC_READY,
                        memory_order_release);
  return now;
}
#endif

/* The clock when the TSC is not (yet) in use: the calibration's steps,
 * or CLOCK_MONOTONIC. */
nres_time_t nres__clock_slow(int state) {
#if HAVE_TSC
  if (state != NRES__TSC_OFF)
    return calibrate(state);
#endif
  (void) state;
  return monotonic();
}

nres_time_t nres_clock_now(void) {
  return nres__clock_now();
}

/* Every duration a caller configures in seconds comes through here, so
 * the edge cases are decided once: NaN and negatives are marked invalid
 * (refused where they are used) rather than read as 0, which means "none"
 * for a deadline; a positive amount never rounds down to 0; and anything
 * from 2^63 ns up saturates instead of wrapping (the values between 2^63
 * and never are what negative numbers wrap to: builders refuse them). */
nres_time_t nres_time_from_sec(double seconds) {
  double ns;

  if (seconds == 0)
    return 0;
  if (!(seconds > 0))
    return NRES_TIME_INVALID;   /* NaN, negative, -inf */
  ns = seconds * 1e9;
  if (ns < 1)
    return 1;
  if (ns >= 9223372036854775808.0)   /* 2^63 */
    return NRES_TIME_NEVER;
  return nres__time_from_double(ns);
}

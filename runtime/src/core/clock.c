/* clock.c - the runtime's one clock read, and seconds-to-ns conversion.
 *
 * The decision engine never reads a clock: time is passed in, so tests run
 * on a virtual clock. Drivers call nres_clock_now (CLOCK_MONOTONIC).
 */
#include <time.h>

#include "internal.h"

nres_time_t nres_clock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (nres_time_t) ts.tv_sec * NRES_SEC + (nres_time_t) ts.tv_nsec;
}

nres_time_t nres_time_from_sec(double seconds) {
  return nres__time_from_double(seconds * 1e9);
}

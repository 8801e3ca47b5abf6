/* SPDX-License-Identifier: MIT */
/* rng.c - the small seedable PRNG behind jitter (splitmix64).
 *
 * One 64-bit word of state, so a call or a thread carries its own and a
 * fixed seed reproduces a run. Not cryptographic.
 */
#include "internal.h"

void nres_rng_seed(nres_rng_t *rng, uint64_t seed) {
  rng->state = seed;
}

uint64_t nres_rng_next(nres_rng_t *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t nres_rng_below(nres_rng_t *rng, uint64_t bound) {
  if (bound == 0)
    return 0;
  /* Lemire's multiply-shift; the bias is below 2^-64 * bound. */
  return (uint64_t) (((unsigned __int128) nres_rng_next(rng) * bound) >> 64);
}

double nres_rng_unit(nres_rng_t *rng) {
  return (double) (nres_rng_next(rng) >> 11) * 0x1.0p-53;
}

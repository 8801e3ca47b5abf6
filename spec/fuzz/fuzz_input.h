/* SPDX-License-Identifier: MIT */
/* fuzz_input.h - a fuzzer's byte string read as typed values, for the
 * targets that build a structured input (a policy, a script of calls)
 * rather than parse the bytes as text.
 *
 * Reads never fail: past the end every value is 0, so a short input is a
 * valid one (everything off, every verdict OK) and a call always ends.
 * Numbers come either raw or from a small table of the values that break
 * code (0, the end of time, NaN, infinities, powers of two), so libFuzzer
 * reaches the edges without having to guess eight exact bytes.
 */
#ifndef NRES_FUZZ_INPUT_H
#define NRES_FUZZ_INPUT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres.h"

/* Abort with a message: what libFuzzer reports as the crash. */
#define FUZZ_CHECK(cond)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__,   \
              #cond);                                                        \
      abort();                                                               \
    }                                                                        \
  } while (0)

typedef struct {
  const uint8_t *p;
  size_t left;
} fuzz_in_t;

static inline void fuzz_in_init(fuzz_in_t *in, const uint8_t *data,
                                size_t size) {
  in->p = data;
  in->left = size;
}

static inline int fuzz_more(const fuzz_in_t *in) {
  return in->left > 0;
}

static inline void fuzz_bytes(fuzz_in_t *in, void *out, size_t n) {
  size_t k = n < in->left ? n : in->left;
  memcpy(out, in->p, k);
  memset((char *) out + k, 0, n - k);
  in->p += k;
  in->left -= k;
}

static inline uint8_t fuzz_u8(fuzz_in_t *in) {
  uint8_t v;
  fuzz_bytes(in, &v, 1);
  return v;
}

static inline uint32_t fuzz_u32(fuzz_in_t *in) {
  uint32_t v;
  fuzz_bytes(in, &v, sizeof(v));
  return v;
}

static inline uint64_t fuzz_u64(fuzz_in_t *in) {
  uint64_t v;
  fuzz_bytes(in, &v, sizeof(v));
  return v;
}

/* A count: small values most of the time, the edges of uint32 sometimes. */
static inline uint32_t fuzz_count(fuzz_in_t *in) {
  uint8_t sel = fuzz_u8(in);
  switch (sel >> 6) {
    case 0: return sel & 0x0f;
    case 1: return (uint32_t) (sel & 0x3f) * 7 + 1;
    case 2: return (uint32_t[]) { 0, 1, 255, 256, 65535, 65536,
                                  UINT32_MAX - 1, UINT32_MAX }[sel & 7];
    default: return fuzz_u32(in);
  }
}

/* A duration in ns: 0, the end of time, NRES_TIME_INVALID, powers of two,
 * a few human scales, or raw bytes. */
static inline nres_time_t fuzz_duration(fuzz_in_t *in) {
  uint8_t sel = fuzz_u8(in);
  switch (sel >> 5) {
    case 0: return 0;
    case 1: return (nres_time_t) (sel & 0x1f) * NRES_MSEC;
    case 2: return (nres_time_t) (sel & 0x1f) * NRES_SEC;
    case 3: return (nres_time_t) 1 << (sel & 0x1f) << (sel & 0x1f);
    case 4: return NRES_TIME_NEVER - (sel & 3);   /* NEVER, INVALID, ... */
    case 5: return (nres_time_t) fuzz_u8(in) * NRES_USEC;
    default: return fuzz_u64(in);
  }
}

/* A double: NaN, infinities, signed zeros, the edges of (0, 1], huge and
 * tiny magnitudes, small fractions, or raw bytes. */
static inline double fuzz_double(fuzz_in_t *in) {
  static const double edge[16] = {
    0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.95, 2.0,
    1e300, -1e300, 1e-300, 4.9e-324, 1.0000000000000002, 0.9999999999999999,
    18446744073709551616.0, 3.0
  };
  uint8_t sel = fuzz_u8(in);
  double d;
  switch (sel >> 5) {
    case 0: return edge[sel & 15];
    case 1: return (sel & 1) ? INFINITY : -INFINITY;
    case 2: return NAN;
    case 3: return (double) (sel & 0x1f) / 16.0;
    case 4: return (double) fuzz_u8(in) / 255.0;
    case 5: return (double) fuzz_u32(in);
    default:
      fuzz_bytes(in, &d, sizeof(d));
      return d;
  }
}

#endif /* NRES_FUZZ_INPUT_H */

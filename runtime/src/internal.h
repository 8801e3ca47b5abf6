/* SPDX-License-Identifier: MIT */
/* internal.h - helpers shared by the runtime's files, never installed.
 *
 * The allocator every allocation goes through, relaxed atomic shorthands and
 * saturating arithmetic. Names are nres__ (internal across files).
 */
#ifndef NRES_INTERNAL_H
#define NRES_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>

#include "nres.h"

#if ATOMIC_LLONG_LOCK_FREE != 2 || ATOMIC_INT_LOCK_FREE != 2
# error "nres needs lock-free 32- and 64-bit atomics (state may live in shared memory)"
#endif

void *nres__malloc(size_t size);
void *nres__calloc(size_t count, size_t size);
void *nres__realloc(void *ptr, size_t size);
void nres__free(void *ptr);

#define nres__load(p) atomic_load_explicit((p), memory_order_relaxed)
#define nres__store(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define nres__add(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define nres__sub(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_relaxed)
/* Weak CAS: may fail spuriously, so use it in a loop (or where a missed
 * turn is harmless); on failure *expected holds the current value. */
#define nres__cas(p, expected, desired)                                      \
  atomic_compare_exchange_weak_explicit((p), (expected), (desired),          \
                                        memory_order_acq_rel,                \
                                        memory_order_relaxed)

static inline uint64_t nres__mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return UINT64_MAX;
  return r;
}

/* A double number of ns to nres_time_t, saturating; NaN and <= 0 give 0. */
static inline nres_time_t nres__time_from_double(double ns) {
  if (!(ns > 0))
    return 0;
  if (ns >= 18446744073709549568.0)   /* largest double below 2^64 */
    return NRES_TIME_NEVER;
  return (nres_time_t) ns;
}

/* Write v in decimal at p (no NUL); returns the end. For hand-built
 * JSON and HTTP text where snprintf is too slow or may allocate. */
static inline char *nres__put_u64(char *p, uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = (char) ('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0)
    *p++ = tmp[--n];
  return p;
}

#define NRES__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* NRES_INTERNAL_H */

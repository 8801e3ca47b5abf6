/* nres_test.h - what every cmocka test of the runtime includes.
 *
 * cmocka's required headers in the required order, a counting allocator to
 * install with nres_replace_allocator (allocation tests assert on it), and
 * a tiny thread helper for the concurrency tests run under TSan.
 */
#ifndef NRES_TEST_H
#define NRES_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cmocka.h>

#include "nres.h"

/* Counting allocator: every call through nres's allocator bumps these. */
static atomic_ulong test_alloc_calls;
static atomic_ulong test_alloc_bytes;

static void *test_count_malloc(size_t n) {
  atomic_fetch_add(&test_alloc_calls, 1);
  atomic_fetch_add(&test_alloc_bytes, n);
  return malloc(n);
}
static void *test_count_realloc(void *p, size_t n) {
  atomic_fetch_add(&test_alloc_calls, 1);
  atomic_fetch_add(&test_alloc_bytes, n);
  return realloc(p, n);
}
static void *test_count_calloc(size_t c, size_t n) {
  atomic_fetch_add(&test_alloc_calls, 1);
  atomic_fetch_add(&test_alloc_bytes, c * n);
  return calloc(c, n);
}
static void test_count_free(void *p) {
  free(p);
}

/* Install the counting allocator and zero its counters. */
static inline void test_count_allocations(void) {
  atomic_store(&test_alloc_calls, 0);
  atomic_store(&test_alloc_bytes, 0);
  nres_replace_allocator(test_count_malloc, test_count_realloc,
                         test_count_calloc, test_count_free);
}

/* Run fn(arg_i) on n threads at once and join them all. */
typedef void *(*test_thread_fn)(void *);
static inline void test_run_threads(int n, test_thread_fn fn, void *args,
                                    size_t arg_size) {
  pthread_t tid[64];
  assert_true(n > 0 && n <= 64);
  for (int i = 0; i < n; i++)
    assert_int_equal(pthread_create(&tid[i], NULL, fn,
                                    (char *) args + (size_t) i * arg_size), 0);
  for (int i = 0; i < n; i++)
    assert_int_equal(pthread_join(tid[i], NULL), 0);
}

#endif /* NRES_TEST_H */

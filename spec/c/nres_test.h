/* SPDX-License-Identifier: MIT */
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

/* With NRES_TEST_INTERPOSE_MALLOC defined before this header, the test
 * executable also replaces the C library's malloc family, so an allocation
 * that bypasses nres's allocator (or one libuv makes) is counted too while
 * test_malloc_armed is set. Sanitizer builds interpose malloc themselves:
 * there only nres's allocator is counted. */
#if defined(NRES_TEST_INTERPOSE_MALLOC) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
# define TEST_MALLOC_INTERPOSED 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static atomic_int test_malloc_armed;
static atomic_ulong test_malloc_calls;
void *malloc(size_t n) {
  if (atomic_load_explicit(&test_malloc_armed, memory_order_relaxed))
    atomic_fetch_add(&test_malloc_calls, 1);
  return __libc_malloc(n);
}
void *calloc(size_t c, size_t n) {
  if (atomic_load_explicit(&test_malloc_armed, memory_order_relaxed))
    atomic_fetch_add(&test_malloc_calls, 1);
  return __libc_calloc(c, n);
}
void *realloc(void *p, size_t n) {
  if (atomic_load_explicit(&test_malloc_armed, memory_order_relaxed))
    atomic_fetch_add(&test_malloc_calls, 1);
  return __libc_realloc(p, n);
}
#else
# define TEST_MALLOC_INTERPOSED 0
static atomic_int test_malloc_armed;
static atomic_ulong test_malloc_calls;
#endif

/* Start or stop counting every allocation of the process (where the build
 * allows it) and nres's own. */
static inline void test_arm_malloc_count(int on) {
  if (on)
    atomic_store(&test_malloc_calls, 0);
  atomic_store(&test_malloc_armed, on);
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

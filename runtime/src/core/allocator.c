/* SPDX-License-Identifier: MIT */
/* allocator.c - the functions every allocation of libnres goes through.
 *
 * nres_replace_allocator swaps them (all four at once), so tests and the
 * stress suite can count every byte the runtime allocates. The decision
 * engine and the executor never allocate; the work pool and the hosts do,
 * at set-up.
 */
#include <stdlib.h>

#include "internal.h"

static nres_malloc_func alloc_malloc = malloc;
static nres_realloc_func alloc_realloc = realloc;
static nres_calloc_func alloc_calloc = calloc;
static nres_free_func alloc_free = free;

int nres_replace_allocator(nres_malloc_func malloc_func,
                           nres_realloc_func realloc_func,
                           nres_calloc_func calloc_func,
                           nres_free_func free_func) {
  if (malloc_func == NULL || realloc_func == NULL || calloc_func == NULL ||
      free_func == NULL)
    return NRES_EINVAL;
  alloc_malloc = malloc_func;
  alloc_realloc = realloc_func;
  alloc_calloc = calloc_func;
  alloc_free = free_func;
  return 0;
}

void *nres__malloc(size_t size) {
  return size ? alloc_malloc(size) : NULL;
}

void *nres__calloc(size_t count, size_t size) {
  return count && size ? alloc_calloc(count, size) : NULL;
}

void *nres__realloc(void *ptr, size_t size) {
  if (size == 0) {
    nres__free(ptr);
    return NULL;
  }
  return alloc_realloc(ptr, size);
}

void nres__free(void *ptr) {
  if (ptr != NULL)
    alloc_free(ptr);
}

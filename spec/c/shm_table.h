/* SPDX-License-Identifier: MIT */
/* shm_table.h - a shm table in ordinary aligned memory, for the tests of
 * the shm table and its migration (test_shm, test_shm_migrate): threads
 * of one process share it; free() it. Include after nres_test.h. */
#ifndef NRES_TEST_SHM_TABLE_H
#define NRES_TEST_SHM_TABLE_H

#include "nres/shm.h"

static nres_shm_t *test_shm_table(const nres_shm_config_t *c) {
  size_t size = nres_shm_size(c);
  void *mem;

  assert_true(size > 0);
  mem = aligned_alloc(64, (size + 63) / 64 * 64);
  assert_non_null(mem);
  assert_int_equal(nres_shm_init(mem, size, c), 0);
  return mem;
}

#endif /* NRES_TEST_SHM_TABLE_H */

/* SPDX-License-Identifier: MIT */
/* fuzz_shm.c - libFuzzer target for the shared-memory table (nres/shm.h).
 *
 * The bytes are a script of table operations (lookups with every kind of
 * lease, evictions forced by throwaway keys, rate-limit takes, counter
 * records, key reads, clock jumps to the end of time) run and checked by
 * spec/c/shm_ops.h, the same interpreter test_shm runs on random scripts
 * from a fixed seed. A broken promise (a leased key moved, a key in two
 * slots, a refusal while a slot was free) is a crash here, with the line of
 * the check that failed.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "shm_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int line = nres_test_shm_ops(data, size);
  if (line != 0) {
    fprintf(stderr, "spec/c/shm_ops.h:%d: shm table invariant broken\n", line);
    abort();
  }
  return 0;
}

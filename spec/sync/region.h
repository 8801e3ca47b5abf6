/* region.h - a gateway's region file made with the shm API for nres-syncd
 * tests: one table with a budget, a rate limiter (`rate`/s, burst 5) and a
 * breaker per slot, and one key in use ("api.example:80"), written under
 * a temporary name and renamed into place as the gateway does.
 * Header-only, for cmocka tests (spec/c/test_sync.c, test_sync_faults.c).
 */
#ifndef NRES_SPEC_SYNC_REGION_H
#define NRES_SPEC_SYNC_REGION_H

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nres.h"
#include "nres/shm.h"

static nres_shm_slot_t *make_region(const char *path, uint32_t slots,
                                    double rate, void **mem, size_t *size) {
  nres_shm_config_t c;
  nres_shm_t *shm;
  char tmp[300];
  int fd, idx;

  nres_shm_config_init(&c);
  c.slots = slots;
  c.flags = NRES_SHM_BUDGET | NRES_SHM_RATELIMIT | NRES_SHM_BREAKER;
  c.rate = rate;
  c.burst = 5;
  *size = nres_shm_size(&c);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t) *size), 0);
  *mem = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  assert_true(*mem != MAP_FAILED);
  assert_int_equal(nres_shm_init(*mem, *size, &c), 0);
  assert_int_equal(nres_shm_attach(*mem, *size, &shm), 0);
  idx = nres_shm_acquire(shm, "api.example:80", 14, nres_clock_now(), 60 * NRES_SEC,
                         NULL);
  assert_true(idx >= 0);
  assert_int_equal(rename(tmp, path), 0);
  return nres_shm_slot(shm, (uint32_t) idx);
}

#endif /* NRES_SPEC_SYNC_REGION_H */

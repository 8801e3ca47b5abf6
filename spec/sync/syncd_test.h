/* SPDX-License-Identifier: MIT */
/* syncd_test.h - what the nres-syncd tests share: where the binary is, and
 * a gateway's region file made with the shm API (one table with a budget,
 * a rate limiter of `rate`/s, burst 5, and a breaker per slot, one key in
 * use, "api.example:80", written under a temporary name and renamed into
 * place as the gateway does). Header-only, for cmocka tests
 * (spec/c/test_sync.c, test_sync_faults.c).
 */
#ifndef NRES_SPEC_SYNCD_TEST_H
#define NRES_SPEC_SYNCD_TEST_H

#include <stdlib.h>
#include <string.h>

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
  char tmp[320];
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

/* nres-syncd: $NRES_SYNCD (ctest sets it), or beside this test. */
static void syncd_path(char *out, size_t cap) {
  ssize_t len;

  if (getenv("NRES_SYNCD") != NULL) {
    snprintf(out, cap, "%s", getenv("NRES_SYNCD"));
    return;
  }
  len = readlink("/proc/self/exe", out, cap - 16);
  assert_true(len > 0);
  out[len] = '\0';
  strcpy(strrchr(out, '/') + 1, "nres-syncd");
}

#endif /* NRES_SPEC_SYNCD_TEST_H */

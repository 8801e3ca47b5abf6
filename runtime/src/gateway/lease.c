/* SPDX-License-Identifier: MIT */
/* lease.c - one holder at a time for a job the whole nginx runs once (the
 * active health checks, lua/nres/ngx/health.lua): a 64-bit word in shared
 * memory, the holder's id (a worker's pid) in the high 32 bits and the
 * moment its lease ends (ms, modulo 2^32) in the low 32, taken or renewed
 * in one CAS. A holder that dies loses it when its lease runs out, so a
 * killed worker stops the job for at most one lease. Id 0 is nobody.
 * Times are compared with wrapping arithmetic (a lease is far shorter than
 * 2^31 ms, 24 days). */
#include "nres/gateway.h"
#include "internal.h"

#define OWNER(w) ((uint32_t) ((w) >> 32))
#define UNTIL(w) ((uint32_t) (w))

int nres_gw_lease_take(nres_gw_lease_t *l, uint32_t id, nres_time_t now,
                       nres_time_t lease) {
  uint64_t w, n;
  uint32_t now_ms, until;

  if (l == NULL || id == 0 || lease == 0 || lease > (nres_time_t) INT32_MAX * NRES_MSEC)
    return NRES_EINVAL;
  now_ms = (uint32_t) (now / NRES_MSEC);
  until = now_ms + (uint32_t) (lease / NRES_MSEC + (lease % NRES_MSEC != 0));
  n = (uint64_t) id << 32 | until;
  w = nres__load(&l->word);
  for (;;) {
    /* another holder whose lease has not ended keeps it */
    if (OWNER(w) != 0 && OWNER(w) != id && (int32_t) (UNTIL(w) - now_ms) > 0)
      return 0;
    if (nres__cas(&l->word, &w, n))
      return 1;
  }
}

void nres_gw_lease_drop(nres_gw_lease_t *l, uint32_t id) {
  uint64_t w;

  if (l == NULL || id == 0)
    return;
  w = nres__load(&l->word);
  while (OWNER(w) == id)
    if (nres__cas(&l->word, &w, 0))
      return;
}

uint32_t nres_gw_lease_holder(nres_gw_lease_t *l, nres_time_t now) {
  uint64_t w;

  if (l == NULL)
    return 0;
  w = nres__load(&l->word);
  if (OWNER(w) == 0 || (int32_t) (UNTIL(w) - (uint32_t) (now / NRES_MSEC)) <= 0)
    return 0;
  return OWNER(w);
}

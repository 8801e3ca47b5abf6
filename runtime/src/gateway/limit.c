/* SPDX-License-Identifier: MIT */
/* limit.c - one admission from a named client limiter (gw.limiter): the
 * client's key leased in the limiter's shared table, its rate limiter
 * asked. An empty key (a header the client did not send) is not limited,
 * as nginx's limit_req does not account it; a full table admits and
 * counts the overflow: the limiter never fails closed. The control API's
 * rate (nres_gw_control_rate) is applied to a key made before it, and its
 * dry-run counts a refusal and admits. Used by the Lua
 * limiter (nres.ngx.limiter) and by the nginx module's nres_admit.
 */
#include "nres/gateway.h"
#include "internal.h"

int nres_gw_limit(nres_gw_limiter_t *l, const char *key, size_t len, nres_time_t now,
                  nres_time_t *wait) {
  if (len == 0)
    return 0;
  int idx = nres_shm_acquire(l->table, key, len, now, l->hold, NULL);
  if (idx < 0) {
    l->overflow++;
    return 0;
  }
  nres_gw_control_t *c = l->control;
  uint32_t flags = c != NULL ? nres__load(&c->flags) : 0;
  if (flags & NRES_GW_RATE_SET) {   /* the control API's rate, on a key made before */
    nres_ratelimit_t *rl = &nres_shm_slot(l->table, (uint32_t)idx)->ratelimit;
    if (rl->interval != c->interval || rl->tolerance != c->tolerance)
      nres_ratelimit_set_rate(rl, c->rate, c->burst, now);
  }
  double after = 0;
  if (nres_shm_limit(l->table, (uint32_t)idx, now, &after) == 0)
    return 0;
  if (flags & NRES_GW_DRY_RUN) {   /* refused, counted, let through */
    nres__add(&c->would_refuse[NRES_GW_WOULD_RATE], 1);
    return 0;
  }
  if (wait != NULL)
    *wait = after > 0 ? (nres_time_t)after : 0;
  return 1;
}

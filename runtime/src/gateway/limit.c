/* limit.c - one admission from a named client limiter (gw.limiter): the
 * client's key leased in the limiter's shared table, its rate limiter
 * asked. An empty key (a header the client did not send) is not limited,
 * as nginx's limit_req does not account it; a full table admits and
 * counts the overflow: the limiter never fails closed. Used by the Lua
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
  double after = 0;
  if (nres_shm_limit(l->table, (uint32_t)idx, now, &after) == 0)
    return 0;
  if (wait != NULL)
    *wait = after > 0 ? (nres_time_t)after : 0;
  return 1;
}

/* SPDX-License-Identifier: MIT */
/* control.c - what the control API changes (nres_gw_control_t, in a
 * table's shared memory): flags set and cleared atomically, and a
 * limiter's new rate and burst, applied to every key held now (the others
 * get it when next asked: nres_gw_limit). The decisions that read them
 * are in limit.c (dry-run, rate), request.c (dry-run) and pick.c (drain),
 * each on a path a healthy request does not take, or one load per
 * refresh. */
#include "nres/gateway.h"
#include "internal.h"

void nres_gw_control_flag(nres_gw_control_t *c, uint32_t flag, int on) {
  if (c == NULL)
    return;
  if (on)
    atomic_fetch_or_explicit(&c->flags, flag, memory_order_release);
  else
    atomic_fetch_and_explicit(&c->flags, ~flag, memory_order_release);
}

void nres_gw_control_count(nres_gw_control_t *c, int reason) {
  if (c != NULL && reason >= 0 && reason < NRES_GW_WOULD_MAX)
    nres__add(&c->would_refuse[reason], 1);
}

int nres_gw_control_rate(nres_gw_control_t *c, nres_shm_t *table, double rate,
                         uint32_t burst, nres_time_t now) {
  nres_ratelimit_t want;
  if (c == NULL || table == NULL || nres_ratelimit_init(&want, rate, burst) != 0)
    return NRES_EINVAL;
  const nres_shm_config_t *cfg = nres_shm_config(table);
  if (cfg == NULL || !(cfg->flags & NRES_SHM_RATELIMIT))
    return NRES_EINVAL;
  c->rate = rate;
  c->burst = burst;
  c->interval = want.interval;
  c->tolerance = want.tolerance;
  nres_gw_control_flag(c, NRES_GW_RATE_SET, 1);
  for (uint32_t i = 0; i < cfg->slots; i++) {
    char k[1];
    if (nres_shm_key(table, i, k, sizeof k, NULL, NULL) >= 0)
      nres_ratelimit_set_rate(&nres_shm_slot(table, i)->ratelimit, rate, burst, now);
  }
  return 0;
}

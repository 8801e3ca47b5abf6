/* SPDX-License-Identifier: MIT */
/* members.h - what the rest of the gateway needs of members.c: the shared
 * count of tries in flight per slot, and an upstream's first view. */
#ifndef NRES_GATEWAY_MEMBERS_H
#define NRES_GATEWAY_MEMBERS_H

#include "nres/gateway.h"
#include "internal.h"

/* Shard `shard`'s counts of tries in flight, one per slot. */
NRES_ATOMIC(uint32_t) *nres__gw_inflight_row(nres_gw_members_t *m, unsigned shard);

/* A try on peer p of u begins (delta 1) or ends (-1): counted in the
 * membership, so a removed peer's slot is freed only once it is 0. */
static inline void nres__gw_member_count(nres_gw_upstream_t *u, const nres_gw_peer_t *p,
                                         unsigned shard, int delta) {
  if (u->inflight != NULL)
    nres__add(&u->inflight[shard * u->row_words + p->slot], (uint32_t)delta);
}

/* u's view made from its membership: the declared peers still members
 * first, in their order (names[0..n-1]), then the others. */
void nres__gw_view_declared(nres_gw_upstream_t *u, const char *const *names, uint32_t n,
                            nres_time_t now);

#endif

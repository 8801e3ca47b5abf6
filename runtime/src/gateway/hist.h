/* SPDX-License-Identifier: MIT */
/* hist.h - one observation into a gateway latency histogram
 * (nres_gw_hist_t), inline for the try's and the request's end: a short
 * linear search from the smallest bound (a healthy gateway's durations
 * are in the first buckets) and two adds to the writer's shard. */
#ifndef NRES_GW_HIST_H
#define NRES_GW_HIST_H

#include "nres/gateway.h"
#include "internal.h"

extern const uint64_t nres__gw_hist_bounds[NRES_GW_HIST_BUCKETS];

static inline void nres__gw_hist_record(nres_gw_hist_t *h, unsigned k, nres_time_t d) {
  int i = 0;
  while (i < NRES_GW_HIST_BUCKETS && d > nres__gw_hist_bounds[i])
    i++;
  nres__add(&h->shard[k].n[i], 1);
  nres__add(&h->shard[k].sum, d);
}

#endif

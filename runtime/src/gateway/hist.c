/* SPDX-License-Identifier: MIT */
/* hist.c - the gateway's latency histograms (nres_gw_hist_t): their
 * bucket bounds, chosen for a gateway (1 ms to 30 s: a local hop, a
 * typical API call, the attempt timeouts operators set), and their reading.
 * Recording is inline (hist.h). */
#include "gateway/hist.h"

#define MS 1000000ull

const uint64_t nres__gw_hist_bounds[NRES_GW_HIST_BUCKETS] = {
  1 * MS, 2500000ull, 5 * MS, 10 * MS, 25 * MS, 50 * MS, 100 * MS, 250 * MS, 500 * MS,
  1000 * MS, 2500 * MS, 5000 * MS, 10000 * MS, 30000 * MS,
};

uint64_t nres_gw_hist_bound(int i) {
  if (i < 0 || i >= NRES_GW_HIST_BUCKETS)
    return UINT64_MAX;
  return nres__gw_hist_bounds[i];
}

uint64_t nres_gw_hist_read(const nres_gw_hist_t *h, uint64_t *counts, uint64_t *sum) {
  uint64_t total = 0, s = 0;
  for (int i = 0; i <= NRES_GW_HIST_BUCKETS; i++)
    counts[i] = 0;
  for (int k = 0; k < NRES_SHARDS; k++) {
    for (int i = 0; i <= NRES_GW_HIST_BUCKETS; i++) {
      uint64_t n = nres__load(&h->shard[k].n[i]);
      counts[i] += n;
      total += n;
    }
    s += nres__load(&h->shard[k].sum);
  }
  *sum = s;
  return total;
}

/* SPDX-License-Identifier: MIT */
/* shm_count.h - a call counted into a shm slot (nres_shm_slot_record),
 * inline for the gateway, which writes several shared words per request
 * and reads its shard index once for all of them. */
#ifndef NRES_SHM_COUNT_H
#define NRES_SHM_COUNT_H

#include "nres/shm.h"
#include "core/shard.h"

/* One call that ended with `stop` after `attempts` attempts of which
 * `retries` were retries, into shard k (nres__shard) of slot s. Each add
 * is a write to a line the process's shard owns, so none for a 0. */
static inline void nres__shm_count(nres_shm_slot_t *s, unsigned k, int stop,
                                   uint32_t attempts, uint32_t retries) {
  nres__add(&s->shard[k].calls, 1);
  if (attempts != 0)
    nres__add(&s->shard[k].attempts, attempts);
  if (retries != 0)
    nres__add(&s->shard[k].retries, retries);
  if (stop == NRES_STOP_OK)
    nres__add(&s->shard[k].ok, 1);
  else if (stop >= 0 && stop < NRES_STOP_COUNT)
    nres__add(&s->stops[stop], 1);
}

#endif /* NRES_SHM_COUNT_H */

/* SPDX-License-Identifier: MIT */
/* estimator.h - the latency estimator's record for the executor, which
 * reads its thread's shard index once for every shared word a successful
 * attempt writes (estimator.c says what a record does). */
#ifndef NRES_CORE_ESTIMATOR_H
#define NRES_CORE_ESTIMATOR_H

#include "nres.h"

/* nres__estimator_record_in's common case alone: 1 when it took the
 * sample, 0 when nothing was written and nres__estimator_record_slow must
 * take it. Calls nothing. always_inline through LTO. */
int nres__estimator_try_record_in(nres_estimator_t *estimator, unsigned k,
                                  nres_time_t now, nres_time_t latency);

/* A record by the slow way (any case). */
void nres__estimator_record_slow(nres_estimator_t *estimator, nres_time_t now,
                                 nres_time_t latency);

/* nres_estimator_record, for the thread of shard k (nres__shard_if_taken).
 * always_inline through LTO. */
void nres__estimator_record_in(nres_estimator_t *estimator, unsigned k,
                               nres_time_t now, nres_time_t latency);

#endif /* NRES_CORE_ESTIMATOR_H */

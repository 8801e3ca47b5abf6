/* estimator.h - the latency estimator's record for the executor, which
 * reads its thread's shard index once for every shared word a successful
 * attempt writes (estimator.c says what a record does). */
#ifndef NRES_CORE_ESTIMATOR_H
#define NRES_CORE_ESTIMATOR_H

#include "nres.h"

/* nres_estimator_record, for the thread of shard k (nres__shard_if_taken).
 * always_inline through LTO. */
void nres__estimator_record_in(nres_estimator_t *estimator, unsigned k,
                               nres_time_t now, nres_time_t latency);

#endif /* NRES_CORE_ESTIMATOR_H */

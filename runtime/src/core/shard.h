/* SPDX-License-Identifier: MIT */
/* shard.h - which of NRES_SHARDS copies of a hot word the calling thread
 * writes.
 *
 * State shared by threads (and by processes, in shm slots) is written on
 * every successful call: the policy's success counters, the breaker
 * window's current bucket, the estimator's histogram. One word written by
 * every thread bounces its cache line between cores and serializes the
 * success path (bench/README.md, "Threads on one policy"). So each such
 * word has NRES_SHARDS copies, at least a cache line apart, that readers
 * merge; a thread writes the copy of its shard index, taken once, on its
 * first write, round-robin from a process-wide counter offset by the
 * process id (so single-threaded worker processes sharing a shm slot start
 * on different shards), unless the process set it by its number
 * (nres_shard_set: an nginx worker's, so that two workers cannot draw the
 * same one). Shards are a spreading, not an ownership: two
 * threads may draw the same index and still write it with atomics, so
 * nothing depends on which index a thread gets.
 */
#ifndef NRES_SHARD_H
#define NRES_SHARD_H

#include "internal.h"

/* NRES_SHARDS when not taken yet. initial-exec: one load off the thread
 * pointer, not a __tls_get_addr call, also in the shared library. */
extern _Thread_local unsigned nres__shard_index
    __attribute__((tls_model("initial-exec")));

/* Take this thread's index (the slow path of nres__shard). */
__attribute__((cold)) unsigned nres__shard_take(void);

/* The calling thread's shard, 0..NRES_SHARDS-1. */
static inline unsigned nres__shard(void) {
  unsigned i = nres__shard_index;
  if (__builtin_expect(i < NRES_SHARDS, 1))
    return i;
  return nres__shard_take();
}

/* The calling thread's shard, or NRES_SHARDS if it has none yet: for a hot
 * path that hands that case to its out-of-line slow path (which calls
 * nres__shard), so that the hot path calls nothing. */
static inline unsigned nres__shard_if_taken(void) {
  return nres__shard_index;
}

#endif /* NRES_SHARD_H */

/* SPDX-License-Identifier: MIT */
/* shard.c - hands out the calling thread's shard index (see shard.h): the
 * one thread-local every sharded word of the runtime is indexed by; drawn
 * at the thread's first write, or set (nres_shard_set). */
#include <pthread.h>
#include <unistd.h>

#include "core/shard.h"

_Thread_local unsigned nres__shard_index
    __attribute__((tls_model("initial-exec"))) = NRES_SHARDS;

static atomic_uint next_index;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A child of fork() is a new process: its one thread takes a new index
 * (with its own pid) instead of writing the parent's shard. */
static void forget_in_child(void) {
  nres__shard_index = NRES_SHARDS;
}

static void watch_forks(void) {
  (void) pthread_atfork(NULL, NULL, forget_in_child);
}

void nres_shard_set(unsigned index) {
  (void) pthread_once(&fork_once, watch_forks);
  nres__shard_index = index % NRES_SHARDS;
}

__attribute__((noinline, cold)) unsigned nres__shard_take(void) {
  unsigned n;

  (void) pthread_once(&fork_once, watch_forks);
  n = atomic_fetch_add_explicit(&next_index, 1, memory_order_relaxed);
  nres__shard_index = (n + (unsigned) getpid()) % NRES_SHARDS;
  return nres__shard_index;
}

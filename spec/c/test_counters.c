/* SPDX-License-Identifier: MIT */
/* test_counters.c - a policy's counters stay exact when threads share it.
 *
 * The success counters live in per-thread shards (nres_policy_t.n_ok) so
 * that threads calling through one policy do not write one cache line per
 * call; nres_policy_counters sums them. These tests run threads on one
 * policy and check every count against what the threads did, that the
 * threads really landed in different shards, that reset clears the shards,
 * and that failures still count where they always did. Label threads: run
 * under TSan too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nres.h"

#define THREADS 8
#define CALLS 20000

static nres_policy_t policy;

typedef struct {
  unsigned long attempts;       /* calls of the attempt function */
  unsigned long calls, ok;
  int fail_every;               /* 0: never; n: the first attempt of every
                                   n-th call fails (transient) */
} worker_t;

static nres_verdict_t attempt(void *arg, const nres_attempt_t *a) {
  worker_t *w = arg;
  w->attempts++;
  if (w->fail_every && a->number == 1 && w->calls % (unsigned long) w->fail_every == 0)
    return nres_verdict(NRES_TRANSIENT);
  return nres_verdict(NRES_OK);
}

static void *run_worker(void *arg) {
  worker_t *w = arg;
  nres_call_t call;
  for (int i = 0; i < CALLS; i++) {
    if (nres_run(&policy, attempt, w, &call) == 0)
      w->ok++;
    w->calls++;
  }
  return NULL;
}

static void run_threads(worker_t *w, int fail_every) {
  pthread_t tid[THREADS];
  memset(w, 0, sizeof(*w) * THREADS);
  for (int t = 0; t < THREADS; t++) {
    w[t].fail_every = fail_every;
    assert_int_equal(pthread_create(&tid[t], NULL, run_worker, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    assert_int_equal(pthread_join(tid[t], NULL), 0);
}

static void build(void) {
  assert_int_equal(nres_policy_init(&policy, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_build(&policy), 0);
}

static void threads_on_one_policy_count_exactly(void **state) {
  worker_t w[THREADS];
  nres_counters_t c;
  (void) state;
  build();
  run_threads(w, 0);
  nres_policy_counters(&policy, &c);
  assert_int_equal(c.calls, (uint64_t) THREADS * CALLS);
  assert_int_equal(c.stops[NRES_STOP_OK], (uint64_t) THREADS * CALLS);
  assert_int_equal(c.verdicts[NRES_OK], (uint64_t) THREADS * CALLS);
  assert_int_equal(c.attempts, (uint64_t) THREADS * CALLS);
  assert_int_equal(c.retries, 0);
}

static void the_threads_wrote_different_shards(void **state) {
  worker_t w[THREADS];
  int used = 0;
  uint64_t sum = 0;
  (void) state;
  build();
  run_threads(w, 0);
  for (int i = 0; i < NRES_POLICY_SHARDS; i++) {
    uint64_t n = atomic_load(&policy.n_ok[i].stops);
    used += n > 0;
    sum += n;
    /* a shard holds whole threads' counts: a multiple of CALLS */
    assert_int_equal(n % CALLS, 0);
  }
  assert_int_equal(sum, (uint64_t) THREADS * CALLS);
  assert_true(used >= 2);
  /* the plain fields hold the other outcomes only */
  assert_int_equal(atomic_load(&policy.n_stops[NRES_STOP_OK]), 0);
  assert_int_equal(atomic_load(&policy.n_verdicts[NRES_OK]), 0);
}

static void failures_and_retries_still_count(void **state) {
  worker_t w[THREADS];
  nres_counters_t c;
  unsigned long attempts = 0, ok = 0;
  (void) state;
  build();
  run_threads(w, 4);   /* every 4th call: a transient failure, then OK */
  for (int t = 0; t < THREADS; t++) {
    attempts += w[t].attempts;
    ok += w[t].ok;
  }
  nres_policy_counters(&policy, &c);
  assert_int_equal(ok, (unsigned long) THREADS * CALLS);
  assert_int_equal(c.calls, (uint64_t) THREADS * CALLS);
  assert_int_equal(c.stops[NRES_STOP_OK], (uint64_t) THREADS * CALLS);
  assert_int_equal(c.attempts, attempts);
  assert_int_equal(c.verdicts[NRES_TRANSIENT], (uint64_t) THREADS * CALLS / 4);
  assert_int_equal(c.verdicts[NRES_OK], (uint64_t) THREADS * CALLS);
  assert_int_equal(c.retries, (uint64_t) THREADS * CALLS / 4);
}

static void reset_clears_the_shards(void **state) {
  worker_t w[THREADS];
  nres_counters_t c;
  (void) state;
  build();
  run_threads(w, 0);
  nres_policy_counters_reset(&policy);
  nres_policy_counters(&policy, &c);
  assert_int_equal(c.calls, 0);
  assert_int_equal(c.attempts, 0);
  assert_int_equal(c.verdicts[NRES_OK], 0);
  assert_int_equal(c.stops[NRES_STOP_OK], 0);
}

static void no_telemetry_counts_nothing(void **state) {
  worker_t w[THREADS];
  nres_counters_t c;
  (void) state;
  assert_int_equal(nres_policy_init(&policy, NRES_PRESET_TRIVIAL), 0);
  policy.telemetry = 0;
  assert_int_equal(nres_policy_build(&policy), 0);
  run_threads(w, 0);
  nres_policy_counters(&policy, &c);
  assert_int_equal(c.calls, 0);
  assert_int_equal(c.verdicts[NRES_OK], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(threads_on_one_policy_count_exactly),
    cmocka_unit_test(the_threads_wrote_different_shards),
    cmocka_unit_test(failures_and_retries_still_count),
    cmocka_unit_test(reset_clears_the_shards),
    cmocka_unit_test(no_telemetry_counts_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

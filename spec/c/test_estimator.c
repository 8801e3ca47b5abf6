/* SPDX-License-Identifier: MIT */
/* test_estimator.c - the log-linear histogram and the rotating-window
 * latency estimator.
 *
 * Checks that bucket index and upper bound agree everywhere (every bucket
 * ends where the next begins, bounds grow, no bucket is wider than 1/16 of
 * its values) including 0, the small exact buckets, powers of two and
 * UINT64_MAX; that quantiles of known distributions land within the
 * histogram's 6.25 % error; how q outside (0, 1] is clamped; that samples
 * older than two periods are dropped while the previous window still counts,
 * and a late sample cannot wipe a newer window; that nothing allocates; and
 * that eight threads recording into one window lose no sample, whether
 * their shards' entries keep moving into the histogram or hold them all.
 */
#include <math.h>

#include <sched.h>

#include "nres_test.h"

#define LAST (NRES_HIST_BUCKETS - 1)

/* v lies in bucket index(v): above the previous bucket's bound, at or below
 * its own. */
static void assert_in_own_bucket(uint64_t v) {
  uint32_t i = nres_hist_index(v);
  assert_in_range(i, 0, LAST);
  assert_true(v <= nres_hist_upper(i));
  if (i > 0)
    assert_true(v > nres_hist_upper(i - 1));
}

static void index_and_upper_agree_for_every_bucket(void **state) {
  (void) state;

  for (uint32_t i = 0; i < NRES_HIST_BUCKETS; i++) {
    uint64_t up = nres_hist_upper(i);
    assert_int_equal(nres_hist_index(up), i);
    if (i < LAST) {
      uint64_t lower = i == 0 ? 0 : nres_hist_upper(i - 1) + 1;
      assert_int_equal(nres_hist_index(up + 1), i + 1);
      assert_true(up < nres_hist_upper(i + 1));
      /* width <= lower / 16 (the exact buckets below 16 are 1 wide) */
      if (i >= 16)
        assert_true((up - lower + 1) * 16 <= lower);
      else
        assert_int_equal(up, lower);
    }
  }
  assert_int_equal(nres_hist_upper(LAST), UINT64_MAX);
  assert_int_equal(nres_hist_upper(LAST + 1), UINT64_MAX);
  assert_int_equal(nres_hist_upper(UINT32_MAX), UINT64_MAX);
  /* The last bounded bucket ends at 31 * 2^36 - 1; the one after takes
   * everything from 31 * 2^36 up. */
  assert_int_equal(nres_hist_upper(LAST - 1), (31ull << 36) - 1);
}

static void index_of_edge_values(void **state) {
  nres_rng_t rng;
  (void) state;

  assert_int_equal(nres_hist_index(0), 0);
  assert_int_equal(nres_hist_index(1), 1);
  assert_int_equal(nres_hist_index(15), 15);
  assert_int_equal(nres_hist_index(16), 16);
  assert_int_equal(nres_hist_index(17), 17);
  assert_int_equal(nres_hist_index(31), 31);
  assert_int_equal(nres_hist_index(32), 32);
  assert_int_equal(nres_hist_index(33), 32);   /* 32..33 share a bucket */
  assert_int_equal(nres_hist_index(34), 33);
  assert_int_equal(nres_hist_upper(32), 33);
  assert_int_equal(nres_hist_index(UINT64_MAX), LAST);
  assert_int_equal(nres_hist_index(1ull << 41), LAST);
  assert_int_equal(nres_hist_index((1ull << 41) - 1), LAST);

  for (int k = 0; k < 64; k++) {
    uint64_t p = 1ull << k;
    assert_in_own_bucket(p);
    assert_in_own_bucket(p - 1);
    assert_in_own_bucket(p + 1);
    /* A power of two from 16 up starts a bucket (until the last). */
    if (k >= 4 && nres_hist_index(p) < LAST)
      assert_int_equal(nres_hist_upper(nres_hist_index(p) - 1), p - 1);
  }
  assert_in_own_bucket(UINT64_MAX);

  nres_rng_seed(&rng, 42);
  for (int n = 0; n < 100000; n++) {
    uint64_t v = nres_rng_next(&rng) >> nres_rng_below(&rng, 64);
    assert_in_own_bucket(v);
    /* Monotonic: a larger value never gets a smaller bucket. */
    assert_true(nres_hist_index(v + (v < UINT64_MAX)) >= nres_hist_index(v));
  }
}

static void empty_estimator_answers_zero(void **state) {
  nres_estimator_t est;
  uint64_t samples = 99;
  (void) state;

  assert_int_equal(nres_estimator_init(&est, NRES_SEC), 0);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.5, &samples), 0);
  assert_int_equal(samples, 0);
  assert_int_equal(nres_estimator_quantile(&est, 5 * NRES_SEC, 0.99, NULL),
                   0);
}

static void invalid_init_is_einval(void **state) {
  nres_estimator_t est;
  (void) state;

  assert_int_equal(nres_estimator_init(NULL, NRES_SEC), NRES_EINVAL);
  assert_int_equal(nres_estimator_init(&est, 0), NRES_EINVAL);
}

static void uniform_quantiles_within_histogram_error(void **state) {
  static nres_estimator_t est;
  nres_rng_t rng;
  uint64_t samples = 0;
  nres_time_t p50, p95, p99;
  (void) state;

  assert_int_equal(nres_estimator_init(&est, 10 * NRES_SEC), 0);
  nres_rng_seed(&rng, 7);
  for (int n = 0; n < 20000; n++)
    nres_estimator_record(&est, 3 * NRES_SEC,
                          (1 + nres_rng_below(&rng, 1000 * NRES_MSEC)));
  p50 = nres_estimator_quantile(&est, 4 * NRES_SEC, 0.5, &samples);
  p95 = nres_estimator_quantile(&est, 4 * NRES_SEC, 0.95, NULL);
  p99 = nres_estimator_quantile(&est, 4 * NRES_SEC, 0.99, NULL);
  assert_int_equal(samples, 20000);
  assert_true(fabs((double) p50 / (500.0 * NRES_MSEC) - 1) <= 0.0625);
  assert_true(fabs((double) p95 / (950.0 * NRES_MSEC) - 1) <= 0.0625);
  assert_true(fabs((double) p99 / (990.0 * NRES_MSEC) - 1) <= 0.0625);
  assert_true(p50 < p95 && p95 <= p99);
}

static void constant_distribution_returns_its_bucket(void **state) {
  static nres_estimator_t est;
  static const uint64_t values[] = { 0, 1, 15, 16, 123456789, 7 * NRES_SEC };
  uint64_t samples = 0;
  (void) state;

  for (size_t k = 0; k < sizeof(values) / sizeof(values[0]); k++) {
    uint64_t want = nres_hist_upper(nres_hist_index(values[k]));
    assert_int_equal(nres_estimator_init(&est, NRES_SEC), 0);
    for (int n = 0; n < 1000; n++)
      nres_estimator_record(&est, 0, values[k]);
    assert_int_equal(nres_estimator_quantile(&est, 0, 0.01, &samples), want);
    assert_int_equal(samples, 1000);
    assert_int_equal(nres_estimator_quantile(&est, 0, 0.5, NULL), want);
    assert_int_equal(nres_estimator_quantile(&est, 0, 1.0, NULL), want);
  }
  /* Beyond the histogram's range the answer is NRES_TIME_NEVER. */
  nres_estimator_record(&est, 0, NRES_TIME_NEVER);
  assert_int_equal(nres_estimator_quantile(&est, 0, 1.0, NULL),
                   NRES_TIME_NEVER);
}

static void rank_is_ceil_q_times_samples(void **state) {
  static nres_estimator_t est;
  (void) state;

  /* Four samples 1, 2, 3, 4 (exact buckets). */
  assert_int_equal(nres_estimator_init(&est, NRES_SEC), 0);
  for (uint64_t v = 1; v <= 4; v++)
    nres_estimator_record(&est, 0, v);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.25, NULL), 1);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.26, NULL), 2);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.5, NULL), 2);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.75, NULL), 3);
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.76, NULL), 4);
  assert_int_equal(nres_estimator_quantile(&est, 0, 1.0, NULL), 4);

  /* q outside (0, 1] is clamped: the smallest or the largest sample. */
  assert_int_equal(nres_estimator_quantile(&est, 0, 0.0, NULL), 1);
  assert_int_equal(nres_estimator_quantile(&est, 0, -3.0, NULL), 1);
  assert_int_equal(nres_estimator_quantile(&est, 0, NAN, NULL), 1);
  assert_int_equal(nres_estimator_quantile(&est, 0, 1e-300, NULL), 1);
  assert_int_equal(nres_estimator_quantile(&est, 0, 2.0, NULL), 4);
  assert_int_equal(nres_estimator_quantile(&est, 0, INFINITY, NULL), 4);
}

static void old_samples_drop_and_previous_window_counts(void **state) {
  static nres_estimator_t est;
  const nres_time_t P = NRES_SEC;
  uint64_t samples = 0;
  (void) state;

  assert_int_equal(nres_estimator_init(&est, P), 0);
  for (int n = 0; n < 10; n++)
    nres_estimator_record(&est, P / 2, 100);            /* period 0 */
  for (int n = 0; n < 30; n++)
    nres_estimator_record(&est, P + P / 2, 5000);       /* period 1 */

  /* In period 1 both windows count. */
  assert_int_equal(nres_estimator_quantile(&est, P + P / 2, 0.2, &samples),
                   nres_hist_upper(nres_hist_index(100)));
  assert_int_equal(samples, 40);

  /* In period 2 only period 1 is recent, even before anything is recorded
   * (period 0's window still holds its counts). */
  assert_int_equal(nres_estimator_quantile(&est, 2 * P, 0.2, &samples),
                   nres_hist_upper(nres_hist_index(5000)));
  assert_int_equal(samples, 30);

  /* Recording in period 2 reuses period 0's window, from zero. */
  nres_estimator_record(&est, 2 * P + 1, 7);
  assert_int_equal(nres_estimator_quantile(&est, 2 * P + 1, 0.01, &samples),
                   7);
  assert_int_equal(samples, 31);

  /* In period 3 period 2 is previous; in period 4 nothing is left. */
  assert_int_equal(nres_estimator_quantile(&est, 3 * P, 1.0, &samples), 7);
  assert_int_equal(samples, 1);
  assert_int_equal(nres_estimator_quantile(&est, 4 * P, 0.5, &samples), 0);
  assert_int_equal(samples, 0);
  /* A long jump ahead sees nothing either. */
  assert_int_equal(nres_estimator_quantile(&est, 1000 * P, 0.5, &samples), 0);
  assert_int_equal(samples, 0);
}

/* A thread whose `now` was read before a rotation records into a window a
 * later period already owns: it must not move the epoch back and zero the
 * newer samples. Samples wait in the thread's shard entries (one per
 * bucket % NRES_ESTIMATOR_PENDING) before the histogram: values 300
 * (bucket 82), 10 and 36 (bucket 34) share entry 10, 9 has entry 9. */
static void late_sample_does_not_wipe_a_newer_window(void **state) {
  static nres_estimator_t est;
  uint64_t samples = 0;
  (void) state;

  assert_int_equal(nres_hist_index(300) % NRES_ESTIMATOR_PENDING, 10);
  assert_int_equal(nres_estimator_init(&est, NRES_SEC), 0);
  for (int n = 0; n < 5; n++)
    nres_estimator_record(&est, 2 * NRES_SEC, 300);   /* period 2, entry */
  /* Late, entry 10 holds a later period: straight to the histogram's
   * window 0, which it claims for period 0 */
  nres_estimator_record(&est, 0, 10);
  assert_int_equal(atomic_load(&est.epoch[0]), 1);
  assert_int_equal(nres_estimator_quantile(&est, 2 * NRES_SEC, 0.01,
                                           &samples),
                   nres_hist_upper(nres_hist_index(300)));
  assert_int_equal(samples, 5);
  /* Bucket 34 takes entry 10 over: its five samples of period 2 move into
   * window 0, which period 2 now owns. */
  assert_int_equal(nres_hist_index(36) % NRES_ESTIMATOR_PENDING, 10);
  nres_estimator_record(&est, 2 * NRES_SEC, 36);
  assert_int_equal(atomic_load(&est.epoch[0]), 3);
  assert_int_equal(atomic_load(&est.count[0][nres_hist_index(300)]), 5);
  /* Late again, through the histogram and through an empty entry: neither
   * moves the epoch back nor counts. */
  nres_estimator_record(&est, 0, 10);
  nres_estimator_record(&est, 0, 9);
  assert_int_equal(atomic_load(&est.epoch[0]), 3);
  assert_int_equal(nres_estimator_quantile(&est, 2 * NRES_SEC, 1.0,
                                           &samples),
                   nres_hist_upper(nres_hist_index(300)));
  assert_int_equal(samples, 6);
}

static void no_allocation(void **state) {
  static nres_estimator_t est;
  (void) state;

  test_count_allocations();
  assert_int_equal(nres_estimator_init(&est, NRES_MSEC), 0);
  for (nres_time_t t = 0; t < 100 * NRES_MSEC; t += 10 * NRES_USEC) {
    nres_estimator_record(&est, t, t % 777);
    (void) nres_estimator_quantile(&est, t, 0.9, NULL);
  }
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
}

/* Eight threads record into one window that is already claimed, so no
 * reset happens during the test. */
#define REC_THREADS 8
#define REC_ITERS 50000   /* a multiple of 8 */
#define REC_NOW (5 * NRES_SEC + 123)

static nres_estimator_t rec_est;

/* All threads start together, so they really overlap. */
static atomic_int rec_ready;

static void rec_gate(void) {
  atomic_fetch_add(&rec_ready, 1);
  while (atomic_load(&rec_ready) < REC_THREADS)
    sched_yield();
}

static void *rec(void *arg) {
  uint64_t id = *(uint64_t *) arg;
  rec_gate();
  for (int i = 0; i < REC_ITERS; i++)
    /* Every thread cycles through the same eight buckets, so increments
     * of one counter race; each bucket gets REC_ITERS in all. */
    nres_estimator_record(&rec_est, REC_NOW + (uint64_t) i % 1000,
                          (uint64_t) 1 << (6 + 3 * (((uint64_t) i + id) % 8)));
  return NULL;
}

static void threads_recording_into_one_window_lose_no_sample(void **state) {
  uint64_t ids[REC_THREADS];
  uint64_t samples = 0;
  (void) state;

  assert_int_equal(nres_estimator_init(&rec_est, NRES_SEC), 0);
  /* Claim the window: 25 takes over the entry of 1 (bucket 25 % 24), so
   * the sample of 1 moves into the histogram, for this period. */
  assert_int_equal(nres_hist_index(25) % NRES_ESTIMATOR_PENDING, 1);
  nres_estimator_record(&rec_est, REC_NOW, 1);
  nres_estimator_record(&rec_est, REC_NOW, 25);
  assert_int_equal(atomic_load(&rec_est.epoch[(REC_NOW / NRES_SEC) %
                                              NRES_ESTIMATOR_WINDOWS]),
                   REC_NOW / NRES_SEC + 1);
  for (uint64_t i = 0; i < REC_THREADS; i++)
    ids[i] = i;
  atomic_store(&rec_ready, 0);
  test_run_threads(REC_THREADS, rec, ids, sizeof(ids[0]));

  (void) nres_estimator_quantile(&rec_est, REC_NOW, 0.5, &samples);
  assert_int_equal(samples, (uint64_t) REC_THREADS * REC_ITERS + 2);
  /* Each bucket holds REC_ITERS, in the histogram or in the shards'
   * entries (all eight buckets, three powers of two apart, share entry 0,
   * so they keep moving into the histogram): the samples of 1 and 25 are
   * ranks 1 and 2, bucket 2^(6+3i) ranks 3 + i * REC_ITERS .. 2 + (i + 1)
   * * REC_ITERS. */
  for (uint64_t i = 0; i < REC_THREADS; i++) {
    double last = 2.0 + (double) (i + 1) * REC_ITERS;
    assert_int_equal(nres_hist_index(1ull << (6 + 3 * i)) %
                         NRES_ESTIMATOR_PENDING, 0);
    assert_int_equal(nres_estimator_quantile(&rec_est, REC_NOW,
                                             (last - 0.5) / (double) samples,
                                             NULL),
                     nres_hist_upper(nres_hist_index(1ull << (6 + 3 * i))));
    if (i + 1 < REC_THREADS)
      assert_int_equal(
          nres_estimator_quantile(&rec_est, REC_NOW,
                                  (last + 0.5) / (double) samples, NULL),
          nres_hist_upper(nres_hist_index(1ull << (9 + 3 * i))));
  }
}

/* Threads recording one latency: every sample stays in the threads'
 * shard entries (nothing moves into the histogram), and a quantile
 * counts them all, once. */
static nres_estimator_t same_est;

static void *rec_same(void *arg) {
  (void) arg;
  rec_gate();
  for (int i = 0; i < REC_ITERS; i++)
    nres_estimator_record(&same_est, REC_NOW + (uint64_t) i % 1000, 70000);
  return NULL;
}

static void threads_recording_one_latency_lose_no_sample(void **state) {
  int unused[REC_THREADS];
  uint64_t samples = 0;
  uint64_t in_hist = 0;
  (void) state;

  assert_int_equal(nres_estimator_init(&same_est, NRES_SEC), 0);
  atomic_store(&rec_ready, 0);
  test_run_threads(REC_THREADS, rec_same, unused, sizeof(unused[0]));
  assert_int_equal(nres_estimator_quantile(&same_est, REC_NOW, 0.5, &samples),
                   nres_hist_upper(nres_hist_index(70000)));
  assert_int_equal(samples, (uint64_t) REC_THREADS * REC_ITERS);
  for (int w = 0; w < NRES_ESTIMATOR_WINDOWS; w++)
    for (int i = 0; i < NRES_HIST_BUCKETS; i++)
      in_hist += atomic_load(&same_est.count[w][i]);
  assert_int_equal(in_hist, 0);
  /* In the next period they are the previous one's, wherever they sit. */
  nres_estimator_record(&same_est, REC_NOW + NRES_SEC, 70000);
  assert_int_equal(nres_estimator_quantile(&same_est, REC_NOW + NRES_SEC, 0.5,
                                           &samples),
                   nres_hist_upper(nres_hist_index(70000)));
  assert_int_equal(samples, (uint64_t) REC_THREADS * REC_ITERS + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(index_and_upper_agree_for_every_bucket),
    cmocka_unit_test(index_of_edge_values),
    cmocka_unit_test(empty_estimator_answers_zero),
    cmocka_unit_test(invalid_init_is_einval),
    cmocka_unit_test(uniform_quantiles_within_histogram_error),
    cmocka_unit_test(constant_distribution_returns_its_bucket),
    cmocka_unit_test(rank_is_ceil_q_times_samples),
    cmocka_unit_test(old_samples_drop_and_previous_window_counts),
    cmocka_unit_test(late_sample_does_not_wipe_a_newer_window),
    cmocka_unit_test(no_allocation),
    cmocka_unit_test(threads_recording_into_one_window_lose_no_sample),
    cmocka_unit_test(threads_recording_one_latency_lose_no_sample),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_window.c - the sliding window of outcome counts (core/window.c).
 *
 * On a virtual clock: samples are counted into the right totals, leave the
 * window as time slides past their bucket, and a bucket reused one rotation
 * later starts from zero; a late sample (clock read a rotation ago) does not
 * wipe the current bucket. Saturation at 65535 keeps the failure and slow
 * ratios those of a consistent sample and never carries into the next
 * field; slice numbers wrap at 16 bits without losing the window. Eight
 * threads adding into one slice, or across slices (their shards' pending
 * buckets moving into the ring), must lose no sample (run under TSan too);
 * so must 4 processes sharing a window in shared memory.
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nres_test.h"

struct sums {
  uint32_t calls, failures, slow;
};

static struct sums sum_at(const nres_window_t *w, nres_time_t now) {
  struct sums s;
  nres_window_sum(w, now, &s.calls, &s.failures, &s.slow);
  return s;
}

static void counts_calls_failures_and_slow(void **state) {
  nres_window_t w;
  struct sums s;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  assert_int_equal(w.width, NRES_SEC);
  nres_window_add(&w, 100 * NRES_MSEC, 0, 0);
  nres_window_add(&w, 200 * NRES_MSEC, 1, 0);
  nres_window_add(&w, 3 * NRES_SEC, 1, 1);
  nres_window_add(&w, 7 * NRES_SEC, 0, 1);
  nres_window_add(&w, 9 * NRES_SEC + 999, 0, 0);
  s = sum_at(&w, 9 * NRES_SEC + 999);
  assert_int_equal(s.calls, 5);
  assert_int_equal(s.failures, 2);
  assert_int_equal(s.slow, 2);

  /* any output may be left out */
  nres_window_sum(&w, 9 * NRES_SEC, NULL, &s.failures, NULL);
  assert_int_equal(s.failures, 2);
}

static void old_buckets_expire_as_time_slides(void **state) {
  nres_window_t w;
  int i;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  for (i = 0; i < 10; i++)   /* one failure a second, in slices 0..9 */
    nres_window_add(&w, (nres_time_t) i * NRES_SEC + NRES_SEC / 2, 1, 0);
  assert_int_equal(sum_at(&w, 9 * NRES_SEC + 1).calls, 10);
  /* slice 10 begins: slice 0 has left the window, even untouched */
  assert_int_equal(sum_at(&w, 10 * NRES_SEC - 1).calls, 10);
  assert_int_equal(sum_at(&w, 10 * NRES_SEC).calls, 9);
  assert_int_equal(sum_at(&w, 10 * NRES_SEC).failures, 9);
  assert_int_equal(sum_at(&w, 15 * NRES_SEC).calls, 4);
  assert_int_equal(sum_at(&w, 18 * NRES_SEC).calls, 1);
  assert_int_equal(sum_at(&w, 19 * NRES_SEC).calls, 0);
  assert_int_equal(sum_at(&w, 1000 * NRES_SEC).calls, 0);
}

static void bucket_reused_after_rotation_starts_from_zero(void **state) {
  nres_window_t w;
  struct sums s;
  int i;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  for (i = 0; i < 5; i++)
    nres_window_add(&w, 3 * NRES_SEC + NRES_SEC / 2, 1, 1);
  /* 13.5 s lands in the same bucket (index 3), one rotation later */
  nres_window_add(&w, 13 * NRES_SEC + NRES_SEC / 2, 0, 0);
  s = sum_at(&w, 13 * NRES_SEC + NRES_SEC / 2);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.failures, 0);
  assert_int_equal(s.slow, 0);
}

/* A thread that read the clock a rotation ago and adds late must not
 * replace the current bucket with its expired slice. */
static void late_sample_does_not_wipe_current_bucket(void **state) {
  nres_window_t w;
  struct sums s;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  nres_window_add(&w, 13 * NRES_SEC, 1, 0);
  nres_window_add(&w, 13 * NRES_SEC, 1, 0);
  nres_window_add(&w, 3 * NRES_SEC, 0, 0);   /* late: slice 3, index 3 */
  s = sum_at(&w, 13 * NRES_SEC);
  assert_int_equal(s.calls, 2);
  assert_int_equal(s.failures, 2);
}

static void saturation_keeps_ratios_consistent(void **state) {
  nres_window_t w;
  struct sums s;
  int i;

  (void) state;
  assert_int_equal(nres_window_init(&w, 4 * NRES_SEC, 4), 0);
  for (i = 0; i < 70000; i++)
    nres_window_add(&w, 2 * NRES_SEC, i % 2 == 0, i % 4 == 0);
  s = sum_at(&w, 2 * NRES_SEC);
  /* exactly the first 65535 samples: none of the later ones, not even in
   * part (a later failure counted without its call would skew the ratio) */
  assert_int_equal(s.calls, 65535);
  assert_int_equal(s.failures, 32768);
  assert_int_equal(s.slow, 16384);

  /* the next slice starts afresh */
  nres_window_add(&w, 3 * NRES_SEC, 1, 0);
  s = sum_at(&w, 3 * NRES_SEC);
  assert_int_equal(s.calls, 65536);
  assert_int_equal(s.failures, 32769);
  /* slice 2, moved from the thread's pending bucket into the ring: nothing
   * carried into the neighbouring fields, slice still 2 */
  assert_int_equal(atomic_load(&w.bucket[2]) & 0xffff, 2);
}

/* A shard whose pending bucket has moved on to slice 14, its slice 13 in
 * the ring: a sample read at 3 s (a rotation ago) must neither replace the
 * ring's slice 13 nor lose the pending slice 14. */
static void late_sample_keeps_ring_and_pending_counts(void **state) {
  nres_window_t w;
  struct sums s;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  nres_window_add(&w, 13 * NRES_SEC, 1, 0);
  nres_window_add(&w, 13 * NRES_SEC, 1, 0);
  nres_window_add(&w, 14 * NRES_SEC, 0, 1);   /* slice 13 -> ring */
  nres_window_add(&w, 3 * NRES_SEC, 0, 0);    /* late: slice 3, index 3 */
  nres_window_add(&w, 14 * NRES_SEC, 0, 0);
  s = sum_at(&w, 14 * NRES_SEC);
  assert_int_equal(s.calls, 4);
  assert_int_equal(s.failures, 2);
  assert_int_equal(s.slow, 1);
  /* a late sample still inside the window counts */
  nres_window_add(&w, 12 * NRES_SEC, 1, 0);
  s = sum_at(&w, 14 * NRES_SEC);
  assert_int_equal(s.calls, 5);
  assert_int_equal(s.failures, 3);
}

static void slice_numbers_wrap_at_16_bits(void **state) {
  nres_window_t w;
  nres_time_t t;
  nres_time_t base;

  (void) state;
  /* 1 ns buckets: slice 65536 is slice 0 again */
  assert_int_equal(nres_window_init(&w, 16, 16), 0);
  for (t = 65530; t < 65546; t++)
    nres_window_add(&w, t, t % 2, 0);
  assert_int_equal(sum_at(&w, 65545).calls, 16);
  assert_int_equal(sum_at(&w, 65545).failures, 8);
  assert_int_equal(sum_at(&w, 65546).calls, 15);
  assert_int_equal(sum_at(&w, 65551).calls, 10);
  assert_int_equal(sum_at(&w, 65561).calls, 0);

  /* and far out, seconds after 3 * 2^16 s, with a rotation across it */
  assert_int_equal(nres_window_init(&w, 8 * NRES_SEC, 8), 0);
  base = 3 * 65536 * NRES_SEC;
  for (t = base - 4 * NRES_SEC; t < base + 4 * NRES_SEC; t += NRES_SEC)
    nres_window_add(&w, t, 1, 1);
  assert_int_equal(sum_at(&w, base + 3 * NRES_SEC).calls, 8);
  assert_int_equal(sum_at(&w, base + 3 * NRES_SEC).slow, 8);
  assert_int_equal(sum_at(&w, base + 5 * NRES_SEC).calls, 6);
  assert_int_equal(sum_at(&w, base + 11 * NRES_SEC).calls, 0);
}

static void clear_zeroes_everything(void **state) {
  nres_window_t w;
  int i;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  for (i = 0; i < 10; i++)
    nres_window_add(&w, (nres_time_t) i * NRES_SEC, 1, 1);
  assert_int_equal(sum_at(&w, 9 * NRES_SEC).calls, 10);
  nres_window_clear(&w);
  assert_int_equal(sum_at(&w, 9 * NRES_SEC).calls, 0);
  assert_int_equal(sum_at(&w, 0).calls, 0);
  nres_window_add(&w, 9 * NRES_SEC, 1, 0);
  assert_int_equal(sum_at(&w, 9 * NRES_SEC).calls, 1);
  assert_int_equal(sum_at(&w, 9 * NRES_SEC).failures, 1);
}

static void invalid_init_is_einval(void **state) {
  nres_window_t w;

  (void) state;
  assert_int_equal(nres_window_init(NULL, NRES_SEC, 10), NRES_EINVAL);
  assert_int_equal(nres_window_init(&w, 0, 10), NRES_EINVAL);
  assert_int_equal(nres_window_init(&w, NRES_SEC, 0), NRES_EINVAL);
  assert_int_equal(nres_window_init(&w, NRES_SEC, NRES_WINDOW_MAX_BUCKETS + 1),
                   NRES_EINVAL);
  assert_int_equal(nres_window_init(&w, 9, 10), NRES_EINVAL);   /* width 0 */
  assert_int_equal(nres_window_init(&w, 10, 10), 0);
  assert_int_equal(nres_window_init(&w, NRES_SEC, NRES_WINDOW_MAX_BUCKETS), 0);
  assert_int_equal(nres_window_init(&w, NRES_TIME_NEVER, 1), 0);
  assert_int_equal(w.width, NRES_TIME_NEVER);
}

struct adder {
  nres_window_t *w;
  int n;
};

static void *add_many(void *arg) {
  struct adder *a = arg;
  for (int i = 0; i < a->n; i++)
    nres_window_add(a->w, 5 * NRES_SEC + (nres_time_t) i,
                    i % 2 == 1, i % 4 == 0);
  return NULL;
}

static void concurrent_adds_in_one_slice_count_exactly(void **state) {
  static nres_window_t w;
  struct adder a[8];
  struct sums s;
  int i;

  (void) state;
  assert_int_equal(nres_window_init(&w, 10 * NRES_SEC, 10), 0);
  for (i = 0; i < 8; i++) {
    a[i].w = &w;
    a[i].n = 8000;   /* 64000 in all: just under saturation */
  }
  test_run_threads(8, add_many, a, sizeof(a[0]));
  s = sum_at(&w, 5 * NRES_SEC);
  assert_int_equal(s.calls, 64000);
  assert_int_equal(s.failures, 32000);
  assert_int_equal(s.slow, 16000);
}

/* Threads sharing a window add to their shards' pending buckets, which
 * move into the ring as each thread reaches a newer slice; whatever the
 * interleaving (a slower thread still adding to slices another has left),
 * the sum over the window counts every sample once. */
#define SLIDE_THREADS 8
#define SLIDE_ADDS 20000   /* 10 slices of 2000 per thread */
#define SLIDE_WIDTH 2000   /* ns: one slice per 2000 adds, now = i */

static void *add_sliding(void *arg) {
  nres_window_t *w = *(nres_window_t **) arg;
  for (int i = 0; i < SLIDE_ADDS; i++)
    nres_window_add(w, (nres_time_t) i, i % 3 == 0, i % 5 == 0);
  return NULL;
}

static void threads_across_slices_count_exactly(void **state) {
  static nres_window_t w;
  nres_window_t *arg[SLIDE_THREADS];
  struct sums s;
  uint32_t in_ring = 0;

  (void) state;
  /* 16 slices of 2 us: the 10 slices written all stay in the window, and
   * each gets 8 x 2000 = 16000 calls, far from saturation. */
  assert_int_equal(nres_window_init(&w, 16 * SLIDE_WIDTH, 16), 0);
  for (int i = 0; i < SLIDE_THREADS; i++)
    arg[i] = &w;
  test_run_threads(SLIDE_THREADS, add_sliding, arg, sizeof(arg[0]));
  s = sum_at(&w, SLIDE_ADDS - 1);
  assert_int_equal(s.calls, SLIDE_THREADS * SLIDE_ADDS);
  assert_int_equal(s.failures, SLIDE_THREADS * 6667);   /* i % 3 == 0 */
  assert_int_equal(s.slow, SLIDE_THREADS * 4000);       /* i % 5 == 0 */
  /* slices 0..8 left the pending buckets: the ring holds them */
  for (int i = 0; i < 9; i++)
    in_ring += (uint32_t) (atomic_load(&w.bucket[i]) >> 16) & 0xffff;
  assert_int_equal(in_ring, SLIDE_THREADS * 9 * 2000);
  /* and the window slides past them all */
  assert_int_equal(sum_at(&w, (SLIDE_ADDS - 1) + 16 * SLIDE_WIDTH).calls, 0);
}

/* A window in memory shared by processes (as in a shm slot): processes
 * take shards by their pid, so several may share one, and the window holds
 * no pointer; zeroed memory given width and count is a valid empty window.
 * 4 forked processes adding across slices count exactly. */
#define PROCS 4

static void processes_sharing_a_window_count_exactly(void **state) {
  nres_window_t *w;
  struct sums s;
  pid_t pid[PROCS];
  int status;

  (void) state;
  w = mmap(NULL, sizeof(*w), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(w != MAP_FAILED);
  w->width = SLIDE_WIDTH;   /* the rest zero, as mmap leaves it */
  w->count = 16;
  for (int i = 0; i < PROCS; i++) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      add_sliding(&w);
      _exit(0);
    }
  }
  for (int i = 0; i < PROCS; i++) {
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  s = sum_at(w, SLIDE_ADDS - 1);
  assert_int_equal(s.calls, PROCS * SLIDE_ADDS);
  assert_int_equal(s.failures, PROCS * 6667);
  assert_int_equal(s.slow, PROCS * 4000);
  assert_int_equal(munmap(w, sizeof(*w)), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(counts_calls_failures_and_slow),
    cmocka_unit_test(old_buckets_expire_as_time_slides),
    cmocka_unit_test(bucket_reused_after_rotation_starts_from_zero),
    cmocka_unit_test(late_sample_does_not_wipe_current_bucket),
    cmocka_unit_test(late_sample_keeps_ring_and_pending_counts),
    cmocka_unit_test(saturation_keeps_ratios_consistent),
    cmocka_unit_test(slice_numbers_wrap_at_16_bits),
    cmocka_unit_test(clear_zeroes_everything),
    cmocka_unit_test(invalid_init_is_einval),
    cmocka_unit_test(concurrent_adds_in_one_slice_count_exactly),
    cmocka_unit_test(threads_across_slices_count_exactly),
    cmocka_unit_test(processes_sharing_a_window_count_exactly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

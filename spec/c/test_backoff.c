/* SPDX-License-Identifier: MIT */
/* test_backoff.c - the delay before each retry (core/backoff.c).
 *
 * Checks the defaults and validation, the exact nominal curves of every
 * kind, the range and mean of every jitter, Retry-After and THROTTLED
 * handling, reproducibility with a fixed seed, the decorrelated curve, and
 * above all the overflow regressions: whatever the kind, jitter, parameters
 * and retry number, a delay never overflows, wraps or exceeds max. All
 * randomness comes from fixed seeds.
 */
#include <math.h>
#include <string.h>

#include "nres_test.h"

#define NEVER NRES_TIME_NEVER

static nres_backoff_t make(int kind, int jitter, nres_time_t base,
                           double factor, nres_time_t max) {
  nres_backoff_t b;
  nres_backoff_init(&b);
  b.kind = (uint8_t) kind;
  b.jitter = (uint8_t) jitter;
  b.base = base;
  b.factor = factor;
  b.max = max;
  return b;
}

/* The decorrelated kind's documented curve, re-derived independently. */
static double curve(double t) {
  return exp2(t) * tanh(sqrt(4.0 * t));
}

static int cmp_time(const void *a, const void *b) {
  nres_time_t x = *(const nres_time_t *) a, y = *(const nres_time_t *) b;
  return x < y ? -1 : x > y;
}

static void init_fills_in_the_documented_defaults(void **unused) {
  nres_backoff_t b;
  (void) unused;
  memset(&b, 0xa5, sizeof(b));
  nres_backoff_init(&b);
  assert_int_equal(b.kind, NRES_BACKOFF_EXPONENTIAL);
  assert_int_equal(b.jitter, NRES_JITTER_FULL);
  assert_true(b.factor == 2.0);
  assert_int_equal(b.base, 100 * NRES_MSEC);
  assert_int_equal(b.max, 30 * NRES_SEC);
  assert_int_equal(b.throttled_base, 1 * NRES_SEC);
  for (size_t i = 0; i < sizeof(b.reserved_); i++)
    assert_int_equal(b.reserved_[i], 0);
  assert_int_equal(nres_backoff_check(&b), 0);
}

static void check_rejects_each_bad_field(void **unused) {
  nres_backoff_t b;
  (void) unused;

  assert_int_equal(nres_backoff_check(NULL), NRES_EINVAL);

  nres_backoff_init(&b);
  b.kind = NRES_BACKOFF_DECORRELATED + 1;
  assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
  b.kind = 255;
  assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);

  nres_backoff_init(&b);
  b.jitter = NRES_JITTER_DECORRELATED + 1;
  assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);

  /* factor, checked whatever the kind */
  const double bad_factors[] = { 0.999, 0.0, -2.0, NAN, INFINITY, -INFINITY };
  for (int kind = NRES_BACKOFF_NONE; kind <= NRES_BACKOFF_DECORRELATED; kind++)
    for (size_t i = 0; i < sizeof(bad_factors) / sizeof(*bad_factors); i++) {
      nres_backoff_init(&b);
      b.kind = (uint8_t) kind;
      b.jitter = NRES_JITTER_NONE;
      b.factor = bad_factors[i];
      assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
    }

  /* max below base, for every kind that waits */
  for (int kind = NRES_BACKOFF_CONSTANT; kind <= NRES_BACKOFF_DECORRELATED;
       kind++) {
    nres_backoff_init(&b);
    b.kind = (uint8_t) kind;
    b.jitter = NRES_JITTER_NONE;
    b.max = b.base - 1;
    assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
    b.max = b.base;   /* equal is fine */
    assert_int_equal(nres_backoff_check(&b), 0);
  }
  nres_backoff_init(&b);
  b.kind = NRES_BACKOFF_NONE;   /* never waits: base and max are unused */
  b.max = 0;
  assert_int_equal(nres_backoff_check(&b), 0);

  /* the decorrelated kind has its randomness built in */
  for (int j = NRES_JITTER_FULL; j <= NRES_JITTER_DECORRELATED; j++) {
    nres_backoff_init(&b);
    b.kind = NRES_BACKOFF_DECORRELATED;
    b.jitter = (uint8_t) j;
    assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
  }
  b.jitter = NRES_JITTER_NONE;
  assert_int_equal(nres_backoff_check(&b), 0);

  /* extremes that are valid */
  b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_FULL, 1, 1e300, NEVER);
  assert_int_equal(nres_backoff_check(&b), 0);
  b.factor = 1.0;
  assert_int_equal(nres_backoff_check(&b), 0);
}

static void none_kind_retries_at_once(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  nres_verdict_t throttled = nres_verdict(NRES_THROTTLED);
  (void) unused;
  nres_rng_seed(&rng, 1);
  for (int j = NRES_JITTER_NONE; j <= NRES_JITTER_DECORRELATED; j++) {
    nres_backoff_t b = make(NRES_BACKOFF_NONE, j, NRES_SEC, 2, 30 * NRES_SEC);
    for (uint32_t n = 1; n <= 50; n++) {
      assert_int_equal(nres_backoff_next(&b, &st, n, NULL, &rng), 0);
      assert_int_equal(nres_backoff_next(&b, &st, n, &throttled, &rng), 0);
      assert_int_equal(st.prev, 0);
    }
  }
}

static void constant_and_linear_kinds_follow_their_formula(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  nres_backoff_t c = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_NONE,
                          250 * NRES_MSEC, 2, 30 * NRES_SEC);
  nres_backoff_t l = make(NRES_BACKOFF_LINEAR, NRES_JITTER_NONE,
                          250 * NRES_MSEC, 2, 30 * NRES_SEC);
  (void) unused;
  nres_rng_seed(&rng, 2);
  for (uint32_t n = 1; n <= 500; n++) {
    assert_int_equal(nres_backoff_next(&c, &st, n, NULL, &rng),
                     250 * NRES_MSEC);
    nres_time_t want = n * 250 * NRES_MSEC;
    assert_int_equal(nres_backoff_next(&l, &st, n, NULL, &rng),
                     want < 30 * NRES_SEC ? want : 30 * NRES_SEC);
  }
  /* linear saturates rather than wrapping */
  l.base = NEVER / 2 + 1;
  l.max = NEVER;
  assert_int_equal(nres_backoff_next(&l, &st, 1, NULL, &rng), NEVER / 2 + 1);
  assert_int_equal(nres_backoff_next(&l, &st, 2, NULL, &rng), NEVER);
  assert_int_equal(nres_backoff_next(&l, &st, UINT32_MAX, NULL, &rng), NEVER);
}

static void exponential_without_jitter_doubles_exactly(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE,
                          100 * NRES_MSEC, 2, 30 * NRES_SEC);
  nres_time_t last = 0;
  (void) unused;
  nres_rng_seed(&rng, 3);
  for (uint32_t n = 1; n <= 9; n++)   /* 100 ms .. 25.6 s */
    assert_int_equal(nres_backoff_next(&b, &st, n, NULL, &rng),
                     (100 * NRES_MSEC) << (n - 1));
  assert_int_equal(nres_backoff_next(&b, &st, 10, NULL, &rng), 30 * NRES_SEC);

  /* a base that is not a round double still multiplies exactly */
  b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE, (1ull << 53) + 1, 2,
           NEVER);
  assert_int_equal(nres_backoff_next(&b, &st, 3, NULL, &rng),
                   ((1ull << 53) + 1) * 4);
  b.factor = 3;
  assert_int_equal(nres_backoff_next(&b, &st, 3, NULL, &rng),
                   ((1ull << 53) + 1) * 9);

  b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE, 100 * NRES_MSEC, 2,
           30 * NRES_SEC);
  for (uint32_t n = 1; n <= 10000; n++) {
    nres_time_t d = nres_backoff_next(&b, &st, n, NULL, &rng);
    assert_true(d >= last);
    last = d;
  }
  assert_int_equal(last, 30 * NRES_SEC);
}

static void exponential_with_a_fractional_factor(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE, 1000,
                          1.5, NRES_SEC);
  (void) unused;
  assert_int_equal(nres_backoff_next(&b, &st, 1, NULL, NULL), 1000);
  assert_int_equal(nres_backoff_next(&b, &st, 2, NULL, NULL), 1500);
  assert_int_equal(nres_backoff_next(&b, &st, 3, NULL, NULL), 2250);
  assert_int_equal(nres_backoff_next(&b, &st, 5, NULL, NULL), 5062);
  assert_int_equal(nres_backoff_next(&b, &st, 100, NULL, NULL), NRES_SEC);
  b.factor = 1.0;   /* factor 1 is a constant backoff */
  assert_int_equal(nres_backoff_next(&b, &st, 1000000, NULL, NULL), 1000);
}

static void unchecked_bad_factor_never_makes_a_hot_loop(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE,
                          NRES_MSEC, NAN, NRES_SEC);
  (void) unused;
  /* check() rejects these; next() must still not return 0 */
  assert_int_equal(nres_backoff_next(&b, &st, 10, NULL, NULL), NRES_MSEC);
  b.factor = 0.5;
  assert_int_equal(nres_backoff_next(&b, &st, 10, NULL, NULL), NRES_MSEC);
  b.factor = INFINITY;
  assert_int_equal(nres_backoff_next(&b, &st, 2, NULL, NULL), NRES_SEC);
}

/* Polly #2163: the delay overflowed after 1,025 attempts. Here every kind
 * with every jitter (even the combinations check() rejects), extreme
 * parameters, 10,000 consecutive retries and the largest retry numbers. */
static void backoff_overflows_after_1025_attempts(void **unused) {
  static const struct {
    nres_time_t base;
    double factor;
    nres_time_t max;
    nres_time_t throttled_base;
  } params[] = {
    { 100 * NRES_MSEC, 2, 30 * NRES_SEC, NRES_SEC },
    { NEVER / 2 - 1, 2, NEVER, 0 },
    { NEVER / 2, 1e300, NEVER, NEVER },
    { 1, 1e300, NEVER, NEVER },
    { 1, 2, NEVER, 1 },
    { 1, 1.0000001, NEVER, NEVER / 2 + 3 },
    { 1, 3, 1, 0 },
    { 0, 2, 0, 0 },
    { NEVER, 1.5, NEVER, NEVER },
  };
  const uint32_t late[] = { 1024, 1025, 1026, 65536, UINT32_MAX / 2,
                            UINT32_MAX - 1, UINT32_MAX };
  nres_verdict_t throttled = nres_verdict(NRES_THROTTLED);
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 2163);

  for (size_t p = 0; p < sizeof(params) / sizeof(*params); p++)
    for (int kind = NRES_BACKOFF_NONE; kind <= NRES_BACKOFF_DECORRELATED;
         kind++)
      for (int j = NRES_JITTER_NONE; j <= NRES_JITTER_DECORRELATED; j++)
        for (int v = 0; v < 2; v++) {
          nres_backoff_t b = make(kind, j, params[p].base, params[p].factor,
                                  params[p].max);
          const nres_verdict_t *verdict = v ? &throttled : NULL;
          nres_backoff_state_t st = { 0, 0 };
          nres_time_t last = 0;
          b.throttled_base = params[p].throttled_base;

          for (uint32_t n = 1; n <= 10000; n++) {
            nres_time_t d = nres_backoff_next(&b, &st, n, verdict, &rng);
            assert_true(d <= b.max);
            assert_int_equal(st.prev, d);
            assert_true(isfinite(st.curve) && st.curve >= 0);
            /* without randomness the curve only rises: a wrap would show */
            if (j == NRES_JITTER_NONE && kind != NRES_BACKOFF_DECORRELATED)
              assert_true(d >= last);
            /* once the curve is past max it stays there, never wrapping
             * back to a small delay */
            if (kind == NRES_BACKOFF_DECORRELATED && n >= 100 && b.base > 0)
              assert_int_equal(d, b.max);
            last = d;
          }
          for (size_t i = 0; i < sizeof(late) / sizeof(*late); i++) {
            nres_time_t d = nres_backoff_next(&b, &st, late[i], verdict, &rng);
            assert_true(d <= b.max);
            assert_true(isfinite(st.curve) && st.curve >= 0);
            if (j == NRES_JITTER_NONE && kind == NRES_BACKOFF_EXPONENTIAL &&
                b.base > 0 && b.factor > 1.5)
              assert_int_equal(d, b.max);
          }
        }

  /* the exact attempt Polly broke on, with the defaults */
  nres_backoff_t b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE,
                          NRES_SEC, 2, 30 * NRES_SEC);
  nres_backoff_state_t st = { 0, 0 };
  for (uint32_t n = 1; n <= 1030; n++) {
    nres_time_t d = nres_backoff_next(&b, &st, n, NULL, &rng);
    if (n >= 20)
      assert_int_equal(d, 30 * NRES_SEC);
  }
}

/* agenda #1748: jitter applied after the cap pushed delays past max. */
static void jitter_pushes_delays_past_the_max(void **unused) {
  nres_rng_t rng;
  nres_backoff_state_t st = { 0, 0 };
  int saw_max[NRES_JITTER_DECORRELATED + 1] = { 0 };
  (void) unused;
  nres_rng_seed(&rng, 1748);

  /* a max that is no power-of-two multiple of base, nominal often past it */
  for (int j = NRES_JITTER_NONE; j <= NRES_JITTER_DECORRELATED; j++) {
    nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, j, 700 * NRES_MSEC, 2,
                            NRES_SEC + 1);
    nres_backoff_state_reset(&st);
    for (int i = 0; i < 20000; i++) {
      uint32_t n = 1 + (uint32_t) nres_rng_below(&rng, 8);
      nres_time_t d = nres_backoff_next(&b, &st, n, NULL, &rng);
      assert_true(d <= NRES_SEC + 1);
      saw_max[j] += d == NRES_SEC + 1;
      if (j == NRES_JITTER_EQUAL && n >= 2)   /* nominal is max */
        assert_true(d >= (NRES_SEC + 1) / 2);
      if (j == NRES_JITTER_DECORRELATED)
        assert_true(d >= 700 * NRES_MSEC);
    }
  }
  assert_true(saw_max[NRES_JITTER_NONE] > 0);
  /* decorrelated jitter reaches up to 3x the previous delay: it is the
   * clamp, not luck, that holds it at max */
  assert_true(saw_max[NRES_JITTER_DECORRELATED] > 1000);

  /* base == max: decorrelated jitter draws in [max, 3 max], always max */
  nres_backoff_t c = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_DECORRELATED,
                          NRES_SEC, 2, NRES_SEC);
  nres_backoff_state_reset(&st);
  for (uint32_t n = 1; n <= 1000; n++)
    assert_int_equal(nres_backoff_next(&c, &st, n, NULL, &rng), NRES_SEC);
}

static void full_and_equal_jitter_stay_in_range_with_a_plausible_mean(
    void **unused) {
  const int samples = 20000;
  const nres_time_t d = 8 * NRES_SEC;   /* nominal at retry 4 */
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 7);

  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_FULL,
                          NRES_SEC, 2, 3600 * NRES_SEC);
  double sum = 0;
  nres_time_t lo = NEVER, hi = 0;
  for (int i = 0; i < samples; i++) {
    nres_time_t x = nres_backoff_next(&b, &st, 4, NULL, &rng);
    assert_true(x <= d);
    sum += (double) x;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  /* the mean of U[0, d] is d/2; its standard error here is 0.4% */
  assert_true(fabs(sum / samples - (double) d / 2) < 0.02 * (double) d / 2);
  assert_true(lo < d / 100 && hi > d - d / 100);   /* spread over [0, d] */

  b.jitter = NRES_JITTER_EQUAL;
  sum = 0;
  lo = NEVER;
  hi = 0;
  for (int i = 0; i < samples; i++) {
    nres_time_t x = nres_backoff_next(&b, &st, 4, NULL, &rng);
    assert_true(x >= d / 2 && x <= d);
    sum += (double) x;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  assert_true(fabs(sum / samples - 0.75 * (double) d) < 0.01 * (double) d);
  assert_true(lo < d / 2 + d / 100 && hi > d - d / 100);

  /* past max, the nominal delay is capped before the jitter too, so full
   * jitter still spreads over [0, max] instead of sticking to max */
  for (int kind = NRES_BACKOFF_LINEAR; kind <= NRES_BACKOFF_EXPONENTIAL;
       kind++) {
    b = make(kind, NRES_JITTER_FULL, NRES_SEC, 2, 10 * NRES_SEC);
    sum = 0;
    for (int i = 0; i < samples; i++) {
      nres_time_t x = nres_backoff_next(&b, &st, 1000, NULL, &rng);
      assert_true(x <= 10 * NRES_SEC);
      sum += (double) x;
    }
    assert_true(fabs(sum / samples - 5e9) < 0.02 * 5e9);
  }

  /* the whole range of time, where [0, d] has 2^64 values */
  b = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_FULL, NEVER, 2, NEVER);
  sum = 0;
  for (int i = 0; i < samples; i++)
    sum += (double) nres_backoff_next(&b, &st, 1, NULL, &rng);
  assert_true(fabs(sum / samples - 0x1p63) < 0.02 * 0x1p63);

  /* an odd nominal delay can still be returned whole */
  b = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_EQUAL, 3, 2, 3);
  int saw[4] = { 0 };
  for (int i = 0; i < 1000; i++) {
    nres_time_t x = nres_backoff_next(&b, &st, 1, NULL, &rng);
    assert_true(x >= 2 && x <= 3);
    saw[x]++;
  }
  assert_true(saw[2] > 0 && saw[3] > 0);
}

static void decorrelated_jitter_grows_from_the_previous_delay(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  nres_backoff_t b = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_DECORRELATED,
                          100 * NRES_MSEC, 2, 10 * NRES_SEC);
  int reached_max = 0;
  (void) unused;
  nres_rng_seed(&rng, 11);

  for (int run = 0; run < 200; run++) {
    nres_time_t prev;
    nres_backoff_state_reset(&st);
    prev = nres_backoff_next(&b, &st, 1, NULL, &rng);
    assert_true(prev >= 100 * NRES_MSEC && prev <= 300 * NRES_MSEC);
    for (uint32_t n = 2; n <= 30; n++) {
      nres_time_t x = nres_backoff_next(&b, &st, n, NULL, &rng);
      nres_time_t top = 3 * prev < 10 * NRES_SEC ? 3 * prev : 10 * NRES_SEC;
      assert_true(x >= 100 * NRES_MSEC && x <= top);
      prev = x;
      reached_max += x == 10 * NRES_SEC;
    }
  }
  assert_true(reached_max > 0);

  /* under THROTTLED the floor is the throttled base */
  nres_verdict_t throttled = nres_verdict(NRES_THROTTLED);
  nres_backoff_state_reset(&st);
  for (uint32_t n = 1; n <= 100; n++)
    assert_true(nres_backoff_next(&b, &st, n, &throttled, &rng) >= NRES_SEC);
}

static void fixed_seed_reproduces_the_exact_sequence(void **unused) {
  static const struct { int kind, jitter; } cases[] = {
    { NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_FULL },
    { NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_EQUAL },
    { NRES_BACKOFF_LINEAR, NRES_JITTER_DECORRELATED },
    { NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE },
  };
  nres_time_t a[60], b2[60];
  (void) unused;

  for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
    nres_backoff_t b = make(cases[c].kind, cases[c].jitter, 10 * NRES_MSEC,
                            2, 3600 * NRES_SEC);
    for (int pass = 0; pass < 3; pass++) {
      nres_backoff_state_t st = { 0, 0 };
      nres_rng_t rng;
      nres_time_t *out = pass == 1 ? b2 : a;
      int differ = 0;
      nres_rng_seed(&rng, pass == 2 ? 43 : 42);
      for (uint32_t n = 1; n <= 60; n++) {
        nres_time_t x = nres_backoff_next(&b, &st, n, NULL, &rng);
        if (pass == 2)
          differ |= x != a[n - 1];
        else
          out[n - 1] = x;
      }
      if (pass == 1)
        assert_memory_equal(a, b2, sizeof(a));
      if (pass == 2)
        assert_true(differ);   /* the seed matters at all */
    }
  }
}

static void retry_after_is_honoured_exactly_unjittered_and_capped(
    void **unused) {
  nres_verdict_t v = nres_verdict(NRES_THROTTLED);
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 5);
  v.flags = NRES_VF_RETRY_AFTER;

  for (int kind = NRES_BACKOFF_NONE; kind <= NRES_BACKOFF_DECORRELATED;
       kind++) {
    int jitter = kind == NRES_BACKOFF_DECORRELATED ? NRES_JITTER_NONE
                                                   : NRES_JITTER_FULL;
    nres_backoff_t b = make(kind, jitter, 100 * NRES_MSEC, 2, 30 * NRES_SEC);
    for (uint32_t n = 1; n <= 200; n++) {
      v.retry_after = 7 * NRES_SEC + 3;
      assert_int_equal(nres_backoff_next(&b, &st, n, &v, &rng),
                       7 * NRES_SEC + 3);
      assert_int_equal(st.prev, 7 * NRES_SEC + 3);
      /* the decorrelated curve keeps in step with the retry number, so
       * the next computed delay is one step, not several */
      if (kind == NRES_BACKOFF_DECORRELATED && n <= 20)
        assert_true(st.curve >= curve(n - 1.0) && st.curve < curve(n));
      v.retry_after = 3600 * NRES_SEC;
      assert_int_equal(nres_backoff_next(&b, &st, n, &v, &rng),
                       30 * NRES_SEC);
      v.retry_after = 0;
      assert_int_equal(nres_backoff_next(&b, &st, n, &v, &rng), 0);
    }
  }

  /* any kind of verdict may carry it */
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE,
                          100 * NRES_MSEC, 2, 30 * NRES_SEC);
  v.kind = NRES_TRANSIENT;
  v.retry_after = 2 * NRES_SEC;
  assert_int_equal(nres_backoff_next(&b, &st, 1, &v, &rng), 2 * NRES_SEC);
  /* without the flag, the value is not a Retry-After */
  v.flags = 0;
  assert_int_equal(nres_backoff_next(&b, &st, 1, &v, &rng), 100 * NRES_MSEC);
}

static void throttled_verdict_uses_the_throttled_base(void **unused) {
  nres_verdict_t throttled = nres_verdict(NRES_THROTTLED);
  nres_verdict_t transient = nres_verdict(NRES_TRANSIENT);
  nres_backoff_state_t st = { 0, 0 };
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE,
                          100 * NRES_MSEC, 2, 30 * NRES_SEC);
  (void) unused;
  assert_int_equal(b.throttled_base, NRES_SEC);
  assert_int_equal(nres_backoff_next(&b, &st, 3, &throttled, NULL),
                   4 * NRES_SEC);
  assert_int_equal(nres_backoff_next(&b, &st, 3, &transient, NULL),
                   400 * NRES_MSEC);
  assert_int_equal(nres_backoff_next(&b, &st, 3, NULL, NULL),
                   400 * NRES_MSEC);
  assert_int_equal(nres_backoff_next(&b, &st, 9, &throttled, NULL),
                   30 * NRES_SEC);
  b.throttled_base = 0;   /* 0 = same as base */
  assert_int_equal(nres_backoff_next(&b, &st, 3, &throttled, NULL),
                   400 * NRES_MSEC);

  b = make(NRES_BACKOFF_CONSTANT, NRES_JITTER_NONE, 100 * NRES_MSEC, 2,
           30 * NRES_SEC);
  assert_int_equal(nres_backoff_next(&b, &st, 1, &throttled, NULL), NRES_SEC);
  b.throttled_base = 3600 * NRES_SEC;   /* still capped at max */
  assert_int_equal(nres_backoff_next(&b, &st, 1, &throttled, NULL),
                   30 * NRES_SEC);

  /* the decorrelated kind scales its curve by the throttled base: the same
   * draw gives ten times the delay */
  b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE, 100 * NRES_MSEC, 2,
           3600 * NRES_SEC);
  for (uint64_t seed = 0; seed < 100; seed++) {
    nres_rng_t r1, r2;
    nres_backoff_state_t s1 = { 0, 0 }, s2 = { 0, 0 };
    nres_rng_seed(&r1, seed);
    nres_rng_seed(&r2, seed);
    double x = (double) nres_backoff_next(&b, &s1, 1, &transient, &r1);
    double y = (double) nres_backoff_next(&b, &s2, 1, &throttled, &r2);
    assert_true(fabs(y - 10 * x) <= 10);
  }
}

static void decorrelated_kind_median_first_delay_is_about_base(void **unused) {
  enum { N = 10001 };
  static nres_time_t first[N];
  nres_backoff_t b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE,
                          NRES_SEC, 2, 3600 * NRES_SEC);
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 99);
  for (int i = 0; i < N; i++) {
    nres_backoff_state_t st = { 0, 0 };
    first[i] = nres_backoff_next(&b, &st, 1, NULL, &rng);
    /* f(1) / 1.4 = 2 tanh(2) / 1.4 ~ 1.377 is the largest first delay */
    assert_true(first[i] <= 1377 * NRES_MSEC + NRES_MSEC);
  }
  qsort(first, N, sizeof(*first), cmp_time);
  /* f(0.5) / 1.4 ~ 0.897 base */
  assert_true(first[N / 2] > 850 * NRES_MSEC);
  assert_true(first[N / 2] < 950 * NRES_MSEC);
}

static void decorrelated_kind_delays_telescope_to_the_curve(void **unused) {
  const double base = (double) NRES_MSEC;
  nres_backoff_t b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE,
                          NRES_MSEC, 2, NEVER);
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 123);
  for (int run = 0; run < 100; run++) {
    nres_backoff_state_t st = { 0, 0 };
    double sum = 0;
    for (uint32_t n = 1; n <= 30; n++) {
      nres_time_t d = nres_backoff_next(&b, &st, n, NULL, &rng);
      if (n > 1)
        assert_true(d > 0);
      sum += (double) d;
      /* the curve point lies in [f(n-1), f(n)) */
      assert_true(st.curve >= curve(n - 1.0) && st.curve < curve(n));
      /* the sum of delays is the curve, less < 1 ns of rounding a step */
      double want = st.curve / 1.4 * base;
      assert_true(sum <= want * (1 + 1e-12) && sum >= want * (1 - 1e-12) - n);
    }
  }
}

static void decorrelated_kind_survives_a_stale_state(void **unused) {
  nres_backoff_t b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE,
                          NRES_SEC, 2, NEVER);
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 8);
  for (uint32_t n = 1; n <= 10; n++)
    (void) nres_backoff_next(&b, &st, n, NULL, &rng);
  /* reused without a reset: a first retry is still a first retry */
  nres_time_t d = nres_backoff_next(&b, &st, 1, NULL, &rng);
  assert_true(d <= 1378 * NRES_MSEC);
  /* and a middle retry is one step of the curve, not 0 nor the whole sum */
  for (uint32_t n = 1; n <= 10; n++)
    (void) nres_backoff_next(&b, &st, n, NULL, &rng);
  d = nres_backoff_next(&b, &st, 5, NULL, &rng);
  assert_true(d > 0);
  assert_true((double) d <= (curve(5) - curve(3)) / 1.4 * 1e9);
  /* no state at all behaves the same */
  d = nres_backoff_next(&b, NULL, 5, NULL, &rng);
  assert_true(d > 0);
  assert_true((double) d <= (curve(5) - curve(3)) / 1.4 * 1e9);
}

static void state_tracks_the_last_delay_and_resets(void **unused) {
  nres_backoff_t b = make(NRES_BACKOFF_DECORRELATED, NRES_JITTER_NONE,
                          NRES_MSEC, 2, NRES_SEC);
  nres_backoff_state_t st = { 0, 0 };
  nres_rng_t rng;
  (void) unused;
  nres_rng_seed(&rng, 9);
  for (uint32_t n = 1; n <= 5; n++) {
    nres_time_t d = nres_backoff_next(&b, &st, n, NULL, &rng);
    assert_int_equal(st.prev, d);
  }
  assert_true(st.curve > 0);
  nres_backoff_state_reset(&st);
  assert_int_equal(st.prev, 0);
  assert_true(st.curve == 0.0);
}

static void retry_zero_and_missing_rng_are_safe(void **unused) {
  nres_backoff_state_t st = { 0, 0 };
  nres_backoff_t b = make(NRES_BACKOFF_EXPONENTIAL, NRES_JITTER_NONE,
                          100 * NRES_MSEC, 2, 30 * NRES_SEC);
  (void) unused;
  /* retries count from 1; 0 reads as the first */
  assert_int_equal(nres_backoff_next(&b, &st, 0, NULL, NULL), 100 * NRES_MSEC);
  /* no PRNG: every draw takes its midpoint */
  b.jitter = NRES_JITTER_FULL;
  assert_int_equal(nres_backoff_next(&b, &st, 2, NULL, NULL), 100 * NRES_MSEC);
  b.jitter = NRES_JITTER_EQUAL;
  assert_int_equal(nres_backoff_next(&b, &st, 2, NULL, NULL), 150 * NRES_MSEC);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(init_fills_in_the_documented_defaults),
    cmocka_unit_test(check_rejects_each_bad_field),
    cmocka_unit_test(none_kind_retries_at_once),
    cmocka_unit_test(constant_and_linear_kinds_follow_their_formula),
    cmocka_unit_test(exponential_without_jitter_doubles_exactly),
    cmocka_unit_test(exponential_with_a_fractional_factor),
    cmocka_unit_test(unchecked_bad_factor_never_makes_a_hot_loop),
    cmocka_unit_test(backoff_overflows_after_1025_attempts),
    cmocka_unit_test(jitter_pushes_delays_past_the_max),
    cmocka_unit_test(full_and_equal_jitter_stay_in_range_with_a_plausible_mean),
    cmocka_unit_test(decorrelated_jitter_grows_from_the_previous_delay),
    cmocka_unit_test(fixed_seed_reproduces_the_exact_sequence),
    cmocka_unit_test(retry_after_is_honoured_exactly_unjittered_and_capped),
    cmocka_unit_test(throttled_verdict_uses_the_throttled_base),
    cmocka_unit_test(decorrelated_kind_median_first_delay_is_about_base),
    cmocka_unit_test(decorrelated_kind_delays_telescope_to_the_curve),
    cmocka_unit_test(decorrelated_kind_survives_a_stale_state),
    cmocka_unit_test(state_tracks_the_last_delay_and_resets),
    cmocka_unit_test(retry_zero_and_missing_rng_are_safe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

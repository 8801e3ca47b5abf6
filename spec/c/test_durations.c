/* SPDX-License-Identifier: MIT */
/* test_durations.c - every configurable duration at its edges.
 *
 * Durations past 2^64 ns used to wrap (18446744074 s read as 0.29 s) and
 * NaN read as 0, which silently turned a deadline off. nres_time_from_sec
 * is now the one conversion: NaN and negatives become NRES_TIME_INVALID,
 * which every init and nres_policy_build refuses naming the field, and
 * anything from 2^63 ns up saturates to NRES_TIME_NEVER (a policy's field
 * set directly between 2^63 ns and never is a negative number that
 * wrapped: refused by name). This walks each
 * duration field of the C config structs (policy, backoff, breaker,
 * bulkhead, window, estimator, rate limiter) and the Retry-After parser
 * with 0, tiny, NaN, +-inf, 2^63 ns, 2^64 ns and 1e300, and checks that
 * each value is refused with its field named, or accepted and then acts
 * as the saturated duration it stands for, never as a short one. All on a
 * virtual clock.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "nres_test.h"
#include "nres/http.h"

#define MS NRES_MSEC
#define SEC NRES_SEC
#define T0 (1000 * SEC)   /* the virtual clock's start */

#define TWO63 9223372036854775808.0   /* 2^63, exact in a double */

/* The inputs, in seconds, and what the conversion must make of them. */
typedef struct {
  const char *name;
  double seconds;
  nres_time_t expect;
} input_t;

static const input_t inputs[] = {
  { "0", 0.0, 0 },
  { "-0", -0.0, 0 },
  { "tiny", 1e-300, 1 },                     /* positive: never 0 */
  { "half a ns", 0.5e-9, 1 },
  { "1.5 s", 1.5, 1500 * MS },
  { "NaN", NAN, NRES_TIME_INVALID },
  { "+inf", INFINITY, NRES_TIME_NEVER },
  { "-inf", -INFINITY, NRES_TIME_INVALID },
  { "-1 s", -1.0, NRES_TIME_INVALID },
  { "2^63 ns", TWO63 / 1e9, NRES_TIME_NEVER },   /* 2^63 up: negatives wrap there */
  { "2^64 ns", 2 * TWO63 / 1e9, NRES_TIME_NEVER },
  { "18446744074 s", 18446744074.0, NRES_TIME_NEVER },   /* wrapped to 0.29 s */
  { "1e300 s", 1e300, NRES_TIME_NEVER },
};
#define N_INPUTS (sizeof(inputs) / sizeof(inputs[0]))

static void conversion_saturates_and_marks_nan(void **state) {
  (void) state;
  for (size_t i = 0; i < N_INPUTS; i++) {
    nres_time_t got = nres_time_from_sec(inputs[i].seconds);
    if (got != inputs[i].expect)
      fail_msg("nres_time_from_sec(%s) = %llu, expected %llu", inputs[i].name,
               (unsigned long long) got, (unsigned long long) inputs[i].expect);
  }
  /* Just below 2^63 ns stays exact to the double's precision. */
  assert_true(nres_time_from_sec(TWO63 / 1e9 / 2) == (nres_time_t) 1 << 62);
  assert_true(NRES_TIME_INVALID != NRES_TIME_NEVER);
}

/* "field: ..." */
static void assert_names(const char *why, const char *field, const char *input) {
  size_t n = strlen(field);
  if (why == NULL)
    fail_msg("%s = %s: refused without a reason", field, input);
  if (strncmp(why, field, n) != 0 || why[n] != ':')
    fail_msg("%s = %s: the reason \"%s\" does not name the field", field,
             input, why);
}

/* --------------------------------------------------------------- policy */

typedef struct {
  const char *name;             /* as nres_policy_error names it */
  size_t offset;
} field_t;

#define FIELD(path) { #path, offsetof(nres_policy_t, path) }

static const field_t policy_fields[] = {
  FIELD(deadline),       FIELD(attempt_timeout), FIELD(ceiling_floor),
  FIELD(slow_threshold), FIELD(limit_wait),      FIELD(hedge.delay),
  FIELD(backoff.base),   FIELD(backoff.max),     FIELD(backoff.throttled_base),
};
#define N_FIELDS (sizeof(policy_fields) / sizeof(policy_fields[0]))

static nres_time_t *field_of(nres_policy_t *p, const field_t *f) {
  return (nres_time_t *) (void *) ((char *) p + f->offset);
}

/* A policy in which only the walked field decides anything: no other
 * duration is set, so no combination rule can name another field. */
static void base_policy(nres_policy_t *p, const field_t *f) {
  assert_int_equal(nres_policy_init(p, NRES_PRESET_TRIVIAL), 0);
  p->attempts = 2;
  if (strncmp(f->name, "backoff.", 8) == 0) {
    p->backoff.kind = NRES_BACKOFF_CONSTANT;
    p->backoff.jitter = NRES_JITTER_NONE;
    p->backoff.base = 0;
    p->backoff.max = NRES_TIME_NEVER;
    p->backoff.throttled_base = 0;
    if (strcmp(f->name, "backoff.max") == 0)
      p->backoff.max = 0;   /* base 0: any max is >= base */
  }
  if (strcmp(f->name, "hedge.delay") == 0) {
    p->hedge.max = 2;
    p->estimator = &p->own.estimator;   /* delay 0: the quantile */
  }
}

/* What an accepted value must do on a call started at T0. */
static void acts_saturated(const field_t *f, nres_time_t v, const char *input) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_verdict_t thr = nres_verdict(NRES_THROTTLED);

  base_policy(&p, f);
  *field_of(&p, f) = v;
  assert_int_equal(nres_policy_build(&p), 0);
  a = nres_call_begin(&call, &p, T0);
  assert_int_equal(a.kind, NRES_ATTEMPT);

  if (strcmp(f->name, "deadline") == 0) {
    assert_true(call.deadline == (v ? nres_time_add(T0, v) : NRES_TIME_NEVER));
    assert_true(call.deadline > T0);   /* never wrapped into the past */
  } else if (strcmp(f->name, "attempt_timeout") == 0) {
    assert_true(a.at == (v ? nres_time_add(T0, v) : NRES_TIME_NEVER));
    assert_true(a.at > T0);
  } else if (strcmp(f->name, "hedge.delay") == 0) {
    /* No samples: delay 0 hedges never; otherwise at T0 + delay. */
    nres_time_t due = v ? nres_time_add(T0, v) : NRES_TIME_NEVER;
    if (due == NRES_TIME_NEVER)
      assert_true(call.resume_at == NRES_TIME_NEVER);
    else
      assert_true(call.resume_at == due);
  } else if (strcmp(f->name, "backoff.base") == 0 ||
             strcmp(f->name, "backoff.throttled_base") == 0) {
    nres_time_t d = v;
    if (strcmp(f->name, "backoff.throttled_base") == 0)
      d = v ? v : p.backoff.base;   /* 0: the same as base (0) */
    a = nres_call_report(&call, a.slot, T0, thr);
    if (d == 0) {
      assert_int_equal(a.kind, NRES_ATTEMPT);
    } else if (nres_time_add(T0, d) == NRES_TIME_NEVER) {
      /* A wait past the end of time is past any deadline: end now. */
      assert_int_equal(a.kind, NRES_DONE);
      assert_int_equal(a.stop, NRES_STOP_DEADLINE);
    } else {
      assert_int_equal(a.kind, NRES_WAIT);
      assert_true(a.at == T0 + d);
    }
  } else if (strcmp(f->name, "backoff.max") == 0) {
    a = nres_call_report(&call, a.slot, T0, thr);
    assert_int_equal(a.kind, NRES_ATTEMPT);   /* base 0, whatever max */
  } else if (strcmp(f->name, "limit_wait") == 0 ||
             strcmp(f->name, "ceiling_floor") == 0 ||
             strcmp(f->name, "slow_threshold") == 0) {
    /* Checked with their features below; here: accepted, and a call on
     * the policy still works. */
    a = nres_call_report(&call, a.slot, T0 + MS, nres_verdict(NRES_OK));
    assert_int_equal(a.stop, NRES_STOP_OK);
  } else {
    fail_msg("%s = %s: no check for this field", f->name, input);
  }
  nres_call_cancel(&call, T0);   /* a finished call: its DONE again */
}

static void every_policy_duration_saturates_or_is_refused(void **state) {
  nres_policy_t p;
  (void) state;

  for (size_t i = 0; i < N_FIELDS; i++) {
    const field_t *f = &policy_fields[i];
    for (size_t j = 0; j < N_INPUTS; j++) {
      nres_time_t v = nres_time_from_sec(inputs[j].seconds);
      base_policy(&p, f);
      *field_of(&p, f) = v;
      if (v == NRES_TIME_INVALID) {
        assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
        assert_names(nres_policy_error(&p), f->name, inputs[j].name);
        assert_non_null(strstr(nres_policy_error(&p), "not a number"));
      } else {
        if (nres_policy_build(&p) != 0)
          fail_msg("%s = %s refused: %s", f->name, inputs[j].name,
                   nres_policy_error(&p));
        assert_null(nres_policy_error(&p));
        acts_saturated(f, v, inputs[j].name);
      }
    }
  }
}

/* A negative number assigned to a duration field wraps to 2^63 ns or more
 * (-1 to NRES_TIME_NEVER, which stays "never"): refused, the field named,
 * where it used to build as a duration of centuries. */
static void wrapped_negatives_are_refused_by_name(void **state) {
  static const nres_time_t wrapped[] = {
    (nres_time_t) -5 * NRES_SEC, (nres_time_t) -3, NRES_TIME_WRAPPED,
  };
  nres_policy_t p;
  (void) state;

  for (size_t i = 0; i < N_FIELDS; i++) {
    const field_t *f = &policy_fields[i];
    for (size_t j = 0; j < sizeof(wrapped) / sizeof(wrapped[0]); j++) {
      base_policy(&p, f);
      *field_of(&p, f) = wrapped[j];
      assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
      assert_names(nres_policy_error(&p), f->name, "a wrapped negative");
      assert_non_null(strstr(nres_policy_error(&p), "negative"));
    }
    base_policy(&p, f);   /* just below: a duration of 292 years */
    *field_of(&p, f) = NRES_TIME_WRAPPED - 1;
    assert_int_equal(nres_policy_build(&p), 0);
  }
}

/* A huge measured-ceiling floor bounds the attempt at the floor: never a
 * wrapped, shorter one. */
static void ceiling_floor_saturates(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  for (size_t j = 0; j < N_INPUTS; j++) {
    nres_time_t v = nres_time_from_sec(inputs[j].seconds);
    if (v == NRES_TIME_INVALID)
      continue;
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
    p.estimator = &p.own.estimator;
    p.ceiling_factor = 3;
    p.min_samples = 1;
    p.ceiling_floor = v;
    assert_int_equal(nres_policy_build(&p), 0);
    nres_estimator_record(&p.own.estimator, T0, 1 * MS);
    a = nres_call_begin(&call, &p, T0);
    assert_int_equal(a.kind, NRES_ATTEMPT);
    assert_true(a.at > T0);
    assert_true(a.at >= nres_time_add(T0, v));   /* at least the floor */
    if (v >= 1 * SEC)
      assert_true(a.at == nres_time_add(T0, v));
    nres_call_cancel(&call, T0);
  }
}

/* Slower than a huge threshold is never slow; a tiny one makes 1 s slow. */
static void slow_threshold_saturates(void **state) {
  nres_policy_t p;
  nres_breaker_t br;
  nres_breaker_config_t cfg;
  nres_call_t call;
  nres_action_t a;
  uint32_t calls, slow;
  (void) state;

  for (size_t j = 0; j < N_INPUTS; j++) {
    nres_time_t v = nres_time_from_sec(inputs[j].seconds);
    if (v == NRES_TIME_INVALID || v == 0)
      continue;   /* 0 means "measured": tested in test_call.c */
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
    nres_breaker_config_init(&cfg);
    cfg.consecutive = 0;
    cfg.failure_ratio = 0;
    cfg.slow_ratio = 1;
    cfg.min_calls = 1000;   /* counts, never trips */
    assert_int_equal(nres_breaker_init(&br, &cfg), 0);
    p.breaker = &br;
    p.slow_threshold = v;
    assert_int_equal(nres_policy_build(&p), 0);
    a = nres_call_begin(&call, &p, T0);
    a = nres_call_report(&call, a.slot, T0 + 1 * SEC, nres_verdict(NRES_OK));
    assert_int_equal(a.stop, NRES_STOP_OK);
    nres_window_sum(&br.window, T0 + 1 * SEC, &calls, NULL, &slow);
    assert_int_equal(calls, 1);
    assert_int_equal(slow, 1 * SEC > v);
  }
}

/* A rate-limited call waits when the limiter's wait is within limit_wait,
 * however large limit_wait is; otherwise it stops. */
static void limit_wait_saturates(void **state) {
  nres_policy_t p;
  nres_ratelimit_t rl;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  for (size_t j = 0; j < N_INPUTS; j++) {
    nres_time_t v = nres_time_from_sec(inputs[j].seconds);
    if (v == NRES_TIME_INVALID)
      continue;
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
    assert_int_equal(nres_ratelimit_init(&rl, 1, 1), 0);
    p.ratelimit = &rl;
    p.limit_wait = v;
    assert_int_equal(nres_policy_build(&p), 0);
    a = nres_call_begin(&call, &p, T0);
    assert_int_equal(a.kind, NRES_ATTEMPT);
    nres_call_report(&call, a.slot, T0, nres_verdict(NRES_OK));
    a = nres_call_begin(&call, &p, T0);   /* the next is 1 s away */
    if (v >= 1 * SEC) {
      assert_int_equal(a.kind, NRES_WAIT);
      assert_true(a.at == T0 + 1 * SEC);
      nres_call_cancel(&call, T0);
    } else {
      assert_int_equal(a.kind, NRES_DONE);
      assert_int_equal(a.stop, NRES_STOP_LIMITED);
    }
  }
}

/* -------------------------------------------------------------- backoff */

/* Every kind and jitter, any base, max and throttled base: the delay never
 * exceeds max and never wraps below what the configuration asks. */
static void backoff_delays_stay_within_max_whatever_the_durations(void **state) {
  nres_backoff_t b;
  nres_backoff_state_t st;
  nres_rng_t rng;
  nres_verdict_t thr = nres_verdict(NRES_THROTTLED);
  static const uint32_t retries[] = { 1, 2, 64, 1025, 100000 };
  (void) state;

  nres_rng_seed(&rng, 7);
  for (size_t i = 0; i < N_INPUTS; i++) {
    nres_time_t base = nres_time_from_sec(inputs[i].seconds);
    for (size_t j = 0; j < N_INPUTS; j++) {
      nres_time_t max = nres_time_from_sec(inputs[j].seconds);
      nres_backoff_init(&b);
      b.base = base;
      b.max = max;
      b.throttled_base = base;
      if (base == NRES_TIME_INVALID || max == NRES_TIME_INVALID) {
        assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
        assert_names(nres_backoff_error(&b),
                     base == NRES_TIME_INVALID ? "backoff.base" : "backoff.max",
                     inputs[base == NRES_TIME_INVALID ? i : j].name);
        continue;
      }
      if (max < base) {
        assert_int_equal(nres_backoff_check(&b), NRES_EINVAL);
        /* A base from 2^63 ns on is what a negative number wraps to:
         * the refusal names base. */
        assert_names(nres_backoff_error(&b),
                     base >= (nres_time_t) 1 << 63 ? "backoff.base"
                                                   : "backoff.max",
                     inputs[i].name);
        continue;
      }
      for (int kind = NRES_BACKOFF_CONSTANT; kind <= NRES_BACKOFF_DECORRELATED;
           kind++) {
        for (int jit = NRES_JITTER_NONE; jit <= NRES_JITTER_DECORRELATED; jit++) {
          b.kind = (uint8_t) kind;
          b.jitter = (uint8_t) jit;
          if (nres_backoff_check(&b) != 0)
            continue;   /* decorrelated kind with jitter */
          nres_backoff_state_reset(&st);
          for (size_t r = 0; r < sizeof(retries) / sizeof(retries[0]); r++) {
            nres_time_t d = nres_backoff_next(&b, &st, retries[r], NULL, &rng);
            assert_true(d <= max);
            /* Without jitter, growth never falls below the base. */
            if (jit == NRES_JITTER_NONE && kind != NRES_BACKOFF_DECORRELATED)
              assert_true(d == nres_time_min(base, max) || d >= base);
            d = nres_backoff_next(&b, &st, retries[r], &thr, &rng);
            assert_true(d <= max);
          }
        }
      }
    }
  }
}

/* ------------------------------------------------ breaker and bulkhead */

typedef struct {
  const char *name;
  size_t offset;
} cfield_t;

static void breaker_durations_saturate_or_are_refused(void **state) {
  static const cfield_t fields[] = {
    { "breaker.window", offsetof(nres_breaker_config_t, window) },
    { "breaker.break_for", offsetof(nres_breaker_config_t, break_for) },
    { "breaker.break_max", offsetof(nres_breaker_config_t, break_max) },
  };
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_rng_t rng;
  uint32_t calls;
  (void) state;

  nres_rng_seed(&rng, 3);
  for (size_t i = 0; i < 3; i++) {
    for (size_t j = 0; j < N_INPUTS; j++) {
      nres_time_t v = nres_time_from_sec(inputs[j].seconds);
      nres_breaker_config_init(&c);
      c.break_jitter = 0;
      c.consecutive = 1;
      /* Partners that no value of the walked field can conflict with. */
      if (i == 1)
        c.break_max = NRES_TIME_NEVER;
      if (i == 2)
        c.break_for = 1;
      *(nres_time_t *) (void *) ((char *) &c + fields[i].offset) = v;
      if (v == NRES_TIME_INVALID || v == 0 ||
          (i == 0 && v < c.buckets)) {
        assert_int_equal(nres_breaker_init(&b, &c), NRES_EINVAL);
        assert_names(nres_breaker_config_error(&c), fields[i].name,
                     inputs[j].name);
        continue;
      }
      assert_null(nres_breaker_config_error(&c));
      assert_int_equal(nres_breaker_init(&b, &c), 0);
      /* One failure trips it; the break is as long as asked (capped at
       * years), never wrapped into a short one. */
      assert_int_equal(nres_breaker_record(&b, T0, 0, NRES_BREAKER_FAILURE, 0,
                                           &rng),
                       NRES_BREAKER_OPEN);
      if (i == 0) {
        nres_window_sum(&b.window, T0, &calls, NULL, NULL);
        assert_int_equal(calls, 1);
      } else {
        /* The first break is break_for, capped at break_max. */
        nres_time_t brk = i == 1 ? v : 1;
        if (brk > 1 * MS)
          assert_int_equal(nres_breaker_state(&b, T0 + 1 * MS),
                           NRES_BREAKER_OPEN);
        else
          assert_int_equal(nres_breaker_state(&b, T0 + 1 * MS),
                           NRES_BREAKER_HALF_OPEN);
        if (brk >= 400 * 86400 * SEC)
          assert_int_equal(nres_breaker_state(&b, T0 + 365 * 86400 * SEC),
                           NRES_BREAKER_OPEN);
      }
    }
  }
}

static void bulkhead_durations_saturate_or_are_refused(void **state) {
  static const cfield_t fields[] = {
    { "bulkhead.queue_timeout", offsetof(nres_bulkhead_config_t, queue_timeout) },
    { "bulkhead.poll", offsetof(nres_bulkhead_config_t, poll) },
    { "bulkhead.latency_target",
      offsetof(nres_bulkhead_config_t, latency_target) },
  };
  nres_bulkhead_config_t c;
  nres_bulkhead_t b;
  (void) state;

  for (size_t i = 0; i < 3; i++) {
    for (size_t j = 0; j < N_INPUTS; j++) {
      nres_time_t v = nres_time_from_sec(inputs[j].seconds);
      int refused;
      nres_bulkhead_config_init(&c);
      c.queue = 1;
      c.queue_timeout = 1 * SEC;
      c.poll = 1 * MS;
      c.adaptive = 1;
      c.latency_target = 1 * SEC;
      *(nres_time_t *) (void *) ((char *) &c + fields[i].offset) = v;
      refused = v == NRES_TIME_INVALID || v == 0 ||
                (i == 1 && v == NRES_TIME_NEVER);   /* would never look */
      if (refused) {
        assert_int_equal(nres_bulkhead_init(&b, &c), NRES_EINVAL);
        assert_names(nres_bulkhead_config_error(&c), fields[i].name,
                     inputs[j].name);
        continue;
      }
      assert_null(nres_bulkhead_config_error(&c));
      assert_int_equal(nres_bulkhead_init(&b, &c), 0);
      /* The adaptive limit: a completion slower than a huge target is
       * under it, so the limit does not shrink. */
      assert_int_equal(nres_bulkhead_acquire(&b, 0), 0);
      nres_bulkhead_release(&b, 1 * SEC, NRES_OK);
      if (i == 2 && v >= 1 * SEC)
        assert_true(nres_bulkhead_limit(&b) >= c.limit);
      if (i == 2 && v < 1 * SEC)
        assert_true(nres_bulkhead_limit(&b) < c.limit);
    }
  }
}

/* A queued call looks again at now + poll; one whose next look would be
 * past the end of time stops at once instead of waiting for ever (the
 * fuzz seed bulkhead_poll_saturates: a poll of 2^64 - 3 ns). */
static void queued_call_never_waits_for_ever(void **state) {
  static const nres_time_t polls[] = {
    1 * MS, (nres_time_t) 1 << 63, NRES_TIME_NEVER - 3, NRES_TIME_NEVER - 2,
  };
  nres_policy_t p;
  nres_bulkhead_t bh;
  nres_bulkhead_stats_t st;
  nres_call_t holder, queued;
  nres_action_t a, b;
  (void) state;

  for (size_t i = 0; i < sizeof(polls) / sizeof(polls[0]); i++) {
    nres_time_t wake = nres_time_add(T0, polls[i]);
    assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
    nres_bulkhead_config_init(&bh.config);
    bh.config.limit = 1;
    bh.config.queue = 1;
    bh.config.queue_timeout = NRES_TIME_NEVER;
    bh.config.poll = polls[i];
    assert_int_equal(nres_bulkhead_init(&bh, &bh.config), 0);
    p.bulkhead = &bh;
    assert_int_equal(nres_policy_build(&p), 0);
    a = nres_call_begin(&holder, &p, T0);
    assert_int_equal(a.kind, NRES_ATTEMPT);
    b = nres_call_begin(&queued, &p, T0);
    if (wake == NRES_TIME_NEVER) {
      assert_int_equal(b.kind, NRES_DONE);
      assert_int_equal(b.stop, NRES_STOP_LIMITED);
    } else {
      assert_int_equal(b.kind, NRES_WAIT);
      assert_true(b.at == wake);
      nres_call_cancel(&queued, T0);
    }
    nres_bulkhead_stats(&bh, &st);
    assert_int_equal(st.waiting, 0);   /* it left the queue either way */
    nres_call_report(&holder, a.slot, T0, nres_verdict(NRES_OK));
    nres_bulkhead_stats(&bh, &st);
    assert_int_equal(st.inflight, 0);
  }
}

/* A policy checks the shared state it points at, naming the field. */
static void build_names_fields_of_the_shared_state(void **state) {
  nres_policy_t p;
  nres_bulkhead_t bh;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.own.breaker.config.break_max = NRES_TIME_INVALID;   /* changed after init */
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_names(nres_policy_error(&p), "breaker.break_max", "INVALID");

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  nres_bulkhead_config_init(&bh.config);
  bh.config.queue = 2;
  bh.config.queue_timeout = NRES_TIME_INVALID;
  p.bulkhead = &bh;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_names(nres_policy_error(&p), "bulkhead.queue_timeout", "INVALID");

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.own.estimator.period = 0;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_names(nres_policy_error(&p), "estimator.period", "0");
}

/* ---------------------------------------------- window, estimator, rate */

static void window_and_estimator_spans_saturate_or_are_refused(void **state) {
  nres_window_t w;
  nres_estimator_t *e = test_malloc(sizeof(*e));
  uint32_t calls;
  uint64_t samples;
  (void) state;

  for (size_t j = 0; j < N_INPUTS; j++) {
    nres_time_t v = nres_time_from_sec(inputs[j].seconds);
    if (v == NRES_TIME_INVALID || v == 0) {
      assert_int_equal(nres_window_init(&w, v, 1), NRES_EINVAL);
      assert_int_equal(nres_estimator_init(e, v), NRES_EINVAL);
      continue;
    }
    assert_int_equal(nres_window_init(&w, v, 1), 0);
    nres_window_add(&w, T0, 1, 0);
    nres_window_sum(&w, T0, &calls, NULL, NULL);
    assert_int_equal(calls, 1);
    assert_int_equal(nres_estimator_init(e, v), 0);
    nres_estimator_record(e, T0, 5 * MS);
    assert_true(nres_estimator_quantile(e, T0, 0.5, &samples) > 0);
    assert_int_equal(samples, 1);
  }
  test_free(e);
}

/* The limiter's interval is 1 s / rate: a rate near 0 saturates (admits
 * nothing), never wraps to a short interval; NaN and inf are refused. */
static void rate_limiter_interval_saturates(void **state) {
  nres_ratelimit_t rl;
  nres_ratelimit_stats_t st;
  nres_time_t wait = 0;
  (void) state;

  assert_int_equal(nres_ratelimit_init(&rl, NAN, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, INFINITY, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, -1, 1), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_init(&rl, 0, 1), NRES_EINVAL);

  assert_int_equal(nres_ratelimit_init(&rl, 1e-300, 1), 0);
  assert_true(rl.interval == NRES_TIME_NEVER);
  assert_int_equal(nres_ratelimit_acquire(&rl, T0, &wait), NRES_ELIMITED);
  assert_true(wait == NRES_TIME_NEVER);
  nres_ratelimit_stats(&rl, &st);
  assert_int_equal(st.refused, 1);

  /* 2^64 ns per admission: just past what a duration holds. */
  assert_int_equal(nres_ratelimit_init(&rl, 1e9 / (2 * TWO63), 4), 0);
  assert_true(rl.interval == NRES_TIME_NEVER);
  assert_true(rl.tolerance == NRES_TIME_NEVER);

  assert_int_equal(nres_ratelimit_init(&rl, 1e300, 1), 0);
  assert_true(rl.interval == 1);
  assert_int_equal(nres_ratelimit_acquire(&rl, T0, &wait), 0);
}

/* ---------------------------------------------------------- Retry-After */

static void retry_after_saturates_never_wraps(void **state) {
  static const char *const huge[] = {
    "99999999999999999999",           /* the example */
    "18446744073709551616",           /* 2^64 */
    "18446744074",                    /* 2^64 ns in seconds, rounded up */
    "9223372037",                     /* 2^63 ns in seconds, rounded up */
    "1" "000000000000000000000000000000000000000000000000000000000000000",
  };
  static const char *const refused[] = {
    "NaN", "nan", "inf", "-inf", "-1", "1e300", "1.5", "0x10", "",
  };
  nres_time_t v;
  (void) state;

  for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
    v = 0;
    assert_int_equal(nres_http_retry_after(huge[i], strlen(huge[i]), 0, &v), 0);
    if (v != NRES_HTTP_RETRY_AFTER_MAX)
      fail_msg("Retry-After: %s gave %llu ns", huge[i], (unsigned long long) v);
  }
  assert_int_equal(nres_http_retry_after("0", 1, 0, &v), 0);
  assert_true(v == 0);
  assert_int_equal(nres_http_retry_after("1", 1, 0, &v), 0);
  assert_true(v == 1 * SEC);
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    v = 12345;
    assert_int_equal(nres_http_retry_after(refused[i], strlen(refused[i]), 0, &v),
                     NRES_EINVAL);
    assert_true(v == 12345);   /* untouched */
  }
}

/* A retry-after of any size waits at most backoff.max: through the C
 * verdict and through the binding steps' double nanoseconds. */
static void huge_retry_after_waits_at_most_max(void **state) {
  static const double ns[] = { 2 * TWO63, TWO63, 1e300, INFINITY, 0.0, 1.0 };
  nres_policy_t p;
  nres_call_t call;
  nres_step_t step;
  nres_action_t a;
  nres_verdict_t v = nres_verdict(NRES_THROTTLED);
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.jitter = NRES_JITTER_NONE;
  p.backoff.base = 1 * MS;
  p.backoff.max = 5 * SEC;
  assert_int_equal(nres_policy_build(&p), 0);

  v.flags = NRES_VF_RETRY_AFTER;
  v.retry_after = NRES_TIME_NEVER;
  a = nres_call_begin(&call, &p, T0);
  a = nres_call_report(&call, a.slot, T0, v);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at == T0 + 5 * SEC);
  nres_call_cancel(&call, T0);

  for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
    nres_time_t expect = ns[i] >= 5e9 ? 5 * SEC : (nres_time_t) ns[i];
    nres_step_begin(&call, &p, (double) T0, -1, &step);
    nres_step_report(&call, (unsigned) step.slot, (double) T0, NRES_THROTTLED,
                     0, ns[i], &step);
    if (expect == 0) {
      assert_int_equal(step.kind, NRES_ATTEMPT);
    } else {
      assert_int_equal(step.kind, NRES_WAIT);
      assert_true(step.at == (double) (T0 + expect));
    }
    nres_step_cancel(&call, (double) T0, &step);
  }
  /* NaN is no retry-after at all: the throttled backoff applies. */
  nres_step_begin(&call, &p, (double) T0, -1, &step);
  nres_step_report(&call, (unsigned) step.slot, (double) T0, NRES_THROTTLED, 0,
                   NAN, &step);
  assert_int_equal(step.kind, NRES_WAIT);
  assert_true(step.at == (double) (T0 + 1 * MS));
  nres_step_cancel(&call, (double) T0, &step);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(conversion_saturates_and_marks_nan),
    cmocka_unit_test(every_policy_duration_saturates_or_is_refused),
    cmocka_unit_test(ceiling_floor_saturates),
    cmocka_unit_test(slow_threshold_saturates),
    cmocka_unit_test(limit_wait_saturates),
    cmocka_unit_test(wrapped_negatives_are_refused_by_name),
    cmocka_unit_test(backoff_delays_stay_within_max_whatever_the_durations),
    cmocka_unit_test(breaker_durations_saturate_or_are_refused),
    cmocka_unit_test(bulkhead_durations_saturate_or_are_refused),
    cmocka_unit_test(queued_call_never_waits_for_ever),
    cmocka_unit_test(build_names_fields_of_the_shared_state),
    cmocka_unit_test(window_and_estimator_spans_saturate_or_are_refused),
    cmocka_unit_test(rate_limiter_interval_saturates),
    cmocka_unit_test(retry_after_saturates_never_wraps),
    cmocka_unit_test(huge_retry_after_waits_at_most_max),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

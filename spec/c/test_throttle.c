/* SPDX-License-Identifier: MIT */
/* test_throttle.c - the client-side throttle (core/throttle.c) on a
 * virtual clock, alone and inside the executor.
 *
 * The probability formula max(0, (requests - k * accepts) / (requests + 1))
 * on known counts; counts leaving the window; what is an accept (OK,
 * transient errors, timeouts) and what is not (THROTTLED); the steady
 * state it exists for (sent ~ k x accepted when the dependency accepts a
 * fixed share); argument checks; the executor's hook (a refused first
 * attempt stops THROTTLED, a refused retry stops ATTEMPTS with its token
 * given back, no allocation; a first admission's one-word test sees the
 * odds rise at the refresh; a refused call with tries left and a backoff
 * waits and asks again); a plain error faster than fast_failure x the
 * p50 of successes is no accept; room (k grows once the dependency has refused
 * nothing for 0.8 s); the dip (k 0.1 lower for 30 ms after a refusal of
 * the dependency); and 2 threads sharing one throttle (run this one
 * under TSan too).
 */
#include <math.h>

#include "nres_test.h"

#define T0 NRES_SEC   /* virtual clocks start at 1 s, not at the epoch */

static nres_throttle_stats_t stats(const nres_throttle_t *t, nres_time_t now) {
  nres_throttle_stats_t st;
  nres_throttle_stats(t, now, &st);
  return st;
}

static void probability_follows_the_formula(void **state) {
  nres_throttle_t t;
  int i;

  (void) state;
  assert_int_equal(nres_throttle_init(&t, 2, 10 * NRES_SEC, 10), 0);
  assert_true(nres_throttle_probability(&t, T0) == 0);
  /* 10 requests, 3 accepted: (10 - 2 * 3) / 11, once the dip is over
   * (30 ms after the last refusal; until then k is 1.9). */
  for (i = 0; i < 10; i++)
    nres_throttle_record(&t, T0, i < 3);
  assert_true(fabs(nres_throttle_probability(&t, T0 + 30 * NRES_MSEC) -
                   4.0 / 11) < 1e-12);
  assert_true(fabs(nres_throttle_probability(&t, T0) - 4.3 / 11) < 1e-12);
  assert_int_equal(stats(&t, T0).requests, 10);
  assert_int_equal(stats(&t, T0).accepts, 3);
  /* 5 more accepted: 15 - 2 * 8 < 0, nothing refused. */
  for (i = 0; i < 5; i++)
    nres_throttle_record(&t, T0, 1);
  assert_true(nres_throttle_probability(&t, T0 + 30 * NRES_MSEC) == 0);
}

/* The dip: for 30 ms after each refusal of the dependency k is 0.1 lower
 * (its queue is full now); a refusal here (acquire) is not one. */
static void k_dips_while_the_dependency_refuses(void **state) {
  nres_throttle_t t;
  int i;

  (void) state;
  assert_int_equal(nres_throttle_init(&t, 1.03, 10 * NRES_SEC, 10), 0);
  for (i = 0; i < 100; i++)
    nres_throttle_record(&t, T0, 1);
  /* No refusal yet: 100 - 1.03 x 100 < 0. */
  assert_true(nres_throttle_probability(&t, T0) == 0);
  /* One refused at 1 s: 101 - 1.03 x 100 < 0, but 101 - 0.93 x 100 = 8. */
  nres_throttle_record(&t, T0 + NRES_SEC, 0);
  assert_true(fabs(nres_throttle_probability(&t, T0 + NRES_SEC) - 8.0 / 102) < 1e-12);
  assert_true(fabs(nres_throttle_probability(&t, T0 + NRES_SEC + 29 * NRES_MSEC) -
                   8.0 / 102) < 1e-12);
  assert_true(nres_throttle_probability(&t, T0 + NRES_SEC + 30 * NRES_MSEC) == 0);
  /* A refusal stamped by a clock ahead of this one: another process's,
   * a few ms ahead, dips; a stamp seconds ahead (a region file kept from
   * before a reboot) is not a refusal now, and never a lasting dip (the
   * window, read before the refusal's slice, holds the 100 accepts:
   * 100 - 0.93 x 100 = 7 with the dip, nothing without). */
  assert_true(fabs(nres_throttle_probability(&t, T0 + NRES_SEC - 10 * NRES_MSEC) -
                   7.0 / 101) < 1e-12);
  assert_true(nres_throttle_probability(&t, T0 + NRES_SEC - 31 * NRES_MSEC) == 0);
}

static void nothing_is_refused_while_accepts_keep_up(void **state) {
  nres_throttle_t t;
  nres_rng_t rng;
  int i;

  (void) state;
  nres_rng_seed(&rng, 1);
  assert_int_equal(nres_throttle_init(&t, 1.2, NRES_SEC, 8), 0);
  /* 5 % refused by the dependency: requests <= 1.1 x accepts, so even
   * k 1.2 dipped to 1.1 after each refusal refuses nothing. */
  for (i = 0; i < 1000; i++) {
    nres_time_t now = T0 + (nres_time_t) i * NRES_MSEC / 2;
    assert_int_equal(nres_throttle_acquire(&t, now, &rng), 0);
    nres_throttle_record(&t, now, i % 20 != 0);
  }
  assert_int_equal(stats(&t, T0 + NRES_SEC / 2).refused, 0);
}

static void counts_leave_the_window(void **state) {
  nres_throttle_t t;
  int i;

  (void) state;
  assert_int_equal(nres_throttle_init(&t, 1, NRES_SEC, 4), 0);
  for (i = 0; i < 100; i++)
    nres_throttle_record(&t, T0, 0);
  assert_true(nres_throttle_probability(&t, T0) > 0.98);
  assert_true(nres_throttle_probability(&t, T0 + NRES_SEC / 2) > 0.98);
  /* A window and a bucket later the refusals are gone. */
  assert_true(nres_throttle_probability(&t, T0 + NRES_SEC + NRES_SEC / 4) == 0);
  assert_int_equal(stats(&t, T0 + 2 * NRES_SEC).requests, 0);
}

/* Through the executor: which verdicts are accepts. */
static void only_throttled_answers_are_no_accept(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_verdict_t v;
  static const int kinds[] = { NRES_OK, NRES_TRANSIENT, NRES_PERMANENT,
                               NRES_THROTTLED };
  unsigned i;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempts = 1;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 10 * NRES_SEC, 10), 0);
  p.throttle = &p.own.throttle;
  assert_int_equal(nres_policy_build(&p), 0);
  for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    a = nres_call_begin(&call, &p, T0);
    assert_int_equal(a.kind, NRES_ATTEMPT);
    v = nres_verdict(kinds[i]);
    nres_call_report(&call, a.slot, T0, v);
  }
  /* A timeout is the dependency answering late, not refusing. */
  a = nres_call_begin(&call, &p, T0);
  v = nres_verdict(NRES_TRANSIENT);
  v.flags = NRES_VF_TIMEOUT;
  nres_call_report(&call, a.slot, T0, v);
  /* A canceled call is nobody's answer. */
  a = nres_call_begin(&call, &p, T0);
  nres_call_cancel(&call, T0);
  assert_int_equal(stats(p.throttle, T0).requests, 5);
  assert_int_equal(stats(p.throttle, T0).accepts, 4);
}

/* throttle.fast_failure: a transient answer faster than that share of
 * the p50 of successes is a refusal that does not say so (a dependency
 * shedding load with a plain error answers at once); one that takes the
 * usual latency (an outage, a brownout) is the dependency answering. */
static void fast_plain_errors_are_no_accept(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_time_t now = T0;
  int i;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempts = 1;
  p.min_samples = 10;
  nres_estimator_init(&p.own.estimator, 30 * NRES_SEC);
  p.estimator = &p.own.estimator;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 10 * NRES_SEC, 10), 0);
  p.own.throttle.fast_failure = 0.25;
  p.throttle = &p.own.throttle;
  assert_int_equal(nres_policy_build(&p), 0);
  /* 100 successes of 20 ms: p50 ~20 ms, the bound ~5 ms. */
  for (i = 0; i < 100; i++, now += 20 * NRES_MSEC) {
    a = nres_call_begin(&call, &p, now);
    nres_call_report(&call, a.slot, now + 20 * NRES_MSEC,
                     nres_verdict(NRES_OK));
  }
  now += NRES_SEC;   /* past the quantile cache's refresh */
  /* A plain error at once: refused. */
  a = nres_call_begin(&call, &p, now);
  nres_call_report(&call, a.slot, now, nres_verdict(NRES_TRANSIENT));
  assert_int_equal(stats(p.throttle, now).requests, 101);
  assert_int_equal(stats(p.throttle, now).accepts, 100);
  /* A plain error after the usual latency: answered. */
  a = nres_call_begin(&call, &p, now);
  nres_call_report(&call, a.slot, now + 20 * NRES_MSEC,
                   nres_verdict(NRES_TRANSIENT));
  assert_int_equal(stats(p.throttle, now + 20 * NRES_MSEC).accepts, 101);
  /* With a try left, a fast one waits the throttled backoff (1 s), a slow
   * one the usual (1 ms). */
  p.attempts = 2;
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.jitter = NRES_JITTER_NONE;
  p.backoff.base = NRES_MSEC;
  p.backoff.max = 2 * NRES_SEC;
  p.backoff.throttled_base = NRES_SEC;
  assert_int_equal(nres_policy_build(&p), 0);
  now += NRES_SEC;
  a = nres_call_begin(&call, &p, now);
  a = nres_call_report(&call, a.slot, now, nres_verdict(NRES_TRANSIENT));
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at >= now + NRES_SEC);
  a = nres_call_begin(&call, &p, now);
  a = nres_call_report(&call, a.slot, now + 20 * NRES_MSEC,
                       nres_verdict(NRES_TRANSIENT));
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at <= now + 21 * NRES_MSEC);
  /* fast_failure must be a fraction below 1. */
  p.own.throttle.fast_failure = 1;
  assert_non_null(nres_policy_error(&p));
}

/* A call's first admission reads one word, `due`: the refresh time while
 * the odds are 0, 0 while they are above 0. So odds that rise are seen
 * by the first call at or past the refresh, as when it read next and
 * odds, and once they are above 0 every first attempt is drawn for. */
static void first_admission_sees_rising_odds_at_the_refresh(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_throttle_t *t;
  nres_time_t now;
  int i;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempts = 1;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 10 * NRES_SEC, 10), 0);
  p.throttle = t = &p.own.throttle;
  assert_int_equal(nres_policy_build(&p), 0);
  assert_int_equal(atomic_load(&t->due), 0);   /* due at once: refresh */
  /* 10 throttled answers within one refresh period: the cached odds
   * stay 0 and `due` the refresh time. */
  for (i = 0; i < 10; i++) {
    now = T0 + (nres_time_t) i * NRES_MSEC;
    a = nres_call_begin(&call, &p, now);
    assert_int_equal(a.kind, NRES_ATTEMPT);
    assert_int_equal(atomic_load(&t->odds), 0);
    assert_int_equal(atomic_load(&t->due), T0 + 10 * NRES_MSEC);
    nres_call_report(&call, a.slot, now, nres_verdict(NRES_THROTTLED));
  }
  /* The first call at the refresh sees 10 requests, none accepted. */
  now = T0 + 10 * NRES_MSEC;
  a = nres_call_begin(&call, &p, now);
  assert_int_equal(atomic_load(&t->odds),
                   (uint64_t) ldexp(10.0 / 11, 32));
  assert_int_equal(atomic_load(&t->due), 0);
  if (a.kind == NRES_ATTEMPT)
    nres_call_report(&call, a.slot, now, nres_verdict(NRES_OK));
  /* Past the window the odds are 0 again, and `due` the next refresh. */
  now = T0 + 11 * NRES_SEC;
  a = nres_call_begin(&call, &p, now);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_int_equal(atomic_load(&t->odds), 0);
  assert_int_equal(atomic_load(&t->due), now + 10 * NRES_MSEC);
  nres_call_report(&call, a.slot, now, nres_verdict(NRES_OK));
}

/* A dependency that serves 500 calls/s of 2000 and refuses the rest:
 * what reaches it settles near k x what it accepts, and the refusals are
 * counted and stop calls. */
static void sends_about_k_times_what_is_accepted(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_counters_t c;
  uint64_t sent = 0, accepted = 0;
  int i, taken = 0;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempts = 1;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1.1, NRES_SEC, 8), 0);
  p.throttle = &p.own.throttle;
  assert_int_equal(nres_policy_build(&p), 0);
  for (i = 0; i < 40000; i++) {   /* 20 s at 2000 calls/s */
    nres_time_t now = T0 + (nres_time_t) i * NRES_MSEC / 2;
    if (i % 20 == 0)   /* 5 per 10 ms, the rest refused */
      taken = 0;
    a = nres_call_begin(&call, &p, now);
    if (a.kind != NRES_ATTEMPT) {
      assert_int_equal(call.stop, NRES_STOP_THROTTLED);
      continue;
    }
    int take = taken < 5;
    taken += take;
    if (i >= 4000) {   /* after the first 2 s */
      sent++;
      accepted += (uint64_t) take;
    }
    nres_call_report(&call, a.slot, now,
                     nres_verdict(take ? NRES_OK : NRES_THROTTLED));
  }
  /* No queue: a 10 ms slot sent fewer than 5 leaves some unused (~73 %). */
  assert_true(accepted > 36000 / 4 * 0.65);
  assert_true((double) sent > (double) accepted * 1.05);
  assert_true((double) sent < (double) accepted * 1.15);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.stops[NRES_STOP_THROTTLED], c.rejects[NRES_REJECT_THROTTLE]);
  assert_true(c.stops[NRES_STOP_THROTTLED] > 20000);
  assert_int_equal(stats(p.throttle, T0).refused, c.rejects[NRES_REJECT_THROTTLE]);
}

/* A policy with a throttle that refuses everything it may: a refused
 * first attempt or retry stops THROTTLED, a retry with its budget token
 * back and the last attempt's verdict kept. (A refused retry once stopped
 * ATTEMPTS with fewer attempts than the policy's: fuzz_policy's invariant
 * "stop ATTEMPTS => attempts == policy attempts" caught it.) */
static void refused_retry_ends_throttled_locally(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_budget_stats_t bs;
  int i, retry_refused = 0, first_refused = 0;
  uint64_t retries = 0;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.breaker = NULL;
  p.backoff.kind = NRES_BACKOFF_NONE;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 10 * NRES_SEC, 10), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  test_count_allocations();
  for (i = 0; i < 200; i++) {
    a = nres_call_begin(&call, &p, T0 + (nres_time_t) i * NRES_MSEC);
    while (a.kind == NRES_ATTEMPT)
      a = nres_call_report(&call, a.slot, T0 + (nres_time_t) i * NRES_MSEC,
                           nres_verdict(NRES_THROTTLED));
    assert_int_equal(a.kind, NRES_DONE);
    retries += call.retries;
    if (call.stop == NRES_STOP_THROTTLED && call.attempts == 0) {
      first_refused++;
    } else if (call.stop == NRES_STOP_THROTTLED) {
      assert_true(call.attempts < 3);
      assert_int_equal(call.last.kind, NRES_THROTTLED);   /* its answer */
      retry_refused++;
    } else if (call.stop == NRES_STOP_ATTEMPTS) {
      assert_int_equal(call.attempts, 3);
    }
  }
  assert_int_equal(test_alloc_calls, 0);
  assert_true(first_refused > 0);
  assert_true(retry_refused > 0);
  /* A refused retry's token went back: spent = retries that ran. */
  nres_budget_stats(p.budget, &bs);
  assert_int_equal(bs.spent, retries);
}

/* Room: k grows by 5 per second once the dependency has refused nothing
 * for 0.8 s; a refusal here (acquire) is not the dependency's and does not
 * end the quiet, a refusal it said (record, not accepted) does. */
static void room_grows_k_after_a_quiet_spell(void **state) {
  nres_throttle_t t;
  nres_rng_t rng;
  int i;

  (void) state;
  nres_rng_seed(&rng, 1);
  assert_int_equal(nres_throttle_init(&t, 1, 100 * NRES_SEC, 10), 0);
  for (i = 0; i < 10; i++)   /* 10 requests, 3 accepted, at T0 */
    nres_throttle_record(&t, T0, i < 3);
  assert_true(fabs(nres_throttle_probability(&t, T0 + 30 * NRES_MSEC) - 7.0 / 11) < 1e-12);
  assert_true(fabs(nres_throttle_probability(&t, T0 + 800 * NRES_MSEC) -
                   7.0 / 11) < 1e-12);
  /* Refused here at 0.9 s: one request more, not accepted, quiet goes on. */
  while (nres_throttle_acquire(&t, T0 + 900 * NRES_MSEC, &rng) == 0)
    nres_throttle_record(&t, T0 + 900 * NRES_MSEC, 1);
  /* At 1 s: k = 1 + 5 x 0.2 = 2. */
  {
    nres_throttle_stats_t st = stats(&t, T0 + NRES_SEC);
    double want = ((double) st.requests - 2.0 * st.accepts) / (st.requests + 1);
    assert_true(fabs(st.probability - (want > 0 ? want : 0)) < 1e-9);
    assert_true(st.probability < nres_throttle_probability(&t, T0 + 900 * NRES_MSEC));
  }
  /* At 1.8 s k = 6: nothing refused. */
  assert_true(nres_throttle_probability(&t, T0 + 1800 * NRES_MSEC) == 0);
  /* A refusal the dependency said starts the quiet again. */
  nres_throttle_record(&t, T0 + 1800 * NRES_MSEC, 0);
  assert_true(nres_throttle_probability(&t, T0 + 1900 * NRES_MSEC) > 0.5);
}

/* A call the throttle refuses, with tries left and a backoff, waits a
 * throttled backoff and asks again (call.deferred counts the waits) instead
 * of failing; its tries are bounded by attempts (two waits, then the third
 * refusal stops it THROTTLED), it spends no budget token and allocates
 * nothing, and only its end counts as a rejection. */
static void refused_call_waits_and_asks_again(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_counters_t c;
  nres_budget_stats_t bs;
  nres_time_t now = T0;
  int i, waits = 0;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.breaker = NULL;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 100 * NRES_SEC, 10), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  for (i = 0; i < 1000; i++)   /* odds 1000/1001 */
    nres_throttle_record(p.throttle, T0, 0);
  test_count_allocations();
  a = nres_call_begin(&call, &p, now);
  while (a.kind == NRES_WAIT) {
    assert_int_equal(call.attempts, 0);
    assert_true(a.at > now && a.at <= now + 2 * NRES_SEC);   /* 1 s, doubling */
    waits++;
    assert_int_equal(call.deferred, waits);
    now = a.at;
    a = nres_call_resume(&call, now);
  }
  assert_int_equal(test_alloc_calls, 0);
  assert_int_equal(waits, 2);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(call.stop, NRES_STOP_THROTTLED);
  nres_budget_stats(p.budget, &bs);
  assert_int_equal(bs.spent, 0);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.rejects[NRES_REJECT_THROTTLE], 1);
  assert_int_equal(stats(p.throttle, now).refused, 3);
}

/* With throttle_fail the first local refusal ends the call at once,
 * THROTTLED, with no wait: fail fast (throttle.wait = false in Lua). */
static void throttle_fail_ends_the_call_at_once(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_counters_t c;
  int i;

  (void) state;
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.breaker = NULL;
  p.throttle_fail = 1;
  assert_int_equal(nres_throttle_init(&p.own.throttle, 1, 100 * NRES_SEC, 10), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  for (i = 0; i < 1000; i++)   /* odds 1000/1001: the seed's draw refuses */
    nres_throttle_record(p.throttle, T0, 0);
  a = nres_call_begin(&call, &p, T0);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(call.stop, NRES_STOP_THROTTLED);
  assert_int_equal(call.deferred, 0);
  assert_int_equal(call.attempts, 0);
  nres_policy_counters(&p, &c);
  assert_int_equal(c.rejects[NRES_REJECT_THROTTLE], 1);
  assert_int_equal(stats(p.throttle, T0).refused, 1);
}

static void bad_arguments_are_refused(void **state) {
  nres_throttle_t t;
  nres_policy_t p;
  nres_rng_t rng;

  (void) state;
  assert_int_equal(nres_throttle_init(NULL, 1.1, NRES_SEC, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 0.9, NRES_SEC, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, NAN, NRES_SEC, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, INFINITY, NRES_SEC, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 1.1, 0, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 1.1, NRES_TIME_INVALID, 8), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 1.1, NRES_SEC, 0), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 1.1, NRES_SEC, 17), NRES_EINVAL);
  assert_int_equal(nres_throttle_init(&t, 1.1, 4, 8), NRES_EINVAL);
  assert_string_equal(nres_throttle_error(0.5, NRES_SEC, 8),
                      "throttle.k: must be a finite number from 1 to 1000");
  assert_string_equal(nres_throttle_error(1.1, 0, 8), "throttle.window: must be > 0");
  assert_string_equal(nres_throttle_error(1.1, NRES_SEC, 20), "throttle.buckets: must be 1..16");
  assert_null(nres_throttle_error(1.1, NRES_SEC, 8));
  assert_int_equal(nres_throttle_init(&t, 1.1, NRES_SEC, 8), 0);
  nres_rng_seed(&rng, 1);
  assert_int_equal(nres_throttle_acquire(NULL, T0, &rng), NRES_EINVAL);
  assert_int_equal(nres_throttle_acquire(&t, T0, NULL), NRES_EINVAL);
  /* A policy pointing at a broken throttle is refused, naming it. */
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.own.throttle.k = 0.5;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  assert_string_equal(nres_policy_error(&p),
                      "throttle.k: must be a finite number from 1 to 1000");
}

/* Two threads on one throttle, every answer a refusal: the counts add up
 * (TSan: no race on the shared words). */
typedef struct {
  nres_throttle_t *t;
  _Atomic nres_time_t *clock;
  uint64_t seed;
  unsigned refused;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  nres_rng_t rng;
  int i;

  nres_rng_seed(&rng, w->seed);
  for (i = 0; i < 20000; i++) {
    nres_time_t now = atomic_fetch_add(w->clock, NRES_USEC * 50);
    if (nres_throttle_acquire(w->t, now, &rng) != 0) {
      w->refused++;
      continue;
    }
    nres_throttle_record(w->t, now, 0);
  }
  return NULL;
}

static void two_threads_share_one_throttle(void **state) {
  nres_throttle_t t;
  _Atomic nres_time_t clock = T0;
  worker_t w[2] = { { &t, &clock, 1, 0 }, { &t, &clock, 2, 0 } };
  pthread_t th[2];
  int i;

  (void) state;
  assert_int_equal(nres_throttle_init(&t, 1.5, NRES_SEC / 2, 8), 0);
  for (i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, worker, &w[i]), 0);
  for (i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(stats(&t, clock).refused, w[0].refused + w[1].refused);
  assert_true(w[0].refused > 0 && w[1].refused > 0);
  assert_true(w[0].refused + w[1].refused > 40000 * 0.9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(probability_follows_the_formula),
    cmocka_unit_test(nothing_is_refused_while_accepts_keep_up),
    cmocka_unit_test(counts_leave_the_window),
    cmocka_unit_test(only_throttled_answers_are_no_accept),
    cmocka_unit_test(first_admission_sees_rising_odds_at_the_refresh),
    cmocka_unit_test(sends_about_k_times_what_is_accepted),
    cmocka_unit_test(refused_retry_ends_throttled_locally),
    cmocka_unit_test(room_grows_k_after_a_quiet_spell),
    cmocka_unit_test(k_dips_while_the_dependency_refuses),
    cmocka_unit_test(fast_plain_errors_are_no_accept),
    cmocka_unit_test(refused_call_waits_and_asks_again),
    cmocka_unit_test(throttle_fail_ends_the_call_at_once),
    cmocka_unit_test(bad_arguments_are_refused),
    cmocka_unit_test(two_threads_share_one_throttle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_shadow.c - a candidate policy in the shadow of a live one
 * (nres_policy_shadow), on a virtual clock.
 *
 * The main test runs one fixed-seed outcome sequence through a live
 * policy A with candidate B in its shadow, and through a live copy of B:
 * the shadow's counters (refusals by reason, stops, retries, failures)
 * equal the live copy's. The others check bad input and that the live
 * calls do not change.
 */
#include <string.h>

#include "nres_test.h"

#define MS NRES_MSEC

/* Fixed-seed outcomes: attempt `n` of call `i` at `now` fails while the
 * dependency is down (1 s to 2.5 s and 5 s to 5.4 s), else with odds 35 %
 * from a hash of (seed, i, n) - the same answer whichever policy asks. */
static nres_verdict_t outcome(uint64_t seed, unsigned i, unsigned n,
                              nres_time_t now) {
  uint64_t x = seed ^ ((uint64_t) i << 20) ^ n;

  if ((now >= 1000 * MS && now < 2500 * MS) ||
      (now >= 5000 * MS && now < 5400 * MS))
    return nres_verdict(NRES_TRANSIENT);
  x += 0x9e3779b97f4a7c15ull;   /* splitmix64 */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return nres_verdict(x % 100 < 35 ? NRES_TRANSIENT : NRES_OK);
}

/* Call i on p from `start`, each attempt taking 2 ms; its stop. */
static int drive(nres_policy_t *p, uint64_t seed, unsigned i,
                 nres_time_t start) {
  nres_call_t call;
  nres_time_t now = start;
  nres_action_t a = nres_call_begin(&call, p, now);

  while (a.kind != NRES_DONE) {
    if (a.kind == NRES_ATTEMPT) {
      now += 2 * MS;
      a = nres_call_report(&call, a.slot, now, outcome(seed, i, a.attempt, now));
    } else {
      now = a.at;
      a = nres_call_resume(&call, now);
    }
  }
  return a.stop;
}

/* The candidate: 3 attempts 10 ms apart, a breaker open 300 ms after 5
 * failures in a row, a budget of 20 % retries. */
static void candidate(nres_policy_t *p, nres_breaker_t *br) {
  nres_breaker_config_t cfg;

  assert_int_equal(nres_policy_init(p, NRES_PRESET_TRIVIAL), 0);
  p->attempts = 3;
  p->telemetry = 1;
  p->backoff.kind = NRES_BACKOFF_CONSTANT;
  p->backoff.base = 10 * MS;
  p->backoff.max = 10 * MS;
  nres_breaker_config_init(&cfg);
  cfg.consecutive = 5;
  cfg.break_for = 300 * MS;
  cfg.break_jitter = 0;
  cfg.success_threshold = 1;
  assert_int_equal(nres_breaker_init(br, &cfg), 0);
  p->breaker = br;
  assert_int_equal(nres_budget_init(&p->own.budget, 0.2, 0.5, 4), 0);
  p->budget = &p->own.budget;
  assert_int_equal(nres_policy_build(p), 0);
}

/* The live policy: retries as often and as soon, nothing refuses. */
static void live(nres_policy_t *p, unsigned attempts) {
  assert_int_equal(nres_policy_init(p, NRES_PRESET_TRIVIAL), 0);
  p->attempts = attempts;
  p->telemetry = 1;
  p->backoff.kind = NRES_BACKOFF_CONSTANT;
  p->backoff.base = 10 * MS;
  p->backoff.max = 10 * MS;
  assert_int_equal(nres_policy_build(p), 0);
}

static nres_counters_t counters(const nres_policy_t *p) {
  nres_counters_t c;
  nres_policy_counters(p, &c);
  return c;
}

static void run_calls(nres_policy_t *p, uint64_t seed, unsigned calls) {
  unsigned i;

  for (i = 0; i < calls; i++)
    drive(p, seed, i, (nres_time_t) i * 40 * MS);
}

static void shadow_refuses_what_a_live_copy_refuses(void **state) {
  nres_policy_t a, b, bl;
  nres_breaker_t bbr, blbr;
  nres_counters_t s, l;
  uint64_t seed;
  unsigned i;
  (void) state;

  for (seed = 1; seed <= 3; seed++) {
    live(&a, 3);
    candidate(&b, &bbr);
    candidate(&bl, &blbr);
    assert_int_equal(nres_policy_shadow(&a, &b), 0);
    run_calls(&a, seed, 200);
    run_calls(&bl, seed, 200);
    s = counters(&b);
    l = counters(&bl);
    assert_true(l.rejects[NRES_REJECT_BREAKER] > 0);   /* the test bites */
    assert_true(l.rejects[NRES_REJECT_BUDGET] > 0);
    for (i = 0; i < NRES_REJECT_COUNT; i++)
      assert_int_equal(s.rejects[i], l.rejects[i]);
    for (i = 0; i < NRES_STOP_COUNT; i++)
      assert_int_equal(s.stops[i], l.stops[i]);
    for (i = 0; i < NRES_VERDICT_COUNT; i++)
      assert_int_equal(s.verdicts[i], l.verdicts[i]);
    assert_int_equal(s.calls, l.calls);
    assert_int_equal(s.retries, l.retries);
    assert_int_equal(s.class_rejects[NRES_CLASS_DEFAULT],
                     l.class_rejects[NRES_CLASS_DEFAULT]);
    /* the live policy refused nothing: it acted on none of it */
    assert_int_equal(counters(&a).rejects[NRES_REJECT_BREAKER], 0);
    assert_int_equal(counters(&a).calls, 200);
  }
}

/* Refusals of a rate limiter (no wait allowed) too: 20 calls a second
 * against 12 allowed, every retry asking again. */
static void shadow_rate_refusals_match_a_live_copy(void **state) {
  nres_policy_t a, b, bl;
  nres_breaker_t bbr, blbr;
  nres_ratelimit_t brl, blrl;
  nres_counters_t s, l;
  unsigned i;
  (void) state;

  live(&a, 3);
  candidate(&b, &bbr);
  candidate(&bl, &blbr);
  assert_int_equal(nres_ratelimit_init(&brl, 12, 2), 0);
  assert_int_equal(nres_ratelimit_init(&blrl, 12, 2), 0);
  b.ratelimit = &brl;
  bl.ratelimit = &blrl;
  assert_int_equal(nres_policy_build(&b), 0);
  assert_int_equal(nres_policy_build(&bl), 0);
  assert_int_equal(nres_policy_shadow(&a, &b), 0);
  for (i = 0; i < 200; i++) {
    drive(&a, 5, i, (nres_time_t) i * 50 * MS);
    drive(&bl, 5, i, (nres_time_t) i * 50 * MS);
  }
  s = counters(&b);
  l = counters(&bl);
  assert_true(l.rejects[NRES_REJECT_RATE] > 0);
  for (i = 0; i < NRES_REJECT_COUNT; i++)
    assert_int_equal(s.rejects[i], l.rejects[i]);
  for (i = 0; i < NRES_STOP_COUNT; i++)
    assert_int_equal(s.stops[i], l.stops[i]);
  assert_int_equal(s.retries, l.retries);
}

/* A shadow changes nothing the live calls do: the same stops with and
 * without it, and it allocates nothing. */
static void live_calls_are_unchanged(void **state) {
  nres_policy_t a, plain, b;
  nres_breaker_t bbr;
  unsigned i;
  (void) state;

  live(&a, 3);
  live(&plain, 3);
  candidate(&b, &bbr);
  assert_int_equal(nres_policy_shadow(&a, &b), 0);
  test_count_allocations();
  for (i = 0; i < 200; i++)
    assert_int_equal(drive(&a, 7, i, (nres_time_t) i * 40 * MS),
                     drive(&plain, 7, i, (nres_time_t) i * 40 * MS));
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
  assert_int_equal(counters(&b).calls, 200);
  /* detached, the candidate counts no more */
  assert_int_equal(nres_policy_shadow(&a, NULL), 0);
  drive(&a, 7, 0, 10000 * MS);
  assert_int_equal(counters(&b).calls, 200);
}

/* A passthrough policy (preset none) shadowed takes the general way. */
static void passthrough_policy_can_be_shadowed(void **state) {
  nres_policy_t a, b;
  nres_breaker_t bbr;
  (void) state;

  assert_int_equal(nres_policy_init(&a, NRES_PRESET_NONE), 0);
  assert_int_equal(nres_policy_build(&a), 0);
  candidate(&b, &bbr);
  assert_int_equal(nres_policy_shadow(&a, &b), 0);
  drive(&a, 3, 0, 1200 * MS);   /* down: one attempt, transient */
  assert_int_equal(counters(&b).verdicts[NRES_TRANSIENT], 1);
  /* A's one attempt ended the call: the candidate counts A's stop */
  assert_int_equal(counters(&b).stops[NRES_STOP_ATTEMPTS], 1);
}

static void bad_candidates_are_refused_by_name(void **state) {
  nres_policy_t a, b, c, unbuilt;
  nres_breaker_t bbr, cbr;
  (void) state;

  live(&a, 3);
  candidate(&b, &bbr);
  candidate(&c, &cbr);
  assert_int_equal(nres_policy_shadow(NULL, &b), NRES_EINVAL);
  assert_int_equal(nres_policy_shadow(&a, &a), NRES_EINVAL);
  assert_null(a.shadow);   /* left as it was, still usable */
  assert_int_equal(drive(&a, 1, 0, 0), NRES_STOP_OK);
  a.shadow = &a;
  assert_string_equal(nres_policy_error(&a),
                      "shadow: expected another policy, got the policy itself");
  a.shadow = NULL;

  memset(&unbuilt, 0, sizeof(unbuilt));   /* not a policy: never built */
  assert_int_equal(nres_policy_shadow(&a, &unbuilt), NRES_EINVAL);
  a.shadow = &unbuilt;
  assert_string_equal(nres_policy_error(&a),
                      "shadow: expected a built policy, got one not built");
  a.shadow = NULL;

  assert_int_equal(nres_policy_shadow(&b, &c), 0);   /* b is shadowed */
  assert_int_equal(nres_policy_shadow(&a, &b), NRES_EINVAL);
  a.shadow = &b;
  assert_string_equal(
      nres_policy_error(&a),
      "shadow: expected a policy without a shadow, got one with its own");
  a.shadow = NULL;
  assert_int_equal(nres_policy_build(&a), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(shadow_refuses_what_a_live_copy_refuses),
    cmocka_unit_test(shadow_rate_refusals_match_a_live_copy),
    cmocka_unit_test(live_calls_are_unchanged),
    cmocka_unit_test(passthrough_policy_can_be_shadowed),
    cmocka_unit_test(bad_candidates_are_refused_by_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_call.c - the flat executor's state machine, on a virtual clock.
 *
 * Each test drives nres_call_begin/report/resume/cancel by hand, as a
 * driver would, and checks the actions, the stop reason, the attempt log,
 * the permits given back and the counters. No real time passes.
 */
#include <string.h>

#include "nres_test.h"

#define MS NRES_MSEC
#define SEC NRES_SEC

static nres_verdict_t ok(void) { return nres_verdict(NRES_OK); }
static nres_verdict_t transient(void) { return nres_verdict(NRES_TRANSIENT); }

static nres_policy_t *trivial(nres_policy_t *p) {
  assert_int_equal(nres_policy_init(p, NRES_PRESET_TRIVIAL), 0);
  return p;
}

static void build(nres_policy_t *p) {
  assert_int_equal(nres_policy_build(p), 0);
}

/* Attach a breaker tripping after `consecutive` failures, open for
 * break_for without jitter, closed again by one probe success. */
static void use_breaker(nres_policy_t *p, nres_breaker_t *br,
                        uint32_t consecutive, nres_time_t break_for) {
  nres_breaker_config_t cfg;
  nres_breaker_config_init(&cfg);
  cfg.consecutive = consecutive;
  cfg.break_for = break_for;
  cfg.break_jitter = 0;
  cfg.success_threshold = 1;
  assert_int_equal(nres_breaker_init(br, &cfg), 0);
  p->breaker = br;
}

static nres_counters_t counters(const nres_policy_t *p) {
  nres_counters_t c;
  nres_policy_counters(p, &c);
  return c;
}

static void passthrough_is_one_attempt_without_bookkeeping(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_NONE), 0);
  build(&p);
  a = nres_call_begin(&call, &p, 5);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_int_equal(a.attempt, 1);
  assert_true(a.at == NRES_TIME_NEVER);
  a = nres_call_report(&call, a.slot, 7, transient());
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(counters(&p).calls, 0);   /* telemetry off */
  a = nres_call_begin(&call, &p, 9);
  a = nres_call_report(&call, a.slot, 9, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_int_equal(nres_stop_error(call.stop), 0);
}

static void trivial_retries_at_once_until_ok(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_counters_t c;
  (void) state;

  build(trivial(&p));
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_int_equal(a.attempt, 1);
  a = nres_call_report(&call, a.slot, 1, transient());
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_int_equal(a.attempt, 2);
  a = nres_call_report(&call, a.slot, 2, transient());
  assert_int_equal(a.attempt, 3);
  a = nres_call_report(&call, a.slot, 3, ok());
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_int_equal(call.attempts, 3);
  assert_int_equal(call.retries, 2);
  c = counters(&p);
  assert_int_equal(c.calls, 1);
  assert_int_equal(c.attempts, 3);
  assert_int_equal(c.retries, 2);
  assert_int_equal(c.verdicts[NRES_TRANSIENT], 2);
  assert_int_equal(c.verdicts[NRES_OK], 1);
  assert_int_equal(c.stops[NRES_STOP_OK], 1);
}

static void attempts_exhausted_after_the_configured_count(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  int n = 0;
  (void) state;

  trivial(&p);
  p.attempts = 5;
  build(&p);
  for (a = nres_call_begin(&call, &p, 0); a.kind == NRES_ATTEMPT; n++)
    a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(n, 5);
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(nres_stop_error(a.stop), NRES_EATTEMPTS);
}

static void permanent_and_canceled_are_never_retried(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  build(trivial(&p));
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, nres_verdict(NRES_PERMANENT));
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_PERMANENT);
  assert_int_equal(call.attempts, 1);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, nres_verdict(NRES_CANCELED));
  assert_int_equal(a.stop, NRES_STOP_CANCELED);
  assert_int_equal(call.attempts, 1);
}

static void backoff_waits_and_early_resume_keeps_waiting(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.jitter = NRES_JITTER_NONE;
  p.backoff.base = 100 * MS;
  p.backoff.max = 100 * MS;
  build(&p);
  a = nres_call_begin(&call, &p, 1 * SEC);
  a = nres_call_report(&call, a.slot, 1 * SEC + 10 * MS, transient());
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at == 1 * SEC + 110 * MS);
  a = nres_call_resume(&call, 1 * SEC + 50 * MS);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at == 1 * SEC + 110 * MS);
  a = nres_call_resume(&call, 1 * SEC + 110 * MS);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_int_equal(a.attempt, 2);
}

static void attempt_ceiling_is_timeout_or_time_left(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.deadline = 1 * SEC;
  p.attempt_timeout = 300 * MS;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  assert_true(a.at == 300 * MS);
  assert_true(nres_call_remaining(&call, 100 * MS) == 900 * MS);
  a = nres_call_report(&call, a.slot, 800 * MS, transient());
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_true(a.at == 1 * SEC);   /* 200 ms left < 300 ms timeout */
  a = nres_call_report(&call, a.slot, 1 * SEC, transient());
  assert_int_equal(a.stop, NRES_STOP_DEADLINE);
  assert_true(nres_call_remaining(&call, 2 * SEC) == 0);
}

/* nres.h: a backoff that would end at or after the deadline ends the call
 * at the report, without waiting and without spending budget. */
static void no_retry_when_backoff_ends_past_deadline(void **state) {
  nres_policy_t p;
  nres_budget_t budget;
  nres_budget_stats_t bs;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 5;
  p.deadline = 1 * SEC;
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.base = p.backoff.max = 300 * MS;
  assert_int_equal(nres_budget_init(&budget, 0.1, 0, 10), 0);
  p.budget = &budget;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 600 * MS, transient());
  assert_int_equal(a.kind, NRES_WAIT);   /* 900 ms < 1 s */
  assert_true(a.at == 900 * MS);
  nres_budget_stats(&budget, &bs);
  assert_int_equal(bs.spent, 1);
  a = nres_call_resume(&call, 900 * MS);
  a = nres_call_report(&call, a.slot, 750 * MS + 200 * MS, transient());
  assert_int_equal(a.kind, NRES_DONE);   /* 950 + 300 ms > 1 s */
  assert_int_equal(a.stop, NRES_STOP_DEADLINE);
  assert_int_equal(call.attempts, 2);
  nres_budget_stats(&budget, &bs);
  assert_int_equal(bs.spent, 1);         /* the refused retry paid nothing */
  /* Ending exactly at the deadline is past it too. */
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 700 * MS, transient());
  assert_int_equal(a.kind, NRES_DONE);   /* 700 + 300 ms = 1 s */
  assert_int_equal(a.stop, NRES_STOP_DEADLINE);
  assert_int_equal(call.attempts, 1);
  nres_budget_stats(&budget, &bs);
  assert_int_equal(bs.spent, 1);
}

static void inherited_deadline_only_tightens(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.deadline = 1 * SEC;
  build(&p);
  a = nres_call_begin_within(&call, &p, 0, 400 * MS);
  assert_true(a.at == 400 * MS);
  a = nres_call_begin_within(&call, &p, 0, 5 * SEC);
  assert_true(a.at == 1 * SEC);
  /* A passthrough policy still honours an inbound deadline. */
  assert_int_equal(nres_policy_init(&p, NRES_PRESET_NONE), 0);
  build(&p);
  a = nres_call_begin_within(&call, &p, 0, 400 * MS);
  assert_true(a.at == 400 * MS);
  a = nres_call_begin_within(&call, &p, 500 * MS, 400 * MS);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_DEADLINE);
}

static void retry_after_is_honoured_exactly_and_bounded_by_deadline(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_verdict_t v = nres_verdict(NRES_THROTTLED);
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.breaker = NULL;
  build(&p);
  v.flags = NRES_VF_RETRY_AFTER;
  v.retry_after = 2 * SEC;
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 10 * MS, v);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at == 2 * SEC + 10 * MS);   /* no jitter */
  a = nres_call_resume(&call, a.at);
  v.retry_after = 60 * SEC;   /* capped at max 30 s, past the deadline */
  a = nres_call_report(&call, a.slot, 3 * SEC, v);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_DEADLINE);
}

static void budget_refuses_retries_and_ignores_self_imposed(void **state) {
  nres_policy_t p;
  nres_budget_t budget;
  nres_call_t call;
  nres_action_t a;
  nres_verdict_t self = nres_verdict(NRES_THROTTLED);
  (void) state;

  trivial(&p);
  assert_int_equal(nres_budget_init(&budget, 0.1, 0, 2), 0);
  p.budget = &budget;
  build(&p);
  /* Two tokens: the first call retries twice, the second not at all. */
  a = nres_call_begin(&call, &p, 0);
  while (a.kind == NRES_ATTEMPT)
    a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_BUDGET);
  assert_int_equal(counters(&p).rejects[NRES_REJECT_BUDGET], 1);
  /* A self-imposed refusal retries without spending. */
  self.flags = NRES_VF_SELF;
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, self);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  /* Ten OKs deposit one token (ratio 0.1): one more retry is allowed. */
  for (int i = 0; i < 10; i++) {
    a = nres_call_begin(&call, &p, 0);
    a = nres_call_report(&call, a.slot, 0, ok());
  }
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.stop, NRES_STOP_BUDGET);
}

static void breaker_opens_rejects_then_probes_and_closes(void **state) {
  nres_policy_t p;
  nres_breaker_t br;
  nres_call_t call;
  nres_action_t a;
  nres_verdict_t timeout = transient();
  (void) state;

  trivial(&p);
  p.attempts = 1;
  use_breaker(&p, &br, 2, 1 * SEC);
  build(&p);
  timeout.flags = NRES_VF_TIMEOUT;   /* timeouts count as failures */
  for (int i = 0; i < 2; i++) {
    a = nres_call_begin(&call, &p, 0);
    a = nres_call_report(&call, a.slot, 0, timeout);
  }
  a = nres_call_begin(&call, &p, 10 * MS);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_CIRCUIT);
  assert_int_equal(call.attempts, 0);
  assert_int_equal(counters(&p).rejects[NRES_REJECT_BREAKER], 1);
  /* After the break: one probe; a second caller is refused meanwhile. */
  a = nres_call_begin(&call, &p, 1 * SEC);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  {
    nres_call_t other;
    nres_action_t b = nres_call_begin(&other, &p, 1 * SEC);
    assert_int_equal(b.stop, NRES_STOP_CIRCUIT);
  }
  a = nres_call_report(&call, a.slot, 1 * SEC, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_int_equal(nres_breaker_state(&br, 1 * SEC), NRES_BREAKER_CLOSED);
}

static void canceled_probe_never_leaves_breaker_stuck_half_open(void **state) {
  nres_policy_t p;
  nres_breaker_t br;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 1;
  use_breaker(&p, &br, 1, 1 * SEC);
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  a = nres_call_begin(&call, &p, 2 * SEC);   /* the probe */
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_cancel(&call, 2 * SEC);
  assert_int_equal(a.stop, NRES_STOP_CANCELED);
  assert_int_equal(a.cancel, 1);
  a = nres_call_begin(&call, &p, 2 * SEC);   /* permit was given back */
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_report(&call, a.slot, 2 * SEC, ok());
  assert_int_equal(nres_breaker_state(&br, 2 * SEC), NRES_BREAKER_CLOSED);
}

/* A driver whose own code failed ends the call with nres_call_abort: the
 * probe permit is given back as by a cancel, no fallback is marked, and
 * the stop says so (NRES_STOP_CALLBACK, NRES_ECALLBACK), counted. */
static void aborted_call_stops_callback_error_and_gives_back(void **state) {
  nres_policy_t p;
  nres_breaker_t br;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 1;
  p.fallback = 1;
  use_breaker(&p, &br, 1, 1 * SEC);
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  a = nres_call_begin(&call, &p, 2 * SEC);   /* the probe */
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_abort(&call, 2 * SEC);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_CALLBACK);
  assert_int_equal(a.cancel, 1);
  assert_int_equal(a.fallback, 0);
  assert_int_equal(nres_stop_error(call.stop), NRES_ECALLBACK);
  assert_int_equal(counters(&p).stops[NRES_STOP_CALLBACK], 1);
  a = nres_call_abort(&call, 2 * SEC);       /* over: its DONE again */
  assert_int_equal(a.stop, NRES_STOP_CALLBACK);
  assert_int_equal(counters(&p).stops[NRES_STOP_CALLBACK], 1);
  a = nres_call_begin(&call, &p, 2 * SEC);   /* permit was given back */
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_report(&call, a.slot, 2 * SEC, ok());
  assert_int_equal(nres_breaker_state(&br, 2 * SEC), NRES_BREAKER_CLOSED);
}

static void canceled_outcome_is_not_a_breaker_failure(void **state) {
  nres_policy_t p;
  nres_breaker_t br;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  use_breaker(&p, &br, 1, 15 * SEC);
  p.fallback = 1;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, nres_verdict(NRES_CANCELED));
  assert_int_equal(a.stop, NRES_STOP_CANCELED);
  assert_int_equal(a.fallback, 0);   /* canceled: no fallback either */
  assert_int_equal(nres_breaker_state(&br, 0), NRES_BREAKER_CLOSED);
}

static void hedge_starts_after_delay_and_first_ok_wins(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a, h;
  nres_counters_t c;
  (void) state;

  trivial(&p);
  p.hedge.max = 2;
  p.hedge.delay = 50 * MS;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_true(call.resume_at == 50 * MS);
  assert_int_equal(nres_call_resume(&call, 40 * MS).kind, NRES_WAIT);
  h = nres_call_resume(&call, 50 * MS);
  assert_int_equal(h.kind, NRES_ATTEMPT);
  assert_int_equal(h.hedge, 1);
  assert_int_equal(h.attempt, 2);
  assert_int_not_equal(h.slot, a.slot);
  assert_true(call.resume_at == NRES_TIME_NEVER);   /* max 2 in flight */
  h = nres_call_report(&call, h.slot, 60 * MS, ok());
  assert_int_equal(h.kind, NRES_DONE);
  assert_int_equal(h.stop, NRES_STOP_OK);
  assert_int_equal(h.cancel, 1u << a.slot);
  c = counters(&p);
  assert_int_equal(c.hedges, 1);
  assert_int_equal(c.abandoned, 1);
  assert_int_equal(c.verdicts[NRES_OK], 1);
  assert_int_equal(c.verdicts[NRES_TRANSIENT], 0);   /* loser unclassified */
  /* The loser's late report changes nothing and is counted. */
  h = nres_call_report(&call, a.slot, 70 * MS, transient());
  assert_int_equal(h.kind, NRES_DONE);
  assert_int_equal(h.stop, NRES_STOP_OK);
  assert_int_equal(counters(&p).late, 1);
  assert_int_equal(nres_call_log(&call, 1)->flags, 0xff);   /* abandoned */
}

/* A hedge that wins is counted; the loser, abandoned, still tells the
 * estimator it ran at least this long (a censored sample), so the hedge
 * quantile is not learnt from the fast attempts alone. */
static void hedge_win_is_counted_and_the_loser_is_a_censored_sample(
    void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a, h;
  uint64_t samples = 0;
  (void) state;

  trivial(&p);
  p.hedge.max = 2;
  p.hedge.delay = 50 * MS;
  assert_int_equal(nres_estimator_init(&p.own.estimator, 10 * SEC), 0);
  p.estimator = &p.own.estimator;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  h = nres_call_resume(&call, 50 * MS);
  assert_int_equal(h.hedge, 1);
  h = nres_call_report(&call, h.slot, 60 * MS, ok());
  assert_int_equal(h.stop, NRES_STOP_OK);
  assert_int_equal(h.cancel, 1u << a.slot);
  assert_int_equal(counters(&p).hedges_won, 1);
  assert_true(nres_estimator_quantile(&p.own.estimator, 60 * MS, 1.0, &samples)
              >= 60 * MS);
  assert_int_equal(samples, 2);   /* the 10 ms winner, the 60 ms loser */

  /* The first attempt winning is not a hedge win. */
  a = nres_call_begin(&call, &p, SEC);
  h = nres_call_resume(&call, SEC + 50 * MS);
  assert_int_equal(h.hedge, 1);
  a = nres_call_report(&call, a.slot, SEC + 55 * MS, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_int_equal(counters(&p).hedges_won, 1);
}

/* Criticality: the bulkhead keeps headroom for higher classes, a sheddable
 * call retries only while the budget is at least half full and takes at
 * most half the rate limiter's burst, and refusals are counted per class;
 * the stop reason is the usual one. */
static void criticality_orders_the_bulkhead_and_the_budget(void **state) {
  nres_policy_t p;
  nres_bulkhead_t bh;
  nres_bulkhead_config_t bc;
  nres_call_t calls[13];
  nres_action_t a;
  nres_counters_t c;
  int i;
  (void) state;

  trivial(&p);
  nres_bulkhead_config_init(&bc);
  bc.limit = 10;
  bc.reserve = 0.2;
  assert_int_equal(nres_bulkhead_init(&bh, &bc), 0);
  p.bulkhead = &bh;
  build(&p);
  for (i = 0; i < 8; i++) {
    a = nres_call_begin_class(&calls[i], &p, 0, NRES_TIME_NEVER,
                              NRES_CLASS_SHEDDABLE);
    assert_int_equal(a.kind, NRES_ATTEMPT);
  }
  a = nres_call_begin_class(&calls[8], &p, 0, NRES_TIME_NEVER,
                            NRES_CLASS_SHEDDABLE);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_LIMITED);
  assert_int_equal(calls[8].criticality, NRES_CLASS_SHEDDABLE);
  for (i = 8; i < 10; i++)
    assert_int_equal(nres_call_begin(&calls[i], &p, 0).kind, NRES_ATTEMPT);
  assert_int_equal(nres_call_begin(&calls[10], &p, 0).stop, NRES_STOP_LIMITED);
  for (i = 10; i < 12; i++)
    assert_int_equal(nres_call_begin_class(&calls[i], &p, 0, NRES_TIME_NEVER,
                                           NRES_CLASS_CRITICAL).kind,
                     NRES_ATTEMPT);
  assert_int_equal(nres_call_begin_class(&calls[12], &p, 0, NRES_TIME_NEVER,
                                         NRES_CLASS_CRITICAL).stop,
                   NRES_STOP_LIMITED);
  c = counters(&p);
  assert_int_equal(c.class_rejects[NRES_CLASS_SHEDDABLE], 1);
  assert_int_equal(c.class_rejects[NRES_CLASS_DEFAULT], 1);
  assert_int_equal(c.class_rejects[NRES_CLASS_CRITICAL], 1);
  assert_int_equal(c.rejects[NRES_REJECT_CONCURRENCY], 3);
  for (i = 0; i < 12; i++)
    if (i != 8 && i != 10)
      nres_call_report(&calls[i], 0, MS, ok());

  /* Budget: 10 tokens, 6 spent: a sheddable retry is refused, a default
   * one is not. */
  trivial(&p);
  assert_int_equal(nres_budget_init(&p.own.budget, 0.1, 0, 10), 0);
  p.budget = &p.own.budget;
  build(&p);
  for (i = 0; i < 6; i++)
    assert_int_equal(nres_budget_spend(p.budget, 0), 0);
  a = nres_call_begin_class(&calls[0], &p, 0, NRES_TIME_NEVER,
                            NRES_CLASS_SHEDDABLE);
  a = nres_call_report(&calls[0], a.slot, MS, transient());
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_BUDGET);
  a = nres_call_begin(&calls[1], &p, 0);
  a = nres_call_report(&calls[1], a.slot, MS, transient());
  assert_int_equal(a.kind, NRES_ATTEMPT);   /* the default class retries */
  assert_int_equal(counters(&p).class_rejects[NRES_CLASS_SHEDDABLE], 1);
  assert_string_equal(nres_class_name(NRES_CLASS_SHEDDABLE), "sheddable");

  /* Rate limiter: 10/s with a burst of 11 (tolerance 1 s): sheddable
   * calls stop at half the burst, the others take the rest. */
  trivial(&p);
  {
    nres_ratelimit_t rl;
    int shed = 0, other = 0;
    assert_int_equal(nres_ratelimit_init(&rl, 10, 11), 0);
    p.ratelimit = &rl;
    build(&p);
    while (nres_call_begin_class(&calls[0], &p, SEC, NRES_TIME_NEVER,
                                 NRES_CLASS_SHEDDABLE).kind == NRES_ATTEMPT) {
      nres_call_report(&calls[0], 0, SEC, ok());
      shed++;
    }
    while (nres_call_begin(&calls[0], &p, SEC).kind == NRES_ATTEMPT) {
      nres_call_report(&calls[0], 0, SEC, ok());
      other++;
    }
    assert_int_equal(shed, 5);    /* next admission at most 0.5 s ahead */
    assert_int_equal(shed + other, 11);   /* the burst, all of it used */
    assert_int_equal(calls[0].stop, NRES_STOP_LIMITED);
  }
  assert_string_equal(nres_class_name(9), "unknown");
}

static void exhausted_budget_never_cancels_inflight_hedges(void **state) {
  nres_policy_t p;
  nres_budget_t budget;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.hedge.max = 3;
  p.hedge.delay = 10 * MS;
  assert_int_equal(nres_budget_init(&budget, 0.1, 0, 1), 0);
  p.budget = &budget;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_resume(&call, 10 * MS);   /* hedge 1 spends the token */
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_true(call.resume_at == 20 * MS);
  a = nres_call_resume(&call, 20 * MS);   /* hedge 2 refused: keep waiting */
  assert_int_equal(a.kind, NRES_WAIT);
  assert_int_equal(__builtin_popcount(call.inflight), 2);
  a = nres_call_report(&call, 0, 30 * MS, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
}

static void failed_hedge_waits_for_the_others(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a, h;
  (void) state;

  trivial(&p);
  p.hedge.max = 2;
  p.hedge.delay = 10 * MS;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  h = nres_call_resume(&call, 10 * MS);
  h = nres_call_report(&call, h.slot, 15 * MS, transient());
  assert_int_equal(h.kind, NRES_WAIT);
  a = nres_call_report(&call, a.slot, 20 * MS, transient());
  assert_int_equal(a.kind, NRES_ATTEMPT);   /* retry: attempt 3 */
  assert_int_equal(a.attempt, 3);
  a = nres_call_report(&call, a.slot, 25 * MS, transient());
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
}

static void hedging_is_suppressed_while_failure_ratio_is_high(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 1;
  p.hedge.max = 2;
  p.hedge.delay = 10 * MS;
  p.hedge.min_samples = 4;
  p.hedge.suppress_ratio = 0.5;
  build(&p);
  for (int i = 0; i < 4; i++) {
    a = nres_call_begin(&call, &p, 0);
    a = nres_call_report(&call, a.slot, 0, transient());
  }
  p.attempts = 2;   /* one hedge would be allowed by count */
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_resume(&call, 10 * MS);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_int_equal(call.hedges, 0);
}

static void rate_limiter_refuses_or_waits_within_limit_wait(void **state) {
  nres_policy_t p;
  nres_ratelimit_t rl;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  assert_int_equal(nres_ratelimit_init(&rl, 1, 1), 0);
  p.ratelimit = &rl;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.stop, NRES_STOP_LIMITED);
  assert_int_equal(counters(&p).rejects[NRES_REJECT_RATE], 1);
  p.limit_wait = 2 * SEC;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at > 0 && a.at <= 1 * SEC);
  a = nres_call_resume(&call, a.at);
  assert_int_equal(a.kind, NRES_ATTEMPT);
}

/* limit_wait bounds the whole wait of one admission, not each refusal: a
 * call that loses the race for the token it waited for (another call took
 * it first) waits again only within what is left of its limit_wait. */
static void limit_wait_caps_the_total_across_refusals(void **state) {
  nres_policy_t p;
  nres_ratelimit_t rl;
  nres_call_t first, loser, thief;
  nres_action_t a;
  (void) state;

  trivial(&p);
  assert_int_equal(nres_ratelimit_init(&rl, 4, 1), 0);   /* 250 ms a token */
  p.ratelimit = &rl;
  p.limit_wait = 300 * MS;
  build(&p);
  a = nres_call_begin(&first, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  a = nres_call_begin(&loser, &p, 0);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(a.at == 250 * MS);
  /* Another call takes the token at 250 ms, before the waiter resumes. */
  assert_int_equal(nres_call_begin(&thief, &p, 250 * MS).kind, NRES_ATTEMPT);
  /* Another 250 ms would make 500 ms in all, past limit_wait: refused. */
  a = nres_call_resume(&loser, 250 * MS);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_LIMITED);
  assert_int_equal(counters(&p).rejects[NRES_REJECT_RATE], 1);

  /* Within the total, a second wait is allowed. */
  assert_int_equal(nres_ratelimit_init(&rl, 4, 1), 0);
  p.limit_wait = 600 * MS;
  build(&p);
  assert_int_equal(nres_call_begin(&first, &p, 0).kind, NRES_ATTEMPT);
  a = nres_call_begin(&loser, &p, 0);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_int_equal(nres_call_begin(&thief, &p, 250 * MS).kind, NRES_ATTEMPT);
  a = nres_call_resume(&loser, 250 * MS);
  assert_int_equal(a.kind, NRES_WAIT);          /* 500 ms in all: within */
  assert_true(a.at == 500 * MS);
  assert_int_equal(nres_call_begin(&thief, &p, 500 * MS).kind, NRES_ATTEMPT);
  a = nres_call_resume(&loser, 500 * MS);       /* 750 ms in all: past */
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_LIMITED);
}

/* A trivial policy with a bulkhead of one slot and a queue of `queue`
 * places, looked at every 10 ms. */
static void queue_policy(nres_policy_t *p, nres_bulkhead_t *bh,
                         uint32_t queue, nres_time_t queue_timeout) {
  nres_bulkhead_config_t cfg;

  trivial(p);
  nres_bulkhead_config_init(&cfg);
  cfg.limit = 1;
  cfg.queue = queue;
  cfg.queue_timeout = queue_timeout;
  cfg.poll = 10 * MS;
  assert_int_equal(nres_bulkhead_init(bh, &cfg), 0);
  p->bulkhead = bh;
  build(p);
}

static void bulkhead_queues_then_admits_or_times_out(void **state) {
  nres_policy_t p;
  nres_bulkhead_t bh;
  nres_bulkhead_stats_t st;
  nres_call_t a_call, b_call, c_call;
  nres_action_t a, b, c;
  (void) state;

  queue_policy(&p, &bh, 1, 100 * MS);
  a = nres_call_begin(&a_call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  b = nres_call_begin(&b_call, &p, 0);
  assert_int_equal(b.kind, NRES_WAIT);
  assert_true(b.at == 10 * MS);
  c = nres_call_begin(&c_call, &p, 0);
  assert_int_equal(c.stop, NRES_STOP_LIMITED);   /* queue full */
  b = nres_call_resume(&b_call, 10 * MS);
  assert_int_equal(b.kind, NRES_WAIT);            /* still busy */
  a = nres_call_report(&a_call, a.slot, 15 * MS, ok());
  b = nres_call_resume(&b_call, 20 * MS);
  assert_int_equal(b.kind, NRES_ATTEMPT);
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.waiting, 0);
  /* A queued caller gives up at queue_timeout and leaves the queue. */
  c = nres_call_begin(&c_call, &p, 20 * MS);
  assert_int_equal(c.kind, NRES_WAIT);
  while (c.kind == NRES_WAIT)
    c = nres_call_resume(&c_call, c.at);
  assert_int_equal(c.stop, NRES_STOP_LIMITED);
  assert_true(c_call.attempts == 0);
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.waiting, 0);
  assert_int_equal(st.inflight, 1);
  b = nres_call_report(&b_call, b.slot, 200 * MS, ok());
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.inflight, 0);
}

/* Issue 28: the queue is first come, first served on a fixed schedule
 * (whoever looks first): a freed slot is the oldest waiter's, kept from
 * later waiters and new arrivals. A waiter that vanishes (never looks
 * again, never leaves) loses its place after two polls of a free slot
 * (its lease), counted; the line goes on and nothing stays held. */
static void bulkhead_queue_is_fifo_and_a_vanished_waiter_lapses(
    void **state) {
  nres_policy_t p;
  nres_bulkhead_t bh;
  nres_bulkhead_stats_t st;
  nres_call_t a_call, w_call[3], late_call;
  nres_action_t a, w[3], late;
  int i;
  (void) state;

  queue_policy(&p, &bh, 3, 10 * SEC);
  a = nres_call_begin(&a_call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  for (i = 0; i < 3; i++) {   /* w[0], w[1], w[2] queue in this order */
    w[i] = nres_call_begin(&w_call[i], &p, (nres_time_t) (i + 1) * MS);
    assert_int_equal(w[i].kind, NRES_WAIT);
  }
  a = nres_call_report(&a_call, a.slot, 5 * MS, ok());
  /* a new arrival, then the later waiters look first (w[0] wakes late):
   * the slot is w[0]'s */
  late = nres_call_begin(&late_call, &p, 6 * MS);
  assert_int_equal(late.stop, NRES_STOP_LIMITED);   /* the queue is full */
  assert_true(w[2].at == 13 * MS && w[1].at == 12 * MS && w[0].at == 11 * MS);
  w[2] = nres_call_resume(&w_call[2], 13 * MS);
  assert_int_equal(w[2].kind, NRES_WAIT);
  w[1] = nres_call_resume(&w_call[1], 14 * MS);
  assert_int_equal(w[1].kind, NRES_WAIT);
  w[0] = nres_call_resume(&w_call[0], 15 * MS);
  assert_int_equal(w[0].kind, NRES_ATTEMPT);
  nres_call_report(&w_call[0], w[0].slot, 16 * MS, ok());
  assert_true(w[2].at == 23 * MS && w[1].at == 24 * MS);
  w[2] = nres_call_resume(&w_call[2], 23 * MS);
  assert_int_equal(w[2].kind, NRES_WAIT);
  w[1] = nres_call_resume(&w_call[1], 24 * MS);
  assert_int_equal(w[1].kind, NRES_ATTEMPT);

  /* w[1] holds the slot; a queues behind w[2] */
  a = nres_call_begin(&a_call, &p, 25 * MS);
  assert_int_equal(a.kind, NRES_WAIT);
  nres_call_report(&w_call[1], w[1].slot, 26 * MS, ok());
  /* w[2] vanishes here: it never looks again. The slot is its for two
   * polls from when a looks and sees it free (35 ms), then its place
   * lapses and a, next in line, takes the slot. */
  assert_true(a.at == 35 * MS);
  a = nres_call_resume(&a_call, a.at);
  assert_int_equal(a.kind, NRES_WAIT);
  a = nres_call_resume(&a_call, a.at);
  assert_int_equal(a.kind, NRES_WAIT);
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.leases_expired, 0);
  assert_true(a.at == 55 * MS);
  a = nres_call_resume(&a_call, a.at);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.leases_expired, 1);
  assert_int_equal(st.waiting, 0);
  nres_call_report(&a_call, a.slot, 56 * MS, ok());
  /* nothing held: a new arrival walks in */
  late = nres_call_begin(&late_call, &p, 57 * MS);
  assert_int_equal(late.kind, NRES_ATTEMPT);
  nres_call_report(&late_call, late.slot, 58 * MS, ok());
  nres_bulkhead_stats(&bh, &st);
  assert_int_equal(st.inflight, 0);
  assert_int_equal(st.waiting, 0);
}

static void draining_refuses_new_calls(void **state) {
  nres_policy_t p;
  nres_call_t call;
  (void) state;

  build(trivial(&p));
  nres_policy_drain(&p, 1);
  assert_int_equal(nres_call_begin(&call, &p, 0).stop, NRES_STOP_DRAINING);
  assert_int_equal(counters(&p).rejects[NRES_REJECT_DRAINING], 1);
  nres_policy_drain(&p, 0);
  assert_int_equal(nres_call_begin(&call, &p, 0).kind, NRES_ATTEMPT);
}

static void fallback_is_marked_on_failure_only(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 1;
  p.fallback = 1;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.fallback, 1);
  assert_int_equal(call.fallback, 1);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, ok());
  assert_int_equal(a.fallback, 0);
  assert_int_equal(counters(&p).fallbacks, 1);
}

static void cancel_during_backoff_ends_the_call(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.base = p.backoff.max = 1 * SEC;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.kind, NRES_WAIT);
  a = nres_call_cancel(&call, 10 * MS);
  assert_int_equal(a.stop, NRES_STOP_CANCELED);
  assert_int_equal(a.cancel, 0);
  a = nres_call_resume(&call, 2 * SEC);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_CANCELED);
}

static void attempt_log_keeps_the_last_attempts_in_order(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.attempts = 12;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  for (nres_time_t t = 1; a.kind == NRES_ATTEMPT; t++)
    a = nres_call_report(&call, a.slot, t, t == 12 ? ok() : transient());
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_int_equal(nres_call_log(&call, 0)->number, 12);
  assert_int_equal(nres_call_log(&call, 0)->kind, NRES_OK);
  assert_int_equal(nres_call_log(&call, 7)->number, 5);
  assert_int_equal(nres_call_log(&call, 7)->kind, NRES_TRANSIENT);
  assert_true(nres_call_log(&call, 0)->end == 12);
  assert_null(nres_call_log(&call, 8));
}

static int events_seen[8];
static void count_event(const nres_event_t *ev, void *data) {
  assert_ptr_equal(data, events_seen);
  events_seen[ev->type]++;
}

static void events_reach_the_listener(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  p.on_event = count_event;
  p.event_data = events_seen;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 1, transient());
  a = nres_call_report(&call, a.slot, 2, ok());
  assert_int_equal(events_seen[NRES_EV_ATTEMPT], 2);
  assert_int_equal(events_seen[NRES_EV_RETRY], 1);
  assert_int_equal(events_seen[NRES_EV_DONE], 1);
  assert_int_equal(events_seen[NRES_EV_REJECT], 0);
}

static void measured_ceiling_follows_latency_with_a_floor(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  nres_time_t t = 0;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.ceiling_factor = 3;                /* the mechanism, not the preset's values */
  p.ceiling_quantile = 0.95;
  p.ceiling_floor = 50 * MS;
  p.min_samples = 20;
  build(&p);
  a = nres_call_begin(&call, &p, t);
  assert_true(a.at == t + 10 * SEC);   /* no samples: the timeout */
  nres_call_report(&call, a.slot, t + 100 * MS, ok());
  for (int i = 0; i < 30; i++) {
    a = nres_call_begin(&call, &p, t);
    t += 100 * MS;
    nres_call_report(&call, a.slot, t, ok());
  }
  t += 1 * SEC;
  a = nres_call_begin(&call, &p, t);
  /* 3 x p95 of 100 ms samples: 300 ms, within the histogram's 6.25 %. */
  assert_true(a.at - t >= 300 * MS);
  assert_true(a.at - t <= 320 * MS);
  nres_call_report(&call, a.slot, t, ok());
}

static nres_verdict_t never_called(void *arg, const nres_attempt_t *attempt) {
  (void) attempt;
  ++*(int *) arg;
  return ok();
}

/* nres.h: begin on an unbuilt policy is DONE with stop NONE, whose error
 * is NRES_EINVAL, as nres_run returns; a refused build unbuilds. */
static void unbuilt_policy_and_bad_slot_are_misuse(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  int ran = 0;
  (void) state;

  trivial(&p);   /* not built */
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_NONE);
  assert_int_equal(nres_stop_error(a.stop), NRES_EINVAL);
  assert_int_equal(nres_run(&p, never_called, &ran, &call), NRES_EINVAL);
  assert_int_equal(ran, 0);
  a = nres_call_begin(&call, NULL, 0);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(nres_stop_error(a.stop), NRES_EINVAL);
  /* A report on such a call changes nothing: the same DONE again. */
  a = nres_call_report(&call, 0, 0, ok());
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_NONE);
  /* Built, then a refused rebuild: unbuilt again, calls end at once. */
  build(&p);
  p.deadline = 1 * SEC;
  p.attempt_timeout = 2 * SEC;
  assert_int_equal(nres_policy_build(&p), NRES_EINVAL);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(nres_stop_error(a.stop), NRES_EINVAL);
  assert_int_equal(nres_run(&p, never_called, &ran, &call), NRES_EINVAL);
  assert_int_equal(ran, 0);
  p.attempt_timeout = 0;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  assert_int_equal(nres_call_report(&call, 3, 0, ok()).kind, NRES_WAIT);
  assert_int_equal(nres_call_report(&call, 99, 0, ok()).kind, NRES_WAIT);
  assert_int_equal(counters(&p).late, 2);
  a = nres_call_report(&call, a.slot, 0, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
}

/* nres.h: report, resume and cancel on a call that is over return its
 * DONE again (same stop and fallback, nothing to cancel); the report is
 * counted late. */
static void steps_on_a_finished_call_return_its_done_again(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a, first;
  (void) state;

  trivial(&p);
  p.attempts = 1;
  p.fallback = 1;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  first = nres_call_report(&call, a.slot, 5, transient());
  assert_int_equal(first.kind, NRES_DONE);
  assert_int_equal(first.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(first.fallback, 1);
  for (unsigned slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    a = nres_call_report(&call, slot, 6, ok());
    assert_int_equal(a.kind, NRES_DONE);
    assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
    assert_int_equal(a.fallback, 1);
    assert_int_equal(a.cancel, 0);
  }
  assert_int_equal(counters(&p).late, NRES_MAX_INFLIGHT);
  assert_int_equal(counters(&p).verdicts[NRES_OK], 0);
  assert_int_equal(counters(&p).calls, 1);
  a = nres_call_resume(&call, 7);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  a = nres_call_cancel(&call, 8);
  assert_int_equal(a.kind, NRES_DONE);
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(call.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(counters(&p).calls, 1);
}

static void queued_call_does_not_drain_the_rate_limiter(void **state) {
  nres_policy_t p;
  nres_ratelimit_t rl;
  nres_bulkhead_t bh;
  nres_bulkhead_config_t cfg;
  nres_call_t a_call, b_call, c_call;
  nres_action_t a, b, c;
  (void) state;

  trivial(&p);
  assert_int_equal(nres_ratelimit_init(&rl, 10, 5), 0);
  nres_bulkhead_config_init(&cfg);
  cfg.limit = 1;
  cfg.queue = 1;
  cfg.queue_timeout = 1 * SEC;
  cfg.poll = 1 * MS;
  assert_int_equal(nres_bulkhead_init(&bh, &cfg), 0);
  p.ratelimit = &rl;
  p.bulkhead = &bh;
  build(&p);
  a = nres_call_begin(&a_call, &p, 0);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  b = nres_call_begin(&b_call, &p, 0);
  for (int i = 0; i < 10; i++) {   /* B polls ten times while A runs */
    assert_int_equal(b.kind, NRES_WAIT);
    b = nres_call_resume(&b_call, b.at);
  }
  a = nres_call_report(&a_call, a.slot, 11 * MS, ok());
  b = nres_call_resume(&b_call, b.at);
  assert_int_equal(b.kind, NRES_ATTEMPT);
  b = nres_call_report(&b_call, b.slot, 12 * MS, ok());
  /* Two of five burst admissions used: a third caller still gets in. */
  c = nres_call_begin(&c_call, &p, 12 * MS);
  assert_int_equal(c.kind, NRES_ATTEMPT);
}

static void refused_retry_gives_its_budget_token_back(void **state) {
  nres_policy_t p;
  nres_budget_t budget;
  nres_breaker_t br;
  nres_breaker_config_t cfg;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  trivial(&p);
  assert_int_equal(nres_budget_init(&budget, 0.1, 0, 5), 0);
  nres_breaker_config_init(&cfg);
  cfg.consecutive = 1;
  assert_int_equal(nres_breaker_init(&br, &cfg), 0);
  p.budget = &budget;
  p.breaker = &br;
  build(&p);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());   /* trips it */
  assert_int_equal(a.stop, NRES_STOP_CIRCUIT);
  assert_int_equal(call.retries, 0);
  assert_int_equal(counters(&p).retries, 0);
  assert_true(nres_budget_level(&budget, 0) == 5.0);
  /* Canceled during the backoff: the token comes back too. */
  nres_breaker_reset(&br);
  p.backoff.kind = NRES_BACKOFF_CONSTANT;
  p.backoff.base = p.backoff.max = 1 * SEC;
  build(&p);
  cfg.consecutive = 10;
  assert_int_equal(nres_breaker_init(&br, &cfg), 0);
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 0, transient());
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(nres_budget_level(&budget, 0) == 4.0);
  a = nres_call_cancel(&call, 1);
  assert_true(nres_budget_level(&budget, 0) == 5.0);
}

static void throttled_answer_stops_further_hedges(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a, h;
  nres_verdict_t throttled = nres_verdict(NRES_THROTTLED);
  (void) state;

  trivial(&p);
  p.hedge.max = 2;
  p.hedge.delay = 10 * MS;
  build(&p);
  throttled.flags = NRES_VF_RETRY_AFTER;
  throttled.retry_after = 5 * SEC;
  a = nres_call_begin(&call, &p, 0);
  h = nres_call_resume(&call, 10 * MS);
  assert_int_equal(h.kind, NRES_ATTEMPT);
  a = nres_call_report(&call, h.slot, 11 * MS, throttled);
  assert_int_equal(a.kind, NRES_WAIT);
  assert_true(call.resume_at == NRES_TIME_NEVER);   /* no new hedge */
  assert_int_equal(nres_call_resume(&call, 21 * MS).kind, NRES_WAIT);
  assert_int_equal(call.attempts, 2);
}

static void draining_also_stops_passthrough_policies(void **state) {
  nres_policy_t p;
  nres_call_t call;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_NONE), 0);
  build(&p);
  nres_policy_drain(&p, 1);
  assert_int_equal(nres_call_begin(&call, &p, 0).stop, NRES_STOP_DRAINING);
}

/* Regression: the executor caches the decisions it takes from the
 * estimator (measured ceiling, hedge delay) as finished values, refreshed
 * by whichever call wins the race to do it. A call that loses that race
 * before the first refresh has stored anything must read "too few
 * samples", not a ceiling or a hedge delay of 0 (an attempt bounded to
 * end at once, a hedge started at once). */
static void the_cache_before_its_first_refresh_reads_too_few_samples(
    void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.hedge.max = 2;
  p.hedge.delay = 0;   /* from the estimator's quantile */
  build(&p);
  /* Another thread has won the first refresh and not stored yet. */
  atomic_store(&p.quantile_next, (uint64_t) 1000 * SEC);
  a = nres_call_begin(&call, &p, 5 * SEC);
  assert_int_equal(a.kind, NRES_ATTEMPT);
  assert_true(a.at == 5 * SEC + p.attempt_timeout);
  assert_true(call.resume_at == NRES_TIME_NEVER);   /* no hedge due */
  a = nres_call_report(&call, a.slot, 5 * SEC + 3 * MS, ok());
  assert_int_equal(a.stop, NRES_STOP_OK);
}

/* n_retries counted once, when the call ends (the call's own retries,
 * call.retries, count as they start). */
static void retries_reach_the_counters_when_the_call_ends(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_action_t a;
  (void) state;

  build(trivial(&p));
  a = nres_call_begin(&call, &p, 0);
  a = nres_call_report(&call, a.slot, 1, transient());
  a = nres_call_report(&call, a.slot, 2, transient());
  assert_int_equal(a.attempt, 3);
  assert_int_equal(call.retries, 2);
  assert_int_equal(counters(&p).retries, 0);   /* still running */
  a = nres_call_report(&call, a.slot, 3, transient());
  assert_int_equal(a.stop, NRES_STOP_ATTEMPTS);
  assert_int_equal(counters(&p).retries, 2);
  a = nres_call_begin(&call, &p, 4);
  a = nres_call_cancel(&call, 5);              /* canceled: no retries */
  assert_int_equal(counters(&p).retries, 2);
}

/* A call's first attempt is started by one of two paths: written once
 * when nothing can refuse it (here: trivial, breaker closed), or reset
 * then admitted gate by gate (here: the same with a rate limiter that
 * admits). Both leave the call alike, whatever it held before. */
static void first_attempt_state_is_the_same_on_both_paths(void **state) {
  nres_policy_t fast, gated;
  nres_breaker_t br1, br2;
  nres_ratelimit_t rl;
  nres_call_t a, b;
  nres_action_t x, y;
  (void) state;

  trivial(&fast);
  trivial(&gated);
  fast.deadline = gated.deadline = 2 * SEC;
  fast.attempt_timeout = gated.attempt_timeout = 300 * MS;
  use_breaker(&fast, &br1, 5, SEC);
  use_breaker(&gated, &br2, 5, SEC);
  assert_int_equal(nres_ratelimit_init(&rl, 1000, 1000), 0);
  gated.ratelimit = &rl;
  build(&fast);
  build(&gated);
  memset(&a, 0xa5, sizeof(a));
  memset(&b, 0x5a, sizeof(b));
  x = nres_call_begin_class(&a, &fast, 7 * SEC, 8 * SEC, NRES_CLASS_SHEDDABLE);
  y = nres_call_begin_class(&b, &gated, 7 * SEC, 8 * SEC, NRES_CLASS_SHEDDABLE);
  assert_memory_equal(&x, &y, sizeof(x));
  assert_int_equal(x.kind, NRES_ATTEMPT);
  assert_true(x.at == 7 * SEC + 300 * MS);
  assert_true(a.policy == &fast && b.policy == &gated);
  assert_true(a.start == b.start && a.deadline == b.deadline);
  assert_true(a.deadline == 8 * SEC);   /* the inbound one, tighter */
  assert_true(a.resume_at == b.resume_at);
  assert_int_equal(a.phase, b.phase);
  assert_int_equal(a.stop, b.stop);
  assert_int_equal(a.inflight, b.inflight);
  assert_int_equal(a.fallback, b.fallback);
  assert_int_equal(a.attempts, b.attempts);
  assert_int_equal(a.retries, b.retries);
  assert_int_equal(a.hedges, b.hedges);
  assert_int_equal(a.queued, b.queued);
  assert_int_equal(a.seeded, b.seeded);
  assert_int_equal(a.charged, b.charged);
  assert_int_equal(a.throttled, b.throttled);
  assert_int_equal(a.criticality, NRES_CLASS_SHEDDABLE);
  assert_int_equal(a.criticality, b.criticality);
  assert_memory_equal(&a.last, &b.last, sizeof(a.last));
  assert_memory_equal(&a.backoff, &b.backoff, sizeof(a.backoff));
  assert_memory_equal(&a.slot[0], &b.slot[0], sizeof(a.slot[0]));
  assert_memory_equal(&a.log[0], &b.log[0], sizeof(a.log[0]));
  x = nres_call_report(&a, x.slot, 7 * SEC + MS, ok());
  y = nres_call_report(&b, y.slot, 7 * SEC + MS, ok());
  assert_memory_equal(&x, &y, sizeof(x));
  assert_int_equal(a.stop, NRES_STOP_OK);
  assert_memory_equal(&a.log[0], &b.log[0], sizeof(a.log[0]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(passthrough_is_one_attempt_without_bookkeeping),
    cmocka_unit_test(trivial_retries_at_once_until_ok),
    cmocka_unit_test(retries_reach_the_counters_when_the_call_ends),
    cmocka_unit_test(first_attempt_state_is_the_same_on_both_paths),
    cmocka_unit_test(attempts_exhausted_after_the_configured_count),
    cmocka_unit_test(permanent_and_canceled_are_never_retried),
    cmocka_unit_test(backoff_waits_and_early_resume_keeps_waiting),
    cmocka_unit_test(attempt_ceiling_is_timeout_or_time_left),
    cmocka_unit_test(no_retry_when_backoff_ends_past_deadline),
    cmocka_unit_test(inherited_deadline_only_tightens),
    cmocka_unit_test(retry_after_is_honoured_exactly_and_bounded_by_deadline),
    cmocka_unit_test(budget_refuses_retries_and_ignores_self_imposed),
    cmocka_unit_test(breaker_opens_rejects_then_probes_and_closes),
    cmocka_unit_test(canceled_probe_never_leaves_breaker_stuck_half_open),
    cmocka_unit_test(canceled_outcome_is_not_a_breaker_failure),
    cmocka_unit_test(aborted_call_stops_callback_error_and_gives_back),
    cmocka_unit_test(hedge_starts_after_delay_and_first_ok_wins),
    cmocka_unit_test(exhausted_budget_never_cancels_inflight_hedges),
    cmocka_unit_test(hedge_win_is_counted_and_the_loser_is_a_censored_sample),
    cmocka_unit_test(criticality_orders_the_bulkhead_and_the_budget),
    cmocka_unit_test(failed_hedge_waits_for_the_others),
    cmocka_unit_test(hedging_is_suppressed_while_failure_ratio_is_high),
    cmocka_unit_test(rate_limiter_refuses_or_waits_within_limit_wait),
    cmocka_unit_test(limit_wait_caps_the_total_across_refusals),
    cmocka_unit_test(bulkhead_queues_then_admits_or_times_out),
    cmocka_unit_test(bulkhead_queue_is_fifo_and_a_vanished_waiter_lapses),
    cmocka_unit_test(draining_refuses_new_calls),
    cmocka_unit_test(fallback_is_marked_on_failure_only),
    cmocka_unit_test(cancel_during_backoff_ends_the_call),
    cmocka_unit_test(attempt_log_keeps_the_last_attempts_in_order),
    cmocka_unit_test(events_reach_the_listener),
    cmocka_unit_test(measured_ceiling_follows_latency_with_a_floor),
    cmocka_unit_test(unbuilt_policy_and_bad_slot_are_misuse),
    cmocka_unit_test(steps_on_a_finished_call_return_its_done_again),
    cmocka_unit_test(queued_call_does_not_drain_the_rate_limiter),
    cmocka_unit_test(refused_retry_gives_its_budget_token_back),
    cmocka_unit_test(throttled_answer_stops_further_hedges),
    cmocka_unit_test(draining_also_stops_passthrough_policies),
    cmocka_unit_test(the_cache_before_its_first_refresh_reads_too_few_samples),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

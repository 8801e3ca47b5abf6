/* SPDX-License-Identifier: MIT */
/* test_step.c - the binding steps of a synchronous driver
 * (nres_step_sync_begin, _report, _resume) against the general ones.
 *
 * Two policies built alike are driven through the same verdicts, one by
 * nres_step_begin_class / nres_step_report / nres_step_resume, the other by
 * the sync steps, on a virtual clock: every action and every call record
 * must read the same. Then what only the sync steps do: read the runtime's
 * clock when told now < 0 - at a success's end too, which two ways of
 * skipping that read got wrong (below) - and allocate nothing.
 */
#include <math.h>
#include <string.h>

#include "nres_test.h"

#define MS NRES_MSEC
#define T0 ((nres_time_t) 1000 * NRES_SEC)

/* A sync step's packed answer, unpacked as the general step writes it. */
static void unpack(int packed, double at, nres_step_t *out) {
  memset(out, 0, sizeof(*out));
  out->kind = packed & 0xff;
  out->slot = (packed >> 8) & 0xff;
  out->hedge = (packed >> 16) & 0xff;
  out->stop = (packed >> 24) & 0xff;
  out->at = at;
}

static void same_action(const nres_step_t *general, int packed, double at,
                        const char *where) {
  nres_step_t sync;
  unpack(packed, at, &sync);
  if (general->kind != sync.kind || general->slot != sync.slot ||
      general->hedge != sync.hedge || general->stop != sync.stop ||
      general->at != sync.at)
    fail_msg("%s: general kind %d slot %d hedge %d stop %d at %.0f; sync "
             "kind %d slot %d hedge %d stop %d at %.0f", where, general->kind,
             general->slot, general->hedge, general->stop, general->at,
             sync.kind, sync.slot, sync.hedge, sync.stop, sync.at);
}

static void same_call(const nres_call_t *a, const nres_call_t *b) {
  assert_int_equal(a->stop, b->stop);
  assert_int_equal(a->fallback, b->fallback);
  assert_int_equal(a->attempts, b->attempts);
  assert_int_equal(a->retries, b->retries);
  assert_int_equal(a->criticality, b->criticality);
  assert_true(a->start == b->start);
  assert_true(a->deadline == b->deadline);
  assert_int_equal(a->last.kind, b->last.kind);
  assert_int_equal(a->last.flags, b->last.flags);
  for (unsigned i = 0; i < a->attempts && i < NRES_LOG_CAP; i++)
    assert_memory_equal(nres_call_log(a, i), nres_call_log(b, i),
                        sizeof(nres_attempt_rec_t));
}

typedef struct {
  int kind, flags;
  double retry_after;   /* ns, -1: none */
} outcome_t;

/* One call through both kinds of steps, begun at `start`: attempts get
 * `outcomes` in turn (the last repeats), each attempt lasts `took` ns,
 * waits are slept exactly. */
static void drive_both_at(nres_policy_t *pg, nres_policy_t *ps, int cls,
                          const outcome_t *outcomes, int n, double start,
                          double took) {
  nres_call_t cg, cs;
  nres_step_t st;
  double now = start, at;
  int act, turn = 0;

  nres_step_begin_class(&cg, pg, now, -1, cls, &st);
  act = nres_step_sync_begin(&cs, ps, now, cls, &at);
  same_action(&st, act, at, "begin");
  while (st.kind != NRES_DONE) {
    if (st.kind == NRES_ATTEMPT) {
      const outcome_t *o = &outcomes[turn < n ? turn : n - 1];
      turn++;
      now += took;
      nres_step_report(&cg, (unsigned) st.slot, now, o->kind, o->flags,
                       o->retry_after, &st);
      act = nres_step_sync_report(&cs, (unsigned) (act >> 8 & 0xff), now,
                                  o->kind, o->flags, o->retry_after, &at);
      same_action(&st, act, at, "report");
    } else if (st.at < 0) {
      /* A junk verdict leaves the attempt in flight: the call waits for
       * a report that never comes. The driver gives up. */
      nres_step_cancel(&cg, now, &st);
      nres_step_cancel(&cs, now, &st);
      break;
    } else {
      assert_true(st.at >= now);
      now = st.at;
      nres_step_resume(&cg, now, &st);
      act = nres_step_sync_resume(&cs, now, &at);
      same_action(&st, act, at, "resume");
    }
    assert_true(turn < 20);
  }
  same_call(&cg, &cs);
}

/* drive_both_at at T0, each attempt lasting 3 ms. */
static void drive_both(nres_policy_t *pg, nres_policy_t *ps, int cls,
                       const outcome_t *outcomes, int n) {
  drive_both_at(pg, ps, cls, outcomes, n, (double) T0, 3.0 * MS);
}

static void build_pair(nres_policy_t *pg, nres_policy_t *ps, int preset,
                       uint32_t fallback) {
  assert_int_equal(nres_policy_init(pg, preset), 0);
  assert_int_equal(nres_policy_init(ps, preset), 0);
  pg->fallback = ps->fallback = fallback;
  assert_int_equal(nres_policy_build(pg), 0);
  assert_int_equal(nres_policy_build(ps), 0);
}

static void sync_steps_answer_what_the_general_steps_answer(void **state) {
  static const int presets[] = { NRES_PRESET_NONE, NRES_PRESET_TRIVIAL,
                                 NRES_PRESET_DEFAULT };
  static const outcome_t ok[] = { { NRES_OK, 0, -1 } };
  static const outcome_t twice[] = { { NRES_TRANSIENT, 0, -1 },
                                     { NRES_TRANSIENT, NRES_VF_TIMEOUT, -1 },
                                     { NRES_OK, 0, -1 } };
  static const outcome_t throttled[] = { { NRES_THROTTLED, 0, 7.0 * MS },
                                         { NRES_OK, 0, -1 } };
  static const outcome_t down[] = { { NRES_TRANSIENT, 0, -1 } };
  static const outcome_t permanent[] = { { NRES_PERMANENT, 0, -1 } };
  static const outcome_t canceled[] = { { NRES_CANCELED, 0, -1 } };
  static const outcome_t junk[] = { { 9, 0, -1 } };   /* out of range */
  /* retry-after NaN (none), +inf (never: the backoff's max), -inf (none) */
  static const outcome_t odd_wait[] = { { NRES_THROTTLED, 0, NAN },
                                        { NRES_THROTTLED, 0, INFINITY },
                                        { NRES_THROTTLED, 0, -INFINITY },
                                        { NRES_OK, 0, -1 } };
  static const struct { const outcome_t *o; int n; } runs[] = {
    { ok, 1 }, { twice, 3 }, { throttled, 2 }, { down, 1 }, { permanent, 1 },
    { canceled, 1 }, { junk, 1 }, { odd_wait, 4 }
  };
  (void) state;

  for (size_t p = 0; p < sizeof(presets) / sizeof(presets[0]); p++)
    for (uint32_t fallback = 0; fallback <= 1; fallback++) {
      nres_policy_t pg, ps;
      build_pair(&pg, &ps, presets[p], fallback);
      /* Many calls, so the shared state (breaker, budget, estimator)
       * moves alike in both policies: the breaker opens on `down`. */
      for (int round = 0; round < 3; round++)
        for (int cls = -1; cls <= NRES_CLASS_COUNT; cls++)
          for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++)
            drive_both(&pg, &ps, cls, runs[r].o, runs[r].n);
    }
}

/* What the sync steps' usual success records - breaker and throttle
 * windows, the latency estimator, the budget, the counters - is what the
 * general steps record, word for word, also where an add takes its slow
 * path: time runs over many slices of both windows, latencies move
 * between the estimator's buckets, and a failure now and then (a retry,
 * the breaker's run of failures) takes the general way in between. */
static void sync_steps_record_what_the_general_steps_record(void **state) {
  static const outcome_t ok[] = { { NRES_OK, 0, -1 } };
  static const outcome_t once[] = { { NRES_TRANSIENT, 0, -1 },
                                    { NRES_OK, 0, -1 } };
  nres_policy_t pg, ps;
  nres_counters_t cg, cs;
  double now = (double) T0;
  (void) state;

  build_pair(&pg, &ps, NRES_PRESET_DEFAULT, 0);
  for (int i = 0; i < 3000; i++) {
    double took = (double) (1 + (i * 7919) % 97) * 0.1 * MS;
    if (i % 40 == 39)
      drive_both_at(&pg, &ps, NRES_CLASS_DEFAULT, once, 2, now, took);
    else
      drive_both_at(&pg, &ps, NRES_CLASS_DEFAULT, ok, 1, now, took);
    now += took + 0.5 * MS;
  }
  assert_memory_equal(&pg.breaker->window, &ps.breaker->window,
                      sizeof(nres_window_t));
  assert_memory_equal(&pg.throttle->window, &ps.throttle->window,
                      sizeof(nres_window_t));
  assert_memory_equal(pg.estimator, ps.estimator, sizeof(nres_estimator_t));
  assert_memory_equal(pg.budget, ps.budget, sizeof(nres_budget_t));
  nres_policy_counters(&pg, &cg);
  nres_policy_counters(&ps, &cs);
  assert_memory_equal(&cg, &cs, sizeof(cg));
  assert_true(cs.calls == 3000);
}

/* Misuse and late reports answer as the general steps do. */
static void sync_steps_answer_misuse_as_the_general_steps_do(void **state) {
  nres_policy_t pg, ps, unbuilt;
  nres_call_t cg, cs;
  nres_step_t st;
  double at;
  int act;
  (void) state;

  memset(&unbuilt, 0, sizeof(unbuilt));
  nres_step_begin_class(&cg, &unbuilt, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
  act = nres_step_sync_begin(&cs, &unbuilt, (double) T0, NRES_CLASS_DEFAULT, &at);
  same_action(&st, act, at, "unbuilt policy");
  assert_int_equal(st.kind, NRES_DONE);
  nres_step_begin_class(&cg, NULL, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
  act = nres_step_sync_begin(&cs, NULL, (double) T0, NRES_CLASS_DEFAULT, &at);
  same_action(&st, act, at, "no policy");

  /* A resume before any begin (a zeroed record): nothing to do. */
  memset(&cg, 0, sizeof(cg));
  memset(&cs, 0, sizeof(cs));
  nres_step_resume(&cg, (double) T0, &st);
  act = nres_step_sync_resume(&cs, (double) T0, &at);
  same_action(&st, act, at, "resume before begin");
  assert_int_not_equal(st.kind, NRES_ATTEMPT);

  build_pair(&pg, &ps, NRES_PRESET_DEFAULT, 0);
  nres_step_begin_class(&cg, &pg, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
  act = nres_step_sync_begin(&cs, &ps, (double) T0, NRES_CLASS_DEFAULT, &at);
  same_action(&st, act, at, "begin");
  /* A slot with nothing in flight, a slot out of range: late. */
  nres_step_report(&cg, 3, (double) T0, NRES_OK, 0, -1, &st);
  act = nres_step_sync_report(&cs, 3, (double) T0, NRES_OK, 0, -1, &at);
  same_action(&st, act, at, "idle slot");
  nres_step_report(&cg, 200, (double) T0, NRES_OK, 0, -1, &st);
  act = nres_step_sync_report(&cs, 200, (double) T0, NRES_OK, 0, -1, &at);
  same_action(&st, act, at, "slot out of range");
  nres_step_report(&cg, 0, (double) T0 + MS, NRES_OK, 0, -1, &st);
  act = nres_step_sync_report(&cs, 0, (double) T0 + MS, NRES_OK, 0, -1, &at);
  same_action(&st, act, at, "end");
  assert_int_equal(st.kind, NRES_DONE);
  /* A report after the end: DONE again, same stop. */
  nres_step_report(&cg, 0, (double) T0 + MS, NRES_TRANSIENT, 0, -1, &st);
  act = nres_step_sync_report(&cs, 0, (double) T0 + MS, NRES_TRANSIENT, 0, -1, &at);
  same_action(&st, act, at, "after the end");
  assert_int_equal(st.stop, NRES_STOP_OK);
  same_call(&cg, &cs);
}

/* A report of a slot other than 0 (a hedge: the sync steps' fast path
 * has slot 0 only) answers as the general steps do, and so does the
 * loser's late report in slot 0 after it. */
static void sync_steps_answer_a_hedge_in_slot_1_as_the_general_steps_do(
    void **state) {
  nres_policy_t pg, ps;
  nres_call_t cg, cs;
  nres_counters_t cgc, csc;
  nres_step_t st;
  double at;
  int act;
  (void) state;

  assert_int_equal(nres_policy_init(&pg, NRES_PRESET_TRIVIAL), 0);
  assert_int_equal(nres_policy_init(&ps, NRES_PRESET_TRIVIAL), 0);
  pg.hedge.max = ps.hedge.max = 2;
  pg.hedge.delay = ps.hedge.delay = 50 * MS;
  assert_int_equal(nres_policy_build(&pg), 0);
  assert_int_equal(nres_policy_build(&ps), 0);
  nres_step_begin_class(&cg, &pg, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
  act = nres_step_sync_begin(&cs, &ps, (double) T0, NRES_CLASS_DEFAULT, &at);
  same_action(&st, act, at, "begin");
  nres_step_resume(&cg, (double) (T0 + 50 * MS), &st);
  act = nres_step_sync_resume(&cs, (double) (T0 + 50 * MS), &at);
  same_action(&st, act, at, "hedge");
  assert_int_equal(st.kind, NRES_ATTEMPT);
  assert_int_equal(st.slot, 1);
  nres_step_report(&cg, 1, (double) (T0 + 60 * MS), NRES_OK, 0, -1, &st);
  act = nres_step_sync_report(&cs, 1, (double) (T0 + 60 * MS), NRES_OK, 0, -1,
                              &at);
  same_action(&st, act, at, "the hedge's report");
  assert_int_equal(st.kind, NRES_DONE);
  assert_int_equal(st.stop, NRES_STOP_OK);
  nres_step_report(&cg, 0, (double) (T0 + 70 * MS), NRES_TRANSIENT, 0, -1, &st);
  act = nres_step_sync_report(&cs, 0, (double) (T0 + 70 * MS), NRES_TRANSIENT,
                              0, -1, &at);
  same_action(&st, act, at, "the loser's late report");
  same_call(&cg, &cs);
  nres_policy_counters(&pg, &cgc);
  nres_policy_counters(&ps, &csc);
  assert_int_equal(cgc.late, 1);
  assert_int_equal(csc.late, 1);
  assert_int_equal(cgc.hedges, 1);
  assert_int_equal(csc.hedges, 1);
}

/* A kind out of range is a junk verdict whatever its low byte: kind 256
 * is not OK, kind 257 not TRANSIENT (the verdict keeps the kind in a
 * byte). Both steps leave the attempt in flight, as for kind 9. */
static void steps_refuse_a_kind_out_of_range_whatever_its_low_byte(void **state) {
  static const int kinds[] = { 256, 256 + NRES_TRANSIENT, -256, 0x7fffff00 };
  nres_policy_t pg, ps;
  nres_call_t cg, cs;
  nres_step_t st;
  double at;
  int act;
  (void) state;

  build_pair(&pg, &ps, NRES_PRESET_DEFAULT, 0);
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    nres_step_begin_class(&cg, &pg, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
    act = nres_step_sync_begin(&cs, &ps, (double) T0, NRES_CLASS_DEFAULT, &at);
    nres_step_report(&cg, 0, (double) T0 + MS, kinds[i], 0, -1, &st);
    act = nres_step_sync_report(&cs, 0, (double) T0 + MS, kinds[i], 0, -1, &at);
    same_action(&st, act, at, "kind out of range");
    assert_int_not_equal(st.kind, NRES_DONE);
    assert_int_equal(cg.attempts, 1);
    assert_int_equal(cg.inflight, 1);
    assert_int_equal(cs.inflight, 1);
    nres_step_cancel(&cg, (double) T0 + MS, &st);
    nres_step_cancel(&cs, (double) T0 + MS, &st);
  }
}

/* Flag bits a caller may not set are dropped: -1 with a retry-after
 * made 0xff, the log's mark of an abandoned attempt. */
static void steps_keep_only_the_callers_flags(void **state) {
  static const struct { int flags; uint8_t kept; } cases[] = {
    { -1, NRES_VF_SELF | NRES_VF_TIMEOUT | NRES_VF_RETRY_AFTER },
    { 0x100 | NRES_VF_TIMEOUT, NRES_VF_TIMEOUT | NRES_VF_RETRY_AFTER },
    { 0xf8, NRES_VF_RETRY_AFTER },
  };
  nres_policy_t pg, ps;
  nres_call_t cg, cs;
  nres_step_t st;
  double at;
  (void) state;

  build_pair(&pg, &ps, NRES_PRESET_DEFAULT, 0);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    nres_step_begin_class(&cg, &pg, (double) T0, -1, NRES_CLASS_DEFAULT, &st);
    nres_step_sync_begin(&cs, &ps, (double) T0, NRES_CLASS_DEFAULT, &at);
    nres_step_report(&cg, 0, (double) T0 + MS, NRES_THROTTLED, cases[i].flags,
                     5.0 * MS, &st);
    nres_step_sync_report(&cs, 0, (double) T0 + MS, NRES_THROTTLED,
                          cases[i].flags, 5.0 * MS, &at);
    assert_int_equal(cg.last.flags, cases[i].kept);
    assert_int_equal(cs.last.flags, cases[i].kept);
    assert_int_equal(nres_call_log(&cg, 0)->flags, cases[i].kept);
    assert_int_equal(nres_call_log(&cs, 0)->flags, cases[i].kept);
    nres_step_cancel(&cg, (double) T0 + MS, &st);
    nres_step_cancel(&cs, (double) T0 + MS, &st);
  }
}

/* now < 0: the steps read nres_clock_now themselves. */
static void sync_steps_read_the_runtime_clock_when_now_is_negative(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_time_t before, after;
  double at;
  int act;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  before = nres_clock_now();
  act = nres_step_sync_begin(&call, &p, -1, NRES_CLASS_DEFAULT, &at);
  after = nres_clock_now();
  assert_int_equal(act & 0xff, NRES_ATTEMPT);
  assert_true(call.start >= before && call.start <= after);
  /* The attempt's deadline: the default's attempt timeout from then. */
  assert_true(at == (double) (call.start + p.attempt_timeout));
  before = nres_clock_now();
  act = nres_step_sync_report(&call, 0, -1, NRES_OK, 0, -1, &at);
  after = nres_clock_now();
  assert_int_equal(act & 0xff, NRES_DONE);
  assert_int_equal(act >> 24 & 0xff, NRES_STOP_OK);
  assert_true(at == -1);
  assert_true(nres_call_log(&call, 0)->end >= before &&
              nres_call_log(&call, 0)->end <= after);
}

/* A success is dated at its end. Successes of 150 ms, 2000 in flight on
 * one thread (as in an nginx worker), and a fast failure for every fifth:
 * the default breaker (90 % over 100 ms) stays closed. Dated at their
 * start (an untimed success, tried and reverted), the successes had left
 * the window before they were counted: it held 10 calls, 9 failures, and
 * opened. */
static void sync_steps_date_a_success_at_its_end(void **state) {
  static nres_call_t calls[2000];
  nres_policy_t p;
  nres_call_t f;
  nres_step_t st;
  uint32_t c, failures, slow;
  nres_time_t end;
  double at;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  p.throttle = NULL;
  p.budget = NULL;
  assert_int_equal(nres_policy_build(&p), 0);
  for (int i = 0; i < 2000; i++)
    assert_int_equal(nres_step_sync_begin(&calls[i], &p, -1,
                                          NRES_CLASS_DEFAULT, &at) & 0xff,
                     NRES_ATTEMPT);
  nres_step_sleep(150.0 * MS);
  for (int i = 0; i < 2000; i++) {
    nres_step_sync_report(&calls[i], 0, -1, NRES_OK, 0, -1, &at);
    if (i % 5 == 0 && (nres_step_sync_begin(&f, &p, -1, NRES_CLASS_DEFAULT,
                                            &at) & 0xff) == NRES_ATTEMPT) {
      nres_step_sync_report(&f, 0, -1, NRES_TRANSIENT, 0, -1, &at);
      nres_step_cancel(&f, (double) nres_clock_now(), &st);
    }
  }
  /* Read at the last success's end, not later: a thread descheduled for
   * 100 ms here would find the window empty. */
  end = nres_call_log(&calls[1999], 0)->end;
  nres_window_sum(&p.breaker->window, end, &c, &failures, &slow);
  assert_true(c > 0 && failures * 2 < c);
  assert_int_equal(nres_breaker_state(p.breaker, end), NRES_BREAKER_CLOSED);
}

/* Every success's latency is a sample: one call in six takes 2 ms, so the
 * p99 is at least that. Timing only the first call begun a millisecond
 * after the last timed one (tried and reverted) never sampled the slow
 * call, which always followed a quick one by microseconds: p99 5.9 us. */
static void sync_steps_sample_every_success(void **state) {
  nres_policy_t p;
  nres_call_t call;
  uint64_t n = 0;
  nres_time_t p99;
  double at;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  for (int i = 0; i < 100; i++) {
    nres_step_sync_begin(&call, &p, -1, NRES_CLASS_DEFAULT, &at);
    nres_step_sleep(2.0 * MS);
    nres_step_sync_report(&call, 0, -1, NRES_OK, 0, -1, &at);
    for (int j = 0; j < 5; j++) {
      nres_step_sync_begin(&call, &p, -1, NRES_CLASS_DEFAULT, &at);
      nres_step_sync_report(&call, 0, -1, NRES_OK, 0, -1, &at);
    }
  }
  p99 = nres_estimator_quantile(p.estimator, nres_clock_now(), 0.99, &n);
  assert_int_equal(n, 600);
  assert_true(p99 >= 2 * MS);
}

/* Steady state: a call through the sync steps allocates nothing. */
static void sync_steps_allocate_nothing(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_step_t st;
  double at;
  int act;
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_DEFAULT), 0);
  assert_int_equal(nres_policy_build(&p), 0);
  test_count_allocations();
  for (int i = 0; i < 1000; i++) {
    act = nres_step_sync_begin(&call, &p, -1, NRES_CLASS_DEFAULT, &at);
    act = nres_step_sync_report(&call, (unsigned) (act >> 8 & 0xff), -1,
                                i % 3 ? NRES_OK : NRES_TRANSIENT, 0, -1, &at);
    if ((act & 0xff) != NRES_DONE)
      nres_step_cancel(&call, (double) nres_clock_now(), &st);
  }
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
}

/* nres_step_log: the last min(attempts, NRES_LOG_CAP) attempts, oldest
 * first, and the last verdict's flags, as doubles. */
static void step_log_reads_the_last_attempts_as_doubles(void **state) {
  nres_policy_t p;
  nres_call_t call;
  nres_step_t st;
  double out[NRES_STEP_LOG_SIZE];
  (void) state;

  assert_int_equal(nres_policy_init(&p, NRES_PRESET_TRIVIAL), 0);
  p.attempts = 10;
  assert_int_equal(nres_policy_build(&p), 0);
  nres_step_begin(&call, &p, (double) T0, -1, &st);
  for (int k = 0; k < 10; k++)
    nres_step_report(&call, (unsigned) st.slot, (double) (T0 + (k + 1) * MS),
                     NRES_TRANSIENT, NRES_VF_TIMEOUT, -1, &st);
  assert_int_equal(st.kind, NRES_DONE);
  assert_int_equal(nres_step_log(&call, out), NRES_LOG_CAP);
  assert_true(out[0] == NRES_LOG_CAP);
  assert_true(out[1] == NRES_VF_TIMEOUT);
  for (int k = 0; k < NRES_LOG_CAP; k++) {
    const double *e = out + 2 + k * NRES_STEP_LOG_FIELDS;
    assert_true(e[0] == 3 + k);                     /* attempts 3..10 */
    assert_true(e[1] == 0 && e[2] == NRES_TRANSIENT && e[3] == NRES_VF_TIMEOUT);
    assert_true(e[4] == (double) (T0 + (2 + k) * MS));
    assert_true(e[5] == (double) (T0 + (3 + k) * MS));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(sync_steps_answer_what_the_general_steps_answer),
    cmocka_unit_test(sync_steps_record_what_the_general_steps_record),
    cmocka_unit_test(sync_steps_answer_misuse_as_the_general_steps_do),
    cmocka_unit_test(sync_steps_answer_a_hedge_in_slot_1_as_the_general_steps_do),
    cmocka_unit_test(steps_refuse_a_kind_out_of_range_whatever_its_low_byte),
    cmocka_unit_test(steps_keep_only_the_callers_flags),
    cmocka_unit_test(sync_steps_read_the_runtime_clock_when_now_is_negative),
    cmocka_unit_test(sync_steps_date_a_success_at_its_end),
    cmocka_unit_test(sync_steps_sample_every_success),
    cmocka_unit_test(sync_steps_allocate_nothing),
    cmocka_unit_test(step_log_reads_the_last_attempts_as_doubles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* fuzz_policy.c - libFuzzer target for nres_policy_build and the flat
 * executor it configures (nres_call_begin/report/resume/cancel).
 *
 * The bytes set every public field of a policy (durations that are 0, the
 * end of time or NRES_TIME_INVALID, doubles that are NaN, infinite, tiny
 * or huge, enums out of range) and of the shared state it may point at (a
 * budget, a breaker, a rate limiter, a bulkhead, an estimator: off, the
 * policy's own, or one made from the bytes, including configurations that
 * their init refuses). The build must agree with nres_policy_error. A
 * refused policy must end every call at once. A built one runs a few calls
 * on a virtual clock, every verdict, latency, Retry-After, hedge time,
 * misuse and cancellation taken from the bytes, and each call must keep
 * the executor's promises: attempts never above the policy's, never two in
 * one slot, never more in flight than hedging allows, every attempt in
 * flight either reported or handed back for abandoning when the call ends,
 * a valid stop reason that agrees with the last verdict, a late or bogus
 * report that changes nothing, counters that add up. When the bytes run
 * out every attempt succeeds, so each call ends.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres.h"
#include "fuzz_input.h"

/* Far more steps than any call of a well-behaved executor takes: each
 * step but a wait consumes input, and waits end in an admission. */
#define STEP_MAX 100000
#define END_OF_TIME ((nres_time_t) 1 << 63)

typedef struct {
  nres_policy_t policy;
  nres_budget_t budget;
  nres_breaker_t breaker;
  nres_ratelimit_t ratelimit;
  nres_bulkhead_t bulkhead;
  nres_estimator_t estimator;
  /* what the listener saw */
  uint64_t events;
  uint64_t done_events;
} world_t;

static world_t w;   /* static: the estimators are a few KB each */

static uint8_t fuzz_enum(fuzz_in_t *in) {
  uint8_t b = fuzz_u8(in);
  return b < 0xf0 ? b % 6 : b;   /* mostly 0..5, sometimes far out */
}

static void on_event(const nres_event_t *ev, void *data) {
  world_t *world = data;
  FUZZ_CHECK(world == &w);
  FUZZ_CHECK(ev->type <= NRES_EV_DONE);
  FUZZ_CHECK(ev->call != NULL && ev->call->policy == &w.policy);
  FUZZ_CHECK(ev->attempt <= w.policy.attempts);
  if (ev->type == NRES_EV_ATTEMPT)
    FUZZ_CHECK(ev->value < NRES_VERDICT_COUNT);
  if (ev->type == NRES_EV_REJECT)
    FUZZ_CHECK(ev->value < NRES_REJECT_COUNT);
  if (ev->type == NRES_EV_BREAKER)
    FUZZ_CHECK(ev->value <= NRES_BREAKER_ISOLATED);
  if (ev->type == NRES_EV_DONE) {
    FUZZ_CHECK(ev->value > NRES_STOP_NONE && ev->value < NRES_STOP_COUNT);
    world->done_events++;
  }
  world->events++;
}

/* --------------------------------------------------------- configuration */

static void fill_backoff(fuzz_in_t *in, nres_backoff_t *b) {
  b->kind = fuzz_enum(in);
  b->jitter = fuzz_enum(in);
  b->factor = fuzz_double(in);
  b->base = fuzz_duration(in);
  b->max = fuzz_duration(in);
  b->throttled_base = fuzz_duration(in);
}

static void fill_breaker_config(fuzz_in_t *in, nres_breaker_config_t *c) {
  nres_breaker_config_init(c);
  if (fuzz_u8(in) & 1)
    return;   /* the defaults */
  c->consecutive = fuzz_count(in);
  c->min_calls = fuzz_count(in);
  c->failure_ratio = fuzz_double(in);
  c->slow_ratio = fuzz_double(in);
  c->window = fuzz_duration(in);
  c->buckets = fuzz_count(in);
  c->probes = fuzz_count(in);
  c->success_threshold = fuzz_count(in);
  c->break_for = fuzz_duration(in);
  c->break_max = fuzz_duration(in);
  c->break_jitter = fuzz_double(in);
}

static void fill_bulkhead_config(fuzz_in_t *in, nres_bulkhead_config_t *c) {
  nres_bulkhead_config_init(c);
  if (fuzz_u8(in) & 1)
    return;
  c->limit = fuzz_count(in);
  c->queue = fuzz_count(in);
  c->queue_timeout = fuzz_duration(in);
  c->poll = fuzz_duration(in);
  c->adaptive = fuzz_count(in);
  c->min_limit = fuzz_count(in);
  c->max_limit = fuzz_count(in);
  c->latency_target = fuzz_duration(in);
  c->decrease = fuzz_double(in);
}

/* Shared state: 0 off, 1 the policy's own (as the preset left it), 2 made
 * from the bytes. A configuration its init refuses is left in place raw,
 * so the build has to refuse it. */
static void fill_shared(fuzz_in_t *in, nres_policy_t *p) {
  uint8_t sel = fuzz_u8(in);
  int rc;

  switch (sel & 3) {
    case 0: p->budget = NULL; break;
    case 1: p->budget = &p->own.budget; break;
    default: {
      double ratio = fuzz_double(in), floor = fuzz_double(in),
             capacity = fuzz_double(in);
      p->budget = nres_budget_init(&w.budget, ratio, floor, capacity) == 0
                      ? &w.budget : NULL;
    }
  }
  switch ((sel >> 2) & 3) {
    case 0: p->breaker = NULL; break;
    case 1: p->breaker = &p->own.breaker; break;
    default: {
      nres_breaker_config_t c;
      fill_breaker_config(in, &c);
      rc = nres_breaker_init(&w.breaker, &c);
      FUZZ_CHECK((rc == 0) == (nres_breaker_config_error(&c) == NULL));
      if (rc != 0)
        w.breaker.config = c;
      p->breaker = &w.breaker;
    }
  }
  if ((sel >> 4) & 1) {
    double rate = fuzz_double(in);
    uint32_t burst = fuzz_count(in);
    p->ratelimit = nres_ratelimit_init(&w.ratelimit, rate, burst) == 0
                       ? &w.ratelimit : NULL;
  } else {
    p->ratelimit = NULL;
  }
  if ((sel >> 5) & 1) {
    nres_bulkhead_config_t c;
    fill_bulkhead_config(in, &c);
    rc = nres_bulkhead_init(&w.bulkhead, &c);
    FUZZ_CHECK((rc == 0) == (nres_bulkhead_config_error(&c) == NULL));
    if (rc != 0)
      w.bulkhead.config = c;
    p->bulkhead = &w.bulkhead;
  } else {
    p->bulkhead = NULL;
  }
  switch ((sel >> 6) & 3) {
    case 0: p->estimator = NULL; break;
    case 1: p->estimator = &p->own.estimator; break;
    default: {
      nres_time_t period = fuzz_duration(in);
      if (nres_estimator_init(&w.estimator, period) != 0)
        w.estimator.period = period;
      p->estimator = &w.estimator;
    }
  }
}

static void fill_policy(fuzz_in_t *in, nres_policy_t *p) {
  int preset = fuzz_u8(in) % 4;   /* 3: not a preset */

  if (nres_policy_init(p, preset) != 0) {
    FUZZ_CHECK(preset > NRES_PRESET_DEFAULT);
    FUZZ_CHECK(nres_policy_init(p, NRES_PRESET_NONE) == 0);
  }
  p->attempts = fuzz_count(in);
  p->telemetry = fuzz_count(in);
  fill_backoff(in, &p->backoff);
  p->deadline = fuzz_duration(in);
  p->attempt_timeout = fuzz_duration(in);
  p->ceiling_factor = fuzz_double(in);
  p->ceiling_quantile = fuzz_double(in);
  p->ceiling_floor = fuzz_duration(in);
  p->min_samples = fuzz_count(in);
  p->slow_threshold = fuzz_duration(in);
  p->slow_factor = fuzz_double(in);
  p->limit_wait = fuzz_duration(in);
  p->fallback = fuzz_count(in);
  p->seed = fuzz_u64(in);
  p->hedge.max = fuzz_count(in);
  p->hedge.min_samples = fuzz_count(in);
  p->hedge.delay = fuzz_duration(in);
  p->hedge.quantile = fuzz_double(in);
  p->hedge.suppress_ratio = fuzz_double(in);
  switch (fuzz_u8(in) % 3) {
    case 0: break;   /* as init left it: 10 s in 10 buckets */
    case 1: {
      nres_time_t span = fuzz_duration(in);
      uint32_t buckets = fuzz_count(in);
      if (nres_window_init(&p->hedge.window, span, buckets) != 0) {
        p->hedge.window.width = span;   /* raw: the build must refuse */
        p->hedge.window.count = buckets;
      }
      break;
    }
    default:
      memset(&p->hedge.window, 0, sizeof(p->hedge.window));
  }
  fill_shared(in, p);
  if (fuzz_u8(in) & 1) {
    p->on_event = on_event;
    p->event_data = &w;
  }
}

/* ------------------------------------------------------------------ calls */

static nres_verdict_t fuzz_verdict(fuzz_in_t *in) {
  uint8_t b = fuzz_u8(in);
  nres_verdict_t v = nres_verdict((b & 7) % NRES_VERDICT_COUNT);
  v.flags = (uint8_t) ((b >> 3) & 7);
  v.code = (int32_t) fuzz_u8(in) + 200;
  if (v.flags & NRES_VF_RETRY_AFTER)
    v.retry_after = fuzz_duration(in);
  return v;
}

/* A report the executor must ignore: a slot with nothing in flight, one
 * out of range, or a verdict kind out of range. The call must not change;
 * the pending action comes back. */
static nres_action_t bogus_report(fuzz_in_t *in, nres_call_t *call,
                                  nres_time_t now) {
  nres_call_t before = *call;
  nres_verdict_t v = nres_verdict(NRES_OK);
  uint8_t b = fuzz_u8(in);
  unsigned slot = b % 8;
  nres_action_t a;

  if (slot < NRES_MAX_INFLIGHT && (call->inflight & (1u << slot)))
    v.kind = (uint8_t) (NRES_VERDICT_COUNT + (b >> 3));   /* bad kind */
  a = nres_call_report(call, slot, now, v);
  FUZZ_CHECK(memcmp(&before, call, sizeof(before)) == 0);
  FUZZ_CHECK(a.kind == NRES_WAIT || a.kind == NRES_DONE);
  FUZZ_CHECK(a.cancel == 0);
  return a;
}

/* One call driven to its end, on the clock *clock (advanced). */
static void run_call(fuzz_in_t *in, nres_policy_t *p, nres_time_t *clock) {
  nres_call_t call;
  nres_time_t now = *clock;
  nres_action_t a;
  unsigned mine = 0, started = 0, steps = 0, inflight_max, others = 0;
  uint8_t how = fuzz_u8(in);

  inflight_max = p->hedge.max > 1 ? p->hedge.max : 1;
  /* Other callers may hold bulkhead slots when this call begins, and let
   * them go as it runs: the way to its queue. */
  if (p->bulkhead != NULL) {
    unsigned want = (how >> 1) & 7;
    while (others < want && nres_bulkhead_acquire(p->bulkhead, 0) == 0)
      others++;
  }
  if (how & 1)
    a = nres_call_begin_within(&call, p, now,
                               nres_time_add(now, fuzz_duration(in)));
  else
    a = nres_call_begin(&call, p, now);

  for (;;) {
    uint8_t op;

    FUZZ_CHECK(++steps < STEP_MAX);
    FUZZ_CHECK((a.cancel & ~mine) == 0);   /* only attempts in flight */
    mine &= ~(unsigned) a.cancel;
    if (a.kind == NRES_DONE)
      break;
    FUZZ_CHECK(call.stop == NRES_STOP_NONE);
    if (a.kind == NRES_ATTEMPT) {
      FUZZ_CHECK(a.slot < NRES_MAX_INFLIGHT);
      FUZZ_CHECK(!(mine & (1u << a.slot)));
      mine |= 1u << a.slot;
      started++;
      FUZZ_CHECK(a.attempt == started && call.attempts == started);
      FUZZ_CHECK(started <= p->attempts);
      FUZZ_CHECK((unsigned) __builtin_popcount(mine) <= inflight_max);
      FUZZ_CHECK(!a.hedge || p->hedge.max > 1);
    } else {
      FUZZ_CHECK(a.kind == NRES_WAIT);
      /* A wait for nothing, forever, would hang the driver; only at the
       * end of time (a clock past 2^63 ns, 292 years) may every wait
       * saturate to it. */
      FUZZ_CHECK(a.at != NRES_TIME_NEVER || mine != 0 || now >= END_OF_TIME);
    }
    FUZZ_CHECK(call.inflight == mine);

    op = fuzz_u8(in);
    if (others > 0 && ((op & 0xf0) == 0xe0 || !fuzz_more(in))) {
      nres_bulkhead_release(p->bulkhead, 0, -1);   /* another call ends */
      others--;
    }
    if (op >= 0xf8 ||                        /* the caller gives up */
        (a.kind == NRES_WAIT && a.at == NRES_TIME_NEVER && mine == 0)) {
      a = nres_call_cancel(&call, now);
      FUZZ_CHECK(a.kind == NRES_DONE && a.stop == NRES_STOP_CANCELED);
      continue;
    }
    if (op >= 0xf0) {
      a = bogus_report(in, &call, now);
      continue;
    }
    if (a.kind == NRES_WAIT && a.at != NRES_TIME_NEVER &&
        (mine == 0 || (op & 1))) {
      if (a.at > now)
        now = a.at;
      a = nres_call_resume(&call, now);
    } else if (mine != 0 && !(call.resume_at != NRES_TIME_NEVER && (op & 2))) {
      unsigned slot = (unsigned) __builtin_ctz(mine);
      unsigned k = (op >> 2) & 3;
      while (k-- > 0) {                      /* rotate to another slot */
        do
          slot = (slot + 1) % NRES_MAX_INFLIGHT;
        while (!(mine & (1u << slot)));
      }
      now = nres_time_add(now, fuzz_duration(in));
      mine &= ~(1u << slot);
      a = nres_call_report(&call, slot, now, fuzz_verdict(in));
    } else {
      /* A hedge time, or a resume before it is due. */
      nres_time_t at = call.resume_at != NRES_TIME_NEVER ? call.resume_at : now;
      if ((op & 4) == 0 && at > now)
        now = at;
      a = nres_call_resume(&call, now);
    }
  }

  FUZZ_CHECK(a.stop > NRES_STOP_NONE && a.stop < NRES_STOP_COUNT);
  FUZZ_CHECK(a.stop == call.stop);
  FUZZ_CHECK(mine == 0 && call.inflight == 0);   /* nothing left behind */
  FUZZ_CHECK(call.attempts == started && started <= p->attempts);
  if (a.stop == NRES_STOP_OK)
    FUZZ_CHECK(call.last.kind == NRES_OK);
  if (a.stop == NRES_STOP_ATTEMPTS)
    FUZZ_CHECK(call.attempts == p->attempts);
  FUZZ_CHECK(a.fallback == call.fallback);
  FUZZ_CHECK(!a.fallback || (p->fallback && a.stop != NRES_STOP_OK &&
                             a.stop != NRES_STOP_CANCELED));
  /* A finished call stays finished. */
  a = nres_call_cancel(&call, now);
  FUZZ_CHECK(a.kind == NRES_DONE && a.stop == call.stop);
  while (others-- > 0)
    nres_bulkhead_release(p->bulkhead, 0, -1);
  if (p->bulkhead != NULL) {   /* every slot and queue place given back */
    nres_bulkhead_stats_t st;
    nres_bulkhead_stats(p->bulkhead, &st);
    FUZZ_CHECK(st.inflight == 0 && st.waiting == 0);
  }
  *clock = now;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nres_policy_t *p = &w.policy;
  nres_counters_t counters;
  nres_time_t clock;
  fuzz_in_t in;
  const char *why;
  unsigned calls, i, k;
  uint64_t stops = 0;
  int rc;

  memset(&w, 0, sizeof(w));
  fuzz_in_init(&in, data, size);
  fill_policy(&in, p);

  why = nres_policy_error(p);
  rc = nres_policy_build(p);
  FUZZ_CHECK(rc == 0 || rc == NRES_EINVAL);
  FUZZ_CHECK((rc == 0) == (why == NULL));
  FUZZ_CHECK(why == NULL || strchr(why, ':') != NULL);   /* "field: rule" */
  if (rc != 0) {
    nres_call_t call;
    nres_action_t a = nres_call_begin(&call, p, 0);
    FUZZ_CHECK(a.kind == NRES_DONE && a.stop == NRES_STOP_NONE);
    return 0;
  }
  /* What the build accepted, the state it points at accepts too. */
  if (p->breaker != NULL)
    FUZZ_CHECK(nres_breaker_config_error(&p->breaker->config) == NULL);
  if (p->bulkhead != NULL)
    FUZZ_CHECK(nres_bulkhead_config_error(&p->bulkhead->config) == NULL);
  FUZZ_CHECK(p->attempts >= 1 && p->attempts <= 65535);

  clock = fuzz_duration(&in);
  calls = fuzz_u8(&in) % 4 + 1;
  for (i = 0; i < calls; i++) {
    uint8_t drain = fuzz_u8(&in);
    nres_policy_drain(p, drain == 0xd5);
    run_call(&in, p, &clock);
  }

  nres_policy_counters(p, &counters);
  for (k = 0; k < NRES_STOP_COUNT; k++)
    stops += counters.stops[k];
  if (p->telemetry) {
    FUZZ_CHECK(counters.calls == calls && stops == calls);
    FUZZ_CHECK(counters.stops[NRES_STOP_NONE] == 0);
  }
  if (p->on_event != NULL)
    FUZZ_CHECK(w.done_events == calls);
  return 0;
}

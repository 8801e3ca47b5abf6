/* SPDX-License-Identifier: MIT */
/* policy.c - presets, validation and telemetry of a policy.
 *
 * A policy is configuration plus counters. nres_policy_init fills in a
 * preset, the caller adjusts public fields, and nres_policy_build checks
 * them and derives the flags the executor branches on, so the per-call path
 * never re-examines the configuration. Counters are relaxed atomics read
 * without locks; calls and attempts are derived from them at read time so
 * the hot path bumps as few shared words as possible.
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "core/breaker.h"
#include "core/policy.h"

/* The default preset's throttle.k and fast_failure (policies/default.lua
 * says why). */
#define THROTTLE_K 1.03
#define THROTTLE_FAST_FAILURE 0.1

static int ratio_ok(double r, int zero_ok) {
  return isfinite(r) && r <= 1 && (r > 0 || (zero_ok && r == 0));
}

int nres_policy_init(nres_policy_t *policy, int preset) {
  nres_breaker_config_t breaker;

  if (policy == NULL || preset < NRES_PRESET_NONE || preset > NRES_PRESET_DEFAULT)
    return NRES_EINVAL;
  memset(policy, 0, sizeof(*policy));
  policy->attempts = preset == NRES_PRESET_NONE ? 1 : 3;
  policy->telemetry = preset != NRES_PRESET_NONE;
  policy->backoff.kind = NRES_BACKOFF_NONE;
  policy->backoff.factor = 2;
  policy->ceiling_quantile = 0.95;
  policy->ceiling_floor = 50 * NRES_MSEC;
  policy->min_samples = 20;
  policy->slow_factor = 3;
  policy->seed = 0x6e726573u;   /* "nres" */
  policy->hedge.min_samples = 20;
  policy->hedge.quantile = 0.95;
  policy->hedge.suppress_ratio = 0.5;
  nres_window_init(&policy->hedge.window, 10 * NRES_SEC, 10);
  nres_estimator_init(&policy->own.estimator, 30 * NRES_SEC);

  if (preset == NRES_PRESET_DEFAULT) {
    nres_backoff_init(&policy->backoff);
    policy->deadline = 30 * NRES_SEC;
    policy->attempt_timeout = 10 * NRES_SEC;
    /* The values of policies/default.lua, chosen by bench/tournament.lua
     * (the reasons are there, one per field): cut hung attempts, not
     * queues; open for an outage, not for a busy dependency; probe every
     * 0.55 s instead of doubling a long break; send an overloaded
     * dependency about THROTTLE_K x what it accepts. */
    policy->ceiling_factor = 5;
    policy->ceiling_quantile = 0.99;
    policy->ceiling_floor = 250 * NRES_MSEC;
    policy->min_samples = 100;
    nres_budget_init(&policy->own.budget, 0.1, 3, 0);
    nres_breaker_config_init(&breaker);
    breaker.consecutive = 20;
    breaker.failure_ratio = 0.9;
    breaker.window = 100 * NRES_MSEC;
    breaker.buckets = 4;
    breaker.min_calls = 8;
    breaker.break_for = 550 * NRES_MSEC;
    breaker.break_max = 550 * NRES_MSEC;
    nres_breaker_init(&policy->own.breaker, &breaker);
    nres_throttle_init(&policy->own.throttle, THROTTLE_K, 300 * NRES_MSEC, 8);
    policy->own.throttle.fast_failure = THROTTLE_FAST_FAILURE;
    policy->budget = &policy->own.budget;
    policy->breaker = &policy->own.breaker;
    policy->throttle = &policy->own.throttle;
    policy->estimator = &policy->own.estimator;
  }
  return 0;
}

/* A duration that is no duration: NaN or a negative number converted
 * (NRES_TIME_INVALID), or a negative number assigned as it is, which wraps
 * to 2^63 ns or more (NRES_TIME_WRAPPED; NRES_TIME_NEVER, -1 too, is
 * "never"). */
static int invalid(nres_time_t t) {
  return t == NRES_TIME_INVALID ||
         (t >= NRES_TIME_WRAPPED && t != NRES_TIME_NEVER);
}

/* The rules nres.h states for nres_policy_build, in its order; the first
 * broken one is the answer. Durations are only compared with each other
 * here: huge ones saturate where they are used, so only the value that
 * stands for NaN or a negative number needs refusing. */
/* What is wrong with a policy's shadow candidate (nres_policy_shadow). */
static const char *shadow_error(const nres_policy_t *policy) {
  const nres_policy_t *c = policy->shadow;

  if (c == NULL)
    return NULL;
  if (c == policy)
    return "shadow: expected another policy, got the policy itself";
  if (c->private_magic != NRES__POLICY_MAGIC)
    return "shadow: expected a built policy, got one not built";
  if (c->shadow != NULL)
    return "shadow: expected a policy without a shadow, got one with its own";
  return NULL;
}

const char *nres_policy_error(const nres_policy_t *policy) {
  const nres_hedge_t *hedge;
  const char *why;

  if (policy == NULL)
    return "policy: NULL";
  hedge = &policy->hedge;
  if (policy->attempts < 1 || policy->attempts > UINT16_MAX)
    return "attempts: must be 1..65535";
  if (invalid(policy->deadline))
    return "deadline: not a number or negative";
  if (invalid(policy->attempt_timeout))
    return "attempt_timeout: not a number or negative";
  if (policy->deadline && policy->attempt_timeout > policy->deadline)
    return "attempt_timeout: exceeds deadline";
  if ((why = nres_backoff_error(&policy->backoff)) != NULL)
    return why;
  if (!isfinite(policy->ceiling_factor) || policy->ceiling_factor < 0)
    return "ceiling_factor: must be finite and >= 0";
  if (invalid(policy->ceiling_floor))
    return "ceiling_floor: not a number or negative";
  if (policy->ceiling_factor > 0 && !ratio_ok(policy->ceiling_quantile, 0))
    return "ceiling_quantile: must be in (0, 1] with ceiling_factor";
  if (policy->ceiling_factor > 0 && policy->estimator == NULL)
    return "estimator: needed by ceiling_factor";
  if (invalid(policy->slow_threshold))
    return "slow_threshold: not a number or negative";
  if (invalid(policy->limit_wait))
    return "limit_wait: not a number or negative";
  if (hedge->max > NRES_MAX_INFLIGHT)
    return "hedge.max: above NRES_MAX_INFLIGHT (4)";
  if (!ratio_ok(hedge->suppress_ratio, 1))
    return "hedge.suppress_ratio: must be in [0, 1]";
  if (invalid(hedge->delay))
    return "hedge.delay: not a number or negative";
  if (hedge->max > 1 && hedge->delay == 0 && !ratio_ok(hedge->quantile, 0))
    return "hedge.quantile: must be in (0, 1] with hedge.delay 0";
  if (hedge->max > 1 && hedge->delay == 0 && policy->estimator == NULL)
    return "estimator: needed by hedging with hedge.delay 0";
  if (hedge->max > 1 &&
      (hedge->window.width == 0 || hedge->window.count < 1 ||
       hedge->window.count > NRES_WINDOW_MAX_BUCKETS))
    return "hedge.window: not initialised";
  if (policy->breaker != NULL) {
    if ((why = nres_breaker_config_error(&policy->breaker->config)) != NULL)
      return why;
    if (policy->breaker->config.slow_ratio > 0 &&
        policy->slow_threshold == 0) {
      if (!(policy->slow_factor > 0) || !isfinite(policy->slow_factor))
        return "slow_factor: must be finite and > 0 with breaker.slow_ratio";
      if (policy->estimator == NULL)
        return "estimator: needed by breaker.slow_ratio with slow_threshold 0";
    }
  }
  if (policy->throttle != NULL &&
      (why = nres_throttle_error(policy->throttle->k,
                                 policy->throttle->window.width *
                                     policy->throttle->window.count,
                                 policy->throttle->window.count)) != NULL)
    return why;
  if (policy->throttle != NULL && policy->throttle->fast_failure != 0) {
    if (!(policy->throttle->fast_failure > 0 &&
          policy->throttle->fast_failure < 1))
      return "throttle.fast_failure: must be a fraction in [0, 1)";
    if (policy->estimator == NULL)
      return "estimator: needed by throttle.fast_failure";
  }
  if (policy->bulkhead != NULL &&
      (why = nres_bulkhead_config_error(&policy->bulkhead->config)) != NULL)
    return why;
  if (policy->estimator != NULL &&
      (policy->estimator->period == 0 ||
       policy->estimator->period == NRES_TIME_INVALID))
    return "estimator.period: must be > 0";
  return shadow_error(policy);
}

int nres_policy_build(nres_policy_t *policy) {
  uint32_t flags = 0;
  const nres_hedge_t *hedge;

  if (nres_policy_error(policy) != NULL) {
    if (policy != NULL)
      policy->private_magic = 0;   /* calls on it end at once */
    return NRES_EINVAL;
  }
  hedge = &policy->hedge;

  if (policy->telemetry)
    flags |= NRES__F_TELEMETRY;
  if (policy->deadline || policy->attempt_timeout || policy->ceiling_factor > 0)
    flags |= NRES__F_BOUNDED;
  if (policy->ceiling_factor > 0)
    flags |= NRES__F_CEILING;
  if (hedge->max > 1)
    flags |= NRES__F_HEDGE;
  if (policy->breaker != NULL && policy->breaker->config.slow_ratio > 0)
    flags |= NRES__F_SLOW;
  if (policy->ratelimit != NULL || policy->bulkhead != NULL)
    flags |= NRES__F_LIMITED;
  if ((flags & NRES__F_LIMITED) || policy->breaker != NULL ||
      policy->throttle != NULL)
    flags |= NRES__F_GATED;
  if (policy->backoff.kind == NRES_BACKOFF_DECORRELATED ||
      (policy->backoff.kind != NRES_BACKOFF_NONE &&
       policy->backoff.jitter != NRES_JITTER_NONE) ||
      (policy->breaker != NULL && policy->breaker->config.break_jitter > 0))
    flags |= NRES__F_DRAWS;
  if (policy->bulkhead != NULL || policy->breaker != NULL ||
      policy->estimator != NULL || policy->throttle != NULL ||
      (flags & NRES__F_HEDGE))
    flags |= NRES__F_RECORDS;
  if (policy->shadow != NULL)   /* exec/shadow.c: record_any tells it */
    flags |= NRES__F_RECORDS;
  if (policy->bulkhead == NULL && policy->shadow == NULL &&
      !(flags & (NRES__F_SLOW | NRES__F_HEDGE)))
    flags |= NRES__F_SHORT_RECORD;
  if (policy->breaker != NULL && nres__breaker_windowed(policy->breaker))
    flags |= NRES__F_BREAKER_WINDOW;
  if ((flags & (NRES__F_CEILING | NRES__F_SLOW)) ||
      ((flags & NRES__F_HEDGE) && hedge->delay == 0))
    flags |= NRES__F_QUANTILES;
  if (policy->shadow != NULL)   /* its calls take the general ways, and */
    flags |= NRES__F_SHADOW | NRES__F_GATED;   /* admission asks it */
  if (!(flags & (NRES__F_BOUNDED | NRES__F_HEDGE | NRES__F_GATED |
                 NRES__F_SHADOW)) &&
      policy->budget == NULL && policy->estimator == NULL &&
      policy->throttle == NULL && policy->on_event == NULL) {
    flags |= NRES__F_TIMELESS;
    if (policy->attempts == 1 && !policy->telemetry && !policy->fallback)
      flags |= NRES__F_PASSTHROUGH;
  }

  policy->private_flags = flags;
  /* The executor's cache of estimator-derived values (exec/call.c): "too
   * few samples" until the first refresh, due at once, has stored its
   * values - a thread that loses the race to refresh reads these. */
  nres__store(&policy->quantile_samples, 0);
  nres__store(&policy->quantile_ceiling, NRES_TIME_NEVER);
  nres__store(&policy->quantile_slow, 0);
  nres__store(&policy->quantile_hedge, NRES_TIME_NEVER);
  nres__store(&policy->quantile_fast, 0);
  nres__store(&policy->quantile_next, 0);
  policy->private_magic = NRES__POLICY_MAGIC;
  return 0;
}

void nres_policy_drain(nres_policy_t *policy, int on) {
  atomic_store_explicit(&policy->draining, on ? 1u : 0u, memory_order_release);
}

int nres_policy_shadow(nres_policy_t *policy, nres_policy_t *candidate) {
  nres_policy_t *was;

  if (policy == NULL)
    return NRES_EINVAL;
  was = policy->shadow;
  policy->shadow = candidate;
  if (nres_policy_error(policy) != NULL) {
    policy->shadow = was;
    return NRES_EINVAL;
  }
  return nres_policy_build(policy);
}

int nres_policy_isolate(nres_policy_t *policy, int on) {
  if (policy == NULL || policy->breaker == NULL)
    return NRES_EINVAL;
  if (on) {
    nres_breaker_isolate(policy->breaker);
    nres__add(&policy->n_isolations, 1);
  } else {
    nres_breaker_reset(policy->breaker);
    nres__add(&policy->n_resets, 1);
  }
  return 0;
}

void nres_policy_counters(const nres_policy_t *policy, nres_counters_t *out) {
  nres_policy_t *p = (nres_policy_t *) policy;   /* loads only */
  uint64_t ok = 0;
  int i;

  memset(out, 0, sizeof(*out));
  for (i = 0; i < NRES_VERDICT_COUNT; i++)
    out->verdicts[i] = nres__load(&p->n_verdicts[i]);
  for (i = 0; i < NRES_STOP_COUNT; i++)
    out->stops[i] = nres__load(&p->n_stops[i]);
  /* The success counters: an OK verdict always ends its call with stop
   * OK, so the executor counts the stop alone (n_ok[].verdicts stays 0). */
  for (i = 0; i < NRES_POLICY_SHARDS; i++)
    ok += nres__load(&p->n_ok[i].stops) + nres__load(&p->n_ok[i].verdicts);
  out->verdicts[NRES_OK] += ok;
  out->stops[NRES_STOP_OK] += ok;
  for (i = 0; i < NRES_VERDICT_COUNT; i++)
    out->attempts += out->verdicts[i];
  for (i = 0; i < NRES_STOP_COUNT; i++)
    out->calls += out->stops[i];
  for (i = 0; i < NRES_REJECT_COUNT; i++)
    out->rejects[i] = nres__load(&p->n_rejects[i]);
  out->retries = nres__load(&p->n_retries);
  out->hedges = nres__load(&p->n_hedges);
  out->abandoned = nres__load(&p->n_abandoned);
  out->attempts += out->abandoned;
  out->fallbacks = nres__load(&p->n_fallbacks);
  out->late = nres__load(&p->n_late);
  out->hedges_won = nres__load(&p->n_hedges_won);
  for (i = 0; i < NRES_CLASS_COUNT; i++)
    out->class_rejects[i] = nres__load(&p->n_class_rejects[i]);
  out->isolations = nres__load(&p->n_isolations);
  out->resets = nres__load(&p->n_resets);
}

void nres_policy_counters_reset(nres_policy_t *policy) {
  int i;

  for (i = 0; i < NRES_VERDICT_COUNT; i++)
    nres__store(&policy->n_verdicts[i], 0);
  for (i = 0; i < NRES_STOP_COUNT; i++)
    nres__store(&policy->n_stops[i], 0);
  for (i = 0; i < NRES_REJECT_COUNT; i++)
    nres__store(&policy->n_rejects[i], 0);
  nres__store(&policy->n_retries, 0);
  nres__store(&policy->n_hedges, 0);
  nres__store(&policy->n_abandoned, 0);
  nres__store(&policy->n_fallbacks, 0);
  nres__store(&policy->n_late, 0);
  nres__store(&policy->n_hedges_won, 0);
  for (i = 0; i < NRES_POLICY_SHARDS; i++) {
    nres__store(&policy->n_ok[i].verdicts, 0);
    nres__store(&policy->n_ok[i].stops, 0);
  }
  for (i = 0; i < NRES_CLASS_COUNT; i++)
    nres__store(&policy->n_class_rejects[i], 0);
  nres__store(&policy->n_isolations, 0);
  nres__store(&policy->n_resets, 0);
}

const char *nres_class_name(int cls) {
  static const char *const names[NRES_CLASS_COUNT] = {
    "critical", "default", "sheddable"
  };
  return cls >= 0 && cls < NRES_CLASS_COUNT ? names[cls] : "unknown";
}

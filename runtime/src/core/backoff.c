/* SPDX-License-Identifier: MIT */
/* backoff.c - how long to wait before retry number n.
 *
 * A pure function of the configuration, the retry number, the verdict, a
 * little per-call memory and a caller-supplied PRNG: no clock, no allocation,
 * no shared state. It is separate from the executor because it is the one
 * place where durations are multiplied by growing factors, so it is the one
 * place that has to prove it cannot overflow, wrap or exceed max however many
 * retries are asked for and whatever the configuration (retry libraries have
 * shipped that bug: Polly's backoff overflowed after 1,025 attempts).
 *
 * Order of operations: a Retry-After answer wins outright (capped at max, no
 * jitter); otherwise a nominal delay d is computed from the kind, capped at
 * max, jittered, and clamped to max again, since jitter may reach past it.
 */
#include <math.h>
#include <float.h>

#include "internal.h"

/* Decorrelated kind ("decorrelated jitter v2"): the curve is
 * f(t) = 2^t * tanh(sqrt(P * t)) at t = (n - 1) + U[0, 1), and the delay is
 * the curve's growth since the previous retry, scaled so that the median
 * first delay is about base. Delays telescope: their sum after n retries is
 * f(t_n) / SCALE * base, a smooth exponential with no clustering. */
#define CURVE_P 4.0
#define CURVE_SCALE 1.4

void nres_backoff_init(nres_backoff_t *backoff) {
  backoff->kind = NRES_BACKOFF_EXPONENTIAL;
  backoff->jitter = NRES_JITTER_FULL;
  for (size_t i = 0; i < sizeof(backoff->reserved_); i++)
    backoff->reserved_[i] = 0;
  backoff->factor = 2.0;
  backoff->base = 100 * NRES_MSEC;
  backoff->max = 30 * NRES_SEC;
  backoff->throttled_base = 1 * NRES_SEC;
}

/* A duration that is a wrapped negative number (nres.h,
 * NRES_TIME_WRAPPED); NRES_TIME_NEVER (-1 too) is "never". */
#define WRAPPED(t) ((t) >= NRES_TIME_WRAPPED && (t) != NRES_TIME_NEVER)

const char *nres_backoff_error(const nres_backoff_t *backoff) {
  if (backoff == NULL)
    return "backoff: NULL";
  if (backoff->kind > NRES_BACKOFF_DECORRELATED)
    return "backoff.kind: unknown";
  if (backoff->jitter > NRES_JITTER_DECORRELATED)
    return "backoff.jitter: unknown";
  /* Checked for every kind, so switching the kind later cannot expose a
   * factor nobody validated. */
  if (!(backoff->factor >= 1.0) || !isfinite(backoff->factor))
    return "backoff.factor: must be finite and >= 1";
  if (backoff->base == NRES_TIME_INVALID || WRAPPED(backoff->base))
    return "backoff.base: not a number or negative";
  if (backoff->max == NRES_TIME_INVALID || WRAPPED(backoff->max))
    return "backoff.max: not a number or negative";
  if (backoff->throttled_base == NRES_TIME_INVALID ||
      WRAPPED(backoff->throttled_base))
    return "backoff.throttled_base: not a number or negative";
  /* A negative base assigned to the unsigned field wraps to a huge one
   * (-1 is NRES_TIME_NEVER): name base, the field that is wrong, rather
   * than a max that is fine. */
  if (backoff->kind != NRES_BACKOFF_NONE && backoff->max < backoff->base)
    return backoff->base == NRES_TIME_NEVER
               ? "backoff.base: never (or -1, wrapped), above backoff.max"
               : "backoff.max: below backoff.base";
  if (backoff->kind == NRES_BACKOFF_DECORRELATED &&
      backoff->jitter != NRES_JITTER_NONE)
    return "backoff.jitter: must be NONE with the decorrelated kind";
  return NULL;
}

int nres_backoff_check(const nres_backoff_t *backoff) {
  return nres_backoff_error(backoff) == NULL ? 0 : NRES_EINVAL;
}

void nres_backoff_state_reset(nres_backoff_state_t *state) {
  state->prev = 0;
  state->curve = 0.0;
}

/* Uniform in [0, 1); the midpoint when the caller gave no PRNG, so a
 * missing rng means "no randomness", never a crash. */
static double unit(nres_rng_t *rng) {
  return rng != NULL ? nres_rng_unit(rng) : 0.5;
}

/* Uniform in [lo, hi], both inclusive, for any lo <= hi. */
static nres_time_t between(nres_rng_t *rng, nres_time_t lo, nres_time_t hi) {
  nres_time_t span = hi - lo;

  if (rng == NULL)
    return lo + span / 2;
  if (span == UINT64_MAX)   /* span + 1 would wrap to 0 */
    return nres_rng_next(rng);
  return lo + nres_rng_below(rng, span + 1);
}

/* base * factor^(n - 1), saturating at max. */
static nres_time_t exponential(nres_time_t base, double factor, uint32_t n,
                               nres_time_t max) {
  nres_time_t d;
  uint32_t i;

  /* An unchecked factor below 1 or NaN would shrink delays toward 0 (a hot
   * retry loop); read it as 1. */
  if (!(factor >= 1.0))
    factor = 1.0;
  if (base == 0 || n <= 1 || factor == 1.0)
    return nres_time_min(base, max);

  /* Integer factors (2 is the common case) multiply exactly. Each step at
   * least doubles, so the loop stops at max within 64 iterations. */
  if (factor <= 9007199254740992.0 && factor == floor(factor)) {
    d = base;
    for (i = 1; i < n && d < max; i++)
      d = nres__mul_sat(d, (uint64_t) factor);
    return nres_time_min(d, max);
  }

  /* pow may reach +inf; the conversion saturates it. */
  d = nres__time_from_double((double) base * pow(factor, (double) (n - 1)));
  return nres_time_min(d, max);
}

/* Increasing, 0 at t = 0; +inf once 2^t leaves the doubles. Never NaN
 * for t >= 0. */
static double curve(double t) {
  return exp2(t) * tanh(sqrt(CURVE_P * t));
}

/* One step of the decorrelated curve for retry n. Updates state->curve and
 * returns the nominal delay, which the caller caps at max. */
static nres_time_t decorrelated(nres_time_t base, nres_backoff_state_t *state,
                                uint32_t n, nres_rng_t *rng) {
  double t = (double) (n - 1) + unit(rng);
  double f = curve(t);
  double prev = state->curve;

  /* Past t ~ 1024 the curve leaves the doubles (Polly #2163 overflowed
   * here). Every later delay would be max anyway; keep the state finite
   * and the answer max. */
  if (!isfinite(f)) {
    state->curve = DBL_MAX;
    return NRES_TIME_NEVER;
  }
  /* The first retry starts the curve from 0 whatever the state holds. Later
   * ones need the previous point below this one; a zero, a point at or past
   * this one (the state belongs to another call and was not reset) or
   * garbage is replaced by the curve one step back, so the delay is one
   * step, never 0, negative or the whole sum so far. */
  if (t < 1.0)
    prev = 0.0;
  else if (!(prev > 0.0 && prev < f))
    prev = curve(t - 1.0);
  state->curve = f;
  return nres__time_from_double((f - prev) / CURVE_SCALE * (double) base);
}

nres_time_t nres_backoff_next(const nres_backoff_t *backoff,
                              nres_backoff_state_t *state, uint32_t retry,
                              const nres_verdict_t *verdict, nres_rng_t *rng) {
  nres_backoff_state_t scratch = { 0, 0.0 };
  nres_time_t base = backoff->base;
  nres_time_t max = backoff->max;
  nres_time_t d;
  nres_time_t hi;

  if (state == NULL)   /* no memory: nothing earlier is known */
    state = &scratch;
  if (retry == 0)      /* retries count from 1; 0 is read as the first */
    retry = 1;

  if (verdict != NULL && (verdict->flags & NRES_VF_RETRY_AFTER)) {
    /* The dependency said when; jitter would only make us early or late.
     * The decorrelated curve still advances, so the next delay is one step
     * of it rather than two. */
    if (backoff->kind == NRES_BACKOFF_DECORRELATED)
      (void) decorrelated(base, state, retry, rng);
    d = nres_time_min(verdict->retry_after, max);
    state->prev = d;
    return d;
  }

  if (verdict != NULL && verdict->kind == NRES_THROTTLED &&
      backoff->throttled_base != 0)
    base = backoff->throttled_base;

  switch (backoff->kind) {
    case NRES_BACKOFF_NONE:
      state->prev = 0;
      return 0;
    case NRES_BACKOFF_LINEAR:
      d = nres__mul_sat(base, retry);
      break;
    case NRES_BACKOFF_EXPONENTIAL:
      d = exponential(base, backoff->factor, retry, max);
      break;
    case NRES_BACKOFF_DECORRELATED:
      /* Randomness is built into the curve; no jitter on top. */
      d = nres_time_min(decorrelated(base, state, retry, rng), max);
      state->prev = d;
      return d;
    case NRES_BACKOFF_CONSTANT:
    default:             /* unchecked kind: the least surprising delay */
      d = base;
      break;
  }
  /* Cap before jitter too, so that full jitter spreads over [0, max] once
   * the curve is past max instead of collapsing onto max. */
  d = nres_time_min(d, max);

  switch (backoff->jitter) {
    case NRES_JITTER_FULL:
      d = between(rng, 0, d);
      break;
    case NRES_JITTER_EQUAL:
      /* d - d/2 rather than d/2, so that an odd d can still reach d. */
      d = between(rng, d - d / 2, d);
      break;
    case NRES_JITTER_DECORRELATED:
      /* AWS's decorrelated jitter: it grows from the previous delay, not
       * from d. Before the first retry there is none; start from base. */
      hi = nres__mul_sat(state->prev != 0 ? state->prev : base, 3);
      d = between(rng, base, hi > base ? hi : base);
      break;
    default:
      break;
  }
  d = nres_time_min(d, max);
  state->prev = d;
  return d;
}

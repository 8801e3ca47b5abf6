/* SPDX-License-Identifier: MIT */
/* budget.c - the retry budget: a token bucket that caps retries and hedges.
 *
 * Retries are what turn a dependency's bad minute into an outage: every
 * caller multiplies its load by the attempt ceiling just when the dependency
 * can least take it. The budget ties extra attempts to the traffic that is
 * succeeding: each OK deposits `ratio` tokens, each retry or hedge spends
 * one, and a floor of `min_per_sec` tokens a second keeps a quiet service
 * able to retry at all. Over any stretch of time the retries it allows are
 * therefore at most ratio * successes + min_per_sec * seconds + capacity.
 *
 * It is separate from the executor because one budget is shared by many
 * policies, threads and even processes: all its state is plain integers
 * (micro-tokens, nanoseconds) changed by compare-and-swap, with no pointers
 * and no lock. The common operation in a healthy system, a deposit into a
 * full bucket, is a single relaxed load and no write, so a busy budget's
 * cache line is not bounced between cores by success traffic.
 */
#include <math.h>

#include "internal.h"

#define MICRO 1000000            /* micro-tokens per token */

/* Largest capacity and floor, in tokens: keeps every sum of micro-tokens
 * far inside int64 (1e18 + 1e18 < 9.2e18) without checks on the hot path. */
#define BUDGET_MAX_TOKENS 1e12

/* The floor's credit from time 0 to t, in micro-tokens. Credit between two
 * times is the difference of two of these, so however often the floor is
 * credited, and in whatever pieces, the fractions of a micro-token between
 * callers are never lost or counted twice: the pieces telescope to exactly
 * floor(t * refill_per_sec / 1 s). (t < 2^64, refill <= 1e18 < 2^60.) */
static unsigned __int128 floor_total(const nres_budget_t *budget,
                                     nres_time_t t) {
  /* Relaxed atomic load: nres_budget_set_floor may change the floor of a
   * budget in use (the fleet sync agent). Across a change the pieces no
   * longer telescope exactly, for that one credit. */
  return (unsigned __int128) t *
         __atomic_load_n(&budget->refill_per_sec, __ATOMIC_RELAXED) / NRES_SEC;
}

/* Credit earned between `from` and `now` (from < now), clamped to capacity:
 * a bucket cannot hold more, whatever it held before. */
static int64_t floor_credit(const nres_budget_t *budget, nres_time_t from,
                            nres_time_t now) {
  unsigned __int128 credit;

  credit = floor_total(budget, now) - floor_total(budget, from);
  if (credit > (unsigned __int128) budget->capacity)
    return budget->capacity;
  return (int64_t) credit;
}

static void add_tokens(nres_budget_t *budget, int64_t amount) {
  int64_t t;
  int64_t n;

  t = nres__load(&budget->tokens);
  while (t < budget->capacity) {
    n = t + amount;
    if (n > budget->capacity)
      n = budget->capacity;
    if (nres__cas(&budget->tokens, &t, n))
      return;
  }
}

int nres_budget_init(nres_budget_t *budget, double ratio, double min_per_sec,
                     double capacity) {
  if (budget == NULL)
    return NRES_EINVAL;
  if (!(ratio > 0 && ratio <= 1))   /* false for NaN too */
    return NRES_EINVAL;
  if (!(min_per_sec >= 0 && min_per_sec <= BUDGET_MAX_TOKENS))
    return NRES_EINVAL;
  if (!(capacity >= 0 && capacity <= BUDGET_MAX_TOKENS))
    return NRES_EINVAL;

  if (capacity == 0) {
    capacity = 10 * min_per_sec;
    if (capacity < 1)
      capacity = 1;
    if (capacity > BUDGET_MAX_TOKENS)
      capacity = BUDGET_MAX_TOKENS;
  }

  budget->deposit = (int64_t) llround(ratio * MICRO);
  budget->capacity = (int64_t) llround(capacity * MICRO);
  budget->refill_per_sec = (uint64_t) llround(min_per_sec * MICRO);
  nres__store(&budget->tokens, budget->capacity);
  nres__store(&budget->refilled_at, 0);
  nres__store(&budget->spent, 0);
  nres__store(&budget->refused, 0);
  return 0;
}

/* Inline into the executor (LTO): it runs on every successful call. */
__attribute__((always_inline)) inline void nres_budget_deposit(
    nres_budget_t *budget) {
  /* The healthy case: full already. Load, compare, leave. */
  if (nres__load(&budget->tokens) >= budget->capacity)
    return;
  add_tokens(budget, budget->deposit);
}

int nres_budget_spend(nres_budget_t *budget, nres_time_t now) {
  nres_time_t r;
  int64_t credit;
  int64_t t;

  if (budget == NULL)
    return NRES_EINVAL;

  /* Credit the floor first. Whoever moves refilled_at owns the credit for
   * the time it moved over, so concurrent spenders never credit the same
   * nanoseconds twice; a loser retries against the newer refilled_at. A
   * caller whose clock reads earlier than refilled_at gets nothing. */
  if (__atomic_load_n(&budget->refill_per_sec, __ATOMIC_RELAXED) != 0) {
    r = nres__load(&budget->refilled_at);
    /* The first spend starts the floor's clock (0 means not started; a
     * clock reading 0 starts it at 1 ns). The bucket started full, so the
     * time before it earns nothing, whatever epoch the clock counts from. */
    while (r == 0)
      if (nres__cas(&budget->refilled_at, &r, now > 0 ? now : 1))
        r = now > 0 ? now : 1;
    while (now > r) {
      credit = floor_credit(budget, r, now);
      if (credit == 0)
        break;   /* not a micro-token yet: leave refilled_at, lose nothing */
      if (nres__cas(&budget->refilled_at, &r, now)) {
        add_tokens(budget, credit);
        break;
      }
    }
  }

  t = nres__load(&budget->tokens);
  while (t >= MICRO) {
    if (nres__cas(&budget->tokens, &t, t - MICRO)) {
      nres__add(&budget->spent, 1);
      return 0;
    }
  }
  nres__add(&budget->refused, 1);
  return NRES_EBUDGET;
}

int nres_budget_spend_class(nres_budget_t *budget, nres_time_t now, int cls) {
  if (budget == NULL)
    return NRES_EINVAL;
  if (__builtin_expect(cls == NRES_CLASS_SHEDDABLE, 0) &&
      nres_budget_level(budget, now) * (2.0 * MICRO) < (double) budget->capacity) {
    nres__add(&budget->refused, 1);
    return NRES_EBUDGET;
  }
  return nres_budget_spend(budget, now);
}

void nres_budget_refund(nres_budget_t *budget) {
  /* The token was spent on an attempt that never started. */
  add_tokens(budget, MICRO);
  nres__sub(&budget->spent, 1);
}

double nres_budget_level(nres_budget_t *budget, nres_time_t now) {
  nres_time_t r;
  int64_t t;

  if (budget == NULL)
    return 0;
  t = nres__load(&budget->tokens);
  if (__atomic_load_n(&budget->refill_per_sec, __ATOMIC_RELAXED) != 0) {
    r = nres__load(&budget->refilled_at);
    if (r != 0 && now > r)
      t += floor_credit(budget, r, now);
  }
  if (t > budget->capacity)
    t = budget->capacity;
  return (double) t / MICRO;
}

void nres_budget_stats(const nres_budget_t *budget, nres_budget_stats_t *out) {
  nres_budget_t *b = (nres_budget_t *) budget;   /* loads only */

  out->tokens = nres__load(&b->tokens);
  out->refilled_at = nres__load(&b->refilled_at);
  out->spent = nres__load(&b->spent);
  out->refused = nres__load(&b->refused);
}

int nres_budget_set_floor(nres_budget_t *budget, double min_per_sec) {
  if (budget == NULL || !(min_per_sec >= 0 && min_per_sec <= BUDGET_MAX_TOKENS))
    return NRES_EINVAL;
  __atomic_store_n(&budget->refill_per_sec,
                   (uint64_t) llround(min_per_sec * MICRO), __ATOMIC_RELAXED);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* policy.h - what nres_policy_build derives, for the executor's eyes only.
 *
 * The executor branches on these flags instead of re-reading the
 * configuration on every call.
 */
#ifndef NRES_CORE_POLICY_H
#define NRES_CORE_POLICY_H

#define NRES__POLICY_MAGIC 0x6e726570u   /* set by a successful build */

enum {
  NRES__F_PASSTHROUGH = 1,   /* nothing on: one attempt, no bookkeeping */
  NRES__F_TELEMETRY = 2,     /* keep counters */
  NRES__F_BOUNDED = 4,       /* some time bound per attempt or call */
  NRES__F_CEILING = 8,       /* measured attempt ceiling */
  NRES__F_HEDGE = 16,        /* hedging */
  NRES__F_SLOW = 32,         /* classify slow attempts for the breaker */
  NRES__F_QUANTILES = 64,    /* some decision reads the estimator */
  NRES__F_TIMELESS = 128,    /* no decision depends on the time */
  NRES__F_GATED = 256,       /* a throttle, rate limiter, bulkhead or breaker
                                admits */
  NRES__F_RECORDS = 512,     /* a bulkhead, breaker, estimator, throttle
                                or hedge window learns from each outcome */
  NRES__F_LIMITED = 1024,    /* a throttle, rate limiter or bulkhead admits
                                (pass_limits) */
  NRES__F_DRAWS = 2048,      /* a retry draws from the call's PRNG (backoff
                                jitter; a breaker's break jitter uses it) */
  NRES__F_SHORT_RECORD = 4096,   /* an OK outcome may take record()'s short
                                    way: no bulkhead place, no slow-call or
                                    hedge accounting */
  NRES__F_BREAKER_WINDOW = 8192, /* the breaker counts calls in its window
                                    (nres__breaker_windowed) */
  NRES__F_SHADOW = 16384         /* a candidate runs in its shadow
                                    (exec/shadow.c) */
};

/* How often the quantiles the executor uses are recomputed. */
#define NRES__QUANTILE_REFRESH (100 * NRES_MSEC)

#endif /* NRES_CORE_POLICY_H */

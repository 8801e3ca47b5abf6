/* SPDX-License-Identifier: MIT */
/* nres.h - the public interface of libnres, the nres resilience runtime.
 *
 * nres decides, for every call a program makes to a dependency, whether to
 * make it, how long to let it run, whether and when to try again, and when to
 * stop asking a dependency that is failing. This header is ordered like
 * uv.h: export macro, error map, time, forward typedefs, callbacks, then one
 * section per object (its struct, then its functions).
 *
 * Rules that hold for every function here:
 * - The caller owns memory. Structs are filled in by nres_<object>_init and
 *   nothing in this header allocates, except where a function says so.
 * - Time is passed in as monotonic nanoseconds (nres_time_t); no function
 *   reads a clock unless its name says so (nres_clock_now, the drivers).
 * - Functions returning int return 0 or a negative NRES_E* code. Misuse
 *   returns NRES_EINVAL.
 * - State shared between calls (budget, breaker, window, rate limiter,
 *   bulkhead, estimator) is safe to use from any thread, holds no pointers
 *   and may live in memory shared between processes. Its atomic fields are
 *   the runtime's: read its counters with nres_<object>_stats (or
 *   nres_window_sum, nres_estimator_quantile). A policy holds pointers
 *   to such state and is safe to use from any thread once built. A call
 *   (nres_call_t) belongs to one thread at a time.
 */
#ifndef NRES_H
#define NRES_H

#include <stddef.h>
#include <stdint.h>

#include "nres/errno.h"
#include "nres/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
# define NRES_EXTERN __attribute__((visibility("default")))
#else
# define NRES_EXTERN /* nothing */
#endif

/* Shared state uses C11 atomics; a binding that cannot parse _Atomic (LuaJIT
 * FFI) declares the same structs opaquely with the sizes published below. */
#if !defined(__cplusplus) && !defined(__STDC_NO_ATOMICS__)
# define NRES_ATOMIC(T) _Atomic T
#else
# define NRES_ATOMIC(T) T
#endif

/* ---------------------------------------------------------------- errors */

typedef enum {
#define XX(code, value, _) NRES_ ## code = value,
  NRES_ERRNO_MAP(XX)
#undef XX
  NRES_ERRNO_MAX_ = -1100
} nres_errno_t;

/* Message for an error code ("invalid argument"); "unknown error" if the
 * code is not one of nres's. The string is static. */
NRES_EXTERN const char *nres_strerror(int err);
/* Name of an error code ("EINVAL"); "UNKNOWN" otherwise. Static string. */
NRES_EXTERN const char *nres_err_name(int err);

/* --------------------------------------------------------------- version */

NRES_EXTERN unsigned nres_version(void);             /* NRES_VERSION_HEX */
NRES_EXTERN const char *nres_version_string(void);   /* "0.1.0" */
NRES_EXTERN unsigned nres_abi_version(void);         /* NRES_ABI_VERSION */

/* ------------------------------------------------------------- allocator */

typedef void *(*nres_malloc_func)(size_t size);
typedef void *(*nres_realloc_func)(void *ptr, size_t size);
typedef void *(*nres_calloc_func)(size_t count, size_t size);
typedef void (*nres_free_func)(void *ptr);

/* Replace the functions every allocation of libnres goes through, so tests
 * and the stress suite can count them. All four or none (NRES_EINVAL).
 * Call it before any other nres function allocates, or after everything
 * allocated with the previous allocator has been freed. */
NRES_EXTERN int nres_replace_allocator(nres_malloc_func malloc_func,
                                       nres_realloc_func realloc_func,
                                       nres_calloc_func calloc_func,
                                       nres_free_func free_func);

/* ------------------------------------------------------------------ time */

/* Monotonic time and durations, in nanoseconds. Arithmetic on them
 * saturates: a sum past the end of time is NRES_TIME_NEVER. */
typedef uint64_t nres_time_t;

#define NRES_TIME_NEVER UINT64_MAX
#define NRES_USEC ((nres_time_t) 1000)
#define NRES_MSEC ((nres_time_t) 1000000)
#define NRES_SEC  ((nres_time_t) 1000000000)

static inline nres_time_t nres_time_add(nres_time_t a, nres_time_t b) {
  return a > NRES_TIME_NEVER - b ? NRES_TIME_NEVER : a + b;
}

static inline nres_time_t nres_time_sub(nres_time_t a, nres_time_t b) {
  return a > b ? a - b : 0;   /* a duration never goes negative */
}

static inline nres_time_t nres_time_min(nres_time_t a, nres_time_t b) {
  return a < b ? a : b;
}

/* What nres_time_from_sec makes of a number of seconds that is not a
 * duration (NaN, negative, -inf). No init or build accepts it: each refuses
 * it with NRES_EINVAL (nres_policy_error names the field), so a NaN never
 * silently reads as 0, which would mean "none" for a deadline or timeout. */
#define NRES_TIME_INVALID (NRES_TIME_NEVER - 1)

/* The one conversion of seconds (a double) to a duration:
 * - 0 (and -0) is 0; a positive amount under 1 ns is 1 ns, so a positive
 *   setting never reads as 0 ("none" or "off");
 * - otherwise truncated to the ns, saturating: 2^63 ns (292 years) or more,
 *   +inf and 1e300 all give NRES_TIME_NEVER, never a wrapped value;
 * - NaN and negatives give NRES_TIME_INVALID (refused by every consumer).
 * Every duration field below may be set from it. A duration field set
 * directly to a value from 2^63 ns up, other than NRES_TIME_NEVER, is what
 * a negative number becomes when assigned to nres_time_t: the builders
 * refuse it, naming the field (NRES_TIME_WRAPPED). */
#define NRES_TIME_WRAPPED ((nres_time_t) 1 << 63)
NRES_EXTERN nres_time_t nres_time_from_sec(double seconds);

/* CLOCK_MONOTONIC in nanoseconds. The one place the runtime reads a clock;
 * drivers use it, the decision engine never does. */
NRES_EXTERN nres_time_t nres_clock_now(void);

/* ------------------------------------------------------------ randomness */

/* A small seedable PRNG (one 64-bit word, splitmix64). Not thread-safe: one
 * per call or per thread. A fixed seed gives a reproducible sequence. */
typedef struct nres_rng_s { uint64_t state; } nres_rng_t;

NRES_EXTERN void nres_rng_seed(nres_rng_t *rng, uint64_t seed);
NRES_EXTERN uint64_t nres_rng_next(nres_rng_t *rng);
/* Uniform in [0, bound); 0 when bound is 0. */
NRES_EXTERN uint64_t nres_rng_below(nres_rng_t *rng, uint64_t bound);
/* Uniform in [0, 1). */
NRES_EXTERN double nres_rng_unit(nres_rng_t *rng);

/* ------------------------------------------------------ forward typedefs */

typedef struct nres_verdict_s nres_verdict_t;
typedef struct nres_backoff_s nres_backoff_t;
typedef struct nres_backoff_state_s nres_backoff_state_t;
typedef struct nres_budget_s nres_budget_t;
typedef struct nres_window_s nres_window_t;
typedef struct nres_breaker_config_s nres_breaker_config_t;
typedef struct nres_breaker_s nres_breaker_t;
typedef struct nres_throttle_s nres_throttle_t;
typedef struct nres_ratelimit_s nres_ratelimit_t;
typedef struct nres_bulkhead_config_s nres_bulkhead_config_t;
typedef struct nres_bulkhead_s nres_bulkhead_t;
typedef struct nres_estimator_s nres_estimator_t;
typedef struct nres_hedge_s nres_hedge_t;
typedef struct nres_event_s nres_event_t;
typedef struct nres_counters_s nres_counters_t;
typedef struct nres_policy_s nres_policy_t;
typedef struct nres_attempt_s nres_attempt_t;
typedef struct nres_attempt_rec_s nres_attempt_rec_t;
typedef struct nres_action_s nres_action_t;
typedef struct nres_call_s nres_call_t;

/* ------------------------------------------------------------- callbacks */

/* The one optional synchronous listener of a policy. It runs on the thread
 * driving the call, inside the executor: keep it short, never re-enter the
 * call from it. */
typedef void (*nres_event_cb)(const nres_event_t *event, void *data);

/* The blocking attempt of the sync driver: run the work once, bounded by
 * attempt->deadline if it can, and say how it went. */
typedef nres_verdict_t (*nres_attempt_fn)(void *arg,
                                          const nres_attempt_t *attempt);

/* ---------------------------------------------------------------- verdict */

/* What an attempt's outcome means for the decision. One classifier feeds
 * retry, breaker, budget and telemetry. CANCELED is the caller's own
 * cancellation: never retried, never counted as a failure. */
typedef enum {
  NRES_OK = 0,
  NRES_TRANSIENT = 1,      /* may succeed if tried again */
  NRES_THROTTLED = 2,      /* the dependency asks us to slow down */
  NRES_PERMANENT = 3,      /* will fail again: never retried */
  NRES_CANCELED = 4,       /* the caller gave up */
  NRES_VERDICT_COUNT = 5
} nres_verdict_kind_t;

/* Criticality of a call (Google SRE's classes, three of them): under
 * overload the limiters and the retry budget refuse sheddable calls first
 * and keep headroom for critical ones (nres_bulkhead_config_t.reserve, for
 * the concurrency limit and its queue; a sheddable call takes at most half
 * of the rate limiter's burst, and retries or hedges only while the budget
 * is at least half full). Set per call with nres_call_begin_class; the
 * others begin as NRES_CLASS_DEFAULT. */
typedef enum {
  NRES_CLASS_CRITICAL = 0,
  NRES_CLASS_DEFAULT = 1,
  NRES_CLASS_SHEDDABLE = 2,
  NRES_CLASS_COUNT
} nres_class_t;

NRES_EXTERN const char *nres_class_name(int cls);   /* "critical", ... */
/* The class of a criticality name (len bytes), in any case: critical or
 * critical_plus, default, sheddable or sheddable_plus (Google's _PLUS
 * names fold into the nearest class); -1 for anything else or NULL. The
 * one parser of these names: X-Criticality in both gateways
 * (nres_gw_class) and p:with{ criticality = ... } in Lua. */
NRES_EXTERN int nres_class_parse(const char *name, size_t len);

/* Verdict flags. */
enum {
  NRES_VF_SELF = 1,        /* self-imposed (a local limiter refused) */
  NRES_VF_TIMEOUT = 2,     /* the attempt ran past its deadline */
  NRES_VF_RETRY_AFTER = 4  /* retry_after is set */
};

struct nres_verdict_s {
  uint8_t kind;            /* nres_verdict_kind_t */
  uint8_t flags;           /* NRES_VF_* */
  uint16_t reserved_;
  int32_t code;            /* what was classified (errno, status); for logs */
  nres_time_t retry_after; /* with NRES_VF_RETRY_AFTER: wait at least this */
};

static inline nres_verdict_t nres_verdict(int kind) {
  nres_verdict_t v = { (uint8_t) kind, 0, 0, 0, 0 };
  return v;
}

/* Stable lowercase names: "ok", "transient", "throttled", "permanent",
 * "canceled"; "unknown" otherwise. */
NRES_EXTERN const char *nres_verdict_name(int kind);

/* A classifier rule: codes lo..hi (inclusive) map to a verdict kind. A
 * table of rules is searched in order; the first match wins. */
typedef struct nres_rule_s {
  int32_t lo, hi;
  uint8_t kind;
  uint8_t flags;
} nres_rule_t;

/* Classify code with rules; fallback_kind if no rule matches. */
NRES_EXTERN nres_verdict_t nres_classify_code(const nres_rule_t *rules,
                                              size_t count, int32_t code,
                                              int fallback_kind);

/* Negative errno of an operation: 0 OK; timeouts, refused, reset, aborted,
 * unreachable, EAGAIN, EINTR, EPIPE... TRANSIENT (timeouts flagged);
 * ECANCELED CANCELED; anything else PERMANENT. Positive values are misuse
 * and classify as PERMANENT. */
NRES_EXTERN nres_verdict_t nres_classify_errno(int err);

/* An HTTP status. retry_after is the parsed Retry-After in ns, or
 * NRES_TIME_NEVER when the response had none. 2xx/3xx OK; 429 THROTTLED;
 * 503 with Retry-After THROTTLED; other 5xx and 408 TRANSIENT; other 4xx OK
 * (the dependency answered; not retried); anything else PERMANENT. */
NRES_EXTERN nres_verdict_t nres_classify_http(int status,
                                              nres_time_t retry_after);

/* The default tables behind the two functions above, for callers that
 * extend them. */
NRES_EXTERN const nres_rule_t *nres_errno_rules(size_t *count);
NRES_EXTERN const nres_rule_t *nres_http_rules(size_t *count);

/* ---------------------------------------------------------------- backoff */

typedef enum {
  NRES_BACKOFF_NONE = 0,        /* retry at once */
  NRES_BACKOFF_CONSTANT,        /* base every time */
  NRES_BACKOFF_LINEAR,          /* base * n */
  NRES_BACKOFF_EXPONENTIAL,     /* base * factor^(n-1), capped at max */
  NRES_BACKOFF_DECORRELATED     /* a smooth randomised exponential curve
                                   whose median first delay is about
                                   0.9 * base (jitter must be NONE: it is
                                   built in) */
} nres_backoff_kind_t;

typedef enum {
  NRES_JITTER_NONE = 0,
  NRES_JITTER_FULL,             /* uniform in [0, d] */
  NRES_JITTER_EQUAL,            /* d/2 + uniform in [0, d/2] */
  NRES_JITTER_DECORRELATED      /* uniform in [base, 3 * previous delay] */
} nres_jitter_t;

/* Ranges (nres_backoff_error names the field it refuses):
 *   kind, jitter   one of the enums above; the decorrelated kind needs
 *                  jitter NONE
 *   factor         finite and >= 1 (checked for every kind)
 *   base, max, throttled_base   any duration, NRES_TIME_NEVER included
 *                  (delays saturate); not NRES_TIME_INVALID
 *   max >= base    unless kind is NONE; throttled_base may exceed max (the
 *                  delay is capped at max). */
struct nres_backoff_s {
  uint8_t kind;                 /* nres_backoff_kind_t */
  uint8_t jitter;               /* nres_jitter_t */
  uint8_t reserved_[6];
  double factor;                /* exponential growth; >= 1 */
  nres_time_t base;             /* first delay */
  nres_time_t max;              /* no delay is longer, jitter included */
  nres_time_t throttled_base;   /* base after THROTTLED without retry-after;
                                   0 = same as base */
};

/* Per-call memory of the backoff (the decorrelated kinds need the past). */
struct nres_backoff_state_s {
  nres_time_t prev;             /* the last delay returned */
  double curve;                 /* decorrelated kind: the curve's last point */
};

/* Fill in the defaults: exponential, full jitter, base 100 ms, factor 2,
 * max 30 s, throttled base 1 s. */
NRES_EXTERN void nres_backoff_init(nres_backoff_t *backoff);
/* NRES_EINVAL if a field is out of range (the rules above). */
NRES_EXTERN int nres_backoff_check(const nres_backoff_t *backoff);
/* Why nres_backoff_check refuses, as "field: rule" (a static string such as
 * "backoff.max: below backoff.base"), or NULL if it accepts. */
NRES_EXTERN const char *nres_backoff_error(const nres_backoff_t *backoff);
NRES_EXTERN void nres_backoff_state_reset(nres_backoff_state_t *state);
/* The delay before retry number `retry` (1 = the first retry). A verdict
 * with NRES_VF_RETRY_AFTER gets exactly min(retry_after, max), no jitter;
 * THROTTLED without it uses throttled_base. Saturating arithmetic, clamped
 * to max after jitter: never overflows, wraps, or exceeds max. */
NRES_EXTERN nres_time_t nres_backoff_next(const nres_backoff_t *backoff,
                                          nres_backoff_state_t *state,
                                          uint32_t retry,
                                          const nres_verdict_t *verdict,
                                          nres_rng_t *rng);

/* ----------------------------------------------------------------- budget */

/* Retry budget: a token bucket shared by any number of policies and
 * threads. Each OK deposits `ratio` tokens, each retry or hedge spends one,
 * a floor refills `min_per_sec` tokens per second; capacity defaults to
 * max(10 s * min_per_sec, 1) and the bucket starts full. The first attempt
 * of a call is never charged; self-imposed refusals neither spend nor
 * deposit. Tokens are fixed point, in millionths. */
struct nres_budget_s {
  int64_t deposit;              /* micro-tokens per OK */
  int64_t capacity;             /* micro-tokens */
  uint64_t refill_per_sec;      /* micro-tokens per second */
  NRES_ATOMIC(int64_t) tokens;
  NRES_ATOMIC(uint64_t) refilled_at;   /* time the floor was last credited */
  NRES_ATOMIC(uint64_t) spent;         /* retries and hedges allowed */
  NRES_ATOMIC(uint64_t) refused;       /* retries and hedges refused */
};

/* ratio in (0, 1]; min_per_sec >= 0; capacity 0 = the default. */
NRES_EXTERN int nres_budget_init(nres_budget_t *budget, double ratio,
                                 double min_per_sec, double capacity);
/* Credit one OK outcome. */
NRES_EXTERN void nres_budget_deposit(nres_budget_t *budget);
/* Take one token for a retry or hedge: 0 if allowed, NRES_EBUDGET if not. */
NRES_EXTERN int nres_budget_spend(nres_budget_t *budget, nres_time_t now);
/* The same for a call of criticality `cls` (nres_class_t): a sheddable
 * call is refused (and counted) while the bucket is under half full, so
 * the lower half is kept for the other classes. The executor's retries
 * and hedges and the gateway's balancer spend through it. */
NRES_EXTERN int nres_budget_spend_class(nres_budget_t *budget, nres_time_t now,
                                        int cls);
/* Give back a token spent on a retry that never started (refused by a
 * gate, canceled during its backoff). */
NRES_EXTERN void nres_budget_refund(nres_budget_t *budget);
/* Tokens available now (floor credit included), for telemetry. */
NRES_EXTERN double nres_budget_level(nres_budget_t *budget, nres_time_t now);

/* A budget's counters. Each is read atomically (relaxed), not all at the
 * same instant. */
typedef struct nres_budget_stats_s {
  int64_t tokens;               /* micro-tokens held, without the floor
                                   credit earned since refilled_at */
  nres_time_t refilled_at;      /* when the floor was last credited */
  uint64_t spent;               /* retries and hedges allowed */
  uint64_t refused;             /* retries and hedges refused */
} nres_budget_stats_t;

NRES_EXTERN void nres_budget_stats(const nres_budget_t *budget,
                                   nres_budget_stats_t *out);

/* Change the floor (min_per_sec, the range of nres_budget_init) of a
 * budget in use, from any thread: the fleet sync agent (nres/sync.h) gives
 * each host its part of a fleet-wide floor. Credit already earned stays. */
NRES_EXTERN int nres_budget_set_floor(nres_budget_t *budget,
                                      double min_per_sec);

/* ----------------------------------------------------------------- window */

/* Outcome counts over a sliding time window made of rotating buckets; each
 * bucket is one atomic word (calls, failures, slow calls, all saturating at
 * 65535, and a 16-bit slice number). Used by the breaker and by hedging. */
#define NRES_WINDOW_MAX_BUCKETS 16

/* Copies of a hot word that threads sharing state write (the thread's
 * shard), merged when read: the window's current bucket, the estimator's
 * recent samples, a policy's success counters. */
#define NRES_SHARDS 8

/* Make the calling thread write shard index % NRES_SHARDS from now on.
 * Without it a thread draws its shard at its first write (a process-wide
 * counter offset by the process id), so two processes sharing a region
 * (nginx workers) may draw the same one and move its lines between their
 * cores on every call. A process that knows its number among them (an
 * nginx worker's) takes its own: up to NRES_SHARDS of them never share a
 * line they write. A child of fork() draws anew. */
NRES_EXTERN void nres_shard_set(unsigned index);

struct nres_window_s {
  nres_time_t width;            /* one bucket's span */
  uint32_t count;               /* buckets in use */
  uint32_t reserved_;
  NRES_ATOMIC(uint64_t) bucket[NRES_WINDOW_MAX_BUCKETS];
  /* Each shard's bucket of the slice it last added to (same layout as
   * bucket[]), moved into bucket[] when that shard moves to a newer slice;
   * nres_window_sum adds them in. So the adds of threads sharing a window
   * go to different lines: 64 bytes apart, and away from width and count,
   * which every add reads. Zero is an empty pending bucket. */
  struct {
    NRES_ATOMIC(uint64_t) pending;
    uint64_t reserved_[7];
  } shard[NRES_SHARDS];
};

/* span > 0 and not NRES_TIME_INVALID (NRES_TIME_NEVER is accepted),
 * 1 <= buckets <= NRES_WINDOW_MAX_BUCKETS, span / buckets >= 1 ns. */
NRES_EXTERN int nres_window_init(nres_window_t *window, nres_time_t span,
                                 uint32_t buckets);
NRES_EXTERN void nres_window_add(nres_window_t *window, nres_time_t now,
                                 int failure, int slow);
/* Sums over the buckets still inside the window at `now`. */
NRES_EXTERN void nres_window_sum(const nres_window_t *window, nres_time_t now,
                                 uint32_t *calls, uint32_t *failures,
                                 uint32_t *slow);
NRES_EXTERN void nres_window_clear(nres_window_t *window);

/* ---------------------------------------------------------------- breaker */

typedef enum {
  NRES_BREAKER_CLOSED = 0,
  NRES_BREAKER_OPEN = 1,
  NRES_BREAKER_HALF_OPEN = 2,
  NRES_BREAKER_ISOLATED = 3     /* opened by hand, until reset */
} nres_breaker_state_t;

/* What an admitted attempt's outcome means to the breaker. */
typedef enum {
  NRES_BREAKER_SUCCESS = 0,     /* OK, THROTTLED, PERMANENT */
  NRES_BREAKER_FAILURE = 1,     /* TRANSIENT, timeouts */
  NRES_BREAKER_IGNORE = 2       /* canceled, self-imposed: only frees a
                                   probe permit */
} nres_breaker_outcome_t;

/* Ranges (nres_breaker_config_error names the field it refuses):
 * failure_ratio and slow_ratio in [0, 1]; probes and success_threshold in
 * 1..255; break_for > 0; break_max >= break_for; break_jitter in [0, 1);
 * lease <= break_for;
 * window > 0 with window / buckets >= 1 ns and 1 <= buckets <=
 * NRES_WINDOW_MAX_BUCKETS. Durations may be NRES_TIME_NEVER (a break is
 * capped at 2^37 ms, 4.3 years), never NRES_TIME_INVALID. */
struct nres_breaker_config_s {
  uint32_t consecutive;         /* trip after this many failures in a row;
                                   0 = off. Default 5 */
  uint32_t min_calls;           /* ratios need this many calls in the
                                   window. Default 20 */
  double failure_ratio;         /* trip at this failure ratio; 0 = off.
                                   Default 0.5 */
  double slow_ratio;            /* trip at this slow-call ratio; 0 = off.
                                   Default 0 */
  nres_time_t window;           /* span of the ratio window. Default 30 s */
  uint32_t buckets;             /* buckets in the window. Default 10 */
  uint32_t probes;              /* concurrent half-open probes. Default 1 */
  uint32_t success_threshold;   /* probe successes that close it. Default 2 */
  uint32_t reserved_;
  nres_time_t break_for;        /* first open period. Default 15 s */
  nres_time_t break_max;        /* open period doubles up to this. 2 min */
  double break_jitter;          /* open period shortened by up to this
                                   fraction, at random. Default 0.1 */
  nres_time_t lease;            /* a probe permit's lease: once every probe
                                   permit of a half-open breaker has been
                                   out this long (since the latest was
                                   taken) without a report, the next caller
                                   takes their place and the lapsed permits
                                   are counted in leases_expired. 0 =
                                   break_for; at most break_for. Default 0 */
};

/* The whole state machine is one atomic word (state, probe permits in use,
 * probe successes, a half-open generation and the open-until time in ms);
 * counters and the window sit beside it. */
struct nres_breaker_s {
  nres_breaker_config_t config;
  NRES_ATOMIC(uint64_t) word;
  NRES_ATOMIC(uint32_t) consecutive;    /* current run of failures */
  NRES_ATOMIC(uint32_t) level;          /* trips since last closed */
  NRES_ATOMIC(uint64_t) trips;          /* times it opened */
  NRES_ATOMIC(uint64_t) rejected;       /* admissions refused */
  NRES_ATOMIC(uint64_t) leases_expired; /* probe permits whose lease ran
                                           out before their report */
  nres_window_t window;
};

NRES_EXTERN void nres_breaker_config_init(nres_breaker_config_t *config);
/* Why nres_breaker_init refuses `config`, as "breaker.field: rule" (static),
 * or NULL if it accepts it. */
NRES_EXTERN const char *nres_breaker_config_error(
    const nres_breaker_config_t *config);
/* NRES_EINVAL, and the breaker untouched, if the config is refused. */
NRES_EXTERN int nres_breaker_init(nres_breaker_t *breaker,
                                  const nres_breaker_config_t *config);
/* Ask to run an attempt. 0: admitted, *permit is 0 (closed) or a probe
 * permit (half-open) that must be passed to exactly one of record/release.
 * NRES_ECIRCUIT: refused. */
NRES_EXTERN int nres_breaker_acquire(nres_breaker_t *breaker, nres_time_t now,
                                     uint32_t *permit);
/* Report an admitted attempt's outcome (and whether it was slow). Returns
 * the state the breaker entered because of it, or -1 if it did not change.
 * rng supplies the break jitter. With slow_ratio > 0, a slow probe counts
 * as a failed probe. */
NRES_EXTERN int nres_breaker_record(nres_breaker_t *breaker, nres_time_t now,
                                    uint32_t permit, int outcome, int slow,
                                    nres_rng_t *rng);
/* Give back a probe permit with no outcome (a canceled probe). */
NRES_EXTERN void nres_breaker_release(nres_breaker_t *breaker,
                                      uint32_t permit);
/* The state as of `now` (OPEN whose time is up reads HALF_OPEN). */
NRES_EXTERN int nres_breaker_state(const nres_breaker_t *breaker,
                                   nres_time_t now);
NRES_EXTERN void nres_breaker_isolate(nres_breaker_t *breaker);
NRES_EXTERN void nres_breaker_reset(nres_breaker_t *breaker);
/* "closed", "open", "half-open", "isolated". */
NRES_EXTERN const char *nres_breaker_state_name(int state);

/* A breaker's counters, each read atomically (relaxed). The state word is
 * read once, so state, probes and successes agree with each other. */
typedef struct nres_breaker_stats_s {
  uint32_t state;               /* as stored: an OPEN breaker whose break is
                                   over reads OPEN here, HALF_OPEN from
                                   nres_breaker_state */
  uint32_t probes;              /* half-open probe permits in use */
  uint32_t successes;           /* probe successes this half-open period */
  uint32_t consecutive;         /* current run of failures */
  uint32_t level;               /* trips since it last closed */
  uint32_t reserved_;
  uint64_t trips;               /* times it opened */
  uint64_t rejected;            /* admissions refused */
  uint64_t leases_expired;      /* probe permits whose lease ran out */
} nres_breaker_stats_t;

NRES_EXTERN void nres_breaker_stats(const nres_breaker_t *breaker,
                                    nres_breaker_stats_t *out);

/* For the fleet sync agent (nres/sync.h), which shares breaks between
 * hosts. nres_breaker_peek: the state as stored (as nres_breaker_stats)
 * and, when OPEN, *until = when the break ends (ns on now's clock, to the
 * ms; 0 otherwise). nres_breaker_open_until: open it until `until` for a
 * break decided elsewhere, from CLOSED, HALF_OPEN (probes in flight become
 * stale: their outcomes are ignored) or an OPEN that ends earlier; neither
 * a trip nor a break level is counted; ISOLATED is left alone. 1 if it
 * changed the state, 0 if not. nres_breaker_close_if: close it if it is
 * still OPEN until exactly `until` (the break open_until imposed, not one
 * of its own since): 1 if closed. */
NRES_EXTERN int nres_breaker_peek(const nres_breaker_t *breaker,
                                  nres_time_t now, nres_time_t *until);
NRES_EXTERN int nres_breaker_open_until(nres_breaker_t *breaker,
                                        nres_time_t now, nres_time_t until);
NRES_EXTERN int nres_breaker_close_if(nres_breaker_t *breaker,
                                      nres_time_t until);

/* --------------------------------------------------------------- throttle */

/* Client-side adaptive throttling (the Google SRE book, "Handling
 * Overload"). Over a sliding window it counts requests (attempts the
 * policy wanted to send, the ones it refused itself included) and accepts
 * (attempts the dependency answered with anything but an overload
 * refusal: a THROTTLED verdict, such as a 429 or a 503 with Retry-After,
 * is the one non-accept; a plain error or a timeout is the dependency
 * answering, and the breaker's business). Before each attempt it refuses
 * locally with probability max(0, (requests - k * accepts) /
 * (requests + 1)), so in steady state the dependency gets about k times
 * what it accepts, and nothing is refused while requests <= k * accepts.
 * After an overload the traffic sent grows about k-fold per window, so
 * the window is short (the presets: 0.3 s, back within 2 s), and once
 * the dependency has refused nothing for 0.8 s k grows by 5 per second
 * of quiet (room); for 30 ms after each of its refusals k is 0.1 lower
 * (a refusal says its queue is full now: the dip).
 * The probability is recomputed at most every `refresh` (min(10 ms, one
 * bucket)) by one caller and cached, so an admission that refuses nothing
 * is two loads and a compare; the draw comes from the caller's PRNG.
 * Requests and accepts live in a window (calls: requests, failures:
 * non-accepts); an attempt counts when it is answered, a local refusal
 * when it is made. Shared by any number of threads and processes. */
struct nres_throttle_s {
  double k;                     /* >= 1: sent / accepted in steady state */
  nres_time_t refresh;          /* how often the probability is recomputed */
  NRES_ATOMIC(uint64_t) next;   /* when the cached probability is stale */
  NRES_ATOMIC(uint64_t) odds;   /* refusal probability * 2^32; 0: none */
  NRES_ATOMIC(uint64_t) refused;        /* attempts refused locally */
  /* When a call must look at the throttle: `next` while the odds are 0,
   * 0 while they are above 0. Before that, a call's one load. */
  NRES_ATOMIC(uint64_t) due;
  NRES_ATOMIC(uint64_t) refused_at;   /* the dependency's last refusal */
  /* >= 0, 0 off (init): a transient answer that comes back in less than
   * this x the estimator's p50 of successes is a non-accept too, a
   * refusal that does not say so (a dependency shedding load with a plain
   * error answers at once). Needs the policy's estimator. */
  double fast_failure;
  nres_window_t window;         /* calls = requests, failures = non-accepts */
};

/* k finite in [1, 1000]; window > 0 (not NRES_TIME_INVALID) with
 * window / buckets >= 1 ns; 1 <= buckets <= NRES_WINDOW_MAX_BUCKETS.
 * NRES_EINVAL, the throttle untouched, otherwise. */
NRES_EXTERN int nres_throttle_init(nres_throttle_t *throttle, double k,
                                   nres_time_t window, uint32_t buckets);
/* Why nres_throttle_init refuses these arguments, as "throttle.field:
 * rule" (static), or NULL if it accepts them. */
NRES_EXTERN const char *nres_throttle_error(double k, nres_time_t window,
                                            uint32_t buckets);
/* Before an attempt: 0 to send it, NRES_ETHROTTLED to refuse it locally
 * (counted as a request and a non-accept). rng draws only when the
 * probability is above 0. */
NRES_EXTERN int nres_throttle_acquire(nres_throttle_t *throttle,
                                      nres_time_t now, nres_rng_t *rng);
/* An attempt sent was answered: accepted 1 for anything but an overload
 * refusal (THROTTLED), 0 for one. */
NRES_EXTERN void nres_throttle_record(nres_throttle_t *throttle,
                                      nres_time_t now, int accepted);
/* The refusal probability at `now`, in [0, 1) (recomputed from the
 * window, not the cached value). */
NRES_EXTERN double nres_throttle_probability(const nres_throttle_t *throttle,
                                             nres_time_t now);

typedef struct nres_throttle_stats_s {
  uint32_t requests;            /* in the window */
  uint32_t accepts;             /* in the window */
  uint64_t refused;             /* refused locally, ever */
  double probability;           /* nres_throttle_probability */
} nres_throttle_stats_t;

NRES_EXTERN void nres_throttle_stats(const nres_throttle_t *throttle,
                                     nres_time_t now,
                                     nres_throttle_stats_t *out);

/* ------------------------------------------------------------- rate limit */

/* GCRA rate limiter: `rate` admissions per second with a burst of `burst`
 * at once; one atomic word (the theoretical arrival time). */
struct nres_ratelimit_s {
  nres_time_t interval;         /* ns between admissions at the rate */
  nres_time_t tolerance;        /* how far ahead of time a burst may go */
  NRES_ATOMIC(uint64_t) tat;
  NRES_ATOMIC(uint64_t) refused;
};

/* rate > 0 per second and finite, burst >= 1 (NRES_EINVAL otherwise,
 * NaN included). The interval 1 s / rate saturates: a rate too low to
 * represent admits nothing, never wraps to a short interval. */
NRES_EXTERN int nres_ratelimit_init(nres_ratelimit_t *limit, double rate,
                                    uint32_t burst);
/* 0 admitted; NRES_ELIMITED with *retry_after = how long until an
 * admission would succeed. */
NRES_EXTERN int nres_ratelimit_acquire(nres_ratelimit_t *limit,
                                       nres_time_t now,
                                       nres_time_t *retry_after);
/* The same for a call of criticality `cls` (nres_class_t): a sheddable
 * call leaves half of the burst to the other classes - it is refused
 * (counted, *retry_after set) once the admission would use more than half
 * of the limiter's tolerance. */
NRES_EXTERN int nres_ratelimit_acquire_class(nres_ratelimit_t *limit,
                                             nres_time_t now, int cls,
                                             nres_time_t *retry_after);

typedef struct nres_ratelimit_stats_s {
  nres_time_t tat;              /* theoretical arrival time of the next
                                   admission */
  uint64_t refused;             /* admissions refused */
} nres_ratelimit_stats_t;

NRES_EXTERN void nres_ratelimit_stats(const nres_ratelimit_t *limit,
                                      nres_ratelimit_stats_t *out);

/* Change the rate and burst of a limiter in use, from any thread (the
 * fleet sync agent, nres/sync.h, moves a host's share of a fleet rate):
 * the ranges of nres_ratelimit_init. Admissions made ahead of `now` (at
 * most the burst) still count, at the new rate: tat - now is rescaled. */
NRES_EXTERN int nres_ratelimit_set_rate(nres_ratelimit_t *limit, double rate,
                                        uint32_t burst, nres_time_t now);
/* The rate now, admissions per second (1e9 / interval). */
NRES_EXTERN double nres_ratelimit_rate(const nres_ratelimit_t *limit);

/* --------------------------------------------------------------- bulkhead */

/* Concurrency limiter: at most `limit` attempts in flight, with a bounded
 * queue of callers waiting up to `queue_timeout` for a slot. With
 * `adaptive`, the limit moves between min_limit and max_limit by AIMD on
 * latency: +1/limit per completion under `latency_target`, * `decrease` on
 * one over it or on a TRANSIENT or THROTTLED verdict. */
/* Ranges (nres_bulkhead_config_error names the field it refuses): limit
 * >= 1; with a queue, queue_timeout > 0 and 0 < poll < NRES_TIME_NEVER (a
 * waiter must look again); adaptive 0 or 1, and when 1: min_limit <= limit
 * <= max_limit, min_limit >= 1, latency_target > 0, decrease in (0, 1).
 * No duration may be NRES_TIME_INVALID. A queued call whose next look,
 * now + poll, would saturate to NRES_TIME_NEVER (a poll near 2^64 ns with
 * no deadline and no queue timeout) stops at once with NRES_STOP_LIMITED
 * rather than wait for ever. */
struct nres_bulkhead_config_s {
  uint32_t limit;               /* fixed limit, or the adaptive start */
  uint32_t queue;               /* callers that may wait; 0 = none */
  nres_time_t queue_timeout;    /* longest wait for a slot */
  nres_time_t poll;             /* how often a waiter looks again. 1 ms */
  uint32_t adaptive;            /* 0 fixed, 1 AIMD */
  uint32_t min_limit, max_limit;
  uint32_t reserved_;
  nres_time_t latency_target;   /* AIMD: slower completions shrink it */
  double decrease;              /* AIMD multiplicative factor. 0.9 */
  /* Gradient (adaptive = NRES_ADAPTIVE_GRADIENT, after Netflix's
   * Gradient2, with Envoy-style probes of the no-load latency). Per
   * completed attempt with a latency sample (OK or TRANSIENT; THROTTLED
   * counts as a sample of twice the baseline), with `low` = max(min_limit,
   * 2 * headroom), the least concurrency it applies:
   *   recent   += (sample - recent) / 10           (a short average)
   *   baseline += (sample - baseline) / 10 for a sample that ended with at
   *               most `low` attempts in flight (a no-load sample), and
   *               (sample - baseline) / long_window for a falling one;
   *               other samples (queueing this limit allows) never raise
   *               it, so an overload is not learnt as the new normal;
   *               baseline *= 0.95 when it is above 2 * recent;
   *   gradient  = clamp(tolerance * baseline / recent, 0.5, 1)
   *   limit     = (1 - smoothing) * limit + smoothing * (limit * gradient
   *               + headroom), within [min_limit, max_limit];
   * stepped once per max(10, limit) samples (about one round trip), and
   * not changed while inflight < limit / 2 (nothing to learn). Every
   * 30 * long_window samples a probe holds the limit at `low` (critical
   * calls excepted: they keep their headroom) for limit +
   * 2 * low samples (the first `limit` drain the work started under load
   * and teach nothing), so a dependency that became slower by
   * itself is learnt within one probe (and the limit recovers). `low`
   * should be below the dependency's own concurrency. Ranges: tolerance
   * >= 1, smoothing in (0, 1], long_window >= 1; min_limit, max_limit and
   * limit as for AIMD; latency_target and decrease unused. */
  double tolerance;             /* latency over the baseline taken as no
                                   queueing. 1.5 */
  double smoothing;             /* 0.2 */
  uint32_t long_window;         /* samples the baseline averages. 600 */
  uint32_t headroom;            /* queue allowance added each step. 4 */
  /* Criticality (nres_class_t): the limit is the default class's; a
   * critical call may take a slot while inflight < limit * (1 + reserve), a
   * sheddable one only while inflight < limit * (1 - reserve); the queue
   * the same way. reserve in [0, 1); 0 (the default): every class alike. */
  double reserve;
};

/* nres_bulkhead_config_t.adaptive */
enum {
  NRES_ADAPTIVE_OFF = 0,
  NRES_ADAPTIVE_AIMD = 1,
  NRES_ADAPTIVE_GRADIENT = 2
};

struct nres_bulkhead_s {
  nres_bulkhead_config_t config;
  NRES_ATOMIC(uint32_t) inflight;
  NRES_ATOMIC(uint32_t) waiting;
  NRES_ATOMIC(uint64_t) limit_fp;       /* limit << 16 (fixed point) */
  NRES_ATOMIC(uint64_t) refused;
  NRES_ATOMIC(uint64_t) recent;         /* gradient: ns, a double's bits */
  NRES_ATOMIC(uint64_t) baseline;       /* gradient: ns, a double's bits */
  NRES_ATOMIC(uint64_t) samples;        /* gradient: samples taken */
  NRES_ATOMIC(uint32_t) probe_left;     /* gradient: probe samples to go */
  NRES_ATOMIC(uint32_t) holes;          /* tickets behind the head whose
                                           waiters left (nres_bulkhead_leave) */
  NRES_ATOMIC(uint64_t) refused_class[3];   /* refused, by nres_class_t */
  /* The queue's order (nres_bulkhead_join): the next ticket, the oldest
   * ticket that may still wait (the head), when a waiter behind the head
   * first saw a slot the head has not taken (0: none), and queue places
   * given back by their lease. */
  NRES_ATOMIC(uint64_t) tickets;
  NRES_ATOMIC(uint64_t) head;
  NRES_ATOMIC(uint64_t) free_at;
  NRES_ATOMIC(uint64_t) leases_expired;
};

NRES_EXTERN void nres_bulkhead_config_init(nres_bulkhead_config_t *config);
/* Why nres_bulkhead_init refuses `config`, as "bulkhead.field: rule"
 * (static), or NULL if it accepts it. */
NRES_EXTERN const char *nres_bulkhead_config_error(
    const nres_bulkhead_config_t *config);
NRES_EXTERN int nres_bulkhead_init(nres_bulkhead_t *bulkhead,
                                   const nres_bulkhead_config_t *config);
/* Take a slot: 0, or NRES_EFULL. A caller already queued passes queued=1:
 * new arrivals do not overtake waiting callers. As the default class. */
NRES_EXTERN int nres_bulkhead_acquire(nres_bulkhead_t *bulkhead, int queued);
/* Join the wait queue: 0, or NRES_EFULL when the queue is full. */
NRES_EXTERN int nres_bulkhead_enqueue(nres_bulkhead_t *bulkhead);
/* The same for a call of class `cls` (nres_class_t; out of range: the
 * default class), with the headroom rule of config.reserve. */
NRES_EXTERN int nres_bulkhead_acquire_class(nres_bulkhead_t *bulkhead,
                                            int queued, int cls);
NRES_EXTERN int nres_bulkhead_enqueue_class(nres_bulkhead_t *bulkhead,
                                            int cls);
NRES_EXTERN void nres_bulkhead_dequeue(nres_bulkhead_t *bulkhead);
/* The queue in order, first come first served (the executor's way; the
 * calls above are the unordered one). join: enqueue (as
 * nres_bulkhead_enqueue_class) and take the next ticket (*ticket). turn: a
 * waiter's look for a slot at `now` (the caller's clock): a slot goes to
 * the oldest ticket still waiting (the head) or to a waiter passed over
 * before; a later waiter is refused it, unless the head has left a free
 * slot untaken for two polls (config.poll): its holder is taken for gone
 * (died, hung, never looked again), the place lapses (leases_expired) and
 * the next ticket is the head. 0 (the slot taken and the queue left) or
 * NRES_EFULL. leave: a waiter gives up its place without a slot. Each join
 * ends in one turn that answers 0 or one leave. */
NRES_EXTERN int nres_bulkhead_join(nres_bulkhead_t *bulkhead, int cls,
                                   nres_time_t now, uint64_t *ticket);
NRES_EXTERN int nres_bulkhead_turn(nres_bulkhead_t *bulkhead, int cls,
                                   uint64_t ticket, nres_time_t now);
NRES_EXTERN void nres_bulkhead_leave(nres_bulkhead_t *bulkhead,
                                     uint64_t ticket);
/* Give a slot back, with the attempt's latency and verdict kind for the
 * adaptive limit (kind < 0: no sample, e.g. canceled). */
NRES_EXTERN void nres_bulkhead_release(nres_bulkhead_t *bulkhead,
                                       nres_time_t latency, int kind);
NRES_EXTERN uint32_t nres_bulkhead_limit(const nres_bulkhead_t *bulkhead);

typedef struct nres_bulkhead_stats_s {
  uint32_t inflight;            /* slots taken */
  uint32_t waiting;             /* callers in the queue */
  uint32_t limit;               /* the limit now (nres_bulkhead_limit) */
  uint32_t reserved_;
  uint64_t limit_fp;            /* the adaptive limit, << 16 */
  uint64_t refused;             /* acquisitions and queue places refused */
  double recent;                /* gradient: recent latency, ns (0: none) */
  double baseline;              /* gradient: no-load baseline, ns */
  uint64_t refused_class[3];    /* refused, by nres_class_t */
  uint64_t leases_expired;      /* queue places given back by their lease */
} nres_bulkhead_stats_t;

NRES_EXTERN void nres_bulkhead_stats(const nres_bulkhead_t *bulkhead,
                                     nres_bulkhead_stats_t *out);

/* -------------------------------------------------------------- estimator */

/* Latency quantiles from a log-linear histogram (16 sub-buckets per power
 * of two: at most 6.25 % relative error) over rotating windows of `period`;
 * fixed memory, lock-free record. */
#define NRES_HIST_SUB 16
#define NRES_HIST_BUCKETS (NRES_HIST_SUB * 38)   /* up to 2^41 ns ~ 36 min */
#define NRES_ESTIMATOR_WINDOWS 2

/* Bucket index of a value, and the upper bound of a bucket's values. */
NRES_EXTERN uint32_t nres_hist_index(uint64_t value);
NRES_EXTERN uint64_t nres_hist_upper(uint32_t index);

/* Buckets of recent samples each shard holds before they reach count[]:
 * one and a half powers of two. */
#define NRES_ESTIMATOR_PENDING 24

struct nres_estimator_s {
  nres_time_t period;           /* how long one window collects */
  NRES_ATOMIC(uint64_t) epoch[NRES_ESTIMATOR_WINDOWS];
  NRES_ATOMIC(uint32_t) count[NRES_ESTIMATOR_WINDOWS][NRES_HIST_BUCKETS];
  /* Each shard's recent samples, by bucket: entry[b % 24] counts samples
   * of bucket b (24 buckets = one and a half powers of two) in one period
   * (period, bucket and count packed in one word), and moves into count[]
   * when a sample of another bucket or period needs the entry. Quantiles
   * add them in. Threads recording similar latencies write their shard's
   * lines instead of one histogram line: 256 bytes per shard, entries in
   * the first 192, so that 64 bytes at least part two shards' entries and
   * no line holds both, however the estimator is aligned. Zero is an
   * empty entry. */
  struct {
    NRES_ATOMIC(uint64_t) entry[NRES_ESTIMATOR_PENDING];
    uint64_t reserved_[32 - NRES_ESTIMATOR_PENDING];
  } shard[NRES_SHARDS];
};

/* period > 0 and not NRES_TIME_INVALID. Quantiles read the current and the
 * previous window. */
NRES_EXTERN int nres_estimator_init(nres_estimator_t *estimator,
                                    nres_time_t period);
NRES_EXTERN void nres_estimator_record(nres_estimator_t *estimator,
                                       nres_time_t now, nres_time_t latency);
/* The q-quantile (0 < q <= 1) of recent samples, and how many there are
 * (*samples may be NULL). 0 when there are none. */
NRES_EXTERN nres_time_t nres_estimator_quantile(
    const nres_estimator_t *estimator, nres_time_t now, double q,
    uint64_t *samples);

/* ------------------------------------------------------------------ hedge */

struct nres_hedge_s {
  uint32_t max;                 /* attempts in flight at once, the first
                                   included; 0 or 1 = no hedging; at most
                                   NRES_MAX_INFLIGHT */
  uint32_t min_samples;         /* quantile delay needs this many samples;
                                   before that, no hedging. Default 20 */
  nres_time_t delay;            /* fixed hedge delay; 0 = use quantile */
  double quantile;              /* live latency quantile, e.g. 0.95 */
  double suppress_ratio;        /* no hedging while the failure ratio of the
                                   hedge window is at least this. 0.5 */
  nres_window_t window;         /* recent outcomes, for suppression */
};

/* ------------------------------------------------------------------ event */

typedef enum {
  NRES_EV_ATTEMPT = 0,          /* an attempt ended: verdict, latency */
  NRES_EV_RETRY,                /* a retry was scheduled: delay */
  NRES_EV_HEDGE,                /* a hedged attempt started */
  NRES_EV_REJECT,               /* admission refused: source */
  NRES_EV_BREAKER,              /* the breaker changed state: state */
  NRES_EV_DONE                  /* the call ended: stop */
} nres_event_type_t;

/* Where a refusal came from. */
typedef enum {
  NRES_REJECT_BREAKER = 0,
  NRES_REJECT_BUDGET,
  NRES_REJECT_RATE,
  NRES_REJECT_CONCURRENCY,
  NRES_REJECT_DRAINING,
  NRES_REJECT_THROTTLE,         /* the client-side throttle (nres_throttle_t) */
  NRES_REJECT_COUNT
} nres_reject_t;

struct nres_event_s {
  uint8_t type;                 /* nres_event_type_t */
  uint8_t value;                /* verdict kind, reject source, breaker
                                   state or stop reason, by type */
  uint16_t attempt;             /* attempt number, where it applies */
  uint32_t reserved_;
  nres_time_t now;
  nres_time_t duration;         /* latency (ATTEMPT) or delay (RETRY) */
  const nres_call_t *call;
};

/* -------------------------------------------------------------- stop reasons */

/* Why a call ended. Stable: values and names never change; new ones are
 * appended. CALLBACK: the driver's own code for the call (a binding's
 * classifier, admission hook, event listener or sleep) failed, and the
 * driver ended the call with nres_call_abort. */
#define NRES_STOP_MAP(XX)                                                    \
  XX(NONE,       "running")                                                  \
  XX(OK,         "ok")                                                       \
  XX(PERMANENT,  "permanent")                                                \
  XX(ATTEMPTS,   "attempts exhausted")                                       \
  XX(DEADLINE,   "deadline exceeded")                                        \
  XX(BUDGET,     "budget exhausted")                                         \
  XX(CIRCUIT,    "circuit open")                                             \
  XX(LIMITED,    "rate limited")                                             \
  XX(CANCELED,   "canceled")                                                 \
  XX(DRAINING,   "draining")                                                 \
  XX(THROTTLED,  "throttled locally")                                        \
  XX(CALLBACK,   "callback error")                                           \

typedef enum {
#define XX(name, _) NRES_STOP_ ## name,
  NRES_STOP_MAP(XX)
#undef XX
  NRES_STOP_COUNT
} nres_stop_t;

NRES_EXTERN const char *nres_stop_name(int stop);
/* The NRES_E* code of a stop reason (0 for OK). NONE, a call that has not
 * ended, or that nres_call_begin refused as misuse, is NRES_EINVAL. */
NRES_EXTERN int nres_stop_error(int stop);

/* --------------------------------------------------------------- counters */

/* A snapshot of a policy's telemetry. */
struct nres_counters_s {
  uint64_t calls;               /* calls ended */
  uint64_t attempts;            /* attempts ended (classified or
                                   abandoned) */
  uint64_t retries;             /* attempts after a failure (added when
                                   their call ends) */
  uint64_t hedges;              /* hedged attempts */
  uint64_t abandoned;           /* hedge losers canceled unclassified */
  uint64_t fallbacks;           /* failed calls handed to the fallback */
  uint64_t late;                /* completions after their attempt ended */
  uint64_t verdicts[NRES_VERDICT_COUNT];
  uint64_t stops[NRES_STOP_COUNT];
  uint64_t rejects[NRES_REJECT_COUNT];
  uint64_t hedges_won;          /* calls answered by a hedged attempt */
  uint64_t class_rejects[NRES_CLASS_COUNT];   /* calls refused (any
                                   source), by class */
  uint64_t isolations;          /* nres_policy_isolate(p, 1) calls */
  uint64_t resets;              /* nres_policy_isolate(p, 0) calls */
};

/* ----------------------------------------------------------------- policy */

typedef enum {
  NRES_PRESET_NONE = 0,   /* everything off: a passthrough that costs
                             nothing, no telemetry */
  NRES_PRESET_TRIVIAL,    /* 3 attempts, no delay, no time bounds */
  NRES_PRESET_DEFAULT     /* policies/default.lua: 3 attempts, exponential
                             backoff with full jitter, deadline 30 s,
                             attempt timeout 10 s cut to 5 x p99 (>= 250 ms,
                             after 100 samples), budget (0.1 per success,
                             3/s floor), breaker (20 in a row or 90 % over
                             0.1 s with >= 8 calls; a probe every 0.55 s,
                             no doubling), throttle (k 1.03 over 0.3 s,
                             fast_failure 0.1) */
} nres_preset_t;

/* Copies of a policy's success counters (see nres_policy_t.n_ok). */
#define NRES_POLICY_SHARDS NRES_SHARDS

/* Most attempts one call may have in flight (hedging). */
#define NRES_MAX_INFLIGHT 4

/* A policy: configuration (public fields, set between init and build) and
 * its telemetry. Fields after `private_` are the runtime's. A policy must
 * not be copied or moved once initialised: it points into itself.
 *
 * What nres_policy_build enforces. Each refusal is NRES_EINVAL, and
 * nres_policy_error names the field first ("attempt_timeout: exceeds
 * deadline"):
 * - attempts in 1..65535.
 * - Every duration (deadline, attempt_timeout, ceiling_floor,
 *   slow_threshold, limit_wait, hedge.delay, backoff.*) is below 2^63 ns
 *   or NRES_TIME_NEVER: NRES_TIME_INVALID and the values a negative
 *   number wraps to (2^63 ns up, NRES_TIME_WRAPPED) are refused, "field:
 *   not a number or negative"; NRES_TIME_NEVER and other huge values are
 *   accepted and saturate, whatever the field. -1 is NRES_TIME_NEVER:
 *   where that is refused (backoff.base above backoff.max) the field
 *   named is the one that holds it.
 * - attempt_timeout <= deadline when both are set (a timeout longer than
 *   the call's deadline is a mistake: set both, or the timeout alone).
 * - backoff: the rules of nres_backoff_check, fields named "backoff.*".
 * - ceiling_factor finite and >= 0; when > 0, ceiling_quantile in (0, 1]
 *   and an estimator.
 * - hedge.max <= NRES_MAX_INFLIGHT; hedge.suppress_ratio in [0, 1]; with
 *   hedge.max > 1 and hedge.delay 0, hedge.quantile in (0, 1] and an
 *   estimator; with hedge.max > 1, an initialised hedge.window.
 * - A breaker with slow_ratio > 0 and slow_threshold 0 needs an estimator
 *   and slow_factor finite and > 0.
 * - Shared state it points at is checked too: a breaker's or bulkhead's
 *   config by the rules of its *_config_error ("breaker.window: ..."), a
 *   throttle's by nres_throttle_error, an estimator's period > 0.
 * Other fields take any value: min_samples, seed; telemetry, fallback and
 * throttle_fail are read as booleans. */
struct nres_policy_s {
  uint32_t attempts;            /* total attempts, the first included;
                                   hedges count. 1..65535 */
  uint32_t telemetry;           /* 1: keep counters */
  nres_backoff_t backoff;
  nres_time_t deadline;         /* over the whole call; 0 = none */
  nres_time_t attempt_timeout;  /* per attempt; 0 = none; <= deadline
                                   when both are set */
  /* Measured attempt ceiling: factor * the `ceiling_quantile` latency of
   * OK attempts, at least ceiling_floor, once ceiling_samples exist. */
  double ceiling_factor;        /* 0 = off; finite, >= 0 */
  double ceiling_quantile;      /* (0, 1] when the ceiling is on */
  nres_time_t ceiling_floor;
  uint32_t min_samples;         /* measured values (ceiling, slow
                                   threshold) need this many samples */
  /* Slow calls for the breaker's slow ratio: slower than slow_threshold,
   * or (if 0) than slow_factor * the estimator's p50. */
  uint32_t reserved0_;
  nres_time_t slow_threshold;
  double slow_factor;
  /* Refusals of the rate limiter are waited out while the whole wait of
   * the admission (from its first refusal, across every refusal after a
   * lost race for the token) is at most this and fits the deadline;
   * otherwise the call stops. */
  nres_time_t limit_wait;
  uint32_t fallback;            /* 1: failed calls are marked for the
                                   driver to run its fallback */
  uint32_t throttle_fail;       /* 1: a call the throttle refuses ends at
                                   once, "throttled locally"; 0: it waits
                                   a throttled backoff and asks again
                                   while it has tries left */
  uint64_t seed;                /* jitter PRNG seed */
  nres_hedge_t hedge;
  /* Shared state, any of which may be NULL (off). init points the ones a
   * preset enables at the policy's own storage below; point them anywhere
   * else to share one budget or breaker between policies. */
  nres_budget_t *budget;
  nres_breaker_t *breaker;
  nres_ratelimit_t *ratelimit;
  nres_bulkhead_t *bulkhead;
  nres_estimator_t *estimator;
  nres_throttle_t *throttle;    /* client-side throttling; NULL: off */
  nres_event_cb on_event;
  void *event_data;
  /* A candidate policy run in the shadow of this one (NULL: none; see
   * nres_policy_shadow): it acts on nothing, and counts in its own
   * counters what it would have done with this policy's calls. */
  nres_policy_t *shadow;
  struct {
    nres_budget_t budget;
    nres_breaker_t breaker;
    nres_estimator_t estimator;
    nres_throttle_t throttle;
  } own;
  /* private_: derived at build, and the counters. */
  uint32_t private_flags;
  uint32_t private_magic;
  NRES_ATOMIC(uint32_t) draining;
  NRES_ATOMIC(uint64_t) sequence;       /* seeds per-call PRNGs */
  NRES_ATOMIC(uint64_t) quantile_next;  /* when the cache below is stale */
  NRES_ATOMIC(uint64_t) quantile_samples;
  NRES_ATOMIC(uint64_t) quantile_ceiling;
  NRES_ATOMIC(uint64_t) quantile_slow;
  NRES_ATOMIC(uint64_t) quantile_hedge;
  NRES_ATOMIC(uint64_t) quantile_fast;  /* throttle->fast_failure x p50 */
  NRES_ATOMIC(uint64_t) n_verdicts[NRES_VERDICT_COUNT];
  NRES_ATOMIC(uint64_t) n_stops[NRES_STOP_COUNT];
  NRES_ATOMIC(uint64_t) n_rejects[NRES_REJECT_COUNT];
  NRES_ATOMIC(uint64_t) n_retries;
  NRES_ATOMIC(uint64_t) n_hedges;
  NRES_ATOMIC(uint64_t) n_abandoned;
  NRES_ATOMIC(uint64_t) n_fallbacks;
  NRES_ATOMIC(uint64_t) n_late;
  NRES_ATOMIC(uint64_t) n_hedges_won;
  NRES_ATOMIC(uint64_t) n_class_rejects[NRES_CLASS_COUNT];
  NRES_ATOMIC(uint64_t) n_isolations;
  NRES_ATOMIC(uint64_t) n_resets;
  /* What every successful call writes - its OK verdict and its OK stop -
   * counted in one of NRES_POLICY_SHARDS shards (the calling thread's,
   * taken round-robin) instead of n_verdicts[NRES_OK] and
   * n_stops[NRES_STOP_OK], which stay 0: threads sharing a policy would
   * otherwise all write one cache line per call (bench/README.md, "Threads
   * on one policy"). 128 bytes apart, so no two shards' words share a
   * line whatever the policy's alignment. nres_policy_counters sums them.
   * An OK verdict always ends its call with stop OK, so the executor bumps
   * one word per successful call, `stops`, which counts both; `verdicts`
   * stays 0 (kept for the layout). */
  struct {
    NRES_ATOMIC(uint64_t) verdicts;
    NRES_ATOMIC(uint64_t) stops;
    uint64_t reserved_[14];
  } n_ok[NRES_POLICY_SHARDS];
};

/* Fill in a preset's configuration and reset the telemetry. */
NRES_EXTERN int nres_policy_init(nres_policy_t *policy, int preset);
/* Check the configuration (the rules above) and derive what the executor
 * needs: 0, or NRES_EINVAL and the policy is left unbuilt (calls on it end
 * at once, see nres_call_begin). A policy is usable from any thread once
 * built, and its public fields must not change after. */
NRES_EXTERN int nres_policy_build(nres_policy_t *policy);
/* Why nres_policy_build refuses this configuration, as "field: rule" (a
 * static string: "attempt_timeout: exceeds deadline", "backoff.max: below
 * backoff.base"), or NULL if it would accept it. Computed from the fields,
 * not remembered: call it after a refused build, before changing them. */
NRES_EXTERN const char *nres_policy_error(const nres_policy_t *policy);
/* Refuse new calls with NRES_STOP_DRAINING (on = 1) or accept them again. */
NRES_EXTERN void nres_policy_drain(nres_policy_t *policy, int on);
/* An operator's hand on the policy's breaker: on = 1 isolates it
 * (NRES_BREAKER_ISOLATED: every call stops NRES_STOP_CIRCUIT until reset),
 * on = 0 resets it (closed, its window emptied, from any state). Counted
 * in counters.isolations and counters.resets. 0, or NRES_EINVAL when the
 * policy has no breaker. Any thread. */
NRES_EXTERN int nres_policy_isolate(nres_policy_t *policy, int on);
/* Shadow `candidate` behind `policy` (candidate NULL: detach; either way
 * the policy is built again). The candidate, built, gives no answer to
 * any call: at each of the policy's attempts it is asked what it would
 * have done - its own throttle, rate limiter, bulkhead and breaker admit
 * or refuse, the attempt's outcome feeds its breaker, throttle, estimator
 * and budget, its attempts, deadline, backoff and budget decide whether it
 * would retry - and it counts that in its own counters (rejects, stops,
 * retries, verdicts, hedges it would have sent): read them with
 * nres_policy_counters(candidate). It follows a call until it would have
 * ended it; a call the policy ends first counts the policy's stop. The
 * candidate must not be the policy, nor have a shadow of its own, nor run
 * calls itself (its counters would mix); it gets each outcome as the
 * policy's classifier judged it. Attach before the policy takes calls, or
 * while none runs. 0, or NRES_EINVAL and the policy is left as it was
 * (with the field set by hand instead, nres_policy_error names the rule:
 * "shadow: expected another policy, got the policy itself", "... a built
 * policy ...", "... a policy without a shadow ..."). Where the candidate
 * would have waited (a rate limiter within limit_wait, a bulkhead queue)
 * it is taken as admitted; a throttle refusal ends its call; the policy's
 * hedges are not followed, and a hedge it would have sent is counted when
 * a followed attempt outlives its hedge delay (exec/shadow.c). */
NRES_EXTERN int nres_policy_shadow(nres_policy_t *policy,
                                   nres_policy_t *candidate);
/* Copy the counters out; relaxed reads, no locks. */
NRES_EXTERN void nres_policy_counters(const nres_policy_t *policy,
                                      nres_counters_t *out);
NRES_EXTERN void nres_policy_counters_reset(nres_policy_t *policy);

/* ---------------------------------------------------------------- attempt */

/* What the sync driver tells an attempt. */
struct nres_attempt_s {
  uint32_t number;              /* 1-based, over the whole call */
  uint32_t hedge;               /* 1 if a hedged attempt */
  nres_time_t deadline;         /* absolute; NRES_TIME_NEVER = none */
  nres_time_t remaining;        /* deadline - now when it started: the time
                                   to propagate downstream */
};

/* ------------------------------------------------------------------- call */

typedef enum {
  NRES_ATTEMPT = 0,             /* run an attempt in `slot` */
  NRES_WAIT = 1,                /* wait until `at`, or for an attempt
                                   in flight to end */
  NRES_DONE = 2                 /* the call is over: see `stop` */
} nres_action_kind_t;

struct nres_action_s {
  uint8_t kind;                 /* nres_action_kind_t */
  uint8_t slot;                 /* ATTEMPT: the slot to report on */
  uint8_t hedge;                /* ATTEMPT: 1 if hedged */
  uint8_t stop;                 /* DONE: nres_stop_t */
  uint8_t cancel;               /* mask of slots whose attempts the driver
                                   must abandon (their outcome is unwanted) */
  uint8_t fallback;             /* DONE: run the fallback */
  uint16_t attempt;             /* ATTEMPT: number, 1-based */
  nres_time_t at;               /* ATTEMPT: the attempt's deadline; WAIT:
                                   when to call nres_call_resume;
                                   NRES_TIME_NEVER = none */
};

/* 16 bytes, so every step returns its action in two registers. After an
 * ATTEMPT, a driver that can run attempts side by side also calls
 * nres_call_resume at call->resume_at when that is not NRES_TIME_NEVER: a
 * hedge may be due then.
 *
 * When an ATTEMPT's `at` comes and the attempt has not ended, its time is
 * up: the machine does not notice by itself (it reads no clock). A driver
 * that can stop the work abandons it and reports NRES_TRANSIENT with
 * NRES_VF_TIMEOUT on its slot (the libuv driver: abandon_cb, then that
 * verdict with code NRES_ETIMEDOUT), which is retried like any transient
 * failure. A blocking driver cannot (nres_run, the Lua run): it hands the
 * deadline to the attempt, which should bound itself, and reports the
 * verdict the attempt returns, even if it returns after `at`. */

/* One attempt of the log. */
struct nres_attempt_rec_s {
  nres_time_t start;
  nres_time_t end;              /* 0 while in flight */
  uint16_t number;
  uint8_t slot;
  uint8_t hedge;
  uint8_t kind;                 /* verdict kind, when ended */
  uint8_t flags;                /* verdict flags, or 0xff: abandoned */
  uint16_t reserved_;
};

/* The attempt log keeps the last NRES_LOG_CAP attempts of a call. */
#define NRES_LOG_CAP 8

/* One call: a flat state machine, fixed size, owned by the caller. Fields
 * are readable at any time; only nres_call_* write them. */
struct nres_call_s {
  nres_policy_t *policy;
  nres_time_t start;
  nres_time_t deadline;         /* NRES_TIME_NEVER = none */
  nres_time_t resume_at;        /* the pending WAIT's end, or a hedge time */
  uint8_t phase;                /* private: where the machine is */
  uint8_t stop;                 /* nres_stop_t; NONE while running */
  uint8_t inflight;             /* mask of slots with attempts in flight */
  uint8_t fallback;             /* 1 when the fallback should run */
  uint16_t attempts;            /* attempts started */
  uint16_t retries;
  uint16_t hedges;
  uint8_t queued;               /* 1: waiting in the bulkhead's queue */
  uint8_t seeded;               /* 1: rng is seeded */
  uint8_t charged;              /* 1: a budget token is held for the retry
                                   about to start */
  uint8_t throttled;            /* 1: the dependency asked us to slow
                                   down: no more hedges */
  uint8_t criticality;          /* nres_class_t, set by begin */
  uint8_t deferred;             /* attempts the throttle refused and the
                                   call waited out as throttled answers */
  /* The shadow candidate's view of the call (policy->shadow): private. */
  uint8_t shadow;               /* NRES__SHADOW_* bits; 0: not followed */
  uint8_t shadow_slot;          /* the slot of the attempt it follows */
  uint16_t shadow_attempts;     /* attempts it would have made */
  uint32_t shadow_permit;       /* its breaker's probe permit */
  nres_time_t queue_end;        /* when an admission wait (the rate
                                   limiter's, then a queued one) gives up */
  uint64_t ticket;              /* its place in the queue (queued) */
  nres_verdict_t last;          /* the last verdict reported */
  nres_backoff_state_t backoff;
  nres_rng_t rng;               /* seeded at the first random need */
  struct {
    nres_time_t start;
    nres_time_t deadline;
    uint32_t permit;            /* breaker probe permit */
    uint16_t number;
    uint8_t hedge;
    uint8_t held;               /* 1: holds a bulkhead slot */
  } slot[NRES_MAX_INFLIGHT];
  nres_attempt_rec_t log[NRES_LOG_CAP];
};

/* Start a call at `now`. The first action is returned. `policy` NULL or
 * not built (nres_policy_build not called, or refused) is misuse: DONE at
 * once with stop NRES_STOP_NONE, which nres_stop_error maps to NRES_EINVAL
 * (what nres_run returns for it); nothing is counted. */
NRES_EXTERN nres_action_t nres_call_begin(nres_call_t *call,
                                          nres_policy_t *policy,
                                          nres_time_t now);
/* The same with an inherited (inbound) absolute deadline, which can only
 * tighten the policy's. */
NRES_EXTERN nres_action_t nres_call_begin_within(nres_call_t *call,
                                                 nres_policy_t *policy,
                                                 nres_time_t now,
                                                 nres_time_t inbound);
/* The same for a call of criticality `cls` (nres_class_t; out of range:
 * NRES_CLASS_DEFAULT). A refused call stops with NRES_STOP_LIMITED (or
 * BUDGET, CIRCUIT...) as any other; counters.class_rejects says which
 * classes were refused. */
NRES_EXTERN nres_action_t nres_call_begin_class(nres_call_t *call,
                                                nres_policy_t *policy,
                                                nres_time_t now,
                                                nres_time_t inbound,
                                                int cls);
/* The attempt in `slot` ended with `verdict`. A report for a slot with no
 * attempt in flight (late, or abandoned), or with a verdict kind out of
 * range (misuse), changes nothing, is counted as late, and returns the
 * pending action again. On a call that is not running (over, or ended at
 * begin as misuse) that is its DONE again, same stop and fallback, with no
 * slots to cancel. Once a transient or throttled report leaves nothing in
 * flight, the retry is decided at once: attempts used up, the deadline
 * reached, or a backoff that would end at or after the deadline all end
 * the call now (NRES_STOP_ATTEMPTS, NRES_STOP_DEADLINE), without waiting
 * and without spending budget; otherwise a budget refusal ends it
 * (NRES_STOP_BUDGET), or WAIT for the backoff comes back. */
NRES_EXTERN nres_action_t nres_call_report(nres_call_t *call, unsigned slot,
                                           nres_time_t now,
                                           nres_verdict_t verdict);
/* A WAIT's time came, or call->resume_at (a hedge time) after an ATTEMPT.
 * Early, it returns the same WAIT; on a call that is not running, its DONE
 * again. */
NRES_EXTERN nres_action_t nres_call_resume(nres_call_t *call, nres_time_t now);
/* The caller gives up: every permit is released, nothing counts as a
 * failure, and DONE with NRES_STOP_CANCELED comes back (with the slots to
 * abandon). Canceling a finished call returns its DONE again. */
NRES_EXTERN nres_action_t nres_call_cancel(nres_call_t *call, nres_time_t now);
/* The same end for a call whose driver's own code failed (a classifier
 * that raised or answered junk, an admission hook, an event listener, the
 * driver's sleep): everything given back as by nres_call_cancel, nothing
 * counted against the dependency, no fallback, but the stop is
 * NRES_STOP_CALLBACK (nres_stop_error: NRES_ECALLBACK), so the caller
 * learns that the call failed on its own side. */
NRES_EXTERN nres_action_t nres_call_abort(nres_call_t *call, nres_time_t now);
/* Time left before the call's deadline (NRES_TIME_NEVER if none). */
NRES_EXTERN nres_time_t nres_call_remaining(const nres_call_t *call,
                                            nres_time_t now);
/* The i-th most recent attempt of the log (0 = the last), or NULL. */
NRES_EXTERN const nres_attempt_rec_t *nres_call_log(const nres_call_t *call,
                                                     unsigned i);

/* ------------------------------------------------------------ sync driver */

/* Run a call on this thread: attempts are `fn`, waits sleep with
 * nanosleep. Hedging needs an asynchronous driver: here an attempt
 * always ends before a hedge could start. fn cannot be interrupted: it gets
 * its deadline in `attempt` and its verdict counts as returned, even after
 * the deadline. Returns 0 when the call succeeded, otherwise the NRES_E*
 * code of its stop reason (NRES_EINVAL on misuse: a NULL argument or an
 * unbuilt policy, and then fn is never called and `call` is untouched).
 * `call` keeps the details. */
NRES_EXTERN int nres_run(nres_policy_t *policy, nres_attempt_fn fn, void *arg,
                         nres_call_t *call);

/* ----------------------------------------------------------- binding steps */

/* The same steps for bindings that cannot take 64-bit integers or structs
 * by value without allocating (LuaJIT FFI): time in double nanoseconds
 * (-1 = never / none), the verdict as scalars, the action written to *out
 * as ints and doubles. Each returns out->kind. */
typedef struct nres_step_s {
  int32_t kind, slot, hedge, stop, cancel, fallback, attempt, reserved_;
  double at;                    /* nres_action_t.at, -1 = never */
  double resume_at;             /* call->resume_at (a hedge time), -1 */
} nres_step_t;

NRES_EXTERN int nres_step_begin(nres_call_t *call, nres_policy_t *policy,
                                double now, double inbound, nres_step_t *out);
NRES_EXTERN int nres_step_begin_class(nres_call_t *call, nres_policy_t *policy,
                                      double now, double inbound, int cls,
                                      nres_step_t *out);
/* retry_after < 0: none. */
NRES_EXTERN int nres_step_report(nres_call_t *call, unsigned slot, double now,
                                 int kind, int flags, double retry_after,
                                 nres_step_t *out);
NRES_EXTERN int nres_step_resume(nres_call_t *call, double now,
                                 nres_step_t *out);
NRES_EXTERN int nres_step_cancel(nres_call_t *call, double now,
                                 nres_step_t *out);
NRES_EXTERN int nres_step_abort(nres_call_t *call, double now,
                                nres_step_t *out);
/* A call's end for a binding, as doubles only (a binding that reads the
 * log's 64-bit fields or its records by reference makes a fresh box for
 * each, where its code is not compiled): out[0] the entries n (the last
 * min(attempts, NRES_LOG_CAP) attempts), out[1] the last verdict's flags,
 * then per entry, oldest first, NRES_STEP_LOG_FIELDS doubles: number,
 * hedge, verdict kind, flags (0xff: abandoned), start and end (ns). out
 * holds at least NRES_STEP_LOG_SIZE doubles. Returns n. */
#define NRES_STEP_LOG_FIELDS 6
#define NRES_STEP_LOG_SIZE (2 + NRES_LOG_CAP * NRES_STEP_LOG_FIELDS)
NRES_EXTERN int nres_step_log(const nres_call_t *call, double *out);
/* The two steps of a synchronous driver's call (one attempt at a time, no
 * hedging), one FFI call each: nres_step_begin_class with no inherited
 * deadline, and nres_step_report (nres_step_sync_resume: nres_step_resume,
 * after a wait). now < 0 means "read the runtime's clock here"
 * (nres_clock_now, what nres_step_now returns), for a driver on that
 * clock. They answer the action packed, kind | slot << 8 | hedge << 16 |
 * stop << 24 (nres_action_t's first four bytes), and its time
 * (nres_action_t.at, -1 = never) in *at; an ATTEMPT's number is
 * call->attempts, a DONE's fallback call->fallback. Their actions are the
 * general steps': any unusual case (another class, a passthrough policy, a
 * late report, misuse) goes through those. */
NRES_EXTERN int nres_step_sync_begin(nres_call_t *call, nres_policy_t *policy,
                                     double now, int cls, double *at);
NRES_EXTERN int nres_step_sync_report(nres_call_t *call, unsigned slot,
                                      double now, int kind, int flags,
                                      double retry_after, double *at);
NRES_EXTERN int nres_step_sync_resume(nres_call_t *call, double now,
                                      double *at);

/* nres_clock_now as a double, and a sleep of ns nanoseconds on it. */
NRES_EXTERN double nres_step_now(void);
NRES_EXTERN void nres_step_sleep(double ns);

/* ------------------------------------------------------------------ sizes */

/* Sizes of the public structs, so bindings can check their declarations. */
typedef enum {
  NRES_SIZEOF_POLICY = 0,
  NRES_SIZEOF_CALL,
  NRES_SIZEOF_ACTION,
  NRES_SIZEOF_VERDICT,
  NRES_SIZEOF_BUDGET,
  NRES_SIZEOF_BREAKER,
  NRES_SIZEOF_RATELIMIT,
  NRES_SIZEOF_BULKHEAD,
  NRES_SIZEOF_ESTIMATOR,
  NRES_SIZEOF_COUNTERS,
  NRES_SIZEOF_STEP,
  NRES_SIZEOF_WINDOW,
  NRES_SIZEOF_BUDGET_STATS,
  NRES_SIZEOF_BREAKER_STATS,
  NRES_SIZEOF_RATELIMIT_STATS,
  NRES_SIZEOF_BULKHEAD_STATS,
  NRES_SIZEOF_THROTTLE,
  NRES_SIZEOF_THROTTLE_STATS,
  NRES_SIZEOF_COUNT
} nres_sizeof_t;

/* 0 for an unknown kind. */
NRES_EXTERN size_t nres_sizeof(int kind);

#ifdef __cplusplus
}
#endif
#endif /* NRES_H */

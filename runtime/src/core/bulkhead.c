/* SPDX-License-Identifier: MIT */
/* bulkhead.c - the concurrency limiter: at most `limit` attempts in flight,
 * a bounded count of callers waiting for a slot, and an optional adaptive
 * limit that follows the dependency's latency: AIMD, or a gradient of the
 * no-load latency over the recent one (after Netflix's Gradient2), with
 * per-class headroom (criticality) around the limit.
 *
 * The bulkhead only counts; it never waits. A caller refused a slot may join
 * the queue (enqueue) and ask again with queued=1 until its driver's
 * queue_timeout runs out; while anyone waits, new arrivals are refused so
 * they cannot overtake the queue. A waiter that gets a slot should call
 * dequeue after acquire succeeds, so no arrival slips in between. All
 * counters are atomic words updated by CAS, so one bulkhead can be shared by
 * threads and processes. It is separate from the rate limiter because it
 * bounds work in progress, not arrivals per second.
 *
 * The queue is first come, first served when waiters use tickets
 * (nres_bulkhead_join / turn / leave, as the executor does): a slot freed
 * while anyone waits is the oldest waiter's (the head's), kept from later
 * waiters and from new arrivals until it looks again (at most one poll).
 * A queue place has a lease: a head that leaves a free slot untaken for two
 * polls is passed over (its holder died, hung or gave up without leave)
 * and counted in leases_expired; a waiter passed over that is alive still
 * goes before every later ticket. So a vanished waiter delays the line by
 * two polls at most, and never blocks it.
 *
 * `refused` counts refusals that end a call as far as the bulkhead can see:
 * acquire refusals of new arrivals when there is no queue (queue == 0; with
 * a queue the caller goes on to enqueue, so counting both would count one
 * call twice) and enqueue refusals. Queued callers that give up after
 * queue_timeout are not counted here: dequeue does not say why.
 */
#include <string.h>

#include "internal.h"

#define FP_SHIFT 16
#define PROBE_EVERY 30   /* gradient: a probe every 30 * long_window samples */

void nres_bulkhead_config_init(nres_bulkhead_config_t *config) {
  config->limit = 64;
  config->queue = 0;
  config->queue_timeout = 0;
  config->poll = NRES_MSEC;
  config->adaptive = 0;
  config->min_limit = 1;
  config->max_limit = 1000;
  config->reserved_ = 0;
  config->latency_target = 0;
  config->decrease = 0.9;
  config->tolerance = 1.5;
  config->smoothing = 0.2;
  config->long_window = 600;
  config->headroom = 4;
  config->reserve = 0;
}

const char *nres_bulkhead_config_error(const nres_bulkhead_config_t *config) {
  if (config == NULL)
    return "bulkhead: NULL config";
  if (config->limit < 1)
    return "bulkhead.limit: must be >= 1";
  if (config->queue_timeout == NRES_TIME_INVALID)
    return "bulkhead.queue_timeout: not a number or negative";
  if (config->poll == NRES_TIME_INVALID)
    return "bulkhead.poll: not a number or negative";
  if (config->latency_target == NRES_TIME_INVALID)
    return "bulkhead.latency_target: not a number or negative";
  if (config->queue > 0) {
    if (config->queue_timeout == 0)
      return "bulkhead.queue_timeout: must be > 0 with a queue";
    /* A waiter that never looks again would wait forever. */
    if (config->poll == 0 || config->poll == NRES_TIME_NEVER)
      return "bulkhead.poll: must be > 0 and not never with a queue";
  }
  if (config->adaptive > NRES_ADAPTIVE_GRADIENT)
    return "bulkhead.adaptive: must be 0 (off), 1 (AIMD) or 2 (gradient)";
  if (!(config->reserve >= 0 && config->reserve < 1))   /* NaN too */
    return "bulkhead.reserve: must be in [0, 1)";
  if (config->adaptive == NRES_ADAPTIVE_GRADIENT) {
    if (config->min_limit < 1 || config->min_limit > config->limit)
      return "bulkhead.min_limit: must be 1..limit";
    if (config->limit > config->max_limit)
      return "bulkhead.max_limit: below bulkhead.limit";
    if (!(config->tolerance >= 1 && config->tolerance < 1e6))
      return "bulkhead.tolerance: must be >= 1";
    if (!(config->smoothing > 0 && config->smoothing <= 1))
      return "bulkhead.smoothing: must be in (0, 1]";
    if (config->long_window < 1)
      return "bulkhead.long_window: must be >= 1";
  } else if (config->adaptive) {
    if (config->min_limit < 1 || config->min_limit > config->limit)
      return "bulkhead.min_limit: must be 1..limit";
    if (config->limit > config->max_limit)
      return "bulkhead.max_limit: below bulkhead.limit";
    if (config->latency_target == 0)
      return "bulkhead.latency_target: must be > 0 when adaptive";
    if (!(config->decrease > 0 && config->decrease < 1))   /* NaN too */
      return "bulkhead.decrease: must be in (0, 1)";
  }
  return NULL;
}

int nres_bulkhead_init(nres_bulkhead_t *bulkhead,
                       const nres_bulkhead_config_t *config) {
  if (bulkhead == NULL || nres_bulkhead_config_error(config) != NULL)
    return NRES_EINVAL;

  bulkhead->config = *config;
  nres__store(&bulkhead->inflight, 0);
  nres__store(&bulkhead->waiting, 0);
  nres__store(&bulkhead->limit_fp, (uint64_t) config->limit << FP_SHIFT);
  nres__store(&bulkhead->refused, 0);
  nres__store(&bulkhead->recent, 0);
  nres__store(&bulkhead->baseline, 0);
  nres__store(&bulkhead->samples, 0);
  nres__store(&bulkhead->probe_left, 0);
  for (int i = 0; i < NRES_CLASS_COUNT; i++)
    nres__store(&bulkhead->refused_class[i], 0);
  nres__store(&bulkhead->tickets, 0);
  nres__store(&bulkhead->head, 0);
  nres__store(&bulkhead->free_at, 0);
  nres__store(&bulkhead->leases_expired, 0);
  nres__store(&bulkhead->holes, 0);
  return 0;
}

/* The least concurrency the gradient applies: where a gradient of 0.5
 * holds the limit (2 * headroom), or min_limit. */
static uint32_t floor_limit(const nres_bulkhead_config_t *c) {
  return c->min_limit > 2 * c->headroom ? c->min_limit : 2 * c->headroom;
}

/* The share of the limit (or queue) a class may fill, 16.16 fixed point. */
static uint64_t class_cap(uint64_t fp, double reserve, int cls) {
  if (reserve == 0 || cls == NRES_CLASS_DEFAULT)
    return fp;
  if (cls == NRES_CLASS_CRITICAL)
    return fp + (uint64_t) ((double) fp * reserve);
  return fp - (uint64_t) ((double) fp * reserve);
}

/* Is there a slot for one more attempt of class cls, with cur in flight?
 * The limit is read afresh on every call. An adaptive decrease between
 * this read and the caller's CAS can leave inflight above the new limit
 * for a moment; running attempts are never evicted anyway. A fixed limit
 * is exact: the CAS only succeeds while inflight is below it. */
static int room(nres_bulkhead_t *bulkhead, int cls, uint32_t cur) {
  uint64_t cap;

  cap = class_cap(nres__load(&bulkhead->limit_fp), bulkhead->config.reserve,
                  cls);
  if (__builtin_expect(bulkhead->config.adaptive == NRES_ADAPTIVE_GRADIENT, 0) &&
      cls != NRES_CLASS_CRITICAL && nres__load(&bulkhead->probe_left) > 0 &&
      cap > ((uint64_t) floor_limit(&bulkhead->config) << FP_SHIFT))
    cap = (uint64_t) floor_limit(&bulkhead->config) << FP_SHIFT;   /* probe */
  return ((uint64_t) cur << FP_SHIFT) + ((uint64_t) 1 << FP_SHIFT) <= cap ||
         (cur == 0 && cap > 0);   /* a class with any share gets one slot */
}

int nres_bulkhead_acquire_class(nres_bulkhead_t *bulkhead, int queued,
                                int cls) {
  uint32_t cur;

  if (cls < 0 || cls >= NRES_CLASS_COUNT)
    cls = NRES_CLASS_DEFAULT;
  if (!queued && nres__load(&bulkhead->waiting) > 0)
    goto full;

  cur = nres__load(&bulkhead->inflight);
  do {
    if (!room(bulkhead, cls, cur))
      goto full;
  } while (!nres__cas(&bulkhead->inflight, &cur, cur + 1));
  return 0;

full:
  if (!queued && bulkhead->config.queue == 0) {
    nres__add(&bulkhead->refused, 1);
    nres__add(&bulkhead->refused_class[cls], 1);
  }
  return NRES_EFULL;
}

int nres_bulkhead_acquire(nres_bulkhead_t *bulkhead, int queued) {
  return nres_bulkhead_acquire_class(bulkhead, queued, NRES_CLASS_DEFAULT);
}

int nres_bulkhead_enqueue_class(nres_bulkhead_t *bulkhead, int cls) {
  uint32_t cur;
  uint64_t cap;

  if (cls < 0 || cls >= NRES_CLASS_COUNT)
    cls = NRES_CLASS_DEFAULT;
  cap = class_cap((uint64_t) bulkhead->config.queue << FP_SHIFT,
                  bulkhead->config.reserve, cls);
  cur = nres__load(&bulkhead->waiting);
  do {
    if (((uint64_t) cur << FP_SHIFT) + ((uint64_t) 1 << FP_SHIFT) > cap) {
      nres__add(&bulkhead->refused, 1);
      nres__add(&bulkhead->refused_class[cls], 1);
      return NRES_EFULL;
    }
  } while (!nres__cas(&bulkhead->waiting, &cur, cur + 1));
  return 0;
}

int nres_bulkhead_enqueue(nres_bulkhead_t *bulkhead) {
  return nres_bulkhead_enqueue_class(bulkhead, NRES_CLASS_DEFAULT);
}

/* Decrement without wrapping (below). */
static void decrement(NRES_ATOMIC(uint32_t) *counter);

/* The head moves on from h (served, gone or lapsed): the next ticket gets
 * its two polls from when a slot is first seen free for it. */
static int advance(nres_bulkhead_t *bulkhead, uint64_t h) {
  if (!nres__cas(&bulkhead->head, &h, h + 1))
    return 0;
  nres__store(&bulkhead->free_at, 0);
  /* The line is empty: no hole is left in it. (lapse_head cannot tell a
   * hole from a vanished waiter's place, so it may have counted one for
   * the other; here the count starts afresh.) */
  if (h + 1 == nres__load(&bulkhead->tickets))
    nres__store(&bulkhead->holes, 0);
  return 1;
}

/* The head's place lapses if a slot has been free for it two polls (from
 * when a later waiter or an arrival first saw it so): its holder died,
 * hung or left without leave, or it is a hole (a waiter that gave up
 * behind the head, counted out of the queue already). Holes are taken
 * first: while there are any, a lapse is counted as one; else as the
 * place's own, out of the queue's count and into leases_expired. 1 if it
 * lapsed. */
static int lapse_head(nres_bulkhead_t *bulkhead, int cls, nres_time_t now) {
  uint64_t h = nres__load(&bulkhead->head), seen;
  uint32_t holes;

  if (h == nres__load(&bulkhead->tickets) ||
      !room(bulkhead, cls, nres__load(&bulkhead->inflight)))
    return 0;
  seen = nres__load(&bulkhead->free_at);
  if (seen == 0) {
    nres__cas(&bulkhead->free_at, &seen, now > 0 ? now : 1);
    return 0;
  }
  if (now < seen ||
      now - seen < nres_time_add(bulkhead->config.poll, bulkhead->config.poll))
    return 0;
  if (!advance(bulkhead, h))
    return 1;   /* moved meanwhile: look again */
  holes = nres__load(&bulkhead->holes);
  do {
    if (holes == 0) {   /* a waiter's place, not a hole: its lease ran out */
      decrement(&bulkhead->waiting);
      nres__add(&bulkhead->leases_expired, 1);
      break;
    }
  } while (!nres__cas(&bulkhead->holes, &holes, holes - 1));
  return 1;
}

int nres_bulkhead_join(nres_bulkhead_t *bulkhead, int cls, nres_time_t now,
                       uint64_t *ticket) {
  int rc;

  if (cls < 0 || cls >= NRES_CLASS_COUNT)
    cls = NRES_CLASS_DEFAULT;
  while (lapse_head(bulkhead, cls, now))
    ;
  rc = nres_bulkhead_enqueue_class(bulkhead, cls);
  if (rc == 0)
    *ticket = nres__add(&bulkhead->tickets, 1);
  return rc;
}

int nres_bulkhead_turn(nres_bulkhead_t *bulkhead, int cls, uint64_t ticket,
                       nres_time_t now) {
  uint64_t h;

  if (cls < 0 || cls >= NRES_CLASS_COUNT)
    cls = NRES_CLASS_DEFAULT;
  for (;;) {
    h = nres__load(&bulkhead->head);
    if (ticket <= h)
      break;   /* its turn, or passed over and still here: first served */
    /* Behind the head: a slot free now is the head's, for two polls. */
    if (!lapse_head(bulkhead, cls, now))
      return NRES_EFULL;
  }
  if (nres_bulkhead_acquire_class(bulkhead, 1, cls) != 0)
    return NRES_EFULL;
  /* Out of the queue with its slot; a place that lapsed (ticket < h, or
   * the head's place lapsing meanwhile) was counted out already. */
  if (ticket == h && advance(bulkhead, h))
    decrement(&bulkhead->waiting);
  else
    nres__store(&bulkhead->free_at, 0);   /* the slot seen free is taken */
  return 0;
}

void nres_bulkhead_leave(nres_bulkhead_t *bulkhead, uint64_t ticket) {
  uint64_t h = nres__load(&bulkhead->head);

  if (ticket < h)
    return;   /* its place lapsed: counted out already */
  if (ticket == h) {
    if (advance(bulkhead, h))
      decrement(&bulkhead->waiting);   /* else it lapsed meanwhile */
    return;
  }
  /* Behind the head: its ticket stays in the line, a hole its turn will
   * pass over; the place is free for others now. */
  nres__add(&bulkhead->holes, 1);
  decrement(&bulkhead->waiting);
}

/* Decrement without wrapping: a release or dequeue without its match would
 * otherwise turn 0 into UINT32_MAX and refuse everyone from then on. */
static void decrement(NRES_ATOMIC(uint32_t) *counter) {
  uint32_t cur;

  cur = nres__load(counter);
  do {
    if (cur == 0)
      return;
  } while (!nres__cas(counter, &cur, cur - 1));
}

void nres_bulkhead_dequeue(nres_bulkhead_t *bulkhead) {
  decrement(&bulkhead->waiting);
}

/* The AIMD step for one completion, in 16.16 fixed point. */
static void adapt(nres_bulkhead_t *bulkhead, nres_time_t latency, int kind) {
  const nres_bulkhead_config_t *c = &bulkhead->config;
  uint64_t min_fp = (uint64_t) c->min_limit << FP_SHIFT;
  uint64_t max_fp = (uint64_t) c->max_limit << FP_SHIFT;
  uint64_t cur;
  uint64_t next;
  int shrink;

  if (kind == NRES_TRANSIENT || kind == NRES_THROTTLED ||
      latency > c->latency_target)
    shrink = 1;
  else if (kind == NRES_OK)
    shrink = 0;
  else
    return;   /* PERMANENT or CANCELED under target: says nothing of load */

  cur = nres__load(&bulkhead->limit_fp);
  do {
    if (shrink) {
      /* limit_fp < 2^48, exact in a double. */
      next = (uint64_t) ((double) cur * c->decrease);
      if (next < min_fp)
        next = min_fp;
    } else {
      /* + 1/limit, rounded: 2^32 / limit_fp is 1/limit in 16.16. At least
       * one unit, so a large limit still creeps up. */
      uint64_t inc = ((UINT64_C(1) << 32) + cur / 2) / cur;
      next = cur + (inc ? inc : 1);
      if (next > max_fp)
        next = max_fp;
    }
    if (next == cur)
      return;
  } while (!nres__cas(&bulkhead->limit_fp, &cur, next));
}

/* Doubles kept in atomic 64-bit words (pointer-free, shareable). */
static double load_double(NRES_ATOMIC(uint64_t) *word) {
  uint64_t bits = nres__load(word);
  double v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

/* word += (sample - word) * alpha, by CAS; a first sample (0) is taken as
 * it is. Returns the new value. */
static double average(NRES_ATOMIC(uint64_t) *word, double sample,
                      double alpha) {
  uint64_t cur = nres__load(word), next;
  double v, n;

  do {
    memcpy(&v, &cur, sizeof(v));
    n = v == 0 ? sample : v + (sample - v) * alpha;
    memcpy(&next, &n, sizeof(next));
  } while (!nres__cas(word, &cur, next));
  return n;
}

/* The gradient step for one completion (see nres.h). `inflight`: attempts
 * in flight with this one, as it ended. */
static void gradient(nres_bulkhead_t *bulkhead, nres_time_t latency,
                     int kind, uint32_t inflight) {
  const nres_bulkhead_config_t *c = &bulkhead->config;
  uint64_t min_fp = (uint64_t) c->min_limit << FP_SHIFT;
  uint64_t max_fp = (uint64_t) c->max_limit << FP_SHIFT;
  uint32_t low = floor_limit(c), left;
  uint64_t cur, next, n;
  double sample, base, recent, g, limit, target;

  if (kind == NRES_OK || kind == NRES_TRANSIENT)
    sample = (double) latency;
  else if (kind == NRES_THROTTLED)
    sample = 2 * load_double(&bulkhead->baseline);
  else
    return;   /* PERMANENT, CANCELED: says nothing of load */
  if (!(sample > 0))
    return;

  /* Every 10 * long_window samples, a probe: the limit is held at its
   * floor until 2 * floor samples have come in at that concurrency. */
  n = nres__add(&bulkhead->samples, 1) + 1;
  cur = nres__load(&bulkhead->limit_fp);
  if (n % (PROBE_EVERY * (uint64_t) c->long_window) == 0)   /* drain, measure */
    nres__store(&bulkhead->probe_left,
                2 * low + (uint32_t) (cur >> FP_SHIFT));
  left = nres__load(&bulkhead->probe_left);
  while (left > 0 && !nres__cas(&bulkhead->probe_left, &left, left - 1)) {
  }

  /* A probe's samples measure the baseline only: the recent latency keeps
   * its loaded value, or the limit would overshoot when the probe ends. */
  if (left > 0 && load_double(&bulkhead->recent) > 0)
    recent = load_double(&bulkhead->recent);
  else
    recent = average(&bulkhead->recent, sample, 0.1);
  base = load_double(&bulkhead->baseline);
  /* A sample at low concurrency is a no-load sample, but not while a
   * probe drains the attempts started under load. */
  if (base == 0 || (inflight <= low && left <= 2 * low)) {
    base = average(&bulkhead->baseline, sample, 0.1);
  } else if (sample < base) {
    base = average(&bulkhead->baseline, sample, 1.0 / c->long_window);
  }
  if (base > 2 * recent) {   /* back from an overload: catch up at once */
    uint64_t bits, want;
    double shrunk = base * 0.95;
    bits = nres__load(&bulkhead->baseline);
    memcpy(&want, &shrunk, sizeof(want));
    nres__cas(&bulkhead->baseline, &bits, want);   /* lost race: fine */
    base = shrunk;
  }

  if ((uint64_t) inflight * 2 < (cur >> FP_SHIFT))
    return;   /* app-limited: nothing to learn about the limit */
  /* One step per window of max(10, limit) samples, about one round trip
   * of the work in flight: a sample reflects the load when its attempt
   * started, and stepping on every one would overshoot. */
  if (n % ((cur >> FP_SHIFT) > 10 ? (cur >> FP_SHIFT) : 10) != 0)
    return;
  g = c->tolerance * base / recent;
  if (g > 1)
    g = 1;
  else if (g < 0.5)
    g = 0.5;
  do {
    limit = (double) cur / (1 << FP_SHIFT);
    target = limit * g + c->headroom;
    limit = limit * (1 - c->smoothing) + target * c->smoothing;
    next = (uint64_t) (limit * (1 << FP_SHIFT));
    if (next < min_fp)
      next = min_fp;
    if (next > max_fp)
      next = max_fp;
    if (next == cur)
      return;
  } while (!nres__cas(&bulkhead->limit_fp, &cur, next));
}

void nres_bulkhead_release(nres_bulkhead_t *bulkhead, nres_time_t latency,
                           int kind) {
  uint32_t before = nres__load(&bulkhead->inflight);

  decrement(&bulkhead->inflight);
  if (!bulkhead->config.adaptive || kind < 0 || kind >= NRES_VERDICT_COUNT)
    return;
  if (bulkhead->config.adaptive == NRES_ADAPTIVE_GRADIENT)
    gradient(bulkhead, latency, kind, before);
  else
    adapt(bulkhead, latency, kind);
}

uint32_t nres_bulkhead_limit(const nres_bulkhead_t *bulkhead) {
  return (uint32_t) (nres__load(&bulkhead->limit_fp) >> FP_SHIFT);
}

void nres_bulkhead_stats(const nres_bulkhead_t *bulkhead,
                         nres_bulkhead_stats_t *out) {
  nres_bulkhead_t *b = (nres_bulkhead_t *) bulkhead;   /* loads only */

  out->inflight = nres__load(&b->inflight);
  out->waiting = nres__load(&b->waiting);
  out->limit_fp = nres__load(&b->limit_fp);
  out->limit = (uint32_t) (out->limit_fp >> FP_SHIFT);
  out->reserved_ = 0;
  out->refused = nres__load(&b->refused);
  out->recent = load_double(&b->recent);
  out->baseline = load_double(&b->baseline);
  for (int i = 0; i < NRES_CLASS_COUNT; i++)
    out->refused_class[i] = nres__load(&b->refused_class[i]);
  out->leases_expired = nres__load(&b->leases_expired);
}

/* bulkhead.c - the concurrency limiter: at most `limit` attempts in flight,
 * a bounded count of callers waiting for a slot, and an optional AIMD limit
 * that follows the dependency's latency.
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
 * `refused` counts refusals that end a call as far as the bulkhead can see:
 * acquire refusals of new arrivals when there is no queue (queue == 0; with
 * a queue the caller goes on to enqueue, so counting both would count one
 * call twice) and enqueue refusals. Queued callers that give up after
 * queue_timeout are not counted here: dequeue does not say why.
 */
#include "internal.h"

#define FP_SHIFT 16

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
  if (config->adaptive > 1)
    return "bulkhead.adaptive: must be 0 or 1";
  if (config->adaptive) {
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
  return 0;
}

int nres_bulkhead_acquire(nres_bulkhead_t *bulkhead, int queued) {
  uint32_t cur;
  uint64_t limit;

  if (!queued && nres__load(&bulkhead->waiting) > 0)
    goto full;

  cur = nres__load(&bulkhead->inflight);
  do {
    /* The limit is read afresh on every try. An adaptive decrease between
     * this read and the CAS can leave inflight above the new limit for a
     * moment; running attempts are never evicted anyway. A fixed limit is
     * exact: the CAS only succeeds while inflight is below it. */
    limit = nres__load(&bulkhead->limit_fp) >> FP_SHIFT;
    if (cur >= limit)
      goto full;
  } while (!nres__cas(&bulkhead->inflight, &cur, cur + 1));
  return 0;

full:
  if (!queued && bulkhead->config.queue == 0)
    nres__add(&bulkhead->refused, 1);
  return NRES_EFULL;
}

int nres_bulkhead_enqueue(nres_bulkhead_t *bulkhead) {
  uint32_t cur;

  cur = nres__load(&bulkhead->waiting);
  do {
    if (cur >= bulkhead->config.queue) {
      nres__add(&bulkhead->refused, 1);
      return NRES_EFULL;
    }
  } while (!nres__cas(&bulkhead->waiting, &cur, cur + 1));
  return 0;
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

void nres_bulkhead_release(nres_bulkhead_t *bulkhead, nres_time_t latency,
                           int kind) {
  decrement(&bulkhead->inflight);
  if (bulkhead->config.adaptive && kind >= 0 && kind < NRES_VERDICT_COUNT)
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
}

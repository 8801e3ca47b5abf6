/* SPDX-License-Identifier: MIT */
/* throttle.c - client-side adaptive throttling: refuse locally what an
 * overloaded dependency would refuse anyway.
 *
 * A retry budget bounds what retries add to the offered load; it cannot
 * bring the load below it. When the offered load alone exceeds what the
 * dependency can serve, every request beyond its capacity still travels
 * to it, costs it the work of refusing, and comes back refused. The SRE
 * book's client-side throttling ("Handling Overload") keeps, per client,
 * requests (attempts wanted) and accepts (attempts the dependency did not
 * refuse for overload) over the last couple of minutes - here a short
 * window - and refuses locally with probability
 *
 *   max(0, (requests - k * accepts) / (requests + 1))
 *
 * Refused attempts count as requests, so the refusals rise until what is
 * sent is about k * accepts: the dependency gets k times what it serves,
 * a little more than its capacity. When it has room again accepts rise,
 * but sending grows only k-fold per window that way; so once the
 * dependency has refused nothing for a while (`refused_at`, the time of
 * its last refusal) k itself grows with the quiet (room, below). While
 * it refuses (a refusal in the last 30 ms) k is lowered by 0.1 instead:
 * a refusal says its queue is full now, and the odds, which follow a
 * window, would go on sending k x accepts into it (the dip, below). A local
 * refusal is not a failed call: the executor waits a throttled backoff and
 * asks again while the call has tries left (exec/call.c, throttle_refused).
 * Only an overload refusal
 * (a THROTTLED verdict) is a non-accept: errors and timeouts are the
 * dependency answering, and an outage is the breaker's to cut, so the two
 * never cut the same traffic.
 *
 * Counts are an nres_window_t (calls = requests, failures = non-accepts),
 * added when an attempt is answered or refused, so an attempt in flight is
 * not a request yet: the counts trail by one latency. The probability is
 * kept as odds in 2^-32 in one word, recomputed from the window at most
 * every `refresh` by the caller that moves `next` (a CAS), so the usual
 * admission reads two words and draws nothing; a call's first admission
 * reads one (`due`: `next` while the odds are 0, else 0) and goes the
 * gated way only when it is due.
 */
#include <math.h>

#include "core/throttle.h"

/* Most the cached odds are trusted: a window of fast traffic moves
 * within milliseconds. */
#define THROTTLE_REFRESH (10 * NRES_MSEC)
#define K_MAX 1000.0
/* Room: once the dependency has refused nothing for ROOM_QUIET, k grows
 * by ROOM_GROWTH per second more of quiet. The odds alone let sending grow
 * only k-fold per window after an overload, and the calls the throttle
 * defers (exec/call.c) ask again and keep the requests counted high: without
 * room the default took 29-46 s to come back after overload-deep. Quiet
 * spells shorter than 0.8 s come and go within an overload, and growth
 * from 0.3-0.6 s of quiet sent overload-deep 1.10-1.16 x its capacity
 * (bench/README.md, the tournament). */
#define ROOM_QUIET (800 * NRES_MSEC)
#define ROOM_GROWTH 5.0
/* The dip: for DIP_FOR after each refusal of the dependency, k is lowered
 * by DIP (k 1.03: ~0.93 x accepts sent). A refusal says the dependency's
 * queue is full at this instant; the odds follow the window's counts and
 * went on sending k x accepts (plus one a window) into it, where every
 * request above what it serves is refused at once. Each room spell that
 * refilled a queue left at 10-20 of 32 ended in 10-22 refusals, and
 * overload-deep's dependency got 1.07-1.10 x its capacity (16.5 refusals/s
 * on seed 5). The refusals of one overflow come within a few tens of ms
 * (the odds are refreshed every 10 ms): 30 ms holds the dip while they
 * come. Longer (37.5-100 ms) or deeper (0.15-0.2) dips cost success at
 * half capacity (up to 0.15 points below no policy); 20-25 ms or a dip of
 * 0.05 left overload-deep 3 s to come back on some seeds (bench/README.md,
 * the tournament, round 6). */
#define DIP_FOR (30 * NRES_MSEC)
#define DIP 0.1

const char *nres_throttle_error(double k, nres_time_t window,
                                uint32_t buckets) {
  if (!(k >= 1 && k <= K_MAX))   /* false for NaN too */
    return "throttle.k: must be a finite number from 1 to 1000";
  if (window == 0 || window == NRES_TIME_INVALID)
    return "throttle.window: must be > 0";
  if (buckets < 1 || buckets > NRES_WINDOW_MAX_BUCKETS)
    return "throttle.buckets: must be 1..16";
  if (window / buckets == 0)
    return "throttle.window: below 1 ns per bucket";
  return NULL;
}

int nres_throttle_init(nres_throttle_t *throttle, double k,
                       nres_time_t window, uint32_t buckets) {
  if (throttle == NULL || nres_throttle_error(k, window, buckets) != NULL)
    return NRES_EINVAL;
  throttle->k = k;
  nres_window_init(&throttle->window, window, buckets);
  throttle->refresh = nres_time_min(THROTTLE_REFRESH, throttle->window.width);
  throttle->fast_failure = 0;
  nres__store(&throttle->next, 0);
  nres__store(&throttle->odds, 0);
  nres__store(&throttle->refused, 0);
  nres__store(&throttle->due, 0);
  nres__store(&throttle->refused_at, 0);
  return 0;
}

/* The refusal probability of these counts, k raised by room. */
static double probability(double k, uint32_t requests, uint32_t failures,
                          double room) {
  double accepts = (double) (requests - failures);
  double excess = (double) requests - (k + room) * accepts;

  return excess > 0 ? excess / ((double) requests + 1) : 0;
}

/* What the dependency's last refusal adds to k at now: -DIP while it is
 * less than DIP_FOR old (0 is no refusal yet: the record starts at 0),
 * room once it is ROOM_QUIET old, 0 between. A refusal stamped ahead of
 * now (another process's clock, or a region file kept across a reboot)
 * dips only if less than DIP_FOR ahead: never a dip that lasts. */
static double room(const nres_throttle_t *throttle, nres_time_t now) {
  nres_throttle_t *t = (nres_throttle_t *) throttle;   /* loads only */
  uint64_t at = nres__load(&t->refused_at);

  if (at != 0 && (now <= at ? at - now < DIP_FOR : now - at < DIP_FOR))
    return -DIP;
  if (now <= at || now - at <= ROOM_QUIET)
    return 0;
  return ROOM_GROWTH * (double) (now - at - ROOM_QUIET) / (double) NRES_SEC;
}

double nres_throttle_probability(const nres_throttle_t *throttle,
                                 nres_time_t now) {
  uint32_t requests, failures;

  nres_window_sum(&throttle->window, now, &requests, &failures, NULL);
  return probability(throttle->k, requests, failures, room(throttle, now));
}

__attribute__((noinline)) void nres__throttle_refresh(nres_throttle_t *throttle,
                                                      nres_time_t now) {
  uint64_t next = nres__load(&throttle->next), odds;
  double p;

  if (now < next ||
      !nres__cas(&throttle->next, &next, nres_time_add(now, throttle->refresh)))
    return;   /* another caller refreshes */
  p = nres_throttle_probability(throttle, now);
  /* p < 1 always (the + 1), so the odds fit below 2^32. The odds before
   * `due`: a call that sees the new `due` sees these odds. */
  odds = (uint64_t) ldexp(p, 32);
  nres__store(&throttle->odds, odds);
  nres__store(&throttle->due, odds != 0 ? 0 : nres__load(&throttle->next));
}

int nres_throttle_acquire(nres_throttle_t *throttle, nres_time_t now,
                          nres_rng_t *rng) {
  uint64_t odds;

  if (throttle == NULL || rng == NULL)
    return NRES_EINVAL;
  odds = nres__throttle_odds(throttle, now);
  if (__builtin_expect(odds == 0, 1) || (nres_rng_next(rng) >> 32) >= odds)
    return 0;
  /* A request, not accepted, refused here: not the dependency's refusal. */
  nres__window_add_in(&throttle->window, nres__shard_if_taken(), now,
                      NRES__WINDOW_CALL + NRES__WINDOW_FAILURE);
  nres__add(&throttle->refused, 1);
  return NRES_ETHROTTLED;
}

void nres_throttle_record(nres_throttle_t *throttle, nres_time_t now,
                          int accepted) {
  nres__throttle_record(throttle, nres__shard_if_taken(), now, accepted);
}

void nres_throttle_stats(const nres_throttle_t *throttle, nres_time_t now,
                         nres_throttle_stats_t *out) {
  nres_throttle_t *t = (nres_throttle_t *) throttle;   /* loads only */
  uint32_t requests, failures;

  nres_window_sum(&t->window, now, &requests, &failures, NULL);
  out->requests = requests;
  out->accepts = requests - failures;
  out->refused = nres__load(&t->refused);
  out->probability = probability(t->k, requests, failures, room(throttle, now));
}

/* SPDX-License-Identifier: MIT */
/* pick.c - which peer gets the next try.
 *
 * Power of two choices (two random peers, the lower latency x sqrt(in-
 * flight + 1) wins: Finagle's and Linkerd's cost, the in-flight part
 * damped as Envoy's active request bias does) or round robin; never
 * the peer that just failed (`avoid`) while another is admitted; an
 * ejected peer (its breaker open) gets only the probes its breaker admits.
 * Panic: when fewer than `panic` of the peers are closed, ejection is
 * ignored (Envoy's panic threshold), and when nobody is admitted the
 * cheapest peer is taken unasked: the gateway never makes a total outage
 * of its own. A peer the control API drains gets no new try, in panic
 * too. This process's view of the peers (closed or not, drained, latency)
 * is at most REFRESH old.
 *
 * Weights, backups and slow start (only when the upstream has one; the
 * rest pays one flag): P2C draws its two candidates with chances in
 * proportion to each peer's share (its weight, ramped by slow start), so
 * among peers of equal score the shares follow the weights; round robin
 * is nginx's smooth weighted round robin. Backups are chosen from only
 * when no primary is up (closed, not drained), and then a primary whose
 * break is over takes its probe first; panic is judged within the tier
 * in use. A peer that comes up (new, restored, undrained) starts at
 * RAMP_FLOOR of its weight and reaches it after slow_start.
 */
#include <math.h>

#include "nres/gateway.h"
#include "core/breaker.h"
#include "internal.h"

#define REFRESH 50000000u       /* ns between looks at the peers' states */
#define COST_FLOOR 1e5          /* ns added to every latency in a score */
#define RAMP_FLOOR 0.1          /* a peer's share as it comes up, of its
                                   weight (Envoy's min_weight_percent) */

/* Weighted upstreams: each peer's weight (the control API's or the
 * declared), whether it is up, its share; the tier chosen from; panic
 * within that tier. */
static void weigh(nres_gw_upstream_t *u, nres_time_t now) {
  uint32_t up[2] = {0, 0}, live[2] = {0, 0};
  for (uint32_t i = 0; i < u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    int is_up = p->state == NRES_BREAKER_CLOSED && !p->drained;
    if (is_up && !p->up)
      p->since = now;
    p->up = is_up;
    up[p->backup] += (uint32_t)is_up;
    live[p->backup] += (uint32_t)!p->drained;
    double ramp = 1;
    if (is_up && u->slow_start > 0 && now - p->since < u->slow_start) {
      ramp = (double)(now - p->since) / (double)u->slow_start;
      ramp = ramp < RAMP_FLOOR ? RAMP_FLOOR : ramp;
    }
    p->share = p->drained ? 0 : p->weight * ramp;
  }
  u->tier = up[0] == 0 && up[1] > 0;
  u->panicking = up[u->tier] < u->panic * live[u->tier];
}

/* Each peer's breaker state and p75 latency; with no try in the
 * estimator's windows the last estimate fades (halved about every 1.7 s),
 * so an avoided slow peer is tried again, not flooded. */
void nres_gw_refresh(nres_gw_upstream_t *u, nres_time_t now) {
  uint32_t healthy = 0, drained = 0;
  u->checked = now;
  for (uint32_t i = 0; i < u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    p->state = nres_breaker_state(p->breaker, now);
    p->drained = p->removed ||
                 (p->control != NULL && (nres__load(&p->control->flags) & NRES_GW_DRAIN));
    if (p->control != NULL) {   /* a weight set through the control API */
      uint32_t w = nres__load(&p->control->weight);
      p->weight = w >= 1 && w <= NRES_GW_WEIGHT_MAX ? w : p->declared;
      u->weighted |= p->weight != 1;
    }
    if (p->drained)
      drained++;
    else if (p->state == NRES_BREAKER_CLOSED)
      healthy++;
    if (u->n > 1) {   /* one peer: no choice to make, no estimate to read */
      uint64_t samples = 0;
      nres_time_t q = nres_estimator_quantile(p->estimator, now, 0.75, &samples);
      p->cost = samples > 0 ? (double)q : p->cost * 0.98;
    }
  }
  u->panicking = healthy < u->panic * (u->n - drained);
  if (u->weighted)
    weigh(u, now);
}

/* Latency x sqrt(in-flight + 1): the in-flight count still spreads a
 * burst (no herd on the momentarily best peer), but a peer that serves
 * requests side by side is not scored as if it queued them: with the
 * plain product, 4 tries in flight on a 2 ms peer scored as one on a
 * 10 ms peer, and a pool with one 10x slower peer sent it ~1.7 % of its
 * requests (its p99 the slow peer's) on this machine (bench/gateway). */
static double score(const nres_gw_upstream_t *u, int i) {
  return (u->peer[i].cost + COST_FLOOR) * sqrt(u->peer[i].inflight + 1.0);
}

/* Admit peer i: 1 with its permit (none in panic), 0 if it is ejected. */
static int admit(nres_gw_upstream_t *u, int i, nres_time_t now, uint32_t *permit,
                 int *has_permit) {
  if (u->peer[i].drained)   /* the control API's drain: no new tries */
    return 0;
  if (u->panicking) {
    /* Ejection is ignored, but a peer whose break is over still takes
     * its probe when one is free: tries without a permit are not
     * recorded, so without probes no peer would ever close and the pool
     * would stay in panic with every peer healthy (the chaos soak). */
    *has_permit = u->peer[i].state != NRES_BREAKER_CLOSED &&
                  nres__breaker_acquire(u->peer[i].breaker, now, permit) == 0;
    return 1;
  }
  if (nres__breaker_acquire(u->peer[i].breaker, now, permit) != 0)
    return 0;
  *has_permit = 1;
  return 1;
}

/* Of candidates a and b (maybe a == b), the admitted one with the lower
 * score, or -1. A peer whose break is over is probed before the cheaper
 * one: its cost dates from before its ejection (a peer that hung scores
 * seconds), so by score alone it could go unpicked, and half-open, for as
 * long as that estimate takes to fade. */
static inline int two_choices(nres_gw_upstream_t *u, nres_time_t now, int a, int b,
                              uint32_t *permit, int *has_permit) {
  if (score(u, b) < score(u, a)) {
    int t = a;
    a = b;
    b = t;
  }
  if (u->peer[b].state != NRES_BREAKER_CLOSED && admit(u, b, now, permit, has_permit) &&
      *has_permit)
    return b;
  if (admit(u, a, now, permit, has_permit))
    return a;
  if (b != a && admit(u, b, now, permit, has_permit))
    return b;
  return -1;
}

/* Nobody admitted but `avoid` (or nobody at all): `avoid` if it is,
 * else the cheapest peer, unasked. */
static int last_resort(nres_gw_upstream_t *u, nres_time_t now, int avoid, uint32_t *permit,
                       int *has_permit) {
  if (avoid >= 0 && admit(u, avoid, now, permit, has_permit))
    return avoid;
  int best = -1;
  for (int i = 0; i < (int)u->n; i++)
    if (i != avoid && !u->peer[i].drained && (best < 0 || score(u, i) < score(u, best)))
      best = i;
  if (best < 0) {   /* every other peer drained: `avoid`, else the first member */
    best = avoid >= 0 && !u->peer[avoid].drained ? avoid : 0;
    while (best != avoid && u->peer[best].removed && best + 1 < (int)u->n)
      best++;
  }
  *has_permit = 0;
  return best;
}

/* Can peer i of tier be chosen, other than `avoid` and `other`? */
static int eligible(const nres_gw_upstream_t *u, int i, int tier, int avoid, int other) {
  return i != avoid && i != other && u->peer[i].backup == tier && u->peer[i].share > 0;
}

/* A peer of tier other than `avoid` and `other`, drawn with chances in
 * proportion to the shares; -1 if none has one. */
static int draw(nres_gw_upstream_t *u, int tier, int avoid, int other) {
  double total = 0;
  int last = -1;
  for (int i = 0; i < (int)u->n; i++)
    if (eligible(u, i, tier, avoid, other))
      total += u->peer[i].share;
  double x = nres_rng_unit(&u->rng) * total;
  for (int i = 0; i < (int)u->n; i++)
    if (eligible(u, i, tier, avoid, other)) {
      last = i;
      if ((x -= u->peer[i].share) < 0)
        break;
    }
  return last;
}

/* nginx's smooth weighted round robin over tier's peers not ejected (in
 * panic, ejected too); -1 if none. */
static int smooth(nres_gw_upstream_t *u, int tier, int avoid) {
  double total = 0;
  int best = -1;
  for (int i = 0; i < (int)u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    if (!eligible(u, i, tier, avoid, -1) || (p->state == NRES_BREAKER_OPEN && !u->panicking))
      continue;
    p->current += p->share;
    total += p->share;
    if (best < 0 || p->current > u->peer[best].current)
      best = i;
  }
  if (best >= 0)
    u->peer[best].current -= total;
  return best;
}

/* nres_gw_pick for an upstream with weights, backups or slow start. */
static int pick_weighted(nres_gw_upstream_t *u, nres_time_t now, int avoid, uint32_t *permit,
                         int *has_permit) {
  int n = (int)u->n, tier = u->tier;
  if (tier == 1) {   /* no primary up: one whose break is over is probed */
    for (int i = 0; i < n; i++)
      if (i != avoid && !u->peer[i].backup && !u->peer[i].drained &&
          u->peer[i].state != NRES_BREAKER_CLOSED &&
          nres__breaker_acquire(u->peer[i].breaker, now, permit) == 0) {
        *has_permit = 1;
        return i;
      }
  }
  if (u->choice == NRES_GW_P2C) {
    int a = draw(u, tier, avoid, -1);
    if (a >= 0) {
      int b = draw(u, tier, avoid, a);
      int i = two_choices(u, now, a, b < 0 ? a : b, permit, has_permit);
      if (i >= 0)
        return i;
    }
  } else {
    int i = smooth(u, tier, avoid);
    if (i >= 0 && admit(u, i, now, permit, has_permit))
      return i;
  }
  /* The chosen ones not admitted: the tier's next admitted peer, then
   * the other tier's. */
  for (int t = 0; t < 2; t++)
    for (int k = 0; k < n; k++) {
      int i = (int)((u->rr + (uint32_t)k) % (uint32_t)n);
      if (i != avoid && u->peer[i].backup == (t ^ tier) && admit(u, i, now, permit, has_permit)) {
        u->rr = (uint32_t)(i + 1) % (uint32_t)n;
        return i;
      }
    }
  return last_resort(u, now, avoid, permit, has_permit);
}

int nres_gw_pick(nres_gw_upstream_t *u, nres_time_t now, int avoid, uint32_t *permit,
                 int *has_permit) {
  /* the membership changed (one load of its generation): the view first */
  if (u->members != NULL && nres__load(&u->members->gen) != u->gen)
    nres_gw_sync(u, now);
  int n = (int)u->n;
  if (now - u->checked > REFRESH || now < u->checked)
    nres_gw_refresh(u, now);
  *permit = 0;
  *has_permit = 0;
  if (u->weighted && n > 1)
    return pick_weighted(u, now, avoid, permit, has_permit);
  if (n == 1) {
    if (!admit(u, 0, now, permit, has_permit))
      *has_permit = 0;
    return 0;
  }
  if (u->choice == NRES_GW_P2C) {
    int a = (int)nres_rng_below(&u->rng, (uint64_t)n);
    if (a == avoid)
      a = (a + 1) % n;
    int b = (int)nres_rng_below(&u->rng, (uint64_t)(n - 1));
    if (b >= a)
      b++;
    if (b == avoid) {
      b = (b + 1) % n;
      if (b == a)
        b = (b + 1) % n;
      if (b == avoid)
        b = a;
    }
    int i = two_choices(u, now, a, b, permit, has_permit);
    if (i >= 0)
      return i;
  }
  /* Round robin (or both choices ejected): the next admitted peer. */
  for (int k = 0; k < n; k++) {
    int i = (int)((u->rr + (uint32_t)k) % (uint32_t)n);
    if (i != avoid && admit(u, i, now, permit, has_permit)) {
      u->rr = (uint32_t)(i + 1) % (uint32_t)n;
      return i;
    }
  }
  return last_resort(u, now, avoid, permit, has_permit);
}

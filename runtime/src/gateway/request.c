/* SPDX-License-Identifier: MIT */
/* request.c - one request through the balancer: admission, each try's
 * start (timeouts from the time left) and end (recorded into its peer),
 * the grant of one more try, and the call's end.
 *
 * A retry token is taken from the upstream's budget when a try is granted
 * a successor it may not need, spent when that successor starts, given
 * back at the call's end if it never did: the budget is never overdrawn.
 * A half-open probe of the upstream's breaker gets no retry (one request
 * tells whether it recovered). The class matters only under half a
 * budget (nres_budget_spend_class refuses a sheddable request there), so
 * the caller reads the request's criticality only when asked.
 */
#include <string.h>

#include "nres/gateway.h"
#include "core/breaker.h"
#include "core/estimator.h"
#include "core/shm_count.h"
#include "gateway/hist.h"
#include "gateway/members.h"
#include "internal.h"

#define LOOKUP_EVERY 1000000000u   /* ns between lookups of the key's slot */
#define MS 1000000u

/* The upstream's slot in its scope's table, looked up (its lease
 * extended) at most once a second per process; every time while the table
 * is full (-1: the request runs without shared state). */
static void lookup(nres_gw_upstream_t *u, nres_time_t now) {
  int idx = nres_shm_acquire(u->scope, u->key, strlen(u->key), now, u->hold, NULL);
  if (idx >= 0) {
    u->sidx = idx;
    u->sslot = nres_shm_slot(u->scope, (uint32_t)idx);
    u->lookup_at = nres_time_add(now, LOOKUP_EVERY);
  } else {
    u->sidx = -1;
    u->sslot = NULL;
    u->overflow++;
  }
}

/* An outcome into a breaker, its common case (a success while closed)
 * inline; windowed: nres__breaker_windowed's answer, kept by the upstream
 * (nres_gw_upstream_t.windowed, nres_gw_peer_t.windowed). */
static void breaker_record(nres_breaker_t *b, unsigned k, nres_time_t now, uint32_t permit,
                           int failed, int windowed, nres_rng_t *rng) {
  if (!nres__breaker_record_common(b, k, now, permit, failed, 0, windowed))
    nres__breaker_record_other(b, now, permit, failed, 0, rng);
}

static void reset(nres_gw_request_t *r, nres_time_t now, nres_time_t deadline) {
  *r = (nres_gw_request_t){ .deadline = deadline, .idx = -1, .peer = -1, .cls = -1,
                            .begun = now };
}

void nres_gw_unadmitted(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now) {
  reset(r, now, nres_time_add(now, u->deadline));
}

int nres_gw_admit(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                  double inbound_ms) {
  nres_time_t deadline = nres_time_add(now, u->deadline);
  /* a number of ms >= 0 up to 2^53 - 1; anything else is no deadline */
  if (inbound_ms >= 0 && inbound_ms <= 9007199254740991.0) {
    if (inbound_ms < 1)
      return NRES_GW_DEADLINE;
    double at = (double)now + inbound_ms * 1e6;
    if (at < (double)deadline)
      deadline = (nres_time_t)at;
  }
  reset(r, now, deadline);
  if (now >= u->lookup_at)
    lookup(u, now);
  if (u->sidx >= 0) {
    r->idx = u->sidx;
    r->slot = u->sslot;
    if (u->breaker) {
      if (nres__breaker_acquire(&r->slot->breaker, now, &r->upermit) != 0) {
        nres_gw_control_t *c = u->control;
        if (c != NULL && (nres__load(&c->flags) & NRES_GW_DRY_RUN)) {
          /* dry-run: counted, let through as if unadmitted (no retries,
           * nothing recorded into the open breaker) */
          nres__add(&c->would_refuse[NRES_GW_WOULD_CIRCUIT], 1);
          reset(r, now, deadline);
          return NRES_GW_ADMITTED;
        }
        nres_shm_slot_record(r->slot, NRES_STOP_CIRCUIT, 0, 0);
        reset(r, now, deadline);
        return NRES_GW_CIRCUIT;
      }
      r->has_upermit = 1;
    }
  }
  return NRES_GW_ADMITTED;
}

int64_t nres_gw_left_ms(const nres_gw_request_t *r, nres_time_t now) {
  return r->deadline > now ? (int64_t)((r->deadline - now) / MS) : 0;
}

uint64_t nres_gw_try_begin(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                           int i, uint32_t permit, int has_permit) {
  if (r->reserved) {   /* the token held for this retry is spent */
    r->reserved = 0;
    r->retries++;
  }
  r->peer = i;
  r->ppermit = permit;
  r->has_ppermit = has_permit != 0;
  r->t0 = now;
  r->tries++;
  u->peer[i].inflight++;
  nres__gw_member_count(u, &u->peer[i], nres__shard(), 1);
  nres_time_t left = r->deadline > now ? r->deadline - now : 0;
  nres_time_t t = left < u->attempt_timeout ? left : u->attempt_timeout;
  if (t < MS)
    t = MS;
  return t / MS;
}

int nres_gw_grant(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now, int cls) {
  nres_time_t left = r->deadline > now ? r->deadline - now : 0;
  if (r->tries >= u->attempts || left <= 2 * MS || r->slot == NULL ||
      (r->has_upermit && r->upermit != 0))
    return 0;
  if (!u->budget)
    return 1;
  nres_budget_t *b = &r->slot->budget;
  if (cls >= 0)
    r->cls = (int8_t)cls;
  int c = r->cls;
  if (c < 0) {
    if (nres__load(&b->tokens) * 2 >= b->capacity)
      c = NRES_CLASS_DEFAULT;
    else
      return NRES_GW_NEED_CLASS;
  }
  if (nres_budget_spend_class(b, now, c) == 0) {
    r->reserved = 1;
    return 1;
  }
  r->budget_refused = 1;
  return 0;
}

int nres_gw_try_end(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                    int failed, int timed_out) {
  int i = r->peer;
  if (i < 0)
    return -1;
  nres_gw_peer_t *p = &u->peer[i];
  unsigned k = nres__shard();   /* the shared words below: this process's copies */
  if (p->inflight > 0)
    p->inflight--;
  nres__gw_member_count(u, p, k, -1);
  nres_time_t lat = now > r->t0 ? now - r->t0 : 0;
  if (r->has_ppermit)
    breaker_record(p->breaker, k, now, r->ppermit, failed ? 1 : 0, p->windowed, &u->rng);
  if (failed && lat < u->attempt_timeout)
    lat = u->attempt_timeout;   /* a failure counts as the attempt timeout */
  if (p->hist != NULL)   /* the try's own duration, failed or not */
    nres__gw_hist_record(p->hist, k, now > r->t0 ? now - r->t0 : 0);
  nres__estimator_record_in(p->estimator, k, now, lat);
  /* This process's view at once, not at the next refresh: a try slower
   * than the peer's cost (perhaps faded while it was avoided) raises it,
   * so a slow peer tried again is not chosen again and again meanwhile. */
  if ((double)lat > p->cost)
    p->cost = (double)lat;
  nres__shm_count(p->counters, k,
                  failed ? (timed_out ? NRES_STOP_DEADLINE : NRES_STOP_ATTEMPTS) : NRES_STOP_OK,
                  1, r->tries > 1 ? 1 : 0);
  r->peer = -1;
  r->has_ppermit = 0;
  return i;
}

void nres_gw_try_abandon(nres_gw_upstream_t *u, nres_gw_request_t *r) {
  int i = r->peer;
  if (i < 0)
    return;
  if (u->peer[i].inflight > 0)
    u->peer[i].inflight--;
  nres__gw_member_count(u, &u->peer[i], nres__shard(), -1);
  if (r->has_ppermit)
    nres_breaker_release(u->peer[i].breaker, r->ppermit);
  if (r->reserved && r->slot != NULL)
    nres_budget_refund(&r->slot->budget);
  r->peer = -1;
  r->has_ppermit = 0;
  r->reserved = 0;
}

/* A call whose client left before it was answered (nginx's 499): what the
 * upstream would have answered is unknown, so the call is judged neither
 * way. Its try still running is let go unjudged, its breaker permits and
 * held token given back, the call counted as canceled. (Counted a success,
 * two probes whose clients gave up closed the breaker of an upstream that
 * hangs.) */
static void cancel(nres_gw_upstream_t *u, nres_gw_request_t *r) {
  nres_gw_try_abandon(u, r);
  if (r->slot == NULL)
    return;
  if (r->reserved) {
    nres_budget_refund(&r->slot->budget);
    r->reserved = 0;
  }
  if (r->has_upermit)
    nres_breaker_release(&r->slot->breaker, r->upermit);
  r->has_upermit = 0;
  nres__shm_count(r->slot, nres__shard(), NRES_STOP_CANCELED, r->tries, r->retries);
  r->slot = NULL;
}

void nres_gw_request_end(nres_gw_upstream_t *u, nres_gw_request_t *r, nres_time_t now,
                         int status) {
  /* under 100: no answer (0), or one with no status line (lua-nginx-module
   * reads an HTTP/0.9 answer as 9) */
  int failed = status >= 500 || status < 100;
  if (r->slot != NULL && r->tries == 0) {
    /* never reached the upstream (refused by a later phase, answered
     * locally): nothing to judge it by, nothing to count */
    if (r->has_upermit)
      nres_breaker_release(&r->slot->breaker, r->upermit);
    r->has_upermit = 0;
    r->slot = NULL;
  }
  if (status == NRES_GW_CLIENT_CLOSED) {
    cancel(u, r);
    return;
  }
  if (r->slot != NULL) {
    unsigned k = nres__shard();
    if (r->reserved) {
      nres_budget_refund(&r->slot->budget);
      r->reserved = 0;
    }
    if (r->has_upermit) {
      breaker_record(&r->slot->breaker, k, now, r->upermit, failed, u->windowed, &u->rng);
      r->has_upermit = 0;
    }
    if (!failed && u->budget)
      nres_budget_deposit(&r->slot->budget);
    int stop = NRES_STOP_OK;
    if (failed)
      stop = status == 504 ? NRES_STOP_DEADLINE
             : r->budget_refused ? NRES_STOP_BUDGET : NRES_STOP_ATTEMPTS;
    nres__shm_count(r->slot, k, stop, r->tries, r->retries);
    r->slot = NULL;
  }
  if (u->hist != NULL && r->tries > 0)
    nres__gw_hist_record(u->hist, nres__shard(), now > r->begun ? now - r->begun : 0);
  if (r->peer >= 0)
    nres_gw_try_end(u, r, now, failed, status == 504);
}

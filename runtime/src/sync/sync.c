/* SPDX-License-Identifier: MIT */
/* sync.c - the fleet sync agent: local budgets, rate limiters and breakers
 * reconciled with one record per scope in Redis (nres/sync.h has the
 * semantics and the failure handling).
 *
 * A round reads every entry's local state (atomics, the request path is
 * never blocked), sends one EVALSHA per entry in a single pipelined write,
 * reads the answers and writes them back into the local state with atomics
 * (a CAS on the budget's tokens, nres_ratelimit_set_rate, the breaker's
 * open_until / close_if). The Redis client is hiredis, blocking, with a
 * socket timeout: the agent has its own thread (or the caller's, with
 * nres_sync_tick), so a loop adapter would only add a second copy of the
 * timeouts. A round that fails drops the connection and puts every entry
 * on local-only protection in the same round; reconnection waits by an
 * nres backoff.
 *
 * It is separate from the core because it is the one part of nres that
 * talks to a server: the core stays free of I/O and of hiredis.
 */
#include <errno.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sync_int.h"

#define MICRO 1000000
#define STALE_INTERVALS 3      /* a host silent this long leaves the shares */
#define GRACE_INTERVALS 2      /* a given break outlasts the fleet's by this */

typedef nres__sync_entry_t entry_t;

void nres_sync_config_init(nres_sync_config_t *config) {
  if (config == NULL)
    return;
  memset(config, 0, sizeof(*config));
  config->host = "127.0.0.1";
  config->port = 6379;
  config->prefix = "nres";
  config->interval = 100 * NRES_MSEC;
  config->breaker_quorum = 0.5;
  config->breaker_fleet_min_calls = 20;
}

/* A fleet name: 1..64 bytes, printable, no blanks, braces (a Redis Cluster
 * hash tag) or colons (the key's separator). */
static int fleet_name_ok(const char *f) {
  size_t i, n;

  if (f == NULL)
    return 0;
  n = strlen(f);
  if (n == 0 || n > 64)
    return 0;
  for (i = 0; i < n; i++)
    if (f[i] <= 32 || f[i] >= 127 || strchr("{}:", f[i]) != NULL)
      return 0;
  return 1;
}

/* A user (may be NULL) and a password, inline or from a file: fit to be
 * copied into buffers of ucap and pcap bytes? */
static int credential_ok(const char *user, const char *password,
                         const char *file, size_t ucap, size_t pcap) {
  return !(user != NULL && (user[0] == '\0' || strlen(user) >= ucap)) &&
         !(user != NULL && password == NULL && file == NULL) &&
         !(password != NULL && file != NULL) &&
         !(password != NULL && strlen(password) >= pcap);
}

/* The credential copied (the password read from its file now, not kept):
 * 0, or NRES_EINVAL with a line on stderr. */
static int credential(const char *field, const char *user,
                      const char *password, const char *file, char *ubuf,
                      size_t ucap, char *pbuf, size_t pcap,
                      const char **user_out, const char **password_out) {
  char why[NRES__SYNC_LINE_MAX];

  *user_out = NULL;
  *password_out = NULL;
  if (user != NULL) {
    snprintf(ubuf, ucap, "%s", user);
    *user_out = ubuf;
  }
  if (file != NULL) {
    if (nres__sync_read_secret(field, file, pbuf, pcap, why, sizeof(why)) != 0) {
      fprintf(stderr, "nres-sync: %s\n", why);
      return NRES_EINVAL;
    }
    *password_out = pbuf;
  } else if (password != NULL) {
    snprintf(pbuf, pcap, "%s", password);
    *password_out = pbuf;
  }
  return 0;
}

static void forget_secrets(nres_sync_t *s) {
  memset(s->password, 0, sizeof(s->password));
  memset(s->sentinel_password, 0, sizeof(s->sentinel_password));
}

int nres_sync_new(const nres_sync_config_t *config, nres_sync_t **out) {
  nres_sync_t *s;
  pthread_condattr_t ca;
  char hn[64];

  if (out == NULL)
    return NRES_EINVAL;
  *out = NULL;
  if (config == NULL || config->host == NULL || config->prefix == NULL ||
      strlen(config->host) >= 256 || strlen(config->prefix) >= 64 ||
      config->port <= 0 || config->port > 65535 ||
      config->interval < NRES_MSEC || config->interval == NRES_TIME_INVALID ||
      config->interval > 3600 * NRES_SEC ||
      config->timeout == NRES_TIME_INVALID ||
      config->reconnect_max == NRES_TIME_INVALID ||
      config->ttl == NRES_TIME_INVALID ||
      !(config->local_share >= 0 && config->local_share <= 1) ||
      (config->node != NULL &&
       (strlen(config->node) == 0 || strlen(config->node) > 64)) ||
      !fleet_name_ok(config->fleet) ||
      (config->unix_path != NULL &&
       (config->unix_path[0] == '\0' || strlen(config->unix_path) >= 108)) ||
      !credential_ok(config->user, config->password, config->password_file,
                     sizeof(s->user), sizeof(s->password)) ||
      !credential_ok(config->sentinel_user, config->sentinel_password,
                     config->sentinel_password_file, sizeof(s->sentinel_user),
                     sizeof(s->sentinel_password)) ||
      ((config->sentinel_user != NULL || config->sentinel_password != NULL ||
        config->sentinel_password_file != NULL) && config->sentinels == NULL) ||
      config->db < 0 || config->db > 1000000 ||
      !(config->breaker_quorum >= 0 && config->breaker_quorum < 1) ||
      !(config->breaker_fleet_ratio >= 0 && config->breaker_fleet_ratio <= 1) ||
      config->breaker_fleet_min_calls < 1 ||
      config->breaker_fleet_min_calls > 1000000000 ||
      config->probe_lease == NRES_TIME_INVALID)
    return NRES_EINVAL;
  s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NRES_ENOMEM;
  s->cfg = *config;
  strcpy(s->host, config->host);
  strcpy(s->prefix, config->prefix);
  strcpy(s->fleet, config->fleet);
  s->cfg.host = s->host;
  s->cfg.prefix = s->prefix;
  s->cfg.fleet = s->fleet;
  strcpy(s->cur_host, s->host);
  s->cur_port = config->port;
  if ((config->sentinels != NULL || config->master != NULL) &&
      nres__sync_sentinel_parse(s, config->sentinels, config->master) != 0) {
    memset(s->password, 0, sizeof(s->password));
    free(s);
    return NRES_EINVAL;
  }
  if (config->cluster != NULL &&
      (config->sentinels != NULL || config->db != 0 ||
       config->unix_path != NULL ||
       nres__sync_cluster_parse(s, config->cluster) != 0)) {
    memset(s->password, 0, sizeof(s->password));
    free(s);
    return NRES_EINVAL;
  }
  s->cfg.cluster = NULL;     /* parsed: s->seed */
  s->cfg.sentinels = NULL;   /* parsed: s->sentinel */
  s->cfg.master = s->master;
  if (config->tls_server_name != NULL) {
    snprintf(s->tls_name, sizeof(s->tls_name), "%s", config->tls_server_name);
    s->cfg.tls_server_name = s->tls_name;
  }
  if (config->tls) {
    char why[NRES__SYNC_LINE_MAX];
    int rc = nres__sync_tls_init(s, why, sizeof(why));

    if (rc != 0) {
      fprintf(stderr, "nres-sync: %s\n", why);
      memset(s->password, 0, sizeof(s->password));
      free(s);
      return rc;
    }
  }
  s->cfg.tls_ca_file = s->cfg.tls_cert_file = s->cfg.tls_key_file = NULL;
  if (config->unix_path != NULL) {
    strcpy(s->unix_path, config->unix_path);
    s->cfg.unix_path = s->unix_path;
  }
  s->cfg.password_file = s->cfg.sentinel_password_file = NULL;
  if (credential("password_file", config->user, config->password,
                 config->password_file, s->user, sizeof(s->user), s->password,
                 sizeof(s->password), &s->cfg.user, &s->cfg.password) != 0 ||
      credential("sentinel_password_file", config->sentinel_user,
                 config->sentinel_password, config->sentinel_password_file,
                 s->sentinel_user, sizeof(s->sentinel_user),
                 s->sentinel_password, sizeof(s->sentinel_password),
                 &s->cfg.sentinel_user, &s->cfg.sentinel_password) != 0) {
    nres__sync_tls_free(s);
    forget_secrets(s);
    free(s);
    return NRES_EINVAL;
  }
  if (s->cfg.timeout == 0)
    s->cfg.timeout = s->cfg.interval / 2;
  if (s->cfg.reconnect_max == 0)   /* back within a second of Redis */
    s->cfg.reconnect_max = NRES_SEC;
  if (s->cfg.reconnect_max < s->cfg.interval)
    s->cfg.reconnect_max = s->cfg.interval;
  if (s->cfg.ttl == 0)
    s->cfg.ttl = 20 * s->cfg.interval > 10 * NRES_SEC ? 20 * s->cfg.interval
                                                       : 10 * NRES_SEC;
  nres_rng_seed(&s->rng, config->seed != 0 ? config->seed
                                           : nres_clock_now() ^ (uint64_t) getpid());
  if (config->node != NULL) {
    strcpy(s->node, config->node);
  } else {
    if (gethostname(hn, sizeof(hn)) != 0)
      strcpy(hn, "host");
    hn[sizeof(hn) - 1] = '\0';
    snprintf(s->node, sizeof(s->node), "%.40s:%ld:%08x", hn, (long) getpid(),
             (unsigned) nres_rng_next(&s->rng));
  }
  s->cfg.node = s->node;
  /* Reconnection: exponential from one interval, full jitter. */
  nres_backoff_init(&s->backoff);
  s->backoff.base = s->cfg.interval;
  s->backoff.max = s->cfg.reconnect_max;
  nres_backoff_state_reset(&s->bstate);
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = s;
  return 0;
}

const char *nres_sync_node(nres_sync_t *sync) {
  return sync == NULL ? NULL : sync->node;
}

void nres_sync_free(nres_sync_t *sync) {
  if (sync == NULL)
    return;
  nres_sync_stop(sync);
  nres__sync_drop(sync);
  nres__sync_cluster_drop(sync);
  nres__sync_sentinel_close(sync);
  nres__sync_tls_free(sync);
  forget_secrets(sync);
  pthread_mutex_destroy(&sync->mu);
  pthread_cond_destroy(&sync->cv);
  free(sync->e);
  free(sync);
}

static int add(nres_sync_t *s, const char *scope, int kind, void *state,
               double figure, uint32_t burst) {
  static const char suffix[] = { 0, 'b', 'r', 'k' };
  entry_t *e;
  size_t len;
  int i, id;

  if (s == NULL || scope == NULL || state == NULL || isnan(figure) ||
      (kind == NRES_SYNC_RATELIMIT && !(figure >= 0 && isfinite(figure))) ||
      (kind == NRES_SYNC_BUDGET && !(figure <= 1e12)))
    return NRES_EINVAL;
  len = strlen(scope);
  if (len == 0 || len >= NRES_SYNC_SCOPE_MAX)
    return NRES_EINVAL;
  pthread_mutex_lock(&s->mu);
  id = -1;
  for (i = 0; i < s->n; i++) {
    if (s->e[i].used && s->e[i].kind == kind &&
        strcmp(s->e[i].st.scope, scope) == 0) {
      pthread_mutex_unlock(&s->mu);
      return NRES_EINVAL;   /* one entry of a kind per scope */
    }
    if (!s->e[i].used && id < 0)
      id = i;
  }
  if (id < 0) {
    if (s->n >= NRES_SYNC_MAX_ENTRIES) {
      pthread_mutex_unlock(&s->mu);
      return NRES_EFULL;
    }
    e = realloc(s->e, (size_t) (s->n + 1) * sizeof(*e));
    if (e == NULL) {
      pthread_mutex_unlock(&s->mu);
      return NRES_ENOMEM;
    }
    s->e = e;
    id = s->n++;
  }
  e = &s->e[id];
  memset(e, 0, sizeof(*e));
  e->used = 1;
  e->kind = kind;
  e->state = state;
  e->fresh = 1;
  memcpy(e->st.scope, scope, len + 1);
  e->st.kind = (uint32_t) kind;
  snprintf(e->key[0], sizeof(e->key[0]), "%s:%s:{%s}:%c", s->prefix,
           s->fleet, scope, suffix[kind]);
  snprintf(e->key[1], sizeof(e->key[1]), "%s:%s:{%s}:%cv", s->prefix,
           s->fleet, scope, suffix[kind]);
  snprintf(e->key[2], sizeof(e->key[2]), "%s:%s:{%s}:%co", s->prefix,
           s->fleet, scope, suffix[kind]);
  snprintf(e->key[3], sizeof(e->key[3]), "%s:%s:{%s}:%cc", s->prefix,
           s->fleet, scope, suffix[kind]);
  e->slot = nres__sync_key_slot(e->key[0]);
  if (kind == NRES_SYNC_BUDGET) {
    nres_budget_t *b = state;
    nres_budget_stats_t bs;

    e->floor = figure >= 0 ? figure
                           : (double) __atomic_load_n(&b->refill_per_sec,
                                                      __ATOMIC_RELAXED) / MICRO;
    nres_budget_stats(b, &bs);
    e->spent = bs.spent;
    e->refused = bs.refused;
  }
  if (kind == NRES_SYNC_RATELIMIT) {
    nres_ratelimit_t *l = state;
    nres_ratelimit_stats_t rs;

    nres_time_t iv = __atomic_load_n(&l->interval, __ATOMIC_RELAXED);
    nres_time_t tol = __atomic_load_n(&l->tolerance, __ATOMIC_RELAXED);

    e->fleet_rate = figure > 0 ? figure : nres_ratelimit_rate(l);
    e->rate = nres_ratelimit_rate(l);
    e->lburst = iv == 0 ? 1 : (uint32_t) (tol / iv);
    if (e->lburst < 1)
      e->lburst = 1;
    e->burst = burst > 0 ? burst : e->lburst;
    nres_ratelimit_stats(l, &rs);
    e->tat = rs.tat;
    e->limited = rs.refused;
  }
  s->info.entries++;
  pthread_mutex_unlock(&s->mu);
  return id;
}

int nres_sync_add_budget(nres_sync_t *sync, const char *scope,
                         nres_budget_t *budget, double fleet_floor) {
  return add(sync, scope, NRES_SYNC_BUDGET, budget, fleet_floor, 0);
}

int nres_sync_add_ratelimit(nres_sync_t *sync, const char *scope,
                            nres_ratelimit_t *limit, double fleet_rate) {
  return add(sync, scope, NRES_SYNC_RATELIMIT, limit, fleet_rate, 0);
}

int nres_sync_add_ratelimit_burst(nres_sync_t *sync, const char *scope,
                                  nres_ratelimit_t *limit, double fleet_rate,
                                  uint32_t fleet_burst) {
  return add(sync, scope, NRES_SYNC_RATELIMIT, limit, fleet_rate,
             fleet_burst);
}

int nres_sync_add_breaker(nres_sync_t *sync, const char *scope,
                          nres_breaker_t *breaker) {
  return add(sync, scope, NRES_SYNC_BREAKER, breaker, 0, 0);
}

int nres_sync_remove(nres_sync_t *sync, int id) {
  if (sync == NULL)
    return NRES_EINVAL;
  pthread_mutex_lock(&sync->mu);
  if (id < 0 || id >= sync->n || !sync->e[id].used) {
    pthread_mutex_unlock(&sync->mu);
    return NRES_EINVAL;
  }
  sync->e[id].used = 0;
  sync->info.entries--;
  pthread_mutex_unlock(&sync->mu);
  return 0;
}

/* ------------------------------------------------------------- budgets */

/* Add `amount` micro-tokens, capped at capacity; the value written. */
static int64_t budget_add(nres_budget_t *b, int64_t amount, int64_t *before) {
  int64_t t, n;

  t = atomic_load_explicit(&b->tokens, memory_order_relaxed);
  do {
    n = t + amount;
    if (n > b->capacity)
      n = b->capacity;
  } while (!nres__cas(&b->tokens, &t, n));
  *before = t;
  return n;
}

static double share_of(const nres_sync_t *s, const entry_t *e) {
  if (s->cfg.local_share > 0)
    return s->cfg.local_share;
  return e->st.hosts > 1 ? 1.0 / e->st.hosts : 1.0;
}

static double seconds(nres_time_t d) {
  return (double) d / 1e9;
}

/* Demand per second over the time since the last round, smoothed over
 * about DEMAND_TAU whatever the interval: short intervals see few events
 * each (noise), long ones must not lag by several intervals. */
#define DEMAND_TAU 0.1
static void note_demand(entry_t *e, nres_time_t from, nres_time_t now,
                        double events) {
  double dt, d;

  dt = from != 0 && now > from ? seconds(now - from) : 0;
  if (dt <= 0)
    return;
  d = events / dt;
  if (e->st.rounds == 0 && e->demand == 0)
    e->demand = d;
  else
    e->demand += (1 - exp(-dt / DEMAND_TAU)) * (d - e->demand);
}

/* Without Redis: local_share of the floor, at most local_share of the
 * capacity. */
static void budget_local(nres_sync_t *s, entry_t *e, nres_time_t now) {
  nres_budget_t *b = e->state;
  nres_budget_stats_t bs;
  double share = share_of(s, e);
  int64_t cap, before;

  nres_budget_stats(b, &bs);
  note_demand(e, e->last_tick, now, (double) (bs.spent - e->spent + bs.refused - e->refused));
  e->spent = bs.spent;
  e->refused = bs.refused;
  nres_budget_set_floor(b, share * e->floor);
  cap = (int64_t) (share * (double) b->capacity);
  if (bs.tokens > cap)
    budget_add(b, cap - bs.tokens, &before);
  e->st.local = (double) (bs.tokens > cap ? cap : bs.tokens) / MICRO;
}

static int budget_args(nres_sync_t *s, entry_t *e, nres_time_t now,
                       char buf[][32]) {
  nres_budget_t *b = e->state;
  nres_budget_stats_t bs;
  int64_t delta;

  nres_budget_stats(b, &bs);
  /* Everything the tokens did since our last write: deposits, floor
   * credit and refunds less spends. */
  delta = e->fresh ? 0 : bs.tokens - e->set;
  note_demand(e, e->last_tick, now, (double) (bs.spent - e->spent + bs.refused - e->refused));
  e->spent = bs.spent;
  e->refused = bs.refused;
  e->read = bs.tokens;
  snprintf(buf[0], 32, "%lld", (long long) delta);
  snprintf(buf[1], 32, "%.3f", e->demand);
  snprintf(buf[2], 32, "%lld", (long long) b->capacity);
  snprintf(buf[3], 32, "%llu",
           (unsigned long long) (STALE_INTERVALS * s->cfg.interval / 1000));
  snprintf(buf[4], 32, "%llu", (unsigned long long) (s->cfg.ttl / NRES_MSEC));
  return 5;
}

static int budget_apply(entry_t *e, const redisReply *r, char *why,
                        size_t cap) {
  nres_budget_t *b = e->state;
  nres__budget_reply_t a;
  int64_t written, before;

  if (nres__sync_budget_reply(r, b->capacity, &a, why, cap) != 0)
    return NRES_ESTATE;
  /* Tokens become the share plus whatever happened since we read them:
   * that activity is not reported yet, so the baseline leaves it out. */
  written = budget_add(b, a.share - e->read, &before);
  e->set = written - (before - e->read);
  e->fresh = 0;
  nres_budget_set_floor(b, a.weight * e->floor);
  e->st.local = (double) a.share / MICRO;
  e->st.fleet = (double) a.level / MICRO;
  e->st.hosts = a.hosts;
  return 0;
}

/* --------------------------------------------------------- rate limits */

static void rate_demand(nres_sync_t *s, entry_t *e, nres_time_t now) {
  nres_ratelimit_t *l = e->state;
  nres_ratelimit_stats_t rs;
  nres_time_t base, interval, from;
  double admitted;

  (void) s;
  nres_ratelimit_stats(l, &rs);
  interval = (nres_time_t) (1e9 / e->rate);
  /* Admissions since the last round (or since the probe half-way through
   * the interval: the most recent demand), from how far tat moved: exact while
   * the limiter is busy (tat ahead of now), at most a quota's worth when
   * it idles, which the next rounds correct (a host below its quota gets
   * a smaller one until it refuses, and then its demand is exact). */
  from = e->since > e->last_tick ? e->since : e->last_tick;
  base = e->tat > from ? e->tat : from;
  admitted = rs.tat > base && interval > 0 ? (double) (rs.tat - base) / interval
                                           : 0;
  note_demand(e, from, now, admitted + (double) (rs.refused - e->limited));
  e->tat = rs.tat;
  e->limited = rs.refused;
}

/* At a probe: the demand the next round reports is measured from here,
 * the most recent part of the interval (a load that moved between hosts
 * is seen half an interval sooner). */
static void rate_restart(entry_t *e, nres_time_t now) {
  nres_ratelimit_stats_t rs;

  nres_ratelimit_stats(e->state, &rs);
  e->tat = rs.tat;
  e->limited = rs.refused;
  e->since = now;
}

/* The local limiter at `rate`, with the part of the fleet's burst that
 * gives it the fleet's tolerance in time (burst / fleet rate): the hosts'
 * bursts add up to about the fleet's burst, where each host keeping the
 * whole burst would let the fleet burst hosts times. At least 2 (or the
 * fleet's, if smaller): a burst of 1 admits a steady stream coming a
 * little faster than the rate at about half the rate. */
static void rate_set(entry_t *e, double rate, nres_time_t now) {
  nres_ratelimit_stats_t rs;
  double b;
  uint32_t burst, least = e->burst < 2 ? e->burst : 2;

  if (rate < e->fleet_rate * 1e-3)
    rate = e->fleet_rate * 1e-3;
  b = floor((double) e->burst * rate / e->fleet_rate + 0.5);
  burst = b < least ? least : b > e->burst ? e->burst : (uint32_t) b;
  if ((rate != e->rate || burst != e->lburst) &&
      nres_ratelimit_set_rate(e->state, rate, burst, now) == 0) {
    e->rate = rate;
    e->lburst = burst;
    /* set_rate moved tat (admissions ahead, at the new rate): the next
     * round measures from where it is now. */
    nres_ratelimit_stats(e->state, &rs);
    e->tat = rs.tat;
  }
  e->st.local = e->rate;
}

static void rate_local(nres_sync_t *s, entry_t *e, nres_time_t now) {
  rate_demand(s, e, now);
  rate_set(e, share_of(s, e) * e->fleet_rate, now);
}

static int rate_args(nres_sync_t *s, entry_t *e, nres_time_t now,
                     char buf[][32]) {
  rate_demand(s, e, now);
  snprintf(buf[0], 32, "%.3f", e->demand);
  snprintf(buf[1], 32, "%.6f", e->fleet_rate);
  snprintf(buf[2], 32, "%llu",
           (unsigned long long) (STALE_INTERVALS * s->cfg.interval / 1000));
  snprintf(buf[3], 32, "%llu", (unsigned long long) (s->cfg.ttl / NRES_MSEC));
  return 4;
}

static int rate_apply(entry_t *e, const redisReply *r, nres_time_t now,
                      char *why, size_t cap) {
  nres__rate_reply_t a;

  if (nres__sync_rate_reply(r, e->fleet_rate, &a, why, cap) != 0)
    return NRES_ESTATE;
  rate_set(e, a.quota, now);
  e->st.fleet = a.sum;
  e->st.hosts = a.hosts;
  return 0;
}

/* ------------------------------------------------------------ breakers */

static nres_time_t to_ms(nres_time_t t) {
  return (t / NRES_MSEC + (t % NRES_MSEC != 0)) * NRES_MSEC;
}

/* The claim's lease (ms): probe_lease, or the breaker's break_for. */
static uint64_t lease_ms(const nres_sync_t *s, const nres_breaker_t *b) {
  nres_time_t l = s->cfg.probe_lease != 0 ? s->cfg.probe_lease
                                          : b->config.break_for;

  if (l > ((nres_time_t) 1 << 37) * NRES_MSEC)
    l = ((nres_time_t) 1 << 37) * NRES_MSEC;
  return (uint64_t) (l / NRES_MSEC);
}

static int breaker_args(nres_sync_t *s, entry_t *e, nres_time_t now,
                        char buf[][32]) {
  static const char *const names[] = { "closed", "open", "half", "isolated" };
  nres_breaker_t *b = e->state;
  nres_time_t until;
  uint32_t calls = 0, failures = 0, slow = 0;
  int st, own;

  st = nres_breaker_peek(b, now, &until);
  if (e->imposed != 0 && !(st == NRES_BREAKER_OPEN && until == e->imposed))
    e->imposed = 0;   /* not the break we gave it any more */
  own = (st == NRES_BREAKER_OPEN && e->imposed == 0) ||
        st == NRES_BREAKER_HALF_OPEN;
  e->bstate = st;
  /* A voter: a host that saw the dependency lately (calls in its window)
   * or whose own breaker is open. */
  nres_window_sum(&b->window, now, &calls, &failures, &slow);
  snprintf(buf[0], 32, "%s", names[st & 3]);
  snprintf(buf[1], 32, "%d", own);
  snprintf(buf[2], 32, "%llu",
           (unsigned long long) (st == NRES_BREAKER_OPEN && until > now
                                     ? (until - now) / NRES_MSEC : 0));
  snprintf(buf[3], 32, "%llu",
           (unsigned long long) (STALE_INTERVALS * s->cfg.interval / NRES_MSEC));
  snprintf(buf[4], 32, "%llu", (unsigned long long) (s->cfg.ttl / NRES_MSEC));
  snprintf(buf[5], 32, "%llu", (unsigned long long) lease_ms(s, b));
  snprintf(buf[6], 32, "%d", calls > 0 || own);
  snprintf(buf[7], 32, "%.6f", s->cfg.breaker_quorum);
  snprintf(buf[8], 32, "%u", calls);
  snprintf(buf[9], 32, "%u", failures);
  snprintf(buf[10], 32, "%.6f", s->cfg.breaker_fleet_ratio);
  snprintf(buf[11], 32, "%u", s->cfg.breaker_fleet_min_calls);
  return 12;
}

static int breaker_apply(nres_sync_t *s, entry_t *e, const redisReply *r,
                         nres_time_t now, char *why, size_t cap) {
  nres_breaker_t *b = e->state;
  nres__breaker_reply_t a;
  nres_time_t target, left;
  int64_t max_ms;

  /* No break longer than the local breaker's longest plus the lease. */
  max_ms = (int64_t) (b->config.break_max / NRES_MSEC) + (int64_t) lease_ms(s, b);
  if (nres__sync_breaker_reply(r, max_ms, &a, why, cap) != 0)
    return NRES_ESTATE;
  if (a.lapsed_ms != 0 && a.lapsed_ms != e->lapsed) {
    e->lapsed = a.lapsed_ms;   /* each lapsed claim counted once */
    e->st.leases_expired++;
  }
  e->st.prober = (uint32_t) a.prober;
  e->st.fleet = a.state;
  e->st.hosts = a.voters;
  e->st.local = 0;
  if (a.state == 1 && a.live && !a.prober) {
    /* Another host's break, its claim alive: hold ours open past its end
     * while it lasts, so that only the prober probes. */
    left = a.until_ms > a.now_ms
               ? (nres_time_t) (a.until_ms - a.now_ms) * NRES_MSEC : 0;
    target = to_ms(nres_time_add(now, nres_time_add(
        left, GRACE_INTERVALS * s->cfg.interval)));
    if (nres_breaker_open_until(b, now, target) == 1)
      e->imposed = target;
    e->st.local = (double) (target - now) / 1e6;
  } else if (a.state == 2 && e->imposed != 0) {
    nres_breaker_close_if(b, e->imposed);
    e->imposed = 0;
  }
  return 0;
}

/* --------------------------------------------------------------- rounds */

static void local_only(nres_sync_t *s, nres_time_t now) {
  int i;
  entry_t *e;

  for (i = 0; i < s->n; i++) {
    e = &s->e[i];
    if (!e->used)
      continue;
    e->st.synced = 0;
    e->fresh = 1;
    if (e->kind == NRES_SYNC_BUDGET)
      budget_local(s, e, now);
    else if (e->kind == NRES_SYNC_RATELIMIT)
      rate_local(s, e, now);
    /* a breaker: breaks given run out by themselves */
    e->last_tick = now;
  }
}

/* A failed round, connection or probe: drop the connection, back off
 * (exponential from an interval, full jitter, capped at reconnect_max),
 * every entry local-only now. Whatever failed, the wait is the same, so an
 * error reply (NOAUTH, READONLY) is no faster loop than a refused
 * connection. */
static int fail(nres_sync_t *s, nres_time_t now, int rc) {
  nres__sync_drop(s);
  if (s->nseeds > 0)
    nres__sync_cluster_drop(s);
  s->info.failures++;
  s->info.connected = 0;
  s->attempt++;
  s->info.next_connect =
      nres_time_add(now, nres_backoff_next(&s->backoff, &s->bstate,
                                           s->attempt, NULL, &s->rng));
  local_only(s, now);
  return rc;
}

static const char *const kind_name[] = { "", "budget", "rate", "breaker" };

int nres__sync_argv(nres_sync_t *s, entry_t *e, const char **argv) {
  int j, keys = e->kind == NRES_SYNC_BREAKER ? 4 : 2;

  argv[0] = "EVALSHA";
  argv[1] = s->sha[e->kind - 1];
  argv[2] = keys == 4 ? "4" : "2";
  for (j = 0; j < keys; j++)
    argv[3 + j] = e->key[j];
  argv[3 + keys] = s->node;
  for (j = 0; j < e->nargs; j++)
    argv[4 + keys + j] = e->args[j];
  return 4 + keys + e->nargs;
}

/* One node: every entry's call in one pipeline, the replies in order. */
static int exchange_send(nres_sync_t *s) {
  const char *argv[NRES__SYNC_ARGV_MAX];
  int i;

  for (i = 0; i < s->n; i++)
    if (s->e[i].used &&
        redisAppendCommandArgv(s->rc, nres__sync_argv(s, &s->e[i], argv),
                               argv, NULL) != REDIS_OK)
      return NRES_EAGAIN;
  return 0;
}

static int exchange_recv(nres_sync_t *s) {
  char at[300];
  entry_t *e;
  int i;

  for (i = 0; i < s->n; i++) {
    e = &s->e[i];
    if (!e->used)
      continue;
    if (nres__sync_get_reply(s, &e->reply) != REDIS_OK) {
      nres__sync_say(s, "%s: round: %s", nres__sync_where(s, at, sizeof(at)),
                     s->rc->err == REDIS_ERR_OOM
                         ? "reply refused: an array too long (or out of memory)"
                         : s->rc->errstr[0] ? s->rc->errstr : "no answer");
      return NRES_EAGAIN;   /* reset, or no answer in time */
    }
  }
  return 0;
}

static void free_replies(nres_sync_t *s) {
  int i;

  for (i = 0; i < s->n; i++)
    if (s->e[i].reply != NULL) {
      freeReplyObject(s->e[i].reply);
      s->e[i].reply = NULL;
    }
}

/* A round's first part: connected (or failed), every entry's arguments
 * taken: 0, or the failed round's code. */
static int round_start(nres_sync_t *s, nres_time_t now) {
  entry_t *e;
  int i, rc;

  if (s->nsentinels > 0 && nres__sync_sentinel_switched(s)) {
    /* The primary moved: follow it now, no failure, no backoff. */
    nres__sync_drop(s);
    s->info.next_connect = now;
  }
  if (s->nseeds == 0 && s->rc == NULL) {
    if (now < s->info.next_connect) {
      local_only(s, now);
      return NRES_EAGAIN;
    }
    rc = nres__sync_connect(s);
    if (rc != 0)
      return fail(s, now, rc);
  } else if (s->nseeds > 0 && !s->info.connected &&
             now < s->info.next_connect) {
    local_only(s, now);
    return NRES_EAGAIN;
  }

  for (i = 0; i < s->n; i++) {
    e = &s->e[i];
    if (!e->used)
      continue;
    if (e->kind == NRES_SYNC_BUDGET)
      e->nargs = budget_args(s, e, now, e->args);
    else if (e->kind == NRES_SYNC_RATELIMIT)
      e->nargs = rate_args(s, e, now, e->args);
    else
      e->nargs = breaker_args(s, e, now, e->args);
    e->last_tick = now;
  }
  return 0;
}

/* A round's last part: every entry's reply checked and applied, or the
 * round failed. */
static int round_apply(nres_sync_t *s, nres_time_t now) {
  char why[NRES__SYNC_LINE_MAX];
  redisReply *r;
  entry_t *e;
  int i, rc;

  for (i = 0; i < s->n; i++) {
    e = &s->e[i];
    if (!e->used)
      continue;
    r = e->reply;
    if (r->type == REDIS_REPLY_ERROR) {
      /* READONLY (a demoted primary), NOSCRIPT (flushed), OOM...: said
       * once, and the next connection after the backoff loads the
       * scripts again. */
      nres__sync_say(s, "%s scope %s: %.200s (local-only until it works)",
                     kind_name[e->kind], e->st.scope,
                     r->str != NULL ? r->str : "");
      rc = NRES_ESTATE;
    } else if (e->kind == NRES_SYNC_BUDGET) {
      rc = budget_apply(e, r, why, sizeof(why));
    } else if (e->kind == NRES_SYNC_RATELIMIT) {
      rc = rate_apply(e, r, now, why, sizeof(why));
    } else {
      rc = breaker_apply(s, e, r, now, why, sizeof(why));
    }
    if (rc != 0 && r->type != REDIS_REPLY_ERROR)
      nres__sync_say(s, "scope %s: %s (round failed: local-only)",
                     e->st.scope, why);
    if (rc != 0) {
      /* An answer we do not understand fails the whole round: nothing
       * more of it is trusted. */
      s->info.errors++;
      free_replies(s);
      return fail(s, now, NRES_ESTATE);
    }
    e->st.synced = 1;
    e->st.last_sync = now;
    e->st.rounds++;
    e->st.demand = e->demand;
  }
  free_replies(s);
  s->attempt = 0;
  s->info.rounds++;
  s->info.connected = 1;
  s->info.last_sync = now;
  nres__sync_said_ok(s);
  return 0;
}

static int round_locked(nres_sync_t *s, nres_time_t now) {
  int rc = round_start(s, now);

  if (rc != 0)
    return rc;
  if (s->nseeds > 0)
    rc = nres__sync_cluster_exchange(s);
  else if ((rc = exchange_send(s)) == 0)
    rc = exchange_recv(s);
  if (rc != 0) {
    free_replies(s);
    return fail(s, now, rc);
  }
  return round_apply(s, now);
}

int nres__sync_round_send(nres_sync_t *s, nres_time_t now) {
  int rc;

  if (s->nseeds > 0 || s->running)
    return NRES_EINVAL;
  rc = round_start(s, now);
  if (rc != 0)
    return rc;
  if (exchange_send(s) != 0 || nres__sync_flush(s) != REDIS_OK)
    return fail(s, now, NRES_EAGAIN);
  return 0;
}

int nres__sync_round_recv(nres_sync_t *s, nres_time_t now) {
  int rc = exchange_recv(s);

  if (rc != 0) {
    free_replies(s);
    return fail(s, now, rc);
  }
  return round_apply(s, now);
}

/* Between rounds: a PING answered within the timeout, or the connection
 * is dropped and every entry falls back now, as in a failed round. Any
 * answer will do (an error too: the next round judges it). */
static int probe_locked(nres_sync_t *s, nres_time_t now) {
  redisReply *r;
  char at[300];
  int i;

  if (s->nsentinels > 0 && nres__sync_sentinel_switched(s)) {
    nres__sync_drop(s);   /* the primary moved: the next round follows */
    s->info.next_connect = now;
    local_only(s, now);
  }
  if (s->nseeds > 0) {
    if (!s->info.connected)
      return NRES_EAGAIN;
    for (i = 0; i < s->n; i++)
      if (s->e[i].used && s->e[i].kind == NRES_SYNC_RATELIMIT)
        rate_restart(&s->e[i], now);
    if (nres__sync_cluster_ping(s) != 0) {
      nres__sync_say(s, "cluster: probe: a node did not answer");
      return fail(s, now, NRES_EAGAIN);
    }
    return 0;
  }
  if (s->rc == NULL)
    return NRES_EAGAIN;   /* apart already: the next round reconnects */
  for (i = 0; i < s->n; i++)
    if (s->e[i].used && s->e[i].kind == NRES_SYNC_RATELIMIT)
      rate_restart(&s->e[i], now);
  r = nres__sync_call(s, 1, (const char *[]) { "PING" });
  if (r == NULL) {
    nres__sync_say(s, "%s: probe: %s", nres__sync_where(s, at, sizeof(at)),
                   s->rc->errstr[0] ? s->rc->errstr : "no answer");
    return fail(s, now, NRES_EAGAIN);
  }
  freeReplyObject(r);
  return 0;
}

/* A write to a peer that went away raises SIGPIPE, which would end the
 * process: blocked for the round (or probe), and a pending one taken
 * away. */
static int guarded(nres_sync_t *s, nres_time_t now,
                   int (*fn)(nres_sync_t *, nres_time_t)) {
  sigset_t pipe, old, pending;
  struct timespec zero = { 0, 0 };
  int had, rc;

  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  sigpending(&pending);
  had = sigismember(&pending, SIGPIPE);
  rc = fn(s, now);
  if (!had) {
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE))
      sigtimedwait(&pipe, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

/* A round or a probe asked for by the caller: refused while the agent's
 * own thread runs them. */
static int by_hand(nres_sync_t *sync, nres_time_t now,
                   int (*fn)(nres_sync_t *, nres_time_t)) {
  int rc;

  if (sync == NULL)
    return NRES_EINVAL;
  pthread_mutex_lock(&sync->mu);
  if (sync->running) {
    pthread_mutex_unlock(&sync->mu);
    return NRES_EINVAL;
  }
  rc = guarded(sync, now, fn);
  pthread_mutex_unlock(&sync->mu);
  return rc;
}

int nres_sync_tick(nres_sync_t *sync, nres_time_t now) {
  return by_hand(sync, now, round_locked);
}

int nres_sync_probe(nres_sync_t *sync, nres_time_t now) {
  return by_hand(sync, now, probe_locked);
}

/* Wait (mutex held) until `t` or a stop: 1 if stopping. */
static int wait_until(nres_sync_t *s, nres_time_t t) {
  struct timespec at;

  at.tv_sec = (time_t) (t / NRES_SEC);
  at.tv_nsec = (long) (t % NRES_SEC);
  while (!s->stopping && nres_clock_now() < t)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &at) == ETIMEDOUT)
      break;
  return s->stopping;
}

/* Rounds every interval; a probe `timeout` before each round, so that the
 * gaps between two requests to Redis are interval - timeout and timeout:
 * a Redis that stops answering is seen within max(interval, 2 * timeout)
 * (one interval with the default timeout, interval / 2). */
static void *run(void *arg) {
  nres_sync_t *s = arg;
  nres_time_t next, probe;

  pthread_mutex_lock(&s->mu);
  next = nres_clock_now();
  while (!s->stopping) {
    guarded(s, nres_clock_now(), round_locked);
    next = nres_time_add(next, s->cfg.interval);
    if (next < nres_clock_now())
      next = nres_clock_now();   /* a slow round: no catching up */
    probe = next - s->cfg.timeout;
    if (s->cfg.timeout < s->cfg.interval && s->rc != NULL &&
        nres_clock_now() < probe) {
      if (wait_until(s, probe))
        break;
      guarded(s, nres_clock_now(), probe_locked);
    }
    wait_until(s, next);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int nres_sync_start(nres_sync_t *sync) {
  int rc;

  if (sync == NULL)
    return NRES_EINVAL;
  pthread_mutex_lock(&sync->mu);
  if (sync->running) {
    pthread_mutex_unlock(&sync->mu);
    return NRES_EINVAL;
  }
  sync->stopping = 0;
  rc = pthread_create(&sync->thread, NULL, run, sync);
  if (rc == 0)
    sync->running = 1;
  pthread_mutex_unlock(&sync->mu);
  return rc == 0 ? 0 : NRES_ENOMEM;
}

int nres_sync_stop(nres_sync_t *sync) {
  if (sync == NULL)
    return NRES_EINVAL;
  pthread_mutex_lock(&sync->mu);
  if (!sync->running) {
    pthread_mutex_unlock(&sync->mu);
    return 0;
  }
  sync->stopping = 1;
  pthread_cond_broadcast(&sync->cv);
  pthread_mutex_unlock(&sync->mu);
  pthread_join(sync->thread, NULL);
  pthread_mutex_lock(&sync->mu);
  sync->running = 0;
  pthread_mutex_unlock(&sync->mu);
  return 0;
}

void nres_sync_info(nres_sync_t *sync, nres_sync_info_t *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof(*out));
  if (sync == NULL)
    return;
  pthread_mutex_lock(&sync->mu);
  *out = sync->info;
  pthread_mutex_unlock(&sync->mu);
}

int nres_sync_stats(nres_sync_t *sync, int id, nres_sync_stats_t *out) {
  if (sync == NULL || out == NULL)
    return NRES_EINVAL;
  pthread_mutex_lock(&sync->mu);
  if (id < 0 || id >= sync->n || !sync->e[id].used) {
    pthread_mutex_unlock(&sync->mu);
    return NRES_EINVAL;
  }
  *out = sync->e[id].st;
  pthread_mutex_unlock(&sync->mu);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* registry.c - gateway upstreams and client limiters: made from a
 * declaration's figures, found by name.
 *
 * The Lua balancer declares an upstream in init_by_lua (nginx's master)
 * and registers it here; the nginx module finds it by name in its
 * postconfiguration, which runs after init_by_lua, and keeps the pointer
 * (per request there is no lookup). A reload runs both again: the module
 * clears the registry when a configuration starts, so a name the new
 * init_by_lua no longer declares is not found in an old one's upstream.
 * One process, one thread (nginx's master at configuration time): no lock.
 */
#include <string.h>

#include "nres/gateway.h"
#include "core/breaker.h"
#include "gateway/members.h"
#include "internal.h"

static nres_gw_upstream_t *registry;
static nres_gw_limiter_t *limiters;

static int name_ok(const char *s) {
  return s != NULL && s[0] != '\0' && strlen(s) <= NRES_GW_NAME_MAX;
}

/* Do the breakers of a table's slots count calls in a window? Every slot's
 * breaker is made from the table's configuration, if the table keeps one
 * (else it is zeros: closed, no window). */
static int windowed(nres_shm_t *table) {
  const nres_shm_config_t *c = nres_shm_config(table);
  return c != NULL && (c->flags & NRES_SHM_BREAKER) &&
         nres__breaker_config_windowed(&c->breaker);
}

/* Weights in 1..NRES_GW_WEIGHT_MAX, at least one peer not a backup. */
static int weights_ok(const nres_gw_config_t *cfg) {
  int primary = 0;
  for (uint32_t i = 0; i < cfg->npeers && i < NRES_GW_PEERS_MAX; i++) {
    if (cfg->peer_weights != NULL &&
        (cfg->peer_weights[i] < 1 || cfg->peer_weights[i] > NRES_GW_WEIGHT_MAX))
      return 0;
    primary |= cfg->peer_backup == NULL || cfg->peer_backup[i] == 0;
  }
  return primary;
}

nres_gw_upstream_t *nres_gw_upstream_new(const nres_gw_config_t *cfg) {
  if (cfg == NULL || !name_ok(cfg->name) || !name_ok(cfg->key) || cfg->scope == NULL ||
      cfg->peers == NULL || cfg->estimators == NULL || cfg->peer_names == NULL ||
      (cfg->peer_slots == NULL && cfg->members == NULL) || cfg->npeers < 1 || cfg->npeers > NRES_GW_PEERS_MAX ||
      cfg->attempts < 1 || cfg->deadline == 0 || cfg->attempt_timeout == 0 ||
      (cfg->choice != NRES_GW_P2C && cfg->choice != NRES_GW_ROUND_ROBIN) ||
      !(cfg->panic >= 0 && cfg->panic <= 1) || !weights_ok(cfg))
    return NULL;
  uint32_t cap = cfg->npeers;
  if (cfg->members != NULL) {   /* an entry per slot at most */
    if (cfg->members->slots < cfg->npeers || nres__load(&cfg->members->gen) == 0)
      return NULL;
    cap = cfg->members->slots;
  }
  nres_gw_upstream_t *u = nres__calloc(1, sizeof *u + cap * sizeof(nres_gw_peer_t));
  if (u == NULL)
    return NULL;
  u->cap = cap;
  u->members = cfg->members;
  u->estimators = cfg->estimators;
  u->try_hists = cfg->try_hists;
  u->peer_controls = cfg->peer_controls;
  u->windowed_peers = windowed(cfg->peers);
  strcpy(u->name, cfg->name);
  strcpy(u->key, cfg->key);
  u->scope = cfg->scope;
  u->peers = cfg->peers;
  u->deadline = cfg->deadline;
  u->attempt_timeout = cfg->attempt_timeout;
  u->hold = cfg->hold;
  u->attempts = cfg->attempts;
  u->n = cfg->npeers;
  u->choice = cfg->choice;
  u->panic = cfg->panic;
  u->budget = cfg->budget != 0;
  u->breaker = cfg->breaker != 0;
  u->windowed = windowed(cfg->scope);
  u->hist = cfg->request_hist;
  u->control = cfg->control;
  u->slow_start = cfg->slow_start;
  u->weighted = cfg->slow_start > 0;
  u->sidx = -1;
  u->checked = 0;
  u->lookup_at = 0;
  nres_rng_seed(&u->rng, (uint64_t)(uintptr_t)u);
  for (uint32_t i = 0; i < cfg->npeers; i++)
    if (!name_ok(cfg->peer_names[i])) {
      nres__free(u);
      return NULL;
    }
  if (u->members != NULL) {
    u->declared_weighted = u->weighted;
    nres__gw_view_declared(u, cfg->peer_names, cfg->npeers, 0);
    return u;
  }
  for (uint32_t i = 0; i < u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    nres_shm_slot_t *slot = nres_shm_slot(cfg->peers, cfg->peer_slots[i]);
    if (slot == NULL || !name_ok(cfg->peer_names[i])) {
      nres__free(u);
      return NULL;
    }
    p->slot = cfg->peer_slots[i];
    p->breaker = &slot->breaker;
    p->counters = slot;
    p->estimator = cfg->estimators + cfg->peer_slots[i];
    p->hist = cfg->try_hists != NULL ? cfg->try_hists + cfg->peer_slots[i] : NULL;
    p->control = cfg->peer_controls != NULL ? cfg->peer_controls + cfg->peer_slots[i] : NULL;
    p->windowed = windowed(cfg->peers);
    p->declared = p->weight = cfg->peer_weights != NULL ? cfg->peer_weights[i] : 1;
    p->backup = cfg->peer_backup != NULL && cfg->peer_backup[i] != 0;
    p->share = p->weight;
    u->weighted |= p->declared != 1 || p->backup;
    strcpy(p->name, cfg->peer_names[i]);
    p->socklen = nres_gw_parse_addr(p->name, strlen(p->name), p->sockaddr.bytes);
  }
  u->declared_weighted = u->weighted;
  return u;
}

void nres_gw_register(nres_gw_upstream_t *u) {
  for (nres_gw_upstream_t **at = &registry; *at != NULL; at = &(*at)->next) {
    if (strcmp((*at)->name, u->name) == 0) {
      u->next = (*at)->next;
      (*at)->next = NULL;
      *at = u;
      return;
    }
  }
  u->next = registry;
  registry = u;
}

nres_gw_upstream_t *nres_gw_find(const char *name, size_t len) {
  for (nres_gw_upstream_t *u = registry; u != NULL; u = u->next)
    if (strlen(u->name) == len && memcmp(u->name, name, len) == 0)
      return u;
  return NULL;
}

void nres_gw_registry_clear(void) {
  nres_gw_upstream_t *u = registry;
  while (u != NULL) {
    nres_gw_upstream_t *next = u->next;
    u->next = NULL;
    u = next;
  }
  registry = NULL;
  nres_gw_limiter_t *l = limiters;
  while (l != NULL) {
    nres_gw_limiter_t *next = l->next;
    l->next = NULL;
    l = next;
  }
  limiters = NULL;
}

void nres_gw_upstream_free(nres_gw_upstream_t *u) {
  if (u == NULL)
    return;
  for (nres_gw_upstream_t **at = &registry; *at != NULL; at = &(*at)->next) {
    if (*at == u) {
      *at = u->next;
      break;
    }
  }
  nres__free(u);
}

void nres_gw_seed(nres_gw_upstream_t *u, uint64_t seed) {
  nres_rng_seed(&u->rng, seed);
  u->checked = 0;
}

size_t nres_gw_struct_size(int which) {
  switch (which) {
  case 0: return sizeof(nres_gw_upstream_t);
  case 1: return sizeof(nres_gw_peer_t);
  case 2: return sizeof(nres_gw_request_t);
  case 3: return sizeof(nres_gw_limiter_t);
  case 4: return sizeof(nres_gw_hist_t);
  case 5: return sizeof(nres_gw_control_t);
  case 6: return sizeof(nres_gw_members_t);
  case 7: return sizeof(nres_gw_member_t);
  default: return 0;
  }
}

nres_gw_limiter_t *nres_gw_limiter_new(const char *name, nres_shm_t *table, nres_time_t hold) {
  if (!name_ok(name) || table == NULL ||
      !(nres_shm_config(table)->flags & NRES_SHM_RATELIMIT))
    return NULL;
  nres_gw_limiter_t *l = nres__calloc(1, sizeof *l);
  if (l == NULL)
    return NULL;
  strcpy(l->name, name);
  l->table = table;
  l->hold = hold;
  return l;
}

void nres_gw_limiter_register(nres_gw_limiter_t *l) {
  for (nres_gw_limiter_t **at = &limiters; *at != NULL; at = &(*at)->next) {
    if (strcmp((*at)->name, l->name) == 0) {
      l->next = (*at)->next;
      (*at)->next = NULL;
      *at = l;
      return;
    }
  }
  l->next = limiters;
  limiters = l;
}

nres_gw_limiter_t *nres_gw_limiter_find(const char *name, size_t len) {
  for (nres_gw_limiter_t *l = limiters; l != NULL; l = l->next)
    if (strlen(l->name) == len && memcmp(l->name, name, len) == 0)
      return l;
  return NULL;
}

void nres_gw_limiter_free(nres_gw_limiter_t *l) {
  if (l == NULL)
    return;
  for (nres_gw_limiter_t **at = &limiters; *at != NULL; at = &(*at)->next) {
    if (*at == l) {
      *at = l->next;
      break;
    }
  }
  nres__free(l);
}

/* SPDX-License-Identifier: MIT */
/* members.c - peers added and removed at run time (nres/gateway.h,
 * "membership").
 *
 * The membership is one record per slot of the peers' table, in its
 * memory: every process sees a change at once. Writers (the control API
 * in any worker, a Lua timer, the declaration at a reload) change it one
 * at a time under a lease, and publish each change as a seqlock does: the
 * generation odd while records are written, even (and new) once they are;
 * a reader (nres_gw_sync, each process's view) takes a view only from an
 * even generation that did not move while it read. A writer killed
 * mid-change leaves an odd generation that the next change makes even.
 *
 * Each process's view (nres_gw_upstream_t.peer[]) keeps an entry's index
 * for as long as this process has tries in flight on it: a removed peer's
 * entry is marked removed (no new tries, drained for the choice) and is
 * reused for another peer only once those tries ended. A peer's slot, in
 * the shared table, is freed only when every process's tries on it ended
 * (counted per shard and slot here) and NRES_GW_REMOVE_GRACE after its
 * removal: a pick that loaded the old generation starts its try in the
 * same call, long before that.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nres/gateway.h"
#include "core/breaker.h"
#include "gateway/members.h"
#include "internal.h"

#define SPINS 10000             /* rounds waiting for another writer */

static size_t row_bytes(uint32_t slots) {
  size_t b = (size_t)slots * sizeof(uint32_t);
  return (b + 127) / 128 * 128;
}

size_t nres_gw_members_size(uint32_t slots) {
  return sizeof(nres_gw_members_t) + (size_t)slots * sizeof(nres_gw_member_t) +
         NRES_SHARDS * row_bytes(slots);
}

nres_gw_member_t *nres_gw_member(nres_gw_members_t *m, uint32_t slot) {
  if (m == NULL || slot >= m->slots)
    return NULL;
  return (nres_gw_member_t *)(void *)(m + 1) + slot;
}

NRES_ATOMIC(uint32_t) *nres__gw_inflight_row(nres_gw_members_t *m, unsigned shard) {
  char *rows = (char *)(m + 1) + (size_t)m->slots * sizeof(nres_gw_member_t);
  return (NRES_ATOMIC(uint32_t) *)(void *)(rows + shard * row_bytes(m->slots));
}

uint32_t nres_gw_member_inflight(nres_gw_members_t *m, uint32_t slot) {
  uint32_t sum = 0;   /* a try may begin in one shard and end in another
                         (threads): the sum wraps back right */
  if (m == NULL || slot >= m->slots)
    return 0;
  for (unsigned k = 0; k < NRES_SHARDS; k++)
    sum += nres__load(&nres__gw_inflight_row(m, k)[slot]);
  return sum;
}

uint32_t nres_gw_parse_addr(const char *s, size_t len, void *out) {
  char host[NRES_GW_NAME_MAX + 1];
  const char *colon;
  size_t hlen;
  if (s == NULL || len == 0 || len > NRES_GW_NAME_MAX)
    return 0;
  colon = NULL;
  for (size_t i = len; i > 0; i--)
    if (s[i - 1] == ':') {
      colon = s + i - 1;
      break;
    }
  if (colon == NULL || colon == s)
    return 0;
  const char *p = colon + 1, *end = s + len;
  if (p == end || end - p > 5)
    return 0;
  unsigned long port = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9')
      return 0;
    port = port * 10 + (unsigned long)(*p - '0');
  }
  if (port < 1 || port > 65535)
    return 0;
  hlen = (size_t)(colon - s);
  int v6 = s[0] == '[';   /* "[v6]:port" */
  if (v6 && (hlen < 3 || s[hlen - 1] != ']'))
    return 0;
  memcpy(host, s + v6, hlen - 2 * (size_t)v6);
  host[hlen - 2 * (size_t)v6] = '\0';
  union { struct sockaddr_in a4; struct sockaddr_in6 a6; } a;
  memset(&a, 0, sizeof a);
  if (inet_pton(v6 ? AF_INET6 : AF_INET, host,
                v6 ? (void *)&a.a6.sin6_addr : (void *)&a.a4.sin_addr) != 1)
    return 0;
  if (v6) {
    a.a6.sin6_family = AF_INET6;
    a.a6.sin6_port = htons((uint16_t)port);
  } else {
    a.a4.sin_family = AF_INET;
    a.a4.sin_port = htons((uint16_t)port);
  }
  size_t size = v6 ? sizeof a.a6 : sizeof a.a4;
  memcpy(out, &a, size);
  return (uint32_t)size;
}

/* ------------------------------------------------------------- writers */

/* A holder id for the lease: the process's and a counter's, never 0. */
static uint32_t holder_id(void) {
  static NRES_ATOMIC(uint32_t) next;
  uint32_t id = (uint32_t)getpid() * 2654435761u ^ (nres__add(&next, 1) + 1) * 40503u;
  return id != 0 ? id : 1;
}

static int lock(nres_gw_members_t *m, uint32_t id, nres_time_t now) {
  for (int i = 0; i < SPINS; i++) {
    if (nres_gw_lease_take(&m->lock, id, now, NRES_GW_MEMBERS_LEASE) == 1)
      return 0;
    sched_yield();
  }
  return NRES_EBUSY;
}

static void unlock(nres_gw_members_t *m, uint32_t id) { nres_gw_lease_drop(&m->lock, id); }

/* A change begins: the generation odd (a writer killed mid-change left it
 * odd: it stays so). Returns it. */
static uint64_t change_begin(nres_gw_members_t *m) {
  uint64_t g = nres__load(&m->gen) | 1;
  atomic_store_explicit(&m->gen, g, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  return g;
}

static void change_end(nres_gw_members_t *m, uint64_t g) {
  atomic_store_explicit(&m->gen, g + 1, memory_order_release);
}

static uint64_t digest(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void write_record(nres_gw_member_t *r, const char *name, size_t len, uint32_t weight,
                         int backup, uint32_t key_gen) {
  memset(r->name, 0, sizeof r->name);
  memcpy(r->name, name, len);
  memset(&r->sockaddr, 0, sizeof r->sockaddr);
  r->socklen = nres_gw_parse_addr(name, len, r->sockaddr.bytes);
  r->weight = weight;
  r->backup = backup != 0;
  r->key_gen = key_gen;
  r->removed_at = 0;
  nres__store(&r->state, NRES_GW_MEMBER_ACTIVE);
}

int nres_gw_members_declare(nres_gw_members_t *m, size_t size, nres_shm_t *peers,
                            uint32_t capacity, const char *const *names,
                            const uint32_t *weights, const uint8_t *backup, uint32_t n,
                            nres_time_t linger, nres_time_t now) {
  const nres_shm_config_t *c = nres_shm_config(peers);
  if (m == NULL || c == NULL || names == NULL || n < 1 || capacity < n ||
      capacity > c->slots || size < nres_gw_members_size(c->slots))
    return NRES_EINVAL;
  uint64_t h = 1469598103934665603ull;
  h = digest(h, &capacity, sizeof capacity);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t w = weights != NULL ? weights[i] : 1;
    uint8_t b = backup != NULL ? backup[i] : 0;
    if (names[i] == NULL || strlen(names[i]) < 1 || strlen(names[i]) > NRES_GW_NAME_MAX)
      return NRES_EINVAL;
    h = digest(h, names[i], strlen(names[i]) + 1);
    h = digest(h, &w, sizeof w);
    h = digest(h, &b, 1);
  }
  uint64_t g0 = nres__load(&m->gen);
  if (g0 != 0 && m->slots == c->slots && m->capacity == capacity && m->declared == h) {
    m->linger = linger;
    return 1;   /* the same declaration: the membership as it is */
  }
  uint32_t id = holder_id();
  if (g0 == 0 || m->slots != c->slots) {   /* never made (or another layout) */
    memset(m, 0, size);
    m->slots = c->slots;
  } else if (lock(m, id, now) != 0) {
    return NRES_EBUSY;
  }
  uint64_t g = change_begin(m);
  int rc = 0;
  /* every member not declared now is removed (its tries finish) */
  for (uint32_t s = 0; s < m->slots; s++) {
    nres_gw_member_t *r = nres_gw_member(m, s);
    if (nres__load(&r->state) != NRES_GW_MEMBER_ACTIVE)
      continue;
    int declared = 0;
    for (uint32_t i = 0; i < n && !declared; i++)
      declared = strcmp(r->name, names[i]) == 0;
    if (!declared) {
      r->removed_at = now;
      nres__store(&r->state, NRES_GW_MEMBER_REMOVED);
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t kg = 0;
    int idx = nres_shm_acquire(peers, names[i], strlen(names[i]), now, NRES_TIME_NEVER, &kg);
    nres_gw_member_t *r = idx >= 0 ? nres_gw_member(m, (uint32_t)idx) : NULL;
    if (r == NULL) {
      rc = idx == NRES_EINVAL || idx >= 0 ? NRES_EINVAL : NRES_EFULL;
      break;
    }
    write_record(r, names[i], strlen(names[i]), weights != NULL ? weights[i] : 1,
                 backup != NULL && backup[i], kg);
  }
  m->capacity = capacity;
  m->linger = linger;
  m->declared = rc == 0 ? h : 0;
  change_end(m, g);
  unlock(m, id);
  return rc;
}

static int reap(nres_gw_upstream_t *u, nres_time_t now) {
  nres_gw_members_t *m = u->members;
  int freed = 0;
  for (uint32_t s = 0; s < m->slots; s++) {
    nres_gw_member_t *r = nres_gw_member(m, s);
    if (nres__load(&r->state) != NRES_GW_MEMBER_REMOVED)
      continue;
    nres_time_t age = now > r->removed_at ? now - r->removed_at : 0;
    if (age < NRES_GW_REMOVE_GRACE ||
        (nres_gw_member_inflight(m, s) != 0 && age < m->linger))
      continue;
    for (unsigned k = 0; k < NRES_SHARDS; k++)   /* a stuck count ends here */
      nres__store(&nres__gw_inflight_row(m, k)[s], 0);
    nres_shm_release(u->peers, s, r->key_gen, now);
    nres__store(&r->state, NRES_GW_MEMBER_FREE);
    freed++;
  }
  return freed;
}

int nres_gw_members_reap(nres_gw_upstream_t *u, nres_time_t now) {
  if (u == NULL || u->members == NULL)
    return NRES_EINVAL;
  uint32_t id = holder_id();
  if (lock(u->members, id, now) != 0)
    return NRES_EBUSY;
  int freed = reap(u, now);
  unlock(u->members, id);
  return freed;
}

/* The record of the active member named name, or NULL. */
static nres_gw_member_t *find(nres_gw_members_t *m, const char *name, size_t len,
                              uint32_t *slot) {
  for (uint32_t s = 0; s < m->slots; s++) {
    nres_gw_member_t *r = nres_gw_member(m, s);
    if (nres__load(&r->state) == NRES_GW_MEMBER_ACTIVE && strlen(r->name) == len &&
        memcmp(r->name, name, len) == 0) {
      *slot = s;
      return r;
    }
  }
  return NULL;
}

/* A slot taken by a new peer: the state of the key it held before (if
 * any) cleared, as nres_shm_acquire fills a new key's. */
static void fresh_slot(nres_gw_upstream_t *u, uint32_t s) {
  nres_shm_slot_t *slot = nres_shm_slot(u->peers, s);
  const nres_shm_config_t *c = nres_shm_config(u->peers);
  for (int j = 0; j < NRES_STOP_COUNT; j++)
    nres__store(&slot->stops[j], 0);
  for (int j = 0; j < NRES_SHARDS; j++) {
    nres__store(&slot->shard[j].calls, 0);
    nres__store(&slot->shard[j].attempts, 0);
    nres__store(&slot->shard[j].retries, 0);
    nres__store(&slot->shard[j].ok, 0);
  }
  if (c->flags & NRES_SHM_BREAKER)
    nres_breaker_init(&slot->breaker, &c->breaker);
  if (u->estimators != NULL)
    nres_estimator_init(&u->estimators[s], u->estimators[s].period > 0
                                               ? u->estimators[s].period : 1000000000u);
  if (u->try_hists != NULL)
    memset(&u->try_hists[s], 0, sizeof u->try_hists[s]);
  if (u->peer_controls != NULL)
    memset(&u->peer_controls[s], 0, sizeof u->peer_controls[s]);
}

int nres_gw_member_add(nres_gw_upstream_t *u, const char *name, size_t len, uint32_t weight,
                       int backup, nres_time_t now) {
  union { uint8_t b[NRES_GW_SOCKADDR_MAX]; uint64_t a; } sa;
  if (u == NULL || u->members == NULL || name == NULL)
    return NRES_EINVAL;
  nres_gw_members_t *m = u->members;
  if (len > NRES_GW_NAME_MAX || nres_gw_parse_addr(name, len, sa.b) == 0)
    return NRES_GW_MEMBER_BAD_ADDRESS;
  if (weight < 1 || weight > NRES_GW_WEIGHT_MAX)
    return NRES_GW_MEMBER_BAD_WEIGHT;
  uint32_t id = holder_id(), s;
  if (lock(m, id, now) != 0)
    return NRES_EBUSY;
  reap(u, now);
  int rc;
  uint32_t members = 0;   /* the peer itself, removed and coming back, not counted */
  for (uint32_t i = 0; i < m->slots; i++) {
    nres_gw_member_t *r = nres_gw_member(m, i);
    uint32_t st = nres__load(&r->state);
    members += st != NRES_GW_MEMBER_FREE &&
               !(st == NRES_GW_MEMBER_REMOVED && strlen(r->name) == len &&
                 memcmp(r->name, name, len) == 0);
  }
  uint32_t kg = 0;
  if (find(m, name, len, &s) != NULL) {
    rc = NRES_GW_MEMBER_DUPLICATE;
  } else if (members >= m->capacity) {
    rc = NRES_GW_MEMBER_FULL;
  } else if ((rc = nres_shm_acquire(u->peers, name, len, now, NRES_TIME_NEVER, &kg)) < 0) {
    rc = NRES_GW_MEMBER_FULL;   /* the key's set of slots is full */
  } else if (nres_gw_member(m, (uint32_t)rc) == NULL) {
    rc = NRES_EINVAL;   /* a slot past the membership's: another layout */
  } else {
    nres_gw_member_t *r = nres_gw_member(m, (uint32_t)rc);
    uint64_t g = change_begin(m);
    int back = nres__load(&r->state) == NRES_GW_MEMBER_REMOVED && strlen(r->name) == len &&
               memcmp(r->name, name, len) == 0;
    if (!back)
      fresh_slot(u, (uint32_t)rc);
    write_record(r, name, len, weight, backup, kg);
    change_end(m, g);
  }
  unlock(m, id);
  return rc;
}

int nres_gw_member_remove(nres_gw_upstream_t *u, const char *name, size_t len,
                          nres_time_t now) {
  if (u == NULL || u->members == NULL || name == NULL)
    return NRES_EINVAL;
  nres_gw_members_t *m = u->members;
  uint32_t id = holder_id(), s;
  if (lock(m, id, now) != 0)
    return NRES_EBUSY;
  reap(u, now);
  int rc;
  nres_gw_member_t *r = find(m, name, len, &s);
  if (r == NULL) {
    rc = NRES_GW_MEMBER_UNKNOWN;
  } else {
    /* another primary stays, and it is not drained */
    uint32_t left = 0;
    for (uint32_t i = 0; i < m->slots; i++) {
      nres_gw_member_t *o = nres_gw_member(m, i);
      left += i != s && nres__load(&o->state) == NRES_GW_MEMBER_ACTIVE && !o->backup &&
              (u->peer_controls == NULL ||
               !(nres__load(&u->peer_controls[i].flags) & NRES_GW_DRAIN));
    }
    if (left == 0 && !r->backup) {
      rc = NRES_GW_MEMBER_LAST_PRIMARY;
    } else {
      uint64_t g = change_begin(m);
      r->removed_at = now;
      nres__store(&r->state, NRES_GW_MEMBER_REMOVED);
      change_end(m, g);
      rc = (int)s;
    }
  }
  unlock(m, id);
  return rc;
}

/* -------------------------------------------------------------- views */

/* Entry e of u's view made peer `s` (the record r). */
static void place(nres_gw_upstream_t *u, nres_gw_peer_t *p, uint32_t s, nres_gw_member_t *r,
                  nres_time_t now) {
  nres_shm_slot_t *slot = nres_shm_slot(u->peers, s);
  memset(p, 0, sizeof *p);
  p->slot = s;
  p->breaker = &slot->breaker;
  p->counters = slot;
  p->estimator = u->estimators + s;
  p->hist = u->try_hists != NULL ? u->try_hists + s : NULL;
  p->control = u->peer_controls != NULL ? u->peer_controls + s : NULL;
  p->windowed = u->windowed_peers;
  p->declared = p->weight = r->weight >= 1 && r->weight <= NRES_GW_WEIGHT_MAX ? r->weight : 1;
  p->backup = r->backup != 0;
  p->share = p->weight;
  p->since = now;
  memcpy(p->name, r->name, NRES_GW_NAME_MAX);
  p->name[NRES_GW_NAME_MAX] = '\0';
  p->socklen = r->socklen <= NRES_GW_SOCKADDR_MAX ? r->socklen : 0;
  memcpy(p->sockaddr.bytes, r->sockaddr.bytes, NRES_GW_SOCKADDR_MAX);
  u->view++;
}

/* The entry of u's view for slot s, or -1. */
static int entry_of(const nres_gw_upstream_t *u, uint32_t s) {
  for (uint32_t i = 0; i < u->n; i++)
    if (u->peer[i].name[0] != '\0' && u->peer[i].slot == s)
      return (int)i;
  return -1;
}

/* Peer `s` into the view: the first free entry, else a new one. */
static void add_entry(nres_gw_upstream_t *u, uint32_t s, nres_gw_member_t *r, nres_time_t now) {
  uint32_t i = 0;
  while (i < u->n && u->peer[i].name[0] != '\0')
    i++;
  if (i == u->n) {
    if (u->n == u->cap)
      return;   /* cannot happen: an entry per slot at most */
    u->n++;
  }
  place(u, &u->peer[i], s, r, now);
}

void nres__gw_view_declared(nres_gw_upstream_t *u, const char *const *names, uint32_t n,
                            nres_time_t now) {
  nres_gw_members_t *m = u->members;
  uint32_t s;
  u->inflight = nres__gw_inflight_row(m, 0);
  u->row_words = (uint32_t)(row_bytes(m->slots) / sizeof(uint32_t));
  u->n = 0;
  for (uint32_t i = 0; i < n; i++) {
    nres_gw_member_t *r = find(m, names[i], strlen(names[i]), &s);
    if (r != NULL && entry_of(u, s) < 0)
      add_entry(u, s, r, now);
  }
  u->gen = 0;   /* the rest (peers added at run time) by the sync */
  nres_gw_sync(u, now);
}

void nres_gw_sync(nres_gw_upstream_t *u, nres_time_t now) {
  nres_gw_members_t *m = u->members;
  if (m == NULL)
    return;
  uint64_t g = atomic_load_explicit(&m->gen, memory_order_acquire);
  if (g == u->gen || (g & 1))
    return;   /* unchanged, or a change being written */
  int weighted = u->declared_weighted;
  for (uint32_t i = 0; i < u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    if (p->name[0] == '\0')
      continue;
    nres_gw_member_t *r = nres_gw_member(m, p->slot);
    int alive = r != NULL && nres__load(&r->state) == NRES_GW_MEMBER_ACTIVE &&
                strncmp(r->name, p->name, NRES_GW_NAME_MAX) == 0;
    if (alive) {
      u->view += p->removed;   /* back before its entry was reused */
      p->removed = 0;
      p->declared = r->weight >= 1 && r->weight <= NRES_GW_WEIGHT_MAX ? r->weight : 1;
      p->backup = r->backup != 0;
    } else if (!p->removed) {
      p->removed = 1;   /* no new tries from now on */
      p->drained = 1;
      p->share = 0;
      p->up = 0;
      u->view++;
    }
    if (p->removed && p->inflight == 0) {
      p->name[0] = '\0';   /* free for another peer */
      u->view++;
    }
  }
  for (uint32_t s = 0; s < m->slots; s++) {
    nres_gw_member_t *r = nres_gw_member(m, s);
    if (nres__load(&r->state) == NRES_GW_MEMBER_ACTIVE && entry_of(u, s) < 0)
      add_entry(u, s, r, now);
  }
  while (u->n > 0 && u->peer[u->n - 1].name[0] == '\0')
    u->n--;
  for (uint32_t i = 0; i < u->n; i++) {
    nres_gw_peer_t *p = &u->peer[i];
    if (p->name[0] == '\0') {   /* a hole: never chosen */
      p->removed = 1;
      p->drained = 1;
      p->share = 0;
    }
    weighted |= p->removed || p->declared != 1 || p->backup;
  }
  u->weighted = weighted;
  atomic_thread_fence(memory_order_acquire);
  if (nres__load(&m->gen) == g)
    u->gen = g;   /* else read again at the next pick */
  u->checked = 0;   /* states and weights read at the next pick */
}

/* SPDX-License-Identifier: MIT */
/* cluster.c - the agent on a Redis Cluster. Each scope's keys share a hash
 * tag ({scope}), so one slot, so one node: the agent keeps one connection
 * per node it needs (a link), learns which node serves which slot from
 * CLUSTER SLOTS (asked of the seeds, then of any node it knows), sends
 * each node its entries in one pipeline, and follows redirections: MOVED
 * (the slot has a new owner: the map is asked again and the call sent
 * there) and ASK (a slot being migrated: ASKING, then the call, on the
 * node named, for this call only). A link that fails fails the round as a
 * lost connection does, and every link is made again after the backoff.
 * Separate from the rounds (sync.c), which only see one reply per entry;
 * connections are made by conn.c on whichever link is in use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sync_int.h"

/* CRC16-CCITT (XMODEM), the one Redis Cluster hashes keys with. */
static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  size_t i;
  int k;

  for (i = 0; i < len; i++) {
    crc ^= (uint16_t) ((uint8_t) buf[i] << 8);
    for (k = 0; k < 8; k++)
      crc = (uint16_t) (crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

uint16_t nres__sync_key_slot(const char *key) {
  const char *open = strchr(key, '{'), *close;

  if (open != NULL && (close = strchr(open + 1, '}')) != NULL &&
      close > open + 1)
    return crc16(open + 1, (size_t) (close - open - 1)) & 16383;
  return crc16(key, strlen(key)) & 16383;
}

int nres__sync_cluster_parse(nres_sync_t *s, const char *seeds) {
  s->nseeds = nres__sync_parse_addrs(seeds, s->seed, NRES__SYNC_SENTINELS_MAX);
  memset(s->slot_link, 0xff, sizeof(s->slot_link));
  return s->nseeds > 0 ? 0 : NRES_EINVAL;
}

/* Make link i the agent's connection (s->rc, s->tls, s->sha, cur_host),
 * and put it back. Outside a use, s->rc is NULL in cluster mode. */
static void use(nres_sync_t *s, int i) {
  nres__sync_link_t *l = &s->link[i];

  s->rc = l->rc;
  s->tls = l->tls;
  memcpy(s->sha, l->sha, sizeof(s->sha));
  snprintf(s->cur_host, sizeof(s->cur_host), "%s", l->host);
  s->cur_port = l->port;
}

static void put_back(nres_sync_t *s, int i) {
  nres__sync_link_t *l = &s->link[i];

  l->rc = s->rc;
  l->tls = s->tls;
  memcpy(l->sha, s->sha, sizeof(s->sha));
  s->rc = NULL;
  s->tls = NULL;
}

/* The link to host:port, added if new: its index, or -1 (full). */
static int link_of(nres_sync_t *s, const char *host, size_t hlen, int port) {
  int i;

  if (hlen == 0 || hlen >= sizeof(s->link[0].host))
    return -1;
  for (i = 0; i < s->nlinks; i++)
    if (s->link[i].port == port && strlen(s->link[i].host) == hlen &&
        memcmp(s->link[i].host, host, hlen) == 0)
      return i;
  if (s->nlinks == NRES__SYNC_LINKS_MAX)
    return -1;
  i = s->nlinks++;
  memset(&s->link[i], 0, sizeof(s->link[i]));
  memcpy(s->link[i].host, host, hlen);
  s->link[i].port = port;
  return i;
}

/* Link i in use and connected: 0, or the connection's error (said). */
static int ready(nres_sync_t *s, int i) {
  int rc;

  use(s, i);
  if (s->rc != NULL)
    return 0;
  rc = nres__sync_connect(s);
  if (rc != 0)
    nres__sync_drop(s);
  return rc;
}

void nres__sync_cluster_drop(nres_sync_t *s) {
  int i;

  for (i = 0; i < s->nlinks; i++) {
    use(s, i);
    nres__sync_drop(s);
    put_back(s, i);
  }
  s->map_ok = 0;
}

/* CLUSTER SLOTS from link i into the slot map: 0 or NRES_ESTATE. */
static int read_map(nres_sync_t *s, int i) {
  redisReply *r, *range, *owner;
  long long from, to, k;
  size_t j;
  int l;

  r = nres__sync_call(s, 2, (const char *[]) { "CLUSTER", "SLOTS" });
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
    if (r != NULL)
      freeReplyObject(r);
    return NRES_ESTATE;
  }
  put_back(s, i);   /* link_of may grow the table */
  memset(s->slot_link, 0xff, sizeof(s->slot_link));
  for (j = 0; j < r->elements; j++) {
    range = r->element[j];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER)
      continue;
    owner = range->element[2];
    if (owner->type != REDIS_REPLY_ARRAY || owner->elements < 2 ||
        owner->element[0]->type != REDIS_REPLY_STRING ||
        owner->element[1]->type != REDIS_REPLY_INTEGER)
      continue;
    from = range->element[0]->integer;
    to = range->element[1]->integer;
    l = link_of(s, owner->element[0]->str, owner->element[0]->len,
                (int) owner->element[1]->integer);
    if (l < 0 || from < 0 || to > 16383 || from > to)
      continue;
    for (k = from; k <= to; k++)
      s->slot_link[k] = (uint8_t) l;
  }
  freeReplyObject(r);
  use(s, i);
  return 0;
}

/* The slot map from the first node that gives it: the links known, then
 * the seeds. */
static int refresh(nres_sync_t *s) {
  int i, k, n = s->nlinks;

  for (k = 0; k < n + s->nseeds; k++) {
    i = k < n ? k
              : link_of(s, s->seed[k - n].host, strlen(s->seed[k - n].host),
                        s->seed[k - n].port);
    if (i < 0 || ready(s, i) != 0) {
      if (i >= 0)
        put_back(s, i);
      continue;
    }
    if (read_map(s, i) == 0) {
      put_back(s, i);
      s->map_ok = 1;
      return 0;
    }
    put_back(s, i);
  }
  nres__sync_say(s, "cluster: no node answered CLUSTER SLOTS (%d seeds)",
                 s->nseeds);
  return NRES_EAGAIN;
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": 1 (moved) or 2 (ask) and the
 * node's link, or 0. */
static int redirect(nres_sync_t *s, const redisReply *r, int *link) {
  const char *p, *colon;
  int kind;

  if (r->type != REDIS_REPLY_ERROR || r->str == NULL)
    return 0;
  if (strncmp(r->str, "MOVED ", 6) == 0)
    kind = 1;
  else if (strncmp(r->str, "ASK ", 4) == 0)
    kind = 2;
  else
    return 0;
  p = strrchr(r->str, ' ');   /* "<kind> <slot> <host>:<port>" */
  if (p == NULL || (colon = strrchr(p, ':')) == NULL)
    return 0;
  p++;
  *link = link_of(s, p, (size_t) (colon - p), atoi(colon + 1));
  return *link >= 0 ? kind : 0;
}

int nres__sync_cluster_exchange(nres_sync_t *s) {
  const char *argv[NRES__SYNC_ARGV_MAX];
  nres__sync_entry_t *e;
  redisReply *r;
  int i, l, argc, rc, kind, to, any = 0;

  if (!s->map_ok && refresh(s) != 0)
    return NRES_EAGAIN;
  for (l = 0; l < s->nlinks; l++) {
    for (i = 0, any = 0; i < s->n && !any; i++)
      any = s->e[i].used && s->slot_link[s->e[i].slot] == l;
    if (!any)
      continue;
    rc = ready(s, l);
    if (rc != 0) {
      put_back(s, l);
      return rc;
    }
    for (i = 0; i < s->n; i++) {
      e = &s->e[i];
      if (!e->used || s->slot_link[e->slot] != l)
        continue;
      argc = nres__sync_argv(s, e, argv);
      redisAppendCommandArgv(s->rc, argc, argv, NULL);
    }
    for (i = 0; i < s->n; i++) {
      e = &s->e[i];
      if (!e->used || s->slot_link[e->slot] != l)
        continue;
      if (nres__sync_get_reply(s, &e->reply) != REDIS_OK) {
        nres__sync_say(s, "cluster: %s:%d: %s", s->cur_host, s->cur_port,
                       s->rc->errstr[0] ? s->rc->errstr : "no answer");
        put_back(s, l);
        return NRES_EAGAIN;
      }
    }
    put_back(s, l);
  }
  /* Entries of slots no node serves, and redirections: one more hop. */
  for (i = 0; i < s->n; i++) {
    e = &s->e[i];
    if (!e->used)
      continue;
    if (s->slot_link[e->slot] == 0xff) {
      nres__sync_say(s, "cluster: no node serves slot %u (scope %s)",
                     (unsigned) e->slot, e->st.scope);
      s->map_ok = 0;
      return NRES_EAGAIN;
    }
    kind = redirect(s, e->reply, &to);
    if (kind == 0)
      continue;
    if (kind == 1)
      s->map_ok = 0;   /* asked again at the next round */
    freeReplyObject(e->reply);
    e->reply = NULL;
    rc = ready(s, to);
    if (rc != 0) {
      put_back(s, to);
      return rc;
    }
    if (kind == 2) {
      r = nres__sync_call(s, 1, (const char *[]) { "ASKING" });
      if (r != NULL)
        freeReplyObject(r);
    }
    argc = nres__sync_argv(s, e, argv);
    e->reply = nres__sync_call(s, argc, argv);
    put_back(s, to);
    if (e->reply == NULL)
      return NRES_EAGAIN;
  }
  return 0;
}

int nres__sync_cluster_ping(nres_sync_t *s) {
  redisReply *r;
  int i;

  for (i = 0; i < s->nlinks; i++) {
    if (s->link[i].rc == NULL)
      continue;
    use(s, i);
    r = nres__sync_call(s, 1, (const char *[]) { "PING" });
    put_back(s, i);
    if (r == NULL)
      return NRES_EAGAIN;
    freeReplyObject(r);
  }
  return 0;
}

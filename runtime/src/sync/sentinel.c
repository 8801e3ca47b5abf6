/* SPDX-License-Identifier: MIT */
/* sentinel.c - finding the primary through Redis Sentinel. With
 * `sentinels` and `master` set, every connection starts by asking the
 * Sentinels in turn for the master's address (SENTINEL
 * get-master-addr-by-name), and the connection then checks ROLE before
 * the first write: a node that is not a primary (a demoted one coming
 * back, a stale answer) is refused and the Sentinels are asked again after
 * the backoff. Every failed round drops the connection, so any error
 * (READONLY included) leads to asking again. One more connection, to the
 * first Sentinel that answers, is subscribed to +switch-master: the rounds
 * poll it without blocking, and a switch of our master drops the data
 * connection at once so the next round follows the new primary without
 * waiting for an error. Sentinels with a password of their own
 * (sentinel_password, sentinel_user) get AUTH on every connection; a
 * refused AUTH is said and that Sentinel skipped. Separate from conn.c:
 * addresses come from here, the data connection's credentials and the log
 * from there.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "sync_int.h"

int nres__sync_sentinel_parse(nres_sync_t *s, const char *list,
                              const char *master) {
  if (list == NULL || master == NULL || master[0] == '\0' ||
      strlen(master) >= sizeof(s->master))
    return NRES_EINVAL;
  strcpy(s->master, master);
  s->nsentinels = nres__sync_parse_addrs(list, s->sentinel,
                                         NRES__SYNC_SENTINELS_MAX);
  return s->nsentinels > 0 ? 0 : NRES_EINVAL;
}

/* An error reply from Sentinel i counted and kept in s->sentinel_err
 * (the first of a lookup: said with its "no primary" line); the reply
 * freed. */
static void refused(nres_sync_t *s, int i, const char *what, redisReply *r) {
  s->info.errors++;
  if (s->sentinel_err[0] == '\0')
    snprintf(s->sentinel_err, sizeof(s->sentinel_err), "; %s:%d: %s: %.120s",
             s->sentinel[i].host, s->sentinel[i].port, what, r->str);
  freeReplyObject(r);
}

static redisContext *open_sentinel(nres_sync_t *s, int i) {
  const char *argv[3];
  struct timeval tv;
  redisContext *c;
  redisReply *r;
  int n = 0;

  tv.tv_sec = (time_t) (s->cfg.timeout / NRES_SEC);
  tv.tv_usec = (suseconds_t) (s->cfg.timeout % NRES_SEC / 1000);
  c = redisConnectWithTimeout(s->sentinel[i].host, s->sentinel[i].port, tv);
  if (c == NULL || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
    if (c != NULL)
      redisFree(c);
    return NULL;
  }
  c->reader->fn = nres__sync_reply_functions();
  if (s->cfg.sentinel_password == NULL)
    return c;
  argv[n++] = "AUTH";
  if (s->cfg.sentinel_user != NULL)
    argv[n++] = s->cfg.sentinel_user;
  argv[n++] = s->cfg.sentinel_password;
  r = redisCommandArgv(c, n, argv, NULL);
  if (r == NULL || r->type == REDIS_REPLY_ERROR) {
    if (r != NULL)
      refused(s, i, "AUTH", r);
    redisFree(c);
    return NULL;
  }
  freeReplyObject(r);
  return c;
}

/* The subscription, made if there is none: from the first Sentinel that
 * takes it. */
static void subscribe(nres_sync_t *s) {
  redisReply *r;
  int i;

  for (i = 0; i < s->nsentinels && s->sub == NULL; i++) {
    s->sub = open_sentinel(s, i);
    if (s->sub == NULL)
      continue;
    r = redisCommand(s->sub, "SUBSCRIBE +switch-master");
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
      redisFree(s->sub);
      s->sub = NULL;
    }
    if (r != NULL)
      freeReplyObject(r);
  }
}

int nres__sync_sentinel_primary(nres_sync_t *s) {
  redisContext *c;
  redisReply *r;
  int i, found = 0;

  s->sentinel_err[0] = '\0';
  subscribe(s);
  for (i = 0; i < s->nsentinels && !found; i++) {
    c = open_sentinel(s, i);
    if (c == NULL)
      continue;
    r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", s->master);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {   /* NOAUTH... */
      refused(s, i, "SENTINEL get-master-addr-by-name", r);
      r = NULL;
    }
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len > 0 && r->element[0]->len < sizeof(s->cur_host)) {
      long port = strtol(r->element[1]->str, NULL, 10);

      if (port > 0 && port <= 65535) {
        memcpy(s->cur_host, r->element[0]->str, r->element[0]->len + 1);
        s->cur_port = (int) port;
        found = 1;
      }
    }
    if (r != NULL)
      freeReplyObject(r);
    redisFree(c);
  }
  if (!found) {
    nres__sync_say(s, "sentinels: no primary known for master \"%s\" (asked %d%s)",
                   s->master, s->nsentinels, s->sentinel_err);
    return NRES_EAGAIN;
  }
  return 0;
}

/* A connected node's ROLE: 0 if it says "master". */
int nres__sync_sentinel_role(nres_sync_t *s) {
  redisReply *r = nres__sync_call(s, 1, (const char *[]) { "ROLE" });
  int ok;

  if (r == NULL)
    return NRES_EAGAIN;
  ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
       r->element[0]->type == REDIS_REPLY_STRING &&
       strcmp(r->element[0]->str, "master") == 0;
  if (!ok)
    nres__sync_say(s, "%s:%d: ROLE is not master (%s): not written to; "
                   "asking the sentinels again", s->cur_host, s->cur_port,
                   r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                   r->element[0]->type == REDIS_REPLY_STRING
                       ? r->element[0]->str : "no role");
  freeReplyObject(r);
  return ok ? 0 : NRES_ESTATE;
}

/* Messages waiting on the subscription, read without blocking: 1 if one
 * says our master switched. A broken subscription is dropped (made again
 * at the next connection). */
int nres__sync_sentinel_switched(nres_sync_t *s) {
  struct pollfd pf;
  redisReply *r;
  int switched = 0;

  if (s->sub == NULL)
    return 0;
  pf.fd = s->sub->fd;
  pf.events = POLLIN;
  pf.revents = 0;
  if (poll(&pf, 1, 0) <= 0)
    return 0;
  if (redisBufferRead(s->sub) != REDIS_OK) {
    redisFree(s->sub);
    s->sub = NULL;
    return 0;
  }
  for (;;) {
    r = NULL;
    if (redisGetReplyFromReader(s->sub, (void **) &r) != REDIS_OK) {
      redisFree(s->sub);
      s->sub = NULL;
      break;
    }
    if (r == NULL)
      break;
    /* ["message", "+switch-master", "<name> <old ip> <old port> <new ip>
     * <new port>"] */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_STRING &&
        strncmp(r->element[2]->str, s->master, strlen(s->master)) == 0 &&
        r->element[2]->str[strlen(s->master)] == ' ') {
      nres__sync_say(s, "sentinel: +switch-master %.200s", r->element[2]->str);
      switched = 1;
    }
    freeReplyObject(r);
  }
  return switched;
}

void nres__sync_sentinel_close(nres_sync_t *s) {
  if (s->sub != NULL)
    redisFree(s->sub);
  s->sub = NULL;
}

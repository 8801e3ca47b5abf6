/* SPDX-License-Identifier: MIT */
/* redis_admin.h - what the Sentinel and Cluster tests ask of their
 * redis-servers from the outside: one command on a fresh connection (a
 * second's timeout), a node's EVALSHA count (INFO commandstats: did the
 * agent write there?), and a sleep in milliseconds. Header-only, with
 * hiredis (spec/c/test_sync_sentinel.c, test_sync_cluster.c).
 */
#ifndef NRES_SPEC_REDIS_ADMIN_H
#define NRES_SPEC_REDIS_ADMIN_H

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

static void sleep_ms(int ms) {
  struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* One command to 127.0.0.1:port: its reply, or NULL. */
static redisReply *ask(int port, const char *fmt, ...) {
  struct timeval tv = { 1, 0 };
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  redisReply *r = NULL;
  va_list ap;

  if (c == NULL || c->err) {
    if (c != NULL)
      redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  va_start(ap, fmt);
  r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

/* EVALSHA calls a node has run, -1 if it does not answer. */
static long evalsha_calls(int port) {
  redisReply *r = ask(port, "INFO commandstats");
  const char *p;
  long n = -1;

  if (r != NULL && r->type == REDIS_REPLY_STRING) {
    p = strstr(r->str, "cmdstat_evalsha:calls=");
    n = p != NULL ? atol(p + strlen("cmdstat_evalsha:calls=")) : 0;
  }
  if (r != NULL)
    freeReplyObject(r);
  return n;
}

#endif /* NRES_SPEC_REDIS_ADMIN_H */

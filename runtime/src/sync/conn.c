/* SPDX-License-Identifier: MIT */
/* conn.c - the fleet agent's connection to Redis and what it says about it.
 * A connection is a TCP address or a unix socket, a timeout on connect and
 * on every answer, AUTH (a password alone for requirepass, or an ACL user
 * and its password), SELECT, and the scripts loaded. Every error reply on
 * the way (NOAUTH, WRONGPASS, READONLY, NOSCRIPT, a refused SELECT) and
 * every lost connection is said in one line, once per change: an agent that
 * fails the same way every round says it once, and says when it is over.
 * Separate from the rounds (sync.c) because this is where credentials and
 * addresses live; the rounds only see a connection or none.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "sync_int.h"

static const char *const script_text[NRES__SCRIPTS] = {
  nres__sync_budget_lua, nres__sync_rate_lua, nres__sync_breaker_lua
};

static void emit(nres_sync_t *s, const char *line) {
  if (s->cfg.log != NULL)
    s->cfg.log(s->cfg.log_arg, line);
  else
    fprintf(stderr, "nres-sync: %s\n", line);
}

const char *nres__sync_where(const nres_sync_t *s, char *buf, size_t cap) {
  if (s->cfg.unix_path != NULL)
    snprintf(buf, cap, "%s", s->cfg.unix_path);
  else
    snprintf(buf, cap, "%s:%d", s->cur_host, s->cur_port);
  return buf;
}

void nres__sync_say(nres_sync_t *s, const char *fmt, ...) {
  char line[NRES__SYNC_LINE_MAX];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  for (char *c = line; *c != '\0'; c++)   /* server text: one line */
    if ((unsigned char) *c < 32 || *c == 127)
      *c = '?';
  if (strcmp(line, s->info.error) == 0)
    return;
  memcpy(s->info.error, line, sizeof(line));
  emit(s, line);
}

void nres__sync_said_ok(nres_sync_t *s) {
  char line[NRES__SYNC_LINE_MAX], at[300];

  if (s->info.error[0] == '\0')
    return;
  s->info.error[0] = '\0';
  snprintf(line, sizeof(line), "%s: synced again",
           nres__sync_where(s, at, sizeof(at)));
  emit(s, line);
}

int nres__sync_read_secret(const char *field, const char *path, char *out,
                           size_t cap, char *why, size_t wcap) {
  FILE *f = fopen(path, "r");
  size_t n;

  if (f == NULL) {
    snprintf(why, wcap, "%s %s: %s", field, path, strerror(errno));
    return -1;
  }
  if (fgets(out, (int) cap, f) == NULL)
    out[0] = '\0';
  fclose(f);
  n = strcspn(out, "\r\n");
  if (n == cap - 1 && out[n] == '\0') {
    snprintf(why, wcap, "%s %s: expected a line of at most %zu bytes", field,
             path, cap - 2);
    return -1;
  }
  out[n] = '\0';
  if (n == 0) {
    snprintf(why, wcap, "%s %s: expected a password on its first line, got "
             "an empty line", field, path);
    return -1;
  }
  return 0;
}

int nres__sync_parse_addrs(const char *list, nres__sync_addr_t *out, int max) {
  const char *p = list, *comma, *colon;
  size_t len;
  char *end;
  long port;
  int n = 0;

  while (p != NULL && *p != '\0') {
    comma = strchr(p, ',');
    len = comma != NULL ? (size_t) (comma - p) : strlen(p);
    colon = memrchr(p, ':', len);
    if (colon == NULL || colon == p ||
        (size_t) (colon - p) >= sizeof(out[0].host) || n == max)
      return -1;
    port = strtol(colon + 1, &end, 10);
    if (end != p + len || port <= 0 || port > 65535)
      return -1;
    memcpy(out[n].host, p, (size_t) (colon - p));
    out[n].host[colon - p] = '\0';
    out[n].port = (int) port;
    n++;
    p += len;
    if (*p == ',')
      p++;
  }
  return n;
}

void nres__sync_drop(nres_sync_t *s) {
  nres__sync_tls_close(s);
  if (s->rc != NULL)
    redisFree(s->rc);
  s->rc = NULL;
}


/* One command's answer: 0 if it is not an error reply. */
static int command(nres_sync_t *s, const char *what, int argc,
                   const char **argv, redisReply **out) {
  char at[300];
  redisReply *r;

  r = nres__sync_call(s, argc, argv);
  if (r == NULL) {
    nres__sync_say(s, "%s: %s: %s", nres__sync_where(s, at, sizeof(at)), what,
                   s->rc->errstr[0] ? s->rc->errstr : "no answer");
    return NRES_EAGAIN;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    s->info.errors++;
    nres__sync_say(s, "%s: %s: %.200s (local-only until it works)",
                   nres__sync_where(s, at, sizeof(at)), what, r->str);
    freeReplyObject(r);
    return NRES_ESTATE;
  }
  if (out != NULL)
    *out = r;
  else
    freeReplyObject(r);
  return 0;
}

static int load_scripts(nres_sync_t *s) {
  const char *argv[3] = { "SCRIPT", "LOAD", NULL };
  char at[300];
  redisReply *r;
  int i, rc;

  for (i = 0; i < NRES__SCRIPTS; i++) {
    argv[2] = script_text[i];
    rc = command(s, "SCRIPT LOAD", 3, argv, &r);
    if (rc != 0)
      return rc;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
      s->info.errors++;
      nres__sync_say(s, "%s: SCRIPT LOAD: expected a 40-byte SHA1, got %s",
                     nres__sync_where(s, at, sizeof(at)),
                     r->type == REDIS_REPLY_STRING ? "another string" : "no string");
      freeReplyObject(r);
      return NRES_ESTATE;
    }
    memcpy(s->sha[i], r->str, 41);
    freeReplyObject(r);
  }
  return 0;
}

static struct timeval tv_of(nres_time_t d) {
  struct timeval tv;

  tv.tv_sec = (time_t) (d / NRES_SEC);
  tv.tv_usec = (suseconds_t) (d % NRES_SEC / 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0)
    tv.tv_usec = 1000;
  return tv;
}

int nres__sync_connect(nres_sync_t *s) {
  struct timeval tv = tv_of(s->cfg.timeout);
  const char *argv[3];
  char at[300], db[16];
  int rc;

  if (s->nsentinels > 0 && nres__sync_sentinel_primary(s) != 0)
    return NRES_EAGAIN;
  if (s->cfg.unix_path != NULL)
    s->rc = redisConnectUnixWithTimeout(s->cfg.unix_path, tv);
  else
    s->rc = redisConnectWithTimeout(s->cur_host, s->cur_port, tv);
  if (s->rc == NULL || s->rc->err) {
    nres__sync_say(s, "%s: cannot connect: %s", nres__sync_where(s, at, sizeof(at)),
                   s->rc != NULL ? s->rc->errstr : "out of memory");
    return NRES_EAGAIN;
  }
  if (redisSetTimeout(s->rc, tv) != REDIS_OK)
    return NRES_EAGAIN;
  s->rc->reader->fn = nres__sync_reply_functions();   /* bounded arrays */
  if (s->tls_ctx != NULL) {
    rc = nres__sync_tls_start(s);
    if (rc != 0)
      return rc;
  }
  if (s->cfg.password != NULL) {
    argv[0] = "AUTH";
    if (s->cfg.user != NULL) {
      argv[1] = s->cfg.user;
      argv[2] = s->cfg.password;
    } else {
      argv[1] = s->cfg.password;
    }
    rc = command(s, "AUTH", s->cfg.user != NULL ? 3 : 2, argv, NULL);
    if (rc != 0)
      return rc;
  }
  /* Through Sentinel: written to only if it says it is the primary. */
  if (s->nsentinels > 0) {
    rc = nres__sync_sentinel_role(s);
    if (rc != 0)
      return rc;
  }
  if (s->cfg.db != 0) {
    snprintf(db, sizeof(db), "%d", s->cfg.db);
    argv[0] = "SELECT";
    argv[1] = db;
    rc = command(s, "SELECT", 2, argv, NULL);
    if (rc != 0)
      return rc;
  }
  rc = load_scripts(s);
  if (rc != 0)
    return rc;
  s->info.connects++;
  return 0;
}

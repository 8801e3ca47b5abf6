/* SPDX-License-Identifier: MIT */
/* reply.c - the fleet agent's scripts' answers, checked before anything is
 * applied. A Redis reply is input like a file: a proxy, a Redis-compatible
 * server or a foreign key under the same name can answer any shape and any
 * value. Each kind's reply is read into plain figures only when every
 * element has the type and the range the script promises (budget shares
 * within [0, capacity], a rate quota within [0, fleet rate], finite
 * numbers, host counts >= 1); otherwise the round fails with one line
 * naming the element, what was expected and the reply's shape. Separate
 * from the agent so the libFuzzer target (spec/fuzz/fuzz_sync_reply.c)
 * reaches it without a server.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "sync_int.h"

#define HOSTS_MAX 10000000LL   /* far above any fleet; a count beyond is junk */

static const char *type_name(int type) {
  switch (type) {
  case REDIS_REPLY_STRING: return "bulk string";
  case REDIS_REPLY_ARRAY: return "array";
  case REDIS_REPLY_INTEGER: return "integer";
  case REDIS_REPLY_NIL: return "nil";
  case REDIS_REPLY_STATUS: return "status";
  case REDIS_REPLY_ERROR: return "error";
  default: return "unknown type";
  }
}

void nres__sync_reply_shape(const redisReply *r, char *out, size_t cap) {
  size_t n, i;

  if (cap == 0)
    return;
  if (r == NULL) {
    snprintf(out, cap, "none");
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY) {
    snprintf(out, cap, "%s", type_name(r->type));
    return;
  }
  n = (size_t) snprintf(out, cap, "array[%zu]", r->elements);
  for (i = 0; i < r->elements && i < 8 && n < cap; i++)
    n += (size_t) snprintf(out + n, cap - n, "%s%s", i == 0 ? ": " : ", ",
                           r->element[i] == NULL
                               ? "none" : type_name(r->element[i]->type));
  if (r->elements > 8 && n < cap)
    snprintf(out + n, cap - n, ", ...");
}

/* why: "<kind> reply element <i> (<name>): expected <what>, got <got>;
 * reply <shape>". Returns NRES_ESTATE. */
static int refuse(const redisReply *r, char *why, size_t cap, const char *kind,
                  int i, const char *name, const char *what,
                  const char *got_fmt, ...) __attribute__((format(printf, 8, 9)));
static int refuse(const redisReply *r, char *why, size_t cap, const char *kind,
                  int i, const char *name, const char *what,
                  const char *got_fmt, ...) {
  char got[64], shape[160];
  va_list ap;

  va_start(ap, got_fmt);
  vsnprintf(got, sizeof(got), got_fmt, ap);
  va_end(ap);
  for (char *c = got; *c != '\0'; c++)   /* the reply's bytes: one line */
    if ((unsigned char) *c < 32 || *c == 127)
      *c = '?';
  nres__sync_reply_shape(r, shape, sizeof(shape));
  if (i < 0)
    snprintf(why, cap, "%s reply: expected %s, got %s", kind, what, shape);
  else
    snprintf(why, cap, "%s reply element %d (%s): expected %s, got %s; reply %s",
             kind, i, name, what, got, shape);
  return NRES_ESTATE;
}

static int is_array(const redisReply *r, size_t n) {
  size_t i;

  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != n)
    return 0;
  for (i = 0; i < n; i++)
    if (r->element[i] == NULL)
      return 0;
  return 1;
}

/* Element i an integer within [lo, hi]. */
static int integer(const redisReply *r, char *why, size_t cap,
                   const char *kind, int i, const char *name, long long lo,
                   long long hi, long long *out) {
  const redisReply *e = r->element[i];
  char what[96];

  snprintf(what, sizeof(what), "an integer from %lld to %lld", lo, hi);
  if (e->type != REDIS_REPLY_INTEGER)
    return refuse(r, why, cap, kind, i, name, what, "%s", type_name(e->type));
  if (e->integer < lo || e->integer > hi)
    return refuse(r, why, cap, kind, i, name, what, "%lld", e->integer);
  *out = e->integer;
  return 0;
}

/* Element i a bulk string that is, whole, a finite number within [lo, hi]. */
static int number(const redisReply *r, char *why, size_t cap,
                  const char *kind, int i, const char *name, double lo,
                  double hi, double *out) {
  const redisReply *e = r->element[i];
  char what[96], text[48], *end;
  double v;

  snprintf(what, sizeof(what), "a number from %g to %g as a bulk string", lo, hi);
  if (e->type != REDIS_REPLY_STRING || e->str == NULL)
    return refuse(r, why, cap, kind, i, name, what, "%s", type_name(e->type));
  if (e->len == 0 || e->len >= sizeof(text))
    return refuse(r, why, cap, kind, i, name, what, "a string of %zu bytes",
                  e->len);
  memcpy(text, e->str, e->len);   /* not trusted to end with a NUL */
  text[e->len] = '\0';
  errno = 0;
  v = strtod(text, &end);
  if (end != text + e->len || !isfinite(v) || !(v >= lo && v <= hi))
    return refuse(r, why, cap, kind, i, name, what, "\"%.24s\"", text);
  *out = v;
  return 0;
}

/* { share, level, hosts, weight }: integers in micro-tokens, weight a
 * string. */
int nres__sync_budget_reply(const redisReply *r, int64_t capacity,
                            nres__budget_reply_t *out, char *why, size_t cap) {
  long long v;

  if (!is_array(r, 4))
    return refuse(r, why, cap, "budget", -1, NULL,
                  "array[4]: integer, integer, integer, bulk string", "%s", "");
  if (integer(r, why, cap, "budget", 0, "share", 0, capacity, &v) != 0)
    return NRES_ESTATE;
  out->share = v;
  if (integer(r, why, cap, "budget", 1, "level", -capacity, capacity, &v) != 0)
    return NRES_ESTATE;
  out->level = v;
  if (integer(r, why, cap, "budget", 2, "hosts", 1, HOSTS_MAX, &v) != 0)
    return NRES_ESTATE;
  out->hosts = (uint32_t) v;
  return number(r, why, cap, "budget", 3, "weight", 0, 1, &out->weight);
}

/* { quota, sum, hosts, now_us }. A quota of 0 is the script's answer to a
 * host with no demand in a fleet asking for more than the rate; the agent
 * sets it to a thousandth of the rate. */
int nres__sync_rate_reply(const redisReply *r, double fleet_rate,
                          nres__rate_reply_t *out, char *why, size_t cap) {
  long long v;

  if (!is_array(r, 4))
    return refuse(r, why, cap, "rate", -1, NULL,
                  "array[4]: bulk string, bulk string, integer, integer", "%s", "");
  /* The script rounds to 6 decimals: a quota of the whole rate may read a
   * hair above it. */
  if (number(r, why, cap, "rate", 0, "quota", 0, fleet_rate * (1 + 1e-9) + 1e-6,
             &out->quota) != 0)
    return NRES_ESTATE;
  if (out->quota > fleet_rate)
    out->quota = fleet_rate;
  if (number(r, why, cap, "rate", 1, "demand", 0, 1e15, &out->sum) != 0)
    return NRES_ESTATE;
  if (integer(r, why, cap, "rate", 2, "hosts", 1, HOSTS_MAX, &v) != 0)
    return NRES_ESTATE;
  out->hosts = (uint32_t) v;
  return integer(r, why, cap, "rate", 3, "now", 0, INT64_MAX / 2, &v);
}

/* { state, until_ms, me_prober, prober_live, now_ms, voters, open,
 * lapsed }. The
 * break left (until - now) is at most `max_ms`, the local breaker's
 * longest break and the claim's lease. */
int nres__sync_breaker_reply(const redisReply *r, int64_t max_ms,
                             nres__breaker_reply_t *out, char *why,
                             size_t cap) {
  const redisReply *s;
  long long v;

  if (!is_array(r, 8))
    return refuse(r, why, cap, "breaker", -1, NULL,
                  "array[8]: bulk string, then 7 integers", "%s", "");
  s = r->element[0];
  if (s->type != REDIS_REPLY_STRING)
    return refuse(r, why, cap, "breaker", 0, "state",
                  "\"open\", \"closed\" or \"\"", "%s", type_name(s->type));
  if (s->len == 4 && memcmp(s->str, "open", 4) == 0)
    out->state = 1;
  else if (s->len == 6 && memcmp(s->str, "closed", 6) == 0)
    out->state = 2;
  else if (s->len == 0)
    out->state = 0;
  else
    return refuse(r, why, cap, "breaker", 0, "state",
                  "\"open\", \"closed\" or \"\"", "\"%.*s\"",
                  (int) (s->len > 24 ? 24 : s->len), s->str);
  if (integer(r, why, cap, "breaker", 4, "now", 0, INT64_MAX / 4, &v) != 0)
    return NRES_ESTATE;
  out->now_ms = v;
  if (integer(r, why, cap, "breaker", 1, "until", 0, out->now_ms + max_ms, &v) != 0)
    return NRES_ESTATE;
  out->until_ms = v;
  if (integer(r, why, cap, "breaker", 2, "prober", 0, 1, &v) != 0)
    return NRES_ESTATE;
  out->prober = (int) v;
  if (integer(r, why, cap, "breaker", 3, "live", 0, 1, &v) != 0)
    return NRES_ESTATE;
  out->live = (int) v;
  if (integer(r, why, cap, "breaker", 5, "voters", 0, HOSTS_MAX, &v) != 0)
    return NRES_ESTATE;
  out->voters = (uint32_t) v;
  if (integer(r, why, cap, "breaker", 6, "open", 0, out->voters, &v) != 0)
    return NRES_ESTATE;
  out->open = (uint32_t) v;
  if (integer(r, why, cap, "breaker", 7, "lapsed", 0, out->now_ms, &v) != 0)
    return NRES_ESTATE;
  out->lapsed_ms = v;
  return 0;
}

/* ------------------------------------------------- bounded reply reader */

/* hiredis 0.14's reader allocates an array of whatever size the server
 * announces ("*510000000" asks for 4 GB of pointers) and has no limit of
 * its own. The agent's largest reply is CLUSTER SLOTS (an element per
 * range of slots), so its connection reads with these functions,
 * hiredis's own except that an
 * array of more than NRES__SYNC_REPLY_ELEMENTS_MAX elements is refused
 * (the reader fails, the round fails). The objects are redisReply as
 * hiredis makes them, freed by freeReplyObject. */
static void *link_child(const redisReadTask *task, redisReply *r) {
  redisReply *parent;

  if (task->parent != NULL) {
    parent = task->parent->obj;
    parent->element[task->idx] = r;
  }
  return r;
}

static redisReply *new_reply(int type) {
  redisReply *r = calloc(1, sizeof(*r));

  if (r != NULL)
    r->type = type;
  return r;
}

static void *make_string(const redisReadTask *task, char *str, size_t len) {
  redisReply *r = new_reply(task->type);

  if (r == NULL)
    return NULL;
  r->str = malloc(len + 1);
  if (r->str == NULL) {
    free(r);
    return NULL;
  }
  memcpy(r->str, str, len);
  r->str[len] = '\0';
  r->len = len;
  return link_child(task, r);
}

static void *make_array(const redisReadTask *task, int elements) {
  redisReply *r;

  if (elements > NRES__SYNC_REPLY_ELEMENTS_MAX)
    return NULL;   /* the reader reports it and gives up */
  r = new_reply(REDIS_REPLY_ARRAY);
  if (r == NULL)
    return NULL;
  if (elements > 0) {
    r->element = calloc((size_t) elements, sizeof(redisReply *));
    if (r->element == NULL) {
      free(r);
      return NULL;
    }
  }
  r->elements = (size_t) (elements > 0 ? elements : 0);
  return link_child(task, r);
}

static void *make_integer(const redisReadTask *task, long long value) {
  redisReply *r = new_reply(REDIS_REPLY_INTEGER);

  if (r == NULL)
    return NULL;
  r->integer = value;
  return link_child(task, r);
}

static void *make_nil(const redisReadTask *task) {
  redisReply *r = new_reply(REDIS_REPLY_NIL);

  return r == NULL ? NULL : link_child(task, r);
}

static redisReplyObjectFunctions bounded = {
  make_string, make_array, make_integer, make_nil, freeReplyObject
};

redisReplyObjectFunctions *nres__sync_reply_functions(void) {
  return &bounded;
}

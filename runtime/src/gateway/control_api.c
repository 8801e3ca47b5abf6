/* SPDX-License-Identifier: MIT */
/* control_api.c - the control API's operations, written once for both
 * doors: the Lua handler (gw.control, gw.apply: lua/nres/ngx/control.lua
 * calls these through the FFI) and the nginx module's nres_control. An
 * operation is one JSON object (json.c reads it); it is checked fully,
 * then applied, so a refused one changes nothing; the answer is JSON (the
 * result with `changed`, or `error`) and `changed` is also the text of
 * the log line each adapter writes. The targets are found by name in the
 * registries: upstreams and limiters (registry.c) and scopes (here).
 * The changes themselves are control.c's and the breakers'. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres/gateway.h"
#include "internal.h"
#include "json.h"
#include "keytext.h"
#include "registry.h"

struct nres_gw_scope_s {
  nres_gw_scope_t *next;
  char name[NRES_GW_NAME_MAX + 1];
  nres_shm_t *table;
  nres_gw_control_t *control;
  int breaker;
};

static nres_gw_scope_t *scopes;

nres_gw_scope_t *nres_gw_scope_new(const char *name, nres_shm_t *table,
                                   nres_gw_control_t *control, int breaker) {
  if (name == NULL || name[0] == '\0' || strlen(name) > NRES_GW_NAME_MAX || table == NULL)
    return NULL;
  nres_gw_scope_t *s = nres__calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  strcpy(s->name, name);
  s->table = table;
  s->control = control;
  s->breaker = breaker != 0;
  return s;
}

void nres_gw_scope_register(nres_gw_scope_t *s) {
  for (nres_gw_scope_t **at = &scopes; *at != NULL; at = &(*at)->next) {
    if (strcmp((*at)->name, s->name) == 0) {
      s->next = (*at)->next;
      (*at)->next = NULL;
      *at = s;
      return;
    }
  }
  s->next = scopes;
  scopes = s;
}

void nres_gw_scope_free(nres_gw_scope_t *s) {
  if (s == NULL)
    return;
  for (nres_gw_scope_t **at = &scopes; *at != NULL; at = &(*at)->next) {
    if (*at == s) {
      *at = s->next;
      break;
    }
  }
  nres__free(s);
}

void nres__gw_scopes_clear(void) {
  while (scopes != NULL) {
    nres_gw_scope_t *next = scopes->next;
    scopes->next = NULL;
    scopes = next;
  }
}

static nres_gw_scope_t *scope_find(const char *name) {
  for (nres_gw_scope_t *s = scopes; s != NULL; s = s->next)
    if (strcmp(s->name, name) == 0)
      return s;
  return NULL;
}

static nres_gw_scope_t *scope_of(nres_shm_t *table) {
  for (nres_gw_scope_t *s = scopes; s != NULL; s = s->next)
    if (s->table == table)
      return s;
  return NULL;
}

/* ------------------------------------------------------------- output */

/* Text built into a caller's buffer, cut (never overrun) when full. */
typedef struct {
  char *p;
  size_t cap, len;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->len < o->cap ? o->p + o->len : NULL,
                    o->len < o->cap ? o->cap - o->len : 0, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->len += (size_t)n;
}

/* The longest prefix of s (n bytes) that is valid UTF-8: a text cut to a
 * buffer's size may end inside a character. */
static size_t utf8_prefix(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  size_t k;
  while (p < end && (k = nres__utf8_len(p, end)) > 0)
    p += k;
  return (size_t)(p - (const unsigned char *)s);
}

/* s (n bytes of UTF-8 text, maybe cut) as a JSON string. */
static void put_json(out_t *o, const char *s, size_t n) {
  n = utf8_prefix(s, n);
  put(o, "\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      put(o, "\\%c", c);
    else if (c < 0x20)
      put(o, "\\u%04x", c);
    else
      put(o, "%c", c);
  }
  put(o, "\"");
}

static void put_num(out_t *o, double v) {
  put(o, "%.14g", v);
}

/* ------------------------------------------------------------ checking */

#define REASON_MAX 1024   /* a refusal's reason, cut past it */

typedef struct {
  const nres__json_object_t *op;
  nres_time_t now;
  out_t what;                   /* the change, or the refusal's reason */
  out_t res;                    /* the result's fields, JSON */
  int status;
} ctx_t;

static const nres__json_field_t *field(ctx_t *c, const char *name) {
  return nres__json_get(c->op, name);
}

/* A field's value as the answers show what was given (as the Lua side
 * did: a string quoted, as text; a number; true or false; nil). */
static void put_got(out_t *o, const nres__json_field_t *f) {
  char text[256];
  if (f == NULL) {
    put(o, "nil");
  } else if (f->type == NRES__JSON_STRING) {
    size_t n = nres__key_text(f->str, f->len, NRES__KEY_TEXT, text, sizeof text);
    n = utf8_prefix(text, n < sizeof text ? n : sizeof text - 1);
    put(o, "\"");
    for (size_t i = 0; i < n; i++)
      put(o, text[i] == '"' ? "\\\"" : "%c", text[i]);
    put(o, "\"");
  } else if (f->type == NRES__JSON_NUMBER) {
    put_num(o, f->num);
  } else {
    put(o, f->on ? "true" : "false");
  }
}

/* Refuse with `status`: "FIELD: expected EXPECTED, got GOT". */
static int refuse(ctx_t *c, int status, const char *name, const nres__json_field_t *got,
                  const char *expected, ...)
    __attribute__((format(printf, 5, 6)));

static int refuse(ctx_t *c, int status, const char *name, const nres__json_field_t *got,
                  const char *expected, ...) {
  va_list ap;
  c->what.len = 0;
  put(&c->what, "%s: expected ", name);
  va_start(ap, expected);
  int n = vsnprintf(c->what.len < c->what.cap ? c->what.p + c->what.len : NULL,
                    c->what.len < c->what.cap ? c->what.cap - c->what.len : 0, expected, ap);
  va_end(ap);
  if (n > 0)
    c->what.len += (size_t)n;
  put(&c->what, ", got ");
  put_got(&c->what, got);
  c->status = status;
  return status;
}

static const char *str(const nres__json_field_t *f) {
  return f != NULL && f->type == NRES__JSON_STRING ? f->str : NULL;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "a, b, c" of names, sorted, or "none declared", into buf. */
static const char *name_list(const char **names, size_t n, char *buf, size_t cap) {
  out_t o = { buf, cap, 0 };
  qsort(names, n, sizeof *names, cmp_names);
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++)
    put(&o, "%s%s", i ? ", " : "", names[i]);
  if (n == 0)
    put(&o, "none declared");
  return buf;
}

#define NAMES_MAX 64   /* names listed in a refusal at most */

static const char *upstream_names(char *buf, size_t cap) {
  const char *names[NAMES_MAX];
  size_t n = 0;
  for (nres_gw_upstream_t *u = nres__gw_upstreams(); u != NULL && n < NAMES_MAX; u = u->next)
    names[n++] = u->name;
  return name_list(names, n, buf, cap);
}

static const char *scope_names(char *buf, size_t cap) {
  const char *names[NAMES_MAX];
  size_t n = 0;
  for (nres_gw_scope_t *s = scopes; s != NULL && n < NAMES_MAX; s = s->next)
    names[n++] = s->name;
  return name_list(names, n, buf, cap);
}

static const char *limiter_names(char *buf, size_t cap) {
  const char *names[NAMES_MAX];
  size_t n = 0;
  for (nres_gw_limiter_t *l = nres__gw_limiters(); l != NULL && n < NAMES_MAX; l = l->next)
    names[n++] = l->name;
  return name_list(names, n, buf, cap);
}

static const char *state_name(const nres_breaker_t *b, nres_time_t now) {
  return nres_breaker_state_name(nres_breaker_state(b, now));
}

static int flag(const nres_gw_control_t *c, uint32_t f) {
  return c != NULL && (nres__load(&c->flags) & f) != 0;
}

/* --------------------------------------------------------- operations */

/* The slot of `key` in scope s: its bytes, or its text as the status
 * shows it; -1 if the scope holds no such key now. */
static int find_key(nres_gw_scope_t *s, const char *key, size_t len) {
  const nres_shm_config_t *cfg = nres_shm_config(s->table);
  char k[NRES_SHM_KEY_MAX], text[4 * NRES_SHM_KEY_MAX + 1];
  for (uint32_t i = 0; cfg != NULL && i < cfg->slots; i++) {
    int n = nres_shm_key(s->table, i, k, sizeof k, NULL, NULL);
    if (n < 0 || (size_t)n > sizeof k)
      continue;
    if ((size_t)n == len && memcmp(k, key, len) == 0)
      return (int)i;
    size_t t = nres__key_text(k, (size_t)n, NRES__KEY_ANY, text, sizeof text);
    if (t == len && memcmp(text, key, len) == 0)
      return (int)i;
  }
  return -1;
}

static int breaker_op(ctx_t *c, const char *action) {
  const nres__json_field_t *fs = field(c, "scope"), *fk = field(c, "key"),
                           *fu = field(c, "upstream");
  nres__json_field_t uscope = { 0 }, ukey = { 0 };
  char names[REASON_MAX], text[4 * NRES_SHM_KEY_MAX + 1];
  const char *sname = str(fs), *key = str(fk);
  size_t klen = fk != NULL ? fk->len : 0;
  if (fu != NULL) {
    if (fs != NULL || fk != NULL)
      return refuse(c, 400, "upstream", fu, "either upstream or scope and key");
    nres_gw_upstream_t *u = str(fu) ? nres_gw_find(fu->str, fu->len) : NULL;
    if (u == NULL)
      return refuse(c, 404, "upstream", fu, "one of %s", upstream_names(names, sizeof names));
    nres_gw_scope_t *us = scope_of(u->scope);
    sname = us != NULL ? us->name : NULL;
    key = u->key;
    klen = strlen(u->key);
    /* refusals name the upstream's scope and key, as given */
    uscope.type = ukey.type = NRES__JSON_STRING;
    uscope.str = sname != NULL ? sname : "";
    uscope.len = strlen(uscope.str);
    ukey.str = key;
    ukey.len = klen;
    fs = &uscope;
    fk = &ukey;
  }
  nres_gw_scope_t *s = sname != NULL ? scope_find(sname) : NULL;
  if (s == NULL)
    return refuse(c, 404, "scope", fs, "one of %s", scope_names(names, sizeof names));
  if (!s->breaker)
    return refuse(c, 400, "scope", fs, "a scope whose policy has a breaker");
  if (key == NULL)
    return refuse(c, 400, "key", fk, "a key of the scope (a string)");
  int i = find_key(s, key, klen);
  if (i < 0)
    return refuse(c, 404, "key", fk, "a key scope %s holds now", s->name);
  nres_breaker_t *b = &nres_shm_slot(s->table, (uint32_t)i)->breaker;
  const char *before = state_name(b, c->now);
  if (strcmp(action, "isolate") == 0)
    nres_breaker_isolate(b);
  else if (strcmp(action, "close") != 0 || strcmp(before, "closed") != 0)
    nres_breaker_reset(b);
  const char *after = state_name(b, c->now);
  nres__key_text(key, klen, NRES__KEY_ANY, text, sizeof text);
  put(&c->what, "scope %s key %s: breaker %s (was %s, now %s)", s->name, text, action, before,
      after);
  put(&c->res, "\"state\":\"%s\",\"was\":\"%s\"", after, before);
  return 200;
}

/* Upstream op.upstream, its view brought up to the membership; or a
 * refusal (NULL). */
static nres_gw_upstream_t *upstream_target(ctx_t *c) {
  const nres__json_field_t *fu = field(c, "upstream");
  char names[REASON_MAX];
  nres_gw_upstream_t *u = str(fu) ? nres_gw_find(fu->str, fu->len) : NULL;
  if (u == NULL) {
    refuse(c, 404, "upstream", fu, "one of %s", upstream_names(names, sizeof names));
    return NULL;
  }
  nres_gw_sync(u, c->now);
  return u;
}

/* "a, b, c": the peers of u that are members now, or "none". */
static const char *member_names(nres_gw_upstream_t *u, char *buf, size_t cap) {
  out_t o = { buf, cap, 0 };
  buf[0] = '\0';
  for (uint32_t i = 0, k = 0; i < u->n && o.len < cap; i++)
    if (!u->peer[i].removed)
      put(&o, "%s%s", k++ ? ", " : "", u->peer[i].name);
  if (o.len == 0)
    put(&o, "none");
  return buf;
}

/* Upstream and peer of op (a member now), or a refusal (NULL). */
static nres_gw_upstream_t *peer_target(ctx_t *c, uint32_t *peer) {
  const nres__json_field_t *fp = field(c, "peer");
  char names[REASON_MAX];
  nres_gw_upstream_t *u = upstream_target(c);
  if (u == NULL)
    return NULL;
  for (uint32_t i = 0; str(fp) != NULL && i < u->n; i++) {
    if (!u->peer[i].removed && strcmp(u->peer[i].name, fp->str) == 0 &&
        strlen(fp->str) == fp->len) {
      *peer = i;
      return u;
    }
  }
  refuse(c, 404, "peer", fp, "one of %s", member_names(u, names, sizeof names));
  return NULL;
}

static int peer_op(ctx_t *c, const char *action) {
  uint32_t i = 0;
  nres_gw_upstream_t *u = peer_target(c, &i);
  if (u == NULL)
    return c->status;
  nres_gw_peer_t *p = &u->peer[i];
  if (strcmp(action, "drain") == 0 && !flag(p->control, NRES_GW_DRAIN)) {
    uint32_t left = 0;
    for (uint32_t j = 0; j < u->n; j++)
      left += j != i && !u->peer[j].removed && !flag(u->peer[j].control, NRES_GW_DRAIN);
    if (left == 0)
      return refuse(c, 409, "peer", field(c, "peer"),
                    "a peer whose upstream keeps another one not drained");
  }
  const char *before = state_name(p->breaker, c->now);
  if (strcmp(action, "eject") == 0) {
    nres_breaker_isolate(p->breaker);
  } else if (strcmp(action, "drain") == 0) {
    nres_gw_control_flag(p->control, NRES_GW_DRAIN, 1);
  } else {
    nres_gw_control_flag(p->control, NRES_GW_DRAIN, 0);
    if (strcmp(before, "closed") != 0)
      nres_breaker_reset(p->breaker);
  }
  const char *after = state_name(p->breaker, c->now);
  int drained = flag(p->control, NRES_GW_DRAIN);
  put(&c->what, "upstream %s peer %s: %s (was %s, now %s%s)", u->name, p->name,
      action[0] == 'e' ? "ejected" : action[0] == 'd' ? "drained" : "restored", before, after,
      drained ? ", drained" : "");
  put(&c->res, "\"state\":\"%s\",\"was\":\"%s\",\"drained\":%s", after, before,
      drained ? "true" : "false");
  return 200;
}

static int weight_op(ctx_t *c) {
  uint32_t i = 0;
  nres_gw_upstream_t *u = peer_target(c, &i);
  if (u == NULL)
    return c->status;
  const nres__json_field_t *fw = field(c, "weight");
  if (fw == NULL || fw->type != NRES__JSON_NUMBER || !(fw->num >= 1 && fw->num <= 10000) ||
      fw->num != floor(fw->num))
    return refuse(c, 400, "weight", fw, "an integer 1..10000");
  nres_gw_peer_t *p = &u->peer[i];
  if (p->control == NULL)
    return refuse(c, 400, "peer", field(c, "peer"), "a peer with a control block");
  uint32_t now_w = nres__load(&p->control->weight), w = (uint32_t)fw->num;
  uint32_t was = now_w != 0 ? now_w : p->declared;
  nres__store(&p->control->weight, w);   /* each worker reads it whole */
  put(&c->what, "upstream %s peer %s: weight %u (was %u)", u->name, p->name, w, was);
  put(&c->res, "\"weight\":%u,\"was\":%u", w, was);
  return 200;
}

/* A refusal for a membership change's error rc (nres_gw_member_*). */
static int member_refusal(ctx_t *c, nres_gw_upstream_t *u, int rc) {
  const nres__json_field_t *fp = field(c, "peer"), *fu = field(c, "upstream");
  char names[REASON_MAX];
  switch (rc) {
  case NRES_GW_MEMBER_DUPLICATE:
    return refuse(c, 409, "peer", fp, "a peer not in the upstream yet");
  case NRES_GW_MEMBER_UNKNOWN:
    return refuse(c, 404, "peer", fp, "one of %s", member_names(u, names, sizeof names));
  case NRES_GW_MEMBER_LAST_PRIMARY:
    return refuse(c, 409, "peer", fp, "a peer whose upstream keeps another primary peer that"
                  " is not drained");
  case NRES_GW_MEMBER_FULL: {
    uint32_t members = 0;
    for (uint32_t s = 0; s < u->members->slots; s++)
      members += nres__load(&nres_gw_member(u->members, s)->state) != NRES_GW_MEMBER_FREE;
    return refuse(c, 409, "upstream", fu, "an upstream with room for another peer (max_peers"
                  " %u; %u members, removed ones counted until their tries end)",
                  u->members->capacity, members);
  }
  case NRES_EBUSY:
    return refuse(c, 503, "upstream", fu, "an upstream no other change holds (try again)");
  default:
    return refuse(c, 500, "peer", fp, "a change the runtime makes");
  }
}

static int add_op(ctx_t *c) {
  const nres__json_field_t *fp = field(c, "peer"), *fw = field(c, "weight"),
                           *fb = field(c, "backup");
  union { uint8_t b[NRES_GW_SOCKADDR_MAX]; uint64_t a; } sa;
  nres_gw_upstream_t *u = upstream_target(c);
  if (u == NULL)
    return c->status;
  if (u->members == NULL)
    return refuse(c, 400, "upstream", field(c, "upstream"), "an upstream with a membership");
  if (str(fp) == NULL || nres_gw_parse_addr(fp->str, fp->len, sa.b) == 0)
    return refuse(c, 400, "peer", fp, "\"a.b.c.d:port\" or \"[IPv6]:port\" (an address, port"
                  " 1..65535)");
  if (fw != NULL && (fw->type != NRES__JSON_NUMBER || !(fw->num >= 1 && fw->num <= 10000) ||
                     fw->num != floor(fw->num)))
    return refuse(c, 400, "weight", fw, "an integer 1..10000");
  if (fb != NULL && fb->type != NRES__JSON_BOOL)
    return refuse(c, 400, "backup", fb, "true or false");
  uint32_t w = fw != NULL ? (uint32_t)fw->num : 1;
  int backup = fb != NULL && fb->on;
  int rc = nres_gw_member_add(u, fp->str, fp->len, w, backup, c->now);
  if (rc < 0)
    return member_refusal(c, u, rc);
  nres_gw_sync(u, c->now);
  put(&c->what, "upstream %s peer %s: added (weight %u%s", u->name, fp->str, w,
      backup ? ", backup" : "");
  if (u->slow_start > 0)
    put(&c->what, ", slow start %gs", (double)u->slow_start / 1e9);
  put(&c->what, ")");
  put(&c->res, "\"added\":");
  put_json(&c->res, fp->str, fp->len);
  put(&c->res, ",\"weight\":%u,\"backup\":%s", w, backup ? "true" : "false");
  return 200;
}

static int remove_op(ctx_t *c) {
  const nres__json_field_t *fp = field(c, "peer");
  nres_gw_upstream_t *u = upstream_target(c);
  if (u == NULL)
    return c->status;
  if (u->members == NULL)
    return refuse(c, 400, "upstream", field(c, "upstream"), "an upstream with a membership");
  int rc = str(fp) != NULL ? nres_gw_member_remove(u, fp->str, fp->len, c->now)
                           : NRES_GW_MEMBER_UNKNOWN;
  if (rc < 0)
    return member_refusal(c, u, rc);
  uint32_t inflight = nres_gw_member_inflight(u->members, (uint32_t)rc);
  nres_gw_sync(u, c->now);
  put(&c->what, "upstream %s peer %s: removed (%u tries in flight finish there)", u->name,
      fp->str, inflight);
  put(&c->res, "\"removed\":");
  put_json(&c->res, fp->str, fp->len);
  put(&c->res, ",\"inflight\":%u", inflight);
  return 200;
}

static int rate_op(ctx_t *c) {
  const nres__json_field_t *fl = field(c, "limiter"), *fr = field(c, "rate"),
                           *fb = field(c, "burst");
  char names[REASON_MAX];
  nres_gw_limiter_t *l = str(fl) ? nres_gw_limiter_find(fl->str, fl->len) : NULL;
  if (l == NULL)
    return refuse(c, 404, "limiter", fl, "one of %s", limiter_names(names, sizeof names));
  if (fr == NULL || fr->type != NRES__JSON_NUMBER || !(fr->num > 0 && fr->num <= 1e9))
    return refuse(c, 400, "rate", fr, "admissions per second, > 0 and at most 1e9");
  const nres_shm_config_t *cfg = nres_shm_config(l->table);
  double was_rate = cfg->rate;
  uint32_t was_burst = cfg->burst;
  if (flag(l->control, NRES_GW_RATE_SET)) {
    was_rate = l->control->rate;
    was_burst = l->control->burst;
  }
  double burst = was_burst;
  if (fb != NULL) {
    if (fb->type != NRES__JSON_NUMBER || !(fb->num >= 1 && fb->num <= 1e6) ||
        fb->num != floor(fb->num))
      return refuse(c, 400, "burst", fb, "an integer 1..1e6");
    burst = fb->num;
  }
  if (nres_gw_control_rate(l->control, l->table, fr->num, (uint32_t)burst, c->now) != 0)
    return refuse(c, 400, "rate", fr, "a rate the limiter can keep");
  put(&c->what, "limiter %s: rate %.14g/s burst %u (was %.14g/s burst %u)", l->name, fr->num,
      (uint32_t)burst, was_rate, was_burst);
  put(&c->res, "\"rate\":");
  put_num(&c->res, fr->num);
  put(&c->res, ",\"burst\":%u", (uint32_t)burst);
  return 200;
}

static int dry_run_op(ctx_t *c) {
  const nres__json_field_t *fs = field(c, "scope"), *fl = field(c, "limiter"),
                           *fo = field(c, "on");
  char names[REASON_MAX];
  if ((fs == NULL) == (fl == NULL))
    return refuse(c, 400, "scope", fs != NULL ? fs : fl, "either scope or limiter");
  if (fo == NULL || fo->type != NRES__JSON_BOOL)
    return refuse(c, 400, "on", fo, "true or false");
  nres_gw_control_t *ctl;
  const char *name;
  if (fs != NULL) {
    nres_gw_scope_t *s = str(fs) ? scope_find(fs->str) : NULL;
    if (s == NULL)
      return refuse(c, 404, "scope", fs, "one of %s", scope_names(names, sizeof names));
    ctl = s->control;
    name = s->name;
  } else {
    nres_gw_limiter_t *l = str(fl) ? nres_gw_limiter_find(fl->str, fl->len) : NULL;
    if (l == NULL)
      return refuse(c, 404, "limiter", fl, "one of %s", limiter_names(names, sizeof names));
    ctl = l->control;
    name = l->name;
  }
  int was = flag(ctl, NRES_GW_DRY_RUN);
  nres_gw_control_flag(ctl, NRES_GW_DRY_RUN, fo->on);
  put(&c->what, "%s %s: dry-run %s (was %s)", fs != NULL ? "scope" : "limiter", name,
      fo->on ? "on" : "off", was ? "on" : "off");
  put(&c->res, "\"dry_run\":%s,\"was\":%s", fo->on ? "true" : "false", was ? "true" : "false");
  return 200;
}

static int breaker_action(ctx_t *c, const char *action) { return breaker_op(c, action); }
static int peer_action(ctx_t *c, const char *action) { return peer_op(c, action); }
static int weight_action(ctx_t *c, const char *action) { (void)action; return weight_op(c); }
static int rate_action(ctx_t *c, const char *action) { (void)action; return rate_op(c); }
static int add_action(ctx_t *c, const char *action) { (void)action; return add_op(c); }
static int remove_action(ctx_t *c, const char *action) { (void)action; return remove_op(c); }
static int dry_run_action(ctx_t *c, const char *action) { (void)action; return dry_run_op(c); }

/* The actions, their fields and what applies them (sorted by name: the
 * refusal lists them in this order). */
static const struct {
  const char *action;
  const char *fields[4];
  int (*run)(ctx_t *c, const char *action);
} actions[] = {
  { "add", { "upstream", "peer", "weight", "backup" }, add_action },
  { "close", { "scope", "key", "upstream" }, breaker_action },
  { "drain", { "upstream", "peer" }, peer_action },
  { "dry_run", { "scope", "limiter", "on" }, dry_run_action },
  { "eject", { "upstream", "peer" }, peer_action },
  { "isolate", { "scope", "key", "upstream" }, breaker_action },
  { "rate", { "limiter", "rate", "burst" }, rate_action },
  { "remove", { "upstream", "peer" }, remove_action },
  { "reset", { "scope", "key", "upstream" }, breaker_action },
  { "restore", { "upstream", "peer" }, peer_action },
  { "weight", { "upstream", "peer", "weight" }, weight_action },
};

static int apply(ctx_t *c) {
  const nres__json_field_t *fa = field(c, "action");
  size_t k, n = sizeof actions / sizeof actions[0];
  for (k = 0; k < n; k++)
    if (str(fa) != NULL && strcmp(fa->str, actions[k].action) == 0 &&
        strlen(fa->str) == fa->len)
      break;
  if (k == n)
    return refuse(c, 400, "action", fa, "one of add, close, drain, dry_run, eject, isolate,"
                  " rate, remove, reset, restore, weight");
  for (size_t i = 0; i < c->op->n; i++) {
    const nres__json_field_t *f = &c->op->field[i];
    int ok = strcmp(f->name, "action") == 0;
    char list[64] = "";
    out_t o = { list, sizeof list, 0 };
    for (int j = 0; j < 4 && actions[k].fields[j] != NULL; j++) {
      ok |= strcmp(f->name, actions[k].fields[j]) == 0;
      put(&o, "%s%s", j ? ", " : "", actions[k].fields[j]);
    }
    if (!ok || strlen(f->name) != f->name_len) {
      char name[128];
      nres__key_text(f->name, f->name_len, NRES__KEY_TEXT, name, sizeof name);
      return refuse(c, 400, name, f, "no such field for %s (fields: %s)", actions[k].action,
                    list);
    }
  }
  return actions[k].run(c, actions[k].action);
}

int nres_gw_control_apply(const char *body, size_t len, nres_time_t now, char *answer,
                          size_t cap, char *what, size_t wcap) {
  static nres__json_object_t op;   /* one thread: nginx's worker, or Lua's */
  char reason[REASON_MAX], res[REASON_MAX];
  ctx_t c = { &op, now, { what != NULL ? what : reason, what != NULL ? wcap : sizeof reason, 0 },
              { res, sizeof res, 0 }, 200 };
  out_t o = { answer, cap, 0 };
  if (c.what.cap > 0)
    c.what.p[0] = '\0';
  res[0] = '\0';
  if (nres__json_read(&op, body, len) != 0) {
    c.status = 400;
    put(&c.what, "body: %s", op.err);
  } else {
    c.status = apply(&c);
  }
  if (c.status == 200) {
    put(&o, "{\"changed\":");
    put_json(&o, c.what.p, c.what.len < c.what.cap ? c.what.len : c.what.cap - 1);
    put(&o, ",%s}", res);
  } else {
    put(&o, "{\"error\":");
    put_json(&o, c.what.p, c.what.len < c.what.cap ? c.what.len : c.what.cap - 1);
    put(&o, "}");
  }
  return c.status;
}

/* -------------------------------------------------------------- state */

static void put_control(out_t *o, const nres_gw_control_t *c) {
  static const char *would[] = { "circuit open", "rate limited" };
  if (c == NULL) {
    put(o, "null");
    return;
  }
  put(o, "{\"dry_run\":%s,\"would_refuse\":{", flag(c, NRES_GW_DRY_RUN) ? "true" : "false");
  for (int i = 0, first = 1; i < 2; i++) {
    uint64_t n = nres__load(&c->would_refuse[i]);
    if (n > 0) {
      put(o, "%s\"%s\":%llu", first ? "" : ",", would[i], (unsigned long long)n);
      first = 0;
    }
  }
  put(o, "}");
  if (flag(c, NRES_GW_RATE_SET)) {
    put(o, ",\"rate\":");
    put_num(o, c->rate);
    put(o, ",\"burst\":%u", c->burst);
  }
  put(o, "}");
}

size_t nres_gw_control_state(char *out, size_t cap) {
  out_t o = { out, cap, 0 };
  int first = 1;
  put(&o, "{\"scopes\":{");
  for (nres_gw_scope_t *s = scopes; s != NULL; s = s->next, first = 0) {
    put(&o, "%s", first ? "" : ",");
    put_json(&o, s->name, strlen(s->name));
    put(&o, ":");
    put_control(&o, s->control);
  }
  put(&o, "},\"limiters\":{");
  first = 1;
  for (nres_gw_limiter_t *l = nres__gw_limiters(); l != NULL; l = l->next, first = 0) {
    put(&o, "%s", first ? "" : ",");
    put_json(&o, l->name, strlen(l->name));
    put(&o, ":");
    put_control(&o, l->control);
  }
  put(&o, "},\"upstreams\":{");
  first = 1;
  for (nres_gw_upstream_t *u = nres__gw_upstreams(); u != NULL; u = u->next, first = 0) {
    put(&o, "%s", first ? "" : ",");
    put_json(&o, u->name, strlen(u->name));
    nres_gw_sync(u, nres_clock_now());
    put(&o, ":{\"peers\":[");
    for (uint32_t i = 0, k = 0; i < u->n; i++) {
      if (!u->peer[i].removed) {
        put(&o, "%s", k++ ? "," : "");
        put_json(&o, u->peer[i].name, strlen(u->peer[i].name));
      }
    }
    put(&o, "],\"drained\":[");
    for (uint32_t i = 0, k = 0; i < u->n; i++) {
      if (!u->peer[i].removed && flag(u->peer[i].control, NRES_GW_DRAIN)) {
        put(&o, "%s", k++ ? "," : "");
        put_json(&o, u->peer[i].name, strlen(u->peer[i].name));
      }
    }
    put(&o, "],\"weights\":{");
    for (uint32_t i = 0, k = 0; i < u->n; i++) {
      if (u->peer[i].removed)
        continue;
      uint32_t w = u->peer[i].control != NULL ? nres__load(&u->peer[i].control->weight) : 0;
      put(&o, "%s", k++ ? "," : "");
      put_json(&o, u->peer[i].name, strlen(u->peer[i].name));
      put(&o, ":%u", w != 0 ? w : u->peer[i].declared);
    }
    put(&o, "}");
    if (u->members != NULL)
      put(&o, ",\"max_peers\":%u", u->members->capacity);
    put(&o, "}");
  }
  put(&o, "}}");
  if (cap > 0)
    out[o.len < cap ? o.len : cap - 1] = '\0';
  return o.len;
}

/* SPDX-License-Identifier: MIT */
/* json.h - a strict reader of one flat JSON object, the control API's
 * request (runtime/src/gateway/json.c). Internal to libnres. */
#ifndef NRES_GATEWAY_JSON_H
#define NRES_GATEWAY_JSON_H

#include <stddef.h>

#define NRES__JSON_MAX 4096      /* bytes of input read at most */
#define NRES__JSON_FIELDS 16     /* fields of the object at most */

enum { NRES__JSON_STRING = 1, NRES__JSON_NUMBER = 2, NRES__JSON_BOOL = 3 };

typedef struct {
  const char *name;   /* decoded, NUL-terminated, in the object's buf */
  size_t name_len;
  int type;           /* NRES__JSON_* */
  const char *str;    /* STRING: decoded, NUL-terminated, in buf */
  size_t len;         /* STRING: its length */
  double num;         /* NUMBER: finite */
  int on;             /* BOOL */
} nres__json_field_t;

/* One object read: its fields in order, or why it was refused. Caller-
 * owned (about 5 kB); nothing is allocated. */
typedef struct {
  nres__json_field_t field[NRES__JSON_FIELDS];
  size_t n;
  char buf[NRES__JSON_MAX + NRES__JSON_FIELDS * 2];   /* decoded strings */
  char err[160];      /* "expected ..., got ... at byte N" */
} nres__json_object_t;

/* Read `in` (len bytes): exactly one JSON object (RFC 8259) whose values
 * are strings, numbers or true/false, each name once, with whitespace
 * around; strings valid UTF-8 without U+0000, numbers finite. Returns 0,
 * or NRES_EINVAL with o->err saying why (o->n is then 0). */
int nres__json_read(nres__json_object_t *o, const char *in, size_t len);

/* The field named `name`, or NULL. */
const nres__json_field_t *nres__json_get(const nres__json_object_t *o, const char *name);

#endif

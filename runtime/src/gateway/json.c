/* SPDX-License-Identifier: MIT */
/* json.c - a strict reader of one flat JSON object: the control API's
 * request, read by the nginx module's nres_control (no Lua there) and,
 * through nres_gw_control_json, by the Lua handler, so both refuse the
 * same bodies with the same words. Only what a control request holds:
 * strings, numbers, true and false, one level, bounded in bytes and
 * fields; anything else (nesting, null, duplicates, bad UTF-8, trailing
 * bytes) is refused with the byte it stopped at. No allocation: decoded
 * strings go to the caller's object. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres.h"
#include "json.h"
#include "keytext.h"

typedef struct {
  const unsigned char *p, *end, *start;
  nres__json_object_t *o;
  size_t used;   /* bytes of o->buf taken */
} reader_t;

static int fail(reader_t *r, const char *expected) {
  const unsigned char *p = r->p;
  if (p >= r->end)
    snprintf(r->o->err, sizeof r->o->err, "expected %s, got the end at byte %zu", expected,
             (size_t)(p - r->start));
  else if (*p >= 0x20 && *p < 0x7f)
    snprintf(r->o->err, sizeof r->o->err, "expected %s, got '%c' at byte %zu", expected, *p,
             (size_t)(p - r->start));
  else
    snprintf(r->o->err, sizeof r->o->err, "expected %s, got byte 0x%02x at byte %zu",
             expected, *p, (size_t)(p - r->start));
  return NRES_EINVAL;
}

static void blanks(reader_t *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

static int hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return -1;
    v = v * 16 + d;
  }
  *out = v;
  return 0;
}

size_t nres__utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0], lo = 0x80, hi = 0xBF;
  size_t n;
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0;
    else if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90;
    else if (c == 0xF4)
      hi = 0x8F;
  } else
    return 0;
  if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
    return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF)
      return 0;
  return n;
}

static char *put_utf8(char *d, unsigned cp) {
  if (cp < 0x80) {
    *d++ = (char)cp;
  } else if (cp < 0x800) {
    *d++ = (char)(0xC0 | cp >> 6);
    *d++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *d++ = (char)(0xE0 | cp >> 12);
    *d++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *d++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *d++ = (char)(0xF0 | cp >> 18);
    *d++ = (char)(0x80 | (cp >> 12 & 0x3F));
    *d++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *d++ = (char)(0x80 | (cp & 0x3F));
  }
  return d;
}

/* A string at r->p (its opening quote), decoded into o->buf: *out, *len.
 * A decoded string is never longer than its JSON form, so buf (the input's
 * bound plus a NUL per string) always has room. */
static int string(reader_t *r, const char **out, size_t *len) {
  char *start = r->o->buf + r->used, *d = start;
  if (r->p >= r->end || *r->p != '"')
    return fail(r, "'\"'");
  r->p++;
  for (;;) {
    if (r->p >= r->end)
      return fail(r, "a closing '\"'");
    unsigned c = *r->p;
    if (c == '"') {
      r->p++;
      break;
    }
    if (c < 0x20)
      return fail(r, "a string without control characters");
    if (c != '\\') {
      size_t n = nres__utf8_len(r->p, r->end);
      if (n == 0)
        return fail(r, "valid UTF-8");
      memcpy(d, r->p, n);
      d += n;
      r->p += n;
      continue;
    }
    if (r->end - r->p < 2)
      return fail(r, "an escape");
    c = r->p[1];
    const char *simple = strchr("\"\\/bfnrt", (int)c);
    if (c != 0 && simple != NULL) {
      *d++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      r->p += 2;
      continue;
    }
    if (c != 'u')
      return fail(r, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    unsigned cp, lo;
    if (r->end - r->p < 6 || hex4(r->p + 2, &cp) != 0)
      return fail(r, "\\u and four hex digits");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
      return fail(r, "a high surrogate before a low one");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (r->end - r->p < 12 || r->p[6] != '\\' || r->p[7] != 'u' ||
          hex4(r->p + 8, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
        return fail(r, "a low surrogate after a high one");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      r->p += 6;
    }
    if (cp == 0)
      return fail(r, "a string without \\u0000");
    d = put_utf8(d, cp);
    r->p += 6;
  }
  *d = '\0';
  *out = start;
  *len = (size_t)(d - start);
  r->used += *len + 1;
  return 0;
}

/* A number (RFC 8259's grammar), finite once converted. */
static int number(reader_t *r, double *out) {
  const unsigned char *s = r->p, *p = r->p;
  char tmp[64];
  if (p < r->end && *p == '-')
    p++;
  if (p < r->end && *p == '0')
    p++;
  else if (p < r->end && *p >= '1' && *p <= '9')
    while (p < r->end && *p >= '0' && *p <= '9')
      p++;
  else {
    r->p = p;
    return fail(r, "a digit");
  }
  if (p < r->end && *p == '.') {
    p++;
    if (p >= r->end || *p < '0' || *p > '9') {
      r->p = p;
      return fail(r, "a digit after '.'");
    }
    while (p < r->end && *p >= '0' && *p <= '9')
      p++;
  }
  if (p < r->end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < r->end && (*p == '+' || *p == '-'))
      p++;
    if (p >= r->end || *p < '0' || *p > '9') {
      r->p = p;
      return fail(r, "a digit in the exponent");
    }
    while (p < r->end && *p >= '0' && *p <= '9')
      p++;
  }
  if ((size_t)(p - s) >= sizeof tmp)
    return fail(r, "a number of at most 63 characters");
  memcpy(tmp, s, (size_t)(p - s));
  tmp[p - s] = '\0';
  double v = strtod(tmp, NULL);
  if (!isfinite(v))
    return fail(r, "a finite number");
  *out = v;
  r->p = p;
  return 0;
}

static int literal(reader_t *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
    return -1;
  r->p += n;
  return 0;
}

static int value(reader_t *r, nres__json_field_t *f) {
  if (r->p >= r->end)
    return fail(r, "a value");
  switch (*r->p) {
  case '"':
    f->type = NRES__JSON_STRING;
    return string(r, &f->str, &f->len);
  case 't':
  case 'f':
    f->type = NRES__JSON_BOOL;
    f->on = *r->p == 't';
    if (literal(r, f->on ? "true" : "false") == 0)
      return 0;
    break;
  case '-':
  case '0': case '1': case '2': case '3': case '4':
  case '5': case '6': case '7': case '8': case '9':
    f->type = NRES__JSON_NUMBER;
    return number(r, &f->num);
  default:
    break;
  }
  return fail(r, "a string, a number, true or false");
}

int nres__json_read(nres__json_object_t *o, const char *in, size_t len) {
  reader_t r;
  if (o == NULL)
    return NRES_EINVAL;
  o->n = 0;
  o->err[0] = '\0';
  if (in == NULL || len > NRES__JSON_MAX) {
    snprintf(o->err, sizeof o->err, "expected a JSON object of at most %d bytes, got %zu",
             NRES__JSON_MAX, in == NULL ? (size_t)0 : len);
    return NRES_EINVAL;
  }
  r.start = r.p = (const unsigned char *)in;
  r.end = r.p + len;
  r.o = o;
  r.used = 0;
  int rc = NRES_EINVAL;
  size_t n = 0;
  blanks(&r);
  if (r.p >= r.end || *r.p != '{') {
    fail(&r, "'{'");
    goto out;
  }
  r.p++;
  blanks(&r);
  if (r.p < r.end && *r.p == '}') {
    r.p++;
  } else {
    for (;;) {
      nres__json_field_t *f;
      if (n == NRES__JSON_FIELDS) {
        fail(&r, "at most 16 fields");
        goto out;
      }
      f = &o->field[n];
      memset(f, 0, sizeof *f);
      if (string(&r, &f->name, &f->name_len) != 0)
        goto out;
      for (size_t i = 0; i < n; i++)
        if (o->field[i].name_len == f->name_len &&
            memcmp(o->field[i].name, f->name, f->name_len) == 0) {
          snprintf(o->err, sizeof o->err, "expected each field once, got \"%.40s\" twice",
                   f->name);
          goto out;
        }
      blanks(&r);
      if (r.p >= r.end || *r.p != ':') {
        fail(&r, "':'");
        goto out;
      }
      r.p++;
      blanks(&r);
      if (value(&r, f) != 0)
        goto out;
      n++;
      blanks(&r);
      if (r.p < r.end && *r.p == ',') {
        r.p++;
        blanks(&r);
        continue;
      }
      if (r.p < r.end && *r.p == '}') {
        r.p++;
        break;
      }
      fail(&r, "',' or '}'");
      goto out;
    }
  }
  blanks(&r);
  if (r.p != r.end) {
    fail(&r, "nothing after the object");
    goto out;
  }
  o->n = n;
  rc = 0;
out:
  return rc;
}

const nres__json_field_t *nres__json_get(const nres__json_object_t *o, const char *name) {
  size_t len = strlen(name);
  for (size_t i = 0; o != NULL && i < o->n; i++)
    if (o->field[i].name_len == len && memcmp(o->field[i].name, name, len) == 0)
      return &o->field[i];
  return NULL;
}

/* SPDX-License-Identifier: MIT */
/* fuzz_control_json.c - libFuzzer target for the control API's JSON
 * reader (runtime/src/gateway/json.c) and the answers of
 * nres_gw_control_apply, which reads every body the nginx module's
 * nres_control and the Lua handler are sent.
 *
 * Every byte string must give either NRES_EINVAL with no field and a
 * reason, or an object whose fields are what the grammar allows: at most
 * NRES__JSON_FIELDS, names unique, strings valid UTF-8 without NUL and
 * NUL-terminated, numbers finite. An accepted object written back as
 * JSON (escaped here) reads back the same. The operation's answer, with
 * nothing registered, is a refusal (400 or 404) and is itself a flat
 * JSON object this reader accepts, with an "error" string.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nres/gateway.h"
#include "gateway/json.h"
#include "gateway/keytext.h"
#include "fuzz_input.h"

static nres__json_object_t a, b;
static char text[2 * NRES__JSON_MAX + 64 * NRES__JSON_FIELDS];

static void check_utf8(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  FUZZ_CHECK(s[n] == '\0');
  while (p < end) {
    FUZZ_CHECK(*p != 0);
    size_t k = nres__utf8_len(p, end);
    FUZZ_CHECK(k > 0);
    p += k;
  }
}

/* s as a JSON string at text + *at (every byte under 0x20 escaped). */
static void write_str(size_t *at, const char *s, size_t n) {
  text[(*at)++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      text[(*at)++] = '\\';
      text[(*at)++] = (char)c;
    } else if (c < 0x20) {
      *at += (size_t)snprintf(text + *at, 8, "\\u%04x", c);
    } else {
      text[(*at)++] = (char)c;
    }
  }
  text[(*at)++] = '"';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int rc = nres__json_read(&a, (const char *)data, size);
  FUZZ_CHECK(rc == 0 || rc == NRES_EINVAL);
  if (rc != 0) {
    FUZZ_CHECK(a.n == 0);
    FUZZ_CHECK(strstr(a.err, "expected") != NULL);
  } else {
    FUZZ_CHECK(a.n <= NRES__JSON_FIELDS);
    size_t at = 0;
    text[at++] = '{';
    for (size_t i = 0; i < a.n; i++) {
      const nres__json_field_t *f = &a.field[i];
      check_utf8(f->name, f->name_len);
      for (size_t j = 0; j < i; j++)
        FUZZ_CHECK(a.field[j].name_len != f->name_len ||
                   memcmp(a.field[j].name, f->name, f->name_len) != 0);
      if (i)
        text[at++] = ',';
      write_str(&at, f->name, f->name_len);
      text[at++] = ':';
      if (f->type == NRES__JSON_STRING) {
        check_utf8(f->str, f->len);
        write_str(&at, f->str, f->len);
      } else if (f->type == NRES__JSON_NUMBER) {
        FUZZ_CHECK(isfinite(f->num));
        at += (size_t)snprintf(text + at, 32, "%.17g", f->num);
      } else {
        FUZZ_CHECK(f->type == NRES__JSON_BOOL && (f->on == 0 || f->on == 1));
        at += (size_t)snprintf(text + at, 8, "%s", f->on ? "true" : "false");
      }
    }
    text[at++] = '}';
    if (at <= NRES__JSON_MAX) {
      FUZZ_CHECK(nres__json_read(&b, text, at) == 0);
      FUZZ_CHECK(b.n == a.n);
      for (size_t i = 0; i < a.n; i++) {
        const nres__json_field_t *x = &a.field[i], *y = &b.field[i];
        FUZZ_CHECK(x->type == y->type && x->name_len == y->name_len &&
                   memcmp(x->name, y->name, x->name_len) == 0);
        if (x->type == NRES__JSON_STRING)
          FUZZ_CHECK(x->len == y->len && memcmp(x->str, y->str, x->len) == 0);
        else if (x->type == NRES__JSON_NUMBER)
          FUZZ_CHECK(x->num == y->num);
        else
          FUZZ_CHECK(x->on == y->on);
      }
    }
  }
  /* nothing registered: every operation is refused, in a readable answer */
  char answer[NRES_GW_CONTROL_ANSWER_MAX];
  int status = nres_gw_control_apply((const char *)data, size, 1, answer, sizeof answer, NULL, 0);
  FUZZ_CHECK(status == 400 || status == 404);
  FUZZ_CHECK(nres__json_read(&b, answer, strlen(answer)) == 0);
  const nres__json_field_t *e = nres__json_get(&b, "error");
  FUZZ_CHECK(b.n == 1 && e != NULL && e->type == NRES__JSON_STRING);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* keytext.c - a shared table's key (any bytes: a limiter keyed by
 * $binary_remote_addr holds 4- or 16-byte addresses) as text that is
 * valid UTF-8, as the status shows it (lua/nres/ngx/keytext.lua, the same
 * rules) and the control API finds it: clean text as itself, an address
 * as its address (IPv6 after RFC 5952), any other byte outside printable
 * ASCII (and the backslash) as \xNN. */
#include <stdio.h>
#include <string.h>

#include "keytext.h"

/* Valid UTF-8 (no overlong form, no surrogate, nothing past U+10FFFF)
 * with no control character. */
static int clean(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 32 || c == 127)
      return 0;
    if (c < 128) {
      i++;
      continue;
    }
    size_t len = nres__utf8_len(s + i, s + n);
    if (len == 0)
      return 0;
    i += len;
  }
  return 1;
}

static size_t put(char *out, size_t cap, size_t at, const char *s, size_t n) {
  if (at < cap)
    memcpy(out + at, s, at + n < cap ? n : cap - at);
  return at + n;
}

static size_t address6(const unsigned char *s, char *out, size_t cap) {
  unsigned w[8];
  char tmp[48];
  size_t at = 0;
  for (int i = 0; i < 8; i++)
    w[i] = (unsigned)s[2 * i] << 8 | s[2 * i + 1];
  if (w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 0 && w[4] == 0 && w[5] == 0xffff) {
    int n = snprintf(tmp, sizeof tmp, "::ffff:%u.%u.%u.%u", s[12], s[13], s[14], s[15]);
    return put(out, cap, 0, tmp, (size_t)n);
  }
  /* the longest run of two or more zero words (the first of equals) */
  int best = -1, blen = 0, run = 0, rlen = 0;
  for (int i = 0; i < 8; i++) {
    if (w[i] == 0) {
      if (rlen == 0)
        run = i;
      if (++rlen > blen) {
        best = run;
        blen = rlen;
      }
    } else {
      rlen = 0;
    }
  }
  if (blen < 2)
    best = -1;
  for (int i = 0; i < 8;) {
    if (i == best) {
      at = put(out, cap, at, i == 0 ? "::" : ":", i == 0 ? 2 : 1);
      i += blen;
      continue;
    }
    int n = snprintf(tmp, sizeof tmp, "%x", w[i]);
    at = put(out, cap, at, tmp, (size_t)n);
    if (++i < 8)
      at = put(out, cap, at, ":", 1);
  }
  return at;
}

size_t nres__key_address(const char *key, size_t n, char *out, size_t cap) {
  const unsigned char *s = (const unsigned char *)key;
  char tmp[24];
  size_t len = 0;
  if (n == 4)
    len = put(out, cap, 0, tmp,
              (size_t)snprintf(tmp, sizeof tmp, "%u.%u.%u.%u", s[0], s[1], s[2], s[3]));
  else if (n == 16)
    len = address6(s, out, cap);
  if (len > 0 && cap > 0)
    out[len < cap ? len : cap - 1] = '\0';
  return len;
}

size_t nres__key_text(const char *key, size_t n, int kind, char *out, size_t cap) {
  const unsigned char *s = (const unsigned char *)key;
  size_t at = 0;
  int ok = clean(s, n);
  if (kind != NRES__KEY_TEXT && (kind == NRES__KEY_ADDRESS || !ok)) {
    at = nres__key_address(key, n, out, cap);
    if (at > 0)
      return at;
  }
  if (ok) {
    at = put(out, cap, 0, key, n);
  } else {
    for (size_t i = 0; i < n; i++) {
      char tmp[8];
      if (s[i] < 32 || s[i] >= 127 || s[i] == '\\')
        at = put(out, cap, at, tmp, (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", s[i]));
      else
        at = put(out, cap, at, key + i, 1);
    }
  }
  if (cap > 0)
    out[at < cap ? at : cap - 1] = '\0';
  return at;
}

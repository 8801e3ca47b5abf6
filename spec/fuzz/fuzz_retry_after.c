/* SPDX-License-Identifier: MIT */
/* fuzz_retry_after.c - libFuzzer target for nres_http_retry_after, the
 * Retry-After parser (delay-seconds and the three HTTP-date forms).
 *
 * The value comes from a server we do not control, so every byte string
 * must give either NRES_EINVAL with *out untouched, or a delay that is a
 * whole number of seconds within NRES_HTTP_RETRY_AFTER_MAX. Beyond that
 * the target checks the answer against independent references: digits are
 * summed with saturation here, an IMF-fixdate is converted with timegm, and
 * a date one second further in the future gives a delay at most one
 * second shorter (never longer, never wrapped).
 *
 * Input: the header value, parsed at a fixed "now" (2025-12-01). An input
 * that starts with 0xff takes its "now" from the next 8 bytes instead, so
 * dates far from today and extreme clocks are covered too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nres/http.h"
#include "fuzz_input.h"

#define NOW_DEFAULT INT64_C(1764547200)   /* 2025-12-01T00:00:00Z */
#define SENTINEL ((nres_time_t) 0x5a5a5a5a5a5a5a5aull)

static const nres_time_t max_sec = NRES_HTTP_RETRY_AFTER_MAX / NRES_SEC;

static int blank(char c) { return c == ' ' || c == '\t'; }
static int digit(char c) { return c >= '0' && c <= '9'; }

static int parse(const char *v, size_t len, int64_t now, nres_time_t *out) {
  int rc;
  *out = SENTINEL;
  rc = nres_http_retry_after(v, len, now, out);
  FUZZ_CHECK(rc == 0 || rc == NRES_EINVAL);
  if (rc != 0) {
    FUZZ_CHECK(*out == SENTINEL);   /* untouched on refusal */
  } else {
    FUZZ_CHECK(*out <= NRES_HTTP_RETRY_AFTER_MAX);
    FUZZ_CHECK(*out % NRES_SEC == 0);
  }
  return rc;
}

/* The value without surrounding blanks. */
static void trim(const char **v, size_t *len) {
  while (*len > 0 && blank(**v))
    (*v)++, (*len)--;
  while (*len > 0 && blank((*v)[*len - 1]))
    (*len)--;
}

/* delay-seconds by another route: significant digits counted, so a value
 * with more of them than max_sec has saturates without any multiplying. */
static void check_seconds(const char *v, size_t len, int rc, nres_time_t out) {
  size_t i, first = len;
  nres_time_t sec = 0;

  for (i = 0; i < len; i++)
    if (!digit(v[i])) {
      FUZZ_CHECK(rc == NRES_EINVAL);
      return;
    }
  FUZZ_CHECK(rc == 0);
  for (i = 0; i < len; i++)
    if (v[i] != '0') {
      first = i;
      break;
    }
  if (len - first > 10) {                   /* max_sec has 10 digits */
    sec = max_sec;
  } else {
    for (i = first; i < len; i++)
      sec = sec * 10 + (nres_time_t) (v[i] - '0');
    if (sec > max_sec)
      sec = max_sec;
  }
  FUZZ_CHECK(out == sec * NRES_SEC);
}

/* An accepted IMF-fixdate against timegm: the parser's own day count must
 * agree with libc's. */
static void check_imf(const char *v, size_t len, int64_t now, nres_time_t out) {
  static const char *const mons = "JanFebMarAprMayJunJulAugSepOctNovDec";
  char buf[64], wd[4], mon[4];
  const char *m;
  int d, y, h, mi, s, n = 0;
  struct tm tm;
  int64_t when, expect;

  if (len >= sizeof(buf))
    return;
  memcpy(buf, v, len);
  buf[len] = '\0';
  if (sscanf(buf, "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d GMT%n", wd, &d,
             mon, &y, &h, &mi, &s, &n) != 7 || (size_t) n != len)
    return;   /* another form */
  m = strstr(mons, mon);
  if (m == NULL || (m - mons) % 3 != 0)
    return;
  memset(&tm, 0, sizeof(tm));
  tm.tm_year = y - 1900;
  tm.tm_mon = (int) ((m - mons) / 3);
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  when = (int64_t) timegm(&tm);
  if (when <= now)
    expect = 0;
  else if ((uint64_t) when - (uint64_t) now >= max_sec)
    expect = (int64_t) max_sec;
  else
    expect = when - now;
  FUZZ_CHECK(out == (nres_time_t) expect * NRES_SEC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *v = (const char *) data;
  size_t len = size;
  int64_t now = NOW_DEFAULT;
  nres_time_t out, later;
  int rc, rc2;

  if (size >= 9 && data[0] == 0xff) {
    uint64_t raw;
    memcpy(&raw, data + 1, sizeof(raw));
    now = (int64_t) raw;
    v += 9;
    len -= 9;
  }
  rc = parse(v, len, now, &out);
  trim(&v, &len);
  if (len > 0 && digit(v[0])) {
    check_seconds(v, len, rc, out);
    return 0;
  }
  if (rc != 0)
    return 0;
  check_imf(v, len, now, out);
  /* One second later the same date is at most a second closer. RFC 850's
   * two-digit year is placed relative to now, so it may jump a century
   * when now crosses a year: not compared. */
  if (memchr(v, '-', len) == NULL && now < INT64_MAX) {
    rc2 = parse(v, len, now + 1, &later);
    FUZZ_CHECK(rc2 == 0);
    FUZZ_CHECK(later <= out && out - later <= NRES_SEC);
  }
  return 0;
}

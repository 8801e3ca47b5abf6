/* SPDX-License-Identifier: MIT */
/* http_retry_after.c - parsing the Retry-After header, both forms.
 *
 * A server may say "come back in 120 seconds" or "come back at this date"
 * (RFC 9110 10.2.3), and a recipient must accept the three date formats of
 * section 5.6.7 (IMF-fixdate, RFC 850, asctime). It is separate from the
 * client because it is pure text-to-duration work that tests hammer on its
 * own with garbage and huge values, and that must stay locale-free (no
 * strptime) and allocation-free. Anything that is not exactly one of the
 * forms is rejected: the caller then acts as if there were no header.
 */
#include <string.h>

#include "nres/http.h"

static int is_blank(char c) { return c == ' ' || c == '\t'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  int64_t era;
  unsigned yoe, doy, doe;

  y -= m <= 2;
  era = (y >= 0 ? y : y - 399) / 400;
  yoe = (unsigned) (y - era * 400);
  doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t) doe - 719468;
}

typedef struct {
  const char *p, *end;
} cursor_t;

static int take(cursor_t *c, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t) (c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
    return 0;
  c->p += n;
  return 1;
}

/* Exactly `n` digits (n = 0: one or more, at most 9). */
static int digits(cursor_t *c, int n, int *out) {
  int v = 0, k = 0;
  while (c->p < c->end && is_digit(*c->p) && (n == 0 ? k < 9 : k < n)) {
    v = v * 10 + (*c->p++ - '0');
    k++;
  }
  if (k == 0 || (n != 0 && k != n))
    return 0;
  *out = v;
  return 1;
}

static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
static const char wkday[7][4] = { "Mon", "Tue", "Wed", "Thu", "Fri", "Sat",
                                  "Sun" };
static const char *const weekday[7] = { "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday",
                                        "Sunday" };

static int month(cursor_t *c, int *out) {
  int i;
  for (i = 0; i < 12; i++)
    if (take(c, months[i])) {
      *out = i + 1;
      return 1;
    }
  return 0;
}

static int hms(cursor_t *c, int *h, int *m, int *s) {
  return digits(c, 2, h) && take(c, ":") && digits(c, 2, m) && take(c, ":") &&
         digits(c, 2, s) && *h < 24 && *m < 60 && *s < 61;   /* leap second */
}

static int date_to_unix(int y, int mon, int d, int h, int mi, int s,
                        int64_t *out) {
  static const unsigned char mdays[12] = { 31, 29, 31, 30, 31, 30,
                                           31, 31, 30, 31, 30, 31 };
  if (mon < 1 || mon > 12 || d < 1 || d > mdays[mon - 1])
    return 0;
  if (mon == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
    return 0;
  *out = days_from_civil(y, (unsigned) mon, (unsigned) d) * 86400 +
         h * 3600 + mi * 60 + s;
  return 1;
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
static int imf_fixdate(cursor_t c, int64_t *out) {
  int i, d, mon, y, h, mi, s, ok = 0;
  for (i = 0; i < 7 && !ok; i++)
    ok = take(&c, wkday[i]);
  if (!ok || !take(&c, ", ") || !digits(&c, 2, &d) || !take(&c, " ") ||
      !month(&c, &mon) || !take(&c, " ") || !digits(&c, 4, &y) ||
      !take(&c, " ") || !hms(&c, &h, &mi, &s) || !take(&c, " GMT") ||
      c.p != c.end)
    return 0;
  return date_to_unix(y, mon, d, h, mi, s, out);
}

/* "Sunday, 06-Nov-94 08:49:37 GMT": a two-digit year more than 50 years
 * in the future is in the past century (RFC 9110 5.6.7). */
static int rfc850(cursor_t c, int64_t now_unix, int64_t *out) {
  int i, d, mon, y, h, mi, s, ok = 0, now_year;
  int64_t days = now_unix / 86400;
  for (i = 0; i < 7 && !ok; i++)
    ok = take(&c, weekday[i]);
  if (!ok || !take(&c, ", ") || !digits(&c, 2, &d) || !take(&c, "-") ||
      !month(&c, &mon) || !take(&c, "-") || !digits(&c, 2, &y) ||
      !take(&c, " ") || !hms(&c, &h, &mi, &s) || !take(&c, " GMT") ||
      c.p != c.end)
    return 0;
  {                                       /* close enough to pick a century; */
    int64_t year = 1970 + days / 365;     /* clamped: now_unix is the caller's */
    now_year = year < 0 ? 0 : year > 9999 ? 9999 : (int) year;
  }
  y += (now_year / 100) * 100;
  if (y > now_year + 50)
    y -= 100;
  return date_to_unix(y, mon, d, h, mi, s, out);
}

/* "Sun Nov  6 08:49:37 1994" */
static int asctime_date(cursor_t c, int64_t *out) {
  int i, d, mon, y, h, mi, s, ok = 0;
  for (i = 0; i < 7 && !ok; i++)
    ok = take(&c, wkday[i]);
  if (!ok || !take(&c, " ") || !month(&c, &mon) || !take(&c, " "))
    return 0;
  if (take(&c, " ")) {
    if (!digits(&c, 1, &d))
      return 0;
  } else if (!digits(&c, 2, &d)) {
    return 0;
  }
  if (!take(&c, " ") || !hms(&c, &h, &mi, &s) || !take(&c, " ") ||
      !digits(&c, 4, &y) || c.p != c.end)
    return 0;
  return date_to_unix(y, mon, d, h, mi, s, out);
}

int nres_http_retry_after(const char *value, size_t len, int64_t now_unix,
                          nres_time_t *out) {
  const nres_time_t max_sec = NRES_HTTP_RETRY_AFTER_MAX / NRES_SEC;
  cursor_t c;
  int64_t when;

  if (value == NULL || out == NULL)
    return NRES_EINVAL;
  c.p = value;
  c.end = value + len;
  while (c.p < c.end && is_blank(*c.p))
    c.p++;
  while (c.end > c.p && is_blank(c.end[-1]))
    c.end--;
  if (c.p == c.end)
    return NRES_EINVAL;

  if (is_digit(*c.p)) {
    nres_time_t sec = 0;
    for (; c.p < c.end; c.p++) {
      if (!is_digit(*c.p))
        return NRES_EINVAL;   /* "1.5", "10s", "-1", "12 34" */
      if (sec < max_sec)      /* saturate, however many digits follow */
        sec = sec * 10 + (nres_time_t) (*c.p - '0');
    }
    if (sec > max_sec)
      sec = max_sec;
    *out = sec * NRES_SEC;
    return 0;
  }
  if (!imf_fixdate(c, &when) && !rfc850(c, now_unix, &when) &&
      !asctime_date(c, &when))
    return NRES_EINVAL;
  if (when <= now_unix) {
    *out = 0;
  } else {
    /* when > now_unix, so the difference fits in uint64_t even when
     * now_unix is near INT64_MIN; computed unsigned, it cannot overflow. */
    uint64_t ahead = (uint64_t) when - (uint64_t) now_unix;
    *out = ahead >= max_sec ? NRES_HTTP_RETRY_AFTER_MAX
                            : (nres_time_t) ahead * NRES_SEC;
  }
  return 0;
}

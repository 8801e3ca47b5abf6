/* SPDX-License-Identifier: MIT */
/* test_retry_after.c - Retry-After parsing: delay-seconds and the three
 * HTTP-date forms, blanks, past dates, huge values that must saturate
 * rather than wrap, and a list of garbage that must be refused without
 * touching the output. Then what the HTTP classifier makes of each status
 * family with and without a Retry-After.
 */
#include <string.h>

#include "nres_test.h"
#include "nres/http.h"

/* 1994-11-06 08:49:37 UTC, the RFC's example date. */
#define EXAMPLE 784111777

static int parse(const char *s, int64_t now, nres_time_t *out) {
  return nres_http_retry_after(s, strlen(s), now, out);
}

static void test_seconds(void **state) {
  nres_time_t v;
  (void) state;

  assert_int_equal(parse("0", 0, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(parse("120", 0, &v), 0);
  assert_int_equal(v, 120 * NRES_SEC);
  assert_int_equal(parse("  5\t", 0, &v), 0);
  assert_int_equal(v, 5 * NRES_SEC);
  assert_int_equal(parse("007", 0, &v), 0);
  assert_int_equal(v, 7 * NRES_SEC);
  /* Huge values saturate at the documented maximum, never wrap: 2^64 ns
   * is only 584 years, and 10^30 seconds overflows any integer. */
  assert_int_equal(parse("18446744073709551616", 0, &v), 0);
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);
  assert_int_equal(parse("999999999999999999999999999999999999999999", 0, &v), 0);
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);
  assert_int_equal(parse("3153600000", 0, &v), 0);   /* exactly 100 years */
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);
  assert_int_equal(parse("3153599999", 0, &v), 0);
  assert_int_equal(v, (nres_time_t) 3153599999 * NRES_SEC);
  assert_true(NRES_HTTP_RETRY_AFTER_MAX < NRES_TIME_NEVER);
}

static void test_dates(void **state) {
  nres_time_t v;
  (void) state;

  /* the three forms of the same instant, 60 s before it */
  assert_int_equal(parse("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE - 60, &v), 0);
  assert_int_equal(v, 60 * NRES_SEC);
  assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", EXAMPLE - 60, &v), 0);
  assert_int_equal(v, 60 * NRES_SEC);
  assert_int_equal(parse("Sun Nov  6 08:49:37 1994", EXAMPLE - 60, &v), 0);
  assert_int_equal(v, 60 * NRES_SEC);
  assert_int_equal(parse("Sun Nov 16 08:49:37 1994", EXAMPLE, &v), 0);
  assert_int_equal(v, 10 * 86400 * NRES_SEC);
  /* a past date (or now) means: now */
  assert_int_equal(parse("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(parse("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE + 999, &v), 0);
  assert_int_equal(v, 0);
  /* leap day, year ends, the epoch */
  assert_int_equal(parse("Thu, 29 Feb 2024 00:00:00 GMT", 1709164800 - 1, &v), 0);
  assert_int_equal(v, NRES_SEC);
  assert_int_equal(parse("Thu, 01 Jan 1970 00:00:01 GMT", 0, &v), 0);
  assert_int_equal(v, NRES_SEC);
  assert_int_equal(parse("Fri, 31 Dec 1999 23:59:59 GMT", 946684799 - 2, &v), 0);
  assert_int_equal(v, 2 * NRES_SEC);
  /* RFC 850 two-digit years: within 50 years ahead, else last century */
  assert_int_equal(parse("Monday, 01-Jan-24 00:00:00 GMT", 1704067200 - 5, &v), 0);
  assert_int_equal(v, 5 * NRES_SEC);
  assert_int_equal(parse("Monday, 01-Jan-90 00:00:00 GMT", 1704067200, &v), 0);
  assert_int_equal(v, 0);   /* 1990: past */
  /* far future: saturates */
  assert_int_equal(parse("Fri, 31 Dec 9999 23:59:59 GMT", 0, &v), 0);
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);
  /* blanks around a date */
  assert_int_equal(parse("  Sun, 06 Nov 1994 08:49:37 GMT  ", EXAMPLE - 1, &v), 0);
  assert_int_equal(v, NRES_SEC);
}

static void test_garbage(void **state) {
  static const char *const bad[] = {
    "", " ", "\t", "-1", "+5", "1.5", "10s", "1e3", "12 34", "0x10", "soon",
    "Wed, 21 Oct 2015",                          /* cut short */
    "Sun, 06 Nov 1994 08:49:37",                 /* no zone */
    "Sun, 06 Nov 1994 08:49:37 UTC",             /* wrong zone */
    "Sun, 06 Nov 1994 08:49:37 gmt",             /* case matters */
    "sun, 06 Nov 1994 08:49:37 GMT",
    "Sun, 6 Nov 1994 08:49:37 GMT",              /* day must be 2 digits */
    "Sun, 06 November 1994 08:49:37 GMT",
    "Sun, 31 Feb 2020 00:00:00 GMT",             /* no such day */
    "Sat, 29 Feb 2023 00:00:00 GMT",             /* not a leap year */
    "Mon, 01 Jan 2024 25:00:00 GMT",             /* hour */
    "Mon, 01 Jan 2024 00:60:00 GMT",             /* minute */
    "Mon, 01 Jan 2024 00:00:00 GMT x",           /* trailing */
    "Mon, 00 Jan 2024 00:00:00 GMT",
    "Mon, 01 Jan 24 00:00:00 GMT",
    "Funday, 01-Jan-24 00:00:00 GMT",
    "Sun Nov 6 08:49:37 1994",                   /* asctime pads with a blank */
    "Sun Nov  6 08:49:37",
    "Sun, 06 Nov 1994 08:49:37 GMT, 5",
    "5, 6",
  };
  nres_time_t v = 12345;
  size_t i;
  (void) state;

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (parse(bad[i], EXAMPLE, &v) != NRES_EINVAL)
      fail_msg("accepted '%s'", bad[i]);
    assert_int_equal(v, 12345);   /* untouched */
  }
  /* embedded NUL: the length rules, not strlen */
  assert_int_equal(nres_http_retry_after("12\0" "3", 4, 0, &v), NRES_EINVAL);
  assert_int_equal(nres_http_retry_after("12\0" "3", 2, 0, &v), 0);
  assert_int_equal(v, 12 * NRES_SEC);
  assert_int_equal(nres_http_retry_after(NULL, 0, 0, &v), NRES_EINVAL);
  assert_int_equal(nres_http_retry_after("1", 1, 0, NULL), NRES_EINVAL);
}

/* The classifier on every status family, with and without Retry-After. */
/* Found by spec/fuzz/fuzz_retry_after (corpus now_int64_min_overflows and
 * rfc850_huge_now_overflows): "now" is the caller's, so an absurd clock
 * must not overflow the date arithmetic (UBSan aborted on both before). */
static void test_extreme_now(void **state) {
  nres_time_t v = 7;
  (void) state;
  assert_int_equal(parse("Sun, 06 Nov 1994 08:49:37 GMT", INT64_MIN, &v), 0);
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);       /* far ahead: saturated */
  assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_C(0x00f099b189858700), &v), 0);
  assert_int_equal(v, 0);                                /* long past */
  assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MIN, &v), 0);
  assert_int_equal(v, NRES_HTTP_RETRY_AFTER_MAX);
  assert_int_equal(parse("Sun, 06 Nov 1994 08:49:37 GMT", INT64_MAX, &v), 0);
  assert_int_equal(v, 0);
}

static void test_classify_families(void **state) {
  static const struct { int status; int kind; int kind_ra; } t[] = {
    { 100, NRES_OK, NRES_OK },
    { 101, NRES_OK, NRES_OK },
    { 200, NRES_OK, NRES_OK },
    { 204, NRES_OK, NRES_OK },
    { 301, NRES_OK, NRES_OK },
    { 304, NRES_OK, NRES_OK },
    { 400, NRES_OK, NRES_OK },
    { 404, NRES_OK, NRES_OK },
    { 408, NRES_TRANSIENT, NRES_TRANSIENT },
    { 429, NRES_THROTTLED, NRES_THROTTLED },
    { 499, NRES_OK, NRES_OK },
    { 500, NRES_TRANSIENT, NRES_TRANSIENT },
    { 502, NRES_TRANSIENT, NRES_TRANSIENT },
    { 503, NRES_TRANSIENT, NRES_THROTTLED },
    { 504, NRES_TRANSIENT, NRES_TRANSIENT },
    { 599, NRES_TRANSIENT, NRES_TRANSIENT },
    { 600, NRES_PERMANENT, NRES_PERMANENT },
    { 999, NRES_PERMANENT, NRES_PERMANENT },
    { 0, NRES_PERMANENT, NRES_PERMANENT },
    { 99, NRES_PERMANENT, NRES_PERMANENT },
    { -1, NRES_PERMANENT, NRES_PERMANENT },
  };
  size_t i;
  (void) state;

  for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    nres_verdict_t a = nres_classify_http(t[i].status, NRES_TIME_NEVER);
    nres_verdict_t b = nres_classify_http(t[i].status, 2 * NRES_SEC);
    if (a.kind != t[i].kind || b.kind != t[i].kind_ra)
      fail_msg("status %d: %s / %s", t[i].status, nres_verdict_name(a.kind),
               nres_verdict_name(b.kind));
    assert_false(a.flags & NRES_VF_RETRY_AFTER);
    if (b.kind == NRES_THROTTLED) {
      assert_true(b.flags & NRES_VF_RETRY_AFTER);
      assert_int_equal(b.retry_after, 2 * NRES_SEC);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_seconds),
    cmocka_unit_test(test_dates),
    cmocka_unit_test(test_garbage),
    cmocka_unit_test(test_extreme_now),
    cmocka_unit_test(test_classify_families),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

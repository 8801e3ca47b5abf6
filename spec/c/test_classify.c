/* SPDX-License-Identifier: MIT */
/* test_classify.c - outcomes to verdicts (core/classify.c).
 *
 * Checks the default errno and HTTP tables code by code, the Retry-After
 * rule that turns 429 and 503 into a timed THROTTLED, custom rule tables
 * (first match wins, fallback kind, out-of-range kinds), the exported tables
 * themselves, and the verdict names.
 */
#include <errno.h>
#include <string.h>

#include "nres_test.h"

#define NEVER NRES_TIME_NEVER

static void assert_verdict(nres_verdict_t v, int kind, int flags,
                           int32_t code, nres_time_t retry_after) {
  assert_int_equal(v.kind, kind);
  assert_int_equal(v.flags, flags);
  assert_int_equal(v.code, code);
  assert_int_equal(v.retry_after, retry_after);
  assert_int_equal(v.reserved_, 0);
}

static void errno_zero_is_ok(void **unused) {
  (void) unused;
  assert_verdict(nres_classify_errno(0), NRES_OK, 0, 0, 0);
}

static void errno_timeout_is_transient_and_flagged(void **unused) {
  (void) unused;
  assert_verdict(nres_classify_errno(-ETIMEDOUT), NRES_TRANSIENT,
                 NRES_VF_TIMEOUT, -ETIMEDOUT, 0);
  /* the nres code mirrors the POSIX one */
  assert_int_equal(nres_classify_errno(NRES_ETIMEDOUT).kind, NRES_TRANSIENT);
}

static void errno_network_failures_are_transient(void **unused) {
  const int transient[] = { ECONNREFUSED, ECONNRESET, ECONNABORTED,
                            EHOSTUNREACH, ENETUNREACH, ENETDOWN, ENETRESET,
                            EPIPE, EAGAIN, EINTR, ENOTCONN, EADDRNOTAVAIL };
  (void) unused;
  for (size_t i = 0; i < sizeof(transient) / sizeof(*transient); i++)
    assert_verdict(nres_classify_errno(-transient[i]), NRES_TRANSIENT, 0,
                   -transient[i], 0);
  assert_int_equal(nres_classify_errno(NRES_EAGAIN).kind, NRES_TRANSIENT);
}

static void errno_canceled_is_canceled(void **unused) {
  (void) unused;
  assert_verdict(nres_classify_errno(-ECANCELED), NRES_CANCELED, 0,
                 -ECANCELED, 0);
  assert_int_equal(nres_classify_errno(NRES_ECANCELED).kind, NRES_CANCELED);
}

static void errno_anything_else_is_permanent(void **unused) {
  const int permanent[] = { -ENOENT, -EACCES, -EPERM, -EINVAL, -ENOMEM,
                            -EBADF, -ENOSPC, -EPROTO, -4095, -1007,
                            INT32_MIN,
                            /* positive: errno passed unnegated (misuse) */
                            ETIMEDOUT, ECONNRESET, 1, INT32_MAX };
  (void) unused;
  for (size_t i = 0; i < sizeof(permanent) / sizeof(*permanent); i++)
    assert_verdict(nres_classify_errno(permanent[i]), NRES_PERMANENT, 0,
                   permanent[i], 0);
}

static void errno_rules_are_the_table_behind_classify_errno(void **unused) {
  size_t n = 0;
  const nres_rule_t *rules = nres_errno_rules(&n);
  (void) unused;
  assert_non_null(rules);
  assert_int_equal(n, 15);   /* 0, ETIMEDOUT, 12 transient, ECANCELED */
  assert_ptr_equal(nres_errno_rules(NULL), rules);
  for (int32_t code = -200; code <= 5; code++) {
    nres_verdict_t a = nres_classify_errno(code);
    nres_verdict_t b = nres_classify_code(rules, n, code, NRES_PERMANENT);
    assert_memory_equal(&a, &b, sizeof(a));
  }
}

static void http_success_and_redirects_are_ok(void **unused) {
  const int ok[] = { 100, 101, 199, 200, 201, 204, 299, 301, 302, 304, 399 };
  (void) unused;
  for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
    assert_verdict(nres_classify_http(ok[i], NEVER), NRES_OK, 0, ok[i], 0);
    /* a Retry-After on a success means nothing */
    assert_verdict(nres_classify_http(ok[i], NRES_SEC), NRES_OK, 0, ok[i], 0);
  }
}

static void http_client_errors_are_ok_but_408_and_429(void **unused) {
  const int ok[] = { 400, 401, 403, 404, 407, 409, 422, 428, 430, 499 };
  (void) unused;
  for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
    assert_verdict(nres_classify_http(ok[i], NEVER), NRES_OK, 0, ok[i], 0);
    assert_verdict(nres_classify_http(ok[i], NRES_SEC), NRES_OK, 0, ok[i], 0);
  }
  assert_verdict(nres_classify_http(408, NEVER), NRES_TRANSIENT, 0, 408, 0);
  /* Retry-After on a 408 does not make it throttling */
  assert_verdict(nres_classify_http(408, NRES_SEC), NRES_TRANSIENT, 0, 408,
                 0);
}

static void http_429_is_throttled_with_or_without_retry_after(void **unused) {
  (void) unused;
  assert_verdict(nres_classify_http(429, NEVER), NRES_THROTTLED, 0, 429, 0);
  assert_verdict(nres_classify_http(429, 5 * NRES_SEC), NRES_THROTTLED,
                 NRES_VF_RETRY_AFTER, 429, 5 * NRES_SEC);
  /* "Retry-After: 0" is a value, not an absence */
  assert_verdict(nres_classify_http(429, 0), NRES_THROTTLED,
                 NRES_VF_RETRY_AFTER, 429, 0);
  assert_verdict(nres_classify_http(429, NEVER - 1), NRES_THROTTLED,
                 NRES_VF_RETRY_AFTER, 429, NEVER - 1);
}

static void http_5xx_are_transient(void **unused) {
  const int transient[] = { 500, 501, 502, 504, 507, 599 };
  (void) unused;
  for (size_t i = 0; i < sizeof(transient) / sizeof(*transient); i++) {
    assert_verdict(nres_classify_http(transient[i], NEVER), NRES_TRANSIENT, 0,
                   transient[i], 0);
    /* only 503 turns a Retry-After into throttling */
    assert_verdict(nres_classify_http(transient[i], NRES_SEC), NRES_TRANSIENT,
                   0, transient[i], 0);
  }
}

static void http_503_is_throttled_only_with_retry_after(void **unused) {
  (void) unused;
  assert_verdict(nres_classify_http(503, NEVER), NRES_TRANSIENT, 0, 503, 0);
  assert_verdict(nres_classify_http(503, 120 * NRES_SEC), NRES_THROTTLED,
                 NRES_VF_RETRY_AFTER, 503, 120 * NRES_SEC);
  assert_verdict(nres_classify_http(503, 0), NRES_THROTTLED,
                 NRES_VF_RETRY_AFTER, 503, 0);
}

static void http_outside_100_to_599_is_permanent(void **unused) {
  const int bad[] = { 0, -1, 1, 99, 600, 999, 1000, INT32_MIN, INT32_MAX };
  (void) unused;
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
    assert_verdict(nres_classify_http(bad[i], NEVER), NRES_PERMANENT, 0,
                   bad[i], 0);
    assert_verdict(nres_classify_http(bad[i], NRES_SEC), NRES_PERMANENT, 0,
                   bad[i], 0);
  }
}

static void http_rules_are_the_table_behind_classify_http(void **unused) {
  size_t n = 0;
  const nres_rule_t *rules = nres_http_rules(&n);
  (void) unused;
  assert_non_null(rules);
  assert_true(n > 0);
  assert_ptr_equal(nres_http_rules(NULL), rules);
  for (int32_t code = -5; code <= 700; code++) {
    nres_verdict_t a = nres_classify_http(code, NEVER);
    nres_verdict_t b = nres_classify_code(rules, n, code, NRES_PERMANENT);
    assert_memory_equal(&a, &b, sizeof(a));
  }
}

static void custom_rules_first_match_wins(void **unused) {
  const nres_rule_t rules[] = {
    { 10, 19, NRES_THROTTLED, NRES_VF_SELF },
    { 15, 15, NRES_OK, 0 },           /* shadowed by the rule above */
    { 0, 100, NRES_TRANSIENT, NRES_VF_TIMEOUT },
    { INT32_MIN, INT32_MIN, NRES_CANCELED, 0 },
  };
  const size_t n = sizeof(rules) / sizeof(*rules);
  (void) unused;
  assert_verdict(nres_classify_code(rules, n, 10, NRES_OK), NRES_THROTTLED,
                 NRES_VF_SELF, 10, 0);
  assert_verdict(nres_classify_code(rules, n, 15, NRES_OK), NRES_THROTTLED,
                 NRES_VF_SELF, 15, 0);
  assert_verdict(nres_classify_code(rules, n, 19, NRES_OK), NRES_THROTTLED,
                 NRES_VF_SELF, 19, 0);
  assert_verdict(nres_classify_code(rules, n, 9, NRES_OK), NRES_TRANSIENT,
                 NRES_VF_TIMEOUT, 9, 0);
  assert_verdict(nres_classify_code(rules, n, 20, NRES_OK), NRES_TRANSIENT,
                 NRES_VF_TIMEOUT, 20, 0);
  assert_verdict(nres_classify_code(rules, n, 100, NRES_OK), NRES_TRANSIENT,
                 NRES_VF_TIMEOUT, 100, 0);
  assert_verdict(nres_classify_code(rules, n, INT32_MIN, NRES_OK),
                 NRES_CANCELED, 0, INT32_MIN, 0);
  /* only the first `count` rules are searched */
  assert_verdict(nres_classify_code(rules, 1, 50, NRES_OK), NRES_OK, 0, 50,
                 0);
}

static void custom_rules_fall_back_when_nothing_matches(void **unused) {
  const nres_rule_t rules[] = { { 1, 5, NRES_TRANSIENT, 0 } };
  (void) unused;
  for (int k = NRES_OK; k < NRES_VERDICT_COUNT; k++) {
    assert_verdict(nres_classify_code(rules, 1, 6, k), k, 0, 6, 0);
    assert_verdict(nres_classify_code(rules, 1, 0, k), k, 0, 0, 0);
    assert_verdict(nres_classify_code(rules, 0, 3, k), k, 0, 3, 0);
    assert_verdict(nres_classify_code(NULL, 7, 3, k), k, 0, 3, 0);
  }
  /* an empty range (lo > hi) matches nothing */
  const nres_rule_t empty[] = { { 5, 1, NRES_OK, 0 } };
  assert_verdict(nres_classify_code(empty, 1, 3, NRES_TRANSIENT),
                 NRES_TRANSIENT, 0, 3, 0);
}

static void out_of_range_kinds_never_leave_the_classifier(void **unused) {
  const nres_rule_t rules[] = {
    { 1, 1, NRES_VERDICT_COUNT, 0 },
    { 2, 2, 200, 0 },
    /* a rule cannot carry a Retry-After value, so not its flag either */
    { 3, 3, NRES_THROTTLED, NRES_VF_RETRY_AFTER | NRES_VF_SELF },
  };
  (void) unused;
  assert_verdict(nres_classify_code(rules, 3, 1, NRES_OK), NRES_PERMANENT, 0,
                 1, 0);
  assert_verdict(nres_classify_code(rules, 3, 2, NRES_OK), NRES_PERMANENT, 0,
                 2, 0);
  assert_verdict(nres_classify_code(rules, 3, 3, NRES_OK), NRES_THROTTLED,
                 NRES_VF_SELF, 3, 0);
  assert_verdict(nres_classify_code(rules, 3, 9, NRES_VERDICT_COUNT),
                 NRES_PERMANENT, 0, 9, 0);
  assert_verdict(nres_classify_code(rules, 3, 9, -1), NRES_PERMANENT, 0, 9,
                 0);
}

static void verdict_names_are_stable(void **unused) {
  (void) unused;
  assert_string_equal(nres_verdict_name(NRES_OK), "ok");
  assert_string_equal(nres_verdict_name(NRES_TRANSIENT), "transient");
  assert_string_equal(nres_verdict_name(NRES_THROTTLED), "throttled");
  assert_string_equal(nres_verdict_name(NRES_PERMANENT), "permanent");
  assert_string_equal(nres_verdict_name(NRES_CANCELED), "canceled");
  assert_string_equal(nres_verdict_name(NRES_VERDICT_COUNT), "unknown");
  assert_string_equal(nres_verdict_name(-1), "unknown");
  assert_string_equal(nres_verdict_name(255), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(errno_zero_is_ok),
    cmocka_unit_test(errno_timeout_is_transient_and_flagged),
    cmocka_unit_test(errno_network_failures_are_transient),
    cmocka_unit_test(errno_canceled_is_canceled),
    cmocka_unit_test(errno_anything_else_is_permanent),
    cmocka_unit_test(errno_rules_are_the_table_behind_classify_errno),
    cmocka_unit_test(http_success_and_redirects_are_ok),
    cmocka_unit_test(http_client_errors_are_ok_but_408_and_429),
    cmocka_unit_test(http_429_is_throttled_with_or_without_retry_after),
    cmocka_unit_test(http_5xx_are_transient),
    cmocka_unit_test(http_503_is_throttled_only_with_retry_after),
    cmocka_unit_test(http_outside_100_to_599_is_permanent),
    cmocka_unit_test(http_rules_are_the_table_behind_classify_http),
    cmocka_unit_test(custom_rules_first_match_wins),
    cmocka_unit_test(custom_rules_fall_back_when_nothing_matches),
    cmocka_unit_test(out_of_range_kinds_never_leave_the_classifier),
    cmocka_unit_test(verdict_names_are_stable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

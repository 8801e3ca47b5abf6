/* SPDX-License-Identifier: MIT */
/* test_control.c - the control API in C (runtime/src/gateway/control_api.c
 * and its JSON reader, json.c; keys as text, keytext.c): the operations
 * the Lua handler and the nginx module's nres_control share, checked
 * fully before anything changes, and a strict reader of flat JSON
 * objects. */
#include "nres_test.h"
#include "nres/gateway.h"
#include "gateway/json.h"
#include "gateway/keytext.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SEC 1000000000ull

/* ------------------------------------------------------------ JSON */

static nres__json_object_t o;

static int rd(const char *s) {
  return nres__json_read(&o, s, strlen(s));
}

static void test_json_reads_a_flat_object(void **state) {
  (void)state;
  assert_int_equal(rd(" {\"action\" : \"drain\",\"on\":true,\"off\":false,"
                      "\"rate\":-12.5e1, \"n\":0}\n"), 0);
  assert_int_equal(o.n, 5);
  const nres__json_field_t *f = nres__json_get(&o, "action");
  assert_non_null(f);
  assert_int_equal(f->type, NRES__JSON_STRING);
  assert_string_equal(f->str, "drain");
  assert_true(nres__json_get(&o, "on")->on == 1);
  assert_true(nres__json_get(&o, "off")->on == 0);
  assert_true(nres__json_get(&o, "rate")->num == -125);
  assert_true(nres__json_get(&o, "n")->num == 0);
  assert_null(nres__json_get(&o, "nope"));
  assert_int_equal(rd("{}"), 0);
  assert_int_equal(o.n, 0);
  /* escapes, \u with a surrogate pair, raw UTF-8 */
  assert_int_equal(rd("{\"k\":\"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\xc3\xa9\"}"), 0);
  f = nres__json_get(&o, "k");
  assert_int_equal(f->len, 15);
  assert_memory_equal(f->str, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9", 15);
}

static void test_json_refuses_what_is_not_a_flat_object(void **state) {
  (void)state;
  static const char *bad[] = {
    "", "[]", "null", "\"x\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}",
    "{\"a\":1}x", "{\"a\":1}{}", "{\"a\":{}}", "{\"a\":[1]}", "{\"a\":null}",
    "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":+1}", "{\"a\":1e999}",
    "{\"a\":tru}", "{\"a\":True}", "{a:1}", "{'a':1}", "{\"a\":\"\x01\"}",
    "{\"a\":\"\\x41\"}", "{\"a\":\"\\u00\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
    "{\"a\":\"\\u0000\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}",
    "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xe2\x82\"}", "{\"a\":1,\"a\":2}",
    "{\"a\":\"unterminated}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (rd(bad[i]) != NRES_EINVAL)
      fail_msg("accepted: %s", bad[i]);
    assert_int_equal(o.n, 0);
    assert_true(strstr(o.err, "expected") != NULL);
  }
  /* the reason names the byte it stopped at */
  assert_int_equal(rd("{\"a\" 1}"), NRES_EINVAL);
  assert_string_equal(o.err, "expected ':', got '1' at byte 5");
  /* bounded: bytes and fields */
  char big[NRES__JSON_MAX + 16];
  memset(big, ' ', sizeof big);
  memcpy(big, "{}", 2);
  assert_int_equal(nres__json_read(&o, big, NRES__JSON_MAX), 0);
  assert_int_equal(nres__json_read(&o, big, NRES__JSON_MAX + 1), NRES_EINVAL);
  char many[512] = "{";
  for (int i = 0; i <= NRES__JSON_FIELDS; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"f%d\":%d", i ? "," : "", i,
             i);
  strcat(many, "}");
  assert_int_equal(rd(many), NRES_EINVAL);
  assert_true(strstr(o.err, "at most 16 fields") != NULL);
  assert_int_equal(nres__json_read(&o, NULL, 0), NRES_EINVAL);
}

/* ------------------------------------------------------------ key text */

static void test_key_text(void **state) {
  (void)state;
  char out[80];
  assert_int_equal(nres__key_text("backend", 7, NRES__KEY_ANY, out, sizeof out), 7);
  assert_string_equal(out, "backend");
  nres__key_text("\x7f\x00\x00\x02", 4, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "127.0.0.2");
  static const unsigned char v6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 7 };
  nres__key_text((const char *)v6, 16, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "2001:db8::7");
  static const unsigned char one[16] = { [15] = 1 };
  nres__key_text((const char *)one, 16, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "::1");
  static const unsigned char mapped[16] = { [10] = 0xff, [11] = 0xff, [12] = 10, [15] = 1 };
  nres__key_text((const char *)mapped, 16, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "::ffff:10.0.0.1");
  /* clean text stays text, even 4 bytes long, unless the keys are addresses */
  nres__key_text("abcd", 4, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "abcd");
  nres__key_text("abcd", 4, NRES__KEY_ADDRESS, out, sizeof out);
  assert_string_equal(out, "97.98.99.100");
  nres__key_text("a\\\x01", 3, NRES__KEY_ANY, out, sizeof out);
  assert_string_equal(out, "a\\x5c\\x01");
  /* cut, never overrun */
  assert_int_equal(nres__key_text("backend", 7, NRES__KEY_ANY, out, 4), 7);
  assert_string_equal(out, "bac");
}

/* ---------------------------------------------------------- operations */

typedef struct {
  nres_shm_t *scope, *peers, *clients;
  nres_estimator_t est[8];
  nres_gw_control_t scope_ctl, limiter_ctl, peer_ctl[8];
  nres_gw_upstream_t *u;
  nres_gw_limiter_t *l;
  nres_gw_scope_t *s;
} fixture_t;

static fixture_t F;
static char answer[NRES_GW_CONTROL_ANSWER_MAX], what[1024];

static int setup(void **state) {
  (void)state;
  memset(&F, 0, sizeof F);
  nres_gw_registry_clear();
  nres_shm_config_t sc;
  nres_shm_config_init(&sc);
  sc.slots = 8;
  sc.flags = NRES_SHM_BREAKER;
  assert_int_equal(nres_shm_new(&sc, &F.scope), 0);
  nres_shm_config_t pc = sc;
  assert_int_equal(nres_shm_new(&pc, &F.peers), 0);
  nres_shm_config_t lc;
  nres_shm_config_init(&lc);
  lc.slots = 8;
  lc.flags = NRES_SHM_RATELIMIT;
  lc.rate = 5;
  lc.burst = 2;
  assert_int_equal(nres_shm_new(&lc, &F.clients), 0);
  static const char *names[] = { "10.0.0.1:80", "10.0.0.2:80" };
  uint32_t slots[2];
  for (int i = 0; i < 2; i++) {
    int idx = nres_shm_acquire(F.peers, names[i], strlen(names[i]), 1, NRES_TIME_NEVER, NULL);
    assert_true(idx >= 0);
    slots[i] = (uint32_t)idx;
  }
  for (int i = 0; i < 8; i++)
    nres_estimator_init(&F.est[i], SEC);
  nres_gw_config_t cfg = {
    .name = "backend", .key = "backend", .scope = F.scope, .peers = F.peers,
    .estimators = F.est, .peer_names = names, .peer_slots = slots, .npeers = 2,
    .attempts = 2, .deadline = 10 * SEC, .attempt_timeout = 2 * SEC, .hold = 60 * SEC,
    .choice = NRES_GW_P2C, .panic = 0.5, .budget = 1, .breaker = 1,
    .control = &F.scope_ctl, .peer_controls = F.peer_ctl };
  F.u = nres_gw_upstream_new(&cfg);
  assert_non_null(F.u);
  nres_gw_register(F.u);
  F.l = nres_gw_limiter_new("clients", F.clients, 60 * SEC);
  assert_non_null(F.l);
  F.l->control = &F.limiter_ctl;
  nres_gw_limiter_register(F.l);
  F.s = nres_gw_scope_new("upstreams", F.scope, &F.scope_ctl, 1);
  assert_non_null(F.s);
  nres_gw_scope_register(F.s);
  /* the upstream's key in the scope, as a first request puts it there */
  assert_true(nres_shm_acquire(F.scope, "backend", 7, 1, 60 * SEC, NULL) >= 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nres_gw_scope_free(F.s);
  nres_gw_limiter_free(F.l);
  nres_gw_upstream_free(F.u);
  nres_shm_free(F.scope);
  nres_shm_free(F.peers);
  nres_shm_free(F.clients);
  return 0;
}

static int op(const char *json) {
  return nres_gw_control_apply(json, strlen(json), 2 * SEC, answer, sizeof answer, what,
                               sizeof what);
}

#define EXPECT(status, json, text)                                                      \
  do {                                                                                  \
    int rc_ = op(json);                                                                 \
    if (rc_ != (status) || strcmp(what, (text)) != 0)                                   \
      fail_msg("%s: %d %s, expected %d %s", (json), rc_, what, (status), (text));       \
  } while (0)

static void test_refusals_change_nothing(void **state) {
  (void)state;
  char before[2048], after[2048];
  nres_gw_control_state(before, sizeof before);
  EXPECT(400, "not json", "body: expected '{', got 'n' at byte 0");
  EXPECT(400, "{\"action\":\"explode\"}",
         "action: expected one of close, drain, dry_run, eject, isolate, rate, reset, restore,"
         " weight, got \"explode\"");
  EXPECT(400, "{\"action\":\"isolate\",\"upstream\":\"backend\",\"color\":\"red\"}",
         "color: expected no such field for isolate (fields: scope, key, upstream), got \"red\"");
  EXPECT(404, "{\"action\":\"isolate\",\"upstream\":\"nope\"}",
         "upstream: expected one of backend, got \"nope\"");
  EXPECT(400, "{\"action\":\"isolate\",\"upstream\":\"backend\",\"scope\":\"upstreams\"}",
         "upstream: expected either upstream or scope and key, got \"backend\"");
  EXPECT(404, "{\"action\":\"isolate\",\"scope\":\"other\",\"key\":\"k\"}",
         "scope: expected one of upstreams, got \"other\"");
  EXPECT(404, "{\"action\":\"isolate\",\"scope\":\"upstreams\",\"key\":\"nope\"}",
         "key: expected a key scope upstreams holds now, got \"nope\"");
  EXPECT(400, "{\"action\":\"isolate\",\"scope\":\"upstreams\",\"key\":5}",
         "key: expected a key of the scope (a string), got 5");
  EXPECT(404, "{\"action\":\"drain\",\"upstream\":\"backend\",\"peer\":\"10.0.0.9:80\"}",
         "peer: expected one of 10.0.0.1:80, 10.0.0.2:80, got \"10.0.0.9:80\"");
  EXPECT(400, "{\"action\":\"weight\",\"upstream\":\"backend\",\"peer\":\"10.0.0.1:80\","
              "\"weight\":0.5}", "weight: expected an integer 1..10000, got 0.5");
  EXPECT(400, "{\"action\":\"rate\",\"limiter\":\"clients\",\"rate\":-1}",
         "rate: expected admissions per second, > 0 and at most 1e9, got -1");
  EXPECT(400, "{\"action\":\"rate\",\"limiter\":\"clients\",\"rate\":5,\"burst\":0.5}",
         "burst: expected an integer 1..1e6, got 0.5");
  EXPECT(404, "{\"action\":\"rate\",\"limiter\":\"x\",\"rate\":5}",
         "limiter: expected one of clients, got \"x\"");
  EXPECT(400, "{\"action\":\"dry_run\",\"scope\":\"upstreams\",\"on\":\"yes\"}",
         "on: expected true or false, got \"yes\"");
  EXPECT(400, "{\"action\":\"dry_run\",\"on\":true}", "scope: expected either scope or limiter, got nil");
  assert_string_equal(answer, "{\"error\":\"scope: expected either scope or limiter, got nil\"}");
  /* a long value cut inside a character: the answer stays valid UTF-8
   * JSON (found by fuzz_control_json) */
  char longop[700] = "{\"action\":\"x";   /* the cut falls inside the 85th */
  for (int i = 0; i < 200; i++)
    strcat(longop, "\xe2\x82\xac");   /* U+20AC, 3 bytes each */
  strcat(longop, "\"}");
  assert_int_equal(op(longop), 400);
  assert_int_equal(nres__json_read(&o, answer, strlen(answer)), 0);
  assert_non_null(nres__json_get(&o, "error"));
  nres_gw_control_state(after, sizeof after);
  assert_string_equal(before, after);
  assert_int_equal(nres_breaker_state(&nres_shm_slot(F.scope, 0)->breaker, 2 * SEC) +
                   nres_breaker_state(F.u->peer[0].breaker, 2 * SEC), 0);
}

static void test_operations(void **state) {
  (void)state;
  EXPECT(200, "{\"action\":\"isolate\",\"upstream\":\"backend\"}",
         "scope upstreams key backend: breaker isolate (was closed, now isolated)");
  assert_string_equal(answer, "{\"changed\":\"scope upstreams key backend: breaker isolate "
                              "(was closed, now isolated)\",\"state\":\"isolated\","
                              "\"was\":\"closed\"}");
  EXPECT(200, "{\"action\":\"close\",\"scope\":\"upstreams\",\"key\":\"backend\"}",
         "scope upstreams key backend: breaker close (was isolated, now closed)");
  EXPECT(200, "{\"action\":\"drain\",\"upstream\":\"backend\",\"peer\":\"10.0.0.1:80\"}",
         "upstream backend peer 10.0.0.1:80: drained (was closed, now closed, drained)");
  assert_true(F.peer_ctl[F.u->peer[0].slot].flags & NRES_GW_DRAIN);
  EXPECT(409, "{\"action\":\"drain\",\"upstream\":\"backend\",\"peer\":\"10.0.0.2:80\"}",
         "peer: expected a peer whose upstream keeps another one not drained, got "
         "\"10.0.0.2:80\"");
  EXPECT(200, "{\"action\":\"eject\",\"upstream\":\"backend\",\"peer\":\"10.0.0.2:80\"}",
         "upstream backend peer 10.0.0.2:80: ejected (was closed, now isolated)");
  EXPECT(200, "{\"action\":\"restore\",\"upstream\":\"backend\",\"peer\":\"10.0.0.2:80\"}",
         "upstream backend peer 10.0.0.2:80: restored (was isolated, now closed)");
  EXPECT(200, "{\"action\":\"weight\",\"upstream\":\"backend\",\"peer\":\"10.0.0.2:80\","
              "\"weight\":3}", "upstream backend peer 10.0.0.2:80: weight 3 (was 1)");
  EXPECT(200, "{\"action\":\"rate\",\"limiter\":\"clients\",\"rate\":1000,\"burst\":50}",
         "limiter clients: rate 1000/s burst 50 (was 5/s burst 2)");
  EXPECT(200, "{\"action\":\"rate\",\"limiter\":\"clients\",\"rate\":0.5}",
         "limiter clients: rate 0.5/s burst 50 (was 1000/s burst 50)");
  EXPECT(200, "{\"action\":\"dry_run\",\"limiter\":\"clients\",\"on\":true}",
         "limiter clients: dry-run on (was off)");
  EXPECT(200, "{\"action\":\"dry_run\",\"scope\":\"upstreams\",\"on\":true}",
         "scope upstreams: dry-run on (was off)");
  char st[2048];
  nres_gw_control_state(st, sizeof st);
  assert_string_equal(st,
    "{\"scopes\":{\"upstreams\":{\"dry_run\":true,\"would_refuse\":{}}},"
    "\"limiters\":{\"clients\":{\"dry_run\":true,\"would_refuse\":{},\"rate\":0.5,\"burst\":50}},"
    "\"upstreams\":{\"backend\":{\"drained\":[\"10.0.0.1:80\"],"
    "\"weights\":{\"10.0.0.1:80\":1,\"10.0.0.2:80\":3}}}}");
  /* cut, never overrun; the full length told */
  assert_int_equal(nres_gw_control_state(st, 10), strlen(
    "{\"scopes\":{\"upstreams\":{\"dry_run\":true,\"would_refuse\":{}}},"
    "\"limiters\":{\"clients\":{\"dry_run\":true,\"would_refuse\":{},\"rate\":0.5,\"burst\":50}},"
    "\"upstreams\":{\"backend\":{\"drained\":[\"10.0.0.1:80\"],"
    "\"weights\":{\"10.0.0.1:80\":1,\"10.0.0.2:80\":3}}}}"));
  assert_int_equal(strlen(st), 9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_json_reads_a_flat_object),
    cmocka_unit_test(test_json_refuses_what_is_not_a_flat_object),
    cmocka_unit_test(test_key_text),
    cmocka_unit_test_setup_teardown(test_refusals_change_nothing, setup, teardown),
    cmocka_unit_test_setup_teardown(test_operations, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

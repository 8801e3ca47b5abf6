/* SPDX-License-Identifier: MIT */
/* test_http.c - the HTTP client handler against the dependency server (on a
 * thread of this process): verdicts end to end for every status family,
 * Retry-After, per-attempt timeouts against /slow, a reset mid-response,
 * keep-alive reuse with a flat connection count, the stale pooled
 * connection, X-Deadline-Ms, idempotency, per-host breaker and budget,
 * the pool limit, cancel, misuse, and 10,000 requests with no allocation
 * in steady state (run under ASan by spec/run). Interim 1xx answers come
 * from a scripted raw server on a thread (the dependency server sends
 * none), and the socketless response parser entry is fed directly.
 *
 * Each test runs its own loop and client and ends by closing them and
 * proving the loop has nothing left (uv_loop_close returns 0).
 */
#include <poll.h>
#include <stdatomic.h>
#include <string.h>

#define NRES_TEST_INTERPOSE_MALLOC
#include "nres_test.h"
#include "nres/http.h"
#include "exec/http_int.h"
#include "http_fixture.h"

static test_server_t server;

typedef struct {
  uv_loop_t loop;
  nres_http_client_t client;
  nres_policy_t policy;
  int done, status, closed;
  char url[256];
} fx_t;

static int group_setup(void **state) {
  (void) state;
  return test_server_start(&server, NULL);
}

static int group_teardown(void **state) {
  (void) state;
  test_server_stop(&server);
  return 0;
}

static fx_t *fx_new(int preset, const nres_http_config_t *cfg) {
  fx_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  assert_int_equal(nres_http_client_init(&f->loop, &f->client, cfg), 0);
  f->client.data = f;
  assert_int_equal(nres_policy_init(&f->policy, preset), 0);
  return f;
}

static void on_client_closed(nres_http_client_t *client) {
  ((fx_t *) client->data)->closed = 1;
}

static void on_req_closed(nres_http_req_t *req) {
  (void) req;
}

static void fx_free(fx_t *f) {
  assert_int_equal(nres_http_client_close(&f->client, on_client_closed), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->closed, 1);
  assert_int_equal(f->client.open, 0);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f);
}

static void on_done(nres_http_req_t *req, int status) {
  fx_t *f = req->data;
  f->done++;
  f->status = status;
}

static const char *url(fx_t *f, const char *path) {
  snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d%s", server.port, path);
  return f->url;
}

/* Run one request to completion; returns the callback's status. */
static int run1(fx_t *f, nres_http_req_t *req, const char *path) {
  int before = f->done;
  req->url = url(f, path);
  req->data = f;
  assert_int_equal(nres_http_start(req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, before + 1);
  return f->status;
}

static void req_close(fx_t *f, nres_http_req_t *req) {
  nres_http_req_close(req, on_req_closed);
  uv_run(&f->loop, UV_RUN_DEFAULT);
}

/* A trivial policy: 3 attempts, no waits, nothing shared. */
static void trivial(fx_t *f) {
  nres_policy_init(&f->policy, NRES_PRESET_TRIVIAL);
  assert_int_equal(nres_policy_build(&f->policy), 0);
}

/* ------------------------------------------------------------- verdicts */

static void test_echo_body(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  char body[2];
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  assert_int_equal(run1(f, &req, "/echo"), 0);
  assert_int_equal(req.status_code, 200);
  assert_int_equal(req.attempts, 1);
  assert_int_equal(req.stop, NRES_STOP_OK);
  assert_int_equal(req.resp_len, 3);
  assert_int_equal(req.resp_copied, 0);   /* no buffer given */
  req.resp_body = body;
  req.resp_cap = sizeof(body);
  assert_int_equal(run1(f, &req, "/echo"), 0);
  assert_int_equal(req.resp_len, 3);
  assert_int_equal(req.resp_copied, 2);
  assert_memory_equal(body, "ok", 2);
  req_close(f, &req);
  fx_free(f);
}

/* Every status family through the wire: what comes back, how often it was
 * tried, and why it stopped. */
static void test_status_families(void **state) {
  static const struct {
    const char *path;
    int code, attempts, stop, kind;
  } t[] = {
    { "/status?code=200", 200, 1, NRES_STOP_OK, NRES_OK },
    { "/status?code=204", 204, 1, NRES_STOP_OK, NRES_OK },
    { "/status?code=302", 302, 1, NRES_STOP_OK, NRES_OK },
    { "/status?code=304", 304, 1, NRES_STOP_OK, NRES_OK },
    { "/status?code=404", 404, 1, NRES_STOP_OK, NRES_OK },
    { "/status?code=408", 408, 3, NRES_STOP_ATTEMPTS, NRES_TRANSIENT },
    { "/status?code=429", 429, 3, NRES_STOP_ATTEMPTS, NRES_THROTTLED },
    { "/status?code=500", 500, 3, NRES_STOP_ATTEMPTS, NRES_TRANSIENT },
    { "/status?code=503", 503, 3, NRES_STOP_ATTEMPTS, NRES_TRANSIENT },
    { "/status?code=599", 599, 3, NRES_STOP_ATTEMPTS, NRES_TRANSIENT },
    { "/status?code=600", 600, 1, NRES_STOP_PERMANENT, NRES_PERMANENT },
    { "/status?code=999", 999, 1, NRES_STOP_PERMANENT, NRES_PERMANENT },
    { "/throttle?after=0", 429, 3, NRES_STOP_ATTEMPTS, NRES_THROTTLED },
    { "/throttle?status=503&after=0", 503, 3, NRES_STOP_ATTEMPTS, NRES_THROTTLED },
    { "/throttle?status=503&ra=garbage", 503, 3, NRES_STOP_ATTEMPTS, NRES_TRANSIENT },
  };
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  size_t i;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    int st = run1(f, &req, t[i].path);
    const nres_call_t *call = &req.uv_.call;
    if (req.status_code != t[i].code || (int) req.attempts != t[i].attempts ||
        (int) req.stop != t[i].stop || call->last.kind != t[i].kind)
      fail_msg("%s: code %d attempts %u stop %s verdict %s", t[i].path,
               req.status_code, req.attempts, nres_stop_name((int) req.stop),
               nres_verdict_name(call->last.kind));
    assert_int_equal(st, nres_stop_error(t[i].stop));
    assert_int_equal(req.error, 0);
    assert_int_equal(call->last.code, t[i].code);
  }
  req_close(f, &req);
  fx_free(f);
}

static void test_retry_after_values(void **state) {
  fx_t *f = fx_new(NRES_PRESET_DEFAULT, NULL);
  nres_http_req_t req;
  (void) state;

  f->policy.deadline = 5 * NRES_SEC;
  f->policy.attempt_timeout = 2 * NRES_SEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  /* seconds */
  run1(f, &req, "/throttle?after=30");
  assert_int_equal(req.retry_after, 30 * NRES_SEC);
  /* a wait past the deadline is not waited: one attempt, stopped */
  assert_int_equal(req.attempts, 1);
  assert_int_equal(req.uv_.call.last.retry_after, 30 * NRES_SEC);
  assert_true(req.uv_.call.last.flags & NRES_VF_RETRY_AFTER);
  assert_true(req.stop == NRES_STOP_DEADLINE);
  /* an HTTP-date */
  run1(f, &req, "/throttle?after=60&form=date");
  assert_true(req.retry_after <= 60 * NRES_SEC &&
              req.retry_after >= 55 * NRES_SEC);
  assert_int_equal(req.attempts, 1);
  /* huge: saturated, still a clean stop */
  run1(f, &req, "/throttle?ra=99999999999999999999999999");
  assert_int_equal(req.retry_after, NRES_HTTP_RETRY_AFTER_MAX);
  assert_int_equal(req.attempts, 1);
  assert_int_equal(req.stop, NRES_STOP_DEADLINE);
  /* garbage: as if absent, so a 429 uses throttled_base (1 s, jittered
   * 0..1 s... capped by the deadline) */
  run1(f, &req, "/throttle?status=503&ra=tomorrow");
  assert_int_equal(req.retry_after, NRES_TIME_NEVER);
  assert_int_equal(req.uv_.call.log[0].kind, NRES_TRANSIENT);
  req_close(f, &req);
  fx_free(f);
}

/* -------------------------------------------------------- transport */

static void test_attempt_timeout_slow(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  nres_time_t t0;
  unsigned i;
  (void) state;

  f->policy.attempt_timeout = 60 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  raw_reset(server.port);
  t0 = nres_clock_now();
  assert_int_equal(run1(f, &req, "/slow?ms=400"), NRES_EATTEMPTS);
  assert_true(nres_clock_now() - t0 >= 3 * 60 * NRES_MSEC);
  assert_int_equal(req.attempts, 3);
  assert_int_equal(req.status_code, 0);
  for (i = 0; i < 3; i++) {
    const nres_attempt_rec_t *rec = nres_call_log(&req.uv_.call, i);
    assert_int_equal(rec->kind, NRES_TRANSIENT);
    assert_true(rec->flags & NRES_VF_TIMEOUT);
  }
  /* each timed-out connection was closed, none leaked */
  assert_int_equal(f->client.open, 0);
  assert_int_equal(f->client.connects, 3);
  /* the server saw the attempt's time left, at most the timeout */
  {
    long long d = stat_of(server.port, "\"last_deadline_ms\":");
    assert_true(d >= 0 && d <= 60);
  }
  /* a fast answer within the timeout is fine */
  assert_int_equal(run1(f, &req, "/slow?ms=5"), 0);
  assert_int_equal(req.attempts, 1);
  req_close(f, &req);
  fx_free(f);
}

static void test_reset_mid_response(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  assert_int_equal(run1(f, &req, "/truncate"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 3);
  assert_int_equal(req.error, UV_ECONNRESET);
  assert_int_equal(req.status_code, 0);
  assert_int_equal(req.uv_.call.last.kind, NRES_TRANSIENT);
  assert_int_equal(f->client.open, 0);
  /* the next request is unharmed */
  assert_int_equal(run1(f, &req, "/echo"), 0);
  req_close(f, &req);
  fx_free(f);
}

static void test_refused(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.url = "http://127.0.0.1:1/echo";   /* nothing listens on port 1 */
  req.data = f;
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, NRES_EATTEMPTS);
  assert_int_equal(req.error, UV_ECONNREFUSED);
  assert_int_equal(req.attempts, 3);
  req_close(f, &req);
  fx_free(f);
}

/* 1,000 sequential requests: one connection. Then 8 at a time for 100
 * rounds: the count stays at 8 after the first round. */
typedef struct {
  fx_t *f;
  nres_http_req_t req[8];
  int left;
  int failed;
} loop_t;

static void on_loop_done(nres_http_req_t *req, int status) {
  loop_t *l = req->data;
  if (status != 0 && status != NRES_EATTEMPTS)
    l->failed++;
  if (l->left > 0) {
    l->left--;
    if (nres_http_start(req, &l->f->policy, NRES_TIME_NEVER, on_loop_done) != 0)
      l->failed++;
  }
}

static void run_loop(loop_t *l, int width, int total, const char *path) {
  int i;
  l->left = total - width;
  for (i = 0; i < width; i++) {
    l->req[i].url = path;
    l->req[i].data = l;
    assert_int_equal(nres_http_start(&l->req[i], &l->f->policy,
                                     NRES_TIME_NEVER, on_loop_done), 0);
  }
  uv_run(&l->f->loop, UV_RUN_DEFAULT);
  assert_int_equal(l->left, 0);
}

static void test_keepalive_reuse(void **state) {
  loop_t *l = calloc(1, sizeof(*l));
  char path[128];
  int i;
  (void) state;

  l->f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  assert_int_equal(nres_policy_build(&l->f->policy), 0);
  for (i = 0; i < 8; i++)
    assert_int_equal(nres_http_req_init(&l->f->client, &l->req[i]), 0);
  snprintf(path, sizeof(path), "http://127.0.0.1:%d/echo", server.port);
  raw_reset(server.port);
  run_loop(l, 1, 1000, path);
  assert_int_equal(l->failed, 0);
  assert_int_equal(l->f->client.connects, 1);
  assert_int_equal(l->f->client.sent, 1000);
  assert_int_equal(l->f->client.reused, 999);
  run_loop(l, 8, 8, path);
  {
    uint64_t after_first = l->f->client.connects;
    if (after_first > 8)
      fail_msg("connects %llu resent %llu sent %llu", (unsigned long long) after_first,
               (unsigned long long) l->f->client.resent, (unsigned long long) l->f->client.sent);
    for (i = 0; i < 100; i++)
      run_loop(l, 8, 8, path);
    assert_int_equal(l->f->client.connects, after_first);   /* flat */
  }
  assert_int_equal(l->failed, 0);
  /* the server agrees: as many connections as the client opened (+1 for
   * this stats request) */
  assert_int_equal(stat_of(server.port, "\"accepted\":"),
                   (long long) l->f->client.connects + 1);
  assert_int_equal(stat_of(server.port, "\"echo\":"), 1000 + 8 + 800);
  for (i = 0; i < 8; i++)
    req_close(l->f, &l->req[i]);
  fx_free(l->f);
  free(l);
}

static void on_timer(uv_timer_t *t) {
  (void) t;
}

/* The server closes an idle pooled connection (idle_ms): the next request
 * still succeeds in one attempt, on a new connection. */
static void test_stale_pooled_connection(void **state) {
  nres_depserver_config_t cfg;
  test_server_t s;
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  uv_timer_t t;
  char u[128];
  int i;
  (void) state;

  nres_depserver_config_init(&cfg);
  cfg.idle_ms = 50;
  assert_int_equal(test_server_start(&s, &cfg), 0);
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  snprintf(u, sizeof(u), "http://127.0.0.1:%d/echo", s.port);
  req.url = u;
  req.data = f;
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, 0);
  /* until the server says it closed the idle one (bounded) */
  uv_timer_init(&f->loop, &t);
  for (i = 0; i < 250 && stat_of(s.port, "\"idle_timeouts\":") < 1; i++) {
    uv_timer_start(&t, on_timer, 20, 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
  }
  assert_true(i < 250);
  uv_close((uv_handle_t *) &t, NULL);
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, 0);
  assert_int_equal(req.attempts, 1);
  assert_int_equal(f->client.connects, 2);
  req_close(f, &req);
  fx_free(f);
  test_server_stop(&s);
}

/* ------------------------------------------------- headers and methods */

static void test_deadline_header(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  long long d;
  (void) state;

  f->policy.attempt_timeout = 1500 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  raw_reset(server.port);
  assert_int_equal(run1(f, &req, "/echo"), 0);
  d = stat_of(server.port, "\"last_deadline_ms\":");
  assert_true(d > 0 && d <= 1500);
  assert_int_equal(stat_of(server.port, "\"deadline_headers\":"), 1);
  /* an inherited deadline tightens it */
  req.url = url(f, "/echo");
  assert_int_equal(nres_http_start(&req, &f->policy,
                                   nres_clock_now() + 300 * NRES_MSEC, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  d = stat_of(server.port, "\"last_deadline_ms\":");
  assert_true(d >= 0 && d <= 300);
  /* turned off per request */
  req.flags = NRES_HTTP_NO_DEADLINE_HEADER;
  assert_int_equal(run1(f, &req, "/echo"), 0);
  assert_int_equal(stat_of(server.port, "\"deadline_headers\":"), 2);
  req.flags = 0;
  req_close(f, &req);
  /* a policy without time bounds sends none */
  trivial(f);
  f->policy.attempt_timeout = 0;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  assert_int_equal(run1(f, &req, "/echo"), 0);
  assert_int_equal(stat_of(server.port, "\"deadline_headers\":"), 2);
  req_close(f, &req);
  fx_free(f);
}

static void test_idempotency(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.body = "{\"a\":1}";
  req.body_len = 7;
  req.method = "POST";
  assert_int_equal(run1(f, &req, "/flaky?n=1"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 1);
  req.method = "PATCH";
  assert_int_equal(run1(f, &req, "/flaky?n=1"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 1);
  req.method = "POST";
  req.flags = NRES_HTTP_IDEMPOTENT;
  assert_int_equal(run1(f, &req, "/flaky?n=1"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 3);
  req.flags = 0;
  req.method = "PUT";
  assert_int_equal(run1(f, &req, "/flaky?n=1"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 3);
  req.method = "DELETE";
  assert_int_equal(run1(f, &req, "/flaky?n=1"), NRES_EATTEMPTS);
  assert_int_equal(req.attempts, 3);
  req.method = "POST";
  assert_int_equal(run1(f, &req, "/echo"), 0);   /* the body went through */
  req.method = "HEAD";
  req.body = NULL;
  req.body_len = 0;
  assert_int_equal(run1(f, &req, "/echo"), 0);   /* no body to wait for */
  assert_int_equal(req.status_code, 200);
  assert_int_equal(req.resp_len, 0);
  req.method = NULL;
  req.headers = "X-One: 1\r\nX-Two: two\r\n";
  assert_int_equal(run1(f, &req, "/echo"), 0);
  req_close(f, &req);
  fx_free(f);
}

/* ----------------------------------------------- per-host breaker/budget */

static void test_breaker_per_host(void **state) {
  fx_t *f = fx_new(NRES_PRESET_DEFAULT, NULL);
  nres_http_req_t req;
  char a[128], b[128];
  int i;
  (void) state;

  f->policy.attempts = 1;
  f->policy.budget = NULL;
  {   /* the breaker's own defaults, not the preset's: 5 in a row trip it */
    nres_breaker_config_t bc;
    nres_breaker_config_init(&bc);
    nres_breaker_init(&f->policy.own.breaker, &bc);
  }
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  /* two hosts to the same server: distinct authorities */
  snprintf(a, sizeof(a), "http://127.0.0.1:%d/flaky?n=1", server.port);
  snprintf(b, sizeof(b), "http://localhost:%d/echo", server.port);
  req.data = f;
  for (i = 0; i < 5; i++) {   /* 5 consecutive failures trip it */
    req.url = a;
    nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->status, NRES_EATTEMPTS);
  }
  req.url = a;
  nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, NRES_ECIRCUIT);
  assert_int_equal(req.attempts, 0);
  /* the other host's breaker is its own, and closed */
  req.url = b;
  nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, 0);
  /* the template's own breaker was never touched */
  assert_int_equal(nres_breaker_state(&f->policy.own.breaker, nres_clock_now()),
                   NRES_BREAKER_CLOSED);
  assert_int_equal(f->client.hosts, 2);
  {
    nres_counters_t c;
    nres_http_client_counters(&f->client, &c);
    assert_int_equal(c.calls, 7);
    assert_int_equal(c.stops[NRES_STOP_CIRCUIT], 1);
  }
  req_close(f, &req);
  fx_free(f);
}

static void test_budget_per_host(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  char a[128], b[128];
  (void) state;

  /* one token (capacity 1, no floor): one retry per host, then none */
  assert_int_equal(nres_budget_init(&f->policy.own.budget, 0.1, 0, 1), 0);
  f->policy.budget = &f->policy.own.budget;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  snprintf(a, sizeof(a), "http://127.0.0.1:%d/flaky?n=1", server.port);
  snprintf(b, sizeof(b), "http://localhost:%d/flaky?n=1", server.port);
  req.data = f;
  req.url = a;
  nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, NRES_EBUDGET);
  assert_int_equal(req.attempts, 2);
  req.url = b;   /* its own token */
  nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, NRES_EBUDGET);
  assert_int_equal(req.attempts, 2);
  req.url = a;   /* spent */
  nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(req.attempts, 1);
  req_close(f, &req);

  /* a budget shared on purpose (not the policy's own) stays shared */
  {
    nres_budget_t shared;
    assert_int_equal(nres_budget_init(&shared, 0.1, 0, 1), 0);
    nres_policy_init(&f->policy, NRES_PRESET_TRIVIAL);
    f->policy.budget = &shared;
    assert_int_equal(nres_policy_build(&f->policy), 0);
    assert_int_equal(nres_http_req_init(&f->client, &req), 0);
    req.data = f;
    req.url = a;
    nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(req.attempts, 2);
    req.url = b;
    nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(req.attempts, 1);   /* the one token is gone */
    req_close(f, &req);
  }
  fx_free(f);
}

/* ------------------------------------------------------ pool, cancel */

static void test_pool_limit(void **state) {
  nres_http_config_t cfg;
  loop_t *l = calloc(1, sizeof(*l));
  char path[128];
  int i;
  (void) state;

  nres_http_config_init(&cfg);
  cfg.max_conns = 2;
  l->f = fx_new(NRES_PRESET_TRIVIAL, &cfg);
  assert_int_equal(nres_policy_build(&l->f->policy), 0);
  for (i = 0; i < 8; i++)
    assert_int_equal(nres_http_req_init(&l->f->client, &l->req[i]), 0);
  snprintf(path, sizeof(path), "http://127.0.0.1:%d/slow?ms=10", server.port);
  run_loop(l, 8, 40, path);
  assert_int_equal(l->failed, 0);
  assert_int_equal(l->f->client.connects, 2);
  for (i = 0; i < 8; i++)
    req_close(l->f, &l->req[i]);
  fx_free(l->f);
  free(l);
}

static nres_http_req_t *cancel_target;
static void cancel_now(uv_timer_t *t) {
  (void) t;
  assert_int_equal(nres_http_cancel(cancel_target), 0);
}

static void test_cancel_and_close_running(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  uv_timer_t t;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.url = url(f, "/slow?ms=2000");
  req.data = f;
  cancel_target = &req;
  uv_timer_init(&f->loop, &t);
  uv_timer_start(&t, cancel_now, 20, 0);
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->status, NRES_ECANCELED);
  assert_int_equal(req.stop, NRES_STOP_CANCELED);
  assert_int_equal(f->client.open, 0);
  assert_int_equal(nres_http_cancel(&req), NRES_ESTATE);
  /* a running request blocks the client's close; closing the request
   * ends it without its callback */
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  assert_int_equal(nres_http_client_close(&f->client, NULL), NRES_EBUSY);
  f->done = 0;
  uv_close((uv_handle_t *) &t, NULL);
  req_close(f, &req);
  assert_int_equal(f->done, 0);
  fx_free(f);
}

/* ---------------------------------------------------------------- misuse */

static void test_misuse(void **state) {
  static const char *const bad_urls[] = {
    NULL, "", "https://127.0.0.1/", "ftp://x", "http://", "http:///path",
    "http://example.com/", "http://127.0.0.1:0/", "http://127.0.0.1:70000/",
    "http://127.0.0.1:80x/", "http://127.0.0.1:/", "http://user@127.0.0.1/",
    "http://127.0.0.1/a b", "http://127.0.0.1/\r\nX: y", "http://[::1/",
    "http://256.0.0.1/", "http://127.0.0.1/\x7f",
  };
  static const char *const bad_methods[] = { "", "GE T", "G\r\nET",
                                             "AVERYLONGMETHODNAME" };
  static const char *const bad_headers[] = {
    "X: 1", "X: 1\n", "X: 1\r\n\r\n", "X 1\r\n", ": 1\r\n", "X: 1\r2\r\n",
    "X:\x01\r\n", "\r\n",
  };
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  nres_policy_t unbuilt;
  size_t i;
  (void) state;

  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.data = f;
  for (i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
    req.url = bad_urls[i];
    if (nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done) != NRES_EINVAL)
      fail_msg("url '%s' accepted", bad_urls[i] ? bad_urls[i] : "(null)");
  }
  req.url = url(f, "/echo");
  for (i = 0; i < sizeof(bad_methods) / sizeof(bad_methods[0]); i++) {
    req.method = bad_methods[i];
    if (nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done) != NRES_EINVAL)
      fail_msg("method '%s' accepted", bad_methods[i]);
  }
  req.method = NULL;
  for (i = 0; i < sizeof(bad_headers) / sizeof(bad_headers[0]); i++) {
    req.headers = bad_headers[i];
    if (nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done) != NRES_EINVAL)
      fail_msg("headers '%s' accepted", bad_headers[i]);
  }
  req.headers = NULL;
  req.body_len = 5;   /* no body */
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), NRES_EINVAL);
  req.body_len = 0;
  nres_policy_init(&unbuilt, NRES_PRESET_TRIVIAL);
  assert_int_equal(nres_http_start(&req, &unbuilt, NRES_TIME_NEVER, on_done), NRES_EINVAL);
  assert_int_equal(nres_http_start(&req, NULL, NRES_TIME_NEVER, on_done), NRES_EINVAL);
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, NULL), NRES_EINVAL);
  assert_int_equal(f->done, 0);   /* no callback for any of these */
  /* running twice */
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  assert_int_equal(nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done), NRES_EBUSY);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, 1);
  /* the host table is bounded */
  for (i = 0; i < NRES_HTTP_MAX_HOSTS + 2; i++) {
    char u[64];
    int rc;
    snprintf(u, sizeof(u), "http://127.0.0.%zu:1/", i + 2);
    req.url = u;
    rc = nres_http_start(&req, &f->policy, NRES_TIME_NEVER, on_done);
    if (rc == 0) {
      uv_run(&f->loop, UV_RUN_DEFAULT);
    } else {
      assert_int_equal(rc, NRES_EFULL);
      assert_int_equal(f->client.hosts, NRES_HTTP_MAX_HOSTS);
    }
  }
  assert_int_equal(f->client.hosts, NRES_HTTP_MAX_HOSTS);
  {
    nres_http_config_t cfg;
    nres_http_client_t c2;
    nres_http_config_init(&cfg);
    cfg.max_conns = 0;
    assert_int_equal(nres_http_client_init(&f->loop, &c2, &cfg), NRES_EINVAL);
    assert_int_equal(nres_http_client_init(NULL, &c2, NULL), NRES_EINVAL);
  }
  req_close(f, &req);
  fx_free(f);
}

/* Five policies to one host: four derived copies at once, the fifth
 * replaces a copy with nothing in flight. */
static void test_policy_slots(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_policy_t *p = calloc(5, sizeof(*p));
  nres_http_req_t req;
  int i;
  (void) state;

  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.url = url(f, "/echo");
  req.data = f;
  for (i = 0; i < 5; i++) {
    nres_policy_init(&p[i], NRES_PRESET_DEFAULT);
    p[i].attempts = (uint32_t) (2 + i);
    assert_int_equal(nres_policy_build(&p[i]), 0);
    assert_int_equal(nres_http_start(&req, &p[i], NRES_TIME_NEVER, on_done), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->status, 0);
  }
  req_close(f, &req);
  fx_free(f);
  free(p);
}

/* A hedge after 30 ms against a 150 ms answer: two attempts side by side
 * on two connections; the loser is abandoned and its connection closed. */
static void test_hedge(void **state) {
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  (void) state;

  f->policy.hedge.max = 2;
  f->policy.hedge.delay = 30 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  raw_reset(server.port);
  assert_int_equal(run1(f, &req, "/slow?ms=150"), 0);
  assert_int_equal(req.status_code, 200);
  assert_int_equal(req.attempts, 2);
  assert_int_equal(req.uv_.call.hedges, 1);
  assert_int_equal(f->client.connects, 2);
  assert_int_equal(f->client.open, 1);   /* the winner's, pooled */
  assert_int_equal(stat_of(server.port, "\"slow\":"), 2);
  req_close(f, &req);
  fx_free(f);
}

/* ------------------------------------------------------ interim 1xx */

/* A raw server on a thread that answers every request head it reads with
 * the same script: `parts` written in order, gap_ms apart; with `flood`,
 * the last part is then written again every gap_ms for as long as the peer
 * takes it (a server that never gets to its final answer). One connection
 * at a time, kept while the peer keeps it. */
typedef struct {
  int lfd, port;
  pthread_t tid;
  const char *parts[4];
  int gap_ms;
  int flood;
  atomic_int stop;
  atomic_int conns;
} script_t;

static int script_wait(script_t *sc, int fd, short ev, int ms) {
  struct pollfd p = { fd, ev, 0 };
  int waited;
  for (waited = 0; waited < ms && !atomic_load(&sc->stop); waited += 20)
    if (poll(&p, 1, 20) == 1)
      return 1;
  return 0;
}

static void script_serve(script_t *sc, int fd) {
  char buf[4096];
  size_t len = 0;

  for (;;) {
    char *end;
    ssize_t n;
    int i;
    if (!script_wait(sc, fd, POLLIN, 10000))
      return;
    n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
    if (n <= 0)
      return;
    len += (size_t) n;
    buf[len] = '\0';
    end = strstr(buf, "\r\n\r\n");
    if (end == NULL) {
      if (len == sizeof(buf) - 1)
        return;
      continue;
    }
    len -= (size_t) (end + 4 - buf);   /* requests here carry no body */
    memmove(buf, end + 4, len);
    for (i = 0; i < 4 && sc->parts[i] != NULL; i++) {
      if (i > 0 && sc->gap_ms > 0)
        usleep((useconds_t) sc->gap_ms * 1000);
      if (raw_send(fd, sc->parts[i], strlen(sc->parts[i])) != 0)
        return;
    }
    while (sc->flood && !atomic_load(&sc->stop)) {
      usleep((useconds_t) sc->gap_ms * 1000);
      if (raw_send(fd, sc->parts[i - 1], strlen(sc->parts[i - 1])) != 0)
        return;
    }
  }
}

static void *script_main(void *arg) {
  script_t *sc = arg;
  while (!atomic_load(&sc->stop)) {
    int fd;
    struct timeval tv = { 0, 200000 };
    if (!script_wait(sc, sc->lfd, POLLIN, 100))
      continue;
    fd = accept(sc->lfd, NULL, NULL);
    if (fd < 0)
      continue;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    atomic_fetch_add(&sc->conns, 1);
    script_serve(sc, fd);
    close(fd);
  }
  return NULL;
}

static void script_start(script_t *sc) {
  struct sockaddr_in a;
  socklen_t alen = sizeof(a);

  atomic_store(&sc->stop, 0);
  atomic_store(&sc->conns, 0);
  sc->lfd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(sc->lfd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(sc->lfd, (struct sockaddr *) &a, sizeof(a)), 0);
  assert_int_equal(listen(sc->lfd, 16), 0);
  assert_int_equal(getsockname(sc->lfd, (struct sockaddr *) &a, &alen), 0);
  sc->port = ntohs(a.sin_port);
  signal(SIGPIPE, SIG_IGN);
  assert_int_equal(pthread_create(&sc->tid, NULL, script_main, sc), 0);
}

static void script_stop(script_t *sc) {
  atomic_store(&sc->stop, 1);
  pthread_join(sc->tid, NULL);
  close(sc->lfd);
}

/* Run one request to the script server; the callback's status. */
static int run_script(fx_t *f, nres_http_req_t *req, const script_t *sc) {
  int before = f->done;
  snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d/x", sc->port);
  req->url = f->url;
  req->data = f;
  assert_int_equal(nres_http_start(req, &f->policy, NRES_TIME_NEVER, on_done), 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(f->done, before + 1);
  return f->status;
}

#define CONTINUE "HTTP/1.1 100 Continue\r\n\r\n"
#define FINAL_OK "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"

/* Issue 10: a 100 Continue was taken for the answer (status 100, empty
 * body, connection closed). It is skipped, in the same read as the final
 * answer or in one of its own, and the connection stays in step: the next
 * request reuses it. */
static void test_interim_100_then_200(void **state) {
  static script_t sc;
  fx_t *f;
  nres_http_req_t req;
  char body[16];
  int gap, k;
  (void) state;

  for (gap = 0; gap <= 30; gap += 30) {   /* one write; two reads */
    f = fx_new(NRES_PRESET_TRIVIAL, NULL);
    assert_int_equal(nres_policy_build(&f->policy), 0);
    assert_int_equal(nres_http_req_init(&f->client, &req), 0);
    req.resp_body = body;
    req.resp_cap = sizeof(body);
    memset(&sc, 0, sizeof(sc));
    sc.parts[0] = CONTINUE;
    sc.parts[1] = FINAL_OK;
    sc.gap_ms = gap;
    script_start(&sc);
    for (k = 0; k < 2; k++) {
      assert_int_equal(run_script(f, &req, &sc), 0);
      assert_int_equal(req.status_code, 200);
      assert_int_equal(req.error, 0);
      assert_int_equal(req.attempts, 1);
      assert_int_equal(req.resp_len, 5);
      assert_int_equal(req.resp_copied, 5);
      assert_memory_equal(body, "hello", 5);
    }
    assert_int_equal(atomic_load(&sc.conns), 1);   /* kept alive */
    assert_int_equal(f->client.open, 1);
    /* close the pooled connection before the server goes */
    req_close(f, &req);
    fx_free(f);
    script_stop(&sc);
  }
}

/* 103 Early Hints with headers of its own, 102 Processing, and a 100 that
 * says "Connection: close" or is HTTP/1.0 (http-parser would go dead after
 * it): all skipped; the final answer's Retry-After alone counts. */
static void test_interim_103_and_others(void **state) {
  static script_t sc;
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  char body[16];
  (void) state;

  memset(&sc, 0, sizeof(sc));
  sc.parts[0] = "HTTP/1.1 103 Early Hints\r\n"
                "Link: </style.css>; rel=preload; as=style\r\n"
                "Retry-After: 99\r\n\r\n";
  sc.parts[1] = "HTTP/1.1 102 Processing\r\n\r\n"
                "HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\n"
                "HTTP/1.0 100 Continue\r\n\r\n";
  sc.parts[2] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  script_start(&sc);
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  req.resp_body = body;
  req.resp_cap = sizeof(body);
  assert_int_equal(run_script(f, &req, &sc), 0);
  assert_int_equal(req.status_code, 200);
  assert_int_equal(req.attempts, 1);
  assert_int_equal(req.resp_len, 2);
  assert_memory_equal(body, "ok", 2);
  assert_true(req.retry_after == NRES_TIME_NEVER);   /* the 103's is not */
  req_close(f, &req);
  fx_free(f);
  script_stop(&sc);
}

/* Issue 10: an unrequested 101 counted as OK. It is a protocol error:
 * error UV_EPROTO, status_code 0, PERMANENT (not retried), connection
 * closed; with or without the upgrade headers. */
static void test_interim_101_is_protocol_error(void **state) {
  static const char *const answers[] = {
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
    "Connection: Upgrade\r\n\r\n\x81\x02hi",
    "HTTP/1.1 101 Switching Protocols\r\n\r\n" FINAL_OK,
    CONTINUE "HTTP/1.1 101 Switching Protocols\r\n\r\n",
  };
  static script_t sc;
  size_t i;
  (void) state;

  for (i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
    fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
    nres_http_req_t req;
    memset(&sc, 0, sizeof(sc));
    sc.parts[0] = answers[i];
    script_start(&sc);
    assert_int_equal(nres_policy_build(&f->policy), 0);
    assert_int_equal(nres_http_req_init(&f->client, &req), 0);
    assert_int_equal(run_script(f, &req, &sc), NRES_EPERMANENT);
    assert_int_equal(req.error, UV_EPROTO);
    assert_int_equal(req.status_code, 0);
    assert_int_equal(req.attempts, 1);
    assert_int_equal(req.stop, NRES_STOP_PERMANENT);
    assert_int_equal(req.uv_.call.last.kind, NRES_PERMANENT);
    assert_int_equal(f->client.open, 0);
    req_close(f, &req);
    fx_free(f);
    script_stop(&sc);
  }
}

/* A server that sends 1xx answers for ever: a fast flood ends the attempt
 * at the 17th (EPROTO, long before the attempt timeout); a slow one, under
 * that count, is ended by the attempt timeout (each of the 3 attempts). */
static void test_interim_flood(void **state) {
  static script_t sc;
  fx_t *f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  nres_http_req_t req;
  nres_time_t t0;
  unsigned i;
  (void) state;

  memset(&sc, 0, sizeof(sc));
  sc.parts[0] = CONTINUE;
  sc.gap_ms = 1;
  sc.flood = 1;
  script_start(&sc);
  f->policy.attempt_timeout = 5 * NRES_SEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  t0 = nres_clock_now();
  assert_int_equal(run_script(f, &req, &sc), NRES_EPERMANENT);
  assert_true(nres_clock_now() - t0 < 5 * NRES_SEC);
  assert_int_equal(req.error, UV_EPROTO);
  assert_int_equal(req.attempts, 1);
  req_close(f, &req);
  fx_free(f);
  script_stop(&sc);

  f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  memset(&sc, 0, sizeof(sc));
  sc.parts[0] = CONTINUE;
  sc.gap_ms = 50;   /* 16 take 800 ms: past the 200 ms attempt timeout */
  sc.flood = 1;
  script_start(&sc);
  f->policy.attempt_timeout = 200 * NRES_MSEC;
  assert_int_equal(nres_policy_build(&f->policy), 0);
  assert_int_equal(nres_http_req_init(&f->client, &req), 0);
  t0 = nres_clock_now();
  assert_int_equal(run_script(f, &req, &sc), NRES_EATTEMPTS);
  /* 3 attempts of 200 ms; generous slack for a loaded machine */
  assert_true(nres_clock_now() - t0 < 3 * 200 * NRES_MSEC + 2 * NRES_SEC);
  assert_int_equal(req.attempts, 3);
  assert_int_equal(req.status_code, 0);
  for (i = 0; i < 3; i++)
    assert_true(nres_call_log(&req.uv_.call, i)->flags & NRES_VF_TIMEOUT);
  req_close(f, &req);
  fx_free(f);
  script_stop(&sc);
}

/* The socketless entry for fuzzers: the same parser and callbacks. */
static void test_parse_response_for_test(void **state) {
  static char buf[64 * 1024];
  size_t len = 0;
  uint64_t s = 11;
  int i, k, rc;
  (void) state;

#define PARSE(lit, head, eof)                                               \
  nres__http_parse_response_for_test(lit, sizeof(lit) - 1, head, eof)
  assert_int_equal(PARSE(FINAL_OK, 0, 0), 200);
  assert_int_equal(PARSE(CONTINUE FINAL_OK, 0, 0), 200);
  assert_int_equal(PARSE(CONTINUE, 0, 0), 0);
  assert_int_equal(PARSE(CONTINUE, 0, 1), 0);   /* closed before the end */
  assert_int_equal(PARSE("HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\n"
                         "HTTP/1.1 404 Not Found\r\n\r\n", 0, 1), 404);
  assert_int_equal(PARSE("HTTP/1.1 200 OK\r\n\r\nuntil the close", 0, 0), 0);
  assert_int_equal(PARSE("HTTP/1.1 200 OK\r\n\r\nuntil the close", 0, 1),
                   200);
  assert_int_equal(PARSE("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 1,
                         0), 200);   /* HEAD: no body */
  assert_int_equal(PARSE("HTTP/1.1 101 Switching Protocols\r\n\r\n", 0, 0),
                   UV_EPROTO);
  assert_int_equal(PARSE("HTTP/1.1 099 Odd\r\n\r\n", 0, 0), UV_EPROTO);
  assert_int_equal(PARSE("HTTP/1.1 100 Continue\r\nContent-Length: 3\r\n\r\n"
                         FINAL_OK, 0, 0), 200);   /* a 1xx has no body */
  assert_int_equal(PARSE("garbage\r\n\r\n", 0, 1), UV_EPROTO);
  assert_int_equal(nres__http_parse_response_for_test(NULL, 0, 0, 1), 0);
  /* 16 interim answers are skipped, a 17th is an error */
  for (k = 16; k <= 17; k++) {
    len = 0;
    for (i = 0; i < k; i++)
      len += (size_t) snprintf(buf + len, sizeof(buf) - len, CONTINUE);
    len += (size_t) snprintf(buf + len, sizeof(buf) - len, FINAL_OK);
    rc = nres__http_parse_response_for_test(buf, len, 0, 0);
    assert_int_equal(rc, k == 16 ? 200 : UV_EPROTO);
  }
  /* interim heads count toward head_max (16 KiB) together */
  len = 0;
  for (i = 0; i < 8; i++) {
    len += (size_t) snprintf(buf + len, sizeof(buf) - len,
                             "HTTP/1.1 103 Early Hints\r\nLink: ");
    memset(buf + len, 'l', 3000);
    len += 3000;
    len += (size_t) snprintf(buf + len, sizeof(buf) - len, "\r\n\r\n");
  }
  len += (size_t) snprintf(buf + len, sizeof(buf) - len, FINAL_OK);
  assert_int_equal(nres__http_parse_response_for_test(buf, len, 0, 0),
                   UV_EPROTO);
  /* random bytes, with and without a valid start: no crash, no hang */
  for (k = 0; k < 300; k++) {
    size_t off = k % 2 ? (size_t) snprintf(buf, sizeof(buf), CONTINUE) : 0;
    for (i = 0; i < 2048; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      buf[off + (size_t) i] = (char) (s >> 56);
    }
    rc = nres__http_parse_response_for_test(buf, off + (s >> 40) % 2048,
                                            k % 3 == 0, k % 5 == 0);
    assert_true(rc == 0 || rc == UV_EPROTO || (rc >= 100 && rc <= 999));
  }
#undef PARSE
}

/* ------------------------------------------------------------ 10,000 */

static void test_ten_thousand(void **state) {
  loop_t *l = calloc(1, sizeof(*l));
  char path[128];
  nres_counters_t c;
  long long seen;
  int i;
  (void) state;

  l->f = fx_new(NRES_PRESET_TRIVIAL, NULL);
  l->f->policy.attempt_timeout = 5 * NRES_SEC;
  assert_int_equal(nres_policy_build(&l->f->policy), 0);
  for (i = 0; i < 8; i++)
    assert_int_equal(nres_http_req_init(&l->f->client, &l->req[i]), 0);
  snprintf(path, sizeof(path), "http://127.0.0.1:%d/flaky?n=5", server.port);
  raw_reset(server.port);
  run_loop(l, 8, 200, path);   /* warm-up: hosts, policies, connections */
  test_count_allocations();
  test_arm_malloc_count(1);
  run_loop(l, 8, 9800, path);
  test_arm_malloc_count(0);
  assert_int_equal(l->failed, 0);
  assert_int_equal(atomic_load(&test_alloc_calls), 0);
  if (TEST_MALLOC_INTERPOSED)
    assert_int_equal(atomic_load(&test_malloc_calls), 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
  nres_http_client_counters(&l->f->client, &c);
  assert_int_equal(c.calls, 10000);
  /* every attempt the executor counted reached the server, no more */
  seen = stat_of(server.port, "\"flaky\":");
  assert_int_equal(seen, (long long) c.attempts);
  assert_true(c.retries > 0);
  assert_true(l->f->client.connects <= 8);
  for (i = 0; i < 8; i++)
    req_close(l->f, &l->req[i]);
  fx_free(l->f);
  free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_echo_body),
    cmocka_unit_test(test_status_families),
    cmocka_unit_test(test_retry_after_values),
    cmocka_unit_test(test_attempt_timeout_slow),
    cmocka_unit_test(test_reset_mid_response),
    cmocka_unit_test(test_refused),
    cmocka_unit_test(test_keepalive_reuse),
    cmocka_unit_test(test_stale_pooled_connection),
    cmocka_unit_test(test_deadline_header),
    cmocka_unit_test(test_idempotency),
    cmocka_unit_test(test_breaker_per_host),
    cmocka_unit_test(test_budget_per_host),
    cmocka_unit_test(test_pool_limit),
    cmocka_unit_test(test_cancel_and_close_running),
    cmocka_unit_test(test_misuse),
    cmocka_unit_test(test_policy_slots),
    cmocka_unit_test(test_hedge),
    cmocka_unit_test(test_interim_100_then_200),
    cmocka_unit_test(test_interim_103_and_others),
    cmocka_unit_test(test_interim_101_is_protocol_error),
    cmocka_unit_test(test_interim_flood),
    cmocka_unit_test(test_parse_response_for_test),
    cmocka_unit_test(test_ten_thousand),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

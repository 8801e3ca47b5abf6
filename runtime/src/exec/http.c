/* SPDX-License-Identifier: MIT */
/* http.c - the HTTP client handler: one request = one call of the executor,
 * each attempt one HTTP/1.1 exchange on a pooled keep-alive connection.
 *
 * The libuv driver (nres/uv.h) embedded in the request owns the decisions
 * and the timers: its attempt callback lands here, we take a connection
 * (http_pool.c), write the request head (with X-Deadline-Ms, the attempt's
 * time left when it is sent) and body, parse the answer with http-parser
 * and report the verdict: nres_classify_http for a response (Retry-After
 * parsed in http_retry_after.c), nres_classify_errno for a transport error
 * (refused, reset, EOF mid-response -> ECONNRESET: transient; a malformed
 * response -> EPROTO: permanent). Interim 1xx answers (100 Continue, 102,
 * 103 Early Hints) are skipped, NRES__HTTP_INTERIM_MAX at most, and the
 * parser starts over for the final one: http-parser 2.9 takes a 1xx for a
 * whole message. A 101 is EPROTO: we never ask to switch protocols. A
 * timed-out or abandoned attempt closes its connection, whose state is
 * then unknown. A pooled connection that turns out dead before any byte
 * of the answer (the server closed it while idle) is the classic
 * keep-alive race: the attempt is sent once more on a fresh connection, as
 * browsers and curl do, without counting an attempt.
 *
 * Why a lean client and not libcurl's multi interface: curl_multi driven by
 * libuv (curl_multi_socket_action) costs a curl easy handle per request
 * slot, its own connection cache and DNS cache beside ours, header
 * callbacks that copy, and on the order of a few kilobytes of heap per
 * transfer in curl's own bookkeeping, while our needs are narrow
 * (HTTP/1.1 over loopback to a known host, per-attempt deadlines that we
 * already own in the executor, a pool we must count). A few hundred lines
 * over http-parser (Debian's libhttp-parser-dev; llhttp, its successor, is
 * not packaged in Debian 12) allocate nothing per request, and every byte
 * the stress suite counts is ours. What we give up: TLS, HTTP/2, proxies,
 * DNS and redirects, none of which the http cells or the loopback tests
 * need; a C user who needs them should drive curl under nres_uv_t directly.
 *
 * Failures found while starting an attempt (no memory, a socket error)
 * are reported from the loop through the request's defer timer, never from
 * inside nres_http_start or another attempt's callback.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "exec/http_int.h"
#include "core/policy.h"

#define REQ_OF_UV(u) NRES__CONTAINER((u), nres_http_req_t, uv_)

static int on_status(http_parser *p, const char *at, size_t len);
static int on_header_field(http_parser *p, const char *at, size_t len);
static int on_header_value(http_parser *p, const char *at, size_t len);
static int on_headers_complete(http_parser *p);
static int on_body(http_parser *p, const char *at, size_t len);
static int on_message_complete(http_parser *p);

static const http_parser_settings settings = {
  .on_status = on_status,
  .on_header_field = on_header_field,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

static void dispatch_attempt(nres_http_req_t *req, unsigned slot);

/* -------------------------------------------------------------- helpers */

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

static int ieq(const char *a, const char *b, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z')
      c = (char) (c - 'A' + 'a');
    if (c != b[i])
      return 0;
  }
  return 1;
}

static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

/* Extra header lines: "Name: value\r\n" each, no empty line, no bare CR or
 * LF, no control bytes (they would let a value smuggle a second request). */
static int check_headers(const char *h, size_t *len) {
  size_t i = 0, line = 0;
  int colon = 0;

  for (; h[i] != '\0'; i++) {
    unsigned char c = (unsigned char) h[i];
    if (c == '\r') {
      if (h[i + 1] != '\n' || !colon || i == line)
        return NRES_EINVAL;
      i++;
      line = i + 1;
      colon = 0;
    } else if (c == '\n' || (c < 0x20 && c != '\t') || c == 0x7f) {
      return NRES_EINVAL;
    } else if (c == ':' && !colon) {
      if (i == line)
        return NRES_EINVAL;
      colon = 1;
    } else if (!colon && !is_tchar(c)) {
      return NRES_EINVAL;
    }
  }
  if (i != line)   /* the last line lacks its CRLF */
    return NRES_EINVAL;
  *len = i;
  return 0;
}

/* --------------------------------------------------------------- results */

/* The attempt `token` of `slot` is still the one the call waits for. */
static int current(const nres_http_req_t *req, unsigned slot, uint32_t token) {
  return req->active_ && req->token_[slot] == token && token != 0;
}

static void report(nres_http_req_t *req, unsigned slot, uint32_t token,
                   nres_verdict_t v) {
  req->token_[slot] = 0;
  nres_uv_complete(&req->uv_, token, v);
}

static void report_error(nres_http_req_t *req, unsigned slot, uint32_t token,
                         int err) {
  nres_verdict_t v;

  req->status_code = 0;
  req->error = err;
  req->resp_len = 0;
  req->resp_copied = 0;
  req->retry_after = NRES_TIME_NEVER;
  v = nres_classify_errno(err);
  report(req, slot, token, v);
}

static void on_defer(uv_timer_t *timer) {
  nres_http_req_t *req = timer->data;
  unsigned slot;

  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    int err = req->failed_[slot];
    if (err == 0)
      continue;
    req->failed_[slot] = 0;
    if (req->token_[slot] != 0)
      report_error(req, slot, req->token_[slot], err);
  }
}

/* A failure found while starting an attempt: report it from the loop. */
static void fail_later(nres_http_req_t *req, unsigned slot, int err) {
  req->failed_[slot] = err;
  uv_timer_start(&req->defer_, on_defer, 0, 0);
}

/* Detach the connection of an attempt and close it. */
static void drop_conn(nres__http_conn_t *conn) {
  nres_http_req_t *req = conn->req;
  if (req != NULL)
    req->conn_[conn->slot] = NULL;
  nres__http_conn_close(conn);
}

/* ------------------------------------------------------------ the write */

static void on_write(uv_write_t *w, int status) {
  nres__http_conn_t *conn = w->data;
  nres_http_req_t *req = conn->req;

  conn->writing = 0;
  if (conn->state == CONN_CLOSING || req == NULL || status == 0)
    return;
  nres__http_on_read(conn, status);   /* same handling as a read error */
}

static void send_request(nres__http_conn_t *conn) {
  nres_http_req_t *req = conn->req;
  nres_http_client_t *client = req->client_;
  unsigned slot = conn->slot;
  nres_time_t deadline = req->deadline_[slot];
  uv_buf_t bufs[2];
  char *p = conn->head;
  int rc;

  conn->got = 0;
  conn->head_req = req->head_;
  nres__http_parse_start(conn);

  p = put(p, req->method != NULL ? req->method : "GET", req->method_len_);
  *p++ = ' ';
  if (req->slash_)
    *p++ = '/';
  p = put(p, req->url + req->path_off_, req->path_len_);
  p = put(p, " HTTP/1.1\r\nHost: ", 17);
  p = put(p, req->url + req->path_off_ - req->key_len_, req->key_len_);
  p = put(p, "\r\n", 2);
  if (deadline != NRES_TIME_NEVER &&
      !(req->flags & NRES_HTTP_NO_DEADLINE_HEADER)) {
    p = put(p, "X-Deadline-Ms: ", 15);
    p = nres__put_u64(p, nres_time_sub(deadline, nres_clock_now()) / NRES_MSEC);
    p = put(p, "\r\n", 2);
  }
  if (req->clen_) {
    p = put(p, "Content-Length: ", 16);
    p = nres__put_u64(p, req->body_len);
    p = put(p, "\r\n", 2);
  }
  if (req->headers != NULL)
    p = put(p, req->headers, req->headers_len_);
  p = put(p, "\r\n", 2);

  bufs[0] = uv_buf_init(conn->head, (unsigned) (p - conn->head));
  bufs[1] = uv_buf_init((char *) req->body, (unsigned) req->body_len);
  conn->write.data = conn;
  client->sent++;
  if (conn->reused)
    client->reused++;
  rc = uv_write(&conn->write, (uv_stream_t *) &conn->tcp, bufs,
                req->body_len > 0 ? 2 : 1, on_write);
  conn->writing = rc == 0;
  if (rc != 0) {
    drop_conn(conn);
    fail_later(req, slot, rc);
  }
}

void nres__http_on_connect(nres__http_conn_t *conn, int status) {
  nres_http_req_t *req = conn->req;
  nres__http_host_t *host = conn->host;

  if (status != 0) {
    unsigned slot = conn->slot;
    uint32_t token = conn->token;
    drop_conn(conn);
    nres__http_serve_waiters(conn->client, host);
    if (req != NULL && current(req, slot, token))
      report_error(req, slot, token, status);
    return;
  }
  if (req == NULL) {   /* its attempt went away: pool it */
    nres__http_conn_put(conn);
    nres__http_serve_waiters(conn->client, host);
    return;
  }
  send_request(conn);
}

/* ----------------------------------------------------- response parsing */

static int head_grow(nres__http_conn_t *conn, size_t len) {
  conn->head_bytes += (uint32_t) len;
  return conn->head_bytes > conn->client->config.head_max;
}

static int on_status(http_parser *p, const char *at, size_t len) {
  (void) at;
  return head_grow(p->data, len);
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  nres__http_conn_t *conn = p->data;
  static const char name[] = "retry-after";

  if (head_grow(conn, len))
    return 1;
  if (conn->in_ra || conn->field_ra == 0) {   /* a new field starts */
    conn->in_ra = 0;
    conn->field_ra = 1;                        /* 1 + chars matched */
  }
  if (conn->field_ra != 0xff) {
    size_t have = conn->field_ra - 1u;
    if (have + len <= sizeof(name) - 1 && ieq(at, name + have, len))
      conn->field_ra = (uint8_t) (conn->field_ra + len);
    else
      conn->field_ra = 0xff;
  }
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  nres__http_conn_t *conn = p->data;

  if (head_grow(conn, len))
    return 1;
  if (!conn->in_ra) {
    conn->in_ra = 1;
    if (conn->field_ra == 12)   /* all of "retry-after": a new value */
      conn->ra_len = 0, conn->ra_bad = 0;
  }
  if (conn->field_ra == 12) {
    if (conn->ra_len + len > sizeof(conn->ra)) {
      conn->ra_bad = 1;
    } else {
      memcpy(conn->ra + conn->ra_len, at, len);
      conn->ra_len += (uint32_t) len;
    }
  }
  return 0;
}

static int on_headers_complete(http_parser *p) {
  nres__http_conn_t *conn = p->data;
  if (p->status_code < 100 || p->status_code == 101)
    return -1;   /* not a status; or a switch of protocols nobody asked for */
  /* 1 tells http-parser there is no body (a 1xx, the answer to HEAD). */
  return p->status_code < 200 || conn->head_req ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  nres__http_conn_t *conn = p->data;
  size_t room = conn->client->config.body_max - conn->body_kept;
  size_t n = len < room ? len : room;

  memcpy(conn->body + conn->body_kept, at, n);
  conn->body_kept += n;
  conn->body_len += len;
  return 0;
}

static int on_message_complete(http_parser *p) {
  nres__http_conn_t *conn = p->data;
  if (p->status_code < 200)
    conn->interim = 1;   /* the final answer is still to come */
  else
    conn->done = 1;
  http_parser_pause(p, 1);   /* bytes after it are not this answer's */
  return 0;
}

/* A new answer begins: a fresh parser (after a 1xx, http-parser 2.9 may
 * have gone dead: a 1xx with "Connection: close" or HTTP/1.0), and the
 * per-answer state. head_bytes goes on counting: interim heads and the
 * final one share head_max. */
static void answer_start(nres__http_conn_t *conn) {
  http_parser_init(&conn->parser, HTTP_RESPONSE);
  conn->parser.data = conn;
  conn->done = conn->interim = 0;
  conn->in_ra = conn->ra_bad = conn->field_ra = 0;
  conn->ra_len = 0;
  conn->body_len = conn->body_kept = 0;
}

void nres__http_parse_start(nres__http_conn_t *conn) {
  answer_start(conn);
  conn->head_bytes = 0;
  conn->interims = 0;
}

int nres__http_parse(nres__http_conn_t *conn, const char *data, size_t len,
                     size_t *used) {
  size_t off = 0;

  *used = 0;
  if (data == NULL) {   /* the peer closed */
    if (HTTP_PARSER_ERRNO(&conn->parser) == HPE_OK) {
      http_parser_execute(&conn->parser, &settings, NULL, 0);
      if (conn->done)
        return 1;
    }
    return 0;
  }
  for (;;) {
    off += http_parser_execute(&conn->parser, &settings, data + off,
                               len - off);
    *used = off;
    if (conn->done)
      return 1;
    if (!conn->interim)
      break;
    if (++conn->interims > NRES__HTTP_INTERIM_MAX)
      return -EPROTO;   /* a server stalling us with 1xx */
    answer_start(conn);
    if (off == len)
      return 0;
  }
  return HTTP_PARSER_ERRNO(&conn->parser) == HPE_OK ? 0 : -EPROTO;
}

int nres__http_parse_response_for_test(const char *data, size_t len,
                                       int head_req, int eof) {
  nres_http_client_t client;
  nres__http_conn_t *conn;
  size_t off = 0, used;
  int rc = 0;

  if (data == NULL && len > 0)
    return NRES_EINVAL;
  memset(&client, 0, sizeof(client));
  nres_http_config_init(&client.config);
  conn = nres__calloc(1, sizeof(*conn) + client.config.body_max);
  if (conn == NULL)
    return NRES_ENOMEM;
  conn->client = &client;
  conn->head_req = head_req != 0;
  nres__http_parse_start(conn);
  while (rc == 0 && off < len) {
    size_t n = len - off < NRES__HTTP_RBUF ? len - off : NRES__HTTP_RBUF;
    rc = nres__http_parse(conn, data + off, n, &used);
    off += n;
  }
  if (rc == 0 && eof && len > 0)
    rc = nres__http_parse(conn, NULL, 0, &used);
  if (rc == 1)
    rc = conn->parser.status_code;
  nres__free(conn);
  return rc;
}

/* A whole response arrived for the attempt on `conn`. */
static void response_done(nres__http_conn_t *conn, int reusable) {
  nres_http_req_t *req = conn->req;
  nres__http_host_t *host = conn->host;
  unsigned slot = conn->slot;
  uint32_t token = conn->token;
  int status = conn->parser.status_code;
  nres_time_t ra = NRES_TIME_NEVER;
  nres_verdict_t v;

  if (conn->ra_len > 0 && !conn->ra_bad &&
      nres_http_retry_after(conn->ra, conn->ra_len, (int64_t) time(NULL),
                            &ra) != 0)
    ra = NRES_TIME_NEVER;   /* garbage: as if there were none */
  v = nres_classify_http(status, ra);
  v.code = status;
  req->status_code = status;
  req->error = 0;
  req->retry_after = ra;
  req->resp_len = conn->body_len;
  req->resp_copied = 0;
  if (req->resp_body != NULL) {
    size_t n = conn->body_kept < req->resp_cap ? conn->body_kept
                                               : req->resp_cap;
    memcpy(req->resp_body, conn->body, n);
    req->resp_copied = n;
  }
  req->conn_[slot] = NULL;
  /* An answer that came before our write finished (a server refusing a
   * large body early) leaves the write request busy: not reusable. */
  if (reusable && !conn->writing && http_should_keep_alive(&conn->parser))
    nres__http_conn_put(conn);
  else
    nres__http_conn_close(conn);
  nres__http_serve_waiters(req->client_, host);
  report(req, slot, token, v);
}

void nres__http_on_read(nres__http_conn_t *conn, ssize_t nread) {
  nres_http_req_t *req = conn->req;
  nres__http_host_t *host = conn->host;
  unsigned slot = conn->slot;
  uint32_t token = conn->token;
  int err;

  if (nread == 0)
    return;
  if (req == NULL) {
    /* Idle: the server closed it, or sent bytes nobody asked for. */
    nres__http_conn_close(conn);
    nres__http_serve_waiters(conn->client, host);
    return;
  }
  if (nread > 0) {
    size_t used;
    int rc;
    conn->got = 1;
    rc = nres__http_parse(conn, conn->rbuf, (size_t) nread, &used);
    if (rc == 1) {
      response_done(conn, used == (size_t) nread);
      return;
    }
    if (rc == 0)
      return;   /* more to come */
    err = rc;   /* -EPROTO: malformed, over head_max, 101, 1xx flood */
  } else {
    size_t used;
    err = (int) nread;
    if (nread == UV_EOF) {
      /* An answer delimited by the close completes now. */
      if (conn->got && nres__http_parse(conn, NULL, 0, &used) == 1) {
        response_done(conn, 0);
        return;
      }
      err = UV_ECONNRESET;   /* cut off mid-answer, or before it */
    }
  }

  drop_conn(conn);
  if (conn->reused && !conn->got && req->resends_[slot] == 0 &&
      (err == UV_ECONNRESET || err == UV_EPIPE) && current(req, slot, token)) {
    /* A pooled connection the server had closed: send it again. */
    req->resends_[slot] = 1;
    req->client_->resent++;
    dispatch_attempt(req, slot);
    nres__http_serve_waiters(req->client_, host);
    return;
  }
  nres__http_serve_waiters(req->client_, host);
  if (current(req, slot, token))
    report_error(req, slot, token, err);
}

/* ------------------------------------------------------------- attempts */

static void bind_conn(nres_http_req_t *req, unsigned slot,
                      nres__http_conn_t *conn) {
  conn->req = req;
  conn->slot = (uint8_t) slot;
  conn->token = req->token_[slot];
  req->conn_[slot] = conn;
  if (conn->state == CONN_BUSY)
    send_request(conn);
  /* else connecting: nres__http_on_connect sends it */
}

static void dispatch_attempt(nres_http_req_t *req, unsigned slot) {
  nres__http_host_t *host = req->host_;
  nres__http_conn_t *conn;
  int rc;

  if (!nres__list_empty(&host->waiters)) {   /* no overtaking */
    nres__list_push_back(&host->waiters, &req->wait_[slot].link);
    return;
  }
  rc = nres__http_conn_get(req->client_, host, &conn);
  if (rc != 0)
    fail_later(req, slot, rc);
  else if (conn == NULL)
    nres__list_push_back(&host->waiters, &req->wait_[slot].link);
  else
    bind_conn(req, slot, conn);
}

void nres__http_serve_waiters(nres_http_client_t *client,
                              nres__http_host_t *host) {
  while (!nres__list_empty(&host->waiters)) {
    nres_http_link_t *l = host->waiters.next;
    nres__http_conn_t *conn;
    nres_http_req_t *req;
    unsigned slot;
    int rc;

    rc = nres__http_conn_get(client, host, &conn);
    if (rc == 0 && conn == NULL)
      return;
    nres__list_remove(l);
    req = NRES__CONTAINER(l, nres_http_wait_t, link)->req;
    slot = NRES__CONTAINER(l, nres_http_wait_t, link)->slot;
    if (rc != 0)
      fail_later(req, slot, rc);
    else
      bind_conn(req, slot, conn);
  }
}

static void on_attempt(nres_uv_t *uv, uint32_t token,
                       const nres_attempt_t *attempt) {
  nres_http_req_t *req = REQ_OF_UV(uv);
  unsigned slot = token & (NRES_MAX_INFLIGHT - 1);

  req->token_[slot] = token;
  req->deadline_[slot] = attempt->deadline;
  req->resends_[slot] = 0;
  req->failed_[slot] = 0;
  dispatch_attempt(req, slot);
}

static void forget_attempt(nres_http_req_t *req, unsigned slot) {
  nres__http_conn_t *conn = req->conn_[slot];

  req->token_[slot] = 0;
  req->failed_[slot] = 0;
  if (!nres__list_empty(&req->wait_[slot].link))
    nres__list_remove(&req->wait_[slot].link);
  if (conn != NULL) {
    nres__http_host_t *host = conn->host;
    drop_conn(conn);   /* mid-exchange: its state is unknown */
    nres__http_serve_waiters(req->client_, host);
  }
}

static void on_abandon(nres_uv_t *uv, uint32_t token) {
  nres_http_req_t *req = REQ_OF_UV(uv);
  unsigned slot = token & (NRES_MAX_INFLIGHT - 1);

  if (req->token_[slot] == token)
    forget_attempt(req, slot);
}

static void on_done(nres_uv_t *uv, int status) {
  nres_http_req_t *req = REQ_OF_UV(uv);
  nres__http_slot_t *pslot = req->slot_;
  unsigned slot;

  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++)
    if (req->token_[slot] != 0 || req->conn_[slot] != NULL ||
        !nres__list_empty(&req->wait_[slot].link))
      forget_attempt(req, slot);
  uv_timer_stop(&req->defer_);
  req->attempts = uv->call.attempts;
  req->stop = uv->call.stop;
  req->active_ = 0;
  pslot->inflight--;
  req->client_->running_--;
  req->cb_(req, status);
}

/* ----------------------------------------------------------------- public */

int nres_http_req_init(nres_http_client_t *client, nres_http_req_t *req) {
  unsigned slot;
  int rc;

  if (client == NULL || req == NULL || client->loop == NULL || client->closed_)
    return NRES_EINVAL;
  memset(req, 0, sizeof(*req));
  if ((rc = nres_uv_init(client->loop, &req->uv_)) != 0)
    return rc;
  uv_timer_init(client->loop, &req->defer_);
  req->defer_.data = req;
  req->client_ = client;
  req->retry_after = NRES_TIME_NEVER;
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    nres__list_init(&req->wait_[slot].link);
    req->wait_[slot].req = req;
    req->wait_[slot].slot = slot;
  }
  return 0;
}

/* Split the URL: authority and path offsets into req. */
static int parse_url(nres_http_req_t *req) {
  const char *u = req->url, *a, *e;
  size_t i, n;

  if (u == NULL || !ieq(u, "http://", 7))
    return NRES_EINVAL;
  a = u + 7;
  for (e = a; *e != '\0' && *e != '/' && *e != '?' && *e != '#'; e++)
    if (*e == '@')
      return NRES_EINVAL;   /* userinfo: not supported */
  if (e == a || (size_t) (e - a) >= NRES__HTTP_KEY_MAX)
    return NRES_EINVAL;
  n = 0;
  for (i = 0; e[i] != '\0' && e[i] != '#'; i++) {
    unsigned char c = (unsigned char) e[i];
    if (c <= 0x20 || c >= 0x7f)
      return NRES_EINVAL;   /* would break the request line */
    n++;
  }
  if (n > NRES__HTTP_HEAD_MAX)
    return NRES_EINVAL;
  req->key_len_ = (uint16_t) (e - a);
  req->path_off_ = (uint16_t) (e - u);
  req->path_len_ = (uint16_t) n;
  req->slash_ = n == 0 || e[0] == '?';
  return 0;
}

int nres_http_start(nres_http_req_t *req, nres_policy_t *policy,
                    nres_time_t inbound, nres_http_cb cb) {
  nres_http_client_t *client;
  nres__http_host_t *host;
  nres__http_slot_t *pslot;
  nres_policy_t *p;
  size_t method_len, headers_len = 0, head;
  const char *method;
  unsigned slot;
  int rc, once;

  if (req == NULL || req->client_ == NULL || cb == NULL || policy == NULL ||
      policy->private_magic != NRES__POLICY_MAGIC || req->closed_)
    return NRES_EINVAL;
  client = req->client_;
  if (client->closed_)
    return NRES_EINVAL;
  if (req->active_)
    return NRES_EBUSY;
  if (strlen(req->url != NULL ? req->url : "") > 65535)
    return NRES_EINVAL;
  if ((rc = parse_url(req)) != 0)
    return rc;
  method = req->method != NULL ? req->method : "GET";
  for (method_len = 0; method[method_len] != '\0'; method_len++)
    if (!is_tchar((unsigned char) method[method_len]) || method_len >= 16)
      return NRES_EINVAL;
  if (method_len == 0)
    return NRES_EINVAL;
  if (req->headers != NULL && check_headers(req->headers, &headers_len) != 0)
    return NRES_EINVAL;
  if (req->body_len > 0 && req->body == NULL)
    return NRES_EINVAL;
  if (req->body_len > UINT32_MAX)
    return NRES_EINVAL;   /* one uv_buf_t */
  head = method_len + 2 + req->path_len_ + 17 + req->key_len_ + 2 +
         15 + 20 + 2 + 16 + 20 + 2 + headers_len + 2;
  if (head > NRES__HTTP_HEAD_MAX)
    return NRES_EINVAL;
  req->method_len_ = (uint16_t) method_len;
  req->headers_len_ = (uint16_t) headers_len;
  if (headers_len > UINT16_MAX)
    return NRES_EINVAL;
  req->head_ = method_len == 4 && memcmp(method, "HEAD", 4) == 0;
  req->clen_ = req->body_len > 0 ||
               (method_len == 4 && memcmp(method, "POST", 4) == 0) ||
               (method_len == 3 && memcmp(method, "PUT", 3) == 0) ||
               (method_len == 5 && memcmp(method, "PATCH", 5) == 0);
  once = !(req->flags & NRES_HTTP_IDEMPOTENT) &&
         ((method_len == 4 && memcmp(method, "POST", 4) == 0) ||
          (method_len == 5 && memcmp(method, "PATCH", 5) == 0));

  rc = nres__http_host(client, req->url + req->path_off_ - req->key_len_,
                       req->key_len_, &host);
  if (rc != 0)
    return rc;
  if ((rc = nres__http_slot(host, policy, &pslot)) != 0)
    return rc;
  p = once ? &pslot->once : &pslot->retry;

  req->host_ = host;
  req->slot_ = pslot;
  req->status_code = 0;
  req->error = 0;
  req->attempts = 0;
  req->stop = NRES_STOP_NONE;
  req->resp_len = req->resp_copied = 0;
  req->retry_after = NRES_TIME_NEVER;
  for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++) {
    req->token_[slot] = 0;
    req->failed_[slot] = 0;
    req->conn_[slot] = NULL;
  }
  req->cb_ = cb;
  req->active_ = 1;
  pslot->inflight++;
  client->running_++;
  rc = nres_uv_start(&req->uv_, p, inbound, on_attempt, on_abandon, on_done);
  if (rc != 0) {
    req->active_ = 0;
    pslot->inflight--;
    client->running_--;
  }
  return rc;
}

int nres_http_cancel(nres_http_req_t *req) {
  if (req == NULL || !req->active_)
    return NRES_ESTATE;
  return nres_uv_cancel(&req->uv_);
}

static void on_req_timers_closed(uv_handle_t *handle) {
  nres_http_req_t *req = handle->data;
  if (--req->closing_ == 0 && req->close_cb_ != NULL)
    req->close_cb_(req);
}

static void on_uv_closed(nres_uv_t *uv) {
  on_req_timers_closed((uv_handle_t *) &REQ_OF_UV(uv)->defer_);
}

void nres_http_req_close(nres_http_req_t *req,
                         nres_http_req_close_cb close_cb) {
  unsigned slot;

  if (req == NULL || req->closed_ || req->client_ == NULL)
    return;
  req->closed_ = 1;
  req->close_cb_ = close_cb;
  if (req->active_) {
    /* Cancel without the callback: clean the attempts up ourselves. */
    for (slot = 0; slot < NRES_MAX_INFLIGHT; slot++)
      forget_attempt(req, slot);
    req->active_ = 0;
    ((nres__http_slot_t *) req->slot_)->inflight--;
    req->client_->running_--;
  }
  req->closing_ = 2;
  nres_uv_close(&req->uv_, on_uv_closed);
  uv_close((uv_handle_t *) &req->defer_, on_req_timers_closed);
}

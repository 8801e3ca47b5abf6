/* fuzz_http_response.c - libFuzzer target for the HTTP client's handling
 * of a response (runtime/src/exec/http.c): status line, headers, bodies by
 * length, chunked or by close, 1xx interim responses, the head limit, the
 * Retry-After value, the copy of the body into the caller's buffer.
 *
 * The bytes are the server's answer. A plain socket in this process plays
 * the server: it accepts the client's connection, reads the request head
 * and writes the answer in chunks cut where the first byte says (the
 * client's loop runs between chunks, so the parser sees every boundary),
 * then closes. The first byte may also ask for a HEAD request, a small
 * body buffer, or a first exchange with a canned answer so that the fuzzed
 * one arrives on a reused keep-alive connection.
 *
 * The client's result is compared with a reference reading of the same
 * bytes: the first final (2xx-9xx) response's status, its body (as much as
 * the buffers keep) and its Retry-After, after any interim 1xx answers; or
 * a transport error when there is no complete final response, the heads
 * are over the limit, or the answer is a 101 (never asked for) or a flood
 * of 1xx.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#include "nres/http.h"
#include "fuzz_input.h"

#define WAIT_NS (3000 * 1000 * 1000ull)  /* the attempt timeout is 2 s */
#define HEAD_MAX 512                     /* client's head limit */
#define BODY_MAX 64                      /* client's body buffer */
#define RA_MAX 64                        /* Retry-After bytes it keeps */
#define INTERIM_MAX 16                   /* 1xx answers it skips */

static uv_loop_t loop;
static int lfd = -1;                     /* the server's listening socket */
static char url[64];
static nres_policy_t policy;

enum {
  F_HEAD = 1,                            /* a HEAD request */
  F_SMALL_CAP = 2,                       /* resp_cap 8 */
  F_REUSE = 4                            /* a canned exchange first */
};

/* ------------------------------------------------------------ reference */

typedef struct {
  int head;                  /* answering a HEAD */
  int found;                 /* a final response is complete */
  int refused;               /* a 101, a status under 100, a 1xx flood */
  int interim;               /* a 1xx just ended */
  int status;
  uint64_t head_bytes;       /* status, fields, values up to the final's end */
  uint64_t body_len;
  char body[BODY_MAX];
  size_t body_kept;
  char field[16];            /* the header name being read, lowercased */
  size_t field_len;
  int field_long;
  int in_value;
  int ra_seen;
  char ra[RA_MAX + 1];
  size_t ra_len;
  int ra_long;
} ref_t;

static int ref_begin(http_parser *p) {
  ref_t *r = p->data;
  r->body_len = r->body_kept = 0;
  r->ra_seen = 0;
  r->ra_len = 0;
  r->ra_long = 0;
  r->field_len = 0;
  r->in_value = 1;
  return 0;
}

static int ref_status(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  (void) at;
  r->head_bytes += len;
  return 0;
}

static int ref_field(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  size_t i;
  r->head_bytes += len;
  if (r->in_value) {
    r->in_value = 0;
    r->field_len = 0;
    r->field_long = 0;
  }
  for (i = 0; i < len; i++) {
    char c = at[i];
    if (r->field_len == sizeof(r->field)) {
      r->field_long = 1;
      break;
    }
    r->field[r->field_len++] = (char) (c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return 0;
}

static int is_ra(const ref_t *r) {
  return !r->field_long && r->field_len == 11 &&
         memcmp(r->field, "retry-after", 11) == 0;
}

static int ref_value(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  r->head_bytes += len;
  if (!r->in_value) {
    r->in_value = 1;
    if (is_ra(r)) {   /* the last Retry-After field counts */
      r->ra_seen = 1;
      r->ra_len = 0;
      r->ra_long = 0;
    }
  }
  if (is_ra(r)) {
    if (r->ra_len + len > RA_MAX) {
      r->ra_long = 1;
    } else {
      memcpy(r->ra + r->ra_len, at, len);
      r->ra_len += len;
    }
  }
  return 0;
}

static int ref_headers_done(http_parser *p) {
  ref_t *r = p->data;
  if (p->status_code < 100 || p->status_code == 101) {
    r->refused = 1;
    return -1;
  }
  return r->head || p->status_code < 200 ? 1 : 0;   /* no body */
}

static int ref_body(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  size_t n = len < BODY_MAX - r->body_kept ? len : BODY_MAX - r->body_kept;
  memcpy(r->body + r->body_kept, at, n);
  r->body_kept += n;
  r->body_len += len;
  return 0;
}

static int ref_complete(http_parser *p) {
  ref_t *r = p->data;
  if (p->status_code >= 200) {
    r->found = 1;
    r->status = p->status_code;
  } else {
    r->interim = 1;
  }
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings ref_settings = {
  .on_message_begin = ref_begin,
  .on_status = ref_status,
  .on_header_field = ref_field,
  .on_header_value = ref_value,
  .on_headers_complete = ref_headers_done,
  .on_body = ref_body,
  .on_message_complete = ref_complete,
};

/* The answer as RFC 9110 reads it: interim 1xx answers (at most
 * INTERIM_MAX, each read by a fresh parser, as a 1xx may leave http-parser
 * dead) skipped, then the final one, complete or delimited by the close. */
static void reference(const uint8_t *data, size_t size, int head, ref_t *r) {
  const char *at = (const char *) data;
  http_parser p;
  int interims = 0;

  memset(r, 0, sizeof(*r));
  r->head = head;
  for (;;) {
    size_t n;
    http_parser_init(&p, HTTP_RESPONSE);
    p.data = r;
    r->interim = 0;
    n = http_parser_execute(&p, &ref_settings, at, size);
    at += n;
    size -= n;
    if (r->found || r->refused)
      return;
    if (!r->interim)
      break;
    if (++interims > INTERIM_MAX) {
      r->refused = 1;
      return;
    }
    if (size == 0)
      break;
  }
  if (HTTP_PARSER_ERRNO(&p) == HPE_OK)
    http_parser_execute(&p, &ref_settings, NULL, 0);   /* the close */
}

/* --------------------------------------------------------------- server */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  struct sockaddr_in addr;
  socklen_t len = sizeof(addr);

  (void) argc;
  (void) argv;
  signal(SIGPIPE, SIG_IGN);
  FUZZ_CHECK(uv_loop_init(&loop) == 0);
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(lfd >= 0);
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(bind(lfd, (struct sockaddr *) &addr, sizeof(addr)) == 0);
  FUZZ_CHECK(listen(lfd, 16) == 0);
  FUZZ_CHECK(getsockname(lfd, (struct sockaddr *) &addr, &len) == 0);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/fuzz", ntohs(addr.sin_port));

  FUZZ_CHECK(nres_policy_init(&policy, NRES_PRESET_TRIVIAL) == 0);
  policy.attempts = 1;
  policy.attempt_timeout = 2 * NRES_SEC;
  FUZZ_CHECK(nres_policy_build(&policy) == 0);
  return 0;
}

/* Sleep until fd (if >= 0) or the client's loop has something to do, or
 * until deadline; then run the client's ready callbacks. */
static void wait_io(int fd, uint64_t deadline) {
  struct pollfd pfd[2] = { { uv_backend_fd(&loop), POLLIN, 0 },
                           { fd, POLLIN, 0 } };
  uint64_t now = uv_hrtime();
  int ms = now < deadline ? (int) ((deadline - now) / 1000000) + 1 : 0;
  int due = uv_backend_timeout(&loop);

  if (due >= 0 && due < ms)
    ms = due;
  poll(pfd, fd >= 0 ? 2 : 1, ms);
  uv_run(&loop, UV_RUN_NOWAIT);
}

/* Read one request head (a GET or HEAD: no body) on sfd, or on the next
 * connection accepted if sfd < 0 (one that closes before sending anything
 * is a leftover of an earlier input: skipped). Returns the connection, or
 * -1 if no request came by the deadline. */
static int read_request(int sfd, uint64_t deadline) {
  char buf[4096];
  size_t have = 0;

  for (;;) {
    ssize_t r;
    if (sfd < 0) {
      sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
      have = 0;
    }
    if (sfd >= 0) {
      r = recv(sfd, buf + have, sizeof(buf) - have, 0);
      if (r > 0) {
        have += (size_t) r;
        if (memmem(buf, have, "\r\n\r\n", 4) != NULL)
          return sfd;
        FUZZ_CHECK(have < sizeof(buf));   /* our request head is short */
        continue;
      }
      if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(sfd);
        sfd = -1;
        continue;
      }
    }
    if (uv_hrtime() > deadline) {
      if (sfd >= 0)
        close(sfd);
      return -1;
    }
    wait_io(sfd >= 0 ? sfd : lfd, deadline);
  }
}

/* Refuse any other connection: the client sending its request again on a
 * fresh one (its pooled connection closed before an answer) gets a reset. */
static void refuse_others(void) {
  int fd;
  while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
    close(fd);
}

static void write_answer(int sfd, const uint8_t *p, size_t n, size_t chunk,
                         uint64_t deadline) {
  while (n > 0) {
    size_t k = n < chunk ? n : chunk;
    ssize_t w = send(sfd, p, k, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t) w;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return;   /* the client closed: it has seen enough */
    }
    if (uv_hrtime() > deadline)
      return;
    uv_run(&loop, UV_RUN_NOWAIT);
  }
}

/* --------------------------------------------------------------- client */

typedef struct {
  int ended;
  int status;
} outcome_t;

static void on_done(nres_http_req_t *req, int status) {
  outcome_t *o = req->data;
  o->ended = 1;
  o->status = status;
}

static void on_client_closed(nres_http_client_t *client) {
  *(int *) client->data = 1;
}

static void run_request(nres_http_req_t *req, outcome_t *o, int sfd_in,
                        const uint8_t *answer, size_t size, size_t chunk,
                        int close_after, int *sfd_out) {
  uint64_t deadline = uv_hrtime() + WAIT_NS;
  int sfd;

  o->ended = 0;
  FUZZ_CHECK(nres_http_start(req, &policy, NRES_TIME_NEVER, on_done) == 0);
  sfd = read_request(sfd_in, deadline);
  FUZZ_CHECK(sfd >= 0);
  write_answer(sfd, answer, size, chunk, deadline);
  if (close_after) {
    close(sfd);
    sfd = -1;
  }
  while (!o->ended) {
    FUZZ_CHECK(uv_hrtime() < deadline);   /* the attempt timeout fires */
    refuse_others();
    wait_io(lfd, deadline);
  }
  *sfd_out = sfd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char canned[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  nres_http_config_t cfg;
  nres_http_client_t client;
  nres_http_req_t req;
  outcome_t o;
  ref_t ref;
  char body[BODY_MAX];
  size_t chunk, cap;
  uint8_t flags;
  int sfd = -1, closed = 0;

  if (size == 0)
    return 0;
  flags = data[0];
  data++;
  size--;
  chunk = (flags >> 3) == 0 ? size + 1 : (size_t) (flags >> 3) * 3;
  cap = (flags & F_SMALL_CAP) ? 8 : sizeof(body);

  nres_http_config_init(&cfg);
  cfg.head_max = HEAD_MAX;
  cfg.body_max = BODY_MAX;
  FUZZ_CHECK(nres_http_client_init(&loop, &client, &cfg) == 0);
  client.data = &closed;
  FUZZ_CHECK(nres_http_req_init(&client, &req) == 0);
  req.data = &o;
  req.url = url;
  req.method = (flags & F_HEAD) ? "HEAD" : "GET";
  req.resp_body = body;
  req.resp_cap = cap;

  if (flags & F_REUSE) {
    run_request(&req, &o, -1, (const uint8_t *) canned, sizeof(canned) - 1,
                sizeof(canned), 0, &sfd);
    FUZZ_CHECK(o.status == 0 && req.status_code == 200);
  }
  run_request(&req, &o, sfd, data, size, chunk, 1, &sfd);

  /* What every result promises. */
  FUZZ_CHECK(req.attempts == 1);
  FUZZ_CHECK(req.resp_copied <= cap && req.resp_copied <= BODY_MAX &&
             req.resp_copied <= req.resp_len);
  FUZZ_CHECK(req.retry_after == NRES_TIME_NEVER ||
             req.retry_after <= NRES_HTTP_RETRY_AFTER_MAX);
  if (req.status_code == 0)
    FUZZ_CHECK(req.error < 0 && o.status != 0);
  else
    FUZZ_CHECK(req.error == 0 && req.status_code >= 100 &&
               req.status_code <= 999);

  /* And what these bytes should have given. */
  reference(data, size, (flags & F_HEAD) != 0, &ref);
  if (!ref.found || ref.refused || ref.head_bytes > HEAD_MAX) {
    FUZZ_CHECK(req.status_code == 0);
  } else {
    nres_time_t ra = NRES_TIME_NEVER;
    size_t n = ref.body_kept < cap ? ref.body_kept : cap;

    if (req.status_code != ref.status)
      fprintf(stderr, "client status %d, first final response %d\n",
              req.status_code, ref.status);
    FUZZ_CHECK(req.status_code == ref.status);
    FUZZ_CHECK(req.resp_len == ref.body_len);
    FUZZ_CHECK(req.resp_copied == n && memcmp(body, ref.body, n) == 0);
    if (ref.ra_seen && !ref.ra_long && ref.ra_len > 0 &&
        nres_http_retry_after(ref.ra, ref.ra_len, (int64_t) time(NULL),
                              &ra) != 0)
      ra = NRES_TIME_NEVER;
    /* A date is read against the wall clock: a second may have passed. */
    FUZZ_CHECK(req.retry_after == ra ||
               (ra != NRES_TIME_NEVER && req.retry_after != NRES_TIME_NEVER &&
                (req.retry_after > ra ? req.retry_after - ra
                                      : ra - req.retry_after) <= NRES_SEC));
  }

  if (sfd >= 0)
    close(sfd);
  nres_http_req_close(&req, NULL);
  FUZZ_CHECK(nres_http_client_close(&client, on_client_closed) == 0);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* fuzz_http_wire.c - libFuzzer target for the HTTP client as a whole
 * request meets a server's answer (runtime/src/exec/http.c, http_pool.c):
 * the parsing of fuzz_http_response.c, plus reads cut anywhere, the close
 * that ends a body, keep-alive reuse, the Retry-After delay and the copy
 * of the body into the caller's buffer.
 *
 * The bytes are the server's answer. A plain socket in this process plays
 * the server: it accepts the client's connection, reads the request head
 * and writes the answer in chunks cut where the first byte says (the
 * client's loop runs between chunks, so the parser sees every boundary),
 * then closes. The first byte may also ask for a HEAD request, a small
 * body buffer, or a first exchange with a canned answer so that the fuzzed
 * one arrives on a reused keep-alive connection.
 *
 * The client's result is compared with the reference reading of the same
 * bytes (http_reference.h): the first final (2xx-9xx) answer's status, its
 * body (as much as the buffers keep) and its Retry-After, after any interim
 * 1xx answers; or a transport error when there is no complete final
 * answer, the heads are over the limit, or the answer is a 101 (never
 * asked for) or a flood of 1xx.
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
#include "http_reference.h"

#define WAIT_NS (5 * 1000 * 1000 * 1000ull)    /* attempt timeout: 2 s */
#define HEAD_MAX 512                     /* client's head limit */
#define BODY_MAX REF_BODY_MAX            /* client's body buffer */

static uv_loop_t loop;
static int lfd = -1;                     /* the server's listening socket */
static char url[64];
static nres_policy_t policy;

enum {
  F_HEAD = 1,                            /* a HEAD request */
  F_SMALL_CAP = 2,                       /* resp_cap 8 */
  F_REUSE = 4                            /* a canned exchange first */
};

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
  time_t t0, t1;
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
  t0 = time(NULL);
  run_request(&req, &o, sfd, data, size, chunk, 1, &sfd);
  t1 = time(NULL);

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
    nres_time_t ra0, ra1;
    size_t n = ref.body_kept < cap ? ref.body_kept : cap;

    if (req.status_code != ref.status)
      fprintf(stderr, "client status %d, first final response %d\n",
              req.status_code, ref.status);
    FUZZ_CHECK(req.status_code == ref.status);
    FUZZ_CHECK(req.resp_len == ref.body_len);
    FUZZ_CHECK(req.resp_copied == n && memcmp(body, ref.body, n) == 0);
    /* A date is read against the wall clock, somewhere between t0 and t1:
     * the delay is at most the one at t0, at least the one at t1. */
    if (ref.ra_seen && !ref.ra_long && ref.ra_len > 0 &&
        nres_http_retry_after(ref.ra, ref.ra_len, (int64_t) t0, &ra0) == 0) {
      FUZZ_CHECK(nres_http_retry_after(ref.ra, ref.ra_len, (int64_t) t1,
                                       &ra1) == 0);
      FUZZ_CHECK(req.retry_after <= ra0 && req.retry_after >= ra1);
    } else {
      FUZZ_CHECK(req.retry_after == NRES_TIME_NEVER);
    }
  }

  if (sfd >= 0)
    close(sfd);
  nres_http_req_close(&req, NULL);
  FUZZ_CHECK(nres_http_client_close(&client, on_client_closed) == 0);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  return 0;
}

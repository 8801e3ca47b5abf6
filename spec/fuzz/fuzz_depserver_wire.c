/* SPDX-License-Identifier: MIT */
/* fuzz_depserver_wire.c - libFuzzer target for the dependency server
 * (runtime/src/depserver) over a real socket: its request handling as in
 * fuzz_depserver.c, plus its reads, writes and closes, and what it sends.
 *
 * The server must survive anything a client sends, so the bytes are sent
 * to a real server on a loopback socket, driven in this process: a fresh
 * server per input (its counters, outage state and flaky counter start
 * from zero, so a crash reproduces from one input), the bytes written in
 * chunks cut where the first byte says with the server's loop run between
 * them (a head split at every boundary), then our side shut for writing.
 * What comes back must be a sequence of well-formed HTTP/1.1 responses
 * (checked with http-parser), one at most per request sent, and the server
 * must close the connection once we have shut ours, within a time bound,
 * unless it is holding an answer back on purpose (/slow).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>
#include <uv.h>

#include "depserver.h"
#include "fuzz_input.h"
#include "http_reference.h"

/* How long the server may take to answer and close: loopback answers take
 * well under a millisecond; the margin is for a loaded machine. */
#define WAIT_NS (1000 * 1000 * 1000ull)

static uv_loop_t loop;

typedef struct {
  unsigned responses;       /* complete responses read back */
  int status;               /* of the last response */
} tally_t;

static int count_response(http_parser *p) {
  tally_t *t = p->data;
  FUZZ_CHECK(p->status_code >= 100 && p->status_code <= 999);
  FUZZ_CHECK(p->http_major == 1 && p->http_minor == 1);
  t->status = p->status_code;
  t->responses++;
  return 0;
}

static const http_parser_settings counting = {
  .on_message_complete = count_response,
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void) argc;
  (void) argv;
  signal(SIGPIPE, SIG_IGN);   /* the server writes to sockets we closed */
  FUZZ_CHECK(uv_loop_init(&loop) == 0);
  return 0;
}

/* Let the server run what is ready. */
static void spin(void) {
  uv_run(&loop, UV_RUN_NOWAIT);
}

/* Sleep until `fd` or the server's loop has something, a timer of the
 * server is due, or `deadline` (hrtime) comes; then let the server run. */
static void wait_io(int fd, uint64_t deadline) {
  struct pollfd pfd[2] = { { fd, POLLIN, 0 },
                           { uv_backend_fd(&loop), POLLIN, 0 } };
  uint64_t now = uv_hrtime();
  int ms = now < deadline ? (int) ((deadline - now) / 1000000) + 1 : 0;
  int due = uv_backend_timeout(&loop);

  if (due >= 0 && due < ms)
    ms = due;
  poll(pfd, 2, ms);
  spin();
}

static int send_all(int fd, const uint8_t *p, size_t n, uint64_t deadline) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t) w;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return -1;   /* the server closed on a bad request: fine */
    }
    spin();
    if (uv_hrtime() > deadline)
      return -1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nres_depserver_config_t cfg;
  nres_depserver_t *srv;
  struct sockaddr_in addr;
  http_parser resp_parser;
  tally_t tally = { 0, 0 };
  char buf[8192];
  uint64_t deadline;
  size_t off, chunk, parsed;
  int fd, one = 1, eof = 0, send_failed = 0;
  uint8_t cut;

  if (size == 0)
    return 0;
  cut = data[0];
  data++;
  size--;

  nres_depserver_config_init(&cfg);
  cfg.max_conns = 2;
  cfg.idle_ms = 5000;
  cfg.head_max = 1024;   /* small limits: reachable by short inputs */
  cfg.body_max = 512;
  cfg.flaky_every = 2;
  FUZZ_CHECK(nres_depserver_new(&loop, &cfg, &srv) == 0);

  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(fd >= 0);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t) nres_depserver_port(srv));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(connect(fd, (struct sockaddr *) &addr, sizeof(addr)) == 0 ||
             errno == EINPROGRESS);

  deadline = uv_hrtime() + WAIT_NS;
  chunk = cut == 0 ? size : (size_t) (cut % 64) + 1;
  for (off = 0; off < size && !send_failed; off += chunk) {
    size_t n = size - off < chunk ? size - off : chunk;
    send_failed = send_all(fd, data + off, n, deadline) != 0;
    spin();
  }
  shutdown(fd, SHUT_WR);

  http_parser_init(&resp_parser, HTTP_RESPONSE);
  resp_parser.data = &tally;
  while (!eof && uv_hrtime() < deadline) {
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r > 0) {
      parsed = http_parser_execute(&resp_parser, &counting, buf, (size_t) r);
      if (HTTP_PARSER_ERRNO(&resp_parser) != HPE_OK) {
        fprintf(stderr, "server answer: %s\n",
                http_errno_description(HTTP_PARSER_ERRNO(&resp_parser)));
        FUZZ_CHECK(!"the server's answer is not HTTP/1.1");
      }
      FUZZ_CHECK(parsed == (size_t) r);
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      eof = 1;   /* closed (or reset: /truncate) */
    } else {
      wait_io(fd, deadline);
    }
  }
  /* One answer per request at most; an answer to a request the parser
   * refused (400, 413, 414, 431) counts as one more. */
  FUZZ_CHECK(tally.responses <= requests_in((const char *) data, size) + 1);
  /* Closed within the bound unless a /slow answer is held back. */
  FUZZ_CHECK(eof || memmem(data, size, "/slow", 5) != NULL);

  close(fd);
  nres_depserver_stop(srv);
  uv_run(&loop, UV_RUN_DEFAULT);   /* every handle closed */
  nres_depserver_free(srv);
  return 0;
}

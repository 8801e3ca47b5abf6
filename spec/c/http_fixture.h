/* SPDX-License-Identifier: MIT */
/* http_fixture.h - the dependency server on a thread of the test process,
 * and a blocking raw-socket HTTP helper, for test_depserver and test_http.
 *
 * The server runs on its own loop and thread (so ASan and TSan see it too)
 * and is always stopped by test_server_stop. The raw helper speaks just
 * enough HTTP/1.1 to check answers byte for byte; every socket has a
 * receive timeout, so a server that never answers fails a test instead of
 * hanging it.
 */
#ifndef NRES_HTTP_FIXTURE_H
#define NRES_HTTP_FIXTURE_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "depserver.h"

typedef struct {
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  nres_depserver_config_t cfg;
  nres_depserver_t *srv;
  int ready, rc, port;
} test_server_t;

static void *test_server_main(void *arg) {
  test_server_t *s = arg;
  uv_loop_t loop;
  nres_depserver_t *srv = NULL;
  int rc;

  uv_loop_init(&loop);
  rc = nres_depserver_new(&loop, &s->cfg, &srv);
  pthread_mutex_lock(&s->mu);
  s->rc = rc;
  s->srv = srv;
  s->port = rc == 0 ? nres_depserver_port(srv) : 0;
  s->ready = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (rc == 0) {
    uv_run(&loop, UV_RUN_DEFAULT);
    nres_depserver_free(srv);
  }
  uv_loop_close(&loop);
  return NULL;
}

/* cfg may be NULL: defaults, with a short idle timeout for the tests. */
static int test_server_start(test_server_t *s,
                             const nres_depserver_config_t *cfg) {
  memset(s, 0, sizeof(*s));
  if (cfg != NULL) {
    s->cfg = *cfg;
  } else {
    nres_depserver_config_init(&s->cfg);
    s->cfg.idle_ms = 1000;
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (pthread_create(&s->tid, NULL, test_server_main, s) != 0)
    return -1;
  pthread_mutex_lock(&s->mu);
  while (!s->ready)
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  if (s->rc != 0) {
    pthread_join(s->tid, NULL);
    return s->rc;
  }
  return 0;
}

static void test_server_stop(test_server_t *s) {
  nres_depserver_stop_async(s->srv);
  pthread_join(s->tid, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
}

/* ------------------------------------------------------------ raw HTTP */

static int raw_connect(int port) {
  struct sockaddr_in a;
  struct timeval tv = { 5, 0 };
  int one = 1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  if (fd < 0)
    return -1;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t) port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline void raw_timeout_ms(int fd, int ms) {
  struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Send everything; 0, or -1 if the peer went away. */
static int raw_send(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t) n;
  }
  return 0;
}

/* An answer as read by raw_response. */
typedef struct {
  int status;            /* > 0 status; 0 closed before an answer; -1 timed
                            out; -2 malformed */
  char head[4096];
  char body[4096];
  size_t body_len;
  size_t content_length;
} raw_resp_t;

/* The value of header `name` in head (case-sensitive as we write them),
 * into out; 1 found. */
static inline int raw_header(const raw_resp_t *r, const char *name, char *out,
                      size_t cap) {
  char key[64];
  const char *p, *e;
  snprintf(key, sizeof(key), "\r\n%s: ", name);
  p = strstr(r->head, key);
  if (p == NULL)
    return 0;
  p += strlen(key);
  e = strstr(p, "\r\n");
  if (e == NULL || (size_t) (e - p) >= cap)
    return 0;
  memcpy(out, p, (size_t) (e - p));
  out[e - p] = '\0';
  return 1;
}

/* Read one answer (Content-Length framed) from fd; leftover bytes of a
 * pipelined next answer are kept in *carry. */
typedef struct {
  char buf[65536];
  size_t len;
} raw_carry_t;

static void raw_response(int fd, raw_carry_t *carry, raw_resp_t *r) {
  char *end;
  size_t head_len, need;
  const char *cl;

  memset(r, 0, sizeof(*r));
  for (;;) {
    carry->buf[carry->len] = '\0';
    end = strstr(carry->buf, "\r\n\r\n");
    if (end != NULL)
      break;
    if (carry->len >= sizeof(carry->buf) - 1) {
      r->status = -2;
      return;
    }
    ssize_t n = recv(fd, carry->buf + carry->len,
                     sizeof(carry->buf) - 1 - carry->len, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      r->status = 0;
      return;
    }
    if (n < 0) {
      r->status = -1;
      return;
    }
    carry->len += (size_t) n;
  }
  head_len = (size_t) (end - carry->buf) + 4;
  if (head_len >= sizeof(r->head) || sscanf(carry->buf, "HTTP/1.1 %d", &r->status) != 1) {
    r->status = -2;
    return;
  }
  memcpy(r->head, carry->buf, head_len);
  r->head[head_len] = '\0';
  cl = strstr(r->head, "Content-Length: ");
  r->content_length = cl != NULL ? strtoul(cl + 16, NULL, 10) : 0;
  need = head_len + r->content_length;
  while (carry->len < need) {
    ssize_t n;
    if (need > sizeof(carry->buf) - 1) {
      r->status = -2;
      return;
    }
    n = recv(fd, carry->buf + carry->len, need - carry->len, 0);
    if (n <= 0) {   /* cut off mid-body */
      r->body_len = carry->len - head_len;
      memcpy(r->body, carry->buf + head_len, r->body_len);
      r->status = n == 0 || errno == ECONNRESET ? -3 : -1;
      carry->len = 0;
      return;
    }
    carry->len += (size_t) n;
  }
  r->body_len = r->content_length < sizeof(r->body) - 1 ? r->content_length
                                                        : sizeof(r->body) - 1;
  memcpy(r->body, carry->buf + head_len, r->body_len);
  r->body[r->body_len] = '\0';
  memmove(carry->buf, carry->buf + need, carry->len - need);
  carry->len -= need;
}

/* One GET on a fresh connection. */
static int raw_get(int port, const char *path, raw_resp_t *r) {
  static __thread raw_carry_t carry;
  char req[2048];
  int fd = raw_connect(port);
  if (fd < 0)
    return -1;
  snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
  carry.len = 0;
  if (raw_send(fd, req, strlen(req)) != 0) {
    close(fd);
    return -1;
  }
  raw_response(fd, &carry, r);
  close(fd);
  return r->status;
}

/* A number from /stats: key as it appears, e.g. "\"accepted\":". */
static long long stat_of(int port, const char *key) {
  raw_resp_t r;
  const char *p;
  if (raw_get(port, "/stats", &r) != 200)
    return -1;
  p = strstr(r.body, key);
  if (p == NULL)
    return -1;
  return strtoll(p + strlen(key), NULL, 10);
}

static void raw_reset(int port) {
  raw_resp_t r;
  raw_get(port, "/reset", &r);
}

#endif /* NRES_HTTP_FIXTURE_H */

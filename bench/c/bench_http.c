/* SPDX-License-Identifier: MIT */
/* bench_http.c - what the HTTP client handler costs against a raw
 * hand-written keep-alive loop on the same dependency server.
 *
 * The server is nres-depserver in a child process (its allocations are not
 * counted here). Arms, one request in flight each, run interleaved
 * repetition by repetition so drift lands on all of them:
 *   raw          blocking socket, one connection, write the request, read
 *                the Content-Length framed answer (no library, no loop)
 *   raw-flaky    the same against /flaky (n = 4): the 503s are not retried
 *   lib-minimal  nres_http_start under the NONE preset (one attempt, no
 *                bookkeeping) on a libuv loop, /echo
 *   lib          the default preset (3 attempts, no backoff, budget off),
 *                /echo
 *   lib-flaky    the same on /flaky (n = 4): retries included
 *   lib-8        lib with 8 requests in flight (ops/s only; raw has no
 *                concurrent twin here)
 * Reported: median requests/s with min and max over the repetitions, the
 * ratio to raw of the same repetition, and heap bytes per request counted
 * through nres_replace_allocator plus the C library's malloc (interposed:
 * libuv's allocations count too). Never asserted.
 *
 *   bench_http [--reps N] [--requests N]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nres/http.h"

extern char **environ;

/* ---------------------------------------------------- counting malloc */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static atomic_ulong heap_bytes;
static atomic_int counting;
void *malloc(size_t n) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add(&heap_bytes, n);
  return __libc_malloc(n);
}
void *calloc(size_t c, size_t n) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add(&heap_bytes, c * n);
  return __libc_calloc(c, n);
}
void *realloc(void *p, size_t n) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add(&heap_bytes, n);
  return __libc_realloc(p, n);
}

/* ------------------------------------------------------------- raw loop */

static int port;

static int raw_connect(void) {
  struct sockaddr_in a;
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t) port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0) {
    perror("connect");
    exit(1);
  }
  return fd;
}

/* n requests on one keep-alive connection; returns failures (non-200). */
static long raw_run(const char *path, long n) {
  char req[256], buf[8192];
  size_t rlen = (size_t) snprintf(req, sizeof(req),
                                  "GET %s HTTP/1.1\r\nHost: b\r\n\r\n", path);
  size_t have = 0;
  long i, bad = 0;
  int fd = raw_connect();

  for (i = 0; i < n; i++) {
    char *end;
    size_t need;
    if (send(fd, req, rlen, MSG_NOSIGNAL) != (ssize_t) rlen)
      exit(1);
    for (;;) {
      buf[have] = '\0';
      end = strstr(buf, "\r\n\r\n");
      if (end != NULL) {
        const char *cl = strstr(buf, "Content-Length: ");
        need = (size_t) (end - buf) + 4 + (cl ? strtoul(cl + 16, NULL, 10) : 0);
        if (have >= need)
          break;
      }
      ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
      if (r <= 0)
        exit(1);
      have += (size_t) r;
    }
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
      bad++;
    memmove(buf, buf + need, have - need);
    have -= need;
  }
  close(fd);
  return bad;
}

/* ------------------------------------------------------------ lib loop */

typedef struct {
  uv_loop_t loop;
  nres_http_client_t client;
  nres_policy_t none, def;
  nres_http_req_t req[8];
  nres_policy_t *policy;
  long left, failed;
  char url_echo[64], url_flaky[64];
} lib_t;

static void on_done(nres_http_req_t *req, int status) {
  lib_t *l = req->data;
  if (status != 0)
    l->failed++;
  if (l->left > 0) {
    l->left--;
    nres_http_start(req, l->policy, NRES_TIME_NEVER, on_done);
  }
}

static long lib_run(lib_t *l, nres_policy_t *p, const char *url, long n,
                    int width) {
  int i;
  l->policy = p;
  l->failed = 0;
  l->left = n - width;
  for (i = 0; i < width; i++) {
    l->req[i].url = url;
    l->req[i].data = l;
    if (nres_http_start(&l->req[i], p, NRES_TIME_NEVER, on_done) != 0)
      exit(1);
  }
  uv_run(&l->loop, UV_RUN_DEFAULT);
  return l->failed;
}

/* ---------------------------------------------------------------- main */

enum { RAW, RAW_FLAKY, LIB_MIN, LIB, LIB_FLAKY, LIB_8, ARMS };
static const char *const arm_name[ARMS] = { "raw", "raw-flaky", "lib-minimal",
                                            "lib", "lib-flaky", "lib-8" };

static double now_s(void) {
  return (double) nres_clock_now() / 1e9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  double tmp[64];
  memcpy(tmp, v, sizeof(double) * (size_t) n);
  qsort(tmp, (size_t) n, sizeof(double), cmp);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static double vmin(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static double vmax(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static void *nres_count_malloc(size_t n) { return malloc(n); }
static void *nres_count_realloc(void *p, size_t n) { return realloc(p, n); }
static void *nres_count_calloc(size_t c, size_t n) { return calloc(c, n); }

int main(int argc, char **argv) {
  int reps = 5, rep, a, i, pin[2], pout[2];
  long n = 20000;
  double ops[ARMS][64], bytes[ARMS][64], failed[ARMS][64];
  char line[64];
  pid_t pid;
  posix_spawn_file_actions_t fa;
  char *sargv[] = { (char *) NRES_DEPSERVER_PATH, "--flaky-every", "4", NULL };
  lib_t *l = calloc(1, sizeof(*l));

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
      n = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_http [--reps N (1..64)] [--requests N]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || n < 16) {
    fprintf(stderr, "bench_http: --reps 1..64, --requests >= 16\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  nres_replace_allocator(nres_count_malloc, nres_count_realloc,
                         nres_count_calloc, free);

  /* the server, in its own process; its stdin is our pipe */
  if (pipe(pin) || pipe(pout))
    return 1;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
  posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
  posix_spawn_file_actions_addclose(&fa, pin[1]);
  posix_spawn_file_actions_addclose(&fa, pout[0]);
  if (posix_spawn(&pid, NRES_DEPSERVER_PATH, &fa, NULL, sargv, environ) != 0) {
    perror("spawn nres-depserver");
    return 1;
  }
  close(pin[0]);
  close(pout[1]);
  {
    ssize_t r = read(pout[0], line, sizeof(line) - 1);
    line[r > 0 ? r : 0] = '\0';
  }
  if (sscanf(line, "port %d", &port) != 1) {
    fprintf(stderr, "bench_http: no port line from the server\n");
    return 1;
  }

  uv_loop_init(&l->loop);
  nres_http_client_init(&l->loop, &l->client, NULL);
  nres_policy_init(&l->none, NRES_PRESET_NONE);
  nres_policy_build(&l->none);
  nres_policy_init(&l->def, NRES_PRESET_DEFAULT);
  l->def.backoff.kind = NRES_BACKOFF_NONE;
  l->def.backoff.jitter = NRES_JITTER_NONE;
  l->def.budget = NULL;
  nres_policy_build(&l->def);
  for (i = 0; i < 8; i++)
    nres_http_req_init(&l->client, &l->req[i]);
  snprintf(l->url_echo, sizeof(l->url_echo), "http://127.0.0.1:%d/echo", port);
  snprintf(l->url_flaky, sizeof(l->url_flaky), "http://127.0.0.1:%d/flaky", port);
  /* warm-up: connections, hosts, derived policies */
  lib_run(l, &l->none, l->url_echo, 2000, 8);
  lib_run(l, &l->def, l->url_echo, 2000, 8);
  lib_run(l, &l->def, l->url_flaky, 2000, 8);
  raw_run("/echo", 2000);

  for (rep = 0; rep < reps; rep++) {
    for (a = 0; a < ARMS; a++) {
      long bad = 0;
      double t0;
      atomic_store(&heap_bytes, 0);
      atomic_store(&counting, 1);
      t0 = now_s();
      switch (a) {
        case RAW: bad = raw_run("/echo", n); break;
        case RAW_FLAKY: bad = raw_run("/flaky", n); break;
        case LIB_MIN: bad = lib_run(l, &l->none, l->url_echo, n, 1); break;
        case LIB: bad = lib_run(l, &l->def, l->url_echo, n, 1); break;
        case LIB_FLAKY: bad = lib_run(l, &l->def, l->url_flaky, n, 1); break;
        case LIB_8: bad = lib_run(l, &l->def, l->url_echo, n, 8); break;
      }
      ops[a][rep] = (double) n / (now_s() - t0);
      atomic_store(&counting, 0);
      bytes[a][rep] = (double) atomic_load(&heap_bytes) / (double) n;
      failed[a][rep] = (double) bad / (double) n;
    }
  }

  printf("bench_http: %d repetitions x %ld requests, one connection per "
         "in-flight request, server nres-depserver (own process)\n\n",
         reps, n);
  printf("| arm | req/s median | min | max | ratio to raw | heap B/req | "
         "failed/req |\n|---|---|---|---|---|---|---|\n");
  for (a = 0; a < ARMS; a++) {
    double ratio[64];
    for (rep = 0; rep < reps; rep++)
      ratio[rep] = ops[a][rep] / ops[RAW][rep];
    printf("| %s | %.0f | %.0f | %.0f | %.3f | %.1f | %.3f |\n", arm_name[a],
           median(ops[a], reps), vmin(ops[a], reps), vmax(ops[a], reps),
           median(ratio, reps), median(bytes[a], reps),
           median(failed[a], reps));
  }
  {
    double us_raw = 1e6 / median(ops[RAW], reps);
    printf("\nper request: raw %.2f us, lib-minimal +%.2f us, lib +%.2f us "
           "(medians)\n", us_raw, 1e6 / median(ops[LIB_MIN], reps) - us_raw,
           1e6 / median(ops[LIB], reps) - us_raw);
  }

  for (i = 0; i < 8; i++)
    nres_http_req_close(&l->req[i], NULL);
  nres_http_client_close(&l->client, NULL);
  uv_run(&l->loop, UV_RUN_DEFAULT);
  uv_loop_close(&l->loop);
  free(l);
  close(pin[1]);   /* the server stops when its stdin closes */
  waitpid(pid, NULL, 0);
  return 0;
}

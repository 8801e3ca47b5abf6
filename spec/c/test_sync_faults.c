/* SPDX-License-Identifier: MIT */
/* test_sync_faults.c - the fleet agent against a server that lies
 * (issue 28, defects 4, 5 and 8).
 *
 * A fake Redis on a thread of this test (127.0.0.1, a port the kernel
 * gives it) speaks enough RESP for the agent: AUTH, SELECT, SCRIPT LOAD,
 * PING and EVALSHA, whose answer is a crafted reply per kind of entry.
 * Rounds run with nres_sync_tick on a virtual clock, so the figures are the
 * same at every run. Checked:
 * - every malformed or out-of-range reply (the rate reply whose second
 *   element is an integer that crashed nres-syncd, a quota of 1e300, a
 *   budget share of -1e15, NaN, nil, nested arrays...) fails the round:
 *   NRES_ESTATE, local-only state, one log line naming the element and the
 *   reply's shape, never a crash, and the state never takes the value;
 * - an error reply (NOAUTH, READONLY) repeated every round is said once,
 *   a change is said again, and the recovery once;
 * - a failing round always backs off: reconnections grow apart up to
 *   reconnect_max, whatever the failure;
 * - nres-syncd --once exits 1 (not a signal) on a bad reply, 0 on a good
 *   one.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nres.h"
#include "nres/sync.h"
#include "../sync/syncd_test.h"

/* ---------------------------------------------------------- fake Redis */

typedef struct {
  int lfd, port;
  pthread_t th;
  atomic_int stop;
  atomic_int accepts;
  atomic_int evals;
  pthread_mutex_t mu;
  char reply[4][512];           /* EVALSHA's answer per kind (1..3) */
  char auth[128];               /* AUTH's answer; "" = +OK */
} fake_t;

static fake_t fake;

static void fake_set(int kind, const char *raw) {
  pthread_mutex_lock(&fake.mu);
  snprintf(fake.reply[kind], sizeof(fake.reply[kind]), "%s", raw);
  pthread_mutex_unlock(&fake.mu);
}

static void put(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= (size_t) w;
  }
}

/* One RESP command (an array of bulk strings) from buf: the number of
 * bytes it takes, or 0 if incomplete. argv points into buf. */
static size_t parse(char *buf, size_t len, int *argc, char **argv,
                    size_t *alen) {
  char *p = buf, *end = buf + len, *nl;
  long n, i, l;

  if (len < 4 || *p != '*' || (nl = memchr(p, '\n', len)) == NULL)
    return 0;
  n = strtol(p + 1, NULL, 10);
  p = nl + 1;
  for (i = 0; i < n; i++) {
    if (p >= end || *p != '$' || (nl = memchr(p, '\n', (size_t) (end - p))) == NULL)
      return 0;
    l = strtol(p + 1, NULL, 10);
    p = nl + 1;
    if (end - p < l + 2)
      return 0;
    if (i < 16) {
      argv[i] = p;
      alen[i] = (size_t) l;
    }
    p += l + 2;
  }
  *argc = (int) (n < 16 ? n : 16);
  return (size_t) (p - buf);
}

static int is(const char *a, size_t n, const char *word) {
  return n == strlen(word) && strncasecmp(a, word, n) == 0;
}

static void serve(int fd) {
  static char buf[1 << 16];
  char *argv[16], out[600];
  size_t alen[16], len = 0, used;
  ssize_t r;
  int argc, kind;

  for (;;) {
    struct pollfd pf = { fd, POLLIN, 0 };

    if (atomic_load(&fake.stop))
      return;
    if (poll(&pf, 1, 50) <= 0)
      continue;
    r = read(fd, buf + len, sizeof(buf) - len);
    if (r <= 0)
      return;
    len += (size_t) r;
    while ((used = parse(buf, len, &argc, argv, alen)) > 0) {
      pthread_mutex_lock(&fake.mu);
      if (is(argv[0], alen[0], "AUTH"))
        snprintf(out, sizeof(out), "%s", fake.auth[0] ? fake.auth : "+OK\r\n");
      else if (is(argv[0], alen[0], "SELECT") || is(argv[0], alen[0], "PING"))
        snprintf(out, sizeof(out), "+OK\r\n");
      else if (is(argv[0], alen[0], "SCRIPT"))
        snprintf(out, sizeof(out), "$40\r\n%040d\r\n", 7);
      else if (is(argv[0], alen[0], "EVALSHA") && argc > 3) {
        /* The kind from the key's last letter: ...:b, :r or :k. */
        kind = argv[3][alen[3] - 1] == 'b' ? 1 : argv[3][alen[3] - 1] == 'r' ? 2 : 3;
        snprintf(out, sizeof(out), "%s", fake.reply[kind]);
        atomic_fetch_add(&fake.evals, 1);
      } else
        snprintf(out, sizeof(out), "-ERR unknown command\r\n");
      pthread_mutex_unlock(&fake.mu);
      put(fd, out, strlen(out));
      memmove(buf, buf + used, len - used);
      len -= used;
    }
  }
}

static void *fake_run(void *arg) {
  (void) arg;
  while (!atomic_load(&fake.stop)) {
    struct pollfd pf = { fake.lfd, POLLIN, 0 };
    int fd;

    if (poll(&pf, 1, 50) <= 0)
      continue;
    fd = accept(fake.lfd, NULL, NULL);
    if (fd < 0)
      continue;
    atomic_fetch_add(&fake.accepts, 1);
    serve(fd);   /* one client at a time: the agent holds one */
    close(fd);
  }
  return NULL;
}

static int fake_start(void **state) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);

  (void) state;
  memset(&fake, 0, sizeof(fake));
  pthread_mutex_init(&fake.mu, NULL);
  fake.lfd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fake.lfd, (struct sockaddr *) &a, sizeof(a)) != 0 ||
      listen(fake.lfd, 16) != 0 ||
      getsockname(fake.lfd, (struct sockaddr *) &a, &len) != 0)
    return -1;
  fake.port = ntohs(a.sin_port);
  pthread_create(&fake.th, NULL, fake_run, NULL);
  return 0;
}

static int fake_stop(void **state) {
  (void) state;
  atomic_store(&fake.stop, 1);
  pthread_join(fake.th, NULL);
  close(fake.lfd);
  pthread_mutex_destroy(&fake.mu);
  return 0;
}

/* -------------------------------------------------------------- agents */

typedef struct {
  int lines;
  char last[NRES_SYNC_ERROR_MAX];
} log_t;

static void on_line(void *arg, const char *line) {
  log_t *l = arg;

  l->lines++;
  snprintf(l->last, sizeof(l->last), "%s", line);
}

static nres_sync_t *fake_agent(log_t *log) {
  nres_sync_config_t c;
  nres_sync_t *s;

  nres_sync_config_init(&c);
  c.port = fake.port;
  c.fleet = "faults";
  c.node = "h1";
  c.interval = 100 * NRES_MSEC;
  c.timeout = 500 * NRES_MSEC;
  c.local_share = 0.5;
  c.seed = 3;
  c.log = on_line;
  c.log_arg = log;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  return s;
}

#define T0 (1000 * NRES_SEC)
#define GOOD_RATE "*4\r\n$10\r\n250.000000\r\n$8\r\n0.000000\r\n:2\r\n:1\r\n"

/* Rate replies that must be refused, each with a part of the line said. */
static const struct { const char *raw, *said; } bad_rate[] = {
  /* defect 4: the second element not a bulk string (strtod(NULL)) */
  { "*4\r\n$8\r\n1.000000\r\n:5\r\n:1\r\n:1\r\n",
    "rate reply element 1 (demand): expected a number from 0 to 1e+15 as a "
    "bulk string, got integer; reply array[4]: bulk string, integer, integer, integer" },
  /* defect 5: a quota past the fleet rate disables the limiter */
  { "*4\r\n$5\r\n1e300\r\n$1\r\n0\r\n:1\r\n:1\r\n", "element 0 (quota)" },
  { "*4\r\n$3\r\nnan\r\n$1\r\n0\r\n:1\r\n:1\r\n", "got \"nan\"" },
  { "*4\r\n$4\r\n-inf\r\n$1\r\n0\r\n:1\r\n:1\r\n", "element 0 (quota)" },
  { "*4\r\n$2\r\n-5\r\n$1\r\n0\r\n:1\r\n:1\r\n", "got \"-5\"" },
  { "*4\r\n$5\r\n12abc\r\n$1\r\n0\r\n:1\r\n:1\r\n", "got \"12abc\"" },
  { "*4\r\n$0\r\n\r\n$1\r\n0\r\n:1\r\n:1\r\n", "a string of 0 bytes" },
  { "*4\r\n$3\r\n100\r\n$1\r\n0\r\n:0\r\n:1\r\n", "element 2 (hosts)" },
  { "*4\r\n*1\r\n:1\r\n$1\r\n0\r\n:1\r\n:1\r\n", "got array" },
  { "*4\r\n$-1\r\n$1\r\n0\r\n:1\r\n:1\r\n", "got nil" },
  { "*5\r\n$3\r\n100\r\n$1\r\n0\r\n:1\r\n:1\r\n:1\r\n", "got array[5]" },
  { "*0\r\n", "got array[0]" },
  { "$-1\r\n", "got nil" },
  { "+OK\r\n", "got status" },
  { ":42\r\n", "got integer" },
  { "$3\r\n100\r\n", "got bulk string" },
};

/* A good reply is applied (the fake works); each bad one fails the round
 * on a fresh connection: NRES_ESTATE, one line, the limiter on its local
 * share (half the fleet's 1000/s), never the reply's value. */
static void test_rate_replies(void **state) {
  nres_ratelimit_t l;
  nres_sync_info_t info;
  nres_sync_t *s;
  log_t log;
  size_t i;

  (void) state;
  for (i = 0; i < sizeof(bad_rate) / sizeof(bad_rate[0]); i++) {
    memset(&log, 0, sizeof(log));
    assert_int_equal(nres_ratelimit_init(&l, 1000, 10), 0);
    s = fake_agent(&log);
    assert_true(nres_sync_add_ratelimit(s, "api", &l, 0) >= 0);
    fake_set(2, GOOD_RATE);
    assert_int_equal(nres_sync_tick(s, T0), 0);
    assert_true(fabs(nres_ratelimit_rate(&l) - 250) < 1e-6);
    fake_set(2, bad_rate[i].raw);
    assert_int_equal(nres_sync_tick(s, T0 + 100 * NRES_MSEC), NRES_ESTATE);
    nres_sync_info(s, &info);
    if (log.lines != 1 || strstr(log.last, bad_rate[i].said) == NULL)
      printf("# case %zu: %d lines, last: %s\n", i, log.lines, log.last);
    assert_int_equal(log.lines, 1);
    assert_non_null(strstr(log.last, bad_rate[i].said));
    assert_non_null(strstr(log.last, "round failed: local-only"));
    assert_int_equal(info.connected, 0);
    assert_true(info.errors >= 1);
    assert_true(fabs(nres_ratelimit_rate(&l) - 500) < 1e-6);
    nres_sync_free(s);
  }
  /* An array announced with 510 million elements: hiredis 0.14 would
   * allocate 4 GB for it; the agent's reader refuses it, the round fails. */
  memset(&log, 0, sizeof(log));
  assert_int_equal(nres_ratelimit_init(&l, 1000, 10), 0);
  s = fake_agent(&log);
  assert_true(nres_sync_add_ratelimit(s, "api", &l, 0) >= 0);
  fake_set(2, "*510000000\r\n:0\r\n");
  assert_int_equal(nres_sync_tick(s, T0), NRES_EAGAIN);
  printf("# huge array: %s\n", log.last);
  assert_int_equal(log.lines, 1);
  assert_true(fabs(nres_ratelimit_rate(&l) - 500) < 1e-6);
  nres_sync_free(s);
}

/* Budget: a share of -1e15 micro-tokens (defect 5) or past the capacity,
 * a level past it, a weight above 1: refused, the tokens untouched by it
 * (at most the local share of the capacity, never negative). */
static void test_budget_replies(void **state) {
  static const char *const bad[] = {
    "*4\r\n:-1000000000000000\r\n:0\r\n:1\r\n$3\r\n0.5\r\n",
    "*4\r\n:20000001\r\n:0\r\n:1\r\n$3\r\n0.5\r\n",
    "*4\r\n:1000000\r\n:-30000000\r\n:1\r\n$3\r\n0.5\r\n",
    "*4\r\n:1000000\r\n:0\r\n:1\r\n$1\r\n2\r\n",
    "*4\r\n:1000000\r\n:0\r\n:1\r\n:1\r\n",
  };
  nres_budget_stats_t bs;
  nres_budget_t b;
  nres_sync_t *s;
  log_t log;
  size_t i;

  (void) state;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    memset(&log, 0, sizeof(log));
    assert_int_equal(nres_budget_init(&b, 0.1, 0, 20), 0);
    s = fake_agent(&log);
    assert_true(nres_sync_add_budget(s, "api", &b, -1) >= 0);
    fake_set(1, "*4\r\n:3000000\r\n:6000000\r\n:2\r\n$8\r\n0.500000\r\n");
    assert_int_equal(nres_sync_tick(s, T0), 0);
    nres_budget_stats(&b, &bs);
    assert_int_equal(bs.tokens, 3000000);   /* the share applied */
    fake_set(1, bad[i]);
    assert_int_equal(nres_sync_tick(s, T0 + 100 * NRES_MSEC), NRES_ESTATE);
    nres_budget_stats(&b, &bs);
    assert_true(bs.tokens >= 0 && bs.tokens <= 10000000);
    assert_int_equal(log.lines, 1);
    assert_non_null(strstr(log.last, "budget reply"));
    nres_sync_free(s);
  }
}

/* Breaker: an unknown state, a break far past the local breaker's longest
 * plus the lease, a prober flag of 7: refused, the breaker left closed. */
static void test_breaker_replies(void **state) {
  static const char *const bad[] = {
    "*8\r\n$5\r\nbogus\r\n:0\r\n:0\r\n:1\r\n:5000\r\n:1\r\n:1\r\n:0\r\n",
    "*8\r\n$4\r\nopen\r\n:999999999999\r\n:0\r\n:1\r\n:5000\r\n:1\r\n:1\r\n:0\r\n",
    "*8\r\n$4\r\nopen\r\n:6000\r\n:7\r\n:1\r\n:5000\r\n:1\r\n:1\r\n:0\r\n",
    "*8\r\n$4\r\nopen\r\n:6000\r\n:0\r\n:1\r\n:5000\r\n:1\r\n:2\r\n:0\r\n",
    "*5\r\n$4\r\nopen\r\n:6000\r\n:0\r\n:1\r\n:5000\r\n",
    "*8\r\n$4\r\nopen\r\n:6000\r\n:0\r\n:1\r\n:5000\r\n:1\r\n:1\r\n:9000\r\n",
  };
  nres_breaker_config_t c;
  nres_breaker_t br;
  nres_sync_t *s;
  log_t log;
  size_t i;

  (void) state;
  nres_breaker_config_init(&c);
  c.break_for = NRES_SEC;
  c.break_max = 4 * NRES_SEC;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    memset(&log, 0, sizeof(log));
    assert_int_equal(nres_breaker_init(&br, &c), 0);
    s = fake_agent(&log);
    assert_true(nres_sync_add_breaker(s, "api", &br) >= 0);
    fake_set(3, bad[i]);
    assert_int_equal(nres_sync_tick(s, T0), NRES_ESTATE);
    assert_int_equal(nres_breaker_state(&br, T0), NRES_BREAKER_CLOSED);
    assert_int_equal(log.lines, 1);
    assert_non_null(strstr(log.last, "breaker reply"));
    nres_sync_free(s);
  }
  /* The control: another host's break of 1 s is taken. */
  assert_int_equal(nres_breaker_init(&br, &c), 0);
  s = fake_agent(&log);
  assert_true(nres_sync_add_breaker(s, "api", &br) >= 0);
  fake_set(3, "*8\r\n$4\r\nopen\r\n:6000\r\n:0\r\n:1\r\n:5000\r\n:2\r\n:1\r\n:0\r\n");
  assert_int_equal(nres_sync_tick(s, T0), 0);
  assert_int_equal(nres_breaker_state(&br, T0), NRES_BREAKER_OPEN);
  nres_sync_free(s);
}

/* Error replies every round: one line per change, one when it is over;
 * and the reconnections back off (exponential from an interval, full
 * jitter, capped at reconnect_max: 1 s by default), where they used to
 * come every round. */
static void test_errors_once_and_backoff(void **state) {
  nres_ratelimit_t l;
  nres_sync_info_t info;
  nres_sync_t *s;
  nres_time_t t;
  log_t log;
  int ticks = 0, before, wait_ok = 1;

  (void) state;
  memset(&log, 0, sizeof(log));
  assert_int_equal(nres_ratelimit_init(&l, 1000, 10), 0);
  s = fake_agent(&log);
  assert_true(nres_sync_add_ratelimit(s, "api", &l, 0) >= 0);
  fake_set(2, "-NOAUTH Authentication required.\r\n");
  for (t = T0; t < T0 + 10 * NRES_SEC; t += 100 * NRES_MSEC, ticks++) {
    assert_true(nres_sync_tick(s, t) != 0);
    nres_sync_info(s, &info);
    if (info.next_connect > t + NRES_SEC)
      wait_ok = 0;
  }
  nres_sync_info(s, &info);
  printf("# NOAUTH every round: %d rounds, %d connections, %d line(s): %s\n",
         ticks, atomic_load(&fake.accepts), log.lines, log.last);
  assert_int_equal(log.lines, 1);
  assert_non_null(strstr(log.last, "NOAUTH Authentication required."));
  assert_true(wait_ok);   /* capped at reconnect_max */
  /* 100 rounds; full jitter below 0.1, 0.2, 0.4, 0.8 then 1 s: about 20. */
  assert_true(atomic_load(&fake.accepts) >= 8);
  assert_true(atomic_load(&fake.accepts) <= 35);
  assert_true(info.errors >= 8);

  fake_set(2, "-READONLY You can't write against a read only replica.\r\n");
  before = log.lines;
  for (; t < T0 + 20 * NRES_SEC; t += 100 * NRES_MSEC)
    nres_sync_tick(s, t);
  assert_int_equal(log.lines, before + 1);
  assert_non_null(strstr(log.last, "READONLY"));

  fake_set(2, GOOD_RATE);
  for (; t < T0 + 25 * NRES_SEC; t += 100 * NRES_MSEC)
    nres_sync_tick(s, t);
  assert_int_equal(log.lines, before + 2);
  assert_non_null(strstr(log.last, "synced again"));
  nres_sync_info(s, &info);
  assert_int_equal(info.connected, 1);
  assert_string_equal(info.error, "");
  nres_sync_free(s);
}

/* nres-syncd --once on a region file whose rate reply is the one that
 * crashed it (defect 4): exit 1 with the line, not SIGSEGV; a good reply:
 * exit 0. */
static void test_syncd_once(void **state) {
  char syncd[512], path[300], port[32], out[4096], dir[] = "/tmp/nres-faults-XXXXXX";
  void *mem;
  size_t size;
  ssize_t len;
  int fds[2], st, pass;
  pid_t pid;

  (void) state;
  syncd_path(syncd, sizeof(syncd));
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/gw.shm", dir);
  make_region(path, 8, 1000, &mem, &size);   /* GOOD_RATE: 250 of 1000/s */
  snprintf(port, sizeof(port), "127.0.0.1:%d", fake.port);
  fake_set(1, "*4\r\n:0\r\n:0\r\n:1\r\n$8\r\n1.000000\r\n");
  fake_set(3, "*8\r\n$0\r\n\r\n:0\r\n:0\r\n:0\r\n:5000\r\n:0\r\n:0\r\n:0\r\n");
  for (pass = 0; pass < 2; pass++) {
    fake_set(2, pass == 0 ? bad_rate[0].raw : GOOD_RATE);
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      execl(syncd, syncd, "--fleet", "faults", "--region", path, "--redis",
            port, "--once", (char *) NULL);
      _exit(127);
    }
    close(fds[1]);
    len = read(fds[0], out, sizeof(out) - 1);
    out[len > 0 ? len : 0] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    printf("# nres-syncd --once, %s reply: %s, stderr: %.200s\n",
           pass == 0 ? "bad" : "good",
           WIFSIGNALED(st) ? "killed by a signal" : "exited", out);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), pass == 0 ? 1 : 0);
    if (pass == 0)
      assert_non_null(strstr(out, "rate reply element 1 (demand)"));
  }
  munmap(mem, size);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_rate_replies, fake_start, fake_stop),
    cmocka_unit_test_setup_teardown(test_budget_replies, fake_start, fake_stop),
    cmocka_unit_test_setup_teardown(test_breaker_replies, fake_start, fake_stop),
    cmocka_unit_test_setup_teardown(test_errors_once_and_backoff, fake_start,
                                    fake_stop),
    cmocka_unit_test_setup_teardown(test_syncd_once, fake_start, fake_stop),
  };

  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}

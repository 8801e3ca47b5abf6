/* SPDX-License-Identifier: MIT */
/* test_sync_sentinel.c - the fleet agent behind Redis Sentinel (issue 29):
 * two real redis-servers (a primary and its replica) and three real
 * Sentinels on loopback ports of their own, one agent on its own thread
 * finding the primary through them. In turn:
 * - SENTINEL FAILOVER: the agent writes to the new primary within 2 s of
 *   the Sentinels naming it;
 * - kill -9 of the primary: the agent is local-only within one interval
 *   (plus the timeout and slack), and syncs to the replica the Sentinels
 *   promote within 2 s of their switch;
 * - the killed primary comes back (empty, a primary by its own account,
 *   until the Sentinels demote it): the agent never writes to it (its
 *   INFO commandstats shows no EVALSHA while its ROLE is master).
 * And, with one redis-server and one Sentinel of their own: a Sentinel
 * with a password (requirepass), refused without it, found with it.
 * Exits 77 (skipped) without redis-server or redis-sentinel.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "nres.h"
#include "nres/sync.h"
#include "../sync/redis_server.h"
#include "../sync/redis_admin.h"
#include "../sync/syncd_test.h"

#define IVL (100 * NRES_MSEC)
#define MASTER "fleetm"

static redis_server_t node[2], sentinel[3];
static char dir[64], conf[3][128];
static char sentinel_bin[512];

/* The primary's port as the first Sentinel names it, or -1. */
static int primary_port(void) {
  redisReply *r = ask(sentinel[0].port, "SENTINEL get-master-addr-by-name %s", MASTER);
  int port = -1;

  if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
    port = atoi(r->element[1]->str);
  if (r != NULL)
    freeReplyObject(r);
  return port;
}

static int is_master(int port) {
  redisReply *r = ask(port, "ROLE");
  int m = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
          strcmp(r->element[0]->str, "master") == 0;

  if (r != NULL)
    freeReplyObject(r);
  return m;
}

/* Sentinel k knows the replica and the other two Sentinels. */
static int sentinel_ready(int k) {
  redisReply *r = ask(sentinel[k].port, "SENTINEL sentinels %s", MASTER);
  int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2;

  if (r != NULL)
    freeReplyObject(r);
  r = ask(sentinel[k].port, "SENTINEL replicas %s", MASTER);
  ok = ok && r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1;
  if (r != NULL)
    freeReplyObject(r);
  return ok;
}

/* A free port none of the others took. */
static int distinct_port(void) {
  int p, i, clash;

  do {
    p = redis_server_free_port();
    clash = 0;
    for (i = 0; i < 2; i++)
      clash |= node[i].port == p;
    for (i = 0; i < 3; i++)
      clash |= sentinel[i].port == p;
  } while (clash);
  return p;
}

static void start_node(int i, int replica_of) {
  static char port_of[2][16];

  snprintf(port_of[i], sizeof(port_of[i]), "%d", replica_of);
  memset(node[i].extra, 0, sizeof(node[i].extra));
  if (replica_of > 0) {
    node[i].extra[0] = "--replicaof";
    node[i].extra[1] = "127.0.0.1";
    node[i].extra[2] = port_of[i];
  }
  assert_int_equal(redis_server_start(&node[i]), 0);
}

static int setup(void **state) {
  FILE *f;
  int i;

  (void) state;
  if (!redis_server_find(&node[0]))
    return -1;
  snprintf(sentinel_bin, sizeof(sentinel_bin), "%s", node[0].bin);
  strcpy(strrchr(sentinel_bin, '/') + 1, "redis-sentinel");
  if (access(sentinel_bin, X_OK) != 0)
    return -1;
  snprintf(dir, sizeof(dir), "/tmp/nres-sentinel-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  snprintf(node[1].bin, sizeof(node[1].bin), "%s", node[0].bin);
  for (i = 0; i < 2; i++) {
    snprintf(node[i].dir, sizeof(node[i].dir), "%s", dir);
    node[i].port = distinct_port();
  }
  start_node(0, 0);
  start_node(1, node[0].port);
  for (i = 0; i < 3; i++) {
    snprintf(conf[i], sizeof(conf[i]), "%s/sentinel%d.conf", dir, i);
    f = fopen(conf[i], "w");
    if (f == NULL)
      return -1;
    fprintf(f, "sentinel monitor %s 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 4000\n"
            "sentinel parallel-syncs %s 1\n",
            MASTER, node[0].port, MASTER, MASTER, MASTER);
    fclose(f);
    snprintf(sentinel[i].bin, sizeof(sentinel[i].bin), "%s", sentinel_bin);
    snprintf(sentinel[i].dir, sizeof(sentinel[i].dir), "%s", dir);
    sentinel[i].conf = conf[i];
    sentinel[i].port = distinct_port();
    assert_int_equal(redis_server_start(&sentinel[i]), 0);
  }
  /* The Sentinels find each other (hello messages every 2 s). */
  for (i = 0; i < 200 && !(sentinel_ready(0) && sentinel_ready(1) &&
                           sentinel_ready(2)); i++)
    sleep_ms(100);
  assert_true(i < 200);
  return 0;
}

static int teardown(void **state) {
  char cmd[128];
  int i;

  (void) state;
  for (i = 0; i < 3; i++)
    redis_server_kill(&sentinel[i]);
  for (i = 0; i < 2; i++)
    redis_server_kill(&node[i]);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    return -1;
  return 0;
}

/* Poll until the agent's entry is synced and `port` ran EVALSHA more
 * times than `since` (the agent writes there): the time it took (ns) from
 * `from`, or NEVER after 10 s. */
static nres_time_t synced_to(nres_sync_t *s, int port, long since,
                             nres_time_t from) {
  nres_sync_stats_t st;
  nres_time_t t;

  while ((t = nres_clock_now()) < from + 10 * NRES_SEC) {
    nres_sync_stats(s, 0, &st);
    if (st.synced && evalsha_calls(port) > since + 2)
      return t - from;
    sleep_ms(20);
  }
  return NRES_TIME_NEVER;
}

/* The Sentinels name `port` as the primary: when (polled), or NEVER. */
static nres_time_t switched_to(int port, nres_time_t limit) {
  nres_time_t t0 = nres_clock_now();

  while (nres_clock_now() - t0 < limit) {
    if (primary_port() == port)
      return nres_clock_now();
    sleep_ms(20);
  }
  return NRES_TIME_NEVER;
}

static void test_sentinel_failovers(void **state) {
  nres_ratelimit_t l;
  nres_sync_config_t c;
  nres_sync_info_t info;
  nres_sync_stats_t st;
  nres_sync_t *s;
  char list[128];
  nres_time_t t, sw, took, killed;
  long before, calls;
  redisReply *r;
  int seen_master = 0;

  (void) state;
  snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
           sentinel[0].port, sentinel[1].port, sentinel[2].port);
  nres_sync_config_init(&c);
  c.fleet = "sentinel";
  c.node = "h1";
  c.sentinels = list;
  c.master = MASTER;
  c.interval = IVL;
  c.seed = 5;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  assert_int_equal(nres_ratelimit_init(&l, 1000, 10), 0);
  assert_int_equal(nres_sync_add_ratelimit(s, "api", &l, 0), 0);
  assert_int_equal(nres_sync_start(s), 0);
  assert_true(synced_to(s, node[0].port, 0, nres_clock_now()) != NRES_TIME_NEVER);

  /* 1. SENTINEL FAILOVER: node 1 becomes the primary. */
  before = evalsha_calls(node[1].port);
  r = ask(sentinel[0].port, "SENTINEL FAILOVER %s", MASTER);
  assert_non_null(r);
  freeReplyObject(r);
  sw = switched_to(node[1].port, 20 * NRES_SEC);
  assert_true(sw != NRES_TIME_NEVER);
  took = synced_to(s, node[1].port, before, sw);
  printf("# SENTINEL FAILOVER: synced to the new primary %.0f ms after the "
         "switch\n", (double) took / 1e6);
  assert_true(took <= 2 * NRES_SEC);

  /* 2. kill -9 of the primary (node 1): local-only within an interval. */
  sleep_ms(1000);   /* node 0 settles as its replica */
  killed = nres_clock_now();
  kill(node[1].pid, SIGKILL);
  waitpid(node[1].pid, NULL, 0);
  node[1].pid = 0;
  do {
    nres_sync_stats(s, 0, &st);
    t = nres_clock_now();
  } while (st.synced && t - killed < 5 * NRES_SEC);
  printf("# kill -9: local-only after %.0f ms\n", (double) (t - killed) / 1e6);
  assert_int_equal(st.synced, 0);
  assert_true(t - killed <= IVL + c.interval / 2 + 100 * NRES_MSEC);
  before = evalsha_calls(node[0].port);
  sw = switched_to(node[0].port, 30 * NRES_SEC);
  assert_true(sw != NRES_TIME_NEVER);
  took = synced_to(s, node[0].port, before, sw);
  printf("# kill -9: synced to the promoted replica %.0f ms after the "
         "switch\n", (double) took / 1e6);
  assert_true(took <= 2 * NRES_SEC);

  /* 3. The killed primary comes back, a primary by its own account, until
   * the Sentinels demote it: no EVALSHA may reach it meanwhile. */
  start_node(1, 0);
  t = nres_clock_now();
  while (nres_clock_now() - t < 15 * NRES_SEC) {
    int m = is_master(node[1].port);

    calls = evalsha_calls(node[1].port);
    if (m) {
      seen_master = 1;
      assert_int_equal(calls, 0);   /* never written while it says master */
    } else if (seen_master) {
      break;   /* demoted: a replica refuses writes by itself */
    }
    sleep_ms(20);
  }
  printf("# old primary back: a primary for %.0f ms, %ld EVALSHA while so\n",
         (double) (nres_clock_now() - t) / 1e6, 0L);
  assert_true(seen_master);
  nres_sync_stats(s, 0, &st);
  assert_int_equal(st.synced, 1);   /* still on node 0 */
  nres_sync_info(s, &info);
  printf("# agent: %llu rounds, %llu failures, %llu connections; last line: %s\n",
         (unsigned long long) info.rounds, (unsigned long long) info.failures,
         (unsigned long long) info.connects, info.error);
  nres_sync_free(s);
}

/* ---------------------------------------------- Sentinels with a password */

#define SENTINEL_PW "sentinel-pw-7"

/* One redis-server and one Sentinel with requirepass of its own. */
static int setup_password(void **state) {
  FILE *f;

  (void) state;
  if (!redis_server_find(&node[0]))
    return -1;
  snprintf(sentinel_bin, sizeof(sentinel_bin), "%s", node[0].bin);
  strcpy(strrchr(sentinel_bin, '/') + 1, "redis-sentinel");
  snprintf(dir, sizeof(dir), "/tmp/nres-sentinel-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  snprintf(node[0].dir, sizeof(node[0].dir), "%s", dir);
  node[0].port = distinct_port();
  start_node(0, 0);
  snprintf(conf[0], sizeof(conf[0]), "%s/sentinel-pw.conf", dir);
  f = fopen(conf[0], "w");
  if (f == NULL)
    return -1;
  fprintf(f, "sentinel monitor %s 127.0.0.1 %d 1\nrequirepass %s\n", MASTER,
          node[0].port, SENTINEL_PW);
  fclose(f);
  snprintf(sentinel[0].bin, sizeof(sentinel[0].bin), "%s", sentinel_bin);
  snprintf(sentinel[0].dir, sizeof(sentinel[0].dir), "%s", dir);
  sentinel[0].conf = conf[0];
  sentinel[0].port = distinct_port();
  assert_int_equal(redis_server_start(&sentinel[0]), 0);
  return 0;
}

/* An agent through the password-protected Sentinel, its Sentinel
 * credentials set by `user`, `password` and `file`: whether its first
 * round synced, and its last line in `line`. */
static int through_sentinel(const char *user, const char *password,
                            const char *file, char *line, size_t cap) {
  nres_ratelimit_t l;
  nres_sync_config_t c;
  nres_sync_info_t info;
  nres_sync_t *s;
  char list[64];
  int rc;

  snprintf(list, sizeof(list), "127.0.0.1:%d", sentinel[0].port);
  nres_sync_config_init(&c);
  c.fleet = "sentinel";
  c.node = "pw";
  c.sentinels = list;
  c.master = MASTER;
  c.interval = IVL;
  c.seed = 5;
  c.sentinel_user = user;
  c.sentinel_password = password;
  c.sentinel_password_file = file;
  c.log = NULL;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  assert_int_equal(nres_ratelimit_init(&l, 1000, 10), 0);
  assert_int_equal(nres_sync_add_ratelimit(s, "api", &l, 0), 0);
  rc = nres_sync_tick(s, nres_clock_now());
  nres_sync_info(s, &info);
  snprintf(line, cap, "%s", info.error);
  nres_sync_free(s);
  return rc == 0;
}

/* Issue 29: Sentinels with a password of their own (requirepass in
 * sentinel.conf). Without it the agent says the Sentinel's NOAUTH and
 * stays local-only; with a wrong one it says WRONGPASS; with the right
 * one, inline, from a file, or as the ACL user "default", it finds the
 * primary and syncs. nres-syncd takes it from an environment variable. */
static void test_sentinel_password(void **state) {
  char line[NRES_SYNC_ERROR_MAX], pwfile[128], port[32], syncd[512];
  char region[128], err[1024];
  FILE *f;
  size_t size;
  void *mem;
  pid_t pid;
  int st, fd;
  ssize_t n;

  (void) state;
  assert_false(through_sentinel(NULL, NULL, NULL, line, sizeof(line)));
  printf("# no Sentinel password: %s\n", line);
  assert_non_null(strstr(line, "NOAUTH"));
  assert_false(through_sentinel(NULL, "wrong", NULL, line, sizeof(line)));
  printf("# a wrong one: %s\n", line);
  assert_non_null(strstr(line, "AUTH:"));
  assert_true(through_sentinel(NULL, SENTINEL_PW, NULL, line, sizeof(line)));
  snprintf(pwfile, sizeof(pwfile), "%s/sentinel.pw", dir);
  f = fopen(pwfile, "w");
  assert_non_null(f);
  fprintf(f, "%s\n", SENTINEL_PW);
  fclose(f);
  assert_true(through_sentinel("default", NULL, pwfile, line, sizeof(line)));

  /* nres-syncd --once with --sentinel-password-env. */
  snprintf(region, sizeof(region), "%s/gw.shm", dir);
  make_region(region, 8, 100, &mem, &size);
  munmap(mem, size);
  syncd_path(syncd, sizeof(syncd));
  snprintf(port, sizeof(port), "127.0.0.1:%d", sentinel[0].port);
  snprintf(err, sizeof(err), "%s/syncd.err", dir);
  pid = fork();
  if (pid == 0) {
    fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    setenv("NRES_TEST_SENTINEL_PW", SENTINEL_PW, 1);
    execl(syncd, syncd, "--fleet", "sentinel", "--region", region,
          "--sentinel", port, "--master", MASTER, "--sentinel-password-env",
          "NRES_TEST_SENTINEL_PW", "--once", (char *) NULL);
    _exit(127);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  fd = open(err, O_RDONLY);
  n = fd >= 0 ? read(fd, line, sizeof(line) - 1) : 0;
  line[n > 0 ? n : 0] = '\0';
  if (fd >= 0)
    close(fd);
  printf("# nres-syncd --sentinel-password-env --once: exit %d %s\n",
         WIFEXITED(st) ? WEXITSTATUS(st) : -1, line);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_sentinel_password, setup_password, teardown),
    cmocka_unit_test_setup_teardown(test_sentinel_failovers, setup, teardown),
  };
  redis_server_t probe;
  char bin[600];

  memset(&probe, 0, sizeof(probe));
  if (!redis_server_find(&probe)) {
    printf("redis-server is not installed (Debian: redis-server): skipped\n");
    return 77;
  }
  snprintf(bin, sizeof(bin), "%s", probe.bin);
  strcpy(strrchr(bin, '/') + 1, "redis-sentinel");
  if (access(bin, X_OK) != 0) {
    printf("redis-sentinel is not installed (Debian: redis-sentinel): skipped\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}

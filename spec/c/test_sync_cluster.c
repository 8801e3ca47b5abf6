/* SPDX-License-Identifier: MIT */
/* test_sync_cluster.c - the fleet agent on a real Redis Cluster (issue
 * 29): six redis-servers on free loopback ports (three primaries, three
 * replicas, cluster-node-timeout 1 s) joined with redis-cli --cluster
 * create, one agent with rate limits on scopes spread over the slots, its
 * rounds run by hand. Checked:
 * - every scope syncs, each through the primary serving its slot (each
 *   primary runs EVALSHA);
 * - a slot migrated by hand: while it is MIGRATING with its keys moved the
 *   source answers ASK and the agent follows it; once the slot belongs to
 *   the target the old owner answers MOVED and the agent follows that;
 * - a primary killed with kill -9: once its replica is promoted the
 *   agent syncs every scope again.
 * Exits 77 (skipped) without redis-server or redis-cli.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "nres.h"
#include "nres/sync.h"
#include "../sync/redis_server.h"
#include "../sync/redis_admin.h"

#define NODES 6
#define SCOPES 6

static redis_server_t node[NODES];
static char dir[64], conf[NODES][128];

static int cluster_ok(int port) {
  redisReply *r = ask(port, "CLUSTER INFO");
  int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "cluster_state:ok") != NULL;

  if (r != NULL)
    freeReplyObject(r);
  return ok;
}

/* The port of the primary serving `slot`, from node `via`, or -1. */
static int owner_of(int via, int slot) {
  redisReply *r = ask(node[via].port, "CLUSTER SLOTS");
  int port = -1;
  size_t i;

  for (i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
    if (slot >= r->element[i]->element[0]->integer &&
        slot <= r->element[i]->element[1]->integer)
      port = (int) r->element[i]->element[2]->element[1]->integer;
  if (r != NULL)
    freeReplyObject(r);
  return port;
}

static void node_id(int port, char *out) {
  redisReply *r = ask(port, "CLUSTER MYID");

  assert_non_null(r);
  snprintf(out, 64, "%s", r->str);
  freeReplyObject(r);
}

/* 1 if nobody holds TCP port p on 127.0.0.1 now. */
static int port_free(int p) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t) p);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ok = bind(fd, (struct sockaddr *) &a, sizeof(a)) == 0;
  close(fd);
  return ok;
}

/* A free port whose cluster bus port (+10000) is free too, below the
 * ephemeral range (the bus port must stay under 65536). */
static int cluster_port(void) {
  int p;

  do
    p = 20000 + rand() % 10000;
  while (!port_free(p) || !port_free(p + 10000));
  return p;
}

static int setup(void **state) {
  char cmd[1024];
  size_t n;
  int i, k, clash;

  (void) state;
  if (!redis_server_find(&node[0]))
    return -1;
  srand((unsigned) (nres_clock_now() ^ (uint64_t) getpid()));
  snprintf(dir, sizeof(dir), "/tmp/nres-cluster-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  for (i = 0; i < NODES; i++) {
    if (i > 0)
      snprintf(node[i].bin, sizeof(node[i].bin), "%s", node[0].bin);
    snprintf(node[i].dir, sizeof(node[i].dir), "%s", dir);
    do {
      node[i].port = cluster_port();
      for (k = 0, clash = 0; k < i; k++)
        clash |= node[k].port == node[i].port ||
                 node[k].port == node[i].port + 10000 ||
                 node[k].port + 10000 == node[i].port;
    } while (clash);
    snprintf(conf[i], sizeof(conf[i]), "nodes-%d.conf", i);
    node[i].extra[0] = "--cluster-enabled";
    node[i].extra[1] = "yes";
    node[i].extra[2] = "--cluster-config-file";
    node[i].extra[3] = conf[i];
    node[i].extra[4] = "--cluster-node-timeout";
    node[i].extra[5] = "1000";
    node[i].extra[6] = "--repl-diskless-sync-delay";   /* replicas in sync */
    node[i].extra[7] = "0";                             /* at once */
    assert_int_equal(redis_server_start(&node[i]), 0);
  }
  n = (size_t) snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
  for (i = 0; i < NODES; i++)
    n += (size_t) snprintf(cmd + n, sizeof(cmd) - n, " 127.0.0.1:%d", node[i].port);
  snprintf(cmd + n, sizeof(cmd) - n, " --cluster-replicas 1 --cluster-yes >%s/create.log 2>&1", dir);
  if (system(cmd) != 0)
    return -1;
  for (i = 0; i < 300; i++) {
    for (k = 0; k < NODES && cluster_ok(node[k].port); k++)
      ;
    if (k == NODES)
      break;
    sleep_ms(50);
  }
  if (i == 300)
    return -1;
  /* Every replica in sync, or a killed primary has none to promote. */
  for (i = 0; i < 300; i++) {
    int synced = 0;

    for (k = 0; k < NODES; k++) {
      redisReply *r = ask(node[k].port, "INFO replication");

      if (r != NULL && r->type == REDIS_REPLY_STRING &&
          strstr(r->str, "master_link_status:up") != NULL)
        synced++;
      if (r != NULL)
        freeReplyObject(r);
    }
    if (synced == NODES / 2)
      return 0;
    sleep_ms(50);
  }
  return -1;
}

static int teardown(void **state) {
  char cmd[128];
  int i;

  (void) state;
  for (i = 0; i < NODES; i++)
    redis_server_kill(&node[i]);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static nres_sync_t *s;
static nres_ratelimit_t lim[SCOPES];

/* Rounds by hand, 50 ms apart, until one syncs every scope: the time it
 * took (ms), or -1 after `limit_ms`. */
static int until_synced(int limit_ms) {
  nres_sync_stats_t st;
  int t, i, all;

  for (t = 0; t <= limit_ms; t += 50) {
    if (nres_sync_tick(s, nres_clock_now()) == 0) {
      for (i = 0, all = 1; i < SCOPES; i++) {
        nres_sync_stats(s, i, &st);
        all &= st.synced == 1;
      }
      if (all)
        return t;
    }
    sleep_ms(50);
  }
  return -1;
}

static void test_cluster(void **state) {
  nres_sync_config_t c;
  char seeds[128], scope[16], key[64], src_id[64], dst_id[64];
  long before[NODES];
  redisReply *r;
  int i, t, slot, src, dst = -1, victim, primaries = 0;

  (void) state;
  snprintf(seeds, sizeof(seeds), "127.0.0.1:%d,127.0.0.1:%d", node[0].port,
           node[1].port);
  nres_sync_config_init(&c);
  c.fleet = "cluster";
  c.node = "h1";
  c.cluster = seeds;
  c.interval = 100 * NRES_MSEC;
  c.timeout = 500 * NRES_MSEC;
  c.reconnect_max = 200 * NRES_MSEC;
  c.seed = 3;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  for (i = 0; i < SCOPES; i++) {
    assert_int_equal(nres_ratelimit_init(&lim[i], 100, 5), 0);
    snprintf(scope, sizeof(scope), "scope%d", i);
    assert_int_equal(nres_sync_add_ratelimit(s, scope, &lim[i], 0), i);
  }
  for (i = 0; i < NODES; i++)
    before[i] = evalsha_calls(node[i].port);
  t = until_synced(5000);
  printf("# cluster: every scope synced after %d ms\n", t);
  assert_true(t >= 0);
  for (i = 0; i < NODES; i++)
    if (evalsha_calls(node[i].port) > before[i])
      primaries++;
  printf("# cluster: %d nodes ran EVALSHA\n", primaries);
  assert_true(primaries >= 2);   /* six scopes over three primaries */

  /* Migrate scope0's slot by hand to another primary. */
  slot = -1;
  {
    redisReply *k = ask(node[0].port, "CLUSTER KEYSLOT {scope0}");
    assert_non_null(k);
    slot = (int) k->integer;
    freeReplyObject(k);
  }
  src = owner_of(0, slot);
  for (i = 0; i < NODES && dst < 0; i++) {
    int o = owner_of(0, slot);
    r = ask(node[i].port, "ROLE");
    if (r != NULL && strcmp(r->element[0]->str, "master") == 0 && node[i].port != o)
      dst = node[i].port;
    if (r != NULL)
      freeReplyObject(r);
  }
  assert_true(src > 0 && dst > 0);
  node_id(src, src_id);
  node_id(dst, dst_id);
  r = ask(dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id);
  freeReplyObject(r);
  r = ask(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id);
  freeReplyObject(r);
  /* Its keys moved: the source now answers ASK for them. */
  for (i = 0; i < 2; i++) {   /* the record and its hosts' set */
    snprintf(key, sizeof(key), "nres:cluster:{scope0}:r%s", i == 0 ? "" : "v");
    r = ask(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, key);
    assert_non_null(r);
    assert_true(r->type == REDIS_REPLY_STATUS);   /* OK: it existed, moved */
    freeReplyObject(r);
  }
  before[0] = evalsha_calls(dst);
  t = until_synced(3000);
  printf("# cluster: slot %d MIGRATING, keys moved: synced through ASK after %d ms\n",
         slot, t);
  assert_true(t >= 0);
  assert_true(evalsha_calls(dst) > before[0]);
  /* The slot is the target's: MOVED from the old owner. */
  for (i = 0; i < NODES; i++) {
    r = ask(node[i].port, "ROLE");
    if (r != NULL && strcmp(r->element[0]->str, "master") == 0) {
      redisReply *x = ask(node[i].port, "CLUSTER SETSLOT %d NODE %s", slot, dst_id);
      if (x != NULL)
        freeReplyObject(x);
    }
    if (r != NULL)
      freeReplyObject(r);
  }
  before[0] = evalsha_calls(dst);
  t = until_synced(3000);
  printf("# cluster: slot %d moved: synced after %d ms\n", slot, t);
  assert_true(t >= 0);
  assert_true(evalsha_calls(dst) > before[0]);

  /* kill -9 of a primary the migration did not touch (the one serving
   * the first scope on neither side of it); its replica is promoted. */
  victim = -1;
  for (i = 1; i < SCOPES && victim < 0; i++) {
    char tag[32];
    redisReply *k;
    int o;

    snprintf(tag, sizeof(tag), "{scope%d}", i);
    k = ask(node[0].port, "CLUSTER KEYSLOT %s", tag);
    assert_non_null(k);
    o = owner_of(0, (int) k->integer);
    if (o != src && o != dst) {
      slot = (int) k->integer;
      victim = o;
    }
    freeReplyObject(k);
  }
  if (victim < 0) {   /* every scope on those two: the source, then */
    redisReply *k = ask(node[0].port, "CLUSTER KEYSLOT {scope1}");
    slot = (int) k->integer;
    freeReplyObject(k);
  }
  victim = owner_of(0, slot);
  printf("# cluster: killing the primary on port %d (slot %d)\n", victim, slot);
  for (i = 0; i < NODES; i++)
    if (node[i].port == victim) {
      kill(node[i].pid, SIGKILL);
      waitpid(node[i].pid, NULL, 0);
      node[i].pid = 0;
      victim = i;
      break;
    }
  for (t = 0; t < 15000; t += 50) {
    int o = owner_of(victim == 0 ? 1 : 0, slot);
    if (o > 0 && o != node[victim].port &&
        cluster_ok(node[victim == 0 ? 1 : 0].port))
      break;
    nres_sync_tick(s, nres_clock_now());
    sleep_ms(50);
  }
  printf("# cluster: replica promoted %d ms after the kill\n", t);
  if (t >= 15000) {
    r = ask(node[victim == 0 ? 1 : 0].port, "CLUSTER NODES");
    printf("%s\n", r != NULL ? r->str : "?");
  }
  assert_true(t < 15000);
  t = until_synced(5000);
  printf("# cluster: every scope synced again %d ms after the promotion\n", t);
  assert_true(t >= 0 && t <= 3000);
  nres_sync_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_cluster, setup, teardown),
  };
  redis_server_t probe;

  memset(&probe, 0, sizeof(probe));
  if (!redis_server_find(&probe) || system("command -v redis-cli >/dev/null 2>&1") != 0) {
    printf("redis-server or redis-cli is not installed: skipped\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}

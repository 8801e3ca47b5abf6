/* SPDX-License-Identifier: MIT */
/* fleet.c - bench_fleet: what sharing a retry budget and a rate limit
 * across a fleet costs and how accurate it is (bench/README.md, "Fleet").
 *
 * Three hosts (threads of this process, each with its own state, its own
 * agent or Redis connection) against one redis-server started here on
 * 127.0.0.1. Arms, for each of the two states:
 *   alone      three unsynced hosts, each with the whole fleet's figures
 *   per-req    a Redis round trip per decision: for the rate, Kong's
 *              "redis" policy (INCR + EXPIRE of a per-second counter,
 *              pipelined, one round trip per request); for the budget,
 *              a fleet bucket in Redis (one script call per retry and per
 *              success)
 *   nres N ms  nres/sync.h agents syncing every N ms (25, 100, 500)
 * Rate: fleet rate R = 1000/s, offered 1.5 R split 60/30/10 % across the
 * hosts, admitted counted over a window after a warm-up; error = admitted
 * / (R * window) - 1; a second pass rotates the split every second (the
 * busy host changes), which a slow sync follows late. Budget: a dependency failing every 2nd request (one
 * shared counter), ~600 calls/s per host, 3 attempts, ratio 0.01, floor
 * 20/s, capacity 20 (floor and capacity are what N unsynced hosts have N
 * of): retries against the one-bucket allowance (ratio *
 * successes + floor * seconds + capacity) and attempts per call. Latency:
 * the request path's decision (limiter acquire; the whole call for the
 * budget), p50 / p99 / max in microseconds.
 *
 * Burst: the same three limiters (burst 10 each, the fleet's burst) with
 * no load, their agents settled, then every host acquiring at one
 * instant until refused: what the fleet admits at once. Hanging Redis:
 * the 60/30/10 load on, redis-server stopped (SIGSTOP) at a random point
 * of the interval: the time until every host's limiter holds its local
 * share (read from the limiters, lock-free), then continued (SIGCONT):
 * the time until the busy host's quota follows its demand again; 5 trials
 * per interval.
 *
 *   bench_fleet [--window S] [--only rate|budget|hang]
 *   (window 4 s by default, after a 1 s warm-up; --only hang runs the
 *   burst and the hanging Redis)
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "nres.h"
#include "nres/sync.h"
#include "../spec/sync/redis_server.h"

#define HOSTS 3
#define RATE 1000.0
#define B_RATIO 0.01
#define B_FLOOR 20.0
#define B_CAP 20.0
#define B_CALLS 600.0
#define MAX_SAMPLES 40000

enum { ALONE, PERREQ, SYNCED };

static redis_server_t redis;
static double window_s = 4, warm_s = 1;

static const double split[HOSTS] = { 0.6, 0.3, 0.1 };
static int shifting;

typedef struct {
  int arm;
  int host;
  nres_time_t interval;
  double offered;
  nres_time_t from, to;
  redisContext *rc;
  nres_ratelimit_t limit;
  nres_budget_t budget;
  nres_policy_t policy;
  uint64_t admitted, calls, ok, attempts, retries;
  double lat[MAX_SAMPLES];
  int n;
} host_t;

static host_t hosts[HOSTS];
static atomic_int stop_load;
static redisContext *admin;
static atomic_uint_fast64_t dep;
static const char *budget_lua =
  "local cap, ratio, floor = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
  "local t = redis.call('TIME')\n"
  "local now = tonumber(t[1]) + tonumber(t[2]) / 1e6\n"
  "local level = tonumber(redis.call('HGET', KEYS[1], 'level') or cap)\n"
  "local at = tonumber(redis.call('HGET', KEYS[1], 'at') or now)\n"
  "level = math.min(cap, level + floor * (now - at))\n"
  "local ok = 1\n"
  "if ARGV[1] == 'deposit' then level = math.min(cap, level + ratio)\n"
  "elseif level >= 1 then level = level - 1 else ok = 0 end\n"
  "redis.call('HSET', KEYS[1], 'level', level, 'at', now)\n"
  "return ok\n";
static char budget_sha[41];

static void sleep_until(nres_time_t t) {
  nres_time_t n = nres_clock_now();
  struct timespec ts;

  if (t <= n)
    return;
  ts.tv_sec = (time_t) ((t - n) / NRES_SEC);
  ts.tv_nsec = (long) ((t - n) % NRES_SEC);
  nanosleep(&ts, NULL);
}

static redisContext *connect_redis(void) {
  struct timeval tv = { 1, 0 };
  redisContext *c = redisConnectWithTimeout("127.0.0.1", redis.port, tv);

  if (c == NULL || c->err) {
    fprintf(stderr, "bench_fleet: cannot connect to redis\n");
    exit(1);
  }
  return c;
}

static void sample(host_t *h, nres_time_t a, nres_time_t b) {
  if (h->n < MAX_SAMPLES)
    h->lat[h->n++] = (double) (b - a) / 1e3;
}

/* Kong's redis policy: INCR the second's counter, EXPIRE it, admit while
 * the count is within the rate. */
static int kong_admit(host_t *h) {
  char key[64];
  redisReply *r;
  long long n = 0;

  snprintf(key, sizeof(key), "kong:{api}:%lld",
           (long long) (nres_clock_now() / NRES_SEC));
  redisAppendCommand(h->rc, "INCR %s", key);
  redisAppendCommand(h->rc, "EXPIRE %s 2", key);
  if (redisGetReply(h->rc, (void **) &r) == REDIS_OK) {
    n = r->integer;
    freeReplyObject(r);
  }
  if (redisGetReply(h->rc, (void **) &r) == REDIS_OK)
    freeReplyObject(r);
  return n <= (long long) RATE;
}

static void *rate_host(void *arg) {
  host_t *h = arg;
  nres_time_t t, gap, a, b;
  int ok;

  nres_time_t t0 = nres_clock_now();
  double offered;

  for (t = t0; t < h->to && !atomic_load(&stop_load); t += gap) {
    offered = h->offered;
    if (shifting)   /* the split turns every second */
      offered = 1.5 * RATE * split[(h->host + (t - t0) / NRES_SEC) % HOSTS];
    gap = (nres_time_t) (1e9 / offered);
    sleep_until(t);
    a = nres_clock_now();
    if (h->arm == PERREQ)
      ok = kong_admit(h);
    else
      ok = nres_ratelimit_acquire(&h->limit, a, NULL) == 0;
    b = nres_clock_now();
    if (a >= h->from) {
      sample(h, a, b);
      h->admitted += ok;
    }
  }
  return NULL;
}

/* The per-request fleet bucket: one script call. */
static int remote_budget(host_t *h, const char *op) {
  redisReply *r;
  int ok = 0;

  r = redisCommand(h->rc, "EVALSHA %s 1 fleet:{budget} %s %f %f %f",
                   budget_sha, op, B_CAP, B_RATIO, B_FLOOR);
  if (r != NULL) {
    ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
  }
  return ok;
}

static nres_verdict_t every_second_fails(void *arg,
                                         const nres_attempt_t *attempt) {
  (void) arg;
  (void) attempt;
  return nres_verdict(atomic_fetch_add(&dep, 1) % 2 == 1 ? NRES_TRANSIENT
                                                          : NRES_OK);
}

static void *budget_host(void *arg) {
  host_t *h = arg;
  nres_time_t t, gap, a, b;
  nres_call_t call;
  int k, ok;

  gap = (nres_time_t) (1e9 / B_CALLS);
  for (t = nres_clock_now(); t < h->to; t += gap) {
    sleep_until(t);
    a = nres_clock_now();
    if (h->arm == PERREQ) {
      /* The same call, each retry asking the fleet bucket, each success
       * depositing into it. */
      ok = 0;
      for (k = 1; k <= 3; k++) {
        if (k > 1 && !remote_budget(h, "spend"))
          break;
        if (k > 1 && a >= h->from)
          h->retries++;
        if (a >= h->from)
          h->attempts++;
        if (every_second_fails(NULL, NULL).kind == NRES_OK) {
          remote_budget(h, "deposit");
          ok = 1;
          break;
        }
      }
    } else {
      ok = nres_run(&h->policy, every_second_fails, NULL, &call) == 0;
      if (a >= h->from) {
        h->attempts += call.attempts;
        h->retries += call.retries;
      }
    }
    b = nres_clock_now();
    if (a >= h->from) {
      sample(h, a, b);
      h->calls++;
      h->ok += ok;
    }
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static void latency(double *p50, double *p99, double *max) {
  static double all[HOSTS * MAX_SAMPLES];
  int i, j, n = 0;

  for (i = 0; i < HOSTS; i++)
    for (j = 0; j < hosts[i].n; j++)
      all[n++] = hosts[i].lat[j];
  qsort(all, (size_t) n, sizeof(double), cmp);
  *p50 = n ? all[n / 2] : 0;
  *p99 = n ? all[(size_t) (n * 0.99)] : 0;
  *max = n ? all[n - 1] : 0;
}

static const char *arm_name(int arm, nres_time_t interval, char *buf) {
  if (arm == ALONE)
    return "three unsynced hosts";
  if (arm == PERREQ)
    return "Redis round trip per request";
  sprintf(buf, "nres sync, %d ms", (int) (interval / NRES_MSEC));
  return buf;
}

/* One arm of one state: 1 rate, 0 budget. */
static void run(int rate, int arm, nres_time_t interval) {
  nres_sync_config_t c;
  nres_sync_t *s[HOSTS] = { 0 };
  pthread_t th[HOSTS];
  nres_time_t start;
  redisReply *r;
  char node[16], name[64], prefix[32];
  double p50, p99, max, total = 0, ok = 0, calls = 0, att = 0, ret = 0;
  int i;

  if (admin == NULL)
    admin = connect_redis();
  r = redisCommand(admin, "FLUSHALL");
  if (r != NULL)
    freeReplyObject(r);
  start = nres_clock_now() + 200 * NRES_MSEC;
  snprintf(prefix, sizeof(prefix), "b%d-%d-%d", rate, arm, (int) (interval / NRES_MSEC));
  atomic_store(&dep, 0);
  for (i = 0; i < HOSTS; i++) {
    host_t *h = &hosts[i];

    if (h->rc != NULL)
      redisFree(h->rc);
    memset(h, 0, sizeof(*h));
    h->arm = arm;
    h->host = i;
    h->interval = interval;
    h->offered = 1.5 * RATE * split[i];
    h->from = start + (nres_time_t) (warm_s * 1e9);
    h->to = h->from + (nres_time_t) (window_s * 1e9);
    h->rc = connect_redis();
    nres_ratelimit_init(&h->limit, RATE, 10);
    nres_budget_init(&h->budget, B_RATIO, B_FLOOR, B_CAP);
    nres_policy_init(&h->policy, NRES_PRESET_TRIVIAL);
    h->policy.budget = &h->budget;
    nres_policy_build(&h->policy);
    if (arm == SYNCED) {
      nres_sync_config_init(&c);
      c.port = redis.port;
      snprintf(node, sizeof(node), "h%d", i);
      c.node = node;
      c.prefix = prefix;
      c.fleet = "bench";
      c.interval = interval;
      nres_sync_new(&c, &s[i]);
      if (rate)
        nres_sync_add_ratelimit(s[i], "api", &h->limit, 0);
      else
        nres_sync_add_budget(s[i], "retries", &h->budget, -1);
      nres_sync_start(s[i]);
    }
  }
  if (!rate && arm == PERREQ) {
    r = redisCommand(hosts[0].rc, "SCRIPT LOAD %s", budget_lua);
    memcpy(budget_sha, r->str, 41);
    freeReplyObject(r);
  }
  sleep_until(start);
  for (i = 0; i < HOSTS; i++)
    pthread_create(&th[i], NULL, rate ? rate_host : budget_host, &hosts[i]);
  for (i = 0; i < HOSTS; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < HOSTS; i++) {
    nres_sync_free(s[i]);
    total += (double) hosts[i].admitted;
    ok += (double) hosts[i].ok;
    calls += (double) hosts[i].calls;
    att += (double) hosts[i].attempts;
    ret += (double) hosts[i].retries;
  }
  latency(&p50, &p99, &max);
  if (rate) {
    printf("| %-29s | %7.0f | %+6.1f %% | %7.1f | %7.1f | %8.1f |\n",
           arm_name(arm, interval, name), total / window_s,
           100 * (total / (RATE * window_s) - 1), p50, p99, max);
  } else {
    double allowance = B_RATIO * ok + B_FLOOR * window_s + B_CAP;
    printf("| %-29s | %7.0f | %17.0f | %5.2f | %13.2f | %7.1f | %7.1f | %8.1f |\n",
           arm_name(arm, interval, name), ret, allowance, ret / allowance,
           att / calls, p50, p99, max);
  }
  fflush(stdout);
}

/* Three hosts with a limiter each (the fleet's rate and burst), synced
 * every `interval` (0: unsynced) from now on; the agents in s[]. */
static void hosts_up(nres_sync_t **s, nres_time_t interval, const char *prefix) {
  nres_sync_config_t c;
  char node[16];
  int i;

  for (i = 0; i < HOSTS; i++) {
    host_t *h = &hosts[i];

    if (h->rc != NULL)
      redisFree(h->rc);
    memset(h, 0, sizeof(*h));
    h->host = i;
    h->offered = 1.5 * RATE * split[i];
    nres_ratelimit_init(&h->limit, RATE, 10);
    s[i] = NULL;
    if (interval == 0)
      continue;
    nres_sync_config_init(&c);
    c.port = redis.port;
    snprintf(node, sizeof(node), "h%d", i);
    c.node = node;
    c.prefix = prefix;
    c.fleet = "bench";
    c.interval = interval;
    nres_sync_new(&c, &s[i]);
    nres_sync_add_ratelimit(s[i], "api", &h->limit, 0);
    nres_sync_start(s[i]);
  }
}

static void burst_arm(nres_time_t interval) {
  nres_sync_t *s[HOSTS];
  nres_time_t t;
  char prefix[32], name[64];
  int i, n, total = 0;

  snprintf(prefix, sizeof(prefix), "burst-%d", (int) (interval / NRES_MSEC));
  hosts_up(s, interval, prefix);
  sleep_until(nres_clock_now() + 4 * interval + 100 * NRES_MSEC);
  t = nres_clock_now();
  for (i = 0; i < HOSTS; i++) {
    for (n = 0; nres_ratelimit_acquire(&hosts[i].limit, t, NULL) == 0; n++)
      ;
    total += n;
  }
  for (i = 0; i < HOSTS; i++)
    nres_sync_free(s[i]);
  printf("| %-29s | %8d | %5.1f |\n", arm_name(interval ? SYNCED : ALONE,
         interval, name), total, total / 10.0);
  fflush(stdout);
}

/* All three limiters at the local share (a third of the rate). */
static int all_local(void) {
  int i;

  for (i = 0; i < HOSTS; i++)
    if (fabs(nres_ratelimit_rate(&hosts[i].limit) - RATE / HOSTS) > RATE / 100)
      return 0;
  return 1;
}

static int cmp_time(const void *a, const void *b) {
  nres_time_t x = *(const nres_time_t *) a, y = *(const nres_time_t *) b;
  return x < y ? -1 : x > y;
}

#define TRIALS 5
static void hang_arm(nres_time_t interval) {
  nres_sync_t *s[HOSTS];
  pthread_t th[HOSTS];
  nres_time_t t, down[TRIALS], back[TRIALS];
  char prefix[32];
  int i, k;

  snprintf(prefix, sizeof(prefix), "hang-%d", (int) (interval / NRES_MSEC));
  hosts_up(s, interval, prefix);
  atomic_store(&stop_load, 0);
  for (i = 0; i < HOSTS; i++) {
    hosts[i].to = NRES_TIME_NEVER;
    hosts[i].from = NRES_TIME_NEVER;
    pthread_create(&th[i], NULL, rate_host, &hosts[i]);
  }
  for (k = 0; k < TRIALS; k++) {
    /* Settled, then stopped at a random point of the interval. */
    sleep_until(nres_clock_now() + NRES_SEC +
                (nres_time_t) (rand() % 1000) * interval / 1000);
    kill(redis.pid, SIGSTOP);
    t = nres_clock_now();
    while (!all_local() && nres_clock_now() - t < 10 * NRES_SEC)
      sleep_until(nres_clock_now() + NRES_MSEC / 2);
    down[k] = nres_clock_now() - t;
    kill(redis.pid, SIGCONT);
    t = nres_clock_now();
    while (nres_ratelimit_rate(&hosts[0].limit) < 1.2 * RATE / HOSTS &&
           nres_ratelimit_rate(&hosts[1].limit) < 1.2 * RATE / HOSTS &&
           nres_ratelimit_rate(&hosts[2].limit) < 1.2 * RATE / HOSTS &&
           nres_clock_now() - t < 10 * NRES_SEC)
      sleep_until(nres_clock_now() + NRES_MSEC / 2);
    back[k] = nres_clock_now() - t;
  }
  atomic_store(&stop_load, 1);
  for (i = 0; i < HOSTS; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < HOSTS; i++)
    nres_sync_free(s[i]);
  qsort(down, TRIALS, sizeof(down[0]), cmp_time);
  qsort(back, TRIALS, sizeof(back[0]), cmp_time);
  printf("| %4d ms  | %6.0f | %6.0f | %5.2f | %6.0f | %6.0f |\n",
         (int) (interval / NRES_MSEC), down[TRIALS / 2] / 1e6,
         down[TRIALS - 1] / 1e6, (double) down[TRIALS - 1] / (double) interval,
         back[TRIALS / 2] / 1e6, back[TRIALS - 1] / 1e6);
  fflush(stdout);
}

int main(int argc, char **argv) {
  static const nres_time_t intervals[] = { 25 * NRES_MSEC, 100 * NRES_MSEC,
                                           500 * NRES_MSEC };
  char cmd[300];
  int i, k;

  const char *only = "";

  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--window") == 0)
      window_s = atof(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0)
      only = argv[++i];
  }
  if (only[0] != '\0' && strcmp(only, "rate") != 0 &&
      strcmp(only, "budget") != 0 && strcmp(only, "hang") != 0) {
    fprintf(stderr, "bench_fleet: --only: expected rate, budget or hang, "
            "got \"%s\"\n", only);
    return 2;
  }
  if (!redis_server_find(&redis)) {
    fprintf(stderr, "bench_fleet: redis-server is not installed\n");
    return 77;
  }
  snprintf(redis.dir, sizeof(redis.dir), "/tmp/nres-fleet-XXXXXX");
  if (mkdtemp(redis.dir) == NULL)
    return 1;
  redis.port = redis_server_free_port();
  if (redis_server_start(&redis) != 0)
    return 1;

  if (strcmp(only, "hang") == 0 || only[0] == '\0') {
    printf("Burst: fleet rate %.0f/s, burst 10 (each host's limiter), no "
           "load, then every host at one instant until refused\n\n", RATE);
    printf("| arm                           | at once  | x burst |\n");
    printf("|-------------------------------|----------|-------|\n");
    burst_arm(0);
    for (k = 0; k < 3; k++)
      burst_arm(intervals[k]);
    printf("\nHanging Redis (SIGSTOP) under the 60/30/10 load, timeout = "
           "interval / 2, %d trials: until every host holds its local share; "
           "after SIGCONT, until quotas follow demand again\n\n", TRIALS);
    printf("| interval | local after, median ms | max ms | max / interval | back after, median ms | max ms |\n");
    printf("|----------|--------|--------|-------|--------|--------|\n");
    srand(7);
    for (k = 0; k < 3; k++)
      hang_arm(intervals[k]);
    printf("\n");
    if (only[0] != '\0')
      goto done;
  }
  if (strcmp(only, "budget") != 0)
    printf("Rate limit: fleet rate %.0f/s, offered %.0f/s split 60/30/10 %% "
           "over %d hosts, %.0f s window\n\n", RATE, 1.5 * RATE, HOSTS,
           window_s);
  for (shifting = 0; shifting < 2 && strcmp(only, "budget") != 0; shifting++) {
    if (shifting)
      printf("\nThe same with the split turning every second (the busy host "
             "changes)\n\n");
    printf("| arm                           | admit/s |  error   | p50 us  | p99 us  | max us   |\n");
    printf("|-------------------------------|---------|----------|---------|---------|----------|\n");
    run(1, ALONE, 0);
    run(1, PERREQ, 0);
    for (k = 0; k < 3; k++)
      run(1, SYNCED, intervals[k]);
  }

  if (strcmp(only, "rate") == 0)
    goto done;
  printf("\nRetry budget: dependency failing every 2nd request, %.0f calls/s "
         "per host, %d hosts, ratio %.2f, floor %.0f/s, capacity %.0f, %.0f s "
         "window\n\n", B_CALLS, HOSTS, B_RATIO, B_FLOOR, B_CAP, window_s);
  printf("| arm                           | retries | one bucket allows | ratio | attempts/call | p50 us  | p99 us  | max us   |\n");
  printf("|-------------------------------|---------|-------------------|-------|---------------|---------|---------|----------|\n");
  run(0, ALONE, 0);
  run(0, PERREQ, 0);
  for (k = 0; k < 3; k++)
    run(0, SYNCED, intervals[k]);

done:
  for (i = 0; i < HOSTS; i++)
    if (hosts[i].rc != NULL)
      redisFree(hosts[i].rc);
  redis_server_kill(&redis);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", redis.dir);
  return system(cmd) == 0 ? 0 : 1;
}

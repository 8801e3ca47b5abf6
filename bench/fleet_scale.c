/* SPDX-License-Identifier: MIT */
/* fleet_scale.c - bench_fleet_scale: what a fleet of N hosts costs one
 * redis-server, and whether the fleet rate still holds (issue 29, "a
 * thousand hosts"; bench/README.md is another engineer's: the figures go to
 * docs/fleet-production.md).
 *
 * Fleet arm, for each N (1, 10, 100, 1000 by default): a fresh
 * redis-server started here, N agents in this process (each its own
 * hiredis connection, as N hosts would have, all connected before the
 * clock starts), each syncing `scopes` rate limiters (4) every interval
 * (100 ms), the rounds' slots staggered over the interval. `threads`
 * driver threads (2: this machine's cores) run the hosts as N hosts would:
 * each round is sent at its slot (nres__sync_round_send, the first half of
 * nres_sync_tick) without waiting for any other host's answer, and its
 * answer is read and applied when it comes (nres__sync_round_recv, epoll
 * over the sockets); a host whose answer is still out at its next slot
 * sends when it comes (late). The threads also offer each scope's load:
 * fleet rate R = 10 * N per second per scope, offered 1.5 R split 60/30/10
 * % across three groups of hosts (host i in group i mod 3; with fewer than
 * three hosts the groups present share it). Over the window (5 s after a
 * 2 s warm-up): Redis CPU (INFO cpu, used_cpu_user + used_cpu_sys of the
 * server process, per second of wall time) and per EVALSHA call (the CPU
 * over the calls INFO commandstats counted: the whole cost, network
 * included), the call's own time (usec_per_call), commands per second
 * (INFO stats, the scripts' inner commands included), rounds answered per
 * second against those due, the share of rounds sent within a tenth of an
 * interval of their slot (on time), failed rounds, each round's latency as
 * its agent sees it (sent to applied; p50, p99), this process's CPU (the
 * agents' and the load's), and the fleet rate's error (admitted / (R *
 * window) - 1, over all scopes). --redis-nice N sets the server's
 * niceness (negative: root).
 *
 * Script arm (same run, same Redis build): the rate script's cost per call
 * with H hosts in its record, this version's (a running sum and a sorted
 * set: O(log H)) against the one of 357cd12 (HGETALL and a walk over every
 * host: O(H)), called round-robin for H node names from one connection.
 *
 *   bench_fleet_scale [--hosts 1,10,100,1000] [--scopes 4] [--interval MS]
 *                     [--window S] [--threads T] [--redis-nice N]
 *                     [--only fleet|script]
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "nres.h"
#include "nres/sync.h"
#include "sync/sync_int.h"
#include "../spec/sync/redis_server.h"

#define MAX_HOSTS 2000
#define MAX_SCOPES 16
#define MAX_THREADS 8
#define RATE_PER_HOST 10.0

static redis_server_t redis;
static int scopes = 4, threads = 2;
static nres_time_t interval = 100 * NRES_MSEC;
static double window_s = 5, warm_s = 2;
static int redis_nice;          /* --redis-nice: the server's niceness */
static const double split[3] = { 0.6, 0.3, 0.1 };

typedef struct {
  nres_sync_t *s;
  nres_ratelimit_t limit[MAX_SCOPES];
  nres_time_t next_req[MAX_SCOPES];
  nres_time_t gap;              /* between requests, per scope */
  nres_time_t next_tick;        /* the next round's slot */
  nres_time_t sent;             /* the round in flight: sent at (0: none) */
  int fd;                       /* registered with the driver's epoll, or -1 */
  int late;                     /* its slot came with its answer still out */
  uint64_t admitted;            /* in the window */
} host_t;

static host_t *hosts;
static int nhosts;
static nres_time_t t_from, t_to;

typedef struct {
  int id;
  double *lat;                  /* round latencies (us) in the window */
  size_t nlat, cap;
  uint64_t slots;               /* rounds due in the window */
  uint64_t on_time;             /* sent within a tenth of an interval */
  uint64_t done;                /* answered and applied */
  uint64_t failed;              /* not sent or not answered */
} driver_t;

static void sleep_ns(nres_time_t d) {
  struct timespec ts = { (time_t) (d / NRES_SEC), (long) (d % NRES_SEC) };
  nanosleep(&ts, NULL);
}

/* Host h's offered requests up to t (each scope's limiter at the
 * request's own time), counted when admitted inside the window. */
static void offer(host_t *h, nres_time_t t) {
  int k;

  for (k = 0; k < scopes; k++)
    while (h->next_req[k] <= t) {
      if (nres_ratelimit_acquire(&h->limit[k], h->next_req[k], NULL) == 0 &&
          h->next_req[k] >= t_from && h->next_req[k] < t_to)
        h->admitted++;
      h->next_req[k] += h->gap;
    }
}

/* Host i's round, due since h->next_tick: sent now (nres__sync_round_send,
 * the first half of nres_sync_tick) without waiting for the answer, its
 * socket watched. On time: sent within a tenth of an interval of its
 * slot. Slots a late host missed altogether count as due and not on time. */
static void send_round(driver_t *d, int ep, int i, nres_time_t t) {
  host_t *h = &hosts[i];
  struct epoll_event ev;
  int in = h->next_tick >= t_from && h->next_tick < t_to;

  if (in) {
    d->slots++;
    d->on_time += t - h->next_tick <= interval / 10;
  }
  for (h->next_tick += interval; h->next_tick <= t; h->next_tick += interval)
    d->slots += h->next_tick >= t_from && h->next_tick < t_to;
  offer(h, t);
  if (nres__sync_round_send(h->s, t) != 0) {
    d->failed += in;
    h->fd = -1;   /* dropped: the next connection is watched anew */
    return;
  }
  h->sent = t;
  if (h->fd != h->s->rc->fd) {   /* a new connection */
    h->fd = h->s->rc->fd;
    ev.events = EPOLLIN;
    ev.data.u32 = (uint32_t) i;
    epoll_ctl(ep, EPOLL_CTL_ADD, h->fd, &ev);
  }
}

/* Each driver thread runs its share of the hosts (i = id, id + threads,
 * ...: their slots in order, a cursor over them) as a thousand hosts would
 * run: every round sent at its slot, whatever the other hosts' rounds are
 * doing, its answer read when it comes (epoll over the hosts' sockets); a
 * host whose answer is still out at its slot sends when the answer is in. */
static void *drive(void *arg) {
  driver_t *d = arg;
  struct epoll_event ev[256];
  nres_time_t t, sent, wait;
  int i, k, n, cur = d->id, ep = epoll_create1(0);
  int mine = (nhosts - d->id + threads - 1) / threads;   /* hosts driven */
  host_t *h;

  while ((t = nres_clock_now()) < t_to) {
    /* The hosts whose slot came, in slot order (once round at most). */
    for (k = 0; k < mine && (h = &hosts[cur])->next_tick <= t; k++) {
      if (h->sent == 0)
        send_round(d, ep, cur, t);
      else
        h->late = 1;   /* its answer is out: sent when it comes */
      cur += threads;
      if (cur >= nhosts)
        cur = d->id;
    }
    n = epoll_wait(ep, ev, 256, 0);
    for (k = 0; k < n; k++) {
      i = (int) ev[k].data.u32;
      h = &hosts[i];
      if (h->sent == 0)
        continue;   /* nothing asked: a closed socket, seen next round */
      sent = h->sent;
      h->sent = 0;
      if (nres__sync_round_recv(h->s, sent) != 0) {
        d->failed += sent >= t_from;
        h->fd = -1;
      } else if (sent >= t_from) {
        if (d->nlat < d->cap)
          d->lat[d->nlat++] = (double) (nres_clock_now() - sent) / 1e3;
        d->done++;
      }
      if (h->late) {
        h->late = 0;
        send_round(d, ep, i, nres_clock_now());
      }
    }
    if (n == 0) {   /* nothing came: until the next slot, 100 us at most */
      wait = hosts[cur].next_tick - nres_clock_now();
      if (wait > 0)
        sleep_ns(wait < 100 * NRES_USEC ? wait : 100 * NRES_USEC);
    }
  }
  for (i = d->id; i < nhosts; i += threads)
    offer(&hosts[i], t_to);
  close(ep);
  return NULL;
}

static redisContext *admin(void) {
  redisContext *c = redisConnect("127.0.0.1", redis.port);

  if (c == NULL || c->err) {
    fprintf(stderr, "bench_fleet_scale: cannot reach redis-server\n");
    exit(1);
  }
  return c;
}

/* A field of INFO as a number ("used_cpu_user:" ...). */
static double info_field(redisContext *c, const char *section,
                         const char *field) {
  redisReply *r = redisCommand(c, "INFO %s", section);
  const char *p;
  double v = 0;

  if (r != NULL && r->type == REDIS_REPLY_STRING &&
      (p = strstr(r->str, field)) != NULL)
    v = atof(p + strlen(field));
  if (r != NULL)
    freeReplyObject(r);
  return v;
}

static double redis_cpu(redisContext *c) {
  return info_field(c, "cpu", "used_cpu_user:") + info_field(c, "cpu", "used_cpu_sys:");
}

/* This process's CPU (every thread), seconds. */
static double self_cpu(void) {
  struct rusage ru;

  getrusage(RUSAGE_SELF, &ru);
  return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6 +
         (double) ru.ru_stime.tv_sec + (double) ru.ru_stime.tv_usec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static void fleet_arm(int n) {
  driver_t d[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  nres_sync_config_t c;
  redisContext *adm;
  char node[32], scope[16], prefix[32];
  double cpu0, cpu1, cmd0, cmd1, usec, rate = RATE_PER_HOST * n, *all;
  double offered, share, present;
  double self0, self1, wall, calls;
  uint64_t admitted = 0, slots = 0, on_time = 0, done = 0, failed = 0;
  size_t nall = 0;
  nres_time_t start, m0, m1;
  int i, k, g, group[3] = { 0, 0, 0 };

  if (redis_server_start(&redis) != 0) {
    fprintf(stderr, "bench_fleet_scale: redis-server did not start\n");
    exit(1);
  }
  if (redis_nice != 0 && setpriority(PRIO_PROCESS, (id_t) redis.pid, redis_nice) != 0)
    fprintf(stderr, "bench_fleet_scale: --redis-nice %d: %s\n", redis_nice,
            strerror(errno));
  nhosts = n;
  hosts = calloc((size_t) n, sizeof(*hosts));
  for (i = 0; i < n; i++)
    group[i % 3]++;
  /* Fewer than three hosts: the groups present share the whole load. */
  for (g = 0, present = 0; g < 3; g++)
    present += group[g] > 0 ? split[g] : 0;
  snprintf(prefix, sizeof(prefix), "scale%d", n);
  for (i = 0; i < n; i++) {
    host_t *h = &hosts[i];

    nres_sync_config_init(&c);
    c.port = redis.port;
    c.fleet = "bench";
    c.prefix = prefix;
    snprintf(node, sizeof(node), "h%d", i);
    c.node = node;
    c.interval = interval;
    c.timeout = NRES_SEC;   /* a busy machine is no failure here */
    c.seed = (uint64_t) i + 1;
    if (nres_sync_new(&c, &h->s) != 0) {
      fprintf(stderr, "bench_fleet_scale: agent %d refused\n", i);
      exit(1);
    }
  }
  /* Every agent connected (and its scripts loaded) before the clock
   * starts: a thousand connections made at once are not what is
   * measured. */
  for (i = 0; i < n; i++)
    nres_sync_tick(hosts[i].s, nres_clock_now());
  start = nres_clock_now();
  for (i = 0; i < n; i++) {
    host_t *h = &hosts[i];

    g = i % 3;
    offered = 1.5 * rate * split[g] / present / group[g];
    h->gap = (nres_time_t) (1e9 / offered);
    for (k = 0; k < scopes; k++) {
      nres_ratelimit_init(&h->limit[k], rate, 10);
      snprintf(scope, sizeof(scope), "s%d", k);
      nres_sync_add_ratelimit(h->s, scope, &h->limit[k], 0);
      h->next_req[k] = start + (nres_time_t) ((double) h->gap * (i % 7) / 7);
    }
    h->next_tick = start + interval * i / n;
    h->fd = -1;
  }
  t_from = start + (nres_time_t) (warm_s * 1e9);
  t_to = t_from + (nres_time_t) (window_s * 1e9);
  adm = admin();
  for (i = 0; i < threads; i++) {
    d[i].id = i;
    d[i].cap = (size_t) (n * (window_s + 1) * 1e9 / interval) + 16;
    d[i].lat = malloc(d[i].cap * sizeof(double));
    d[i].nlat = 0;
    d[i].slots = d[i].on_time = d[i].done = d[i].failed = 0;
    pthread_create(&th[i], NULL, drive, &d[i]);
  }
  while (nres_clock_now() < t_from)
    sleep_ns(NRES_MSEC);
  redisCommand(adm, "CONFIG RESETSTAT");
  m0 = nres_clock_now();
  cpu0 = redis_cpu(adm);
  self0 = self_cpu();
  cmd0 = info_field(adm, "stats", "total_commands_processed:");
  while (nres_clock_now() < t_to)
    sleep_ns(NRES_MSEC);
  cpu1 = redis_cpu(adm);
  self1 = self_cpu();
  cmd1 = info_field(adm, "stats", "total_commands_processed:");
  m1 = nres_clock_now();
  wall = (double) (m1 - m0) / 1e9;
  {
    redisReply *r = redisCommand(adm, "INFO commandstats");
    const char *p = r != NULL && r->type == REDIS_REPLY_STRING
                        ? strstr(r->str, "cmdstat_evalsha:") : NULL;
    const char *q = p != NULL ? strstr(p, "calls=") : NULL;

    calls = q != NULL ? atof(q + strlen("calls=")) : 0;
    usec = p != NULL && (p = strstr(p, "usec_per_call=")) != NULL
               ? atof(p + strlen("usec_per_call=")) : 0;
    if (r != NULL)
      freeReplyObject(r);
  }
  for (i = 0; i < threads; i++)
    pthread_join(th[i], NULL);
  all = malloc(sizeof(double) * (size_t) n * (size_t) ((window_s + 1) * 1e9 / interval + 16));
  for (i = 0; i < threads; i++) {
    memcpy(all + nall, d[i].lat, d[i].nlat * sizeof(double));
    nall += d[i].nlat;
    slots += d[i].slots;
    on_time += d[i].on_time;
    done += d[i].done;
    failed += d[i].failed;
    free(d[i].lat);
  }
  qsort(all, nall, sizeof(double), cmp);
  for (i = 0; i < n; i++) {
    admitted += hosts[i].admitted;
    nres_sync_free(hosts[i].s);
  }
  share = (double) admitted / (rate * scopes * window_s) - 1;
  printf("%6d %6d %10.1f %8.1f %8.1f %10.0f %9.0f %9.0f %8.2f %6llu %8.0f %8.0f %9.1f %+8.2f\n",
         n, scopes, 100 * (cpu1 - cpu0) / wall, usec,
         calls > 0 ? (cpu1 - cpu0) * 1e6 / calls : 0,
         (cmd1 - cmd0) / wall, (double) done / window_s,
         (double) slots / window_s, slots ? 100.0 * (double) on_time / (double) slots : 0,
         (unsigned long long) failed,
         nall ? all[nall / 2] : 0, nall ? all[(size_t) (nall * 0.99)] : 0,
         100 * (self1 - self0) / wall, 100 * share);
  fflush(stdout);
  free(all);
  free(hosts);
  redisFree(adm);
  redis_server_kill(&redis);
}

/* The rate script of 357cd12: HGETALL and a walk over every host. */
static const char old_rate_lua[] =
  "local t = redis.call('TIME')\n"
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
  "local function hosts(key, node, demand, stale)\n"
  "  redis.call('HSET', key, 'd:' .. node, demand, 't:' .. node, now)\n"
  "  local all = redis.call('HGETALL', key)\n"
  "  local d, seen = {}, {}\n"
  "  for i = 1, #all, 2 do\n"
  "    local f = all[i]\n"
  "    local p = string.sub(f, 1, 2)\n"
  "    if p == 'd:' then d[string.sub(f, 3)] = tonumber(all[i + 1])\n"
  "    elseif p == 't:' then seen[string.sub(f, 3)] = tonumber(all[i + 1])\n"
  "    end\n"
  "  end\n"
  "  local n, sum = 0, 0\n"
  "  for id, at in pairs(seen) do\n"
  "    if now - at > stale then\n"
  "      redis.call('HDEL', key, 'd:' .. id, 't:' .. id)\n"
  "    else\n"
  "      n = n + 1\n"
  "      sum = sum + (d[id] or 0)\n"
  "    end\n"
  "  end\n"
  "  return n, sum\n"
  "end\n"
  "local key, node = KEYS[1], ARGV[1]\n"
  "local demand, rate = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
  "local n, sum = hosts(key, node, demand, tonumber(ARGV[4]))\n"
  "local quota\n"
  "if sum > rate then quota = rate * demand / sum\n"
  "else quota = demand + (rate - sum) / n end\n"
  "redis.call('PEXPIRE', key, ARGV[5])\n"
  "return { string.format('%.6f', quota), string.format('%.6f', sum), n, now }\n";

extern const char nres__sync_rate_lua[];

/* usec per call of `script` with h hosts in one record, round-robin. */
static double script_cost(redisContext *c, const char *script, int keys,
                          int h) {
  char sha[41], node[32];
  redisReply *r;
  const char *p;
  double usec = 0;
  int i, calls = h * 20 < 20000 ? 20000 : h * 20;

  r = redisCommand(c, "SCRIPT LOAD %s", script);
  memcpy(sha, r->str, 41);
  freeReplyObject(r);
  redisCommand(c, "FLUSHALL");
  for (i = 0; i < h; i++) {   /* every host in the record first */
    snprintf(node, sizeof(node), "h%d", i);
    if (keys == 2)
      redisAppendCommand(c, "EVALSHA %s 2 r zr %s 5.000 1000 3000000 10000", sha, node);
    else
      redisAppendCommand(c, "EVALSHA %s 1 r %s 5.000 1000 3000000 10000", sha, node);
  }
  for (i = 0; i < h; i++) {
    redisGetReply(c, (void **) &r);
    freeReplyObject(r);
  }
  redisCommand(c, "CONFIG RESETSTAT");
  for (i = 0; i < calls; i++) {
    snprintf(node, sizeof(node), "h%d", i % h);
    if (keys == 2)
      redisAppendCommand(c, "EVALSHA %s 2 r zr %s 5.000 1000 3000000 10000", sha, node);
    else
      redisAppendCommand(c, "EVALSHA %s 1 r %s 5.000 1000 3000000 10000", sha, node);
    if (i % 100 == 99 || i == calls - 1) {
      int k;
      for (k = i - i % 100; k <= i; k++) {
        redisGetReply(c, (void **) &r);
        freeReplyObject(r);
      }
    }
  }
  r = redisCommand(c, "INFO commandstats");
  p = strstr(r->str, "cmdstat_evalsha:");
  if (p != NULL && (p = strstr(p, "usec_per_call=")) != NULL)
    usec = atof(p + strlen("usec_per_call="));
  freeReplyObject(r);
  return usec;
}

static void script_arm(const int *list, int n) {
  redisContext *c;
  double o, s;
  int i;

  if (redis_server_start(&redis) != 0)
    exit(1);
  c = admin();
  printf("\nrate script cost per call in Redis (INFO commandstats), H hosts in the record\n");
  printf("%6s %14s %14s\n", "H", "357cd12 us", "this us");
  for (i = 0; i < n; i++) {
    o = script_cost(c, old_rate_lua, 1, list[i]);
    s = script_cost(c, nres__sync_rate_lua, 2, list[i]);
    printf("%6d %14.2f %14.2f\n", list[i], o, s);
    fflush(stdout);
  }
  redisFree(c);
  redis_server_kill(&redis);
}

int main(int argc, char **argv) {
  int list[16] = { 1, 10, 100, 1000 }, nlist = 4, i;
  const char *only = NULL;
  char *p, *save;

  for (i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--hosts") == 0) {
      nlist = 0;
      for (p = strtok_r(argv[i + 1], ",", &save); p != NULL && nlist < 16;
           p = strtok_r(NULL, ",", &save)) {
        list[nlist] = atoi(p);
        if (list[nlist] < 1 || list[nlist] > MAX_HOSTS) {
          fprintf(stderr, "bench_fleet_scale: --hosts: expected 1..%d, got %s\n",
                  MAX_HOSTS, p);
          return 2;
        }
        nlist++;
      }
    } else if (strcmp(argv[i], "--scopes") == 0) {
      scopes = atoi(argv[i + 1]);
      if (scopes < 1 || scopes > MAX_SCOPES)
        return 2;
    } else if (strcmp(argv[i], "--interval") == 0) {
      interval = (nres_time_t) (atof(argv[i + 1]) * 1e6);
      if (interval < NRES_MSEC)
        return 2;
    } else if (strcmp(argv[i], "--window") == 0) {
      window_s = atof(argv[i + 1]);
      if (!(window_s >= 1 && window_s <= 600))
        return 2;
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = atoi(argv[i + 1]);
      if (threads < 1 || threads > MAX_THREADS)
        return 2;
    } else if (strcmp(argv[i], "--redis-nice") == 0) {
      redis_nice = atoi(argv[i + 1]);
      if (redis_nice < -20 || redis_nice > 19)
        return 2;
    } else if (strcmp(argv[i], "--only") == 0) {
      only = argv[i + 1];
    } else {
      fprintf(stderr, "usage: bench_fleet_scale [--hosts 1,10,100,1000] "
              "[--scopes 4] [--interval MS] [--window S] [--threads T] "
              "[--redis-nice N] [--only fleet|script]\n");
      return 2;
    }
  }
  {   /* a connection per agent: a thousand descriptors and more */
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (!redis_server_find(&redis)) {
    fprintf(stderr, "bench_fleet_scale: redis-server not found\n");
    return 77;
  }
  snprintf(redis.dir, sizeof(redis.dir), "/tmp/nres-scale-XXXXXX");
  if (mkdtemp(redis.dir) == NULL)
    return 1;
  redis.port = redis_server_free_port();
  if (only == NULL || strcmp(only, "fleet") == 0) {
    printf("fleet: %d scopes per host, %.0f ms interval, %d driver threads, "
           "%.0f s window; rate %.0f/s per host per scope, offered 1.5x 60/30/10\n",
           scopes, (double) interval / 1e6, threads, window_s, RATE_PER_HOST);
    printf("%6s %6s %10s %8s %8s %10s %9s %9s %8s %6s %8s %8s %9s %8s\n",
           "hosts", "scopes", "redis cpu%", "us/call", "cpu us/c", "cmds/s", "rounds/s",
           "due/s", "on time%", "failed", "p50 us", "p99 us", "agents cpu%",
           "rate err%");
    for (i = 0; i < nlist; i++)
      fleet_arm(list[i]);
  }
  if (only == NULL || strcmp(only, "script") == 0)
    script_arm(list, nlist);
  {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", redis.dir);
    if (system(cmd) != 0)
      return 1;
  }
  return 0;
}

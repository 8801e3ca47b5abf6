/* SPDX-License-Identifier: MIT */
/* test_sync.c - fleet sync through a real Redis (nres/sync.h).
 *
 * Each test starts its own redis-server on 127.0.0.1 (a free port, its own
 * directory, no persistence) and stops it at the end; without redis-server
 * the whole program exits 77 (ctest: skipped) saying so. Hosts are agents
 * with local state: three forked processes for the budget, three agents
 * (each with its own thread) in this process elsewhere. Intervals are short
 * (50 ms) and every timing check is a generous bound in intervals.
 *
 * - budget: three hosts against a dependency failing every 2nd request
 *   spend about one fleet budget, where three unsynced hosts spend three;
 * - rate: a fleet rate across three hosts with a 60/30/10 load admits the
 *   fleet rate within 10 % over a 3 s window, split by demand;
 * - breaker: one host sees the outage and trips; the other two open within
 *   2 intervals, send nothing during the outage (one probe per break for
 *   the fleet), and close within 2 intervals after the prober closes;
 * - failures: redis-server killed, restarted empty, stopped (SIGSTOP) and
 *   continued: local fallback within an interval and a timeout, the
 *   request path never slower, convergence within 2 intervals (+ the
 *   reconnection wait) after it comes back;
 * - nres-syncd on a region file made here with the shm API;
 * - on a virtual clock (rounds run with nres_sync_tick at given times, so
 *   the figures are the same at every run): the rate with a load turning
 *   every second at 25, 100 and 500 ms, the burst split between hosts, and
 *   the probe that sees a hanging Redis between two rounds.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nres.h"
#include "nres/shm.h"
#include "nres/sync.h"
#include <hiredis/hiredis.h>
#include "../sync/redis_server.h"
#include "../sync/syncd_test.h"

#define IVL (50 * NRES_MSEC)

/* ------------------------------------------------------------ helpers */

static nres_time_t now_ns(void) {
  return nres_clock_now();
}

static void sleep_ns(nres_time_t d) {
  struct timespec ts = { (time_t) (d / NRES_SEC), (long) (d % NRES_SEC) };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void sleep_until(nres_time_t t) {
  nres_time_t n = now_ns();
  if (t > n)
    sleep_ns(t - n);
}

static redis_server_t redis;

static void redis_start(void) {
  assert_int_equal(redis_server_start(&redis), 0);
}

static void redis_kill(void) {
  redis_server_kill(&redis);
}

static int setup(void **state) {
  (void) state;
  redis.port = redis_server_free_port();
  if (redis.port < 0)
    return -1;
  redis_start();
  return 0;
}

static int teardown(void **state) {
  (void) state;
  redis_kill();
  return 0;
}

/* An agent of fleet "test" on the test's Redis; `tune` may change its
 * configuration first (NULL: as made here). */
static nres_sync_t *agent_tuned(const char *node, const char *prefix,
                                void (*tune)(nres_sync_config_t *)) {
  nres_sync_config_t c;
  nres_sync_t *s;

  nres_sync_config_init(&c);
  c.port = redis.port;
  c.node = node;
  c.prefix = prefix;
  c.fleet = "test";
  c.interval = IVL;
  c.timeout = 20 * NRES_MSEC;
  c.reconnect_max = IVL;   /* back within ~2 intervals (the bounds below) */
  c.seed = 7;
  if (tune != NULL)
    tune(&c);
  assert_int_equal(nres_sync_new(&c, &s), 0);
  return s;
}

static nres_sync_t *agent(const char *node, const char *prefix) {
  return agent_tuned(node, prefix, NULL);
}

/* The first host that opens opens the fleet (no quorum). */
static void any_host(nres_sync_config_t *c) {
  c->breaker_quorum = 0;
}

/* ------------------------------------------- core additions (no Redis) */

/* Regression: a limiter set from one admission a second (its tat seconds
 * ahead after a burst) to 1000/s kept refusing until that old tat came.
 * set_rate now carries the admissions ahead at the new rate. */
static void test_set_rate_rescales(void **state) {
  nres_ratelimit_t l;
  nres_time_t t = 1000 * NRES_SEC, wait = 0;
  int i;

  (void) state;
  assert_int_equal(nres_ratelimit_init(&l, 1, 10), 0);
  for (i = 0; i < 10; i++)
    assert_int_equal(nres_ratelimit_acquire(&l, t, NULL), 0);
  assert_int_equal(nres_ratelimit_acquire(&l, t, &wait), NRES_ELIMITED);
  assert_true(wait >= 900 * NRES_MSEC);
  assert_int_equal(nres_ratelimit_set_rate(&l, 1000, 10, t), 0);
  assert_true(fabs(nres_ratelimit_rate(&l) - 1000) < 1e-6);
  /* The 10 made count as 10 at 1000/s: 10 ms from now, then admitted. */
  assert_int_equal(nres_ratelimit_acquire(&l, t, NULL), NRES_ELIMITED);
  assert_int_equal(nres_ratelimit_acquire(&l, t + 2 * NRES_MSEC, NULL), 0);
  assert_int_equal(nres_ratelimit_set_rate(&l, 0, 10, t), NRES_EINVAL);
  assert_int_equal(nres_ratelimit_set_rate(&l, NAN, 10, t), NRES_EINVAL);
}

/* open_until imposes a break without counting a trip, never shortens one,
 * leaves ISOLATED alone; close_if closes only the break it imposed. */
static void test_breaker_impose(void **state) {
  nres_breaker_config_t c;
  nres_breaker_t b;
  nres_breaker_stats_t st;
  nres_time_t t = 5000 * NRES_SEC, until = 0;
  nres_rng_t rng;
  uint32_t permit;
  int i;

  (void) state;
  nres_rng_seed(&rng, 3);
  nres_breaker_config_init(&c);
  c.consecutive = 2;
  c.break_jitter = 0;
  assert_int_equal(nres_breaker_init(&b, &c), 0);
  assert_int_equal(nres_breaker_peek(&b, t, &until), NRES_BREAKER_CLOSED);
  assert_int_equal(until, 0);
  assert_int_equal(nres_breaker_open_until(&b, t, t + 3 * NRES_SEC + 1), 1);
  assert_int_equal(nres_breaker_peek(&b, t, &until), NRES_BREAKER_OPEN);
  assert_int_equal(until, t + 3 * NRES_SEC + NRES_MSEC);   /* to the ms, up */
  nres_breaker_stats(&b, &st);
  assert_int_equal(st.trips, 0);
  assert_int_equal(nres_breaker_acquire(&b, t + NRES_SEC, &permit), NRES_ECIRCUIT);
  /* Never shortened; extended. */
  assert_int_equal(nres_breaker_open_until(&b, t, t + NRES_SEC), 0);
  assert_int_equal(nres_breaker_open_until(&b, t, t + 4 * NRES_SEC), 1);
  /* close_if only for the break it imposed. */
  assert_int_equal(nres_breaker_close_if(&b, t + 3 * NRES_SEC), 0);
  assert_int_equal(nres_breaker_close_if(&b, t + 4 * NRES_SEC), 1);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_CLOSED);
  /* A break of its own is not the imposed one. */
  for (i = 0; i < 2; i++) {
    assert_int_equal(nres_breaker_acquire(&b, t, &permit), 0);
    nres_breaker_record(&b, t, permit, NRES_BREAKER_FAILURE, 0, &rng);
  }
  assert_int_equal(nres_breaker_peek(&b, t, &until), NRES_BREAKER_OPEN);
  assert_int_equal(until, t + 15 * NRES_SEC);
  assert_int_equal(nres_breaker_close_if(&b, t + 4 * NRES_SEC), 0);
  /* Half-open with a probe out: imposed over it, the probe goes stale. */
  assert_int_equal(nres_breaker_acquire(&b, until, &permit), 0);
  assert_true(permit != 0);
  assert_int_equal(nres_breaker_open_until(&b, until, until + NRES_SEC), 1);
  assert_int_equal(nres_breaker_record(&b, until, permit, NRES_BREAKER_SUCCESS,
                                       0, &rng), -1);
  assert_int_equal(nres_breaker_state(&b, until), NRES_BREAKER_OPEN);
  /* Isolated stays isolated. */
  nres_breaker_isolate(&b);
  assert_int_equal(nres_breaker_open_until(&b, t, t + NRES_SEC), 0);
  assert_int_equal(nres_breaker_state(&b, t), NRES_BREAKER_ISOLATED);
}

/* The floor can be changed in use; refused outside nres_budget_init's
 * range. */
static void test_budget_set_floor(void **state) {
  nres_budget_t b;

  (void) state;
  assert_int_equal(nres_budget_init(&b, 0.1, 0, 5), 0);
  while (nres_budget_spend(&b, NRES_SEC) == 0)
    ;
  assert_int_equal(nres_budget_spend(&b, 2 * NRES_SEC), NRES_EBUDGET);
  assert_int_equal(nres_budget_set_floor(&b, 10), 0);
  assert_int_equal(nres_budget_spend(&b, 2 * NRES_SEC + 1), NRES_EBUDGET);
  /* 10/s from the first spend after the change: one token in 0.1 s. */
  assert_int_equal(nres_budget_spend(&b, 2 * NRES_SEC + 101 * NRES_MSEC), 0);
  assert_int_equal(nres_budget_set_floor(&b, -1), NRES_EINVAL);
  assert_int_equal(nres_budget_set_floor(&b, NAN), NRES_EINVAL);
}

/* -------------------------------------------------------------- budget */

/* Shared between the parent and the forked hosts. */
typedef struct {
  atomic_uint_fast64_t dep;       /* requests the dependency saw */
  nres_time_t start, end;
  struct {
    uint64_t calls, ok, spent, attempts;
    int synced_rounds;
  } host[3];
} fleet_t;

static nres_verdict_t every_second_fails(void *arg,
                                         const nres_attempt_t *attempt) {
  fleet_t *f = arg;
  (void) attempt;
  if (atomic_fetch_add(&f->dep, 1) % 2 == 1)
    return nres_verdict(NRES_TRANSIENT);
  return nres_verdict(NRES_OK);
}

#define B_RATIO 0.01
#define B_FLOOR 20.0
#define B_CAP 20.0

static void budget_host(fleet_t *f, int i, int synced, const char *prefix) {
  nres_budget_t budget;
  nres_policy_t policy;
  nres_call_t call;
  nres_budget_stats_t bs;
  nres_sync_stats_t st;
  nres_sync_t *s = NULL;
  char node[16];
  nres_time_t t;
  int id = -1;

  assert_int_equal(nres_budget_init(&budget, B_RATIO, B_FLOOR, B_CAP), 0);
  nres_policy_init(&policy, NRES_PRESET_TRIVIAL);
  policy.budget = &budget;
  assert_int_equal(nres_policy_build(&policy), 0);
  if (synced) {
    snprintf(node, sizeof(node), "h%d", i);
    s = agent(node, prefix);
    id = nres_sync_add_budget(s, "retries", &budget, -1);
    assert_true(id >= 0);
    assert_int_equal(nres_sync_start(s), 0);
  }
  sleep_until(f->start);
  /* About 900 calls a second, each a first attempt that fails half of
   * the time: far more retries asked for than any budget allows. */
  for (t = f->start; now_ns() < f->end; t += NRES_MSEC) {
    sleep_until(t);
    if (nres_run(&policy, every_second_fails, f, &call) == 0)
      f->host[i].ok++;
    f->host[i].calls++;
    f->host[i].attempts += call.attempts;
  }
  nres_budget_stats(&budget, &bs);
  f->host[i].spent = bs.spent;
  if (s != NULL) {
    nres_sync_stop(s);
    nres_sync_stats(s, id, &st);
    f->host[i].synced_rounds = (int) st.rounds;
    nres_sync_free(s);
  }
}

static void run_budget_fleet(fleet_t *f, int synced, const char *prefix) {
  pid_t pid[3];
  int i, status;

  memset(f, 0, sizeof(*f));
  f->start = now_ns() + 400 * NRES_MSEC;
  f->end = f->start + 2 * NRES_SEC;
  for (i = 0; i < 3; i++) {
    pid[i] = fork();
    if (pid[i] == 0) {
      budget_host(f, i, synced, prefix);
      _exit(0);
    }
  }
  for (i = 0; i < 3; i++) {
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

static void test_budget_fleet(void **state) {
  fleet_t *f;
  uint64_t ok, spent, alone;
  double seconds, bound;
  int i;

  (void) state;
  f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(f != MAP_FAILED);

  run_budget_fleet(f, 0, "nres-b0");
  alone = 0;
  for (i = 0; i < 3; i++)
    alone += f->host[i].spent;

  run_budget_fleet(f, 1, "nres-b1");
  ok = spent = 0;
  for (i = 0; i < 3; i++) {
    ok += f->host[i].ok;
    spent += f->host[i].spent;
    assert_true(f->host[i].synced_rounds >= 30);   /* 2.4 s at 50 ms */
  }
  seconds = (double) (f->end - f->start) / 1e9;
  /* One fleet bucket: deposits (ratio per OK call), one floor (from the
   * agents' start, 0.4 s before the load), one capacity; and the slack
   * of one interval: shares handed out and not yet reported (at most a
   * capacity) and an interval of floor. */
  bound = B_RATIO * (double) ok + B_FLOOR * (seconds + 0.4) + B_CAP +
          (B_CAP + B_FLOOR * 0.05);
  printf("# budget: fleet retries %llu (bound %.0f, %llu OK); three unsynced "
         "hosts %llu\n", (unsigned long long) spent, bound,
         (unsigned long long) ok, (unsigned long long) alone);
  assert_true((double) spent <= bound);
  /* Three unsynced hosts have three floors and three capacities. */
  assert_true((double) alone >= 1.6 * (double) spent);
  assert_true(spent >= B_FLOOR * seconds * 0.7);   /* it did retry */
  munmap(f, sizeof(*f));
}

/* ---------------------------------------------------------- rate limit */

typedef struct {
  nres_ratelimit_t limit;
  nres_budget_t budget;         /* used with `spend` */
  int spend;                    /* 1: each request also spends and deposits */
  double offered;               /* per second */
  atomic_uint_fast64_t admitted, window;
  nres_time_t from, to, end;
  nres_time_t worst;            /* longest request-path step */
} rate_host_t;

static void *rate_load(void *arg) {
  rate_host_t *h = arg;
  nres_time_t t, gap, a, b;

  gap = (nres_time_t) (1e9 / h->offered);
  for (t = now_ns(); t < h->end; t += gap) {
    sleep_until(t);
    a = now_ns();
    if (nres_ratelimit_acquire(&h->limit, a, NULL) == 0) {
      atomic_fetch_add(&h->admitted, 1);
      if (a >= h->from && a < h->to)
        atomic_fetch_add(&h->window, 1);
    }
    if (h->spend && nres_budget_spend(&h->budget, a) == 0)
      nres_budget_deposit(&h->budget);
    b = now_ns();
    if (b - a > h->worst)
      h->worst = b - a;
  }
  return NULL;
}

#define R_RATE 300.0
/* The fleet's burst: 50 ms at R_RATE. Each host holds its part of it
 * (50 ms of its quota), which absorbs the late wake-ups of a loaded
 * machine; with 5 (17 ms) a host thread woken 30 ms late under ASan at a
 * load average of 15 had most of its bunched requests refused. */
#define R_BURST 15

static void test_rate_fleet(void **state) {
  static const double split[3] = { 0.6, 0.3, 0.1 };
  static rate_host_t h[3];   /* static: see test_redis_failures */
  pthread_t th[3];
  nres_sync_t *s[3];
  nres_sync_stats_t st;
  char node[8];
  uint64_t total = 0;
  double want, quotas = 0;
  nres_time_t start;
  int i;

  (void) state;
  start = now_ns();
  for (i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_ratelimit_init(&h[i].limit, R_RATE, R_BURST), 0);
    h[i].offered = 1.5 * R_RATE * split[i];
    h[i].from = start + NRES_SEC;          /* 1 s to converge */
    h[i].to = h[i].from + 3 * NRES_SEC;    /* the window */
    h[i].end = h[i].to;
    snprintf(node, sizeof(node), "r%d", i);
    s[i] = agent(node, "nres-r");
    assert_true(nres_sync_add_ratelimit(s[i], "api", &h[i].limit, 0) >= 0);
    assert_int_equal(nres_sync_start(s[i]), 0);
  }
  for (i = 0; i < 3; i++)
    pthread_create(&th[i], NULL, rate_load, &h[i]);
  for (i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < 3; i++) {
    nres_sync_stop(s[i]);
    assert_int_equal(nres_sync_stats(s[i], 0, &st), 0);
    /* Synced all along (the very last round or probe may have missed its
     * 20 ms on a loaded machine: then the local third, same sum). */
    assert_true(st.rounds >= 30);   /* of about 80 */
    assert_int_equal(st.hosts, 3);
    quotas += st.local;
    total += h[i].window;
    printf("# rate: host %d offered %.0f/s admitted %llu in 3 s (quota %.1f/s)\n",
           i, h[i].offered, (unsigned long long) h[i].window, st.local);
    nres_sync_free(s[i]);
    assert_true(h[i].worst < 5 * NRES_MSEC);
  }
  want = R_RATE * 3;
  {
    double alone = 0;   /* each host alone: min(offered, rate) */
    for (i = 0; i < 3; i++)
      alone += 3 * (h[i].offered < R_RATE ? h[i].offered : R_RATE);
    printf("# rate: fleet admitted %llu in 3 s, want %.0f (+-10 %%); "
           "unsynced hosts would admit %.0f\n", (unsigned long long) total,
           want, alone);
  }
  assert_true(fabs((double) total - want) <= 0.10 * want);
  assert_true(fabs(quotas - R_RATE) <= 0.05 * R_RATE);
  /* Quotas follow demand: the busiest host admits the most. */
  assert_true(h[0].window > h[1].window && h[1].window > h[2].window);
  assert_true((double) h[0].window >= 0.45 * (double) total);
}

/* ------------------------------------------------------------- breaker */

typedef struct {
  nres_breaker_t breaker;
  nres_time_t gap;              /* between calls */
  nres_time_t end;
  atomic_int *down;
  nres_time_t opened, closed;   /* first OPEN seen, first CLOSED after */
  uint64_t sent_down;           /* requests sent while it was down */
  uint64_t sent_down_open;      /* ... after this host had opened */
} br_host_t;

static void *br_load(void *arg) {
  br_host_t *h = arg;
  nres_time_t next = now_ns(), t;
  nres_rng_t rng;
  uint32_t permit;
  int st, down;

  nres_rng_seed(&rng, 1);
  while ((t = now_ns()) < h->end) {
    st = nres_breaker_state(&h->breaker, t);
    if (st != NRES_BREAKER_CLOSED && h->opened == 0)
      h->opened = t;
    if (st == NRES_BREAKER_CLOSED && h->opened != 0 && h->closed == 0 &&
        !atomic_load(h->down))
      h->closed = t;
    if (t >= next) {
      next += h->gap;
      if (nres_breaker_acquire(&h->breaker, t, &permit) == 0) {
        down = atomic_load(h->down);
        if (down) {
          h->sent_down++;
          if (h->opened != 0)
            h->sent_down_open++;
        }
        nres_breaker_record(&h->breaker, now_ns(), permit,
                            down ? NRES_BREAKER_FAILURE : NRES_BREAKER_SUCCESS,
                            0, &rng);
      }
    }
    sleep_ns(NRES_MSEC / 2);
  }
  return NULL;
}

static void test_breaker_fleet(void **state) {
  nres_breaker_config_t c;
  static br_host_t h[3];
  pthread_t th[3];
  nres_sync_t *s[3];
  static atomic_int down;
  char node[8];
  nres_time_t start;
  int i;

  (void) state;
  atomic_store(&down, 0);
  nres_breaker_config_init(&c);
  c.consecutive = 3;
  c.failure_ratio = 0;
  c.break_for = 1 * NRES_SEC;
  c.break_max = 4 * NRES_SEC;
  c.break_jitter = 0;
  c.success_threshold = 1;
  start = now_ns();
  for (i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_breaker_init(&h[i].breaker, &c), 0);
    /* Host 0 is busy and sees the outage first; 1 and 2 call rarely. */
    h[i].gap = i == 0 ? 5 * NRES_MSEC : 150 * NRES_MSEC;
    h[i].end = start + 4500 * NRES_MSEC;
    h[i].down = &down;
    snprintf(node, sizeof(node), "k%d", i);
    s[i] = agent_tuned(node, "nres-k", any_host);
    assert_true(nres_sync_add_breaker(s[i], "dep", &h[i].breaker) >= 0);
    assert_int_equal(nres_sync_start(s[i]), 0);
  }
  for (i = 0; i < 3; i++)
    pthread_create(&th[i], NULL, br_load, &h[i]);
  sleep_until(start + 500 * NRES_MSEC);
  atomic_store(&down, 1);
  /* Breaks of 1 s then 2 s: host 0 probes at about 1.5 s (fails) and
   * 3.5 s (succeeds: the dependency is back at 3 s). */
  sleep_until(start + 3000 * NRES_MSEC);
  atomic_store(&down, 0);
  for (i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < 3; i++) {
    nres_sync_stop(s[i]);
    printf("# breaker: host %d opened at +%.0f ms, closed at +%.0f ms, "
           "sent %llu while down (%llu after opening)\n", i,
           (double) (h[i].opened - start) / 1e6,
           (double) (h[i].closed - start) / 1e6,
           (unsigned long long) h[i].sent_down,
           (unsigned long long) h[i].sent_down_open);
    nres_sync_free(s[i]);
  }
  /* Host 0 trips on its 3rd failure, 15 ms after the outage on an idle
   * machine; 300 ms allows for a loaded one. */
  assert_true(h[0].opened != 0 && h[0].opened < start + 800 * NRES_MSEC);
  for (i = 1; i < 3; i++) {
    /* Open within 2 intervals of the host that saw it (+ 30 ms of
     * polling and scheduling on a loaded machine). */
    assert_true(h[i].opened != 0);
    assert_true(h[i].opened <= h[0].opened + 2 * IVL + 30 * NRES_MSEC);
    /* No probes of their own: only the calls of their schedule between
     * the outage and hearing of the break (one every 150 ms), none after. */
    assert_true(h[i].sent_down <=
                1 + (h[i].opened - (start + 500 * NRES_MSEC)) / h[i].gap);
    assert_int_equal(h[i].sent_down_open, 0);
    /* Closed within 2 intervals of the prober. */
    assert_true(h[0].closed != 0 && h[i].closed != 0);
    assert_true(h[i].closed <= h[0].closed + 2 * IVL + 30 * NRES_MSEC);
  }
  /* The prober: its trip (3 failures) and one probe for the first break;
   * the second break's probe came after the dependency was back. */
  assert_true(h[0].sent_down_open <= 1);
  assert_true(h[0].sent_down <= 4);
}

/* ------------------------------------------------------------ failures */

/* Poll the limiters (lock-free: a stats read waits for a round in
 * progress) until each holds its local third of R_RATE: the time it took,
 * or NEVER. */
static nres_time_t wait_local(rate_host_t *h, nres_time_t limit) {
  nres_time_t t0 = now_ns();
  int i, all;

  while (now_ns() - t0 < limit) {
    all = 1;
    for (i = 0; i < 3; i++)
      if (fabs(nres_ratelimit_rate(&h[i].limit) - R_RATE / 3) > 0.01 * R_RATE)
        all = 0;
    if (all)
      return now_ns() - t0;
    sleep_ns(NRES_MSEC / 2);
  }
  return NRES_TIME_NEVER;
}

/* Poll until every agent's entries read `synced` (synced: with 3 hosts;
 * with `quotas`, the rate quotas add up to the fleet rate within 5 %; not
 * synced: each holds its local third): the time it took, or NEVER. */
static nres_time_t wait_all(nres_sync_t **s, int synced, int quotas,
                            nres_time_t limit) {
  nres_sync_stats_t st;
  nres_time_t t0 = now_ns();
  double sum;
  int i, all;

  while (now_ns() - t0 < limit) {
    all = 1;
    sum = 0;
    for (i = 0; i < 3; i++) {
      nres_sync_stats(s[i], 0, &st);
      sum += st.local;
      if ((int) st.synced != synced || (synced && st.hosts != 3))
        all = 0;
    }
    if (all && synced && quotas && fabs(sum - R_RATE) > 0.05 * R_RATE)
      all = 0;
    if (all && !synced && fabs(sum - R_RATE) > 0.01 * R_RATE)
      all = 0;
    if (all)
      return now_ns() - t0;
    sleep_ns(2 * NRES_MSEC);
  }
  return NRES_TIME_NEVER;
}

static void test_redis_failures(void **state) {
  static const double split[3] = { 0.6, 0.3, 0.1 };
  /* static: a failed check leaves the threads running on them */
  static rate_host_t h[3];
  static pthread_t th[3];
  static nres_sync_t *s[3];
  char node[8];
  uint64_t before[3];
  nres_time_t t, t2, start, local_bound, sync_bound;
  int i;

  (void) state;
  start = now_ns();
  for (i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_ratelimit_init(&h[i].limit, R_RATE, R_BURST), 0);
    assert_int_equal(nres_budget_init(&h[i].budget, 0.1, 5, 20), 0);
    h[i].offered = 1.5 * R_RATE * split[i];
    h[i].spend = 1;
    h[i].end = start + 8 * NRES_SEC;
    snprintf(node, sizeof(node), "f%d", i);
    s[i] = agent(node, "nres-f");
    assert_int_equal(nres_sync_add_ratelimit(s[i], "api", &h[i].limit, 0), 0);
    assert_int_equal(nres_sync_add_budget(s[i], "api", &h[i].budget, -1), 1);
    assert_int_equal(nres_sync_start(s[i]), 0);
  }
  for (i = 0; i < 3; i++)
    pthread_create(&th[i], NULL, rate_load, &h[i]);
  /* Falling back: the first failed round or probe (one between two
   * rounds), within an interval killed or stopped, read from the limiters
   * (test_probe_hanging checks it on a virtual clock; 70 ms of slack here
   * for a loaded machine under TSan). Back in the fleet: the reconnection
   * wait (at most an interval here), a round, and the
   * other hosts' next round to count 3 hosts: 2 intervals after the
   * wait. Quotas then settle within a few more rounds. 30 ms of
   * scheduling slack for a loaded machine. */
  local_bound = IVL + 2 * 20 * NRES_MSEC + 30 * NRES_MSEC;
  sync_bound = IVL + 20 * NRES_MSEC + 2 * IVL + 30 * NRES_MSEC;
  assert_true(wait_all(s, 1, 1, 2 * NRES_SEC) != NRES_TIME_NEVER);

  /* Killed. */
  redis_kill();
  t = wait_local(h, 2 * NRES_SEC);
  assert_true(wait_all(s, 0, 0, 2 * NRES_SEC) != NRES_TIME_NEVER);
  printf("# failures: killed: local after %.0f ms\n", (double) t / 1e6);
  assert_true(t <= local_bound);
  for (i = 0; i < 3; i++)
    before[i] = atomic_load(&h[i].admitted);
  sleep_ns(300 * NRES_MSEC);
  for (i = 0; i < 3; i++)   /* still serving, with local protection */
    assert_true(atomic_load(&h[i].admitted) > before[i]);

  /* Back, with no data. */
  redis_start();
  t = wait_all(s, 1, 0, 2 * NRES_SEC);
  t2 = wait_all(s, 1, 1, 2 * NRES_SEC);
  printf("# failures: restarted empty: fleet again after %.0f ms, quotas "
         "settled %.0f ms later\n", (double) t / 1e6, (double) t2 / 1e6);
  assert_true(t <= sync_bound);
  assert_true(t2 <= 6 * IVL);

  /* Hanging: stopped, connections accepted by the kernel, no answers. */
  sleep_ns(300 * NRES_MSEC);
  kill(redis.pid, SIGSTOP);
  t = wait_local(h, 2 * NRES_SEC);
  assert_true(wait_all(s, 0, 0, 2 * NRES_SEC) != NRES_TIME_NEVER);
  printf("# failures: stopped: local after %.0f ms\n", (double) t / 1e6);
  assert_true(t <= local_bound);
  for (i = 0; i < 3; i++)
    before[i] = atomic_load(&h[i].admitted);
  sleep_ns(500 * NRES_MSEC);
  for (i = 0; i < 3; i++)
    assert_true(atomic_load(&h[i].admitted) > before[i]);
  kill(redis.pid, SIGCONT);
  t = wait_all(s, 1, 0, 2 * NRES_SEC);
  t2 = wait_all(s, 1, 1, 2 * NRES_SEC);
  printf("# failures: continued: fleet again after %.0f ms, quotas settled "
         "%.0f ms later\n", (double) t / 1e6, (double) t2 / 1e6);
  assert_true(t <= sync_bound);
  assert_true(t2 <= 6 * IVL);

  for (i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < 3; i++) {
    nres_sync_info_t info;

    nres_sync_info(s[i], &info);
    assert_true(info.failures >= 2 && info.connects >= 3);
    nres_sync_free(s[i]);
    /* The request path never waited on Redis. */
    printf("# failures: host %d longest request-path step %.3f ms\n", i,
           (double) h[i].worst / 1e6);
    assert_true(h[i].worst < 5 * NRES_MSEC);
  }
}

/* ---------------------------------------------- virtual clock, real Redis */

/* Hosts driven on a virtual clock: every request and every agent round
 * (nres_sync_tick) at a virtual time, in a fixed order, against the real
 * redis-server. Redis's own clock only decides when a silent host leaves
 * the shares (three configured intervals of real time: the agents are
 * configured with 1 s, far more than a whole run takes), so a run gives
 * the same figures every time. */

#define V_RATE 1000.0
#define V_BURST 30

typedef struct {
  nres_ratelimit_t limit;
  nres_sync_t *s;
  nres_time_t next_req, next_tick, next_probe;
  uint64_t admitted;
} vhost_t;

static nres_sync_t *virtual_agent(const char *node, const char *prefix,
                                  int port) {
  nres_sync_config_t c;
  nres_sync_t *s;

  nres_sync_config_init(&c);
  c.port = port;
  c.node = node;
  c.prefix = prefix;
  c.fleet = "test";
  c.interval = NRES_SEC;
  c.timeout = 500 * NRES_MSEC;   /* a loaded machine is no failure here */
  c.seed = 7;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  return s;
}

/* The local burst the agent gave a limiter. */
static uint32_t burst_of(nres_ratelimit_t *l) {
  return (uint32_t) (l->tolerance / l->interval);
}

/* Three hosts, a fleet rate of V_RATE/s, offered 1.5 times that split
 * 60/30/10 % (turning every second with `turning`: the busy host
 * changes), rounds every `ivl`, staggered by a third of it. Admitted in
 * `window` s after 1 s, against the rate: the error. */
static double virtual_rate(const char *prefix, nres_time_t ivl, int turning,
                           double window) {
  static const double split[3] = { 0.6, 0.3, 0.1 };
  const nres_time_t t0 = 1000 * NRES_SEC, from = t0 + NRES_SEC;
  const nres_time_t to = from + (nres_time_t) (window * 1e9);
  vhost_t h[3];
  char node[8];
  uint64_t total = 0, bursts = 0;
  nres_time_t t;
  double offered;
  int i, k, sec;

  for (i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_ratelimit_init(&h[i].limit, V_RATE, V_BURST), 0);
    snprintf(node, sizeof(node), "v%d", i);
    h[i].s = virtual_agent(node, prefix, redis.port);
    assert_int_equal(nres_sync_add_ratelimit(h[i].s, "api", &h[i].limit, 0), 0);
    h[i].next_req = t0;
    h[i].next_tick = t0 + i * ivl / 3;
    h[i].next_probe = h[i].next_tick + ivl / 2;
  }
  for (;;) {
    k = 0;   /* the earliest event: host k's request (or round) */
    for (i = 1; i < 3; i++)
      if (h[i].next_req < h[k].next_req)
        k = i;
    for (i = 0; i < 3; i++)
      if (h[i].next_tick <= h[k].next_req) {
        k = i + 3;
        break;
      }
    if (k >= 3) {
      vhost_t *v = &h[k - 3];
      assert_int_equal(nres_sync_tick(v->s, v->next_tick), 0);
      v->next_tick += ivl;
      continue;
    }
    for (i = 0; i < 3; i++)   /* the thread's probe, half-way */
      if (h[i].next_probe <= h[k].next_req) {
        assert_int_equal(nres_sync_probe(h[i].s, h[i].next_probe), 0);
        h[i].next_probe += ivl;
      }
    t = h[k].next_req;
    if (t >= to)
      break;
    if (nres_ratelimit_acquire(&h[k].limit, t, NULL) == 0 && t >= from)
      h[k].admitted++;
    sec = (int) ((t - t0) / NRES_SEC);
    offered = 1.5 * V_RATE * split[(k + (turning ? sec : 0)) % 3];
    h[k].next_req = t + (nres_time_t) (1e9 / offered);
  }
  for (i = 0; i < 3; i++) {
    total += h[i].admitted;
    bursts += burst_of(&h[i].limit);
    nres_sync_free(h[i].s);
  }
  /* The hosts' bursts add up to about the fleet's (each rounded, >= 2). */
  if (!(bursts >= V_BURST - 2 && bursts <= V_BURST + 4))
    printf("# virtual rate: the hosts' bursts add up to %llu\n",
           (unsigned long long) bursts);
  assert_true(bursts >= V_BURST - 2 && bursts <= V_BURST + 4);
  return (double) total / (V_RATE * window) - 1;
}

/* The fleet rate across three hosts with a 60/30/10 % load, steady or
 * turning every second, at each interval of the benchmark (25, 100, 500
 * ms; a probe half-way, as the agent's thread does): within 2 % steady;
 * turning, within 10 % at 25 and 100 ms. At 500 ms a load that moves every
 * second outruns rounds every half second: 10.9 % under (12.3 % without
 * the half-way demand; the bound guards that). Host 0's rounds fall on
 * the turns here (it reports the old split for a whole interval), a worse
 * case than bench_fleet's random phases (8-9 % under). */
static void test_rate_turning_virtual(void **state) {
  static const int ms[3] = { 25, 100, 500 };
  char prefix[32];
  double still, turning;
  int i;

  (void) state;
  for (i = 0; i < 3; i++) {
    snprintf(prefix, sizeof(prefix), "nres-v%d", ms[i]);
    still = virtual_rate(prefix, ms[i] * NRES_MSEC, 0, 10);
    snprintf(prefix, sizeof(prefix), "nres-vt%d", ms[i]);
    turning = virtual_rate(prefix, ms[i] * NRES_MSEC, 1, 10);
    printf("# virtual rate, %d ms: 60/30/10 %+.1f %%, turning every second "
           "%+.1f %%\n", ms[i], 100 * still, 100 * turning);
    assert_true(fabs(still) <= 0.02);
    assert_true(fabs(turning) <= (ms[i] < 500 ? 0.10 : 0.115));
  }
}

/* Each host holds a part of the fleet's burst, so that all of them at
 * once admit about the fleet's burst, not hosts times it: 3 x 30 before.
 * Alone (one host, or Redis never reached) a host keeps the whole burst;
 * with Redis gone after a sync, the local share of it. */
static void test_burst_split(void **state) {
  nres_ratelimit_t l[3], lone;
  nres_sync_t *s[3], *apart;
  nres_sync_stats_t st;
  nres_time_t t = 2000 * NRES_SEC;
  char node[8];
  int i, k, total = 0, n;

  (void) state;
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_ratelimit_init(&l[i], V_RATE, V_BURST), 0);
    snprintf(node, sizeof(node), "b%d", i);
    s[i] = virtual_agent(node, "nres-burst", redis.port);
    assert_int_equal(nres_sync_add_ratelimit(s[i], "api", &l[i], 0), 0);
  }
  for (k = 0; k < 3; k++, t += 100 * NRES_MSEC)
    for (i = 0; i < 3; i++)
      assert_int_equal(nres_sync_tick(s[i], t), 0);
  /* No load: a third of the rate each, a third of the burst. */
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_sync_stats(s[i], 0, &st), 0);
    assert_int_equal(st.hosts, 3);
    assert_true(fabs(st.local - V_RATE / 3) < 1);
    assert_int_equal(burst_of(&l[i]), V_BURST / 3);
    for (n = 0; nres_ratelimit_acquire(&l[i], t, NULL) == 0; n++)
      ;
    total += n;
  }
  printf("# burst: three synced hosts admit %d at once (fleet burst %d)\n",
         total, V_BURST);
  assert_int_equal(total, V_BURST);

  /* Redis gone: the local share (a third, the hosts last seen). */
  kill(redis.pid, SIGKILL);
  waitpid(redis.pid, NULL, 0);
  redis.pid = 0;
  t += 100 * NRES_MSEC;
  assert_int_equal(nres_sync_tick(s[0], t), NRES_EAGAIN);
  assert_int_equal(burst_of(&l[0]), V_BURST / 3);
  for (i = 0; i < 3; i++)
    nres_sync_free(s[i]);

  /* Never reached Redis (nothing listens there): alone, the whole burst. */
  assert_int_equal(nres_ratelimit_init(&lone, V_RATE, V_BURST), 0);
  apart = virtual_agent("alone", "nres-burst", redis_server_free_port());
  assert_int_equal(nres_sync_add_ratelimit(apart, "api", &lone, 0), 0);
  assert_int_equal(nres_sync_tick(apart, t), NRES_EAGAIN);
  assert_int_equal(burst_of(&lone), V_BURST);
  assert_true(fabs(nres_ratelimit_rate(&lone) - V_RATE) < 1e-6);
  nres_sync_free(apart);
}

/* A Redis that hangs (stopped: the kernel still accepts, nothing answers)
 * is seen by the probe between two rounds: every entry falls back at the
 * probe, not at the next round's timeout. Rounds every 500 ms, timeout
 * 200 ms: the probe at 300 ms falls back by 500 ms, one interval after
 * the last good round (the round at 500 ms would have fallen back at 700
 * ms). Times are virtual but for the timeout itself. */
static void test_probe_hanging(void **state) {
  nres_ratelimit_t l[3];
  nres_sync_t *s[3];
  nres_sync_stats_t st;
  nres_sync_config_t c;
  nres_time_t t = 3000 * NRES_SEC;
  char node[8];
  int i;

  (void) state;
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_ratelimit_init(&l[i], V_RATE, V_BURST), 0);
    nres_sync_config_init(&c);
    c.port = redis.port;
    snprintf(node, sizeof(node), "p%d", i);
    c.node = node;
    c.prefix = "nres-probe";
    c.fleet = "test";
    c.interval = 500 * NRES_MSEC;
    c.timeout = 200 * NRES_MSEC;
    c.ttl = 10 * NRES_SEC;
    c.seed = 7;
    assert_int_equal(nres_sync_new(&c, &s[i]), 0);
    assert_int_equal(nres_sync_add_ratelimit(s[i], "api", &l[i], 0), 0);
    /* Not connected yet: nothing to probe. */
    assert_int_equal(nres_sync_probe(s[i], t), NRES_EAGAIN);
  }
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_sync_tick(s[i], t), 0);
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_sync_tick(s[i], t + NRES_MSEC), 0);
  /* A healthy Redis: the probe changes nothing. */
  assert_int_equal(nres_sync_probe(s[0], t + 300 * NRES_MSEC), 0);
  assert_int_equal(nres_sync_stats(s[0], 0, &st), 0);
  assert_int_equal(st.synced, 1);
  assert_int_equal(st.hosts, 3);

  kill(redis.pid, SIGSTOP);
  for (i = 0; i < 3; i++) {
    assert_int_equal(nres_sync_probe(s[i], t + 300 * NRES_MSEC), NRES_EAGAIN);
    assert_int_equal(nres_sync_stats(s[i], 0, &st), 0);
    assert_int_equal(st.synced, 0);
    assert_true(fabs(st.local - V_RATE / 3) < 1e-6);   /* local share */
  }
  kill(redis.pid, SIGCONT);
  /* Back within the reconnection wait (at most an interval). */
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_sync_tick(s[i], t + 801 * NRES_MSEC), 0);
  assert_int_equal(nres_sync_stats(s[2], 0, &st), 0);
  assert_int_equal(st.synced, 1);
  assert_int_equal(st.hosts, 3);
  /* The thread probes by itself; a probe from outside is refused then. */
  assert_int_equal(nres_sync_start(s[0]), 0);
  assert_int_equal(nres_sync_probe(s[0], t), NRES_EINVAL);
  for (i = 0; i < 3; i++)
    nres_sync_free(s[i]);
}

/* ----------------------------------------------------------- nres-syncd */


/* Wait until the limiter's rate drops under `below`: 1, or 0 after 2 s. */
static int rate_drops(nres_ratelimit_t *l, double below) {
  int i;

  for (i = 0; i < 100; i++) {
    if (nres_ratelimit_rate(l) < below)
      return 1;
    sleep_ns(20 * NRES_MSEC);
  }
  return 0;
}

static void test_syncd_region(void **state) {
  nres_shm_slot_t *slot;
  nres_ratelimit_t other[2];
  nres_sync_t *s[2];
  char path[300], path2[300], region_arg[320], port[32], status[300];
  char syncd[512], buf[4096];
  size_t size, size2, size3;
  void *mem, *mem2, *mem3;
  pid_t pid;
  FILE *f;
  int i, n;

  (void) state;
  syncd_path(syncd, sizeof(syncd));
  snprintf(path, sizeof(path), "%s/gw.shm", redis.dir);
  snprintf(status, sizeof(status), "%s/status.json", redis.dir);
  slot = make_region(path, 64, 200, &mem, &size);
  /* A second table; its scope is its file's name: "clients". */
  snprintf(path2, sizeof(path2), "%s/clients.shm", redis.dir);
  make_region(path2, 8, 50, &mem3, &size3);
  {   /* a client's key with a quote and a backslash: the status JSON must
       * stay JSON (the name is escaped as %22 and %5C) */
    nres_shm_t *clients;
    assert_int_equal(nres_shm_attach(mem3, size3, &clients), 0);
    assert_true(nres_shm_acquire(clients, "k\"\\x", 4, now_ns(), 60 * NRES_SEC, NULL) >= 0);
  }
  snprintf(region_arg, sizeof(region_arg), "%s=gw", path);

  snprintf(port, sizeof(port), "127.0.0.1:%d", redis.port);
  pid = fork();
  if (pid == 0) {
    execl(syncd, syncd, "--fleet", "test", "--region", region_arg, "--region", path2, "--redis",
          port, "--interval", "50", "--breaker", "--node", "gw1", "--status",
          status, (char *) NULL);
    _exit(127);
  }
  /* Two more hosts of the fleet, agents here, with the same key: the
   * region's limiter soon holds a third of 200/s (no demand anywhere). */
  for (i = 0; i < 2; i++) {
    nres_ratelimit_init(&other[i], 200, 5);
    snprintf(buf, sizeof(buf), "o%d", i);
    s[i] = agent(buf, "nres");
    assert_true(nres_sync_add_ratelimit(s[i], "gw:api.example:80",
                                        &other[i], 0) >= 0);
    assert_int_equal(nres_sync_start(s[i]), 0);
  }
  assert_true(rate_drops(&slot->ratelimit, 150));
  printf("# nres-syncd: the region's limiter now %.1f/s\n",
         nres_ratelimit_rate(&slot->ratelimit));

  /* The gateway replaces the file (another layout, another rate): the
   * agent maps the new one within a second or so and syncs its key. */
  slot = make_region(path, 128, 90, &mem2, &size2);
  assert_true(rate_drops(&slot->ratelimit, 60));
  printf("# nres-syncd: the new region's limiter now %.1f/s\n",
         nres_ratelimit_rate(&slot->ratelimit));
  for (i = 0; i < 2; i++)
    nres_sync_free(s[i]);

  sleep_ns(1100 * NRES_MSEC);   /* a status file is written each second */
  kill(pid, SIGTERM);
  assert_int_equal(waitpid(pid, &i, 0), pid);
  assert_true(WIFEXITED(i) && WEXITSTATUS(i) == 0);
  f = fopen(status, "r");
  assert_non_null(f);
  n = (int) fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n > 0 ? n : 0] = '\0';
  printf("# nres-syncd status: %.300s\n", buf);
  assert_non_null(strstr(buf, "\"scope\":\"gw:api.example:80\",\"kind\":\"ratelimit\",\"synced\":1"));
  assert_non_null(strstr(buf, "\"kind\":\"breaker\""));
  assert_non_null(strstr(buf, "\"scope\":\"clients:api.example:80\",\"kind\":\"ratelimit\",\"synced\":1"));
  assert_non_null(strstr(buf, "\"scope\":\"clients:k%22%5Cx\""));
  assert_null(strstr(buf, "k\"\\x"));
  munmap(mem, size);
  munmap(mem2, size2);
  munmap(mem3, size3);
}


/* --------------------------------------------------------- credentials */

typedef struct {
  int lines;
  char last[NRES_SYNC_ERROR_MAX];
} said_t;

static void on_said(void *arg, const char *line) {
  said_t *l = arg;

  l->lines++;
  snprintf(l->last, sizeof(l->last), "%s", line);
}

/* One round of a fresh agent with `c` on a rate limit: the tick's code. */
static int one_round(nres_sync_config_t *c, said_t *said) {
  nres_ratelimit_t l;
  nres_sync_t *s;
  int rc;

  memset(said, 0, sizeof(*said));
  c->log = on_said;
  c->log_arg = said;
  assert_int_equal(nres_sync_new(c, &s), 0);
  assert_int_equal(nres_ratelimit_init(&l, 100, 5), 0);
  assert_true(nres_sync_add_ratelimit(s, "api", &l, 0) >= 0);
  rc = nres_sync_tick(s, now_ns());
  nres_sync_free(s);
  return rc;
}

/* A redis-server with requirepass, an ACL user and a unix socket (issue
 * 29; issue 28 defect 8: against requirepass the agent used to fail every
 * round in silence and nres-syncd --once exit 0). */
static void test_credentials(void **state) {
  redis_server_t auth;
  nres_sync_config_t c;
  redisContext *rc;
  redisReply *r;
  said_t said;
  char sock[300], pwfile[300], syncd[512], region[300], port[32], out[2048];
  void *mem;
  size_t size;
  ssize_t len;
  int fds[2], st;
  pid_t pid;
  FILE *f;

  (void) state;
  memset(&auth, 0, sizeof(auth));
  snprintf(auth.bin, sizeof(auth.bin), "%s", redis.bin);
  snprintf(auth.dir, sizeof(auth.dir), "%s", redis.dir);
  snprintf(sock, sizeof(sock), "%s/auth.sock", redis.dir);
  auth.port = redis_server_free_port();
  auth.extra[0] = "--requirepass";
  auth.extra[1] = "main-pw";
  auth.extra[2] = "--user";
  auth.extra[3] = "alice";
  auth.extra[4] = "on";
  auth.extra[5] = ">alice-pw";
  auth.extra[6] = "~*";
  auth.extra[7] = "+@all";
  auth.extra[8] = "--unixsocket";
  auth.extra[9] = sock;
  auth.extra[10] = "--unixsocketperm";
  auth.extra[11] = "700";
  assert_int_equal(redis_server_start(&auth), 0);

  nres_sync_config_init(&c);
  c.port = auth.port;
  c.fleet = "cred";
  c.timeout = 500 * NRES_MSEC;
  /* No password: NOAUTH, said (it used to be silence). */
  assert_int_equal(one_round(&c, &said), NRES_ESTATE);
  printf("# no password: %s\n", said.last);
  assert_int_equal(said.lines, 1);
  assert_non_null(strstr(said.last, "NOAUTH"));
  /* The password from a file (its first line). */
  snprintf(pwfile, sizeof(pwfile), "%s/pw", redis.dir);
  f = fopen(pwfile, "w");
  assert_non_null(f);
  fputs("main-pw\n", f);
  fclose(f);
  c.password_file = pwfile;
  assert_int_equal(one_round(&c, &said), 0);
  assert_int_equal(said.lines, 0);
  /* An ACL user with a wrong password, then the right one. */
  c.password_file = NULL;
  c.user = "alice";
  c.password = "main-pw";
  assert_int_equal(one_round(&c, &said), NRES_ESTATE);
  printf("# wrong ACL password: %s\n", said.last);
  assert_non_null(strstr(said.last, "WRONGPASS"));
  c.password = "alice-pw";
  assert_int_equal(one_round(&c, &said), 0);
  /* The unix socket and SELECT 3: the record is in db 3, not db 0. */
  c.unix_path = sock;
  c.db = 3;
  c.fleet = "cred3";
  assert_int_equal(one_round(&c, &said), 0);
  rc = redisConnectUnix(sock);
  assert_true(rc != NULL && rc->err == 0);
  r = redisCommand(rc, "AUTH alice alice-pw");
  freeReplyObject(r);
  r = redisCommand(rc, "EXISTS nres:cred3:{api}:r");
  assert_int_equal(r->integer, 0);
  freeReplyObject(r);
  r = redisCommand(rc, "SELECT 3");
  freeReplyObject(r);
  r = redisCommand(rc, "EXISTS nres:cred3:{api}:r");
  assert_int_equal(r->integer, 1);
  freeReplyObject(r);
  redisFree(rc);
  /* A bad password file is refused by name at nres_sync_new. */
  c.password = NULL;
  c.password_file = "/nonexistent/pw";
  assert_int_equal(nres_sync_new(&c, (nres_sync_t **) &mem), NRES_EINVAL);

  /* nres-syncd --once: without a password exit 1 with NOAUTH said; with
   * the ACL user and the password from the environment, exit 0. */
  syncd_path(syncd, sizeof(syncd));
  snprintf(region, sizeof(region), "%s/cred.shm", redis.dir);
  make_region(region, 8, 100, &mem, &size);
  snprintf(port, sizeof(port), "127.0.0.1:%d", auth.port);
  for (int pass = 0; pass < 2; pass++) {
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      setenv("NRES_TEST_PW", "alice-pw", 1);
      if (pass == 0)
        execl(syncd, syncd, "--fleet", "cred", "--region", region, "--redis",
              port, "--once", (char *) NULL);
      else
        execl(syncd, syncd, "--fleet", "cred", "--region", region, "--redis",
              port, "--user", "alice", "--password-env", "NRES_TEST_PW",
              "--once", (char *) NULL);
      _exit(127);
    }
    close(fds[1]);
    len = read(fds[0], out, sizeof(out) - 1);
    out[len > 0 ? len : 0] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    printf("# nres-syncd --once %s: exit %d %.160s\n",
           pass == 0 ? "without a password" : "as alice",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), pass == 0 ? 1 : 0);
    if (pass == 0)
      assert_non_null(strstr(out, "NOAUTH"));
  }
  munmap(mem, size);
  redis_server_kill(&auth);
}


/* SCRIPT FLUSH under a running fleet: NOSCRIPT fails the round, said
 * once; the next connection loads the scripts again and says so. */
static void test_noscript(void **state) {
  nres_sync_config_t c;
  nres_ratelimit_t l;
  nres_sync_info_t info;
  nres_sync_t *s;
  redisContext *rc;
  redisReply *r;
  said_t said;
  nres_time_t t = now_ns();
  int i;

  (void) state;
  memset(&said, 0, sizeof(said));
  nres_sync_config_init(&c);
  c.port = redis.port;
  c.fleet = "noscript";
  c.timeout = 500 * NRES_MSEC;
  c.log = on_said;
  c.log_arg = &said;
  assert_int_equal(nres_sync_new(&c, &s), 0);
  assert_int_equal(nres_ratelimit_init(&l, 100, 5), 0);
  assert_true(nres_sync_add_ratelimit(s, "api", &l, 0) >= 0);
  assert_int_equal(nres_sync_tick(s, t), 0);
  rc = redisConnect("127.0.0.1", redis.port);
  assert_true(rc != NULL && rc->err == 0);
  r = redisCommand(rc, "SCRIPT FLUSH");
  freeReplyObject(r);
  redisFree(rc);
  assert_int_equal(nres_sync_tick(s, t + 100 * NRES_MSEC), NRES_ESTATE);
  assert_int_equal(said.lines, 1);
  assert_non_null(strstr(said.last, "NOSCRIPT"));
  for (i = 0; i < 40; i++) {   /* after the backoff: loaded again */
    t += 100 * NRES_MSEC;
    if (nres_sync_tick(s, t + 100 * NRES_MSEC) == 0)
      break;
  }
  nres_sync_info(s, &info);
  assert_int_equal(info.connected, 1);
  assert_int_equal(said.lines, 2);
  assert_non_null(strstr(said.last, "synced again"));
  nres_sync_free(s);
}

/* ----------------------------------------------------- breaker quorum */

/* Host i of a breaker fleet run by hand: its breaker and agent. */
typedef struct {
  nres_breaker_t b;
  nres_sync_t *s;
  nres_rng_t rng;
  uint32_t held;                /* a probe permit never given back */
} qhost_t;

static void qhosts_init(qhost_t *h, int n, const char *prefix,
                        nres_time_t break_for) {
  nres_breaker_config_t c;
  char node[8];
  int i;

  nres_breaker_config_init(&c);
  c.consecutive = 3;
  /* A ratio keeps the window that says who saw the dependency lately (the
   * voters); with this many calls needed it never trips itself. */
  c.failure_ratio = 0.9;
  c.min_calls = 1000000;
  c.break_for = break_for;
  c.break_max = break_for;
  c.break_jitter = 0;
  c.success_threshold = 1;
  for (i = 0; i < n; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_breaker_init(&h[i].b, &c), 0);
    nres_rng_seed(&h[i].rng, (uint64_t) i + 1);
    snprintf(node, sizeof(node), "q%d", i);
    h[i].s = agent(node, prefix);
    assert_true(nres_sync_add_breaker(h[i].s, "dep", &h[i].b) >= 0);
  }
}

/* One call of host h if its breaker admits it: 1 if it was made. */
static int qcall(qhost_t *h, int ok) {
  uint32_t permit;
  nres_time_t t = now_ns();

  if (nres_breaker_acquire(&h->b, t, &permit) != 0)
    return 0;
  nres_breaker_record(&h->b, t, permit,
                      ok ? NRES_BREAKER_SUCCESS : NRES_BREAKER_FAILURE, 0,
                      &h->rng);
  return 1;
}

/* Issue 29: one host's calls fail while two succeed: the two stay
 * closed (the failing one protects itself); then all three fail: the
 * fleet opens, the last host within two intervals of the quorum, before
 * its own breaker could trip; a host that stops reporting ages out. */
static void test_breaker_quorum(void **state) {
  static qhost_t h[3];
  nres_sync_stats_t st;
  nres_time_t t, end, quorate = 0, opened2 = 0;
  int i, k, calls2 = 0;

  (void) state;
  qhosts_init(h, 3, "nres-q", 5 * NRES_SEC);
  /* Everyone healthy for a few rounds: three voters. */
  for (k = 0; k < 4; k++) {
    for (i = 0; i < 3; i++) {
      qcall(&h[i], 1);
      assert_int_equal(nres_sync_tick(h[i].s, now_ns()), 0);
    }
    sleep_ns(IVL);
  }
  /* Host 0's path fails: it opens, 1 and 2 stay closed for 20 rounds. */
  end = now_ns() + 20 * IVL;
  while ((t = now_ns()) < end) {
    qcall(&h[0], 0);
    qcall(&h[1], 1);
    qcall(&h[2], 1);
    for (i = 0; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    assert_int_equal(nres_breaker_state(&h[1].b, now_ns()), NRES_BREAKER_CLOSED);
    assert_int_equal(nres_breaker_state(&h[2].b, now_ns()), NRES_BREAKER_CLOSED);
    sleep_ns(IVL);
  }
  assert_int_equal(nres_breaker_state(&h[0].b, now_ns()), NRES_BREAKER_OPEN);
  nres_sync_stats(h[1].s, 0, &st);
  assert_int_equal(st.hosts, 3);   /* three voters, one of them open */
  assert_true(st.fleet != 1);      /* no fleet break */
  /* Host 1 fails too (2 of 3 open: a quorum). Host 2 calls once a second:
   * it hears of the break before its own third failure. */
  end = now_ns() + 40 * IVL;
  while ((t = now_ns()) < end && opened2 == 0) {
    qcall(&h[1], 0);
    if (nres_breaker_state(&h[1].b, t) == NRES_BREAKER_OPEN && quorate == 0)
      quorate = t;
    if ((k++ % 20) == 0 && qcall(&h[2], 0))
      calls2++;
    for (i = 0; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    if (nres_breaker_state(&h[2].b, now_ns()) == NRES_BREAKER_OPEN)
      opened2 = now_ns();
    sleep_ns(IVL / 5);
  }
  printf("# quorum: host 2 opened %.0f ms after the second host, after %d "
         "failures of its own\n", (double) (opened2 - quorate) / 1e6, calls2);
  assert_true(quorate != 0 && opened2 != 0);
  assert_true(opened2 - quorate <= 2 * IVL + 50 * NRES_MSEC);
  assert_true(calls2 < 3);
  /* Host 0 stops reporting: it leaves the voters within the stale time
   * (3 intervals) plus a round. */
  nres_sync_free(h[0].s);
  end = now_ns() + 20 * IVL;
  do {
    sleep_ns(IVL);
    for (i = 1; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    nres_sync_stats(h[1].s, 0, &st);
  } while (st.hosts != 2 && now_ns() < end);
  assert_int_equal(st.hosts, 2);
  for (i = 1; i < 3; i++)
    nres_sync_free(h[i].s);
}

/* ------------------------------------------------ hostile region files */

/* nres-syncd --once on `region`: its exit status, its stderr in err. */
static int syncd_once(const char *region, char *err, size_t cap) {
  char syncd[512], port[32], out[300];
  pid_t pid;
  FILE *f;
  size_t n;
  int st, fd;

  syncd_path(syncd, sizeof(syncd));
  snprintf(port, sizeof(port), "127.0.0.1:%d", redis.port);
  snprintf(out, sizeof(out), "%s/syncd.err", redis.dir);
  pid = fork();
  if (pid == 0) {
    fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    execl(syncd, syncd, "--fleet", "test", "--region", region, "--redis", port,
          "--once", (char *) NULL);
    _exit(127);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  f = fopen(out, "r");
  n = f != NULL ? fread(err, 1, cap - 1, f) : 0;
  err[n] = '\0';
  if (f != NULL)
    fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void refused(const char *region, const char *why) {
  char err[2048];
  int rc = syncd_once(region, err, sizeof(err));

  printf("# hostile region: exit %d: %s", rc, err);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, why));
}

/* Leftover of issue 28: nres-syncd maps a gateway's region file only after
 * the checks nginx's own files pass (shm_file.c, one function for both):
 * not a symbolic link, a regular file, ours, no group or other access, not
 * empty, and a layout that fits its size (a gateway's file may be longer:
 * its control area follows the table). Each hostile file is refused with
 * exit 1 and a line; before, it was mapped and synced. */
static void test_syncd_hostile_region(void **state) {
  char path[300], link[300], dir[300], empty[300], err[2048];
  size_t size;
  void *mem;
  int fd;

  (void) state;
  snprintf(path, sizeof(path), "%s/host.shm", redis.dir);
  make_region(path, 8, 100, &mem, &size);
  munmap(mem, size);
  assert_int_equal(syncd_once(path, err, sizeof(err)), 0);   /* fit */
  assert_int_equal(chmod(path, 0640), 0);
  refused(path, "refused: a file with group or other access (mode 0640");
  assert_int_equal(chmod(path, 0600), 0);
  if (geteuid() == 0) {   /* another user's file (root can make one) */
    assert_int_equal(chown(path, 65534, 65534), 0);
    refused(path, "refused: a file owned by uid 65534");
    assert_int_equal(chown(path, 0, 0), 0);
  }
  snprintf(link, sizeof(link), "%s/link.shm", redis.dir);
  assert_int_equal(symlink(path, link), 0);
  refused(link, "refused: a symbolic link");
  snprintf(dir, sizeof(dir), "%s/dir.shm", redis.dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  refused(dir, "refused:");
  snprintf(empty, sizeof(empty), "%s/empty.shm", redis.dir);
  fd = open(empty, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  close(fd);
  refused(empty, "refused: an empty file");
  assert_int_equal(truncate(path, (off_t) size / 2), 0);   /* cut short */
  refused(path, "is not an nres shm region");
}

/* ------------------------------------------- breaker fleet failure ratio */

static double fleet_ratio_on;   /* breaker_fleet_ratio of the next agents */

static void fleet_ratio(nres_sync_config_t *c) {
  c->breaker_fleet_ratio = fleet_ratio_on;
  c->breaker_fleet_min_calls = 12;
}

/* Three hosts whose breakers trip at a failure ratio of 0.5 over 10 calls
 * (no consecutive rule), on agents with the fleet ratio at `ratio` (0:
 * off) and 12 fleet calls. */
static void rhosts_init(qhost_t *h, const char *prefix, double ratio) {
  nres_breaker_config_t c;
  char node[8];
  int i;

  nres_breaker_config_init(&c);
  c.consecutive = 0;
  c.failure_ratio = 0.5;
  c.min_calls = 10;
  c.window = 10 * NRES_SEC;
  c.break_for = 5 * NRES_SEC;
  c.break_max = 5 * NRES_SEC;
  c.break_jitter = 0;
  fleet_ratio_on = ratio;
  for (i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof(h[i]));
    assert_int_equal(nres_breaker_init(&h[i].b, &c), 0);
    nres_rng_seed(&h[i].rng, (uint64_t) i + 1);
    snprintf(node, sizeof(node), "r%d", i);
    h[i].s = agent_tuned(node, prefix, fleet_ratio);
    assert_true(nres_sync_add_breaker(h[i].s, "dep", &h[i].b) >= 0);
  }
}

/* Every host fails, host 0 twice a round, hosts 1 and 2 once: host 0
 * trips at its 10th call (round 5); the round at which hosts 1 and 2 are
 * open (or 0 if they stay closed for `rounds`), their own calls then. */
static int all_failing(qhost_t *h, int rounds, int *own) {
  int r, i, first = 0;

  for (r = 1; r <= rounds; r++) {
    qcall(&h[0], 0);
    qcall(&h[0], 0);
    for (i = 1; i < 3; i++)
      own[i] += qcall(&h[i], 0);
    if (first == 0 && nres_breaker_state(&h[0].b, now_ns()) == NRES_BREAKER_OPEN)
      first = r;
    for (i = 0; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    if (nres_breaker_state(&h[1].b, now_ns()) == NRES_BREAKER_OPEN &&
        nres_breaker_state(&h[2].b, now_ns()) == NRES_BREAKER_OPEN)
      return first != 0 ? r - first + 1 : -1;
    sleep_ns(IVL);
  }
  return 0;
}

/* Issue 29: the failure-ratio quorum. One host failing all its calls
 * while two succeed with more traffic: the fleet's ratio stays low, the
 * two stay closed. All failing: the fleet opens in the round in which the
 * first host trips (within one interval), before the others' own breakers
 * could (they have fewer calls than min_calls); with the ratio off, the
 * same run leaves them closed (one open host of three is no quorum). */
static void test_breaker_fleet_ratio(void **state) {
  static qhost_t h[3];
  nres_sync_stats_t st;
  int r, i, own[3] = { 0, 0, 0 }, took;

  (void) state;
  rhosts_init(h, "nres-r1", 0.5);
  for (r = 0; r < 20; r++) {
    qcall(&h[0], 0);
    qcall(&h[0], 0);
    for (i = 0; i < 5; i++) {
      qcall(&h[1], 1);
      qcall(&h[2], 1);
    }
    for (i = 0; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    assert_int_equal(nres_breaker_state(&h[1].b, now_ns()), NRES_BREAKER_CLOSED);
    assert_int_equal(nres_breaker_state(&h[2].b, now_ns()), NRES_BREAKER_CLOSED);
    sleep_ns(IVL);
  }
  assert_int_equal(nres_breaker_state(&h[0].b, now_ns()), NRES_BREAKER_OPEN);
  nres_sync_stats(h[1].s, 0, &st);
  assert_true(st.fleet != 1);
  for (i = 0; i < 3; i++)
    nres_sync_free(h[i].s);

  rhosts_init(h, "nres-r2", 0.5);
  took = all_failing(h, 12, own);
  printf("# fleet ratio: hosts 1 and 2 open %d round(s) after host 0 tripped, "
         "after %d and %d calls of their own\n", took, own[1], own[2]);
  assert_int_equal(took, 1);
  assert_true(own[1] < 10 && own[2] < 10);
  for (i = 0; i < 3; i++)
    nres_sync_free(h[i].s);

  rhosts_init(h, "nres-r3", 0);   /* the same without the ratio */
  own[1] = own[2] = 0;
  assert_int_equal(all_failing(h, 8, own), 0);
  for (i = 0; i < 3; i++)
    nres_sync_free(h[i].s);
}

/* Issue 28 defect 1(c): the prober's breaker wedges half-open (a probe
 * permit taken and never given back). Its claim lapses at the end of its
 * break plus the lease (break_for), so the other hosts' given breaks run
 * out, one of them probes the (healthy) dependency and closes, and the
 * fleet is closed while the wedged host stays half-open. Before, the
 * wedged host re-imposed "open" on every other host every round, for
 * ever. */
static void test_wedged_prober(void **state) {
  static qhost_t h[3];
  const nres_time_t brk = 500 * NRES_MSEC;
  nres_time_t t, opened = 0, wedged = 0, closed = 0, end;
  int i, held = 0;

  (void) state;
  qhosts_init(h, 3, "nres-w", brk);
  /* Host 0 alone sees the dependency, failing: 3 failures open it, and as
   * the only voter it is a quorum: the others are given its break. */
  for (i = 0; i < 3; i++)
    qcall(&h[0], 0);
  end = now_ns() + 6 * NRES_SEC;
  while ((t = now_ns()) < end) {
    for (i = 0; i < 3; i++)
      nres_sync_tick(h[i].s, now_ns());
    t = now_ns();
    if (opened == 0 && nres_breaker_state(&h[0].b, t) == NRES_BREAKER_OPEN)
      opened = t;
    /* Host 0 half-open: it takes the probe permit and never reports. */
    if (!held && nres_breaker_state(&h[0].b, t) == NRES_BREAKER_HALF_OPEN &&
        nres_breaker_acquire(&h[0].b, t, &h[0].held) == 0) {
      held = 1;
      wedged = t;
    }
    /* The others call a healthy dependency whenever they may. */
    for (i = 1; i < 3; i++)
      qcall(&h[i], 1);
    if (held && closed == 0 &&
        nres_breaker_state(&h[1].b, t) == NRES_BREAKER_CLOSED &&
        nres_breaker_state(&h[2].b, t) == NRES_BREAKER_CLOSED)
      closed = t;
    if (closed != 0) {   /* and they stay closed */
      assert_int_equal(nres_breaker_state(&h[1].b, t), NRES_BREAKER_CLOSED);
      assert_int_equal(nres_breaker_state(&h[2].b, t), NRES_BREAKER_CLOSED);
    }
    sleep_ns(IVL / 2);
  }
  printf("# wedged prober: wedged at +%.0f ms after opening, the others "
         "closed at +%.0f ms\n", (double) (wedged - opened) / 1e6,
         closed != 0 ? (double) (closed - opened) / 1e6 : -1.0);
  assert_true(held);
  assert_int_equal(nres_breaker_state(&h[0].b, now_ns()), NRES_BREAKER_HALF_OPEN);
  {   /* the lapse was seen and counted once by a host that saw it */
    nres_sync_stats_t st1, st2;

    nres_sync_stats(h[1].s, 0, &st1);
    nres_sync_stats(h[2].s, 0, &st2);
    printf("# wedged prober: leases expired seen %llu and %llu\n",
           (unsigned long long) st1.leases_expired,
           (unsigned long long) st2.leases_expired);
    assert_true(st1.leases_expired + st2.leases_expired >= 1);
    assert_true(st1.leases_expired <= 1 && st2.leases_expired <= 1);
  }
  /* Closed by the break, the lease (one break_for), the grace of two
   * intervals and slack for a loaded machine (sanitizers): 1.1 s idle,
   * where the wedged host used to hold the fleet for the whole 6 s. */
  assert_true(closed != 0);
  assert_true(closed - opened <= brk + brk + 2 * IVL + 800 * NRES_MSEC);
  for (i = 0; i < 3; i++)
    nres_sync_free(h[i].s);
}

/* ---------------------------------------------------------------- main */

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_set_rate_rescales),
    cmocka_unit_test(test_breaker_impose),
    cmocka_unit_test(test_budget_set_floor),
    cmocka_unit_test_setup_teardown(test_budget_fleet, setup, teardown),
    cmocka_unit_test_setup_teardown(test_rate_fleet, setup, teardown),
    cmocka_unit_test_setup_teardown(test_breaker_fleet, setup, teardown),
    cmocka_unit_test_setup_teardown(test_redis_failures, setup, teardown),
    cmocka_unit_test_setup_teardown(test_rate_turning_virtual, setup, teardown),
    cmocka_unit_test_setup_teardown(test_burst_split, setup, teardown),
    cmocka_unit_test_setup_teardown(test_probe_hanging, setup, teardown),
    cmocka_unit_test_setup_teardown(test_syncd_region, setup, teardown),
    cmocka_unit_test_setup_teardown(test_credentials, setup, teardown),
    cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
    cmocka_unit_test_setup_teardown(test_breaker_quorum, setup, teardown),
    cmocka_unit_test_setup_teardown(test_wedged_prober, setup, teardown),
    cmocka_unit_test_setup_teardown(test_breaker_fleet_ratio, setup, teardown),
    cmocka_unit_test_setup_teardown(test_syncd_hostile_region, setup, teardown),
  };
  char cmd[300];
  int rc;

  if (!redis_server_find(&redis)) {
    printf("redis-server is not installed (Debian: redis-server): the "
           "fleet sync tests are skipped\n");
    return 77;
  }
  snprintf(redis.dir, sizeof(redis.dir), "/tmp/nres-sync-XXXXXX");
  if (mkdtemp(redis.dir) == NULL)
    return 1;
  signal(SIGPIPE, SIG_IGN);
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", redis.dir);
  if (system(cmd) != 0)
    rc = rc ? rc : 1;
  return rc;
}

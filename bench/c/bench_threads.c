/* SPDX-License-Identifier: MIT */
/* bench_threads.c - what sharing one policy costs when threads fight over it.
 *
 * N pthreads call through ONE nres_policy_t (the way a multi-threaded C
 * server uses nres), on the success path, for a fixed time; the same for
 * 1, 2, 4 and 8 threads. Arms, interleaved repetition by repetition:
 *   raw              the attempt function alone (a per-thread counter): the
 *                    machine's own scaling ceiling;
 *   shared-add       raw + one relaxed atomic add on one shared word: what
 *                    a single contended cache line costs per call;
 *   trivial          nres_run on one shared trivial policy;
 *   default          nres_run on one shared default policy;
 *   default-private  each thread its own default policy: the same work
 *                    with nothing shared, so default minus this is the
 *                    price of sharing;
 *   trivial-quiet, default-quiet  the shared policies with telemetry off
 *                    (no counters): what the counters' line costs;
 *   breaker, estimator, counters  the shared writes of default's success
 *                    path one at a time (nres_breaker_record on a shared
 *                    breaker, nres_estimator_record on a shared estimator,
 *                    two relaxed adds on adjacent words as the policy's
 *                    telemetry does), to show where default's cost goes.
 * Throughput is calls per second of wall time (first start to last end);
 * CPU ns/call is the threads' CPU time (CLOCK_THREAD_CPUTIME_ID) per call:
 * on a shared machine a thread waiting for a core costs wall time but no
 * CPU time, while a cache line bouncing between cores stalls the thread on
 * the CPU, so CPU ns/call rising with the thread count is the contention. The report gives medians with
 * min-max and each arm's speed-up over its own 1-thread run of the same
 * repetition. Accounting is checked after every run of a policy arm: the
 * policy's counters must show exactly the calls made and the attempts the
 * function saw, else the program exits 1. Reported, never asserted.
 *
 * For callgrind: `--arm NAME --threads N --calls C` runs C calls on each of
 * N threads, untimed (bench/c/callgrind.sh subtracts two such runs).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nres.h"

#define MAX_THREADS 64
#define MAX_REPS 32
#define MAX_COUNTS 8

enum { RAW, SHARED_ADD, TRIVIAL, DEFAULT, PRIVATE, TRIVIAL_QUIET, DEFAULT_QUIET, BREAKER,
       ESTIMATOR, COUNTERS, NARMS };

static const struct {
  const char *name;
  const char *what;
} arm_info[NARMS] = {
  { "raw", "attempt function only, per-thread counter" },
  { "shared-add", "raw + 1 relaxed atomic add on one shared word" },
  { "trivial", "one shared trivial policy (3 attempts)" },
  { "default", "one shared default policy" },
  { "default-private", "a default policy per thread (nothing shared)" },
  { "trivial-quiet", "one shared trivial policy, telemetry off" },
  { "default-quiet", "one shared default policy, telemetry off" },
  { "breaker", "nres_breaker_record(success) on one shared breaker" },
  { "estimator", "nres_estimator_record on one shared estimator" },
  { "counters", "2 relaxed adds on adjacent shared words (telemetry)" },
};

/* One thread's own state, on a cache line of its own. */
typedef struct {
  _Alignas(64) unsigned long attempts;   /* the attempt function's calls */
  unsigned long calls;                   /* calls made */
  unsigned long ok;                      /* calls that succeeded */
  nres_time_t t0, t1;
  double cpu_ns;                         /* this thread's CPU time */
  nres_policy_t *policy;
  int arm;
  long fixed;                            /* > 0: this many calls, untimed */
  pthread_t tid;
} worker_t;

static worker_t workers[MAX_THREADS];
static nres_policy_t shared_trivial, shared_default, quiet_trivial, quiet_default;
static nres_policy_t *private_default[MAX_THREADS];
static nres_breaker_t shared_breaker;
static nres_estimator_t shared_estimator;
static _Alignas(64) atomic_ulong shared_word;
static _Alignas(64) atomic_ulong counter_pair[2];
static _Alignas(64) atomic_int stop;
static pthread_barrier_t start_line;   /* the threads and main: no spinning
                                          (callgrind would count the spins) */

static nres_verdict_t work(void *arg, const nres_attempt_t *a) {
  worker_t *w = arg;
  (void) a;
  w->attempts++;
  return nres_verdict(NRES_OK);
}
static nres_attempt_fn volatile fn = work;

static void one_call(worker_t *w) {
  nres_call_t call;
  nres_attempt_t a = { 1, 0, NRES_TIME_NEVER, NRES_TIME_NEVER };
  nres_time_t now;

  switch (w->arm) {
    case RAW:
      fn(w, &a);
      w->ok++;
      break;
    case SHARED_ADD:
      fn(w, &a);
      atomic_fetch_add_explicit(&shared_word, 1, memory_order_relaxed);
      w->ok++;
      break;
    case BREAKER:
      fn(w, &a);
      now = nres_clock_now();
      nres_breaker_record(&shared_breaker, now, 0, NRES_BREAKER_SUCCESS, 0, NULL);
      w->ok++;
      break;
    case ESTIMATOR:
      fn(w, &a);
      now = nres_clock_now();
      nres_estimator_record(&shared_estimator, now, 1000);
      w->ok++;
      break;
    case COUNTERS:
      fn(w, &a);
      atomic_fetch_add_explicit(&counter_pair[0], 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&counter_pair[1], 1, memory_order_relaxed);
      w->ok++;
      break;
    default:
      if (nres_run(w->policy, fn, w, &call) == 0)
        w->ok++;
      break;
  }
  w->calls++;
}

static double thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}

static void *thread_main(void *arg) {
  worker_t *w = arg;
  double cpu0;

  pthread_barrier_wait(&start_line);
  w->t0 = nres_clock_now();
  cpu0 = thread_cpu_ns();
  if (w->fixed > 0) {
    for (long i = 0; i < w->fixed; i++)
      one_call(w);
  } else {
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
      for (int i = 0; i < 256; i++)
        one_call(w);
  }
  w->t1 = nres_clock_now();
  w->cpu_ns = thread_cpu_ns() - cpu0;
  return NULL;
}

static nres_policy_t *policy_of(int arm, int t) {
  switch (arm) {
    case TRIVIAL: return &shared_trivial;
    case DEFAULT: return &shared_default;
    case PRIVATE: return private_default[t];
    case TRIVIAL_QUIET: return &quiet_trivial;
    case DEFAULT_QUIET: return &quiet_default;
  }
  return NULL;
}

/* Policies whose counters a run changed (one, or each thread's own). */
static void counters_sum(int arm, int threads, nres_counters_t *sum) {
  nres_counters_t c;
  memset(sum, 0, sizeof(*sum));
  for (int t = 0; t < (arm == PRIVATE ? threads : 1); t++) {
    nres_policy_t *p = policy_of(arm, t);
    if (p == NULL)
      return;
    nres_policy_counters(p, &c);
    sum->calls += c.calls;
    sum->attempts += c.attempts;
    sum->stops[NRES_STOP_OK] += c.stops[NRES_STOP_OK];
  }
}

typedef struct {
  double calls_per_sec;
  double ns_per_call;           /* thread CPU time per call */
} result_t;

/* Run one arm on n threads for `seconds` (or `fixed` calls each). */
static result_t run(int arm, int n, double seconds, long fixed) {
  nres_counters_t before, after;
  unsigned long calls = 0, attempts = 0, ok = 0;
  nres_time_t first = NRES_TIME_NEVER, last = 0;
  double thread_ns = 0;
  result_t r;

  counters_sum(arm, n, &before);
  atomic_store(&stop, 0);
  pthread_barrier_init(&start_line, NULL, (unsigned) n + 1);
  for (int t = 0; t < n; t++) {
    worker_t *w = &workers[t];
    memset(w, 0, sizeof(*w));
    w->arm = arm;
    w->fixed = fixed;
    w->policy = policy_of(arm, t);
    if (pthread_create(&w->tid, NULL, thread_main, w) != 0) {
      perror("bench_threads: pthread_create");
      exit(1);
    }
  }
  pthread_barrier_wait(&start_line);
  if (fixed <= 0) {
    struct timespec ts = { (time_t) seconds,
                           (long) ((seconds - (double) (time_t) seconds) * 1e9) };
    nanosleep(&ts, NULL);
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
  }
  for (int t = 0; t < n; t++) {
    worker_t *w = &workers[t];
    pthread_join(w->tid, NULL);
    calls += w->calls;
    attempts += w->attempts;
    ok += w->ok;
    first = w->t0 < first ? w->t0 : first;
    last = w->t1 > last ? w->t1 : last;
    thread_ns += w->cpu_ns;
  }
  pthread_barrier_destroy(&start_line);
  if (ok != calls) {
    fprintf(stderr, "bench_threads: %s: %lu of %lu calls failed\n", arm_info[arm].name,
            calls - ok, calls);
    exit(1);
  }
  if (arm == TRIVIAL || arm == DEFAULT || arm == PRIVATE) {
    counters_sum(arm, n, &after);
    if (after.calls - before.calls != calls || after.attempts - before.attempts != attempts ||
        after.stops[NRES_STOP_OK] - before.stops[NRES_STOP_OK] != ok) {
      fprintf(stderr,
              "bench_threads: %s x%d: accounting broken: policy says %llu calls, "
              "%llu attempts, %llu ok; threads made %lu calls, %lu attempts, %lu ok\n",
              arm_info[arm].name, n, (unsigned long long) (after.calls - before.calls),
              (unsigned long long) (after.attempts - before.attempts),
              (unsigned long long) (after.stops[NRES_STOP_OK] - before.stops[NRES_STOP_OK]),
              calls, attempts, ok);
      exit(1);
    }
  }
  r.calls_per_sec = (double) calls / ((double) (last - first) / 1e9);
  r.ns_per_call = thread_ns / (double) calls;
  return r;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
  double tmp[MAX_REPS];
  memcpy(tmp, v, sizeof(double) * (size_t) n);
  qsort(tmp, (size_t) n, sizeof(double), cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static void range(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    *lo = v[i] < *lo ? v[i] : *lo;
    *hi = v[i] > *hi ? v[i] : *hi;
  }
}

static int arm_named(const char *name) {
  for (int a = 0; a < NARMS; a++)
    if (!strcmp(arm_info[a].name, name))
      return a;
  fprintf(stderr, "bench_threads: no arm named '%s'\n", name);
  exit(2);
}

/* Which 64-byte line of a default policy each word of the success path
 * sits on (offsets from the policy's start; the policy is 64-aligned in
 * private_default[]), and whether the path writes (W) or only reads (R) it. */
static void layout(void) {
  const nres_policy_t *p = private_default[0];
  const char *base = (const char *) p;
  uint32_t e = nres_hist_index(1000) % NRES_ESTIMATOR_PENDING;
  /* Written words come in NRES_SHARDS copies, one per thread's shard:
   * shards 0 and 1 stand for them all. */
  struct { const char *name, *rw; const void *at; } f[] = {
    { "policy.draining", "R", &p->draining },
    { "policy.quantile_next", "R", &p->quantile_next },
    { "policy.quantile_samples", "R", &p->quantile_samples },
    { "policy.quantile_ceiling", "R", &p->quantile_ceiling },
    { "policy.n_ok[0].verdicts, .stops", "W (shard 0)", &p->n_ok[0].verdicts },
    { "policy.n_ok[1].verdicts, .stops", "W (shard 1)", &p->n_ok[1].verdicts },
    { "budget.capacity", "R", &p->budget->capacity },
    { "budget.tokens", "R (full)", &p->budget->tokens },
    { "breaker.word", "R", &p->breaker->word },
    { "breaker.consecutive", "R", &p->breaker->consecutive },
    { "breaker.window.width, .count", "R", &p->breaker->window.width },
    { "breaker.window.shard[0].pending", "W (CAS, shard 0)", &p->breaker->window.shard[0].pending },
    { "breaker.window.shard[1].pending", "W (CAS, shard 1)", &p->breaker->window.shard[1].pending },
    { "estimator.period", "R", &p->estimator->period },
    { "estimator.shard[0].entry[1us]", "W (CAS, shard 0)", &p->estimator->shard[0].entry[e] },
    { "estimator.shard[1].entry[1us]", "W (CAS, shard 1)", &p->estimator->shard[1].entry[e] },
  };
  printf("| word | path | offset | 64-byte line |\n|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    ptrdiff_t off = (const char *) f[i].at - base;
    printf("| %s | %s | %td | %td |\n", f[i].name, f[i].rw, off, off / 64);
  }
  printf("\nsizeof(nres_policy_t) = %zu\n", sizeof(nres_policy_t));
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_threads [--reps N] [--seconds S] [--threads 1,2,4,8] [--arms a,b]\n"
          "                     [--json FILE]\n"
          "       bench_threads --layout       (cache lines of default's shared words)\n"
          "       bench_threads --arm NAME --threads N --calls C   (untimed, for callgrind)\n");
  exit(2);
}

static void build(nres_policy_t *p, int preset, int telemetry) {
  nres_policy_init(p, preset);
  p->telemetry = (uint32_t) telemetry;
  if (nres_policy_build(p) != 0) {
    fprintf(stderr, "bench_threads: policy build failed\n");
    exit(1);
  }
}

int main(int argc, char **argv) {
  int reps = 5, counts[MAX_COUNTS] = { 1, 2, 4, 8 }, ncounts = 4;
  int use[NARMS], only = -1;
  double seconds = 0.25;
  long calls = 0;
  const char *json = NULL;
  static double cps[NARMS][MAX_COUNTS][MAX_REPS], nspc[NARMS][MAX_COUNTS][MAX_REPS];
  static double speedup[NARMS][MAX_COUNTS][MAX_REPS];
  nres_breaker_config_t bc;
  FILE *out;

  for (int a = 0; a < NARMS; a++)
    use[a] = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atol(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--arm") && i + 1 < argc) only = arm_named(argv[++i]);
    else if (!strcmp(argv[i], "--layout")) only = -2;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      char *s = argv[++i], *end;
      ncounts = 0;
      while (*s && ncounts < MAX_COUNTS) {
        counts[ncounts] = (int) strtol(s, &end, 10);
        if (end == s || counts[ncounts] < 1 || counts[ncounts] > MAX_THREADS) usage();
        ncounts++;
        s = *end == ',' ? end + 1 : end;
      }
    } else if (!strcmp(argv[i], "--arms") && i + 1 < argc) {
      char buf[256], *tok, *save;
      snprintf(buf, sizeof(buf), "%s", argv[++i]);
      for (int a = 0; a < NARMS; a++) use[a] = 0;
      for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        use[arm_named(tok)] = 1;
    } else usage();
  }
  if (reps < 1 || reps > MAX_REPS || seconds <= 0 || ncounts < 1)
    usage();

  build(&shared_trivial, NRES_PRESET_TRIVIAL, 1);
  build(&shared_default, NRES_PRESET_DEFAULT, 1);
  build(&quiet_trivial, NRES_PRESET_TRIVIAL, 0);
  build(&quiet_default, NRES_PRESET_DEFAULT, 0);
  for (int t = 0; t < MAX_THREADS; t++) {
    if (posix_memalign((void **) &private_default[t], 64, sizeof(nres_policy_t)) != 0)
      return 1;
    build(private_default[t], NRES_PRESET_DEFAULT, 1);
  }
  nres_breaker_config_init(&bc);
  if (nres_breaker_init(&shared_breaker, &bc) != 0 ||
      nres_estimator_init(&shared_estimator, 10000000000ll) != 0)
    return 1;

  if (only == -2) {
    layout();
    return 0;
  }
  if (only >= 0) {
    if (calls < 1 || ncounts != 1)
      usage();
    run(only, counts[0], 0, calls);
    return 0;
  }

  for (int a = 0; a < NARMS; a++)   /* warm-up */
    if (use[a])
      run(a, 1, seconds / 4, 0);
  for (int r = 0; r < reps; r++)
    for (int a = 0; a < NARMS; a++) {
      if (!use[a])
        continue;
      for (int c = 0; c < ncounts; c++) {
        result_t res = run(a, counts[c], seconds, 0);
        cps[a][c][r] = res.calls_per_sec;
        nspc[a][c][r] = res.ns_per_call;
      }
      for (int c = 0; c < ncounts; c++)
        speedup[a][c][r] = cps[a][c][r] / cps[a][0][r];
    }

  printf("| arm | threads | Mcalls/s (median) | min-max | speed-up vs %d thread(s) (median) |"
         " CPU ns/call (median) | CPU ns/call vs %d thread(s) |\n", counts[0], counts[0]);
  printf("|---|---|---|---|---|---|---|\n");
  for (int a = 0; a < NARMS; a++) {
    if (!use[a])
      continue;
    for (int c = 0; c < ncounts; c++) {
      double lo, hi, m = median(cps[a][c], reps);
      double ns = median(nspc[a][c], reps), ns1 = median(nspc[a][0], reps);
      range(cps[a][c], reps, &lo, &hi);
      printf("| %s | %d | %.2f | %.2f-%.2f | %.2f | %.1f | %.2f |\n", arm_info[a].name,
             counts[c], m / 1e6, lo / 1e6, hi / 1e6, median(speedup[a][c], reps), ns,
             ns / ns1);
    }
  }
  printf("\n%d repetitions x %.2f s per (arm, threads), interleaved; speed-up is against the "
         "same arm's %d-thread run of the same repetition; CPU ns/call is the threads' CPU time "
         "per call (time spent waiting for a core excluded). Accounting checked "
         "after every policy run: exact.\n", reps, seconds, counts[0]);
  for (int a = 0; a < NARMS; a++)
    if (use[a])
      printf("- %s: %s\n", arm_info[a].name, arm_info[a].what);

  if (json != NULL && (out = fopen(json, "w")) != NULL) {
    fprintf(out, "{\"reps\": %d, \"seconds\": %g, \"arms\": [", reps, seconds);
    int first = 1;
    for (int a = 0; a < NARMS; a++) {
      if (!use[a])
        continue;
      fprintf(out, "%s{\"name\": \"%s\", \"threads\": [", first ? "" : ", ", arm_info[a].name);
      first = 0;
      for (int c = 0; c < ncounts; c++) {
        fprintf(out, "%s{\"n\": %d, \"calls_per_sec\": [", c ? ", " : "", counts[c]);
        for (int r = 0; r < reps; r++)
          fprintf(out, "%s%.0f", r ? ", " : "", cps[a][c][r]);
        fprintf(out, "], \"cpu_ns_per_call\": [");
        for (int r = 0; r < reps; r++)
          fprintf(out, "%s%.2f", r ? ", " : "", nspc[a][c][r]);
        fprintf(out, "]}");
      }
      fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
    fclose(out);
  }
  return 0;
}

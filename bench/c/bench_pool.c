/* SPDX-License-Identifier: MIT */
/* bench_pool.c - the work pool against the five benchmarks of the second
 * reference document (Agents.Net's benchmark page, summarised in
 * ../shared/REFERENCE.md), each with its baseline measured in the same run.
 *
 *  minimal     1000 items of a calibrated ~0.8 us spin: SingleThread, a
 *              uv_queue_work chain (each after_work queues the next), an
 *              nres chain (each job submits the next from its worker).
 *  sequential  one handler consumes and produces a counted message 1000
 *              times: SingleThread, nres with a new (pooled) record per hop,
 *              nres reusing one record; Duration -1 = the spin, 1 = 1 ms
 *              sleeps.
 *  logging     the same chain (new record per hop) with the execution log
 *              on ("executing" + "completed" per job); the baseline logs one
 *              line per iteration through the same logger.
 *  parallel    the 2000 workloads (ms of sleep) of parallel-workloads-ms.txt:
 *              SingleThread, a pthread parallel-for with dynamic scheduling
 *              (the gold standard), an nres gate fan-out/join, nres_pool_for;
 *              at T = cores and T = 32, beside the lower bound
 *              max(sum / T, largest item).
 *  files       2000 generated files (1500 .xml, 400 .cs to rewrite, 100 .cs
 *              starting with "// DoNotTouchThis"), a fresh copy per run in
 *              a temporary directory (tmpfs /dev/shm by default: creating
 *              2000 files on this VM's ext4 takes 1.5 s): SingleThread, pthread parallel-for, nres
 *              fine-grained (one job per file, a rewrite stage, a gate join),
 *              nres coarse (one job running nres_pool_for).
 *  saturation  not the reference's: a 2-thread pool of 10 ms jobs offered
 *              80 % and 200 % of its capacity by an open loop, unbounded
 *              and with max_wait 2 ms (admission by expected wait); the p99
 *              sojourn of admitted jobs per run, and the share refused.
 *
 * Variants of one benchmark run interleaved, run by run, after warm-up, so
 * drift lands on all of them. The table is the reference's: Mean, Error
 * (half the 99.9 % confidence interval of the mean, Student's t, as
 * BenchmarkDotNet), StdDev, Median, Ratio (mean / the SingleThread mean of
 * the same run) and RatioSD (propagated from both relative spreads), plus
 * N runs. Reported, never asserted. `--only NAME[,NAME]` and `--json FILE`
 * make it a C entry point for nresrun.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "nres.h"
#include "nres/pool.h"

#ifndef NRES_SOURCE_DIR
# define NRES_SOURCE_DIR "."
#endif

#define ITEMS 1000
#define MAX_ROWS 8
#define MAX_SAMPLES 4096
#define MAX_WORKLOADS 4096
#define FILES 2000
#define MARKER "// DoNotTouchThis"

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench_pool: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

#define CHECK(expr)                                                          \
  do {                                                                       \
    int rc_ = (expr);                                                        \
    if (rc_ != 0)                                                            \
      die("%s failed: %s (%d)", #expr, nres_strerror(rc_), rc_);             \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}

static void sleep_ms(int ms) {
  if (ms <= 0) {
    sched_yield();   /* Thread.Sleep(0) yields */
    return;
  }
  struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------ statistics */

typedef struct {
  char method[48];
  char param[16];
  double samples[MAX_SAMPLES];
  int n;
  double mean, sd, err, median, min, max, ratio, ratio_sd;
} row_t;

typedef struct {
  const char *name;
  const char *title;
  const char *what;
  const char *param_name;     /* "Duration", "T" or NULL */
  row_t rows[MAX_ROWS];
  int nrows;
  char notes[4096];
} bench_t;

/* Two-sided 99.9 % Student t quantiles (t_{0.9995, df}). */
static double t999(int df) {
  static const double t[] = { 0, 636.62, 31.599, 12.924, 8.610, 6.869, 5.959,
                              5.408, 5.041, 4.781, 4.587, 4.437, 4.318, 4.221,
                              4.140, 4.073, 4.015, 3.965, 3.922, 3.883, 3.850 };
  if (df < 1)
    return NAN;
  if (df <= 20)
    return t[df];
  if (df <= 30)
    return 3.646 + (3.850 - 3.646) * (30 - df) / 10.0;
  if (df <= 60)
    return 3.460 + (3.646 - 3.460) * (60 - df) / 30.0;
  if (df <= 120)
    return 3.373 + (3.460 - 3.373) * (120 - df) / 60.0;
  return 3.291;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static void summarise(row_t *r) {
  double sorted[MAX_SAMPLES], sum = 0, sq = 0;
  int i;

  if (r->n == 0)
    return;
  for (i = 0; i < r->n; i++)
    sum += r->samples[i];
  r->mean = sum / r->n;
  for (i = 0; i < r->n; i++)
    sq += (r->samples[i] - r->mean) * (r->samples[i] - r->mean);
  r->sd = r->n > 1 ? sqrt(sq / (r->n - 1)) : 0;
  r->err = r->n > 1 ? t999(r->n - 1) * r->sd / sqrt(r->n) : NAN;
  memcpy(sorted, r->samples, sizeof(double) * (size_t) r->n);
  qsort(sorted, (size_t) r->n, sizeof(double), cmp_double);
  r->median = r->n % 2 ? sorted[r->n / 2]
                       : (sorted[r->n / 2 - 1] + sorted[r->n / 2]) / 2;
  r->min = sorted[0];
  r->max = sorted[r->n - 1];
}

static void ratio_against(row_t *r, const row_t *base) {
  double a = r->mean > 0 ? r->sd / r->mean : 0;
  double b = base->mean > 0 ? base->sd / base->mean : 0;
  r->ratio = r->mean / base->mean;
  r->ratio_sd = r->ratio * sqrt(a * a + b * b);
}

static row_t *add_row(bench_t *b, const char *method, const char *param) {
  row_t *r = &b->rows[b->nrows++];
  memset(r, 0, sizeof(*r));
  snprintf(r->method, sizeof(r->method), "%s", method);
  snprintf(r->param, sizeof(r->param), "%s", param ? param : "");
  return r;
}

static void sample(row_t *r, double ns) {
  if (r->n < MAX_SAMPLES)
    r->samples[r->n++] = ns;
}

static void note(bench_t *b, const char *fmt, ...) {
  size_t len = strlen(b->notes);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->notes + len, sizeof(b->notes) - len, fmt, ap);
  va_end(ap);
}

/* "1,951.7 μs" with the unit chosen by the reference row's magnitude. */
static void fmt_time(char *out, size_t size, double ns, double scale_ns) {
  const char *unit = "ns";
  double div = 1, v;
  char digits[64], grouped[80];
  int len, i, o = 0, intlen;

  if (isnan(ns)) {
    snprintf(out, size, "NA");
    return;
  }
  if (scale_ns >= 1e9) {
    unit = "s";
    div = 1e9;
  } else if (scale_ns >= 1e6) {
    unit = "ms";
    div = 1e6;
  } else if (scale_ns >= 1e3) {
    unit = "μs";
    div = 1e3;
  }
  v = ns / div;
  snprintf(digits, sizeof(digits), "%.*f", v >= 100 ? 1 : v >= 10 ? 2 : 3, v);
  len = (int) strlen(digits);
  intlen = (int) (strchr(digits, '.') ? strchr(digits, '.') - digits : len);
  for (i = 0; i < len; i++) {
    if (i > 0 && i < intlen && (intlen - i) % 3 == 0 && digits[i - 1] != '-')
      grouped[o++] = ',';
    grouped[o++] = digits[i];
  }
  grouped[o] = '\0';
  snprintf(out, size, "%s %s", grouped, unit);
}

/* Ratio of two rows' means with a propagated spread. */
static void ratio_of(const row_t *a, const row_t *b, double *ratio,
                     double *sd) {
  double ra = a->sd / a->mean, rb = b->sd / b->mean;
  *ratio = a->mean / b->mean;
  *sd = *ratio * sqrt(ra * ra + rb * rb);
}

/* ------------------------------------------------------------- the spin */

static volatile uint64_t spin_sink;
static uint64_t spin_iters = 800;

__attribute__((noinline)) static void spin(void) {
  uint64_t x = spin_sink;
  for (uint64_t i = 0; i < spin_iters; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  spin_sink = x;
}

/* Iterations for ~0.8 us, from the fastest of 9 timings of 20,000 spins
 * (the least disturbed by neighbours on a shared machine). */
static void calibrate_spin(void) {
  double per[9];
  spin_iters = 1000;
  for (int k = 0; k < 9; k++) {
    double t0 = now_ns();
    for (int i = 0; i < 20000; i++)
      spin();
    per[k] = (now_ns() - t0) / 20000.0 / 1000.0;   /* ns per iteration */
  }
  qsort(per, 9, sizeof(double), cmp_double);
  spin_iters = (uint64_t) (800.0 / per[0]);
  if (spin_iters < 1)
    spin_iters = 1;
}

/* -------------------------------------------------------------- context */

static struct {
  int quick;
  uint32_t cores;
  const char *workloads_path;
  const char *tmp;
  nres_pool_t pool;            /* T = cores */
  sem_t done;
} g;

static int duration;           /* -1: spin; 1: 1 ms sleep */

static void work(void) {
  if (duration < 0)
    spin();
  else
    sleep_ms(1);
}

/* ------------------------------------------------------ 1. minimal */

static nres_job_t chain_jobs[ITEMS];
static nres_pool_t *chain_pool;

/* Inside rows: the same runs timed from the first job's start to the last
 * job's end, on the worker: the per-hop cost without the two cross-thread
 * wake-ups (submit from outside, completion back), which on a loaded
 * machine can each wait for a scheduler slice. */
static row_t *inside_row;
static double inside_t0, inside_t1;

static int chain_fn(nres_job_t *job) {
  long i = job - chain_jobs;
  if (i == 0)
    inside_t0 = now_ns();
  spin();
  if (i + 1 < ITEMS)
    return nres_pool_submit(chain_pool, &chain_jobs[i + 1]);
  inside_t1 = now_ns();
  sem_post(&g.done);
  return 0;
}

static double run_nres_chain(void) {
  double t0 = now_ns();
  CHECK(nres_pool_submit(chain_pool, &chain_jobs[0]));
  sem_wait(&g.done);
  t0 = now_ns() - t0;
  if (inside_row != NULL)
    sample(inside_row, inside_t1 - inside_t0);
  return t0;
}

static double run_single_spin(void) {
  double t0 = now_ns();
  for (int i = 0; i < ITEMS; i++)
    spin();
  return now_ns() - t0;
}

static uv_loop_t uvloop;
static uv_work_t uvreq;
static int uv_left;

static void uv_work(uv_work_t *req) {
  (void) req;
  spin();
}

static void uv_after(uv_work_t *req, int status) {
  (void) status;
  if (--uv_left > 0)
    uv_queue_work(&uvloop, req, uv_work, uv_after);
}

static double run_uv_chain(void) {
  double t0 = now_ns();
  uv_left = ITEMS;
  uv_queue_work(&uvloop, &uvreq, uv_work, uv_after);
  uv_run(&uvloop, UV_RUN_DEFAULT);
  return now_ns() - t0;
}

typedef double (*run_fn)(void);

/* Interleave variants: warm-up runs, then `runs` runs, or fewer (at least
 * min_runs) once budget_s seconds have passed (0: no budget). */
static void measure(row_t **rows, run_fn *fns, int count, int warmup,
                    int runs, int min_runs, double budget_s) {
  double start;
  int i, k;

  for (k = 0; k < warmup; k++)
    for (i = 0; i < count; i++)
      fns[i]();
  start = now_ns();
  for (k = 0; k < runs; k++) {
    for (i = 0; i < count; i++)
      sample(rows[i], fns[i]());
    if (budget_s > 0 && k + 1 >= min_runs &&
        (now_ns() - start) / 1e9 > budget_s)
      break;
  }
}

static void bench_minimal(bench_t *b) {
  row_t *rows[3];
  run_fn fns[3] = { run_single_spin, run_uv_chain, run_nres_chain };

  b->title = "Minimal overhead";
  b->what = "1000 items of a ~0.8 us spin: on this thread, through a chain of "
            "libuv thread-pool hops (each after_work queues the next, on the "
            "loop thread), and through an nres chain (each job submits the "
            "next from its worker).";
  rows[0] = add_row(b, "SingleThread", NULL);
  rows[1] = add_row(b, "UvQueueWork", NULL);
  rows[2] = add_row(b, "NresChain", NULL);
  chain_pool = &g.pool;
  for (int i = 0; i < ITEMS; i++)
    nres_job_init(&chain_jobs[i], chain_fn, NULL);
  CHECK(uv_loop_init(&uvloop));
  measure(rows, fns, 3, g.quick ? 5 : 50, 0, 0, 0);   /* warm-up only */
  inside_row = add_row(b, "NresChainInside", NULL);
  measure(rows, fns, 3, 0, g.quick ? 40 : 400, 10, g.quick ? 1.0 : 8.0);
  inside_row = NULL;
  uv_loop_close(&uvloop);
  note(b, "NresChainInside: the NresChain runs timed on the worker, from the "
          "first job's start to the last job's end (no cross-thread wake-up "
          "inside).\n");
}

/* ---------------------------------------------------- 2. sequential */

static nres_pool_t *seq_pool;
static nres_job_t seq_reuse;

static int seq_new_fn(nres_job_t *job) {
  uintptr_t count = (uintptr_t) job->data;
  nres_job_t *next;
  if (count == 0)
    inside_t0 = now_ns();
  work();
  if (count + 1 >= ITEMS) {
    inside_t1 = now_ns();
    sem_post(&g.done);
    return 0;
  }
  /* consume the message, produce a new one */
  if ((next = nres_pool_job_get(seq_pool)) == NULL)
    die("out of pooled records");
  next->fn = seq_new_fn;
  next->data = (void *) (count + 1);
  return nres_pool_submit(seq_pool, next);
}

static int seq_reuse_fn(nres_job_t *job) {
  work();
  job->data = (void *) ((uintptr_t) job->data + 1);
  return 0;
}

static void seq_reuse_cb(nres_job_t *job) {
  if ((uintptr_t) job->data >= ITEMS)
    sem_post(&g.done);
  else if (nres_pool_submit(seq_pool, job) != 0)   /* the same record */
    die("resubmit failed");
}

static double run_single_seq(void) {
  struct { uint64_t count; } msg = { 0 };
  double t0 = now_ns();
  while (msg.count < ITEMS) {
    work();
    msg.count++;
  }
  return now_ns() - t0;
}

static double run_seq_new(void) {
  nres_job_t *first = nres_pool_job_get(seq_pool);
  double t0 = now_ns();
  first->fn = seq_new_fn;
  first->data = (void *) 0;
  CHECK(nres_pool_submit(seq_pool, first));
  sem_wait(&g.done);
  t0 = now_ns() - t0;
  if (inside_row != NULL)
    sample(inside_row, inside_t1 - inside_t0);
  return t0;
}

static double run_seq_reuse(void) {
  double t0 = now_ns();
  nres_job_init(&seq_reuse, seq_reuse_fn, NULL);
  seq_reuse.done_cb = seq_reuse_cb;
  CHECK(nres_pool_submit(seq_pool, &seq_reuse));
  sem_wait(&g.done);
  return now_ns() - t0;
}

static void bench_sequential(bench_t *b) {
  run_fn fns[3] = { run_single_seq, run_seq_new, run_seq_reuse };
  row_t *rows[3];

  b->title = "Sequential overhead";
  b->what = "One handler consumes and produces a counted message 1000 times "
            "(the worst case for a pool: nothing runs in parallel). Duration "
            "-1 = the ~0.8 us spin, 1 = a 1 ms sleep per hop. New = a pooled "
            "record per hop (nres_pool_job_get), Reusing = one record "
            "resubmitted from its done_cb.";
  b->param_name = "Duration";
  seq_pool = &g.pool;
  for (duration = -1; duration <= 1; duration += 2) {
    const char *p = duration < 0 ? "-1" : "1";
    rows[0] = add_row(b, "SingleThread", p);
    rows[1] = add_row(b, "NresNewRecord", p);
    rows[2] = add_row(b, "NresReusingRecord", p);
    if (duration < 0) {
      measure(rows, fns, 3, g.quick ? 5 : 50, 0, 0, 0);
      inside_row = add_row(b, "NresNewRecordInside", p);
      measure(rows, fns, 3, 0, g.quick ? 40 : 400, 10, g.quick ? 1.0 : 8.0);
      inside_row = NULL;
    } else {
      measure(rows, fns, 3, 0, g.quick ? 1 : 4, 1, 0);
    }
  }
  note(b, "NresNewRecordInside: the NresNewRecord runs timed on the worker, "
          "from the first job's start to the last job's end.\n");
}

/* ------------------------------------------------------- 3. logging */

static nres_joblog_t logger;
static nres_pool_t log_pool;

static double run_single_logged(void) {
  nres_joblog_event_t ev;
  double t0 = now_ns();
  memset(&ev, 0, sizeof(ev));
  ev.kind = NRES_JOBLOG_NOTE;
  for (uint64_t i = 0; i < ITEMS; i++) {
    work();
    ev.job = i + 1;
    ev.time = nres_clock_now();
    nres_joblog_emit(&logger, &ev);
  }
  return now_ns() - t0;
}

static double run_nres_logged(void) {
  return run_seq_new();
}

static void bench_logging(bench_t *b) {
  run_fn fns[2] = { run_single_logged, run_nres_logged };
  row_t *rows[2];
  char path[512];
  nres_pool_options_t opt;
  uint64_t written, dropped;

  b->title = "Logging overhead";
  b->what = "The sequential chain (new record per hop) with the execution log "
            "on: an \"executing\" and a \"completed\" JSON line per job, "
            "through the lock-free ring and its writer thread to a file. The "
            "baseline logs one line per iteration through the same logger.";
  b->param_name = "Duration";
  snprintf(path, sizeof(path), "%s/joblog.jsonl", g.tmp);
  CHECK(nres_joblog_init(&logger, path, 65536, NRES_JOBLOG_BLOCK));
  nres_pool_options_init(&opt);
  opt.threads = g.cores;
  opt.log = &logger;
  CHECK(nres_pool_init(&log_pool, &opt));
  seq_pool = &log_pool;
  for (duration = -1; duration <= 1; duration += 2) {
    const char *p = duration < 0 ? "-1" : "1";
    rows[0] = add_row(b, "SingleThread", p);
    rows[1] = add_row(b, "NresLogged", p);
    if (duration < 0) {
      measure(rows, fns, 2, g.quick ? 5 : 50, 0, 0, 0);
      inside_row = add_row(b, "NresLoggedInside", p);
      measure(rows, fns, 2, 0, g.quick ? 40 : 400, 10, g.quick ? 1.0 : 8.0);
      inside_row = NULL;
    } else {
      measure(rows, fns, 2, 0, g.quick ? 1 : 4, 1, 0);
    }
  }
  CHECK(nres_pool_close(&log_pool, NRES_POOL_DRAIN));
  CHECK(nres_joblog_close(&logger));
  nres_joblog_counts(&logger, &written, &dropped);
  note(b, "Log: %llu lines written, %llu dropped (mode BLOCK, ring of 65,536 "
          "events); the file is %s.\n",
       (unsigned long long) written, (unsigned long long) dropped, path);
  unlink(path);
  seq_pool = &g.pool;
}

/* ------------------------------------------------------ 4. parallel */

static int workloads[MAX_WORKLOADS];
static int nworkloads;
static nres_job_t par_jobs[MAX_WORKLOADS];

static void load_workloads(void) {
  FILE *f = fopen(g.workloads_path, "r");
  char line[64];
  int line_no = 0;

  if (f == NULL)
    die("cannot open the workload list %s: %s (give it with --workloads)",
        g.workloads_path, strerror(errno));
  while (fgets(line, sizeof(line), f) != NULL) {
    char *end;
    long v;
    line_no++;
    if (line[0] == '\n' || line[0] == '\0')
      continue;
    errno = 0;
    v = strtol(line, &end, 10);
    if (errno != 0 || end == line || (*end != '\n' && *end != '\0') ||
        v < 0 || v > 60000)
      die("%s:%d: expected a number of milliseconds (0..60000), got '%.20s'",
          g.workloads_path, line_no, line);
    if (nworkloads == MAX_WORKLOADS)
      die("%s: more than %d workloads", g.workloads_path, MAX_WORKLOADS);
    workloads[nworkloads++] = (int) v;
  }
  fclose(f);
  if (nworkloads == 0)
    die("%s: no workloads", g.workloads_path);
}

static double run_single_par(void) {
  double t0 = now_ns();
  for (int i = 0; i < nworkloads; i++)
    sleep_ms(workloads[i]);
  return now_ns() - t0;
}

/* The gold standard: T pthreads (the caller one of them) claiming the next
 * index from one atomic counter. */
typedef struct {
  atomic_uint next;
  unsigned n;
  void (*fn)(void *arg, unsigned i);
  void *arg;
} pfor_t;

static void *pfor_thread(void *arg) {
  pfor_t *p = arg;
  unsigned i;
  while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) <
         p->n)
    p->fn(p->arg, i);
  return NULL;
}

static void pthread_for(unsigned threads, unsigned n,
                        void (*fn)(void *, unsigned), void *arg) {
  pthread_t tid[64];
  pfor_t p;
  unsigned i;

  atomic_init(&p.next, 0);
  p.n = n;
  p.fn = fn;
  p.arg = arg;
  if (threads > 64)
    threads = 64;
  for (i = 1; i < threads; i++)
    if (pthread_create(&tid[i], NULL, pfor_thread, &p) != 0)
      die("pthread_create failed");
  pfor_thread(&p);
  for (i = 1; i < threads; i++)
    pthread_join(tid[i], NULL);
}

static void par_item(void *arg, unsigned i) {
  (void) arg;
  sleep_ms(workloads[i]);
}

static void par_item64(void *arg, uint64_t i) {
  (void) arg;
  sleep_ms(workloads[i]);
}

static int par_fn(nres_job_t *job) {
  sleep_ms(*(int *) job->arg);
  return 0;
}

static unsigned par_threads;
static nres_pool_t *par_pool;

static double run_pthread_par(void) {
  double t0 = now_ns();
  pthread_for(par_threads, (unsigned) nworkloads, par_item, NULL);
  return now_ns() - t0;
}

static double run_nres_gate_par(void) {
  nres_gate_t gate;
  double t0 = now_ns();
  CHECK(nres_gate_init(&gate, par_pool));
  for (int i = 0; i < nworkloads; i++)
    CHECK(nres_gate_add(&gate, &par_jobs[i]));
  CHECK(nres_gate_wait(&gate, 0, NRES_TIME_NEVER));
  nres_gate_close(&gate);
  return now_ns() - t0;
}

static double run_nres_for_par(void) {
  double t0 = now_ns();
  CHECK(nres_pool_for(par_pool, (uint64_t) nworkloads, par_item64, NULL));
  return now_ns() - t0;
}

static void bench_parallel(bench_t *b) {
  static nres_pool_t pool32;
  nres_pool_options_t opt;
  row_t *single, *rows[3];
  run_fn fns[3] = { run_pthread_par, run_nres_gate_par, run_nres_for_par };
  run_fn single_fn[1] = { run_single_par };
  long sum = 0;
  int largest = 0;
  unsigned ts[2];
  char param[16];

  load_workloads();
  for (int i = 0; i < nworkloads; i++) {
    sum += workloads[i];
    if (workloads[i] > largest)
      largest = workloads[i];
    nres_job_init(&par_jobs[i], par_fn, &workloads[i]);
  }
  b->title = "Parallel execution";
  b->what = "The 2000 workloads of parallel-workloads-ms.txt (sleeps of 0-9 "
            "ms, sum 9,017 ms): on this thread, a pthread parallel-for with "
            "dynamic scheduling (T threads, the caller one of them, each "
            "taking the next index from an atomic counter: the gold "
            "standard), an nres gate (2000 jobs added, then a join) and "
            "nres_pool_for, on a pool of T workers.";
  b->param_name = "T";
  single = add_row(b, "SingleThread", "1");
  measure(&single, single_fn, 1, 0, g.quick ? 1 : 2, 1, 0);
  ts[0] = g.cores;
  ts[1] = 32;
  for (int k = 0; k < 2; k++) {
    par_threads = ts[k];
    if (ts[k] == g.cores) {
      par_pool = &g.pool;
    } else {
      nres_pool_options_init(&opt);
      opt.threads = ts[k];
      CHECK(nres_pool_init(&pool32, &opt));
      par_pool = &pool32;
    }
    snprintf(param, sizeof(param), "%u", ts[k]);
    rows[0] = add_row(b, "PthreadParallelFor", param);
    rows[1] = add_row(b, "NresGate", param);
    rows[2] = add_row(b, "NresPoolFor", param);
    if (ts[k] <= 4)
      measure(rows, fns, 3, 0, g.quick ? 1 : 3, 1, 0);
    else
      measure(rows, fns, 3, 1, g.quick ? 3 : 9, 3, 0);
    note(b, "T = %u: lower bound max(sum / T, largest item) = max(%.1f, %d) "
            "= %.1f ms.\n",
         ts[k], (double) sum / ts[k], largest,
         fmax((double) sum / ts[k], (double) largest));
    if (par_pool == &pool32)
      CHECK(nres_pool_close(&pool32, NRES_POOL_DRAIN));
  }
  note(b, "%d workloads, sum %ld ms, largest %d ms (read from %s).\n",
       nworkloads, sum, largest, g.workloads_path);
}

/* --------------------------------------------------------- 5. files */

typedef struct {
  char name[24];
} entry_t;

static entry_t entries[FILES + 64];
static int nentries;
static char run_dir[512], master_dir[512];
static atomic_int rewritten;
static nres_job_t file_jobs[FILES + 64], rewrite_jobs[FILES + 64];
static _Thread_local uint64_t guid_rng;

static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    buf += n;
    len -= (size_t) n;
  }
  return 0;
}

static void make_master(void) {
  uint64_t rng = 42;
  char path[640], buf[8192];
  int kinds[FILES], i;

  snprintf(master_dir, sizeof(master_dir), "%s/master", g.tmp);
  if (mkdir(master_dir, 0755) != 0 && errno != EEXIST)
    die("mkdir %s: %s", master_dir, strerror(errno));
  /* 1500 xml, 400 cs to rewrite, 100 cs marked; shuffled. */
  for (i = 0; i < FILES; i++)
    kinds[i] = i < 1500 ? 0 : i < 1900 ? 1 : 2;
  for (i = FILES - 1; i > 0; i--) {
    int j = (int) (next_rand(&rng) % (uint64_t) (i + 1)), t = kinds[i];
    kinds[i] = kinds[j];
    kinds[j] = t;
  }
  for (i = 0; i < FILES; i++) {
    size_t len = 0;
    int lines = 20 + (int) (next_rand(&rng) % 80), fd, l;
    snprintf(path, sizeof(path), "%s/file%04d.%s", master_dir, i,
             kinds[i] == 0 ? "xml" : "cs");
    if (kinds[i] == 0) {
      len += (size_t) snprintf(buf + len, sizeof(buf) - len,
                               "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
                               "<root id=\"%d\">\n", i);
      for (l = 0; l < lines && len < sizeof(buf) - 128; l++)
        len += (size_t) snprintf(buf + len, sizeof(buf) - len,
                                 "  <item key=\"k%d\" value=\"%llx\"/>\n", l,
                                 (unsigned long long) next_rand(&rng));
      len += (size_t) snprintf(buf + len, sizeof(buf) - len, "</root>\n");
    } else {
      len += (size_t) snprintf(buf + len, sizeof(buf) - len, "%s\n",
                               kinds[i] == 2 ? MARKER " - generated"
                                             : "// Copyright (c) nres bench");
      len += (size_t) snprintf(buf + len, sizeof(buf) - len,
                               "using System;\n\nnamespace Bench%d\n{\n", i);
      for (l = 0; l < lines && len < sizeof(buf) - 128; l++)
        len += (size_t) snprintf(buf + len, sizeof(buf) - len,
                                 "    public int Field%d = %llu;\n", l,
                                 (unsigned long long) (next_rand(&rng) % 100000));
      len += (size_t) snprintf(buf + len, sizeof(buf) - len, "}\n");
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write_all(fd, buf, len) != 0)
      die("cannot write %s: %s", path, strerror(errno));
    close(fd);
  }
}

static void copy_file(const char *src, const char *dst, int flags) {
  char buf[16384];
  ssize_t n;
  int in = open(src, O_RDONLY), out = open(dst, flags, 0644);

  if (in < 0 || out < 0)
    die("copy %s to %s: %s", src, dst, strerror(errno));
  while ((n = read(in, buf, sizeof(buf))) > 0)
    if (write_all(out, buf, (size_t) n) != 0)
      die("copy %s: %s", dst, strerror(errno));
  close(in);
  close(out);
}

/* A fresh copy of the master set in `dir`. */
static void copy_tree(const char *dir) {
  DIR *d = opendir(master_dir);
  struct dirent *de;
  char src[640], dst[640];

  if (mkdir(dir, 0755) != 0)
    die("mkdir %s: %s", dir, strerror(errno));
  if (d == NULL)
    die("opendir %s: %s", master_dir, strerror(errno));
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    snprintf(src, sizeof(src), "%s/%s", master_dir, de->d_name);
    snprintf(dst, sizeof(dst), "%s/%s", dir, de->d_name);
    copy_file(src, dst, O_WRONLY | O_CREAT | O_EXCL);
  }
  closedir(d);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char path[640];
  if (d == NULL)
    return;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The directory listing, part of every variant's work. */
static void list_run_dir(void) {
  DIR *d = opendir(run_dir);
  struct dirent *de;
  nentries = 0;
  if (d == NULL)
    die("opendir %s: %s", run_dir, strerror(errno));
  while ((de = readdir(d)) != NULL && nentries < FILES + 64) {
    if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof(entries[0].name))
      continue;
    strcpy(entries[nentries++].name, de->d_name);
  }
  closedir(d);
}

static int is_cs(const char *name) {
  size_t n = strlen(name);
  return n > 3 && strcmp(name + n - 3, ".cs") == 0;
}

/* Stage 1: does this file need its first line rewritten? */
static int needs_rewrite(const char *name) {
  char path[640], head[64];
  ssize_t n;
  int fd;

  if (!is_cs(name))
    return 0;
  snprintf(path, sizeof(path), "%s/%s", run_dir, name);
  if ((fd = open(path, O_RDONLY)) < 0)
    die("open %s: %s", path, strerror(errno));
  n = pread(fd, head, sizeof(head), 0);
  close(fd);
  return !(n >= (ssize_t) strlen(MARKER) &&
           memcmp(head, MARKER, strlen(MARKER)) == 0);
}

/* Stage 2: first line -> "// <new GUID>", truncate, rewrite. */
static void rewrite(const char *name) {
  static _Thread_local char in[16384], out[16500];
  char path[640];
  ssize_t n;
  size_t len, rest;
  char *nl;
  uint64_t a, b;
  int fd;

  if (guid_rng == 0)
    guid_rng = (uint64_t) (uintptr_t) &guid_rng ^ (uint64_t) now_ns();
  snprintf(path, sizeof(path), "%s/%s", run_dir, name);
  if ((fd = open(path, O_RDWR)) < 0)
    die("open %s: %s", path, strerror(errno));
  n = pread(fd, in, sizeof(in), 0);
  if (n < 0)
    die("read %s: %s", path, strerror(errno));
  nl = memchr(in, '\n', (size_t) n);
  rest = nl ? (size_t) (in + n - nl) : 0;
  a = next_rand(&guid_rng);
  b = next_rand(&guid_rng);
  len = (size_t) snprintf(out, sizeof(out),
                          "// %08x-%04x-4%03x-%04x-%012llx",
                          (unsigned) (a >> 32), (unsigned) (a >> 16) & 0xffff,
                          (unsigned) a & 0xfff,
                          (unsigned) ((b >> 48) & 0x3fff) | 0x8000,
                          (unsigned long long) (b & 0xffffffffffffull));
  memcpy(out + len, nl ? nl : "\n", nl ? rest : 1);
  len += nl ? rest : 1;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, out, len, 0) != (ssize_t) len)
    die("rewrite %s: %s", path, strerror(errno));
  close(fd);
  atomic_fetch_add_explicit(&rewritten, 1, memory_order_relaxed);
}

static void process(const char *name) {
  if (needs_rewrite(name))
    rewrite(name);
}

static void file_item(void *arg, unsigned i) {
  (void) arg;
  process(entries[i].name);
}

static void file_item64(void *arg, uint64_t i) {
  (void) arg;
  process(entries[i].name);
}

static double run_single_files(void) {
  double t0 = now_ns();
  list_run_dir();
  for (int i = 0; i < nentries; i++)
    process(entries[i].name);
  return now_ns() - t0;
}

static double run_pthread_files(void) {
  double t0 = now_ns();
  list_run_dir();
  pthread_for(g.cores, (unsigned) nentries, file_item, NULL);
  return now_ns() - t0;
}

static int rewrite_fn(nres_job_t *job) {
  rewrite(entries[(long) (job - rewrite_jobs)].name);
  return 0;
}

static int filter_fn(nres_job_t *job) {
  long i = job - file_jobs;
  if (!needs_rewrite(entries[i].name))
    return 0;
  /* the next stage joins the same gate */
  nres_job_init(&rewrite_jobs[i], rewrite_fn, NULL);
  return nres_gate_add(job->gate, &rewrite_jobs[i]);
}

static double run_nres_fine(void) {
  nres_gate_t gate;
  double t0 = now_ns();
  list_run_dir();
  CHECK(nres_gate_init(&gate, &g.pool));
  for (int i = 0; i < nentries; i++) {
    nres_job_init(&file_jobs[i], filter_fn, NULL);
    CHECK(nres_gate_add(&gate, &file_jobs[i]));
  }
  CHECK(nres_gate_wait(&gate, 0, NRES_TIME_NEVER));
  nres_gate_close(&gate);
  if (nres_gate_count(&gate, NRES_JOB_OK) != (uint32_t) nentries + 400)
    die("fine-grained: %u jobs ok, expected %d",
        nres_gate_count(&gate, NRES_JOB_OK), nentries + 400);
  return now_ns() - t0;
}

static int coarse_fn(nres_job_t *job) {
  (void) job;
  list_run_dir();
  return nres_pool_for(&g.pool, (uint64_t) nentries, file_item64, NULL);
}

static double run_nres_coarse(void) {
  nres_gate_t gate;
  nres_job_t job;
  double t0 = now_ns();
  CHECK(nres_gate_init(&gate, &g.pool));
  nres_job_init(&job, coarse_fn, NULL);
  CHECK(nres_gate_add(&gate, &job));
  CHECK(nres_gate_wait(&gate, 0, NRES_TIME_NEVER));
  nres_gate_close(&gate);
  CHECK(job.result);
  return now_ns() - t0;
}

/* One run on a fresh copy; the copy and the clean-up are not timed. */
static run_fn file_variant;

static double run_file_variant(void) {
  double t;
  snprintf(run_dir, sizeof(run_dir), "%s/run", g.tmp);
  copy_tree(run_dir);
  atomic_store(&rewritten, 0);
  t = file_variant();
  if (atomic_load(&rewritten) != 400)
    die("files: %d files rewritten, expected 400", atomic_load(&rewritten));
  remove_tree(run_dir);
  return t;
}

#define FILE_WRAPPER(name, fn)                                               \
  static double name(void) {                                                 \
    file_variant = fn;                                                       \
    return run_file_variant();                                               \
  }
FILE_WRAPPER(files_single, run_single_files)
FILE_WRAPPER(files_pthread, run_pthread_files)
FILE_WRAPPER(files_fine, run_nres_fine)
FILE_WRAPPER(files_coarse, run_nres_coarse)

static void bench_files(bench_t *b) {
  run_fn fns[4] = { files_single, files_pthread, files_fine, files_coarse };
  row_t *rows[4];

  b->title = "File manipulation";
  b->what = "2000 generated files (1500 .xml, 400 .cs to rewrite, 100 .cs "
            "starting with \"// DoNotTouchThis\"; LF line ends), a fresh copy "
            "per run in a temporary directory on one filesystem (copy not "
            "timed; no fsync). Each variant lists the directory, reads the "
            "first line of every .cs file and replaces it with \"// <new "
            "GUID>\" (truncate, rewrite) where the marker is missing. "
            "PthreadParallelFor and the nres pool use T = cores; "
            "NresFineGrained: one job per file, a rewrite stage added to the "
            "same gate, a join; NresCoarse: one pool job running "
            "nres_pool_for.";
  make_master();
  rows[0] = add_row(b, "SingleThread", NULL);
  rows[1] = add_row(b, "PthreadParallelFor", NULL);
  rows[2] = add_row(b, "NresFineGrained", NULL);
  rows[3] = add_row(b, "NresCoarse", NULL);
  measure(rows, fns, 4, g.quick ? 1 : 3, g.quick ? 5 : 30, 5,
          g.quick ? 3.0 : 20.0);
  remove_tree(master_dir);
}

/* --------------------------------------------------------------- report */

static void print_table(FILE *f, bench_t *b) {
  int i;
  const row_t *base = NULL;
  char mean[48], err[48], sd[48], med[48];

  fprintf(f, "### %s\n\n%s\n\n", b->title, b->what);
  if (b->param_name)
    fprintf(f, "| Method | %s | Mean | Error | StdDev | Median | Ratio | "
               "RatioSD | N |\n|---|---|---|---|---|---|---|---|---|\n",
            b->param_name);
  else
    fprintf(f, "| Method | Mean | Error | StdDev | Median | Ratio | RatioSD "
               "| N |\n|---|---|---|---|---|---|---|---|\n");
  for (i = 0; i < b->nrows; i++) {
    row_t *r = &b->rows[i];
    if (strcmp(r->method, "SingleThread") == 0)
      base = r;
    fmt_time(mean, sizeof(mean), r->mean, base ? base->mean : r->mean);
    fmt_time(err, sizeof(err), r->err, base ? base->mean : r->mean);
    fmt_time(sd, sizeof(sd), r->sd, base ? base->mean : r->mean);
    fmt_time(med, sizeof(med), r->median, base ? base->mean : r->mean);
    if (b->param_name)
      fprintf(f, "| %s | %s | %s | %s | %s | %s | %.2f | %.2f | %d |\n",
              r->method, r->param, mean, err, sd, med, r->ratio, r->ratio_sd,
              r->n);
    else
      fprintf(f, "| %s | %s | %s | %s | %s | %.2f | %.2f | %d |\n", r->method,
              mean, err, sd, med, r->ratio, r->ratio_sd, r->n);
  }
  fprintf(f, "\n");
  if (b->notes[0])
    fprintf(f, "%s\n", b->notes);
}

/* ---------------------------------------------------- 6. saturation */

/* An open loop offers 80 % and 200 % of a 2-thread pool's capacity (each
 * job a 10 ms sleep: 200/s), arrivals evenly spaced for SAT_WINDOW_S; a
 * job's sojourn runs from its scheduled arrival to its end (a late
 * submitter counts against the pool, as in nresrun's open loop). One
 * sample per run: the p99 sojourn of admitted jobs. Unbounded: the plain
 * pool (its queue grows); MaxWait2ms: options.max_wait = 2 ms, the pool
 * refusing (NRES_ELIMITED) what it expects to wait longer. */
#define SAT_THREADS 2
#define SAT_JOB_MS 10
#define SAT_MAX_JOBS 1024

typedef struct {
  nres_job_t job;
  double due, end;
} sat_job_t;

static sat_job_t sat_jobs[SAT_MAX_JOBS];
static atomic_int sat_left;

static int sat_fn(nres_job_t *job) {
  (void) job;
  sleep_ms(SAT_JOB_MS);
  return 0;
}

static void sat_done(nres_job_t *job) {
  ((sat_job_t *) job->arg)->end = now_ns();
  atomic_fetch_sub(&sat_left, 1);
}

/* One run; returns the admitted p99 sojourn (ns), counts refusals. */
static double sat_run(nres_time_t max_wait, double rate, double window_s,
                      int *refused, int *offered) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  double t0, sojourn[SAT_MAX_JOBS];
  int n = (int) (rate * window_s), admitted = 0, i;

  if (n > SAT_MAX_JOBS)
    die("saturation: %d arrivals, room for %d", n, SAT_MAX_JOBS);
  nres_pool_options_init(&opt);
  opt.threads = SAT_THREADS;
  opt.max_wait = max_wait;
  CHECK(nres_pool_init(&pool, &opt));
  atomic_store(&sat_left, 0);
  *refused = 0;
  *offered = n;
  t0 = now_ns() + 1e6;
  for (i = 0; i < n; i++) {
    sat_job_t *s = &sat_jobs[i];
    double due = t0 + i * 1e9 / rate, wait = due - now_ns();
    int rc;
    if (wait > 0) {
      struct timespec ts = { (time_t) (wait / 1e9), (long) fmod(wait, 1e9) };
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    nres_job_init(&s->job, sat_fn, s);
    s->job.done_cb = sat_done;
    s->due = due;
    s->end = 0;
    atomic_fetch_add(&sat_left, 1);
    if ((rc = nres_pool_submit(&pool, &s->job)) == NRES_ELIMITED) {
      atomic_fetch_sub(&sat_left, 1);
      s->due = -1;
      (*refused)++;
    } else if (rc != 0) {
      die("saturation: submit: %s", nres_strerror(rc));
    }
  }
  while (atomic_load(&sat_left) > 0)
    sleep_ms(1);
  CHECK(nres_pool_close(&pool, NRES_POOL_DRAIN));
  for (i = 0; i < n; i++)
    if (sat_jobs[i].due >= 0)
      sojourn[admitted++] = sat_jobs[i].end - sat_jobs[i].due;
  if (admitted == 0)
    return 0;
  qsort(sojourn, (size_t) admitted, sizeof(double), cmp_double);
  return sojourn[(int) ceil(0.99 * admitted) - 1];
}

static void bench_saturation(bench_t *b) {
  static const struct {
    const char *method, *param;
    nres_time_t max_wait;
    double load;
  } v[] = {
    { "Unbounded", "80%", 0, 0.8 },
    { "Unbounded", "200%", 0, 2.0 },
    { "MaxWait2ms", "80%", 2 * NRES_MSEC, 0.8 },
    { "MaxWait2ms", "200%", 2 * NRES_MSEC, 2.0 },
  };
  enum { NV = sizeof(v) / sizeof(v[0]) };
  double capacity = SAT_THREADS * 1000.0 / SAT_JOB_MS;
  double window = g.quick ? 0.5 : 2.0;
  int runs = g.quick ? 1 : 7, refused[NV] = { 0 }, offered[NV] = { 0 };
  row_t *rows[NV];

  b->title = "Saturation: a 2-thread pool offered 80 % and 200 % of its "
             "capacity (10 ms jobs, open loop)";
  b->what = "p99 sojourn of admitted jobs per run (scheduled arrival to "
            "end)";
  b->param_name = "Load";
  for (int j = 0; j < NV; j++)
    rows[j] = add_row(b, v[j].method, v[j].param);
  for (int run = 0; run < runs; run++)
    for (int j = 0; j < NV; j++) {
      /* interleaved, in a rotated order so no variant always runs first */
      int k = (j + run) % NV, r, o;
      sample(rows[k], sat_run(v[k].max_wait, v[k].load * capacity, window,
                              &r, &o));
      refused[k] += r;
      offered[k] += o;
    }
  for (int j = 0; j < NV; j++)
    note(b, "- %s at %s: %d of %d arrivals refused (%.1f %%)\n", v[j].method,
         v[j].param, refused[j], offered[j],
         offered[j] ? 100.0 * refused[j] / offered[j] : 0.0);
}


static row_t *find(bench_t *b, const char *method, const char *param) {
  for (int i = 0; i < b->nrows; i++)
    if (strcmp(b->rows[i].method, method) == 0 &&
        (param == NULL || strcmp(b->rows[i].param, param) == 0))
      return &b->rows[i];
  return NULL;
}

static void target(bench_t *b, const char *what, row_t *x, row_t *base,
                   double limit, const char *reference) {
  double r, sd;
  if (x == NULL || base == NULL || x->n == 0 || base->n == 0)
    return;
  ratio_of(x, base, &r, &sd);
  note(b, "- %s: %.3f ± %.3f, medians %.3f (target ≤ %.2f%s%s) — %s\n",
       what, r, sd, x->median / base->median, limit,
       reference ? "; reference " : "", reference ? reference : "",
       r <= limit ? (x->median / base->median <= limit
                         ? "met"
                         : "met on means, missed on medians")
                  : x->median / base->median <= limit
                        ? "met on medians, missed on means"
                        : "missed");
}

/* Ratios against baselines; the targets of the issue. */
static void finish(bench_t *b) {
  char t[16];

  for (int i = 0; i < b->nrows; i++)
    summarise(&b->rows[i]);
  /* The SingleThread row of the same Duration, else the only one. */
  for (int i = 0; i < b->nrows; i++) {
    row_t *r = &b->rows[i], *base = find(b, "SingleThread", r->param);
    if (base == NULL)
      base = find(b, "SingleThread", NULL);
    if (strcmp(b->name, "saturation") == 0)
      base = find(b, r->method, "80%");   /* the same pool at 80 % load */
    if (base != NULL && base->n > 0)
      ratio_against(r, base);
  }
  note(b, "\nAgainst the targets (ratio of means ± propagated SD):\n");
  if (strcmp(b->name, "saturation") == 0) {
    target(b, "MaxWait2ms p99 at 200 % / at 80 %", find(b, "MaxWait2ms", "200%"),
           find(b, "MaxWait2ms", "80%"), 2.0, NULL);
    target(b, "Unbounded p99 at 200 % / at 80 % (for comparison)",
           find(b, "Unbounded", "200%"), find(b, "Unbounded", "80%"), 2.0,
           NULL);
  } else if (strcmp(b->name, "minimal") == 0) {
    target(b, "NresChain / SingleThread", find(b, "NresChain", NULL),
           find(b, "SingleThread", NULL), 1.5, "2.12");
    target(b, "NresChainInside / SingleThread",
           find(b, "NresChainInside", NULL), find(b, "SingleThread", NULL),
           1.5, NULL);
    target(b, "UvQueueWork / SingleThread (for comparison)",
           find(b, "UvQueueWork", NULL), find(b, "SingleThread", NULL), 1.5,
           NULL);
  } else if (strcmp(b->name, "sequential") == 0) {
    target(b, "NresNewRecord / SingleThread, spin",
           find(b, "NresNewRecord", "-1"), find(b, "SingleThread", "-1"), 2.0,
           "3.59");
    target(b, "NresNewRecordInside / SingleThread, spin",
           find(b, "NresNewRecordInside", "-1"), find(b, "SingleThread", "-1"),
           2.0, NULL);
    target(b, "NresReusingRecord / SingleThread, spin",
           find(b, "NresReusingRecord", "-1"), find(b, "SingleThread", "-1"),
           2.0, "2.52");
    target(b, "NresNewRecord / SingleThread, 1 ms sleeps",
           find(b, "NresNewRecord", "1"), find(b, "SingleThread", "1"), 2.0,
           "1.00");
  } else if (strcmp(b->name, "logging") == 0) {
    target(b, "NresLogged / SingleThread (logged), spin",
           find(b, "NresLogged", "-1"), find(b, "SingleThread", "-1"), 2.0,
           "14.12");
    target(b, "NresLoggedInside / SingleThread (logged), spin",
           find(b, "NresLoggedInside", "-1"), find(b, "SingleThread", "-1"),
           2.0, NULL);
    target(b, "NresLogged / SingleThread (logged), 1 ms sleeps",
           find(b, "NresLogged", "1"), find(b, "SingleThread", "1"), 2.0,
           "1.00");
  } else if (strcmp(b->name, "parallel") == 0) {
    unsigned ts[2] = { g.cores, 32 };
    for (int k = 0; k < 2; k++) {
      char what[96];
      snprintf(t, sizeof(t), "%u", ts[k]);
      snprintf(what, sizeof(what), "NresGate / PthreadParallelFor, T = %s", t);
      target(b, what, find(b, "NresGate", t),
             find(b, "PthreadParallelFor", t), 1.05, NULL);
      snprintf(what, sizeof(what), "NresPoolFor / PthreadParallelFor, T = %s",
               t);
      target(b, what, find(b, "NresPoolFor", t),
             find(b, "PthreadParallelFor", t), 1.05, NULL);
    }
  } else if (strcmp(b->name, "files") == 0) {
    target(b, "NresFineGrained / PthreadParallelFor",
           find(b, "NresFineGrained", NULL),
           find(b, "PthreadParallelFor", NULL), 1.1, "1.32");
    target(b, "NresCoarse / PthreadParallelFor", find(b, "NresCoarse", NULL),
           find(b, "PthreadParallelFor", NULL), 1.1, "1.03");
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else if ((unsigned char) *s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isnan(v) || isinf(v))
    fputs("null", f);
  else
    fprintf(f, "%.6g", v);
}

static void write_json(const char *path, bench_t *bs, int n,
                       const char *when) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    die("cannot write %s: %s", path, strerror(errno));
  fprintf(f, "{\"bench\":\"bench_pool\",\"date\":");
  json_str(f, when);
  fprintf(f, ",\"cores\":%u,\"quick\":%s,\"spin_iterations\":%llu,"
             "\"benchmarks\":[",
          g.cores, g.quick ? "true" : "false",
          (unsigned long long) spin_iters);
  for (int i = 0; i < n; i++) {
    bench_t *b = &bs[i];
    fprintf(f, "%s{\"name\":", i ? "," : "");
    json_str(f, b->name);
    fprintf(f, ",\"title\":");
    json_str(f, b->title);
    fprintf(f, ",\"param\":");
    if (b->param_name)
      json_str(f, b->param_name);
    else
      fputs("null", f);
    fprintf(f, ",\"notes\":");
    json_str(f, b->notes);
    fprintf(f, ",\"rows\":[");
    for (int j = 0; j < b->nrows; j++) {
      row_t *r = &b->rows[j];
      fprintf(f, "%s{\"method\":", j ? "," : "");
      json_str(f, r->method);
      fprintf(f, ",\"param\":");
      json_str(f, r->param);
      fprintf(f, ",\"n\":%d,\"mean_ns\":", r->n);
      json_num(f, r->mean);
      fprintf(f, ",\"error_ns\":");
      json_num(f, r->err);
      fprintf(f, ",\"stddev_ns\":");
      json_num(f, r->sd);
      fprintf(f, ",\"median_ns\":");
      json_num(f, r->median);
      fprintf(f, ",\"min_ns\":");
      json_num(f, r->min);
      fprintf(f, ",\"max_ns\":");
      json_num(f, r->max);
      fprintf(f, ",\"ratio\":");
      json_num(f, r->ratio);
      fprintf(f, ",\"ratio_sd\":");
      json_num(f, r->ratio_sd);
      fprintf(f, ",\"samples_ns\":[");
      for (int k = 0; k < r->n; k++) {
        fprintf(f, "%s", k ? "," : "");
        json_num(f, r->samples[k]);
      }
      fprintf(f, "]}");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "]}\n");
  fclose(f);
}

/* ----------------------------------------------------------------- main */

static const struct {
  const char *name;
  void (*run)(bench_t *b);
} all[] = {
  { "minimal", bench_minimal },
  { "sequential", bench_sequential },
  { "logging", bench_logging },
  { "parallel", bench_parallel },
  { "files", bench_files },
  { "saturation", bench_saturation },
};
#define NBENCH ((int) (sizeof(all) / sizeof(all[0])))

static void loadavg(char *out, size_t size) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a = 0, b = 0, c = 0;
  if (f == NULL || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
    snprintf(out, size, "unknown");
  else
    snprintf(out, size, "%.2f %.2f %.2f", a, b, c);
  if (f != NULL)
    fclose(f);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_pool [--quick] [--only NAME[,NAME...]] [--json FILE] "
          "[--md FILE]\n"
          "                  [--workloads FILE] [--tmp DIR]\n"
          "--tmp: where the files benchmark works (default /dev/shm, else "
          "/tmp)\n"
          "names: minimal sequential logging parallel files saturation\n"
          "default workloads: %s/../shared/reference/parallel-workloads-ms.txt\n",
          NRES_SOURCE_DIR);
}

int main(int argc, char **argv) {
  static bench_t benches[NBENCH];
  static char default_workloads[1024], tmpl[] = "/tmp/nres-bench-pool-XXXXXX";
  const char *only = NULL, *json = NULL, *md = NULL;
  char when[64], tmpdir[600], start_load[64];
  int selected[NBENCH], n = 0, i;
  nres_pool_options_t opt;
  struct utsname un;
  time_t t = time(NULL);
  FILE *mdf = NULL;
  long cores;

  snprintf(default_workloads, sizeof(default_workloads),
           "%s/../shared/reference/parallel-workloads-ms.txt", NRES_SOURCE_DIR);
  g.workloads_path = default_workloads;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--quick") == 0)
      g.quick = 1;
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (i + 1 < argc && strcmp(a, "--only") == 0)
      only = argv[++i];
    else if (i + 1 < argc && strcmp(a, "--json") == 0)
      json = argv[++i];
    else if (i + 1 < argc && strcmp(a, "--md") == 0)
      md = argv[++i];
    else if (i + 1 < argc && strcmp(a, "--workloads") == 0)
      g.workloads_path = argv[++i];
    else if (i + 1 < argc && strcmp(a, "--tmp") == 0)
      g.tmp = argv[++i];
    else {
      fprintf(stderr, "bench_pool: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  for (i = 0; i < NBENCH; i++) {
    selected[i] = only == NULL;
    if (only != NULL) {
      const char *p = only;
      size_t len = strlen(all[i].name);
      while ((p = strstr(p, all[i].name)) != NULL) {
        if ((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
          selected[i] = 1;
        p += len;
      }
    }
  }
  if (only != NULL) {
    /* every name given must be known */
    char copy[256], *tok, *save = NULL;
    snprintf(copy, sizeof(copy), "%s", only);
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      int known = 0;
      for (i = 0; i < NBENCH; i++)
        known |= strcmp(tok, all[i].name) == 0;
      if (!known) {
        fprintf(stderr, "bench_pool: --only: unknown benchmark '%s'\n", tok);
        usage(stderr);
        return 2;
      }
    }
  }
  if (g.tmp == NULL && access("/dev/shm", W_OK) == 0)
    g.tmp = "/dev/shm";
  if (g.tmp == NULL) {
    if (mkdtemp(tmpl) == NULL)
      die("mkdtemp: %s", strerror(errno));
    g.tmp = tmpl;
  } else {
    snprintf(tmpdir, sizeof(tmpdir), "%s/nres-bench-pool-XXXXXX", g.tmp);
    if (mkdtemp(tmpdir) == NULL)
      die("mkdtemp in %s: %s", g.tmp, strerror(errno));
    g.tmp = tmpdir;
  }
  if (md != NULL && (mdf = fopen(md, "w")) == NULL)
    die("cannot write %s: %s", md, strerror(errno));

  loadavg(start_load, sizeof(start_load));
  cores = sysconf(_SC_NPROCESSORS_ONLN);
  g.cores = cores < 1 ? 1 : (uint32_t) cores;
  sem_init(&g.done, 0, 0);
  calibrate_spin();
  nres_pool_options_init(&opt);
  opt.threads = g.cores;
  opt.records = 4096;
  CHECK(nres_pool_init(&g.pool, &opt));

  strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&t));
  uname(&un);
  for (int pass = 0; pass < 2; pass++) {
    FILE *f = pass == 0 ? stdout : mdf;
    if (f == NULL)
      continue;
    fprintf(f, "## Work pool benchmarks (bench_pool%s), %s\n\n",
            g.quick ? " --quick" : "", when);
    fprintf(f, "%s %s %s, %u cores online; nres %s; libuv %s; pool T = %u "
               "(its default: the cores); spin: %llu iterations ≈ 0.8 μs.\n"
               "Error = half the 99.9 %% confidence interval of the mean "
               "(Student's t); Ratio = mean / the SingleThread mean of the "
               "same run (same Duration); RatioSD propagated from both "
               "relative standard deviations; N = measured runs, variants "
               "interleaved run by run after warm-up.\n\n",
            un.sysname, un.release, un.machine, g.cores,
            nres_version_string(), uv_version_string(), g.cores,
            (unsigned long long) spin_iters);
    fflush(f);
  }
  for (i = 0; i < NBENCH; i++) {
    bench_t *b;
    if (!selected[i])
      continue;
    b = &benches[n++];
    b->name = all[i].name;
    fprintf(stderr, "bench_pool: %s ...\n", b->name);
    all[i].run(b);
    finish(b);
    print_table(stdout, b);
    fflush(stdout);
    if (mdf)
      print_table(mdf, b);
  }
  CHECK(nres_pool_close(&g.pool, NRES_POOL_DRAIN));
  sem_destroy(&g.done);
  {
    char end_load[64];
    loadavg(end_load, sizeof(end_load));
    printf("Load average (1, 5, 15 min) at the start: %s; at the end: %s "
           "(on %u cores: above %u, other processes shared the cores).\n",
           start_load, end_load, g.cores, g.cores);
    if (mdf)
      fprintf(mdf, "Load average (1, 5, 15 min) at the start: %s; at the "
                   "end: %s (on %u cores: above %u, other processes shared "
                   "the cores).\n",
              start_load, end_load, g.cores, g.cores);
  }
  if (json != NULL)
    write_json(json, benches, n, when);
  if (mdf)
    fclose(mdf);
  rmdir(g.tmp);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* bench_call.c - per-call cost of the executor against a raw call.
 *
 * Each arm runs the same tiny attempt function through a different path:
 * raw (a direct call through a function pointer, no library), passthrough
 * (NONE preset), trivial (3 attempts, nothing else), default (retry,
 * deadline, attempt timeout, budget, breaker, measured ceiling) and
 * retry-twice (fails twice then succeeds, zero delay; its raw baseline
 * calls the function until it succeeds). Arms run interleaved, repetition
 * by repetition, so drift lands on all of them; the report gives the median
 * ns/call with min and max, the ratio and the overhead against the raw run
 * of the same repetition, and heap bytes per call counted through
 * nres_replace_allocator. Reported, never asserted.
 *
 * For instruction counts under callgrind, `--arm NAME --calls N` runs one
 * arm alone; bench/c/callgrind.sh subtracts two such runs.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres.h"

typedef struct {
  const char *name;
  const char *what;
  int preset;           /* -1: raw */
  int retry_twice;
  nres_policy_t policy;
  double ns[64];        /* per repetition */
  double overhead[64];  /* minus raw of the same repetition */
} arm_t;

static atomic_ulong heap_bytes;
static void *count_malloc(size_t n) { atomic_fetch_add(&heap_bytes, n); return malloc(n); }
static void *count_realloc(void *p, size_t n) { atomic_fetch_add(&heap_bytes, n); return realloc(p, n); }
static void *count_calloc(size_t c, size_t n) { atomic_fetch_add(&heap_bytes, c * n); return calloc(c, n); }

static volatile uint64_t sink;

__attribute__((noinline)) static nres_verdict_t work(void *arg,
                                                     const nres_attempt_t *a) {
  (void) arg;
  sink += a->number;
  return nres_verdict(NRES_OK);
}

__attribute__((noinline)) static nres_verdict_t work_retry_twice(
    void *arg, const nres_attempt_t *a) {
  (void) arg;
  sink += a->number;
  return nres_verdict(a->number <= 2 ? NRES_TRANSIENT : NRES_OK);
}

static nres_attempt_fn volatile fn_ok = work;
static nres_attempt_fn volatile fn_retry = work_retry_twice;

static void run_raw(long n, int retry_twice) {
  nres_attempt_fn fn = retry_twice ? fn_retry : fn_ok;
  nres_attempt_t a = { 1, 0, NRES_TIME_NEVER, NRES_TIME_NEVER };
  for (long i = 0; i < n; i++) {
    a.number = 1;
    while (fn(NULL, &a).kind != NRES_OK)
      a.number++;
  }
}

static void run_arm(arm_t *arm, long n) {
  nres_call_t call;
  nres_attempt_fn fn = arm->retry_twice ? fn_retry : fn_ok;

  if (arm->preset < 0) {
    run_raw(n, arm->retry_twice);
    return;
  }
  for (long i = 0; i < n; i++)
    if (nres_run(&arm->policy, fn, NULL, &call) != 0) {
      fprintf(stderr, "bench: %s: call ended with %s\n", arm->name,
              nres_stop_name(call.stop));
      exit(1);
    }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
  double tmp[64];
  memcpy(tmp, v, sizeof(double) * (size_t) n);
  qsort(tmp, (size_t) n, sizeof(double), cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static double maximum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static arm_t arms[] = {
  { "raw", "direct call, no library", -1, 0, { 0 }, { 0 }, { 0 } },
  { "passthrough", "NONE preset: everything off", NRES_PRESET_NONE, 0, { 0 }, { 0 }, { 0 } },
  { "trivial", "3 attempts, nothing else", NRES_PRESET_TRIVIAL, 0, { 0 }, { 0 }, { 0 } },
  { "default", "retry+deadline+timeout+budget+breaker+ceiling", NRES_PRESET_DEFAULT, 0, { 0 }, { 0 }, { 0 } },
  { "raw-retry-twice", "direct calls until OK (3)", -1, 1, { 0 }, { 0 }, { 0 } },
  { "retry-twice", "trivial, fails twice then OK", NRES_PRESET_TRIVIAL, 1, { 0 }, { 0 }, { 0 } },
};
#define NARMS ((int) (sizeof(arms) / sizeof(arms[0])))

static void usage(void) {
  fprintf(stderr,
          "usage: bench_call [--reps N] [--calls N] [--json FILE]\n"
          "       bench_call --arm NAME --calls N   (one arm, for callgrind)\n");
  exit(2);
}

int main(int argc, char **argv) {
  int reps = 11;
  long calls = 2000000;
  const char *json = NULL, *only = NULL;
  unsigned long bytes[NARMS];
  FILE *out;

  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atol(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--arm") && i + 1 < argc) only = argv[++i];
    else usage();
  }
  if (reps < 1 || reps > 64 || calls < 1)
    usage();
  nres_replace_allocator(count_malloc, count_realloc, count_calloc, free);

  for (int a = 0; a < NARMS; a++) {
    if (arms[a].preset >= 0) {
      nres_policy_init(&arms[a].policy, arms[a].preset);
      if (nres_policy_build(&arms[a].policy) != 0)
        return 1;
    }
  }
  if (only != NULL) {
    for (int a = 0; a < NARMS; a++)
      if (!strcmp(arms[a].name, only)) {
        run_arm(&arms[a], calls);
        return 0;
      }
    fprintf(stderr, "bench_call: no arm named '%s'\n", only);
    return 2;
  }

  for (int a = 0; a < NARMS; a++)
    run_arm(&arms[a], calls / 10);   /* warm-up */
  memset(bytes, 0, sizeof(bytes));
  for (int r = 0; r < reps; r++) {
    for (int a = 0; a < NARMS; a++) {
      unsigned long before = atomic_load(&heap_bytes);
      nres_time_t t0 = nres_clock_now();
      run_arm(&arms[a], calls);
      arms[a].ns[r] = (double) (nres_clock_now() - t0) / (double) calls;
      bytes[a] += atomic_load(&heap_bytes) - before;
    }
    for (int a = 0; a < NARMS; a++) {
      int base = arms[a].retry_twice ? 4 : 0;
      arms[a].overhead[r] = arms[a].ns[r] - arms[base].ns[r];
    }
  }

  printf("| arm | what | ns/call (median) | min-max | ratio to raw | overhead ns (median) | heap B/call |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (int a = 0; a < NARMS; a++) {
    int base = arms[a].retry_twice ? 4 : 0;
    double m = median(arms[a].ns, reps);
    printf("| %s | %s | %.2f | %.2f-%.2f | %.2f | %+.2f | %.0f |\n", arms[a].name,
           arms[a].what, m, minimum(arms[a].ns, reps), maximum(arms[a].ns, reps),
           m / median(arms[base].ns, reps), median(arms[a].overhead, reps),
           (double) bytes[a] / ((double) calls * reps));
  }
  printf("\n%d repetitions x %ld calls per arm, arms interleaved; overhead is "
         "against the raw run of the same repetition.\n", reps, calls);

  if (json != NULL && (out = fopen(json, "w")) != NULL) {
    fprintf(out, "{\"reps\": %d, \"calls\": %ld, \"arms\": [", reps, calls);
    for (int a = 0; a < NARMS; a++) {
      fprintf(out, "%s{\"name\": \"%s\", \"heap_bytes\": %lu, \"ns\": [", a ? ", " : "",
              arms[a].name, bytes[a]);
      for (int r = 0; r < reps; r++)
        fprintf(out, "%s%.3f", r ? ", " : "", arms[a].ns[r]);
      fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
    fclose(out);
  }
  return 0;
}

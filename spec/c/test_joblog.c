/* SPDX-License-Identifier: MIT */
/* test_joblog.c - the execution log: JSON lines that add up.
 *
 * A pool with the log on runs plain jobs, chains (parent ids) and gates
 * (gate ids); the file is then parsed line by line with a strict parser of
 * flat JSON objects: every line must be valid, every job must have exactly
 * one "executing" and one "completed" line, counts must match the
 * submissions and the parent and gate ids must be the right ones. A pipe
 * nobody reads makes the ring fill deterministically, to check both full
 * modes: DROP loses and counts (written + dropped = emitted), BLOCK loses
 * nothing. Misuse, and a pool without a log assigning no ids.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nres_test.h"
#include "nres/pool.h"

/* ----------------------------------------------- a strict line parser */

typedef struct {
  char ev[16], outcome[16];
  int64_t job, parent, gate, worker, t, start, result;
  int has_outcome, has_start, has_result;
} line_t;

/* Parses exactly one {"key":value,...} object; values are strings without
 * escapes or integers. 0 on success. */
static int parse_line(const char *s, line_t *out) {
  memset(out, 0, sizeof(*out));
  out->job = out->parent = out->gate = out->worker = out->t = -1;
  if (*s++ != '{')
    return -1;
  for (;;) {
    char key[32];
    size_t n = 0;
    if (*s++ != '"')
      return -1;
    while (*s != '"' && *s != '\0' && n < sizeof(key) - 1)
      key[n++] = *s++;
    key[n] = '\0';
    if (*s++ != '"' || *s++ != ':')
      return -1;
    if (*s == '"') {
      char val[32];
      n = 0;
      s++;
      while (*s != '"' && *s != '\0' && *s != '\\' && n < sizeof(val) - 1)
        val[n++] = *s++;
      val[n] = '\0';
      if (*s++ != '"')
        return -1;
      if (strcmp(key, "ev") == 0)
        strcpy(out->ev, val);
      else if (strcmp(key, "outcome") == 0) {
        strcpy(out->outcome, val);
        out->has_outcome = 1;
      } else
        return -1;
    } else {
      int neg = 0;
      int64_t v = 0;
      if (*s == '-') {
        neg = 1;
        s++;
      }
      if (!isdigit((unsigned char) *s))
        return -1;
      while (isdigit((unsigned char) *s))
        v = v * 10 + (*s++ - '0');
      if (neg)
        v = -v;
      if (strcmp(key, "job") == 0) out->job = v;
      else if (strcmp(key, "parent") == 0) out->parent = v;
      else if (strcmp(key, "gate") == 0) out->gate = v;
      else if (strcmp(key, "worker") == 0) out->worker = v;
      else if (strcmp(key, "t") == 0) out->t = v;
      else if (strcmp(key, "start") == 0) { out->start = v; out->has_start = 1; }
      else if (strcmp(key, "result") == 0) { out->result = v; out->has_result = 1; }
      else return -1;
    }
    if (*s == ',') {
      s++;
      continue;
    }
    if (*s++ != '}')
      return -1;
    return *s == '\n' && s[1] == '\0' ? 0 : -1;
  }
}

static void parser_rejects_broken_lines(void **state) {
  line_t l;
  (void) state;
  assert_int_equal(parse_line("{\"ev\":\"note\",\"job\":1,\"parent\":0,"
                              "\"gate\":0,\"worker\":0,\"t\":5}\n", &l), 0);
  assert_int_equal(parse_line("{\"ev\":\"note\",\"job\":1\n", &l), -1);
  assert_int_equal(parse_line("{\"ev\":note}\n", &l), -1);
  assert_int_equal(parse_line("{\"ev\":\"note\",}\n", &l), -1);
  assert_int_equal(parse_line("{\"zz\":1}\n", &l), -1);
}

/* ----------------------------------------------------- a logged pool */

typedef struct {
  nres_pool_t *pool;
  nres_job_t head, tail;   /* head submits tail */
} pair_t;

static int leaf_fn(nres_job_t *job) {
  return job->arg != NULL ? -7 : 0;
}

static int head_fn(nres_job_t *job) {
  pair_t *p = job->arg;
  return nres_pool_submit(p->pool, &p->tail);
}

static void the_log_has_one_valid_line_per_event(void **state) {
  enum { PLAIN = 3000, PAIRS = 500, GATED = 500 };
  static nres_job_t plain[PLAIN], gated[GATED];
  static pair_t pairs[PAIRS];
  static char line[512];
  static uint8_t exec_seen[PLAIN + 2 * PAIRS + GATED + 64];
  static uint8_t done_seen[PLAIN + 2 * PAIRS + GATED + 64];
  char path[] = "/tmp/nres_joblog_XXXXXX";
  nres_joblog_t log;
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_gate_t gate;
  uint64_t written, dropped, lines = 0, executing = 0, completed = 0;
  uint64_t errors = 0, max_id;
  FILE *f;
  int fd = mkstemp(path);
  (void) state;

  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(nres_joblog_init(&log, path, 1024, NRES_JOBLOG_BLOCK), 0);
  nres_pool_options_init(&opt);
  opt.threads = 2;
  opt.log = &log;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  for (int i = 0; i < PLAIN; i++) {
    nres_job_init(&plain[i], leaf_fn, i % 100 == 0 ? (void *) 1 : NULL);
    assert_int_equal(nres_pool_submit(&pool, &plain[i]), 0);
  }
  for (int i = 0; i < PAIRS; i++) {
    pairs[i].pool = &pool;
    nres_job_init(&pairs[i].head, head_fn, &pairs[i]);
    nres_job_init(&pairs[i].tail, leaf_fn, NULL);
    assert_int_equal(nres_pool_submit(&pool, &pairs[i].head), 0);
  }
  nres_gate_init(&gate, &pool);
  for (int i = 0; i < GATED; i++) {
    nres_job_init(&gated[i], leaf_fn, NULL);
    assert_int_equal(nres_gate_add(&gate, &gated[i]), 0);
  }
  assert_int_equal(nres_gate_wait(&gate, 0, NRES_TIME_NEVER), 0);
  nres_gate_close(&gate);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(nres_joblog_close(&log), 0);
  nres_joblog_counts(&log, &written, &dropped);
  assert_int_equal(dropped, 0);

  /* Ids: unique and known, parents and gates right. */
  max_id = 0;
  for (int i = 0; i < PLAIN; i++) {
    assert_true(plain[i].id > 0);
    assert_int_equal(plain[i].parent, 0);
  }
  for (int i = 0; i < PAIRS; i++)
    assert_int_equal(pairs[i].tail.parent, pairs[i].head.id);
  max_id = PLAIN + 2 * PAIRS + GATED + 1;   /* + the gate's id */

  f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    line_t l;
    lines++;
    if (parse_line(line, &l) != 0)
      fail_msg("line %lu is not a valid flat JSON object: %s",
               (unsigned long) lines, line);
    assert_true(l.job >= 1 && (uint64_t) l.job <= max_id);
    assert_true(l.worker >= 0 && l.worker < 2);
    assert_true(l.t > 0);
    if (strcmp(l.ev, "executing") == 0) {
      assert_false(l.has_outcome);
      assert_int_equal(exec_seen[l.job]++, 0);
      executing++;
    } else if (strcmp(l.ev, "completed") == 0) {
      assert_true(l.has_outcome && l.has_start && l.has_result);
      assert_true(l.start <= l.t);
      assert_int_equal(done_seen[l.job]++, 0);
      completed++;
      if (strcmp(l.outcome, "error") == 0) {
        assert_int_equal(l.result, -7);
        errors++;
      } else {
        assert_string_equal(l.outcome, "ok");
      }
    } else {
      fail_msg("unexpected event %s", l.ev);
    }
    if (l.gate != 0)
      assert_int_equal(l.gate, (int64_t) gate.id);
  }
  fclose(f);
  unlink(path);
  assert_int_equal(executing, PLAIN + 2 * PAIRS + GATED);
  assert_int_equal(completed, PLAIN + 2 * PAIRS + GATED);
  assert_int_equal(errors, PLAIN / 100);
  assert_int_equal(lines, written);
  for (int i = 0; i < GATED; i++) {
    assert_int_equal(exec_seen[gated[i].id], 1);
    assert_int_equal(done_seen[gated[i].id], 1);
  }
}

/* ----------------------------------------- full rings, through a pipe */

typedef struct {
  int fd;
  uint64_t lines;
} reader_t;

static void *reader(void *arg) {
  reader_t *r = arg;
  char buf[4096];
  ssize_t n;
  while ((n = read(r->fd, buf, sizeof(buf))) > 0)
    for (ssize_t i = 0; i < n; i++)
      r->lines += buf[i] == '\n';
  return NULL;
}

typedef struct {
  nres_joblog_t *log;
  int base;
  int emitted, refused;
} emitter_t;

static void *emitter(void *arg) {
  emitter_t *e = arg;
  nres_joblog_event_t ev;
  memset(&ev, 0, sizeof(ev));
  ev.kind = NRES_JOBLOG_NOTE;
  for (int i = 0; i < 20000; i++) {
    ev.job = (uint64_t) (e->base + i);
    ev.time = nres_clock_now();
    if (nres_joblog_emit(e->log, &ev) == 0)
      e->emitted++;
    else
      e->refused++;
  }
  return NULL;
}

static void run_pipe_case(int mode, uint64_t *written, uint64_t *dropped,
                          uint64_t *read_lines, int *refused) {
  nres_joblog_t log;
  emitter_t em[2];
  reader_t rd;
  pthread_t rt;
  char path[64];
  int fds[2];

  assert_int_equal(pipe(fds), 0);
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[1]);
  assert_int_equal(nres_joblog_init(&log, path, 16, mode), 0);
  close(fds[1]);   /* the log has its own descriptor */
  rd.fd = fds[0];
  rd.lines = 0;
  for (int i = 0; i < 2; i++) {
    em[i].log = &log;
    em[i].base = i * 100000;
    em[i].emitted = em[i].refused = 0;
  }
  if (mode == NRES_JOBLOG_BLOCK) {
    /* Someone must read, or blocked producers wait for ever. */
    assert_int_equal(pthread_create(&rt, NULL, reader, &rd), 0);
    test_run_threads(2, emitter, em, sizeof(em[0]));
  } else {
    /* Nobody reads yet: the pipe fills (64 KiB), the writer blocks in
     * write(2), the 16-event ring fills, events are dropped. */
    test_run_threads(2, emitter, em, sizeof(em[0]));
    assert_int_equal(pthread_create(&rt, NULL, reader, &rd), 0);
  }
  assert_int_equal(nres_joblog_close(&log), 0);
  pthread_join(rt, NULL);
  close(fds[0]);
  nres_joblog_counts(&log, written, dropped);
  *read_lines = rd.lines;
  *refused = em[0].refused + em[1].refused;
}

static void a_full_ring_drops_and_counts(void **state) {
  uint64_t written, dropped, lines;
  int refused;
  (void) state;

  run_pipe_case(NRES_JOBLOG_DROP, &written, &dropped, &lines, &refused);
  assert_true(dropped > 0);
  assert_int_equal(dropped, (uint64_t) refused);
  assert_int_equal(written + dropped, 40000);
  assert_int_equal(lines, written);
}

static void a_full_ring_blocks_and_loses_nothing(void **state) {
  uint64_t written, dropped, lines;
  int refused;
  (void) state;

  run_pipe_case(NRES_JOBLOG_BLOCK, &written, &dropped, &lines, &refused);
  assert_int_equal(dropped, 0);
  assert_int_equal(refused, 0);
  assert_int_equal(written, 40000);
  assert_int_equal(lines, 40000);
}

static int nop_fn(nres_job_t *job) {
  (void) job;
  return 0;
}

static void without_a_log_no_ids_are_assigned(void **state) {
  nres_pool_t pool;
  nres_pool_options_t opt;
  nres_job_t job;
  (void) state;

  nres_pool_options_init(&opt);
  opt.threads = 1;
  assert_int_equal(nres_pool_init(&pool, &opt), 0);
  nres_job_init(&job, nop_fn, NULL);
  assert_int_equal(nres_pool_submit(&pool, &job), 0);
  assert_int_equal(nres_pool_close(&pool, NRES_POOL_DRAIN), 0);
  assert_int_equal(job.id, 0);
  assert_int_equal(nres_job_status(&job), NRES_JOB_OK);
}

static void log_misuse_is_refused(void **state) {
  nres_joblog_t log;
  nres_joblog_event_t ev;
  (void) state;

  memset(&ev, 0, sizeof(ev));
  assert_int_equal(nres_joblog_init(&log, "/tmp/x", 3, NRES_JOBLOG_DROP),
                   NRES_EINVAL);
  assert_int_equal(nres_joblog_init(&log, "/tmp/x", 16, 9), NRES_EINVAL);
  assert_int_equal(nres_joblog_init(&log, NULL, 16, 0), NRES_EINVAL);
  assert_int_equal(nres_joblog_init(&log, "", 16, 0), NRES_EINVAL);
  assert_int_equal(nres_joblog_init(&log, "/nonexistent-dir/x/y", 16, 0),
                   -2 /* -ENOENT */);
  assert_int_equal(nres_joblog_emit(NULL, &ev), NRES_EINVAL);
  assert_int_equal(nres_joblog_close(NULL), NRES_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(parser_rejects_broken_lines),
    cmocka_unit_test(the_log_has_one_valid_line_per_event),
    cmocka_unit_test(a_full_ring_drops_and_counts),
    cmocka_unit_test(a_full_ring_blocks_and_loses_nothing),
    cmocka_unit_test(without_a_log_no_ids_are_assigned),
    cmocka_unit_test(log_misuse_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* test_shm_migrate.c - a reload's new table takes over the old one's state
 * (core/shm_migrate.c, nres/shm.h "migration").
 *
 * On a virtual clock, two tables in ordinary memory: the old one given
 * state of every kind (an open breaker, a half-open one with its probe
 * out, a spent budget, a limiter ahead of time, a throttle's counts,
 * counters, leases), then moved into a new one of more slots. Each kind
 * must arrive as it was; a part whose meaning the new configuration
 * changed (a breaker's or a throttle's window) must start fresh, and only
 * that part; a smaller capacity cuts a budget, a new rate rescales a
 * limiter; the log line must name the setting and what was reset. A new
 * table too small for the old keys keeps the ones with the latest leases
 * and says how many were left out; with NRES_SHM_MIGRATE_PRESENT only the
 * keys already there get state. Bad tables are refused; a failed
 * allocation leaves nothing behind (ASan's leak check runs the rest).
 */
#include <stdio.h>
#include <string.h>

#include "nres_test.h"
#include "nres/shm.h"
#include "shm_table.h"

#define T0 (1000 * NRES_SEC)
#define HOLD (60 * NRES_SEC)

static nres_shm_config_t config(uint32_t slots, uint32_t flags) {
  nres_shm_config_t c;

  nres_shm_config_init(&c);
  c.slots = slots;
  c.flags = flags;
  c.budget_capacity = 10;
  c.breaker.consecutive = 3;
  c.breaker.break_for = 30 * NRES_SEC;
  c.breaker.break_max = 30 * NRES_SEC;
  c.breaker.break_jitter = 0;
  c.breaker.window = 10 * NRES_SEC;
  c.breaker.buckets = 10;
  c.rate = 10;
  c.burst = 5;
  return c;
}

#define ALL (NRES_SHM_BUDGET | NRES_SHM_BREAKER | NRES_SHM_RATELIMIT | \
             NRES_SHM_THROTTLE)

static int slot_of(nres_shm_t *shm, const char *key, nres_time_t now,
                   nres_time_t hold) {
  int i = nres_shm_acquire(shm, key, strlen(key), now, hold, NULL);
  assert_true(i >= 0);
  return i;
}

static int find(nres_shm_t *shm, const char *key) {
  return nres_shm_find(shm, key, strlen(key), NULL);
}

static double lease_of(nres_shm_t *shm, int i) {
  double lease = 0;
  assert_true(nres_shm_key(shm, (uint32_t) i, NULL, 0, NULL, &lease) >= 0);
  return lease;
}

/* Three failures open key k's breaker at now (consecutive = 3). */
static void trip(nres_shm_slot_t *s, nres_time_t now) {
  nres_rng_t rng;
  uint32_t permit;

  nres_rng_seed(&rng, 1);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(nres_breaker_acquire(&s->breaker, now, &permit), 0);
    nres_breaker_record(&s->breaker, now, permit, NRES_BREAKER_FAILURE, 0,
                        &rng);
  }
  assert_int_equal(nres_breaker_state(&s->breaker, now), NRES_BREAKER_OPEN);
}

static void every_kind_of_state_moves_as_it_was(void **state) {
  nres_shm_config_t oc = config(16, ALL), nc = config(64, ALL);
  nres_shm_t *from = test_shm_table(&oc), *to = test_shm_table(&nc);
  nres_shm_migration_t m;
  nres_breaker_stats_t bs;
  nres_throttle_stats_t ts;
  nres_shm_counts_t ca, cb;
  nres_time_t until_a, until_b, wait;
  uint32_t map[16], permit;
  int a, b, c, i;
  (void) state;

  a = slot_of(from, "api.example", T0, HOLD);
  b = slot_of(from, "b", T0 + NRES_SEC, 2 * HOLD);
  c = slot_of(from, "never", T0, NRES_TIME_NEVER);
  nres_shm_slot_t *sa = nres_shm_slot(from, (uint32_t) a);
  trip(sa, T0);
  for (i = 0; i < 4; i++)
    assert_int_equal(nres_budget_spend(&sa->budget, T0), 0);
  for (i = 0; i < 3; i++)
    assert_int_equal(nres_ratelimit_acquire(&sa->ratelimit, T0, &wait), 0);
  for (i = 0; i < 6; i++)
    nres_throttle_record(&sa->throttle, T0, i % 3 != 0);
  nres_shm_record(from, (uint32_t) a, NRES_STOP_CIRCUIT, 2, 1);
  nres_shm_record(from, (uint32_t) a, NRES_STOP_OK, 1, 0);

  assert_int_equal(nres_shm_migrate(from, to, T0 + NRES_SEC, 0, map, &m), 0);
  assert_int_equal(m.keys, 3);
  assert_int_equal(m.moved, 3);
  assert_int_equal(m.full + m.gone + m.changed, 0);
  assert_int_equal(m.reset, 0);
  assert_int_equal(m.adjusted, 0);

  i = find(to, "api.example");
  assert_true(i >= 0);
  assert_int_equal(map[a], (uint32_t) i);
  assert_int_equal(map[b], (uint32_t) find(to, "b"));
  assert_int_equal(map[c], (uint32_t) find(to, "never"));
  for (uint32_t k = 0; k < 16; k++)
    if ((int) k != a && (int) k != b && (int) k != c)
      assert_int_equal(map[k], UINT32_MAX);
  nres_shm_slot_t *ta = nres_shm_slot(to, (uint32_t) i);

  /* Open until the same ms; one trip; refusing in the new table too. */
  assert_int_equal(nres_breaker_peek(&sa->breaker, T0, &until_a), NRES_BREAKER_OPEN);
  assert_int_equal(nres_breaker_peek(&ta->breaker, T0, &until_b), NRES_BREAKER_OPEN);
  assert_true(until_a == until_b);
  assert_true(until_b == T0 + 30 * NRES_SEC);
  nres_breaker_stats(&ta->breaker, &bs);
  assert_int_equal(bs.trips, 1);
  assert_int_equal(nres_breaker_acquire(&ta->breaker, T0 + 29 * NRES_SEC, &permit),
                   NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_acquire(&ta->breaker, T0 + 30 * NRES_SEC, &permit), 0);

  /* The budget's level, the limiter's admissions ahead, the throttle's
   * window, the counters. */
  assert_true(nres_budget_level(&ta->budget, T0) ==
              nres_budget_level(&sa->budget, T0));
  assert_true(nres_budget_level(&ta->budget, T0) < 10);
  nres_ratelimit_stats_t ra, rb;
  nres_ratelimit_stats(&sa->ratelimit, &ra);
  nres_ratelimit_stats(&ta->ratelimit, &rb);
  assert_true(ra.tat == rb.tat && rb.tat > T0);
  nres_throttle_stats(&ta->throttle, T0, &ts);
  assert_int_equal(ts.requests, 6);
  assert_int_equal(ts.accepts, 4);
  nres_shm_slot_counts(sa, &ca);
  nres_shm_slot_counts(ta, &cb);
  assert_memory_equal(&ca, &cb, sizeof(ca));
  assert_int_equal(cb.calls, 2);

  /* Leases: each key's as it was (to the ms), never-ending stays so. */
  assert_true(lease_of(to, i) == lease_of(from, a));
  assert_true(lease_of(to, find(to, "b")) == lease_of(from, b));
  assert_true(lease_of(to, find(to, "never")) >= (double) NRES_TIME_NEVER);
  free(from);
  free(to);
}

static void a_half_open_breaker_keeps_its_probe_and_its_lease(void **state) {
  nres_shm_config_t oc = config(8, NRES_SHM_BREAKER), nc = config(16, NRES_SHM_BREAKER);
  nres_shm_t *from, *to;
  nres_shm_migration_t m;
  uint32_t permit, other;
  nres_time_t later = T0 + 30 * NRES_SEC;
  (void) state;

  oc.breaker.lease = 5 * NRES_SEC;
  nc.breaker.lease = 5 * NRES_SEC;
  from = test_shm_table(&oc);
  to = test_shm_table(&nc);
  nres_shm_slot_t *s = nres_shm_slot(from, (uint32_t) slot_of(from, "k", T0, HOLD));
  trip(s, T0);
  assert_int_equal(nres_breaker_acquire(&s->breaker, later, &permit), 0);
  assert_true(permit != 0);   /* the probe, out */
  assert_int_equal(nres_shm_migrate(from, to, later, 0, NULL, &m), 0);
  nres_shm_slot_t *t = nres_shm_slot(to, (uint32_t) find(to, "k"));
  assert_int_equal(nres_breaker_state(&t->breaker, later), NRES_BREAKER_HALF_OPEN);
  /* One probe at a time: no second one until the first's lease lapses. */
  assert_int_equal(nres_breaker_acquire(&t->breaker, later + NRES_SEC, &other),
                   NRES_ECIRCUIT);
  assert_int_equal(nres_breaker_acquire(&t->breaker, later + 5 * NRES_SEC, &other), 0);
  free(from);
  free(to);
}

static void a_changed_meaning_resets_that_part_only(void **state) {
  nres_shm_config_t oc = config(16, ALL), nc = config(32, ALL);
  nres_shm_t *from, *to;
  nres_shm_migration_t m;
  nres_throttle_stats_t ts;
  nres_time_t until;
  uint32_t calls, failures, slow, permit;
  char line[1024];
  int n;
  (void) state;

  nc.breaker.window = 20 * NRES_SEC;   /* window counts mean another span */
  nc.throttle_window = 600 * NRES_MSEC;
  nc.budget_capacity = 2;              /* a level above it is cut */
  nc.rate = 1;                         /* admissions ahead, at the new rate */
  from = test_shm_table(&oc);
  to = test_shm_table(&nc);
  nres_shm_slot_t *s = nres_shm_slot(from, (uint32_t) slot_of(from, "k", T0, HOLD));
  nres_shm_slot_t *w = nres_shm_slot(from, (uint32_t) slot_of(from, "w", T0, HOLD));
  trip(s, T0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(nres_breaker_acquire(&w->breaker, T0, &permit), 0);
    nres_breaker_record(&w->breaker, T0, permit, NRES_BREAKER_SUCCESS, 0, NULL);
    nres_throttle_record(&w->throttle, T0, 1);
  }
  nres_ratelimit_t *rl = &s->ratelimit;
  for (int i = 0; i < 3; i++)
    assert_int_equal(nres_ratelimit_acquire(rl, T0, &until), 0);

  assert_int_equal(nres_shm_migrate(from, to, T0, 0, NULL, &m), 0);
  assert_int_equal(m.moved, 2);
  assert_int_equal(m.reset, NRES_SHM_RESET_BREAKER_WINDOW | NRES_SHM_RESET_THROTTLE_WINDOW);
  assert_int_equal(m.adjusted, NRES_SHM_ADJUST_BUDGET | NRES_SHM_ADJUST_RATE);
  nres_shm_slot_t *t = nres_shm_slot(to, (uint32_t) find(to, "k"));
  nres_shm_slot_t *tw = nres_shm_slot(to, (uint32_t) find(to, "w"));
  /* Reset: the window counts. Kept: the open state, until the same ms. */
  nres_window_sum(&tw->breaker.window, T0, &calls, &failures, &slow);
  assert_int_equal(calls, 0);
  nres_window_sum(&w->breaker.window, T0, &calls, &failures, &slow);
  assert_int_equal(calls, 4);
  assert_int_equal(nres_breaker_peek(&t->breaker, T0, &until), NRES_BREAKER_OPEN);
  assert_true(until == T0 + 30 * NRES_SEC);
  assert_true(t->breaker.config.window == 20 * NRES_SEC);
  nres_throttle_stats(&tw->throttle, T0, &ts);
  assert_int_equal(ts.requests, 0);
  /* Cut to the new capacity; 3 admissions ahead at 10/s (0.3 s) are 3 at
   * 1/s: 3 s ahead, within the burst. */
  assert_true(nres_budget_level(&t->budget, T0) == 2);
  nres_ratelimit_stats_t rs;
  nres_ratelimit_stats(&t->ratelimit, &rs);
  assert_true(rs.tat == T0 + 3 * NRES_SEC);

  n = nres_shm_migration_text(&m, &oc, &nc, line, sizeof(line));
  assert_true(n > 0 && (size_t) n < sizeof(line));
  assert_non_null(strstr(line, "slots 16 -> 32"));
  assert_non_null(strstr(line, "breaker (window)"));
  assert_non_null(strstr(line, "limiter (rate 10/s burst 5 -> 1/s burst 5)"));
  assert_non_null(strstr(line, "moved the state of 2 of 2 keys"));
  assert_non_null(strstr(line, "reset: breaker window counts (the window changed from 10 s"
                               " in 10 buckets to 20 s in 10)"));
  assert_non_null(strstr(line, "reset: throttle window counts"));
  assert_non_null(strstr(line, "budget levels above the new capacity cut to it"));
  assert_null(strstr(line, "nothing reset"));
  /* A short buffer: cut, terminated, the length it needed. */
  assert_int_equal(nres_shm_migration_text(&m, &oc, &nc, line, 10), n);
  assert_int_equal(strlen(line), 9);
  free(from);
  free(to);
}

static void other_thresholds_keep_the_window(void **state) {
  nres_shm_config_t oc = config(8, NRES_SHM_BREAKER), nc = config(8, NRES_SHM_BREAKER);
  nres_shm_t *from, *to;
  nres_shm_migration_t m;
  uint32_t calls, failures, slow, permit;
  char line[512];
  (void) state;

  nc.breaker.consecutive = 7;
  nc.breaker.break_for = 5 * NRES_SEC;
  nc.breaker.break_max = 5 * NRES_SEC;
  from = test_shm_table(&oc);
  to = test_shm_table(&nc);
  nres_shm_slot_t *s = nres_shm_slot(from, (uint32_t) slot_of(from, "k", T0, HOLD));
  for (int i = 0; i < 5; i++) {
    assert_int_equal(nres_breaker_acquire(&s->breaker, T0, &permit), 0);
    nres_breaker_record(&s->breaker, T0, permit, NRES_BREAKER_SUCCESS, 0, NULL);
  }
  assert_int_equal(nres_shm_migrate(from, to, T0, 0, NULL, &m), 0);
  assert_int_equal(m.reset, 0);
  nres_shm_slot_t *t = nres_shm_slot(to, (uint32_t) find(to, "k"));
  nres_window_sum(&t->breaker.window, T0, &calls, &failures, &slow);
  assert_int_equal(calls, 5);
  assert_int_equal(t->breaker.config.consecutive, 7);
  nres_shm_migration_text(&m, &oc, &nc, line, sizeof(line));
  assert_non_null(strstr(line, "changed: breaker (consecutive, break_for, break_max)"));
  assert_non_null(strstr(line, "nothing reset"));
  free(from);
  free(to);
}

/* 40 keys into one set of 8: the 8 with the latest leases stay. */
static void a_full_new_table_keeps_the_keys_used_last(void **state) {
  nres_shm_config_t oc = config(256, NRES_SHM_BUDGET), nc = config(8, NRES_SHM_BUDGET);
  nres_shm_t *from = test_shm_table(&oc), *to = test_shm_table(&nc);
  nres_shm_migration_t m;
  uint32_t map[256];
  char key[16], line[512];
  int idx[40], i, kept = 0;
  (void) state;

  for (i = 0; i < 40; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    idx[i] = slot_of(from, key, T0, (nres_time_t) (i + 1) * NRES_SEC);
  }
  assert_int_equal(nres_shm_migrate(from, to, T0, 0, map, &m), 0);
  assert_int_equal(m.keys, 40);
  assert_int_equal(m.moved, 8);
  assert_int_equal(m.full, 32);
  for (i = 0; i < 40; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    if (i >= 32) {
      assert_true(find(to, key) >= 0);
      assert_int_equal(map[idx[i]], (uint32_t) find(to, key));
      kept++;
    } else {
      assert_int_equal(find(to, key), NRES_EAGAIN);
      assert_int_equal(map[idx[i]], UINT32_MAX);
    }
  }
  assert_int_equal(kept, 8);
  nres_shm_migration_text(&m, &oc, &nc, line, sizeof(line));
  assert_non_null(strstr(line, "moved the state of 8 of 40 keys; left out 32: their set in"
                               " the new table was full (the keys used most recently"
                               " were kept)"));
  free(from);
  free(to);
}

static void present_moves_only_keys_already_there(void **state) {
  nres_shm_config_t oc = config(8, NRES_SHM_BREAKER), nc = config(16, NRES_SHM_BREAKER);
  nres_shm_t *from = test_shm_table(&oc), *to = test_shm_table(&nc);
  nres_shm_migration_t m;
  char line[512];
  (void) state;

  trip(nres_shm_slot(from, (uint32_t) slot_of(from, "10.0.0.1:80", T0, NRES_TIME_NEVER)), T0);
  trip(nres_shm_slot(from, (uint32_t) slot_of(from, "10.0.0.2:80", T0, NRES_TIME_NEVER)), T0);
  slot_of(to, "10.0.0.2:80", T0, NRES_TIME_NEVER);   /* declared again */
  slot_of(to, "10.0.0.3:80", T0, NRES_TIME_NEVER);   /* added */
  assert_int_equal(nres_shm_migrate(from, to, T0, NRES_SHM_MIGRATE_PRESENT, NULL, &m), 0);
  assert_int_equal(m.moved, 1);
  assert_int_equal(m.gone, 1);
  assert_int_equal(find(to, "10.0.0.1:80"), NRES_EAGAIN);
  assert_int_equal(nres_breaker_state(&nres_shm_slot(to, (uint32_t) find(to, "10.0.0.2:80"))->breaker, T0),
                   NRES_BREAKER_OPEN);
  assert_int_equal(nres_breaker_state(&nres_shm_slot(to, (uint32_t) find(to, "10.0.0.3:80"))->breaker, T0),
                   NRES_BREAKER_CLOSED);
  nres_shm_migration_text(&m, &oc, &nc, line, sizeof(line));
  assert_non_null(strstr(line, "left out 1 no longer declared"));
  free(from);
  free(to);
}

static void a_kind_added_starts_fresh_one_removed_is_dropped(void **state) {
  nres_shm_config_t oc = config(8, NRES_SHM_BUDGET | NRES_SHM_BREAKER);
  nres_shm_config_t nc = config(8, NRES_SHM_BREAKER | NRES_SHM_RATELIMIT);
  nres_shm_t *from = test_shm_table(&oc), *to = test_shm_table(&nc);
  nres_shm_migration_t m;
  nres_time_t wait;
  char line[512];
  (void) state;

  nres_shm_slot_t *s = nres_shm_slot(from, (uint32_t) slot_of(from, "k", T0, HOLD));
  trip(s, T0);
  assert_int_equal(nres_shm_migrate(from, to, T0, 0, NULL, &m), 0);
  nres_shm_slot_t *t = nres_shm_slot(to, (uint32_t) find(to, "k"));
  assert_int_equal(nres_breaker_state(&t->breaker, T0), NRES_BREAKER_OPEN);
  for (int i = 0; i < 5; i++)   /* a fresh limiter: its whole burst */
    assert_int_equal(nres_ratelimit_acquire(&t->ratelimit, T0, &wait), 0);
  nres_shm_migration_text(&m, &oc, &nc, line, sizeof(line));
  assert_non_null(strstr(line, "budget removed, limiter added (starts fresh)"));
  free(from);
  free(to);
}

static void bad_tables_are_refused(void **state) {
  nres_shm_config_t c = config(8, NRES_SHM_BUDGET);
  nres_shm_t *a = test_shm_table(&c), *b = test_shm_table(&c);
  nres_shm_migration_t m;
  char line[64];
  (void) state;

  assert_int_equal(nres_shm_migrate(a, a, T0, 0, NULL, &m), NRES_EINVAL);
  assert_int_equal(nres_shm_migrate(a, b, T0, 0, NULL, NULL), NRES_EINVAL);
  assert_int_equal(nres_shm_migrate(a, b, T0, 4, NULL, &m), NRES_EINVAL);
  assert_int_equal(nres_shm_migrate(NULL, b, T0, 0, NULL, &m), NRES_EINVAL);
  memset(a, 0xa5, 64);   /* a damaged header */
  assert_int_equal(nres_shm_migrate(a, b, T0, 0, NULL, &m), NRES_EINVAL);
  assert_int_equal(nres_shm_migration_text(NULL, &c, &c, line, sizeof(line)), NRES_EINVAL);
  assert_int_equal(nres_shm_slots(a), 0);
  assert_int_equal(nres_shm_slots(b), 8);
  assert_int_equal(nres_shm_find(b, "", 0, NULL), NRES_EINVAL);
  free(a);
  free(b);
}

/* An allocator that fails: the migration says so and leaves nothing. */
static void *fail_malloc(size_t n) { (void) n; return NULL; }
static void *fail_realloc(void *p, size_t n) { (void) p; (void) n; return NULL; }
static void *fail_calloc(size_t c, size_t n) { (void) c; (void) n; return NULL; }

static void no_memory_moves_nothing(void **state) {
  nres_shm_config_t c = config(8, NRES_SHM_BUDGET);
  nres_shm_t *a = test_shm_table(&c), *b = test_shm_table(&c);
  nres_shm_migration_t m;
  (void) state;

  slot_of(a, "k", T0, HOLD);
  nres_replace_allocator(fail_malloc, fail_realloc, fail_calloc, free);
  assert_int_equal(nres_shm_migrate(a, b, T0, 0, NULL, &m), NRES_ENOMEM);
  nres_replace_allocator(malloc, realloc, calloc, free);
  assert_int_equal(find(b, "k"), NRES_EAGAIN);
  test_count_allocations();
  assert_int_equal(nres_shm_migrate(a, b, T0, 0, NULL, &m), 0);
  assert_int_equal(atomic_load(&test_alloc_calls), 2);   /* the work list, a snapshot */
  nres_replace_allocator(malloc, realloc, calloc, free);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_kind_of_state_moves_as_it_was),
    cmocka_unit_test(a_half_open_breaker_keeps_its_probe_and_its_lease),
    cmocka_unit_test(a_changed_meaning_resets_that_part_only),
    cmocka_unit_test(other_thresholds_keep_the_window),
    cmocka_unit_test(a_full_new_table_keeps_the_keys_used_last),
    cmocka_unit_test(present_moves_only_keys_already_there),
    cmocka_unit_test(a_kind_added_starts_fresh_one_removed_is_dropped),
    cmocka_unit_test(bad_tables_are_refused),
    cmocka_unit_test(no_memory_moves_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

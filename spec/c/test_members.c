/* SPDX-License-Identifier: MIT */
/* test_members.c - peers added and removed at run time
 * (runtime/src/gateway/members.c): addresses parsed, the membership kept
 * or made anew by a declaration, add and remove seen by every view at its
 * next pick, a removed peer's tries in flight finishing and its slot freed
 * only after them, surviving peers keeping their state, bad input
 * changing nothing, two threads racing, a removal during a half-open
 * probe, no allocation on the request path. */
#include "nres_test.h"
#include "nres/gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#define MS 1000000ull
#define SEC 1000000000ull
#define SLOTS 8

typedef struct {
  nres_shm_t *scope, *peers;
  nres_estimator_t est[SLOTS];
  nres_gw_control_t controls[SLOTS];
  nres_gw_members_t *m;
  size_t msize;
  nres_gw_upstream_t *u;
} fixture_t;

static const char *declared[] = { "10.0.0.1:80", "10.0.0.2:80" };

/* The declaration of f's upstream (round robin, its membership). */
static nres_gw_config_t config(fixture_t *f) {
  nres_gw_config_t cfg = {
    .name = "backend", .key = "backend", .scope = f->scope, .peers = f->peers,
    .estimators = f->est, .peer_names = declared, .npeers = 2, .attempts = 2,
    .deadline = 10 * SEC, .attempt_timeout = 2 * SEC, .hold = 60 * SEC,
    .choice = NRES_GW_ROUND_ROBIN, .panic = 0.5, .budget = 1, .breaker = 1,
    .peer_controls = f->controls, .members = f->m };
  return cfg;
}

/* Two declared peers (2 failures in a row eject one for 1 s), capacity
 * `cap`, round robin. */
static nres_gw_upstream_t *make(fixture_t *f, uint32_t cap, nres_time_t slow_start) {
  memset(f, 0, sizeof *f);
  nres_shm_config_t sc;
  nres_shm_config_init(&sc);
  sc.slots = 8;
  assert_int_equal(nres_shm_new(&sc, &f->scope), 0);
  nres_shm_config_t pc;
  nres_shm_config_init(&pc);
  pc.slots = SLOTS;
  pc.flags = NRES_SHM_BREAKER;
  pc.breaker.consecutive = 2;
  pc.breaker.break_for = SEC;
  pc.breaker.break_jitter = 0;
  assert_int_equal(nres_shm_new(&pc, &f->peers), 0);
  for (int i = 0; i < SLOTS; i++)
    nres_estimator_init(&f->est[i], SEC);
  f->msize = nres_gw_members_size(SLOTS);
  f->m = calloc(1, f->msize);
  assert_non_null(f->m);
  assert_int_equal(nres_gw_members_declare(f->m, f->msize, f->peers, cap, declared, NULL, NULL,
                                           2, 60 * SEC, SEC),
                   0);
  nres_gw_config_t cfg = config(f);
  cfg.slow_start = slow_start;
  f->u = nres_gw_upstream_new(&cfg);
  assert_non_null(f->u);
  return f->u;
}

static void unmake(fixture_t *f) {
  nres_gw_upstream_free(f->u);
  nres_shm_free(f->scope);
  nres_shm_free(f->peers);
  free(f->m);
}

/* The view's entry of peer `name`, or -1. */
static int entry(const nres_gw_upstream_t *u, const char *name) {
  for (uint32_t i = 0; i < u->n; i++)
    if (strcmp(u->peer[i].name, name) == 0 && !u->peer[i].removed)
      return (int)i;
  return -1;
}

/* n picks at now, each a whole try that succeeds; counts per entry. */
static void run(nres_gw_upstream_t *u, nres_time_t now, int n, int *counts) {
  for (int k = 0; k < n; k++) {
    nres_gw_request_t r;
    uint32_t permit;
    int has;
    assert_int_equal(nres_gw_admit(u, &r, now, -1), NRES_GW_ADMITTED);
    int i = nres_gw_pick(u, now, -1, &permit, &has);
    nres_gw_try_begin(u, &r, now, i, permit, has);
    counts[i]++;
    nres_gw_request_end(u, &r, now + MS, 200);
  }
}

static void test_parse_addr(void **state) {
  (void)state;
  union { uint8_t b[NRES_GW_SOCKADDR_MAX]; struct sockaddr_in a4; struct sockaddr_in6 a6; } sa;
  assert_int_equal(nres_gw_parse_addr("127.0.0.1:8081", 14, sa.b), sizeof(struct sockaddr_in));
  assert_int_equal(sa.a4.sin_family, AF_INET);
  assert_int_equal(ntohs(sa.a4.sin_port), 8081);
  assert_int_equal(nres_gw_parse_addr("[::1]:443", 9, sa.b), sizeof(struct sockaddr_in6));
  assert_int_equal(sa.a6.sin6_family, AF_INET6);
  assert_int_equal(ntohs(sa.a6.sin6_port), 443);
  const char *bad[] = { "localhost:80", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0",
                        "127.0.0.1:65536", "127.0.0.1:8x", ":80", "[::1:80", "::1:80",
                        "1.2.3.4.5:80", "[]:80", "" };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    assert_int_equal(nres_gw_parse_addr(bad[k], strlen(bad[k]), sa.b), 0);
}

/* Add under way: the new peer gets tries at once in a view that syncs
 * at its pick; a removed one none from its next pick; the survivors keep
 * their entry, breaker and counts. */
static void test_add_remove(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 4, 0);
  nres_time_t now = 10 * SEC;
  int counts[SLOTS] = { 0 };
  run(u, now, 100, counts);
  assert_int_equal(u->n, 2);
  int a = entry(u, declared[0]);
  nres_breaker_t *a_breaker = u->peer[a].breaker;
  nres_shm_counts_t before, after;
  nres_shm_slot_counts(u->peer[a].counters, &before);
  assert_int_equal(before.calls, 50);

  int slot = nres_gw_member_add(u, "10.0.0.3:80", 11, 2, 0, now);
  assert_true(slot >= 0);
  memset(counts, 0, sizeof counts);
  run(u, now, 400, counts);
  int c = entry(u, "10.0.0.3:80");
  assert_int_equal(c, 2);
  assert_int_equal(counts[c], 200);   /* weight 2 of 4, round robin */
  assert_int_equal(entry(u, declared[0]), a);
  assert_ptr_equal(u->peer[a].breaker, a_breaker);
  nres_shm_slot_counts(u->peer[a].counters, &after);
  assert_int_equal(after.calls, before.calls + 100);

  assert_int_equal(nres_gw_member_remove(u, declared[1], strlen(declared[1]), now),
                   (int)u->peer[entry(u, declared[1])].slot);
  int b = 1;
  memset(counts, 0, sizeof counts);
  run(u, now, 300, counts);
  assert_int_equal(counts[b], 0);
  assert_int_equal(counts[a] + counts[c], 300);
  assert_int_equal(entry(u, declared[1]), -1);
  assert_ptr_equal(u->peer[a].breaker, a_breaker);
  unmake(&f);
}

/* A try in flight on a removed peer finishes and is recorded into its
 * slot; the slot is freed only after it ended (and the grace), and a new
 * peer then starts fresh there. */
static void test_inflight_finishes(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 3, 0);
  nres_time_t now = 10 * SEC;
  nres_gw_request_t r;
  uint32_t permit;
  int has, i;
  do {   /* a try on peer 1 */
    assert_int_equal(nres_gw_admit(u, &r, now, -1), NRES_GW_ADMITTED);
    i = nres_gw_pick(u, now, -1, &permit, &has);
    nres_gw_try_begin(u, &r, now, i, permit, has);
    if (i != 1)
      nres_gw_request_end(u, &r, now + MS, 200);
  } while (i != 1);
  uint32_t s = u->peer[1].slot;
  assert_int_equal(nres_gw_member_inflight(f.m, s), 1);
  uint32_t view = u->view;
  assert_int_equal(nres_gw_member_remove(u, declared[1], strlen(declared[1]), now), (int)s);
  /* no new try, while its entry stays for the try in flight; a binding
   * mirroring the view is told (its view number moved) */
  int counts[SLOTS] = { 0 };
  run(u, now, 50, counts);
  assert_int_equal(counts[1], 0);
  assert_int_equal(u->peer[1].inflight, 1);
  assert_true(u->peer[1].removed);
  assert_true(u->view != view);
  assert_int_equal(nres_gw_members_reap(u, now + 5 * SEC), 0);   /* still in flight */
  assert_int_equal(nres_gw_member(f.m, s)->state, NRES_GW_MEMBER_REMOVED);
  /* capacity 3: the removed peer still counts */
  assert_true(nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, now) >= 0);
  assert_int_equal(nres_gw_member_add(u, "10.0.0.4:80", 11, 1, 0, now), NRES_GW_MEMBER_FULL);
  nres_shm_counts_t c;
  nres_gw_request_end(u, &r, now + 2 * SEC, 200);   /* the try ends */
  nres_shm_slot_counts(nres_shm_slot(f.peers, s), &c);
  assert_int_equal(c.calls, 1 + counts[1]);   /* recorded in its slot */
  assert_int_equal(nres_gw_member_inflight(f.m, s), 0);
  assert_int_equal(nres_gw_members_reap(u, now + 100 * MS), 0);   /* within the grace */
  assert_int_equal(nres_gw_members_reap(u, now + 2 * SEC), 1);
  assert_int_equal(nres_gw_member(f.m, s)->state, NRES_GW_MEMBER_FREE);
  /* its key let go: another peer may have the slot, state fresh */
  int s4 = nres_gw_member_add(u, "10.0.0.4:80", 11, 1, 0, now + 3 * SEC);
  assert_true(s4 >= 0);
  nres_shm_slot_counts(nres_shm_slot(f.peers, (uint32_t)s4), &c);
  assert_int_equal(c.calls, 0);
  memset(counts, 0, sizeof counts);
  run(u, now + 3 * SEC, 90, counts);
  assert_int_equal(u->n, 3);   /* the freed entry reused */
  assert_int_equal(counts[entry(u, "10.0.0.4:80")], 30);
  unmake(&f);
}

/* A removed peer whose tries are still in flight comes back (its state
 * kept) even when the upstream is full: it is counted once. */
static void test_back_when_full(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 3, 0);
  nres_time_t now = 10 * SEC;
  int s3 = nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, now);
  assert_true(s3 >= 0);
  nres_gw_request_t r;
  uint32_t permit;
  int has, i;
  do {   /* a try on the added peer, left in flight */
    assert_int_equal(nres_gw_admit(u, &r, now, -1), NRES_GW_ADMITTED);
    i = nres_gw_pick(u, now, -1, &permit, &has);
    nres_gw_try_begin(u, &r, now, i, permit, has);
    if (u->peer[i].slot != (uint32_t)s3)
      nres_gw_request_end(u, &r, now + MS, 200);
  } while (u->peer[i].slot != (uint32_t)s3);
  assert_int_equal(nres_gw_member_remove(u, "10.0.0.3:80", 11, now), s3);
  assert_int_equal(nres_gw_member_add(u, "10.0.0.4:80", 11, 1, 0, now), NRES_GW_MEMBER_FULL);
  assert_int_equal(nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, now), s3);
  nres_gw_request_end(u, &r, now + MS, 200);
  nres_shm_counts_t c;
  nres_shm_slot_counts(nres_shm_slot(f.peers, (uint32_t)s3), &c);
  assert_int_equal(c.calls, 1);   /* its count kept */
  unmake(&f);
}

/* Bad input changes nothing: the generation does not move. */
static void test_bad_input(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 3, 0);
  nres_time_t now = 10 * SEC;
  uint64_t g = f.m->gen;
  assert_int_equal(nres_gw_member_add(u, "nope:80", 7, 1, 0, now), NRES_GW_MEMBER_BAD_ADDRESS);
  assert_int_equal(nres_gw_member_add(u, "10.0.0.9:80", 11, 0, 0, now),
                   NRES_GW_MEMBER_BAD_WEIGHT);
  assert_int_equal(nres_gw_member_add(u, "10.0.0.9:80", 11, NRES_GW_WEIGHT_MAX + 1, 0, now),
                   NRES_GW_MEMBER_BAD_WEIGHT);
  assert_int_equal(nres_gw_member_add(u, declared[0], strlen(declared[0]), 1, 0, now),
                   NRES_GW_MEMBER_DUPLICATE);
  assert_int_equal(nres_gw_member_remove(u, "10.0.0.9:80", 11, now), NRES_GW_MEMBER_UNKNOWN);
  assert_int_equal(f.m->gen, g);
  /* the last primary, and the last one not drained, stay */
  assert_true(nres_gw_member_add(u, "10.0.0.9:80", 11, 1, 1, now) >= 0);   /* a backup */
  g = f.m->gen;
  nres_gw_control_flag(&f.controls[u->peer[0].slot], NRES_GW_DRAIN, 1);
  assert_int_equal(nres_gw_member_remove(u, declared[1], strlen(declared[1]), now),
                   NRES_GW_MEMBER_LAST_PRIMARY);
  nres_gw_control_flag(&f.controls[u->peer[0].slot], NRES_GW_DRAIN, 0);
  assert_int_equal(f.m->gen, g);
  assert_true(nres_gw_member_remove(u, declared[1], strlen(declared[1]), now) >= 0);
  assert_int_equal(nres_gw_member_remove(u, declared[0], strlen(declared[0]), now),
                   NRES_GW_MEMBER_LAST_PRIMARY);
  assert_true(nres_gw_member_remove(u, "10.0.0.9:80", 11, now) >= 0);   /* a backup may go */
  assert_int_equal(nres_gw_member_add(NULL, "10.0.0.9:80", 11, 1, 0, now), NRES_EINVAL);
  unmake(&f);
}

/* A declaration made again (a reload): the same one keeps the members
 * added and removed; another makes them anew from it. */
static void test_declare_again(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 4, 0);
  nres_time_t now = 10 * SEC;
  assert_true(nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, now) >= 0);
  assert_true(nres_gw_member_remove(u, declared[0], strlen(declared[0]), now) >= 0);
  assert_int_equal(nres_gw_members_declare(f.m, f.msize, f.peers, 4, declared, NULL, NULL, 2,
                                           60 * SEC, now), 1);
  nres_gw_config_t cfg = config(&f);
  nres_gw_upstream_t *v = nres_gw_upstream_new(&cfg);   /* the new workers' */
  assert_non_null(v);
  assert_int_equal(v->n, 2);
  assert_int_equal(entry(v, declared[0]), -1);
  assert_int_equal(entry(v, declared[1]), 0);   /* declared ones first */
  assert_int_equal(entry(v, "10.0.0.3:80"), 1);
  nres_gw_upstream_free(v);
  /* another capacity: another declaration */
  assert_int_equal(nres_gw_members_declare(f.m, f.msize, f.peers, 3, declared, NULL, NULL, 2,
                                           60 * SEC, now), 0);
  int counts[SLOTS] = { 0 };
  run(u, now, 20, counts);   /* the old view follows */
  assert_int_equal(entry(u, "10.0.0.3:80"), -1);
  assert_true(entry(u, declared[0]) >= 0 && entry(u, declared[1]) >= 0);
  assert_int_equal(nres_gw_members_declare(f.m, f.msize, f.peers, 9, declared, NULL, NULL, 2,
                                           60 * SEC, now), NRES_EINVAL);   /* > slots */
  unmake(&f);
}

/* Slow start: an added peer ramps up from a tenth of its weight. */
static void test_added_slow_start(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 4, 10 * SEC);
  nres_time_t now = 10 * SEC;
  int counts[SLOTS] = { 0 };
  run(u, now, 10, counts);
  now += 20 * SEC;   /* the declared peers ramped */
  assert_true(nres_gw_member_add(u, "10.0.0.3:80", 11, 2, 0, now) >= 0);
  memset(counts, 0, sizeof counts);
  run(u, now + 100 * MS, 1000, counts);
  int c = entry(u, "10.0.0.3:80");
  assert_in_range(counts[c], 80, 110);   /* 0.2 / 2.2 */
  memset(counts, 0, sizeof counts);
  run(u, now + 5 * SEC, 1000, counts);
  assert_in_range(counts[c], 320, 350);   /* 1 / 3 */
  memset(counts, 0, sizeof counts);
  run(u, now + 11 * SEC, 1000, counts);
  assert_in_range(counts[c], 490, 510);   /* 2 / 4 */
  unmake(&f);
}

/* The peer being probed half-open is removed: its probe ends and is
 * recorded, the slot is freed after it, nothing is left held. */
static void test_remove_during_probe(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 3, 0);
  assert_true(nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, SEC) >= 0);
  nres_time_t now = 10 * SEC;
  int counts[SLOTS] = { 0 };
  run(u, now, 3, counts);
  int c = entry(u, "10.0.0.3:80");
  nres_breaker_isolate(u->peer[c].breaker);
  nres_breaker_reset(u->peer[c].breaker);
  /* eject it: two failures */
  for (int k = 0; k < 2; k++) {
    nres_gw_request_t r;
    assert_int_equal(nres_gw_admit(u, &r, now, -1), NRES_GW_ADMITTED);
    uint32_t permit;
    assert_int_equal(nres_breaker_acquire(u->peer[c].breaker, now, &permit), 0);
    nres_gw_try_begin(u, &r, now, c, permit, 1);
    nres_gw_request_end(u, &r, now + MS, 503);
  }
  nres_gw_refresh(u, now + 2 * MS);
  assert_int_equal(nres_breaker_state(u->peer[c].breaker, now + 2 * MS), NRES_BREAKER_OPEN);
  now += 2 * SEC;   /* its break is over: the next pick probes it */
  nres_gw_request_t probe;
  uint32_t permit;
  int has;
  assert_int_equal(nres_gw_admit(u, &probe, now, -1), NRES_GW_ADMITTED);
  nres_gw_refresh(u, now);
  int i;
  for (;;) {
    i = nres_gw_pick(u, now, -1, &permit, &has);
    if (i == c)
      break;
    nres_gw_request_t other;
    nres_gw_admit(u, &other, now, -1);
    nres_gw_try_begin(u, &other, now, i, permit, has);
    nres_gw_request_end(u, &other, now + MS, 200);
  }
  assert_true(has);
  nres_gw_try_begin(u, &probe, now, c, permit, has);
  uint32_t s = u->peer[c].slot;
  assert_true(nres_gw_member_remove(u, "10.0.0.3:80", 11, now) >= 0);
  memset(counts, 0, sizeof counts);
  run(u, now, 20, counts);
  assert_int_equal(counts[c], 0);
  assert_int_equal(nres_gw_members_reap(u, now + 3 * SEC), 0);
  nres_gw_request_end(u, &probe, now + 10 * MS, 200);   /* the probe succeeds */
  nres_breaker_stats_t st;
  nres_breaker_stats(&nres_shm_slot(f.peers, s)->breaker, &st);
  assert_int_equal(st.probes, 0);
  assert_int_equal(nres_gw_members_reap(u, now + 3 * SEC), 1);
  unmake(&f);
}

/* Two threads racing: one adds and one removes the same peer, a third
 * picks; the membership stays sane (one record per name at most, within
 * the capacity) and every pick is a member's. */
typedef struct {
  fixture_t *f;
  nres_gw_upstream_t *u;
  int adder;
  atomic_int *stop;
} racer_t;

static void *race(void *arg) {
  racer_t *r = arg;
  for (int k = 0; k < 2000; k++) {
    nres_time_t now = 10 * SEC + (nres_time_t)k * MS;
    if (r->adder)
      nres_gw_member_add(r->u, "10.0.0.3:80", 11, 1, 0, now);
    else
      nres_gw_member_remove(r->u, "10.0.0.3:80", 11, now);
  }
  return NULL;
}

static void test_race(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 4, 0);
  nres_gw_config_t cfg = config(&f);
  nres_gw_upstream_t *u2 = nres_gw_upstream_new(&cfg);   /* the other worker's */
  assert_non_null(u2);
  atomic_int stop = 0;
  racer_t a = { &f, u, 1, &stop }, b = { &f, u2, 0, &stop };
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, race, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, race, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  int active = 0, named = 0;
  for (uint32_t s = 0; s < SLOTS; s++) {
    nres_gw_member_t *r = nres_gw_member(f.m, s);
    active += r->state == NRES_GW_MEMBER_ACTIVE;
    named += r->state == NRES_GW_MEMBER_ACTIVE && strcmp(r->name, "10.0.0.3:80") == 0;
  }
  assert_true(named <= 1);
  assert_true(active >= 2 && active <= 3);
  assert_int_equal(f.m->gen % 2, 0);
  int counts[SLOTS] = { 0 };
  run(u2, 20 * SEC, 30, counts);
  for (uint32_t i = 0; i < u2->n; i++)
    if (counts[i] > 0)
      assert_int_equal(nres_gw_member(f.m, u2->peer[i].slot)->state, NRES_GW_MEMBER_ACTIVE);
  nres_gw_upstream_free(u2);
  unmake(&f);
}

static NRES_ATOMIC(int) allocs;
static void *count_malloc(size_t n) { allocs++; return malloc(n); }
static void *count_realloc(void *p, size_t n) { allocs++; return realloc(p, n); }
static void *count_calloc(size_t k, size_t n) { allocs++; return calloc(k, n); }

/* The request path, membership changes seen, allocates nothing. */
static void test_no_allocation(void **state) {
  (void)state;
  fixture_t f;
  nres_gw_upstream_t *u = make(&f, 4, 0);
  int counts[SLOTS] = { 0 };
  nres_replace_allocator(count_malloc, count_realloc, count_calloc, free);
  allocs = 0;
  run(u, 10 * SEC, 10, counts);
  nres_gw_member_add(u, "10.0.0.3:80", 11, 1, 0, 10 * SEC);
  run(u, 10 * SEC, 10, counts);
  nres_gw_member_remove(u, "10.0.0.3:80", 11, 10 * SEC);
  run(u, 10 * SEC, 10, counts);
  assert_int_equal(allocs, 0);
  nres_replace_allocator(malloc, realloc, calloc, free);
  unmake(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_parse_addr),
    cmocka_unit_test(test_add_remove),
    cmocka_unit_test(test_inflight_finishes),
    cmocka_unit_test(test_bad_input),
    cmocka_unit_test(test_back_when_full),
    cmocka_unit_test(test_declare_again),
    cmocka_unit_test(test_added_slow_start),
    cmocka_unit_test(test_remove_during_probe),
    cmocka_unit_test(test_race),
    cmocka_unit_test(test_no_allocation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

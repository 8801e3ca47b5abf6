/* SPDX-License-Identifier: MIT */
/* shm_migrate.c - a reload's new table takes over the old one's state
 * (nres/shm.h, "migration").
 *
 * Apart from shm.c because it is a different job: shm.c is the lock-free
 * table every request goes through; this runs once per reload, in one
 * process, allocates a work list and reads the old table through the
 * public calls only (nres_shm_key, nres_shm_slot), so it cannot break the
 * claim protocol. Each kind of state has its rule, one function each:
 * what is kept as it is, what is kept under the new configuration's
 * rules, and what starts fresh because the new configuration changed its
 * meaning.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/breaker.h"
#include "internal.h"
#include "nres/shm.h"

/* A word of shared state, read or written by a process that does not own
 * it: relaxed atomics (another process may write it meanwhile). */
typedef uint64_t __attribute__((may_alias)) word_t;

_Static_assert(sizeof(nres_shm_slot_t) % 8 == 0, "slots are whole words");
_Static_assert(sizeof(nres_window_t) % 8 == 0, "windows are whole words");

static void copy_words(void *to, const void *from, size_t bytes) {
  word_t *t = to;
  const word_t *f = from;

  for (size_t i = 0; i < bytes / 8; i++)
    __atomic_store_n(&t[i], __atomic_load_n(&f[i], __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
}

static int same_window(const nres_window_t *a, const nres_window_t *b) {
  return a->width == b->width && a->count == b->count;
}

/* Counts of a window of the same span and buckets: its bucket words and
 * each shard's pending one (the slices are the same clock's). */
static void copy_window(nres_window_t *to, const nres_window_t *from) {
  copy_words(to->bucket, from->bucket, sizeof(to->bucket));
  for (unsigned k = 0; k < NRES_SHARDS; k++)
    nres__store(&to->shard[k].pending, nres__load(&from->shard[k].pending));
}

static int same_breaker_rules(const nres_breaker_config_t *a,
                              const nres_breaker_config_t *b) {
  return a->consecutive == b->consecutive && a->min_calls == b->min_calls &&
         a->failure_ratio == b->failure_ratio &&
         a->slow_ratio == b->slow_ratio;
}

/* The state word as it was (open until the same moment, probes and their
 * lease), the counters, and the window's counts unless its span or
 * buckets changed. A closed word's "ratio due" mark was worked out under
 * the old thresholds or counts: dropped when either changed (the next
 * failure works it out again). */
static void move_breaker(nres_breaker_t *to, const nres_breaker_t *from,
                         nres_shm_migration_t *m) {
  uint64_t w = nres__load(&from->word);
  int windowed = same_window(&to->window, &from->window);

  if (windowed)
    copy_window(&to->window, &from->window);
  else
    m->reset |= NRES_SHM_RESET_BREAKER_WINDOW;
  if (!windowed || !same_breaker_rules(&to->config, &from->config))
    if (NRES__BREAKER_STATE(w) == NRES_BREAKER_CLOSED)
      w &= ~NRES__BREAKER_RATIO_DUE;
  nres__store(&to->word, w);
  nres__store(&to->consecutive, nres__load(&from->consecutive));
  nres__store(&to->level, nres__load(&from->level));
  nres__store(&to->trips, nres__load(&from->trips));
  nres__store(&to->rejected, nres__load(&from->rejected));
  nres__store(&to->leases_expired, nres__load(&from->leases_expired));
}

/* The level (cut to the new capacity), when the floor was last credited,
 * the counters. Deposit, capacity and floor are the new configuration's. */
static void move_budget(nres_budget_t *to, const nres_budget_t *from,
                        nres_shm_migration_t *m) {
  int64_t tokens = nres__load(&from->tokens);

  if (tokens > to->capacity) {
    tokens = to->capacity;
    m->adjusted |= NRES_SHM_ADJUST_BUDGET;
  }
  nres__store(&to->tokens, tokens);
  nres__store(&to->refilled_at, nres__load(&from->refilled_at));
  nres__store(&to->spent, nres__load(&from->spent));
  nres__store(&to->refused, nres__load(&from->refused));
}

/* The admissions made ahead of now. Under the old configuration's rate
 * they stay as they are, with the slot's rate (the control API may have
 * set another: that setting is kept too); under a new declared rate they
 * are rescaled to it (nres_ratelimit_set_rate). */
static void move_ratelimit(nres_ratelimit_t *to, const nres_ratelimit_t *from,
                           const nres_shm_config_t *oc,
                           const nres_shm_config_t *nc, nres_time_t now,
                           nres_shm_migration_t *m) {
  to->interval = __atomic_load_n(&from->interval, __ATOMIC_RELAXED);
  to->tolerance = __atomic_load_n(&from->tolerance, __ATOMIC_RELAXED);
  nres__store(&to->tat, nres__load(&from->tat));
  nres__store(&to->refused, nres__load(&from->refused));
  if (oc->rate != nc->rate || oc->burst != nc->burst) {
    nres_ratelimit_set_rate(to, nc->rate, nc->burst, now);
    m->adjusted |= NRES_SHM_ADJUST_RATE;
  }
}

/* Requests and accepts if the window's span and buckets are the same,
 * and the dependency's last refusal. The cached odds are not kept: the
 * next call works them out under the new k. */
static void move_throttle(nres_throttle_t *to, const nres_throttle_t *from,
                          nres_shm_migration_t *m) {
  if (same_window(&to->window, &from->window))
    copy_window(&to->window, &from->window);
  else
    m->reset |= NRES_SHM_RESET_THROTTLE_WINDOW;
  nres__store(&to->refused, nres__load(&from->refused));
  nres__store(&to->refused_at, nres__load(&from->refused_at));
}

/* Slot `to` (fresh, of the new configuration) takes over `from`'s state:
 * each kind both tables keep, and the counters. */
static void move_slot(nres_shm_slot_t *to, const nres_shm_slot_t *from,
                      const nres_shm_config_t *oc, const nres_shm_config_t *nc,
                      nres_time_t now, nres_shm_migration_t *m) {
  uint32_t both = oc->flags & nc->flags;

  nres__store(&to->created, nres__load(&from->created));
  copy_words(to->stops, from->stops, sizeof(to->stops));
  copy_words(to->shard, from->shard, sizeof(to->shard));
  if (both & NRES_SHM_BUDGET)
    move_budget(&to->budget, &from->budget, m);
  if (both & NRES_SHM_BREAKER)
    move_breaker(&to->breaker, &from->breaker, m);
  if (both & NRES_SHM_RATELIMIT)
    move_ratelimit(&to->ratelimit, &from->ratelimit, oc, nc, now, m);
  if (both & NRES_SHM_THROTTLE)
    move_throttle(&to->throttle, &from->throttle, m);
}

typedef struct {
  uint32_t index;
  uint32_t gen;
  double lease;                 /* ns (nres_shm_key's) */
} item_t;

/* Latest lease first; then by slot, so the order is the same every run. */
static int by_lease(const void *a, const void *b) {
  const item_t *x = a, *y = b;

  if (x->lease != y->lease)
    return x->lease > y->lease ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* The rest of a key's lease at now, as a hold for nres_shm_acquire (which
 * then ends it at the same ms); 0 for a lease that is over. */
static nres_time_t hold_of(double lease, nres_time_t now) {
  if (lease >= (double) NRES_TIME_NEVER)
    return NRES_TIME_NEVER;
  return lease > (double) now ? nres__time_from_double(lease - (double) now)
                              : 0;
}

/* Move one key (old slot it) into `to`: its new slot, or a negative code
 * saying why it did not move (counted in m). */
static int move_key(nres_shm_t *from, nres_shm_t *to, const item_t *it,
                    nres_time_t now, unsigned flags, nres_shm_slot_t *snap,
                    nres_shm_migration_t *m) {
  const nres_shm_config_t *oc = nres_shm_config(from);
  const nres_shm_config_t *nc = nres_shm_config(to);
  char key[NRES_SHM_KEY_MAX];
  uint32_t gen;
  int len, i;

  /* A snapshot between two reads of the key: the same generation both
   * times, so the state read was this key's. */
  len = nres_shm_key(from, it->index, key, sizeof(key), &gen, NULL);
  if (len < 0 || gen != it->gen) {
    m->changed++;
    return NRES_EAGAIN;
  }
  copy_words(snap, nres_shm_slot(from, it->index), sizeof(*snap));
  if (nres_shm_key(from, it->index, NULL, 0, &gen, NULL) < 0 ||
      gen != it->gen) {
    m->changed++;
    return NRES_EAGAIN;
  }
  if (flags & NRES_SHM_MIGRATE_PRESENT) {
    i = nres_shm_find(to, key, (size_t) len, NULL);
    if (i < 0) {
      m->gone++;
      return i;
    }
  } else {
    i = nres_shm_acquire(to, key, (size_t) len, now, hold_of(it->lease, now),
                         NULL);
    if (i < 0) {
      m->full++;
      return i;
    }
  }
  move_slot(nres_shm_slot(to, (uint32_t) i), snap, oc, nc, now, m);
  m->moved++;
  return i;
}

int nres_shm_migrate(nres_shm_t *from, nres_shm_t *to, nres_time_t now,
                     unsigned flags, uint32_t *map, nres_shm_migration_t *out) {
  uint32_t slots = nres_shm_slots(from), n = 0, i;
  nres_shm_slot_t *snap;
  item_t *items;
  int rc;

  if (out == NULL || slots == 0 || nres_shm_slots(to) == 0 || from == to ||
      (flags & ~(unsigned) NRES_SHM_MIGRATE_PRESENT))
    return NRES_EINVAL;
  memset(out, 0, sizeof(*out));
  if (map != NULL)
    for (i = 0; i < slots; i++)
      map[i] = UINT32_MAX;
  items = nres__malloc(slots * sizeof(*items));
  snap = nres__malloc(sizeof(*snap));
  if (items == NULL || snap == NULL) {
    nres__free(items);
    nres__free(snap);
    return NRES_ENOMEM;
  }
  for (i = 0; i < slots; i++) {
    item_t it = { i, 0, 0 };
    if (nres_shm_key(from, i, NULL, 0, &it.gen, &it.lease) >= 0)
      items[n++] = it;
  }
  out->keys = n;
  qsort(items, n, sizeof(*items), by_lease);
  for (i = 0; i < n; i++) {
    rc = move_key(from, to, &items[i], now, flags, snap, out);
    if (rc >= 0 && map != NULL)
      map[items[i].index] = (uint32_t) rc;
  }
  nres__free(snap);
  nres__free(items);
  return 0;
}

/* ------------------------------------------------------------- the line */

typedef struct {
  char *p;
  size_t cap, len;
} text_t;

static void put(text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(t->len < t->cap ? t->p + t->len : NULL,
                t->len < t->cap ? t->cap - t->len : 0, fmt, ap);
  va_end(ap);
  if (n > 0)
    t->len += (size_t) n;
}

static double secs(nres_time_t ns) {
  return ns == NRES_TIME_NEVER ? INFINITY : (double) ns / NRES_SEC;
}

static const struct {
  unsigned flag;
  const char *name;
} KINDS[] = {
  { NRES_SHM_BUDGET, "budget" },
  { NRES_SHM_BREAKER, "breaker" },
  { NRES_SHM_RATELIMIT, "limiter" },
  { NRES_SHM_THROTTLE, "throttle" },
};

/* Which settings changed, "slots 64 -> 128, breaker (window, break_for)". */
static void put_changes(text_t *t, const nres_shm_config_t *a,
                        const nres_shm_config_t *b) {
  const nres_breaker_config_t *x = &a->breaker, *y = &b->breaker;
  const char *sep = "";

  if (a->slots != b->slots) {
    put(t, "slots %u -> %u", a->slots, b->slots);
    sep = ", ";
  }
  if ((a->flags & b->flags & NRES_SHM_BUDGET) &&
      (a->budget_ratio != b->budget_ratio ||
       a->budget_min_per_sec != b->budget_min_per_sec ||
       a->budget_capacity != b->budget_capacity)) {
    put(t, "%sbudget (ratio %g, min_per_sec %g, capacity %g -> %g, %g, %g)",
        sep, a->budget_ratio, a->budget_min_per_sec, a->budget_capacity,
        b->budget_ratio, b->budget_min_per_sec, b->budget_capacity);
    sep = ", ";
  }
  if ((a->flags & b->flags & NRES_SHM_BREAKER) &&
      memcmp(x, y, sizeof(*x)) != 0) {
    put(t, "%sbreaker (", sep);
    sep = "";
#define FIELD(f)                                                             \
  if (x->f != y->f) {                                                        \
    put(t, "%s" #f, sep);                                                    \
    sep = ", ";                                                              \
  }
    FIELD(consecutive) FIELD(min_calls) FIELD(failure_ratio)
    FIELD(slow_ratio) FIELD(window) FIELD(buckets) FIELD(probes)
    FIELD(success_threshold) FIELD(break_for) FIELD(break_max)
    FIELD(break_jitter) FIELD(lease)
#undef FIELD
    put(t, ")");
    sep = ", ";
  }
  if ((a->flags & b->flags & NRES_SHM_RATELIMIT) &&
      (a->rate != b->rate || a->burst != b->burst)) {
    put(t, "%slimiter (rate %g/s burst %u -> %g/s burst %u)", sep, a->rate,
        a->burst, b->rate, b->burst);
    sep = ", ";
  }
  if ((a->flags & b->flags & NRES_SHM_THROTTLE) &&
      (a->throttle_k != b->throttle_k ||
       a->throttle_window != b->throttle_window ||
       a->throttle_buckets != b->throttle_buckets ||
       a->throttle_fast_failure != b->throttle_fast_failure)) {
    put(t, "%sthrottle", sep);
    sep = ", ";
  }
  for (size_t k = 0; k < NRES__ARRAY_SIZE(KINDS); k++) {
    if ((a->flags ^ b->flags) & KINDS[k].flag) {
      put(t, "%s%s %s", sep, KINDS[k].name,
          b->flags & KINDS[k].flag ? "added (starts fresh)" : "removed");
      sep = ", ";
    }
  }
  if (*sep == '\0')
    put(t, "no setting");
}

int nres_shm_migration_text(const nres_shm_migration_t *m,
                            const nres_shm_config_t *from,
                            const nres_shm_config_t *to, char *buf,
                            size_t cap) {
  text_t t = { buf, buf == NULL ? 0 : cap, 0 };

  if (m == NULL || from == NULL || to == NULL)
    return NRES_EINVAL;
  if (cap > 0 && buf != NULL)
    buf[0] = '\0';
  put(&t, "changed: ");
  put_changes(&t, from, to);
  put(&t, "; moved the state of %u of %u keys", m->moved, m->keys);
  if (m->full > 0)
    put(&t, "; left out %u: their set in the new table was full (the keys"
        " used most recently were kept)", m->full);
  if (m->gone > 0)
    put(&t, "; left out %u no longer declared", m->gone);
  if (m->changed > 0)
    put(&t, "; left out %u that changed while read", m->changed);
  if (m->reset & NRES_SHM_RESET_BREAKER_WINDOW)
    put(&t, "; reset: breaker window counts (the window changed from %g s"
        " in %u buckets to %g s in %u)",
        secs(from->breaker.window), from->breaker.buckets,
        secs(to->breaker.window), to->breaker.buckets);
  if (m->reset & NRES_SHM_RESET_THROTTLE_WINDOW)
    put(&t, "; reset: throttle window counts (the window changed from %g s"
        " in %u buckets to %g s in %u)",
        secs(from->throttle_window), from->throttle_buckets,
        secs(to->throttle_window), to->throttle_buckets);
  if (m->adjusted & NRES_SHM_ADJUST_BUDGET)
    put(&t, "; budget levels above the new capacity cut to it");
  if (m->adjusted & NRES_SHM_ADJUST_RATE)
    put(&t, "; limiter admissions ahead rescaled to the new rate");
  if (m->reset == 0)
    put(&t, "; nothing reset");
  return (int) t.len;
}

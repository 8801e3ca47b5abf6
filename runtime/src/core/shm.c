/* SPDX-License-Identifier: MIT */
/* shm.c - a fixed table of keyed policy state that processes share.
 *
 * The region is position independent (offsets, no pointers): a header with
 * a magic, a layout version, the template configuration and counters, an
 * index of two words per slot (state word, key tag) kept apart from the
 * slot bodies so a set's scan touches two cache lines, then the slots. A
 * key hashes to one set of NRES_SHM_WAYS slots and lives in one of them.
 *
 * Each slot's state word is the whole truth about who owns it; from bit 0:
 *
 *   bits  0-1   FREE, INIT (being filled by its claimer), KEYED (key and
 *               state written; its claimer is checking for a twin), LIVE
 *   bits  2-21  generation: bumped whenever the slot is claimed, so a
 *               reader that read the key between two loads of an unchanged
 *               word read one key, not a mix of two
 *   bits 22-63  lease, in ms: the slot is not taken from its key before
 *               then (LEASE_MAX: never). Extended by lookups (at most once
 *               per `hold`, so a busy key does not bounce its cache line on
 *               every call).
 *
 * Every transition is a CAS from the exact word expected, by whoever made
 * the decision, so a process stopped anywhere leaves a state that others
 * can read and, once its lease is over, take over:
 *
 *   FREE --claim--> INIT --key and state written--> KEYED --no twin--> LIVE
 *   LIVE or stale INIT/KEYED (lease over) --claim--> INIT (an eviction)
 *   KEYED --twin wins--> FREE
 *
 * Two processes inserting the same key at once each publish KEYED and then
 * scan the set (sequentially consistent, as in Dekker's algorithm, so at
 * least one of them sees the other). A LIVE twin always wins; between two
 * KEYED twins the smaller ticket (a global insertion number) wins and the
 * winner frees the loser's word with a CAS, which the loser's own
 * KEYED -> LIVE CAS then fails on. So a key is never LIVE twice, and a
 * slot's state is written only while its claimer holds it in INIT.
 *
 * A KEYED slot is complete: anyone may finish its claim. A lookup that
 * finds its key KEYED runs the claimer's settle scan for it and, if the
 * slot wins, makes it LIVE with the same CAS the claimer would have used
 * (helping, as in lock-free queues). A scan made after the helper saw
 * KEYED is as good as one made by the claimer after it published KEYED, so
 * the argument above holds whoever scans. Without this, a claimer killed
 * right after publishing KEYED left an older twin that every later insert
 * of the key lost to (NRES_EBUSY until its lease ran out, and as long as
 * free slots remained, forever). A claimer killed in INIT only costs its
 * slot until the claim's lease ends; the key itself goes to another slot.
 * There is no release: a holder lets go by letting its lease run out, so a
 * dead holder holds nothing for longer than its lease.
 *
 * Its one limit: a claimer stopped for longer than its claim's lease
 * (the larger of `hold` and 10 s) between claiming a slot and publishing
 * KEYED can find the slot reclaimed and write its key over the new
 * owner's. That takes a process frozen for 10 s between two adjacent
 * stores.
 *
 * Built with NRES_SHM_TEST_HOOKS (test_shm only), every step of the
 * protocol calls nres_shm_test_hook, so a test can kill a process there.
 */
#include <string.h>
#include <sched.h>
#include <sys/mman.h>

#include "core/shard.h"
#include "core/shm_count.h"
#include "internal.h"
#include "nres/shm.h"

#define SHM_MAGIC 0x316d687373657271ull   /* "qresshm1", little endian */
/* Bumped whenever the header, the index or nres_shm_slot_t changes shape,
 * or what a region file holds after the table (a gateway's peers'
 * estimators, nres_estimator_t: 7 when its shards' entries went from 16
 * to 24; 8 when nres_shm_slot_t.stops grew by NRES_STOP_CALLBACK; 9 when
 * the breaker took a lease and leases_expired): a region laid out by
 * another build is refused, not misread. */
#define SHM_VERSION 9u
#define KEY_WORDS (NRES_SHM_KEY_MAX / 8)
#define ALIGN 64

#define ST_FREE 0u
#define ST_INIT 1u
#define ST_KEYED 2u
#define ST_LIVE 3u

#define GEN_BITS 20
#define GEN_MASK ((1u << GEN_BITS) - 1)
#define LEASE_SHIFT 22
#define LEASE_MAX ((1ull << 42) - 1)

#define STATE(w) ((unsigned) ((w) & 3))
#define GEN(w) ((uint32_t) (((w) >> 2) & GEN_MASK))
#define LEASE(w) ((w) >> LEASE_SHIFT)

#ifdef NRES_SHM_TEST_HOOKS
void (*nres_shm_test_hook)(nres_shm_t *shm, int step);
#define HOOK(shm, step)                                                      \
  do {                                                                       \
    if (nres_shm_test_hook != NULL)                                          \
      nres_shm_test_hook((shm), (step));                                     \
  } while (0)
#else
#define HOOK(shm, step) ((void) 0)
#endif

/* A slot being filled (INIT, KEYED) is leased for at least this long,
 * whatever the caller's hold: only a claimer stopped this long mid-insert
 * can lose its slot to a stale-slot reclaim (see the top of the file). */
#define CLAIM_HOLD (10 * NRES_SEC)

/* Rounds of claim-and-settle before an insert gives up (NRES_EBUSY): only
 * reached when other inserts of the same set keep winning. */
#define MAX_ROUNDS 64

typedef struct {
  NRES_ATOMIC(uint64_t) word;
  NRES_ATOMIC(uint64_t) tag;            /* hash, low 7 bits the length */
} entry_t;

struct nres_shm_s {
  uint64_t magic;
  uint32_t version;                     /* SHM_VERSION */
  uint32_t mapped;                      /* 1: nres_shm_new's mmap */
  uint64_t size;                        /* bytes of the region */
  uint32_t slots;
  uint32_t sets;
  uint32_t stride;                      /* bytes between slots */
  uint32_t reserved_;
  uint64_t index_at;                    /* offsets from the header */
  uint64_t slots_at;
  nres_shm_config_t config;
  NRES_ATOMIC(uint64_t) tickets;
  NRES_ATOMIC(uint64_t) lookups;
  NRES_ATOMIC(uint64_t) inserts;
  NRES_ATOMIC(uint64_t) evictions;
  NRES_ATOMIC(uint64_t) full;
  NRES_ATOMIC(uint64_t) races;
};

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

static uint64_t pack(unsigned state, uint32_t gen, uint64_t lease_ms) {
  return (uint64_t) state | (uint64_t) (gen & GEN_MASK) << 2 |
         lease_ms << LEASE_SHIFT;
}

/* Is the lease of word w over at now? LEASE_MAX is the end of time. */
static int expired(uint64_t w, nres_time_t now) {
  return LEASE(w) < LEASE_MAX && LEASE(w) * NRES_MSEC <= now;
}

static uint64_t lease_of(nres_time_t now, nres_time_t hold) {
  nres_time_t end;
  uint64_t ms;

  end = nres_time_add(now, hold);
  ms = end / NRES_MSEC + (end % NRES_MSEC != 0);
  return ms > LEASE_MAX ? LEASE_MAX : ms;
}

static entry_t *index_of(nres_shm_t *shm) {
  return (entry_t *) ((char *) shm + shm->index_at);
}

static nres_shm_slot_t *slot_at(nres_shm_t *shm, uint32_t i) {
  return (nres_shm_slot_t *) ((char *) shm + shm->slots_at +
                              (size_t) i * shm->stride);
}

/* FNV-1a over the padded key words, then a 64-bit finaliser so that the
 * set (high bits) and the tag (the rest) are both well mixed. */
static uint64_t hash_key(const uint64_t *k, size_t len) {
  const unsigned char *p = (const unsigned char *) k;
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i;

  for (i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

/* Key (len bytes) as KEY_WORDS padded words in k, its tag (hash, low 7
 * bits the length) in *tag; returns the first slot of its set. */
static uint32_t locate(const nres_shm_t *shm, const char *key, size_t len,
                       uint64_t *k, uint64_t *tag) {
  uint64_t h;

  memset(k, 0, KEY_WORDS * sizeof(*k));
  memcpy(k, key, len);
  h = hash_key(k, len);
  *tag = (h & ~(uint64_t) 0x7f) | len;
  return (uint32_t) (((h >> 32) * shm->sets) >> 32) * NRES_SHM_WAYS;
}

static int config_ok(const nres_shm_config_t *c) {
  nres_budget_t b;
  nres_breaker_t br;
  nres_ratelimit_t rl;
  nres_throttle_t th;

  if (c == NULL || c->slots == 0 || c->slots > NRES_SHM_MAX_SLOTS)
    return 0;
  if (c->flags & ~(uint32_t) (NRES_SHM_BUDGET | NRES_SHM_BREAKER |
                              NRES_SHM_RATELIMIT | NRES_SHM_THROTTLE))
    return 0;
  if ((c->flags & NRES_SHM_BUDGET) &&
      nres_budget_init(&b, c->budget_ratio, c->budget_min_per_sec,
                       c->budget_capacity) != 0)
    return 0;
  if ((c->flags & NRES_SHM_BREAKER) && nres_breaker_init(&br, &c->breaker) != 0)
    return 0;
  if ((c->flags & NRES_SHM_RATELIMIT) &&
      nres_ratelimit_init(&rl, c->rate, c->burst) != 0)
    return 0;
  if ((c->flags & NRES_SHM_THROTTLE) &&
      (nres_throttle_init(&th, c->throttle_k, c->throttle_window,
                          c->throttle_buckets) != 0 ||
       !(c->throttle_fast_failure >= 0 && c->throttle_fast_failure < 1)))
    return 0;
  return 1;
}

void nres_shm_config_init(nres_shm_config_t *config) {
  if (config == NULL)
    return;
  memset(config, 0, sizeof(*config));
  config->slots = 1024;
  config->flags = NRES_SHM_BUDGET | NRES_SHM_BREAKER;
  config->budget_ratio = 0.1;
  config->budget_min_per_sec = 3;
  config->budget_capacity = 0;
  nres_breaker_config_init(&config->breaker);
  config->rate = 100;
  config->burst = 1;
  config->throttle_k = 1.03;   /* the default preset's, when flagged */
  config->throttle_window = 300 * NRES_MSEC;
  config->throttle_buckets = 8;
}

/* Layout for `slots` (already rounded): header, index, slots. */
static size_t layout(uint32_t slots, size_t *index_at, size_t *slots_at,
                     size_t *stride) {
  *index_at = round_up(sizeof(nres_shm_t), ALIGN);
  *slots_at = round_up(*index_at + (size_t) slots * sizeof(entry_t), ALIGN);
  *stride = round_up(sizeof(nres_shm_slot_t), ALIGN);
  return *slots_at + (size_t) slots * *stride;
}

/* Is this a table of ours whose header agrees with itself? Every entry
 * point checks it (a few loads of one cache line), so a corrupted header
 * is refused rather than followed out of the region. Whether the region
 * is as long as the header says only nres_shm_attach can know. */
static int header_ok(const nres_shm_t *shm) {
  size_t index_at, slots_at, stride;

  if (shm == NULL || shm->magic != SHM_MAGIC || shm->version != SHM_VERSION)
    return 0;
  if (shm->slots == 0 || shm->slots > NRES_SHM_MAX_SLOTS ||
      shm->slots % NRES_SHM_WAYS != 0 ||
      shm->sets != shm->slots / NRES_SHM_WAYS ||
      shm->config.slots != shm->slots)
    return 0;
  return shm->size == layout(shm->slots, &index_at, &slots_at, &stride) &&
         shm->index_at == index_at && shm->slots_at == slots_at &&
         shm->stride == stride;
}

size_t nres_shm_size(const nres_shm_config_t *config) {
  size_t a, b, c;

  if (!config_ok(config))
    return 0;
  return layout((uint32_t) round_up(config->slots, NRES_SHM_WAYS), &a, &b, &c);
}

int nres_shm_init(void *mem, size_t size, const nres_shm_config_t *config) {
  nres_shm_t *shm = mem;
  size_t index_at, slots_at, stride, need;
  uint32_t slots;

  if (mem == NULL || ((uintptr_t) mem % ALIGN) != 0 || !config_ok(config))
    return NRES_EINVAL;
  slots = (uint32_t) round_up(config->slots, NRES_SHM_WAYS);
  need = layout(slots, &index_at, &slots_at, &stride);
  if (size < need)
    return NRES_EINVAL;

  memset(mem, 0, need);   /* every word FREE, every counter 0 */
  shm->version = SHM_VERSION;
  shm->size = need;
  shm->slots = slots;
  shm->sets = slots / NRES_SHM_WAYS;
  shm->mapped = 0;
  shm->stride = (uint32_t) stride;
  shm->index_at = index_at;
  shm->slots_at = slots_at;
  shm->config = *config;
  shm->config.slots = slots;
  atomic_store_explicit(&shm->tickets, 0, memory_order_relaxed);
  /* The magic last, published with release: a process that sees it sees
   * the layout. */
  atomic_thread_fence(memory_order_release);
  shm->magic = SHM_MAGIC;
  return 0;
}

int nres_shm_new(const nres_shm_config_t *config, nres_shm_t **out) {
  size_t size;
  void *mem;
  int rc;

  if (out == NULL)
    return NRES_EINVAL;
  *out = NULL;
  size = nres_shm_size(config);
  if (size == 0)
    return NRES_EINVAL;
  mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
  if (mem == MAP_FAILED)
    return NRES_ENOMEM;
  rc = nres_shm_init(mem, size, config);
  if (rc != 0) {
    munmap(mem, size);
    return rc;
  }
  ((nres_shm_t *) mem)->mapped = 1;
  *out = mem;
  return 0;
}

int nres_shm_attach(void *mem, size_t size, nres_shm_t **out) {
  nres_shm_t *shm = mem;

  if (out == NULL)
    return NRES_EINVAL;
  *out = NULL;
  if (mem == NULL || ((uintptr_t) mem % ALIGN) != 0 ||
      size < sizeof(nres_shm_t))
    return NRES_EINVAL;
  atomic_thread_fence(memory_order_acquire);   /* pairs with init's magic */
  if (!header_ok(shm) || shm->size > size || !config_ok(&shm->config))
    return NRES_EINVAL;
  *out = shm;
  return 0;
}

void nres_shm_free(nres_shm_t *shm) {
  if (!header_ok(shm) || !shm->mapped)
    return;
  munmap(shm, shm->size);
}

/* The key in slot i equals k (KEY_WORDS padded words)? Relaxed loads: the
 * caller validates them by re-reading the state word. */
static int key_equal(nres_shm_slot_t *s, const uint64_t *k) {
  int i;

  for (i = 0; i < KEY_WORDS; i++)
    if (nres__load(&s->key[i]) != k[i])
      return 0;
  return 1;
}

/* Does slot i hold key (k, tag) in state KEYED or LIVE? *w gets the word
 * it was true for; 0 if not (or if the slot changed under the read). */
static int holds(nres_shm_t *shm, uint32_t i, const uint64_t *k, uint64_t tag,
                 uint64_t *w) {
  entry_t *e = &index_of(shm)[i];
  uint64_t w1, w2;

  w1 = atomic_load(&e->word);   /* seq_cst: the settle scan depends on it */
  if (STATE(w1) < ST_KEYED || nres__load(&e->tag) != tag ||
      !key_equal(slot_at(shm, i), k))
    return 0;
  atomic_thread_fence(memory_order_acquire);
  w2 = atomic_load(&e->word);
  /* Same generation and still holding a key: the key read was one key. */
  if (GEN(w2) != GEN(w1) || STATE(w2) < ST_KEYED)
    return 0;
  *w = w2;
  return 1;
}

/* Fill a claimed slot: key, tag, ticket, fresh state and counters. */
static uint64_t fill(nres_shm_t *shm, uint32_t i, const uint64_t *k,
                     uint64_t tag, nres_time_t now) {
  nres_shm_slot_t *s = slot_at(shm, i);
  const nres_shm_config_t *c = &shm->config;
  uint64_t ticket;
  int j;

  for (j = 0; j < KEY_WORDS; j++)
    nres__store(&s->key[j], k[j]);
  nres__store(&index_of(shm)[i].tag, tag);
  HOOK(shm, NRES_SHM_STEP_FILLING);
  ticket = nres__add(&shm->tickets, 1) + 1;
  nres__store(&s->ticket, ticket);
  nres__store(&s->created, now);
  for (j = 0; j < NRES_STOP_COUNT; j++)
    nres__store(&s->stops[j], 0);
  for (j = 0; j < NRES_SHARDS; j++) {
    nres__store(&s->shard[j].calls, 0);
    nres__store(&s->shard[j].attempts, 0);
    nres__store(&s->shard[j].retries, 0);
    nres__store(&s->shard[j].ok, 0);
  }
  if (c->flags & NRES_SHM_BUDGET)
    nres_budget_init(&s->budget, c->budget_ratio, c->budget_min_per_sec,
                     c->budget_capacity);
  if (c->flags & NRES_SHM_BREAKER)
    nres_breaker_init(&s->breaker, &c->breaker);
  if (c->flags & NRES_SHM_RATELIMIT)
    nres_ratelimit_init(&s->ratelimit, c->rate, c->burst);
  if (c->flags & NRES_SHM_THROTTLE) {
    nres_throttle_init(&s->throttle, c->throttle_k, c->throttle_window,
                       c->throttle_buckets);
    s->throttle.fast_failure = c->throttle_fast_failure;
  }
  return ticket;
}

/* Give up a KEYED slot: FREE it unless a twin already did. */
static void abandon(entry_t *e, uint64_t mine) {
  uint64_t exp = mine;

  while (!nres__cas(&e->word, &exp, pack(ST_FREE, GEN(mine), LEASE(mine))))
    if (exp != mine)
      return;
}

/* After slot `me` was seen KEYED with word `mine` (published by us, or by
 * a claimer we are helping): look for a twin of the key in the rest of the
 * set. 1: `me` may go LIVE; 0: it lost (and is freed). */
static int settle(nres_shm_t *shm, uint32_t base, uint32_t me, uint64_t mine,
                  const uint64_t *k, uint64_t tag, uint64_t ticket) {
  entry_t *index = index_of(shm);
  uint64_t w, theirs;
  uint32_t i;

  for (i = base; i < base + NRES_SHM_WAYS; i++) {
    if (i == me)
      continue;
    while (holds(shm, i, k, tag, &w)) {
      if (STATE(w) == ST_LIVE) {
        abandon(&index[me], mine);
        HOOK(shm, NRES_SHM_STEP_ABANDONED);
        return 0;
      }
      /* Acquire: the word is read again after the ticket. */
      theirs = atomic_load_explicit(&slot_at(shm, i)->ticket,
                                    memory_order_acquire);
      if (atomic_load(&index[i].word) != w)
        continue;   /* moved while we read its ticket: look again */
      if (theirs < ticket) {
        abandon(&index[me], mine);
        HOOK(shm, NRES_SHM_STEP_ABANDONED);
        return 0;
      }
      /* Ours is older: free theirs. Its claimer's KEYED -> LIVE fails. */
      if (nres__cas(&index[i].word, &w, pack(ST_FREE, GEN(w), LEASE(w)))) {
        HOOK(shm, NRES_SHM_STEP_TWIN_FREED);
        break;
      }
    }
  }
  return 1;
}

/* Slot i holds our key KEYED (word w): its claimer may have been killed
 * there. Settle for it and, if it wins, make it LIVE with the CAS its
 * claimer would have made (the lease it was claimed with). */
static void help(nres_shm_t *shm, uint32_t base, uint32_t i, uint64_t w,
                 const uint64_t *k, uint64_t tag) {
  entry_t *e = &index_of(shm)[i];
  uint64_t ticket;

  HOOK(shm, NRES_SHM_STEP_HELP);
  ticket = atomic_load_explicit(&slot_at(shm, i)->ticket,
                                memory_order_acquire);
  if (atomic_load(&e->word) != w)
    return;   /* settled or taken meanwhile */
  if (!settle(shm, base, i, w, k, tag, ticket))
    return;
  if (atomic_compare_exchange_strong(&e->word, &w,
                                     pack(ST_LIVE, GEN(w), LEASE(w)))) {
    nres__add(&shm->inserts, 1);
    HOOK(shm, NRES_SHM_STEP_HELPED);
  }
}

int nres_shm_acquire(nres_shm_t *shm, const char *key, size_t len,
                     nres_time_t now, nres_time_t hold, uint32_t *gen) {
  uint64_t k[KEY_WORDS];
  uint64_t tag, w, want, lease, ticket, best_lease;
  uint32_t base, i, victim;
  entry_t *index;
  int round;

  if (!header_ok(shm) || key == NULL || len == 0 || len > NRES_SHM_KEY_MAX)
    return NRES_EINVAL;
  base = locate(shm, key, len, k, &tag);
  index = index_of(shm);
  want = lease_of(now, hold);

  for (round = 0; round < MAX_ROUNDS; round++) {
    if (round >= 8)
      sched_yield();   /* an insert of this set is stalled: let it run */

    /* Found: extend the lease if it would end before now + hold. A slot
     * found KEYED is finished first: its claimer may be gone. */
    for (i = base; i < base + NRES_SHM_WAYS; i++) {
      if (!holds(shm, i, k, tag, &w))
        continue;
      if (STATE(w) == ST_KEYED) {
        help(shm, base, i, w, k, tag);
        if (!holds(shm, i, k, tag, &w) || STATE(w) != ST_LIVE)
          continue;
      }
      HOOK(shm, NRES_SHM_STEP_FOUND);
      while (LEASE(w) < want) {
        lease = lease_of(now, nres_time_add(hold, hold));
        uint32_t g = GEN(w);
        if (nres__cas(&index[i].word, &w, pack(ST_LIVE, g, lease))) {
          HOOK(shm, NRES_SHM_STEP_EXTENDED);
          break;
        }
        if (STATE(w) != ST_LIVE || GEN(w) != g)
          goto next_round;   /* taken meanwhile (its lease had run out) */
      }
      nres__add(&shm->lookups, 1);
      if (gen != NULL)
        *gen = GEN(w);
      return (int) i;
    }

    /* Not found: claim a free slot, else the stalest one whose lease is
     * over (least recently leased first). */
    victim = UINT32_MAX;
    best_lease = UINT64_MAX;
    for (i = base; i < base + NRES_SHM_WAYS; i++) {
      w = nres__load(&index[i].word);
      if (STATE(w) == ST_FREE) {
        victim = i;
        break;
      }
      if (expired(w, now) && LEASE(w) < best_lease) {
        victim = i;
        best_lease = LEASE(w);
      }
    }
    if (victim == UINT32_MAX) {
      nres__add(&shm->full, 1);
      return NRES_EFULL;
    }
    w = nres__load(&index[victim].word);
    if (STATE(w) != ST_FREE && !expired(w, now))
      continue;   /* leased again since the scan */
    {
      uint64_t claim = lease_of(now, hold > CLAIM_HOLD ? hold : CLAIM_HOLD);
      uint64_t claimed = pack(ST_INIT, GEN(w) + 1, claim);
      uint64_t keyed = pack(ST_KEYED, GEN(w) + 1, claim);
      uint64_t exp;

      HOOK(shm, NRES_SHM_STEP_VICTIM);
      if (!nres__cas(&index[victim].word, &w, claimed))
        continue;
      HOOK(shm, NRES_SHM_STEP_CLAIMED);
      /* Seqlock writer: the claim is ordered before the key is written,
       * so a reader that reads any of the new key sees the new word. */
      atomic_thread_fence(memory_order_release);
      if (STATE(w) == ST_LIVE)
        nres__add(&shm->evictions, 1);
      ticket = fill(shm, victim, k, tag, now);
      HOOK(shm, NRES_SHM_STEP_FILLED);
      exp = claimed;
      if (!atomic_compare_exchange_strong(&index[victim].word, &exp, keyed))
        continue;   /* reclaimed as stale: we were stopped for a lease */
      HOOK(shm, NRES_SHM_STEP_KEYED);
      if (!settle(shm, base, victim, keyed, k, tag, ticket)) {
        nres__add(&shm->races, 1);
        continue;   /* a twin won: the next round finds it */
      }
      HOOK(shm, NRES_SHM_STEP_SETTLED);
      lease = pack(ST_LIVE, GEN(keyed), want);
      exp = keyed;
      if (atomic_compare_exchange_strong(&index[victim].word, &exp, lease)) {
        HOOK(shm, NRES_SHM_STEP_LIVE);
        nres__add(&shm->inserts, 1);
      } else if (STATE(exp) != ST_LIVE || GEN(exp) != GEN(keyed)) {
        nres__add(&shm->races, 1);
        continue;   /* an older twin freed ours */
      }
      /* else a lookup helped our slot LIVE (and counted the insert), with
       * the claim's lease, which covers `want`. */
      nres__add(&shm->lookups, 1);
      if (gen != NULL)
        *gen = GEN(keyed);
      return (int) victim;
    }
  next_round:;
  }
  return NRES_EBUSY;
}

int nres_shm_find(nres_shm_t *shm, const char *key, size_t len,
                  uint32_t *gen) {
  uint64_t k[KEY_WORDS];
  uint64_t tag, w;
  uint32_t base, i;

  if (!header_ok(shm) || key == NULL || len == 0 || len > NRES_SHM_KEY_MAX)
    return NRES_EINVAL;
  base = locate(shm, key, len, k, &tag);
  for (i = base; i < base + NRES_SHM_WAYS; i++) {
    if (holds(shm, i, k, tag, &w) && STATE(w) == ST_LIVE) {
      if (gen != NULL)
        *gen = GEN(w);
      return (int) i;
    }
  }
  return NRES_EAGAIN;
}

uint32_t nres_shm_slots(nres_shm_t *shm) {
  return header_ok(shm) ? shm->slots : 0;
}

nres_shm_slot_t *nres_shm_slot(nres_shm_t *shm, uint32_t index) {
  if (!header_ok(shm) || index >= shm->slots)
    return NULL;
  return slot_at(shm, index);
}

int nres_shm_key(nres_shm_t *shm, uint32_t index, char *buf, size_t cap,
                 uint32_t *gen, double *lease) {
  uint64_t k[KEY_WORDS];
  uint64_t w1, w2, tag;
  nres_shm_slot_t *s;
  entry_t *e;
  int i;

  if (!header_ok(shm) || index >= shm->slots || (buf == NULL && cap > 0))
    return NRES_EINVAL;
  e = &index_of(shm)[index];
  s = slot_at(shm, index);
  w1 = atomic_load_explicit(&e->word, memory_order_acquire);
  if (STATE(w1) != ST_LIVE)
    return NRES_EAGAIN;
  tag = nres__load(&e->tag);
  for (i = 0; i < KEY_WORDS; i++)
    k[i] = nres__load(&s->key[i]);
  atomic_thread_fence(memory_order_acquire);
  w2 = atomic_load_explicit(&e->word, memory_order_relaxed);
  if (STATE(w2) != ST_LIVE || GEN(w2) != GEN(w1))
    return NRES_EAGAIN;
  if (cap > 0)
    memcpy(buf, k, (tag & 0x7f) < cap ? (tag & 0x7f) : cap);
  if (gen != NULL)
    *gen = GEN(w2);
  if (lease != NULL)
    *lease = LEASE(w2) == LEASE_MAX ? (double) NRES_TIME_NEVER
                                    : (double) LEASE(w2) * (double) NRES_MSEC;
  return (int) (tag & 0x7f);
}

void nres_shm_slot_record(nres_shm_slot_t *s, int stop, uint32_t attempts,
                          uint32_t retries) {
  nres__shm_count(s, nres__shard(), stop, attempts, retries);
}

void nres_shm_slot_counts(const nres_shm_slot_t *slot, nres_shm_counts_t *out) {
  nres_shm_slot_t *s = (nres_shm_slot_t *) slot;   /* loads only */
  uint64_t ok = 0;

  *out = (nres_shm_counts_t){ 0 };
  if (s == NULL)
    return;   /* no slot (nres_shm_slot's NULL): nothing counted */
  for (unsigned k = 0; k < NRES_SHARDS; k++) {
    out->calls += nres__load(&s->shard[k].calls);
    out->attempts += nres__load(&s->shard[k].attempts);
    out->retries += nres__load(&s->shard[k].retries);
    ok += nres__load(&s->shard[k].ok);
  }
  for (unsigned j = 0; j < NRES_STOP_COUNT; j++)
    out->stops[j] = nres__load(&s->stops[j]);
  out->stops[NRES_STOP_OK] += ok;
}

void nres_shm_record(nres_shm_t *shm, uint32_t index, int stop,
                     uint32_t attempts, uint32_t retries) {
  nres_shm_slot_t *s = nres_shm_slot(shm, index);

  if (s != NULL)
    nres_shm_slot_record(s, stop, attempts, retries);
}

int nres_shm_limit(nres_shm_t *shm, uint32_t index, nres_time_t now,
                   double *retry_after) {
  nres_shm_slot_t *s = nres_shm_slot(shm, index);
  nres_time_t wait = 0;
  int rc;

  if (s == NULL || !(shm->config.flags & NRES_SHM_RATELIMIT))
    return NRES_EINVAL;
  rc = nres_ratelimit_acquire(&s->ratelimit, now, &wait);
  nres__add(&s->shard[nres__shard()].calls, 1);
  if (rc != 0)
    nres__add(&s->stops[NRES_STOP_LIMITED], 1);
  if (retry_after != NULL)
    *retry_after = rc == 0 ? 0 : (double) wait;
  return rc;
}

void nres_shm_stats(nres_shm_t *shm, nres_shm_stats_t *out) {
  entry_t *index;
  uint32_t i;

  if (out == NULL)
    return;
  memset(out, 0, sizeof(*out));
  if (!header_ok(shm))
    return;
  index = index_of(shm);
  out->slots = shm->slots;
  for (i = 0; i < shm->slots; i++)
    out->live += STATE(nres__load(&index[i].word)) == ST_LIVE;
  out->lookups = nres__load(&shm->lookups);
  out->inserts = nres__load(&shm->inserts);
  out->evictions = nres__load(&shm->evictions);
  out->full = nres__load(&shm->full);
  out->races = nres__load(&shm->races);
}

const nres_shm_config_t *nres_shm_config(nres_shm_t *shm) {
  if (!header_ok(shm))
    return NULL;
  return &shm->config;
}

size_t nres_shm_slot_size(void) {
  return sizeof(nres_shm_slot_t);
}

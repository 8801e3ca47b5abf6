/* SPDX-License-Identifier: MIT */
/* shm_ops.h - a byte string as a script of shm table operations, checked.
 *
 * nres_test_shm_ops(data, size) reads the bytes as a table configuration
 * and a sequence of operations on one process's virtual clock (lookups
 * with every kind of hold, rate-limit takes, counter records, key reads,
 * lookups of throwaway keys that force evictions, jumps of the clock up to
 * the end of time) and checks after each one what the table promises:
 * nothing but a slot index or NRES_EFULL from a lookup, the slot holding
 * the key it was returned for, a key whose lease has not ended never moved
 * or given a new generation, no key in two slots, at most `slots` keys,
 * NRES_EFULL only when every slot of a one-set table is leased, limiter
 * and counters answering as documented. A model of the keys it leased
 * (index, generation, lease end) is all it keeps. Returns 0 if every check
 * held, else the line of the first that failed (> 0).
 *
 * test_shm runs it on random scripts from a fixed seed; a libFuzzer target
 * wraps it as is: `return nres_test_shm_ops(data, size) ? abort(), 0 : 0;`.
 * Header only, no heap: the table lives in a static buffer.
 */
#ifndef NRES_TEST_SHM_OPS_H
#define NRES_TEST_SHM_OPS_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nres/shm.h"

#define SHM_OPS_KEYS 24                 /* modeled keys "k0".."k23" */
#define SHM_OPS_MEM (1u << 18)          /* enough for 64 slots */

#define SHM_OPS_CHECK(cond)                                                 \
  do {                                                                      \
    if (!(cond))                                                            \
      return __LINE__;                                                      \
  } while (0)

typedef struct {
  int held;                             /* ever returned */
  uint32_t idx;
  uint32_t gen;
  nres_time_t until;                    /* now + hold of the last lookup */
} shm_ops_key_t;

typedef struct {
  const uint8_t *data;
  size_t size;
  size_t at;
} shm_ops_in_t;

static inline uint8_t shm_ops_byte(shm_ops_in_t *in) {
  return in->at < in->size ? in->data[in->at++] : 0;
}

/* Keys still leased by the model must sit where they were, same
 * generation; no key may be in two slots of its set; live <= slots. */
static inline int shm_ops_check_table(nres_shm_t *shm, uint32_t slots,
                                      const shm_ops_key_t *model,
                                      nres_time_t now) {
  char keys[NRES_SHM_WAYS][NRES_SHM_KEY_MAX];
  int lens[NRES_SHM_WAYS];
  char buf[NRES_SHM_KEY_MAX];
  nres_shm_stats_t st;
  uint32_t gen, i, j, set;
  int k, n;

  for (k = 0; k < SHM_OPS_KEYS; k++) {
    if (!model[k].held || model[k].until <= now)
      continue;
    n = nres_shm_key(shm, model[k].idx, buf, sizeof(buf), &gen, NULL);
    SHM_OPS_CHECK(n == snprintf(keys[0], sizeof(keys[0]), "k%d", k));
    SHM_OPS_CHECK(memcmp(buf, keys[0], (size_t) n) == 0);
    SHM_OPS_CHECK(gen == model[k].gen);
  }
  for (set = 0; set < slots; set += NRES_SHM_WAYS) {
    for (i = 0; i < NRES_SHM_WAYS; i++) {
      lens[i] = nres_shm_key(shm, set + i, keys[i], NRES_SHM_KEY_MAX, NULL,
                             NULL);
      SHM_OPS_CHECK(lens[i] == NRES_EAGAIN ||
                    (lens[i] >= 2 && lens[i] <= 6 &&
                     (keys[i][0] == 'k' || keys[i][0] == 'z')));
      for (j = 0; j < i; j++)
        SHM_OPS_CHECK(lens[i] < 0 || lens[j] != lens[i] ||
                      memcmp(keys[i], keys[j], (size_t) lens[i]) != 0);
    }
  }
  nres_shm_stats(shm, &st);
  SHM_OPS_CHECK(st.slots == slots && st.live <= slots);
  return 0;
}

/* NRES_EFULL from a one-set table: every slot held a key leased past now.
 * (Leases are reported as doubles; >= keeps the check from misfiring on
 * rounding near 2^63 ns.) */
static inline int shm_ops_check_full(nres_shm_t *shm, uint32_t slots,
                                     nres_time_t now) {
  double lease;
  uint32_t i;

  if (slots != NRES_SHM_WAYS)
    return 0;
  for (i = 0; i < slots; i++) {
    SHM_OPS_CHECK(nres_shm_key(shm, i, NULL, 0, NULL, &lease) > 0);
    SHM_OPS_CHECK(lease >= (double) now);
  }
  return 0;
}

static inline int nres_test_shm_ops(const uint8_t *data, size_t size) {
  static _Alignas(64) unsigned char mem[SHM_OPS_MEM];
  static const nres_time_t holds[8] = {
    0, 1, NRES_USEC, NRES_MSEC, NRES_SEC, 10 * NRES_SEC,
    (nres_time_t) 1 << 63, NRES_TIME_NEVER
  };
  static const nres_time_t steps[8] = {
    0, 1, 999 * NRES_USEC, NRES_MSEC, 500 * NRES_MSEC, NRES_SEC,
    11 * NRES_SEC, 3600 * NRES_SEC
  };
  static const nres_time_t jumps[4] = {
    (nres_time_t) 1 << 32, (nres_time_t) 1 << 42, (nres_time_t) 1 << 62,
    NRES_TIME_NEVER
  };
  static const nres_time_t starts[4] = {
    0, 1, 1000 * NRES_SEC, (nres_time_t) 1 << 62
  };
  shm_ops_key_t model[SHM_OPS_KEYS];
  shm_ops_in_t in = { data, size, 0 };
  nres_shm_config_t c;
  nres_shm_slot_t *s;
  nres_shm_t *shm;
  nres_time_t now;
  uint64_t before;
  nres_shm_counts_t counts;
  uint32_t slots, gen;
  uint8_t b0, b1, b2;
  char key[16];
  double wait;
  int rc, k, err;
  unsigned z = 0;

  b0 = shm_ops_byte(&in);
  nres_shm_config_init(&c);
  c.slots = (uint32_t[]) { 8, 8, 16, 64 }[b0 & 3];
  c.flags = NRES_SHM_BUDGET | NRES_SHM_BREAKER | NRES_SHM_RATELIMIT;
  c.rate = (double[]) { 1e-300, 1, 100, 1e300 }[(b0 >> 2) & 3];
  c.burst = (uint32_t[]) { 1, 2, 50, UINT32_MAX }[(b0 >> 4) & 3];
  now = starts[(b0 >> 6) & 3];
  slots = c.slots;
  SHM_OPS_CHECK(nres_shm_size(&c) > 0 && nres_shm_size(&c) <= sizeof(mem));
  SHM_OPS_CHECK(nres_shm_init(mem, sizeof(mem), &c) == 0);
  SHM_OPS_CHECK(nres_shm_attach(mem, sizeof(mem), &shm) == 0);
  memset(model, 0, sizeof(model));

  while (in.at < in.size) {
    b0 = shm_ops_byte(&in);
    b1 = shm_ops_byte(&in);
    b2 = shm_ops_byte(&in);
    k = b1 % SHM_OPS_KEYS;
    now = nres_time_add(now, steps[b2 & 7]);
    switch (b0 & 7) {
    case 0:
    case 1:
    case 2: {   /* a lookup of a modeled key */
      nres_time_t hold = holds[(b2 >> 3) & 7];
      int leased = model[k].held && model[k].until > now;

      snprintf(key, sizeof(key), "k%d", k);
      rc = nres_shm_acquire(shm, key, strlen(key), now, hold, &gen);
      SHM_OPS_CHECK(rc == NRES_EFULL || (rc >= 0 && (uint32_t) rc < slots));
      if (rc == NRES_EFULL) {
        SHM_OPS_CHECK(!leased);   /* a leased key is found, never refused */
        err = shm_ops_check_full(shm, slots, now);
        if (err != 0)
          return err;
        break;
      }
      if (leased)
        SHM_OPS_CHECK((uint32_t) rc == model[k].idx && gen == model[k].gen);
      if (!leased || nres_time_add(now, hold) > model[k].until)
        model[k].until = nres_time_add(now, hold);
      model[k].held = 1;
      model[k].idx = (uint32_t) rc;
      model[k].gen = gen;
      break;
    }
    case 3:     /* a rate-limit take on a key we lease */
      if (!model[k].held || model[k].until <= now)
        break;
      s = nres_shm_slot(shm, model[k].idx);
      SHM_OPS_CHECK(s != NULL);
      nres_shm_slot_counts(s, &counts);
      before = counts.calls;
      wait = -1;
      rc = nres_shm_limit(shm, model[k].idx, now, &wait);
      SHM_OPS_CHECK((rc == 0 && wait == 0) ||
                    (rc == NRES_ELIMITED && wait > 0 && isfinite(wait)));
      nres_shm_slot_counts(s, &counts);
      SHM_OPS_CHECK(counts.calls == before + 1);
      break;
    case 4:     /* the clock jumps, up to the end of time */
      now = nres_time_add(now, jumps[b1 & 3]);
      break;
    case 5:     /* a status page reads a slot */
      rc = nres_shm_key(shm, (uint32_t) b1 % (slots + 1), key, sizeof(key),
                        NULL, NULL);
      SHM_OPS_CHECK(rc == NRES_EAGAIN || (rc >= 2 && rc <= 6) ||
                    (rc == NRES_EINVAL && b1 % (slots + 1) == slots));
      break;
    case 6:     /* a call's end recorded on a key we lease */
      if (!model[k].held || model[k].until <= now)
        break;
      s = nres_shm_slot(shm, model[k].idx);
      SHM_OPS_CHECK(s != NULL);
      nres_shm_slot_counts(s, &counts);
      before = counts.attempts;
      nres_shm_record(shm, model[k].idx, (int) (b2 % (NRES_STOP_COUNT + 2)) - 1,
                      b2, 1);
      nres_shm_slot_counts(s, &counts);
      SHM_OPS_CHECK(counts.attempts == before + b2);
      break;
    default:    /* a throwaway key held for no time: pressure to evict */
      snprintf(key, sizeof(key), "z%u", z++ % 1000);
      rc = nres_shm_acquire(shm, key, strlen(key), now, 0, NULL);
      SHM_OPS_CHECK(rc == NRES_EFULL || (rc >= 0 && (uint32_t) rc < slots));
      if (rc == NRES_EFULL) {
        err = shm_ops_check_full(shm, slots, now);
        if (err != 0)
          return err;
      }
      break;
    }
    err = shm_ops_check_table(shm, slots, model, now);
    if (err != 0)
      return err;
  }
  return 0;
}

#endif /* NRES_TEST_SHM_OPS_H */

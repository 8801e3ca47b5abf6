/* SPDX-License-Identifier: MIT */
/* fuzz_sync_reply.c - libFuzzer target for the fleet agent's reply checks
 * (runtime/src/sync/reply.c): what a Redis, a proxy or a foreign key under
 * the agent's name may answer to a round's script.
 *
 * Input: byte 0 picks the kind (budget, rate, breaker) and bytes 1..4 its
 * bound (capacity, fleet rate, longest break); the rest is RESP, read by
 * hiredis's reply reader with the agent's bounded reply objects, exactly
 * as the agent's connection reads it, one reply after another. Every reply must give either NRES_ESTATE with a
 * one-line reason (NUL-terminated, naming a reply) or figures within the
 * ranges the agent applies without a further check: shares within
 * [0, capacity], levels within [-capacity, capacity], a finite quota within
 * [0, fleet rate], host counts >= 1, open hosts <= voters, a break no
 * longer than the bound.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sync/sync_int.h"
#include "fuzz_input.h"

static void check(int kind, uint32_t bound, const redisReply *r) {
  char why[NRES__SYNC_LINE_MAX];
  int rc;

  memset(why, 0x5a, sizeof(why));
  why[sizeof(why) - 1] = '\0';
  if (kind == 0) {
    nres__budget_reply_t a;
    int64_t cap = (int64_t) bound * 1000;

    rc = nres__sync_budget_reply(r, cap, &a, why, sizeof(why));
    if (rc == 0) {
      FUZZ_CHECK(a.share >= 0 && a.share <= cap);
      FUZZ_CHECK(a.level >= -cap && a.level <= cap);
      FUZZ_CHECK(a.hosts >= 1);
      FUZZ_CHECK(isfinite(a.weight) && a.weight >= 0 && a.weight <= 1);
    }
  } else if (kind == 1) {
    nres__rate_reply_t a;
    double rate = (double) (bound % 1000000 + 1) / 7;

    rc = nres__sync_rate_reply(r, rate, &a, why, sizeof(why));
    if (rc == 0) {
      FUZZ_CHECK(isfinite(a.quota) && a.quota >= 0 && a.quota <= rate);
      FUZZ_CHECK(isfinite(a.sum) && a.sum >= 0);
      FUZZ_CHECK(a.hosts >= 1);
    }
  } else {
    nres__breaker_reply_t a;

    rc = nres__sync_breaker_reply(r, (int64_t) bound, &a, why, sizeof(why));
    if (rc == 0) {
      FUZZ_CHECK(a.state >= 0 && a.state <= 2);
      FUZZ_CHECK(a.until_ms >= 0 && a.until_ms - a.now_ms <= (int64_t) bound);
      FUZZ_CHECK(a.prober == 0 || a.prober == 1);
      FUZZ_CHECK(a.live == 0 || a.live == 1);
      FUZZ_CHECK(a.open <= a.voters);
      FUZZ_CHECK(a.lapsed_ms >= 0 && a.lapsed_ms <= a.now_ms);
    }
  }
  FUZZ_CHECK(rc == 0 || rc == NRES_ESTATE);
  if (rc != 0) {
    FUZZ_CHECK(strlen(why) < sizeof(why) - 1);   /* written, one line */
    FUZZ_CHECK(strstr(why, "reply") != NULL);
    FUZZ_CHECK(strchr(why, '\n') == NULL && strchr(why, '\r') == NULL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  redisReader *rd;
  void *reply;
  uint32_t bound;
  int kind, n;

  if (size < 5)
    return 0;
  kind = data[0] % 3;
  memcpy(&bound, data + 1, 4);
  rd = redisReaderCreateWithFunctions(nres__sync_reply_functions());
  if (rd == NULL)
    return 0;
  if (redisReaderFeed(rd, (const char *) data + 5, size - 5) == REDIS_OK) {
    for (n = 0; n < 64; n++) {
      reply = NULL;
      if (redisReaderGetReply(rd, &reply) != REDIS_OK || reply == NULL)
        break;
      check(kind, bound, reply);
      freeReplyObject(reply);
    }
  }
  redisReaderFree(rd);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* breaker.c - the circuit breaker: stop calling a dependency that is down.
 *
 * CLOSED admits everything and watches outcomes: a run of `consecutive`
 * failures, or a failure (or slow-call) ratio over the sliding window once
 * it holds `min_calls` calls, trips it OPEN (the success that brings the
 * window to min_calls too, when the ratio is over then). OPEN refuses everything for a
 * break (break_for, doubling per reopening up to break_max, shortened at
 * random by up to break_jitter so that many breakers do not retry in step).
 * When the break is over the next caller turns it HALF_OPEN and becomes a
 * probe; at most `probes` probes run at once, `success_threshold` probe
 * successes close it and one failure reopens it. ISOLATED is an operator's
 * OPEN that only reset ends.
 *
 * The whole state machine is one atomic 64-bit word, so a transition is one
 * compare-and-swap and no thread can see, say, a half-open state with the
 * probe count of another generation (resilience4j #1432 admitted more
 * probes than configured by keeping them apart). From bit 0:
 *
 *   bits  0-1   state (nres_breaker_state_t)
 *   bits  2-9   probe permits in use (config.probes <= 255)
 *   bits 10-17  probe successes in this half-open period (threshold <= 255)
 *   bits 18-25  generation: bumped on each entry to HALF_OPEN and kept
 *               through every other transition. A probe permit is
 *               generation + 1 (never 0), so a permit from an earlier
 *               half-open period is recognised as stale and ignored.
 *   bits 26-63  CLOSED: bit 26 is NRES__BREAKER_RATIO_DUE (breaker.h),
 *               the rest 0; OPEN: open-until; HALF_OPEN: lease-until, the moment the
 *               probe permits out lapse (config.lease after the latest was
 *               taken). In ms, modulo 2^38. Compared with wrapping
 *               arithmetic (a break is far shorter than 2^37 ms, 4.3 years),
 *               so any epoch works: nanoseconds since boot or since 1970
 *               (ngx.now) alike. It is rounded up, never admitting early.
 *
 * Every probe permit has a lease (docs/leases.md). A holder that dies,
 * hangs or never reports does not keep the breaker half-open: once all
 * `probes` permits are out and lease-until has passed, the next caller
 * takes their place in one CAS (the probe count goes back to one, its own)
 * and leases_expired counts the lapsed ones. The generation stays, so a
 * lapsed probe that reports late is still heard: its outcome is news of
 * the dependency. No thread watches the clock; the reclaim happens in
 * acquire, off the closed hot path.
 *
 * The hot path, acquire while CLOSED, is one relaxed load and no write.
 * Counters (current failure run, break level, trips, refusals) and the
 * window sit beside the word; they steer decisions but never decide a
 * transition on their own, so they can be updated without a lock.
 */
#include "core/breaker.h"

#define PROBE_ONE (1ull << 2)
#define SUCCESS_ONE (1ull << 10)
#define UNTIL_SHIFT 26
#define UNTIL_MASK ((1ull << 38) - 1)
#define UNTIL_HALF (1ull << 37)

#define STATE(w) NRES__BREAKER_STATE(w)
#define PROBES(w) ((uint32_t) (((w) >> 2) & 0xff))
#define SUCCESSES(w) ((uint32_t) (((w) >> 10) & 0xff))
#define GEN(w) ((uint32_t) (((w) >> 18) & 0xff))
#define UNTIL(w) ((w) >> UNTIL_SHIFT)

/* Longest break: well inside the half of the ms ring that reads "later". */
#define BREAK_LIMIT ((UNTIL_HALF - 2) * NRES_MSEC)

static uint64_t pack(unsigned state, uint32_t gen, uint64_t until_ms) {
  return (uint64_t) state | (uint64_t) (gen & 0xff) << 18 |
         (until_ms & UNTIL_MASK) << UNTIL_SHIFT;
}

static int time_up(uint64_t w, nres_time_t now) {
  return ((now / NRES_MSEC - UNTIL(w)) & UNTIL_MASK) < UNTIL_HALF;
}

/* The break before the next half-open period, for the level-th opening
 * since it last closed: break_for * 2^level, capped, then jittered down. */
static nres_time_t break_duration(const nres_breaker_config_t *config,
                                  uint32_t level, nres_rng_t *rng) {
  nres_time_t d;
  double j;

  d = config->break_for;
  if (level >= 64 || d > (config->break_max >> level))
    d = config->break_max;
  else
    d <<= level;
  if (d > config->break_max)
    d = config->break_max;

  /* Jitter after the cap, so capped breaks still spread out. */
  if (config->break_jitter > 0 && rng != NULL) {
    j = (double) d * (1.0 - config->break_jitter * nres_rng_unit(rng));
    if (nres__time_from_double(j) < d)
      d = nres__time_from_double(j);
  }
  if (d > BREAK_LIMIT)
    d = BREAK_LIMIT;
  return d;
}

/* ns to the ms the word keeps, rounded up. */
static uint64_t ms_up(nres_time_t t) {
  return t / NRES_MSEC + (t % NRES_MSEC != 0);
}

/* The OPEN word for a break of d from now: open-until rounded up to the
 * ms, so the breaker never admits a moment early. */
static uint64_t open_word(uint32_t gen, nres_time_t now, nres_time_t d) {
  return pack(NRES_BREAKER_OPEN, gen, ms_up(nres_time_add(now, d)));
}

/* A probe permit's lease (config.lease, or break_for when 0), capped like
 * a break so that lease-until reads "later" on the ms ring. */
static nres_time_t lease_of(const nres_breaker_config_t *config) {
  nres_time_t d = config->lease != 0 ? config->lease : config->break_for;
  return d > BREAK_LIMIT ? BREAK_LIMIT : d;
}

/* The HALF_OPEN word of generation gen with `probes` permits out and
 * `successes` so far, whose permits lapse a lease after now. */
static uint64_t half_open_word(const nres_breaker_config_t *config,
                               uint32_t gen, uint32_t probes,
                               uint32_t successes, nres_time_t now) {
  return pack(NRES_BREAKER_HALF_OPEN, gen,
              ms_up(nres_time_add(now, lease_of(config)))) +
         probes * PROBE_ONE + successes * SUCCESS_ONE;
}

/* Enter OPEN from exactly the word `w`; 0 if the word has changed (the
 * caller looks again). The word first goes OPEN for the longest break
 * there is (break_max), and only the winner of that CAS takes a break
 * level and writes the real open-until. So the level a break is computed
 * from is the number of openings before it, however threads interleave;
 * and if the winner dies in between (a worker killed while the state
 * sits in shared memory) the breaker still half-opens after break_max. */
static int open_from(nres_breaker_t *breaker, uint64_t w, nres_time_t now,
                     nres_rng_t *rng) {
  nres_time_t longest;
  uint64_t held;
  uint64_t target;
  uint64_t exp;
  uint32_t level;

  longest = breaker->config.break_max;
  if (longest > BREAK_LIMIT)
    longest = BREAK_LIMIT;
  held = open_word(GEN(w), now, longest);
  exp = w;
  while (!nres__cas(&breaker->word, &exp, held))
    if (exp != w)
      return 0;   /* not a spurious failure: someone else moved it */

  nres__add(&breaker->trips, 1);
  level = nres__add(&breaker->level, 1);
  target = open_word(GEN(w), now,
                     break_duration(&breaker->config, level, rng));
  exp = held;
  while (!nres__cas(&breaker->word, &exp, target))
    if (exp != held)
      break;   /* isolated, reset or half-open meanwhile: theirs wins */
  return 1;
}

static void close_from_scratch(nres_breaker_t *breaker) {
  nres__store(&breaker->consecutive, 0);
  nres__store(&breaker->level, 0);
  nres_window_clear(&breaker->window);
}

void nres_breaker_config_init(nres_breaker_config_t *config) {
  config->consecutive = 5;
  config->min_calls = 20;
  config->failure_ratio = 0.5;
  config->slow_ratio = 0;
  config->window = 30 * NRES_SEC;
  config->buckets = 10;
  config->probes = 1;
  config->success_threshold = 2;
  config->reserved_ = 0;
  config->break_for = 15 * NRES_SEC;
  config->break_max = 120 * NRES_SEC;
  config->break_jitter = 0.1;
  config->lease = 0;
}

const char *nres_breaker_config_error(const nres_breaker_config_t *config) {
  if (config == NULL)
    return "breaker: NULL config";
  if (!(config->failure_ratio >= 0 && config->failure_ratio <= 1))
    return "breaker.failure_ratio: must be in [0, 1]";
  if (!(config->slow_ratio >= 0 && config->slow_ratio <= 1))
    return "breaker.slow_ratio: must be in [0, 1]";
  /* Both counts live in 8 bits of the state word. */
  if (config->probes < 1 || config->probes > 255)
    return "breaker.probes: must be 1..255";
  if (config->success_threshold < 1 || config->success_threshold > 255)
    return "breaker.success_threshold: must be 1..255";
  if (config->break_for == NRES_TIME_INVALID)
    return "breaker.break_for: not a number or negative";
  if (config->break_max == NRES_TIME_INVALID)
    return "breaker.break_max: not a number or negative";
  if (config->break_for == 0)
    return "breaker.break_for: must be > 0";
  if (config->break_max < config->break_for)
    return "breaker.break_max: below breaker.break_for";
  if (!(config->break_jitter >= 0 && config->break_jitter < 1))
    return "breaker.break_jitter: must be in [0, 1)";
  if (config->lease == NRES_TIME_INVALID)
    return "breaker.lease: not a number or negative";
  if (config->lease > config->break_for)
    return "breaker.lease: above breaker.break_for";
  if (config->window == NRES_TIME_INVALID)
    return "breaker.window: not a number or negative";
  if (config->window == 0)
    return "breaker.window: must be > 0";
  if (config->buckets < 1 || config->buckets > NRES_WINDOW_MAX_BUCKETS)
    return "breaker.buckets: must be 1..16";
  if (config->window / config->buckets == 0)
    return "breaker.window: shorter than 1 ns per bucket";
  return NULL;
}

int nres_breaker_init(nres_breaker_t *breaker,
                      const nres_breaker_config_t *config) {
  if (breaker == NULL || nres_breaker_config_error(config) != NULL)
    return NRES_EINVAL;
  if (nres_window_init(&breaker->window, config->window, config->buckets))
    return NRES_EINVAL;

  breaker->config = *config;
  nres__store(&breaker->word, pack(NRES_BREAKER_CLOSED, 0, 0));
  nres__store(&breaker->consecutive, 0);
  nres__store(&breaker->level, 0);
  nres__store(&breaker->trips, 0);
  nres__store(&breaker->rejected, 0);
  nres__store(&breaker->leases_expired, 0);
  return 0;
}

int nres_breaker_acquire(nres_breaker_t *breaker, nres_time_t now,
                         uint32_t *permit) {
  const nres_breaker_config_t *c;
  uint64_t w;
  uint64_t n;
  uint32_t lapsed;

  if (breaker == NULL || permit == NULL)
    return NRES_EINVAL;

  c = &breaker->config;
  w = nres__load(&breaker->word);
  for (;;) {
    lapsed = 0;
    switch (STATE(w)) {
      case NRES_BREAKER_CLOSED:
        *permit = 0;
        return 0;
      case NRES_BREAKER_OPEN:
        if (!time_up(w, now))
          goto refuse;
        /* First caller after the break: a new generation, one probe. */
        n = half_open_word(c, GEN(w) + 1, 1, 0, now);
        break;
      case NRES_BREAKER_HALF_OPEN:
        if (PROBES(w) >= c->probes) {
          if (!time_up(w, now))
            goto refuse;
          /* Every permit out has lapsed: this caller takes their place. */
          lapsed = PROBES(w);
          n = half_open_word(c, GEN(w), 1, SUCCESSES(w), now);
        } else {
          n = half_open_word(c, GEN(w), PROBES(w) + 1, SUCCESSES(w), now);
        }
        break;
      default:
        goto refuse;
    }
    if (nres__cas(&breaker->word, &w, n)) {
      if (lapsed != 0)
        nres__add(&breaker->leases_expired, lapsed);
      *permit = GEN(n) + 1;
      return 0;
    }
  }

refuse:
  *permit = 0;
  nres__add(&breaker->rejected, 1);
  return NRES_ECIRCUIT;
}

/* Set (due != 0) or clear NRES__BREAKER_RATIO_DUE in a CLOSED word. */
static void ratio_due(nres_breaker_t *breaker, int due) {
  uint64_t w = nres__load(&breaker->word);

  while (STATE(w) == NRES_BREAKER_CLOSED &&
         ((w & NRES__BREAKER_RATIO_DUE) != 0) != (due != 0))
    if (nres__cas(&breaker->word, &w, w ^ NRES__BREAKER_RATIO_DUE))
      return;
}

/* Are failures (or slow calls) over their ratio of these calls? */
static int over(const nres_breaker_config_t *c, uint32_t calls,
                uint32_t failures, uint32_t slow) {
  return (c->failure_ratio > 0 &&
          (double) failures >= c->failure_ratio * calls) ||
         (c->slow_ratio > 0 && (double) slow >= c->slow_ratio * calls);
}

/* Did the window's ratios cross a threshold? With fewer than min_calls
 * calls, no; but if the failures (or slow calls) already there would be
 * over the ratio of min_calls, the success that brings the window to
 * min_calls must trip it, as resilience4j's does: the word says so
 * (NRES__BREAKER_RATIO_DUE), and successes take the long way, here,
 * until the window holds min_calls or those failures have left it. */
static int ratio_tripped(nres_breaker_t *breaker, nres_time_t now,
                         uint64_t w) {
  const nres_breaker_config_t *c = &breaker->config;
  uint32_t calls, failures, slow;
  int due;

  nres_window_sum(&breaker->window, now, &calls, &failures, &slow);
  if (calls < c->min_calls || calls == 0) {
    due = c->min_calls > 0 && over(c, c->min_calls, failures, slow);
    if (due != ((w & NRES__BREAKER_RATIO_DUE) != 0))
      ratio_due(breaker, due);
    return 0;
  }
  if (w & NRES__BREAKER_RATIO_DUE)
    ratio_due(breaker, 0);
  return over(c, calls, failures, slow);
}

/* A probe's outcome. A slow probe is a failed one when slowness can trip
 * the breaker: closing on it would only trip again min_calls later. */
static int record_probe(nres_breaker_t *breaker, nres_time_t now,
                        uint32_t permit, int failed, nres_rng_t *rng) {
  uint64_t w;
  uint64_t n;

  w = nres__load(&breaker->word);
  for (;;) {
    if (STATE(w) != NRES_BREAKER_HALF_OPEN || GEN(w) + 1 != permit ||
        PROBES(w) == 0)
      return -1;   /* stale: its half-open period is over */
    if (failed) {
      if (open_from(breaker, w, now, rng))
        return NRES_BREAKER_OPEN;
      w = nres__load(&breaker->word);
      continue;
    }
    if (SUCCESSES(w) + 1 >= breaker->config.success_threshold) {
      n = pack(NRES_BREAKER_CLOSED, GEN(w), 0);
      if (nres__cas(&breaker->word, &w, n)) {
        close_from_scratch(breaker);
        return NRES_BREAKER_CLOSED;
      }
    } else {
      n = w - PROBE_ONE + SUCCESS_ONE;
      if (nres__cas(&breaker->word, &w, n))
        return -1;
    }
  }
}

/* An outcome of a call admitted while closed. */
static int record_closed(nres_breaker_t *breaker, nres_time_t now,
                         int failure, int slow, nres_rng_t *rng) {
  const nres_breaker_config_t *c = &breaker->config;
  uint64_t w;
  uint32_t run;
  int ratios;
  int trip;

  w = nres__load(&breaker->word);
  if (STATE(w) != NRES_BREAKER_CLOSED)
    return -1;   /* it tripped while this call ran: old news */

  ratios = c->failure_ratio > 0 || c->slow_ratio > 0;
  trip = 0;
  if (!failure) {
    /* Success traffic is the common case: write only when it changes. */
    if (nres__load(&breaker->consecutive) != 0)
      nres__store(&breaker->consecutive, 0);
    if (ratios)
      nres_window_add(&breaker->window, now, 0, slow);
    if ((slow && c->slow_ratio > 0) || (w & NRES__BREAKER_RATIO_DUE))
      trip = ratio_tripped(breaker, now, w);
  } else {
    run = nres__add(&breaker->consecutive, 1) + 1;
    if (ratios)
      nres_window_add(&breaker->window, now, 1, slow);
    trip = (c->consecutive > 0 && run >= c->consecutive) ||
           (ratios && ratio_tripped(breaker, now, w));
  }
  if (!trip)
    return -1;
  /* A closed word only changes when the state does, so this loop ends as
   * soon as some thread has tripped it (or isolated it). */
  while (STATE(w) == NRES_BREAKER_CLOSED) {
    if (open_from(breaker, w, now, rng))
      return NRES_BREAKER_OPEN;
    w = nres__load(&breaker->word);
  }
  return -1;
}

/* Every outcome but the common case (breaker.h). Out of line, so that the
 * common case saves no registers. */
__attribute__((noinline)) int nres__breaker_record_other(
    nres_breaker_t *breaker, nres_time_t now, uint32_t permit, int outcome,
    int slow, nres_rng_t *rng) {
  int failed;

  /* IGNORE, and anything unknown: free the permit so a half-open breaker
   * can never be left waiting for a probe that will not report. */
  if (outcome != NRES_BREAKER_SUCCESS && outcome != NRES_BREAKER_FAILURE) {
    nres_breaker_release(breaker, permit);
    return -1;
  }
  if (permit != 0) {
    failed = outcome == NRES_BREAKER_FAILURE ||
             (slow && breaker->config.slow_ratio > 0);
    return record_probe(breaker, now, permit, failed, rng);
  }
  return record_closed(breaker, now, outcome == NRES_BREAKER_FAILURE, slow,
                       rng);
}

int nres_breaker_record(nres_breaker_t *breaker, nres_time_t now,
                        uint32_t permit, int outcome, int slow,
                        nres_rng_t *rng) {
  if (breaker == NULL)
    return NRES_EINVAL;
  return nres__breaker_record(breaker, now, permit, outcome, slow, rng);
}

void nres_breaker_release(nres_breaker_t *breaker, uint32_t permit) {
  uint64_t w;

  if (breaker == NULL || permit == 0)
    return;
  w = nres__load(&breaker->word);
  while (STATE(w) == NRES_BREAKER_HALF_OPEN && GEN(w) + 1 == permit &&
         PROBES(w) > 0)
    if (nres__cas(&breaker->word, &w, w - PROBE_ONE))
      return;
}

int nres_breaker_state(const nres_breaker_t *breaker, nres_time_t now) {
  uint64_t w;

  if (breaker == NULL)
    return NRES_EINVAL;
  w = nres__load(&breaker->word);
  if (STATE(w) == NRES_BREAKER_OPEN && time_up(w, now))
    return NRES_BREAKER_HALF_OPEN;
  return (int) STATE(w);
}

void nres_breaker_isolate(nres_breaker_t *breaker) {
  uint64_t w;

  w = nres__load(&breaker->word);
  while (!nres__cas(&breaker->word, &w,
                    pack(NRES_BREAKER_ISOLATED, GEN(w), 0)))
    ;
}

void nres_breaker_reset(nres_breaker_t *breaker) {
  uint64_t w;

  w = nres__load(&breaker->word);
  while (!nres__cas(&breaker->word, &w, pack(NRES_BREAKER_CLOSED, GEN(w), 0)))
    ;
  close_from_scratch(breaker);
}

const char *nres_breaker_state_name(int state) {
  switch (state) {
    case NRES_BREAKER_CLOSED: return "closed";
    case NRES_BREAKER_OPEN: return "open";
    case NRES_BREAKER_HALF_OPEN: return "half-open";
    case NRES_BREAKER_ISOLATED: return "isolated";
  }
  return "unknown";
}

void nres_breaker_stats(const nres_breaker_t *breaker,
                        nres_breaker_stats_t *out) {
  nres_breaker_t *b = (nres_breaker_t *) breaker;   /* loads only */
  uint64_t w = nres__load(&b->word);

  out->state = STATE(w);
  out->probes = PROBES(w);
  out->successes = SUCCESSES(w);
  out->consecutive = nres__load(&b->consecutive);
  out->level = nres__load(&b->level);
  out->reserved_ = 0;
  out->trips = nres__load(&b->trips);
  out->rejected = nres__load(&b->rejected);
  out->leases_expired = nres__load(&b->leases_expired);
}

/* For the fleet sync agent (nres/sync.h): read, impose and lift a break
 * decided elsewhere. Every change is one CAS on the word, like the rest. */

int nres_breaker_peek(const nres_breaker_t *breaker, nres_time_t now,
                      nres_time_t *until) {
  nres_breaker_t *b = (nres_breaker_t *) breaker;   /* loads only */
  uint64_t w, now_ms, d;

  if (breaker == NULL || until == NULL)
    return NRES_EINVAL;
  w = nres__load(&b->word);
  *until = 0;
  if (STATE(w) == NRES_BREAKER_OPEN) {
    /* open-until is kept modulo 2^38 ms: read it as the nearest time to
     * now on the ring, later or (a break already over) earlier. */
    now_ms = now / NRES_MSEC;
    d = (UNTIL(w) - now_ms) & UNTIL_MASK;
    if (d < UNTIL_HALF)
      *until = nres__mul_sat(now_ms + d, NRES_MSEC);
    else
      *until = nres__mul_sat(now_ms - ((now_ms - UNTIL(w)) & UNTIL_MASK),
                             NRES_MSEC);
  }
  return (int) STATE(w);
}

int nres_breaker_open_until(nres_breaker_t *breaker, nres_time_t now,
                            nres_time_t until) {
  uint64_t w, n, until_ms;

  if (breaker == NULL)
    return NRES_EINVAL;
  if (until <= now)
    return 0;
  if (until - now > BREAK_LIMIT)
    until = now + BREAK_LIMIT;
  until_ms = until / NRES_MSEC + (until % NRES_MSEC != 0);
  w = nres__load(&breaker->word);
  for (;;) {
    if (STATE(w) == NRES_BREAKER_ISOLATED)
      return 0;
    /* An OPEN that already lasts as long stays as it is. */
    if (STATE(w) == NRES_BREAKER_OPEN &&
        ((UNTIL(w) - until_ms) & UNTIL_MASK) < UNTIL_HALF)
      return 0;
    /* Same generation: a probe permit of a half-open period cut short
     * here is stale from now on, and its outcome ignored. */
    n = pack(NRES_BREAKER_OPEN, GEN(w), until_ms);
    if (nres__cas(&breaker->word, &w, n))
      return 1;
  }
}

int nres_breaker_close_if(nres_breaker_t *breaker, nres_time_t until) {
  uint64_t w, until_ms;

  if (breaker == NULL)
    return NRES_EINVAL;
  until_ms = until / NRES_MSEC + (until % NRES_MSEC != 0);
  w = nres__load(&breaker->word);
  while (STATE(w) == NRES_BREAKER_OPEN &&
         UNTIL(w) == (until_ms & UNTIL_MASK)) {
    if (nres__cas(&breaker->word, &w, pack(NRES_BREAKER_CLOSED, GEN(w), 0))) {
      close_from_scratch(breaker);
      return 1;
    }
  }
  return 0;
}

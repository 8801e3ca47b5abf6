/* SPDX-License-Identifier: MIT */
/* step.c - the pull API again, shaped for bindings such as LuaJIT's FFI.
 *
 * LuaJIT boxes every 64-bit integer and every struct returned by value into
 * a fresh cdata, which is garbage on a hot path. These wrappers take time
 * as double nanoseconds and the verdict as scalars, and write the action
 * into a caller-owned nres_step_t made of ints and doubles only, which Lua
 * reads as plain numbers. A double holds nanoseconds exactly for 104 days
 * of uptime and to within 256 ns for Unix-epoch times: far below anything
 * a decision depends on.
 *
 * nres_step_sync_begin and nres_step_sync_report are the two steps of a
 * first-attempt success for a driver that runs one attempt at a time (the
 * Lua face's p:run), one FFI call each; nres_step_sync_resume, after a
 * wait, answers in their shape. They read the runtime's clock themselves
 * when given now < 0 (an FFI call and a conversion fewer per read); they
 * are flattened, so the executor's step and what it calls are compiled
 * into them, as into the C sync driver (with LTO); on their usual way (a
 * first attempt begun, an OK report that ends the call) they call
 * nothing, so they need no stack frame, and every other case goes on by
 * a tail call; and they answer in registers - kind, slot, hedge and stop
 * packed in the int returned, the time in *at - instead of unpacking the
 * action into an nres_step_t. A class other than default, a passthrough
 * policy, a late report, a report of a slot other than 0 or misuse takes
 * the general path, so they answer what nres_step_begin_class and
 * nres_step_report answer.
 */
#include <time.h>

#include "internal.h"
#include "core/clock.h"
#include "core/policy.h"
#include "exec/call.h"

static nres_time_t from_ns(double ns) {
  return nres__time_from_double(ns);
}

/* The verdict of a report's kind: nres_verdict keeps the kind in a byte,
 * so a kind out of range (256 would read as OK) becomes one the report
 * refuses as junk, whatever its low byte. */
static nres_verdict_t verdict_of(int kind) {
  return nres_verdict((unsigned) kind < NRES_VERDICT_COUNT ? kind : 0xff);
}

/* The verdict flags a caller may set; NRES_VF_RETRY_AFTER goes with
 * retry_after, and any other bit is dropped (0xff in the log reads as an
 * abandoned attempt). */
#define CALLER_FLAGS (NRES_VF_SELF | NRES_VF_TIMEOUT)

static double to_ns(nres_time_t t) {
  return t == NRES_TIME_NEVER ? -1.0 : (double) t;
}

static int fill(nres_step_t *out, const nres_call_t *call, nres_action_t a) {
  out->kind = a.kind;
  out->slot = a.slot;
  out->hedge = a.hedge;
  out->stop = a.stop;
  out->cancel = a.cancel;
  out->fallback = a.fallback;
  out->attempt = a.attempt;
  out->at = to_ns(a.at);
  out->resume_at = to_ns(call->resume_at);
  return a.kind;
}

int nres_step_begin(nres_call_t *call, nres_policy_t *policy, double now,
                    double inbound, nres_step_t *out) {
  nres_time_t in = inbound < 0 ? NRES_TIME_NEVER : from_ns(inbound);
  return fill(out, call,
              nres_call_begin_within(call, policy, from_ns(now), in));
}

int nres_step_begin_class(nres_call_t *call, nres_policy_t *policy,
                          double now, double inbound, int cls,
                          nres_step_t *out) {
  nres_time_t in = inbound < 0 ? NRES_TIME_NEVER : from_ns(inbound);
  return fill(out, call,
              nres_call_begin_class(call, policy, from_ns(now), in, cls));
}

int nres_step_report(nres_call_t *call, unsigned slot, double now, int kind,
                     int flags, double retry_after, nres_step_t *out) {
  nres_verdict_t v = verdict_of(kind);
  v.flags = (uint8_t) (flags & CALLER_FLAGS);
  if (retry_after >= 0) {
    v.flags |= NRES_VF_RETRY_AFTER;
    v.retry_after = from_ns(retry_after);
  }
  return fill(out, call, nres_call_report(call, slot, from_ns(now), v));
}

/* now < 0: the runtime's clock (nres_clock_now, read inline). */
static nres_time_t now_or_clock(double now) {
  return now < 0 ? nres__clock_now() : from_ns(now);
}

/* The action as the sync steps answer it: *at, and its first four bytes
 * (kind, slot, hedge, stop) as an int - on x86-64 the low half of the
 * register it came back in, so packing it costs nothing. */
static int packed(nres_action_t a, double *at) {
  *at = to_ns(a.at);
  return (int) ((uint32_t) a.kind | (uint32_t) a.slot << 8 |
                (uint32_t) a.hedge << 16 | (uint32_t) a.stop << 24);
}

/* The sync steps' unusual cases, through the general steps: out of line,
 * so flattening does not compile a second executor into each. */
static NRES__COLD int sync_begin_general(nres_call_t *call,
                                         nres_policy_t *policy,
                                         nres_time_t now, int cls, double *at) {
  return packed(nres_call_begin_class(call, policy, now, NRES_TIME_NEVER, cls),
                at);
}

/* The same, when the clock must be read the slow way first. */
static NRES__COLD int sync_begin_clock(nres_call_t *call, nres_policy_t *policy,
                                       double now, int cls, double *at) {
  return sync_begin_general(call, policy, now_or_clock(now), cls, at);
}

static NRES__COLD int sync_report_general(nres_call_t *call, unsigned slot,
                                          nres_time_t now, int kind,
                                          nres_verdict_t v, double *at) {
  v.kind = verdict_of(kind).kind;
  return packed(nres_call_report(call, slot, now, v), at);
}

/* now_or_clock's answer by the clock's usual read: 0 when the clock needs
 * its slow path (nothing read). Calls nothing. */
static int quick_now(double now, nres_time_t *t) {
  if (!(now < 0)) {   /* NaN too, as now_or_clock */
    *t = from_ns(now);
    return 1;
  }
  return nres__clock_tsc(t);
}

/* The usual first attempt (nres__call_begin_first) calls nothing: no stack
 * frame on its way; anything else goes on by a tail call. */
__attribute__((flatten))
int nres_step_sync_begin(nres_call_t *call, nres_policy_t *policy,
                         double now, int cls, double *at) {
  nres_time_t t, ceiling;

  if (__builtin_expect(!quick_now(now, &t), 0))
    return sync_begin_clock(call, policy, now, cls, at);
  if (__builtin_expect(cls == NRES_CLASS_DEFAULT && policy != NULL &&
                           policy->private_magic == NRES__POLICY_MAGIC &&
                           !(policy->private_flags & NRES__F_PASSTHROUGH) &&
                           nres__call_begin_first(call, policy, t, &ceiling),
                       1)) {
    *at = to_ns(ceiling);
    return NRES_ATTEMPT;   /* slot 0, no hedge, no stop */
  }
  return sync_begin_general(call, policy, t, cls, at);
}

/* A report the usual success (nres__call_report_ok) does not cover:
 * flattened too, for the sync driver's failures and retries. */
__attribute__((flatten, noinline))
static int sync_report_other(nres_call_t *call, unsigned slot, nres_time_t t,
                             int kind, int flags, double retry_after,
                             double *at) {
  nres_verdict_t v = nres_verdict(kind);

  v.flags = (uint8_t) (flags & CALLER_FLAGS);
  if (retry_after >= 0) {
    v.flags |= NRES_VF_RETRY_AFTER;
    v.retry_after = from_ns(retry_after);
  }
  /* Late or foreign slots, kinds out of range and a passthrough's record
   * are nres_call_report's to answer. So is an attempt in any slot but 0,
   * which a driver running one attempt at a time never has (the machine
   * starts an attempt in the lowest free slot, as in exec/run.c): slot 0
   * a constant, the report's slot arithmetic folds. */
  if (__builtin_expect(slot != 0 || !(call->inflight & 1u) ||
                       (unsigned) kind >= NRES_VERDICT_COUNT ||
                       (call->policy->private_flags & NRES__F_PASSTHROUGH),
                       0))
    return sync_report_general(call, slot, t, kind, v, at);
  /* One copy of the report for a policy that records outcomes, one for a
   * policy that does not (as the sync driver's loops, exec/run.c). */
  if (call->policy->private_flags & NRES__F_RECORDS)
    return packed(nres__call_report(call, 0, call->slot[0].number, t, &v, 1),
                  at);
  return packed(nres__call_report(call, 0, call->slot[0].number, t, &v, 0),
                at);
}

static NRES__COLD int sync_report_clock(nres_call_t *call, unsigned slot,
                                        double now, int kind, int flags,
                                        double retry_after, double *at) {
  return sync_report_other(call, slot, now_or_clock(now), kind, flags,
                           retry_after, at);
}

/* The answer of a call ended OK: DONE, stop OK, no time. */
#define DONE_OK ((int) ((uint32_t) NRES_DONE | (uint32_t) NRES_STOP_OK << 24))

/* The usual success's record, from the stage whose add needs its slow
 * path on (*at written already). */
static NRES__COLD int sync_record_from(nres_call_t *call, nres_time_t t,
                                       int stage) {
  nres__call_record_from(call, t, stage);
  return DONE_OK;
}

/* The usual success (an OK verdict for the attempt in slot 0, which
 * nres__call_report_ok takes) calls nothing: no stack frame on its way;
 * anything else goes on by a tail call. */
__attribute__((flatten))
int nres_step_sync_report(nres_call_t *call, unsigned slot, double now,
                          int kind, int flags, double retry_after,
                          double *at) {
  nres_time_t t;
  int stage;

  if (__builtin_expect(!quick_now(now, &t), 0))
    return sync_report_clock(call, slot, now, kind, flags, retry_after, at);
  if (__builtin_expect(slot == 0 && kind == NRES_OK &&
                           !(flags & CALLER_FLAGS) && retry_after < 0,
                       1)) {
    /* The answer's time first (every other answer writes its own), so
     * that the pointer needs no register through the report. */
    *at = -1.0;   /* to_ns(NRES_TIME_NEVER) */
    stage = nres__call_report_ok(call, t);
    if (__builtin_expect(stage >= 0, 1)) {
      if (__builtin_expect(stage == 0, 1))
        return DONE_OK;
      return sync_record_from(call, t, stage);
    }
  }
  return sync_report_other(call, slot, t, kind, flags, retry_after, at);
}

int nres_step_sync_resume(nres_call_t *call, double now, double *at) {
  return packed(nres_call_resume(call, now_or_clock(now)), at);
}

int nres_step_resume(nres_call_t *call, double now, nres_step_t *out) {
  return fill(out, call, nres_call_resume(call, from_ns(now)));
}

int nres_step_cancel(nres_call_t *call, double now, nres_step_t *out) {
  return fill(out, call, nres_call_cancel(call, from_ns(now)));
}

int nres_step_abort(nres_call_t *call, double now, nres_step_t *out) {
  return fill(out, call, nres_call_abort(call, from_ns(now)));
}

int nres_step_log(const nres_call_t *call, double *out) {
  unsigned n = call->attempts < NRES_LOG_CAP ? call->attempts : NRES_LOG_CAP;
  unsigned first = call->attempts - n;

  out[0] = n;
  out[1] = call->last.flags;
  for (unsigned k = 0; k < n; k++) {
    const nres_attempt_rec_t *rec = &call->log[(first + k) % NRES_LOG_CAP];
    double *e = out + 2 + k * NRES_STEP_LOG_FIELDS;
    e[0] = rec->number;
    e[1] = rec->hedge;
    e[2] = rec->kind;
    e[3] = rec->flags;
    e[4] = (double) rec->start;
    e[5] = (double) rec->end;
  }
  return (int) n;
}

double nres_step_now(void) {
  return (double) nres_clock_now();
}

void nres_step_sleep(double ns) {
  nres_time_t until;

  if (!(ns > 0))
    return;
  until = nres_time_add(nres_clock_now(), from_ns(ns));
  for (nres_time_t now = nres_clock_now(); now < until; now = nres_clock_now()) {
    struct timespec ts;
    ts.tv_sec = (time_t) ((until - now) / NRES_SEC);
    ts.tv_nsec = (long) ((until - now) % NRES_SEC);
    nanosleep(&ts, NULL);
  }
}

/* SPDX-License-Identifier: MIT */
/* nres/uv.h - the libuv driver of the flat executor.
 *
 * A caller-owned request runs one call at a time on a libuv loop. The
 * attempt is the caller's asynchronous work: attempt_cb starts it, and the
 * caller reports its outcome with nres_uv_complete(req, token, verdict)
 * whenever it ends. Waits and attempt timeouts run on uv_timer_t handles
 * embedded in the request, so a call allocates nothing. An attempt that
 * outlives its deadline is reported as a timeout (and abandon_cb, if set,
 * tells the caller to stop it); its later completion is ignored and counted
 * as late. Hedged attempts run side by side, each with its own token.
 *
 * Lifecycle, as with libuv handles: init -> start ... done_cb -> start ...
 * -> close (close_cb once every timer is closed).
 */
#ifndef NRES_UV_H
#define NRES_UV_H

#include <uv.h>

#include "../nres.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nres_uv_s nres_uv_t;

/* Start an attempt; report it later with the token. May report at once
 * (nres_uv_complete inside the callback). Callbacks may complete, cancel
 * or (from done_cb) start calls; nothing else of the request is touched
 * after a callback changes its state. */
typedef void (*nres_uv_attempt_cb)(nres_uv_t *req, uint32_t token,
                                   const nres_attempt_t *attempt);
/* The attempt with this token is no longer wanted (timed out, lost to a
 * hedge, canceled): stop it if you can. */
typedef void (*nres_uv_abandon_cb)(nres_uv_t *req, uint32_t token);
/* The call ended: 0 on success, else the NRES_E* of its stop reason;
 * req->call holds the details. The request may be started again here. */
typedef void (*nres_uv_done_cb)(nres_uv_t *req, int status);
typedef void (*nres_uv_close_cb)(nres_uv_t *req);

struct nres_uv_s {
  void *data;                         /* the caller's */
  uv_loop_t *loop;
  nres_call_t call;
  uint64_t late;                      /* completions ignored as late */
  /* private */
  nres_uv_attempt_cb attempt_cb;
  nres_uv_abandon_cb abandon_cb;
  nres_uv_done_cb done_cb;
  nres_uv_close_cb close_cb;
  uv_timer_t resume_timer;
  uv_timer_t attempt_timer[NRES_MAX_INFLIGHT];
  uint32_t token[NRES_MAX_INFLIGHT];  /* attempt in each slot; 0 = none */
  uint32_t serial;
  uint32_t generation;                /* bumped by every start and end */
  uint8_t active;
  uint8_t done_pending;               /* DONE deferred to the loop */
  uint8_t closing;                    /* timers still closing */
  uint8_t closed;                     /* nres_uv_close was called */
};

/* Initialise the request's timers on `loop`. */
NRES_EXTERN int nres_uv_init(uv_loop_t *loop, nres_uv_t *req);
/* Begin a call under `policy`, with an optional inherited absolute deadline
 * (NRES_TIME_NEVER for none). The first attempt starts inside this call;
 * a call refused at once (circuit open, draining...) reports through
 * done_cb from the loop, never from here. NRES_EBUSY if a call is running,
 * NRES_EINVAL on misuse; on error no callback is ever called. */
NRES_EXTERN int nres_uv_start(nres_uv_t *req, nres_policy_t *policy,
                              nres_time_t inbound,
                              nres_uv_attempt_cb attempt_cb,
                              nres_uv_abandon_cb abandon_cb,
                              nres_uv_done_cb done_cb);
/* Report the outcome of the attempt `token`. 0 if it counted;
 * NRES_ECANCELED if the attempt had already ended (timed out, lost,
 * canceled): the verdict is ignored and counted as late. */
NRES_EXTERN int nres_uv_complete(nres_uv_t *req, uint32_t token,
                                 nres_verdict_t verdict);
/* Give up the running call: attempts are abandoned, done_cb runs with
 * NRES_ECANCELED before this returns. NRES_ESTATE if nothing runs. */
NRES_EXTERN int nres_uv_cancel(nres_uv_t *req);
/* Close the timers for good (a running call is canceled first, without
 * done_cb; a later start is NRES_EINVAL; closing twice does nothing).
 * close_cb (may be NULL) runs once they are all closed. */
NRES_EXTERN void nres_uv_close(nres_uv_t *req, nres_uv_close_cb close_cb);

#ifdef __cplusplus
}
#endif
#endif /* NRES_UV_H */

/* SPDX-License-Identifier: MIT */
/* shadow.h - the executor's calls into a shadow candidate (exec/shadow.c),
 * made only for policies with NRES__F_SHADOW. */
#ifndef NRES_EXEC_SHADOW_H
#define NRES_EXEC_SHADOW_H

#include "nres.h"

/* nres_call_t.shadow's bits. */
enum {
  NRES__SHADOW_FOLLOW = 1,    /* the candidate still follows the call */
  NRES__SHADOW_RUNNING = 2,   /* the attempt in shadow_slot is its own */
  NRES__SHADOW_HELD = 4,      /* it holds a slot of its bulkhead */
  NRES__SHADOW_CHARGED = 8    /* it holds a budget token for a retry */
};

/* A call begins: the candidate follows it. */
void nres__shadow_begin(nres_call_t *call);
/* The live call admitted an attempt at now (hedge: a hedge; else it is to
 * start in slot 0): would the candidate? */
void nres__shadow_admit(nres_call_t *call, nres_time_t now, int hedge);
/* The attempt in `slot` ended with v: the candidate learns, then decides. */
void nres__shadow_report(nres_call_t *call, unsigned slot, nres_time_t now,
                         const nres_verdict_t *v);
/* The live call ended with `stop`. */
void nres__shadow_done(nres_call_t *call, int stop);

#endif /* NRES_EXEC_SHADOW_H */

/* SPDX-License-Identifier: MIT */
/* refusal.c - how the gateway answers a call it stops itself: the HTTP
 * status for each stop reason, the reason's text being NRES_STOP_MAP's
 * (nres_stop_name). The nginx module, the Lua balancer and the cosocket
 * proxy answer from this one table (X-Nres-Reason and the body say the
 * reason), so the same refusal gets the same status in every mode.
 */
#include "nres/gateway.h"

int nres_gw_refusal(int stop, int client, const char **reason) {
  int status;
  switch (stop) {
  case NRES_STOP_DEADLINE:   /* out of time: the gateway's timeout */
    status = 504;
    break;
  case NRES_STOP_LIMITED:    /* a client over its own rate: 429; a
                                scope's limiter sheds load: 503 */
    status = client ? 429 : 503;
    break;
  case NRES_STOP_CIRCUIT:
  case NRES_STOP_BUDGET:
  case NRES_STOP_DRAINING:
  case NRES_STOP_THROTTLED:
    status = 503;
    break;
  case NRES_STOP_ATTEMPTS:   /* the upstream failed every try */
  case NRES_STOP_PERMANENT:
  case NRES_STOP_CANCELED:
    status = 502;
    break;
  default:                   /* OK, NONE, out of range: no refusal */
    status = 0;
  }
  if (reason != NULL)
    *reason = nres_stop_name(stop);
  return status;
}

/* SPDX-License-Identifier: MIT */
/* registry.h - the registries' lists, for the control API (control_api.c)
 * to walk and clear. Internal to libnres. */
#ifndef NRES_GATEWAY_REGISTRY_H
#define NRES_GATEWAY_REGISTRY_H

#include "nres/gateway.h"

nres_gw_upstream_t *nres__gw_upstreams(void);   /* registry.c */
nres_gw_limiter_t *nres__gw_limiters(void);     /* registry.c */
void nres__gw_scopes_clear(void);               /* control_api.c */

#endif

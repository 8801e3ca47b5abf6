/* SPDX-License-Identifier: MIT */
/* criticality.c - a request's class from its X-Criticality value, for the
 * retry budget's spend (nres_budget_spend_class): critical (and Google's
 * critical_plus) 0, default 1, sheddable (and sheddable_plus) 2, in any
 * case; anything else, or no header, is default. Used by the Lua balancer
 * and the nginx module alike, and (nres_class_parse, which refuses an
 * unknown name) by p:with{ criticality = ... } in Lua: one set of names.
 */
#include <strings.h>

#include "nres/gateway.h"

int nres_class_parse(const char *name, size_t len) {
  static const struct { const char *name; size_t len; int cls; } classes[] = {
    { "critical", 8, NRES_CLASS_CRITICAL },   { "critical_plus", 13, NRES_CLASS_CRITICAL },
    { "default", 7, NRES_CLASS_DEFAULT },     { "sheddable", 9, NRES_CLASS_SHEDDABLE },
    { "sheddable_plus", 14, NRES_CLASS_SHEDDABLE } };
  if (name == NULL)
    return -1;
  for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++)
    if (len == classes[k].len && strncasecmp(name, classes[k].name, len) == 0)
      return classes[k].cls;
  return -1;
}

int nres_gw_class(const char *value, size_t len) {
  int cls = nres_class_parse(value, len);
  return cls < 0 ? NRES_CLASS_DEFAULT : cls;
}

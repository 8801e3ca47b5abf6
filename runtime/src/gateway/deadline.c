/* SPDX-License-Identifier: MIT */
/* deadline.c - the inbound X-Deadline-Ms value, read once for every
 * adapter: the nginx module's admission, the Lua balancer's and the
 * cosocket proxy's (through the FFI). They read it alike to the byte: a
 * value one of them honoured and another ignored made one gateway keep a
 * client's deadline and the other drop it (a value of 64 bytes or more).
 *
 * The grammar: optional spaces or tabs, decimal digits, optionally a "."
 * and more digits, optional spaces or tabs; any length. Anything else (a
 * sign, an exponent, hex, "inf", "nan", two values) is no deadline.
 */
#include <math.h>
#include <string.h>

#include "nres/gateway.h"

static int ows(char c) {
  return c == ' ' || c == '\t';
}

static int digit(char c) {
  return c >= '0' && c <= '9';
}

double nres_gw_deadline_ms(const char *value, size_t len) {
  size_t i = 0, end = len;
  double ms = 0, scale = 1;
  if (value == NULL)
    return NAN;
  while (i < end && ows(value[i]))
    i++;
  while (end > i && ows(value[end - 1]))
    end--;
  if (i == end || !digit(value[i]))
    return NAN;
  for (; i < end && digit(value[i]); i++)
    ms = ms * 10 + (value[i] - '0');
  if (i < end && value[i] == '.') {
    if (++i == end)
      return NAN;
    for (; i < end && digit(value[i]); i++) {
      scale /= 10;
      ms += (value[i] - '0') * scale;
    }
  }
  return i == end ? ms : NAN;
}

double nres_gw_deadline_header(const nres_gw_header_t *h, size_t n) {
  for (size_t i = 0; h != NULL && i < n; i++)
    if (h[i].name_len == 13 && h[i].name != NULL && memcmp(h[i].name, "x-deadline-ms", 13) == 0)
      return nres_gw_deadline_ms(h[i].value, h[i].value_len < 0 ? 0 : (size_t)h[i].value_len);
  return NAN;
}

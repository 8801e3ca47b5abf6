/* SPDX-License-Identifier: MIT */
/* keytext.h - a shared table's key as UTF-8 text (keytext.c), and the
 * UTF-8 rule it shares with the control API's JSON reader (json.c).
 * Internal to libnres. */
#ifndef NRES_GATEWAY_KEYTEXT_H
#define NRES_GATEWAY_KEYTEXT_H

#include <stddef.h>

enum { NRES__KEY_ANY = 0, NRES__KEY_ADDRESS = 1, NRES__KEY_TEXT = 2 };

/* The length of the UTF-8 sequence at p (strict: no overlong form, no
 * surrogate, nothing past U+10FFFF), or 0 (p < end). */
size_t nres__utf8_len(const unsigned char *p, const unsigned char *end);

/* A 4- or 16-byte binary address as text into out (cap bytes, NUL-ended
 * when cap > 0): its length, 0 for another length. */
size_t nres__key_address(const char *key, size_t n, char *out, size_t cap);

/* Key (n bytes) of a table whose keys are `kind` (NRES__KEY_*) as text into
 * out (cap bytes, cut and NUL-ended when cap > 0): its full length. */
size_t nres__key_text(const char *key, size_t n, int kind, char *out, size_t cap);

#endif

/* SPDX-License-Identifier: MIT */
/* key.c - a long key shortened for a shared table, once for every
 * adapter: a slot holds at most NRES_SHM_KEY_MAX bytes, so a longer key
 * (a client limiter's key=..., a cosocket scope's key) is kept under the
 * lowercase hex of its MD5, the form nginx's ngx.md5 and ngx_md5 gave
 * when the module and the Lua side each shortened keys themselves (they
 * must agree byte for byte: both modes share the tables). MD5 here is a
 * spread of bytes, not a defence: keys are the operator's own choice of
 * request data.
 *
 * MD5 after RFC 1321: 64-byte blocks, four rounds of sixteen steps; the
 * constants are floor(|sin(i + 1)| * 2^32).
 */
#include <string.h>

#include "nres/gateway.h"

static const uint32_t K[64] = {
  0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
  0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
  0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
  0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
  0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
  0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
  0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
  0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
  0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
  0xeb86d391 };

/* each step's left rotation, by round (four per round, repeated) */
static const unsigned char R[4][4] = {
  { 7, 12, 17, 22 }, { 5, 9, 14, 20 }, { 4, 11, 16, 23 }, { 6, 10, 15, 21 } };

static uint32_t rotl(uint32_t x, unsigned n) {
  return (x << n) | (x >> (32 - n));
}

static void block(uint32_t h[4], const unsigned char *p) {
  uint32_t m[16], a = h[0], b = h[1], c = h[2], d = h[3];
  for (int i = 0; i < 16; i++)   /* little-endian words */
    m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
           (uint32_t)p[4 * i + 3] << 24;
  for (int i = 0; i < 64; i++) {
    uint32_t f;
    int g;
    switch (i / 16) {
    case 0: f = (b & c) | (~b & d); g = i; break;
    case 1: f = (d & b) | (~d & c); g = (5 * i + 1) % 16; break;
    case 2: f = b ^ c ^ d; g = (3 * i + 5) % 16; break;
    default: f = c ^ (b | ~d); g = (7 * i) % 16; break;
    }
    uint32_t t = d;
    d = c;
    c = b;
    b = b + rotl(a + f + K[i] + m[g], R[i / 16][i % 4]);
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
}

/* The lowercase hex MD5 of key (len bytes) into out (32 bytes). */
static void md5_hex(const char *key, size_t len, char *out) {
  static const char hex[] = "0123456789abcdef";
  uint32_t h[4] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476 };
  const unsigned char *p = (const unsigned char *)key;
  size_t n = len;
  for (; n >= 64; n -= 64, p += 64)
    block(h, p);
  unsigned char tail[128] = { 0 };   /* the rest, 0x80, zeros, the bit length */
  memcpy(tail, p, n);
  tail[n] = 0x80;
  size_t end = n < 56 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++)
    tail[end - 8 + i] = (unsigned char)(bits >> (8 * i));
  block(h, tail);
  if (end == 128)
    block(h, tail + 64);
  for (int i = 0; i < 16; i++) {
    unsigned char byte = (unsigned char)(h[i / 4] >> (8 * (i % 4)));
    out[2 * i] = hex[byte >> 4];
    out[2 * i + 1] = hex[byte & 15];
  }
}

size_t nres_gw_key(const char *key, size_t len, char *buf, const char **out) {
  if (len <= NRES_SHM_KEY_MAX) {
    *out = key;
    return len;
  }
  md5_hex(key, len, buf);
  *out = buf;
  return NRES_GW_KEY_HASHED;
}

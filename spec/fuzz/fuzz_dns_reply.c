/* SPDX-License-Identifier: MIT */
/* fuzz_dns_reply.c - libFuzzer target for the gateway's DNS reply reader
 * (runtime/src/gateway/dns.c): what a resolver, or anyone who can send a
 * datagram to the gateway's query socket, may answer.
 *
 * Input: byte 0 picks the query (bit 0: A or AAAA; bits 1-2: one of four
 * names; bit 7 set: the rest is a name given to nres_dns_query instead);
 * the rest is the reply, whose first two bytes are also the query's id so
 * that the reader goes past the id check. Every reply must give 0 with
 * figures in range (at most NRES_DNS_ADDRS_MAX addresses, none with an
 * error rcode, a TTL below 2^31), or NRES_EAGAIN / NRES_EINVAL with a
 * reason; a name must give NRES_EINVAL or a query that reads back as its
 * own (empty) reply.
 */
#include <stdint.h>
#include <string.h>

#include "nres/dns.h"
#include "fuzz_input.h"

static const char *const NAMES[4] = { "app.test", "a.b.c.d.example.org", "x", "real.test" };

static void name(const uint8_t *data, size_t size) {
  uint8_t q[NRES_DNS_QUERY_MAX], r[NRES_DNS_QUERY_MAX];
  nres_dns_answer_t a;
  const char *why = NULL;
  int n = nres_dns_query(q, sizeof(q), 7, (const char *) data, size, NRES_DNS_A);

  if (n < 0) {
    FUZZ_CHECK(n == NRES_EINVAL);
    return;
  }
  FUZZ_CHECK(n <= NRES_DNS_QUERY_MAX);
  memcpy(r, q, (size_t) n);
  r[2] |= 0x80;
  FUZZ_CHECK(nres_dns_reply(r, (size_t) n, q, (size_t) n, &a, &why) == 0);
  FUZZ_CHECK(a.n == 0 && a.rcode == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t q[NRES_DNS_QUERY_MAX];
  nres_dns_answer_t a;
  const char *why = NULL, *nm;
  uint16_t id;
  int qn, rc;

  if (size < 1)
    return 0;
  if (data[0] & 0x80) {
    name(data + 1, size - 1);
    return 0;
  }
  nm = NAMES[data[0] >> 1 & 3];
  id = size >= 3 ? (uint16_t) (data[1] << 8 | data[2]) : 0;
  qn = nres_dns_query(q, sizeof(q), id, nm, strlen(nm),
                      data[0] & 1 ? NRES_DNS_AAAA : NRES_DNS_A);
  FUZZ_CHECK(qn > 0);
  rc = nres_dns_reply(data + 1, size - 1, q, (size_t) qn, &a, &why);
  if (rc == 0) {
    FUZZ_CHECK(a.n <= NRES_DNS_ADDRS_MAX);
    FUZZ_CHECK(a.rcode >= 0 && a.rcode <= 15);
    FUZZ_CHECK(a.rcode == 0 || (a.n == 0 && a.dropped == 0));
    FUZZ_CHECK(a.ttl <= INT32_MAX);
  } else {
    FUZZ_CHECK(rc == NRES_EAGAIN || rc == NRES_EINVAL);
    FUZZ_CHECK(why != NULL && why[0] != '\0');
  }
  return 0;
}

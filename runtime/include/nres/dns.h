/* SPDX-License-Identifier: MIT */
/* nres/dns.h - a DNS query for a peer's name and a strict reading of the
 * reply (runtime/src/gateway/dns.c), for the gateway's peers by name
 * (lua/nres/ngx/resolve.lua polls a non-blocking socket from a timer; at
 * start nres_dns_exchange waits for the reply).
 *
 * Only what a peer needs: one question, class IN, type A or AAAA, over
 * UDP without EDNS (512 bytes). A reply is read with every length checked
 * against the message; a compression pointer must point before the name
 * that holds it (so pointers cannot loop) and a name stays within 255
 * bytes. The addresses kept are the answer records of the asked type whose
 * owner is the asked name, or the target of a CNAME record chained from it
 * in the same answer. Nothing here allocates.
 */
#ifndef NRES_DNS_H
#define NRES_DNS_H

#include "../nres.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRES_DNS_A 1
#define NRES_DNS_AAAA 28
#define NRES_DNS_QUERY_MAX 272 /* header, a 255-byte name, type, class */
#define NRES_DNS_REPLY_MAX 512 /* UDP without EDNS */
#define NRES_DNS_ADDRS_MAX 32  /* addresses kept from one reply */

typedef struct nres_dns_answer_s {
  int rcode;          /* the reply's RCODE: 0 no error, 2 SERVFAIL, 3 NXDOMAIN, ... */
  uint32_t ttl;       /* the smallest TTL of the records used (s); 0 with none */
  uint32_t n;         /* addresses in addr */
  uint32_t dropped;   /* matching records past NRES_DNS_ADDRS_MAX */
  uint8_t addr[NRES_DNS_ADDRS_MAX][16]; /* network order; an A record's 4 bytes first */
} nres_dns_answer_t;

/* A query for `name` (len bytes, dotted, a final dot allowed; labels of
 * 1..63 bytes of letters, digits, '-' and '_') of type qtype (NRES_DNS_A or
 * NRES_DNS_AAAA) with id, recursion desired, written to buf: its length,
 * or NRES_EINVAL (a bad name or type, cap too small). */
NRES_EXTERN int nres_dns_query(uint8_t *buf, size_t cap, uint16_t id, const char *name,
                               size_t len, int qtype);

/* Read reply msg[len] to query q[qlen] (as nres_dns_query wrote it):
 * 0 and *out filled (with any rcode; addresses only with rcode 0);
 * NRES_EAGAIN when msg is not a reply to q (another id, not a reply,
 * another question: keep listening); NRES_EINVAL when it is malformed or
 * truncated (the TC bit). *why (when not NULL) gets a short static reason
 * on failure. */
NRES_EXTERN int nres_dns_reply(const uint8_t *msg, size_t len, const uint8_t *q, size_t qlen,
                               nres_dns_answer_t *out, const char **why);

/* A random query id (getrandom; the clock and pid mixed in when it fails). */
NRES_EXTERN uint16_t nres_dns_id(void);

/* A UDP socket to server (an IPv4 or IPv6 address) port, connected (only
 * its datagrams arrive; an ICMP refusal shows) and non-blocking: its fd,
 * or NRES_EINVAL (*why says why). */
NRES_EXTERN int nres_dns_open(const char *server, int port, const char **why);
/* Send query q[qlen] on fd: 0, or NRES_EINVAL (*why). */
NRES_EXTERN int nres_dns_send(int fd, const uint8_t *q, size_t qlen, const char **why);
/* Read the datagrams waiting on fd, never waiting: nres_dns_reply's result
 * for the first that is a reply to q; NRES_EAGAIN when none is there yet;
 * NRES_EINVAL on a socket error (*why: "connection refused", ...). The
 * gateway's resolving timer polls it between ngx.sleep calls, so neither
 * nginx's worker blocks nor its error.log gets a line per failed query. */
NRES_EXTERN int nres_dns_recv(int fd, const uint8_t *q, size_t qlen, nres_dns_answer_t *out,
                              const char **why);
NRES_EXTERN void nres_dns_close(int fd);

/* Blocking: open, send q[qlen], wait up to timeout_ms for the reply to q:
 * nres_dns_reply's result, or NRES_ETIMEDOUT, or NRES_EINVAL (a bad
 * address, a socket error: *why says which). For gw.upstream in
 * init_by_lua (nginx's master, before any request), never on a request. */
NRES_EXTERN int nres_dns_exchange(const char *server, int port, const uint8_t *q, size_t qlen,
                                  int timeout_ms, nres_dns_answer_t *out, const char **why);

/* sizeof(nres_dns_answer_t), for the Lua binding's check. */
NRES_EXTERN size_t nres_dns_answer_size(void);

#ifdef __cplusplus
}
#endif
#endif /* NRES_DNS_H */

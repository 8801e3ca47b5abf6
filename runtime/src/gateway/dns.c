/* SPDX-License-Identifier: MIT */
/* dns.c - a DNS query for a peer's name and a strict, bounds-checked
 * reading of its reply (nres/dns.h), and the blocking exchange the gateway
 * uses once at start. The rules of RFC 1035 section 4 that a reply must
 * keep: a 12-byte header, the query's id, QR set, opcode 0, TC clear (a
 * truncated answer is not used), one question equal to the query's
 * (names compared without case), then the answer records, each with its
 * rdata inside the message. Names are expanded into a 255-byte buffer;
 * a compression pointer must point into the message after the header and
 * before the start of the run of labels that holds it, so every jump goes
 * backwards and a pointer loop cannot be built. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "nres/dns.h"

#define HEADER 12
#define NAME_MAX_ 255
#define CNAME 5
#define CLASS_IN 1
#define CHAIN_MAX 16 /* CNAME records followed in one answer */

static uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t) (c + 32) : c; }

static uint16_t get16(const uint8_t *p) { return (uint16_t) (p[0] << 8 | p[1]); }

static uint32_t get32(const uint8_t *p) {
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

/* The name at msg[off], expanded and lowercased into out (wire form, its
 * final zero included): its length, with *next the offset after the name
 * where it is written; -1 when malformed. */
static int expand(const uint8_t *msg, size_t len, size_t off, uint8_t out[NAME_MAX_],
                  size_t *next) {
  size_t pos = off, run = off, n = 0;
  int jumped = 0;

  for (;;) {
    uint8_t c;

    if (pos >= len)
      return -1;
    c = msg[pos];
    if ((c & 0xC0) == 0xC0) {
      size_t to;

      if (pos + 1 >= len)
        return -1;
      to = (size_t) (c & 0x3F) << 8 | msg[pos + 1];
      if (to < HEADER || to >= run)
        return -1;
      if (!jumped)
        *next = pos + 2;
      jumped = 1;
      pos = run = to;
      continue;
    }
    if (c & 0xC0) /* 0x40, 0x80: label types no one uses */
      return -1;
    if (c == 0) {
      out[n++] = 0; /* room kept by the check below */
      if (!jumped)
        *next = pos + 1;
      return (int) n;
    }
    if (pos + 1 + c > len || n + 1 + c + 1 > NAME_MAX_)
      return -1;
    out[n++] = c;
    for (size_t i = 0; i < c; i++)
      out[n++] = lower(msg[pos + 1 + i]);
    pos += 1 + (size_t) c;
  }
}

static int name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_';
}

int nres_dns_query(uint8_t *buf, size_t cap, uint16_t id, const char *name, size_t len,
                   int qtype) {
  size_t n = HEADER, label;

  if (buf == NULL || name == NULL || (qtype != NRES_DNS_A && qtype != NRES_DNS_AAAA))
    return NRES_EINVAL;
  if (len > 0 && name[len - 1] == '.')
    len--;
  /* wire form: a length byte per label, the bytes, the final zero */
  if (len == 0 || len + 2 > NAME_MAX_ || cap < HEADER + len + 2 + 4)
    return NRES_EINVAL;
  memset(buf, 0, HEADER);
  buf[0] = (uint8_t) (id >> 8);
  buf[1] = (uint8_t) id;
  buf[2] = 0x01; /* RD */
  buf[5] = 1;    /* one question */
  label = n++;
  for (size_t i = 0; i <= len; i++) {
    if (i == len || name[i] == '.') {
      size_t l = n - label - 1;
      if (l == 0 || l > 63)
        return NRES_EINVAL;
      buf[label] = (uint8_t) l;
      label = n++;
    } else if (name_char(name[i])) {
      buf[n++] = (uint8_t) name[i];
    } else {
      return NRES_EINVAL;
    }
  }
  buf[label] = 0;
  buf[n++] = 0;
  buf[n++] = (uint8_t) qtype;
  buf[n++] = 0;
  buf[n++] = CLASS_IN;
  return (int) n;
}

#define FAIL(rc, reason)                                                                 \
  do {                                                                                   \
    if (why != NULL)                                                                     \
      *why = reason;                                                                     \
    return rc;                                                                           \
  } while (0)

int nres_dns_reply(const uint8_t *msg, size_t len, const uint8_t *q, size_t qlen,
                   nres_dns_answer_t *out, const char **why) {
  uint8_t qname[NAME_MAX_], name[NAME_MAX_], target[NAME_MAX_];
  int qn, tn;
  size_t pos, qend;
  uint16_t flags, qtype, an;
  uint32_t ttl = UINT32_MAX, chain = 0;

  if (out == NULL || q == NULL || (msg == NULL && len > 0))
    FAIL(NRES_EINVAL, "bad arguments");
  memset(out, 0, sizeof(*out));
  qn = qlen > HEADER ? expand(q, qlen, HEADER, qname, &qend) : -1;
  if (qn < 0 || qend + 4 != qlen)
    FAIL(NRES_EINVAL, "bad query");
  qtype = get16(q + qend);
  if (len < HEADER)
    FAIL(NRES_EAGAIN, "shorter than a header");
  if (get16(msg) != get16(q))
    FAIL(NRES_EAGAIN, "another id");
  flags = get16(msg + 2);
  if (!(flags & 0x8000))
    FAIL(NRES_EAGAIN, "not a reply");
  if (get16(msg + 4) != 1)
    FAIL(NRES_EINVAL, "not one question");
  tn = expand(msg, len, HEADER, target, &pos);
  if (tn < 0 || pos + 4 > len)
    FAIL(NRES_EINVAL, "malformed question");
  if (tn != qn || memcmp(target, qname, (size_t) qn) != 0 || get16(msg + pos) != qtype ||
      get16(msg + pos + 2) != CLASS_IN)
    FAIL(NRES_EAGAIN, "another question");
  if ((flags >> 11 & 0xF) != 0)
    FAIL(NRES_EINVAL, "not a standard query's reply");
  if (flags & 0x0200)
    FAIL(NRES_EINVAL, "truncated (TC)");
  pos += 4;
  out->rcode = flags & 0xF;
  an = get16(msg + 6);
  for (uint16_t i = 0; i < an; i++) {
    int nn = expand(msg, len, pos, name, &pos);
    uint16_t type, rdlen;
    uint32_t rttl;
    size_t rdata;

    if (nn < 0 || pos + 10 > len)
      FAIL(NRES_EINVAL, "malformed answer record");
    type = get16(msg + pos);
    rttl = get32(msg + pos + 4);
    rdlen = get16(msg + pos + 8);
    rdata = pos + 10;
    if (rdata + rdlen > len)
      FAIL(NRES_EINVAL, "record past the message's end");
    pos = rdata + rdlen;
    if (rttl > INT32_MAX) /* RFC 2181 section 8: such a TTL is 0 */
      rttl = 0;
    if (get16(msg + rdata - 8) != CLASS_IN || nn != tn || memcmp(name, target, (size_t) tn) != 0)
      continue;
    if (type == CNAME) {
      size_t end;

      tn = expand(msg, len, rdata, target, &end);
      if (tn < 0 || end != pos)
        FAIL(NRES_EINVAL, "malformed CNAME record");
      if (++chain > CHAIN_MAX)
        FAIL(NRES_EINVAL, "CNAME chain too long");
    } else if (type == qtype) {
      size_t size = type == NRES_DNS_A ? 4 : 16;

      if (rdlen != size)
        FAIL(NRES_EINVAL, "address record of a wrong length");
      if (out->n == NRES_DNS_ADDRS_MAX) {
        out->dropped++;
        continue;
      }
      memcpy(out->addr[out->n++], msg + rdata, size);
    } else {
      continue;
    }
    if (rttl < ttl)
      ttl = rttl;
  }
  if (out->rcode != 0)
    out->n = out->dropped = 0;
  out->ttl = ttl == UINT32_MAX ? 0 : ttl;
  return 0;
}

uint16_t nres_dns_id(void) {
  static unsigned count;
  uint16_t id;
  struct timespec ts;

  if (getrandom(&id, sizeof(id), GRND_NONBLOCK) == (ssize_t) sizeof(id))
    return id;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint16_t) ((uint64_t) ts.tv_nsec * 2654435761u ^ (uint64_t) getpid() << 7 ^ ++count);
}

static int64_t now_ms(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int nres_dns_open(const char *server, int port, const char **why) {
  struct sockaddr_storage ss;
  socklen_t sl;
  int fd;

  memset(&ss, 0, sizeof(ss));
  if (server == NULL || port < 1 || port > 65535)
    FAIL(NRES_EINVAL, "bad arguments");
  if (inet_pton(AF_INET, server, &((struct sockaddr_in *) &ss)->sin_addr) == 1) {
    ((struct sockaddr_in *) &ss)->sin_family = AF_INET;
    ((struct sockaddr_in *) &ss)->sin_port = htons((uint16_t) port);
    sl = sizeof(struct sockaddr_in);
  } else if (inet_pton(AF_INET6, server, &((struct sockaddr_in6 *) &ss)->sin6_addr) == 1) {
    ((struct sockaddr_in6 *) &ss)->sin6_family = AF_INET6;
    ((struct sockaddr_in6 *) &ss)->sin6_port = htons((uint16_t) port);
    sl = sizeof(struct sockaddr_in6);
  } else {
    FAIL(NRES_EINVAL, "the resolver is not an IP address");
  }
  fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    FAIL(NRES_EINVAL, "socket() failed");
  /* connected: only the server's datagrams arrive, an ICMP refusal shows */
  if (connect(fd, (struct sockaddr *) &ss, sl) != 0) {
    close(fd);
    FAIL(NRES_EINVAL, "connect() failed");
  }
  return fd;
}

int nres_dns_send(int fd, const uint8_t *q, size_t qlen, const char **why) {
  if (fd < 0 || q == NULL)
    FAIL(NRES_EINVAL, "bad arguments");
  if (send(fd, q, qlen, MSG_DONTWAIT) != (ssize_t) qlen)
    FAIL(NRES_EINVAL, errno == ECONNREFUSED ? "connection refused" : "send() failed");
  return 0;
}

int nres_dns_recv(int fd, const uint8_t *q, size_t qlen, nres_dns_answer_t *out,
                  const char **why) {
  uint8_t reply[NRES_DNS_REPLY_MAX];

  for (;;) {
    ssize_t got = recv(fd, reply, sizeof(reply), MSG_DONTWAIT);
    int rc;

    if (got < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        FAIL(NRES_EAGAIN, "no reply yet");
      FAIL(NRES_EINVAL, errno == ECONNREFUSED ? "connection refused" : "recv() failed");
    }
    rc = nres_dns_reply(reply, (size_t) got, q, qlen, out, why);
    if (rc != NRES_EAGAIN)
      return rc;
  }
}

void nres_dns_close(int fd) {
  if (fd >= 0)
    close(fd);
}

int nres_dns_exchange(const char *server, int port, const uint8_t *q, size_t qlen,
                      int timeout_ms, nres_dns_answer_t *out, const char **why) {
  int fd, rc;
  int64_t until;

  if (timeout_ms < 0 || q == NULL)
    FAIL(NRES_EINVAL, "bad arguments");
  fd = nres_dns_open(server, port, why);
  if (fd < 0)
    return fd;
  rc = nres_dns_send(fd, q, qlen, why);
  if (rc == 0)
    rc = NRES_EAGAIN;
  until = now_ms() + timeout_ms;
  while (rc == NRES_EAGAIN) {
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int64_t left = until - now_ms();

    if (left <= 0) {
      rc = NRES_ETIMEDOUT;
      if (why != NULL)
        *why = "timed out";
      break;
    }
    (void) poll(&pfd, 1, (int) left); /* EINTR or not: recv says */
    rc = nres_dns_recv(fd, q, qlen, out, why);
  }
  nres_dns_close(fd);
  return rc;
}

size_t nres_dns_answer_size(void) { return sizeof(nres_dns_answer_t); }

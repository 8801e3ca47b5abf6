/* SPDX-License-Identifier: MIT */
/* test_dns.c - the DNS query and the strict reading of its reply
 * (runtime/src/gateway/dns.c): names checked, addresses and the smallest
 * TTL kept, CNAME chains followed, replies to another query left for the
 * next datagram, malformed and truncated ones refused (every prefix of a
 * good reply, pointer loops, forward pointers), and the blocking exchange
 * against a UDP socket of the test's own. */
#include "nres_test.h"
#include "nres/dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A reply being built: the query's header and question copied, then
 * records appended. */
typedef struct {
  uint8_t b[1024];
  size_t n;
  uint8_t q[NRES_DNS_QUERY_MAX];
  size_t qn;
} msg_t;

static void put16(msg_t *m, unsigned v) {
  m->b[m->n++] = (uint8_t) (v >> 8);
  m->b[m->n++] = (uint8_t) v;
}

static void put32(msg_t *m, uint32_t v) {
  put16(m, v >> 16);
  put16(m, v & 0xFFFF);
}

static void bytes(msg_t *m, const void *p, size_t n) {
  memcpy(m->b + m->n, p, n);
  m->n += n;
}

/* A reply to a query for name/qtype with rcode, its answers still 0. */
static void start(msg_t *m, const char *name, int qtype, int rcode) {
  int qn = nres_dns_query(m->q, sizeof(m->q), 0x1234, name, strlen(name), qtype);
  assert_true(qn > 0);
  m->qn = (size_t) qn;
  memcpy(m->b, m->q, m->qn);
  m->n = m->qn;
  m->b[2] = 0x81; /* QR, RD */
  m->b[3] = (uint8_t) (0x80 | rcode);
}

static void answers(msg_t *m, unsigned an) {
  m->b[6] = (uint8_t) (an >> 8);
  m->b[7] = (uint8_t) an;
}

/* A record whose owner is the wire name `owner` (NULL: a pointer to the
 * question's name). */
static void record(msg_t *m, const char *owner, size_t owner_len, int type, uint32_t ttl,
                   const void *rdata, size_t rdlen) {
  if (owner == NULL)
    put16(m, 0xC00C);
  else
    bytes(m, owner, owner_len);
  put16(m, (unsigned) type);
  put16(m, 1);
  put32(m, ttl);
  put16(m, (unsigned) rdlen);
  bytes(m, rdata, rdlen);
}

static const uint8_t A1[4] = { 10, 0, 0, 1 }, A2[4] = { 10, 0, 0, 2 };

static int read_reply(const msg_t *m, nres_dns_answer_t *a, const char **why) {
  return nres_dns_reply(m->b, m->n, m->q, m->qn, a, why);
}

static void test_query(void **state) {
  uint8_t b[NRES_DNS_QUERY_MAX];
  static const uint8_t want[] = { 0xBE, 0xEF, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', 'p', 'p',
                                  4, 't', 'e', 's', 't', 0, 0, 28, 0, 1 };
  char longest[254], label64[70];
  (void) state;
  assert_int_equal(nres_dns_query(b, sizeof(b), 0xBEEF, "app.test", 8, NRES_DNS_AAAA),
                   (int) sizeof(want));
  assert_memory_equal(b, want, sizeof(want));
  /* a final dot is the same name */
  assert_int_equal(nres_dns_query(b, sizeof(b), 0xBEEF, "app.test.", 9, NRES_DNS_AAAA),
                   (int) sizeof(want));
  assert_memory_equal(b, want, sizeof(want));
  const char *bad[] = { "", ".", "a..b", ".a", "a b", "a/b", "app.test..", "\xc3\xa9.x" };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(nres_dns_query(b, sizeof(b), 1, bad[i], strlen(bad[i]), NRES_DNS_A),
                     NRES_EINVAL);
  memset(label64, 'x', 64);
  assert_int_equal(nres_dns_query(b, sizeof(b), 1, label64, 64, NRES_DNS_A), NRES_EINVAL);
  assert_true(nres_dns_query(b, sizeof(b), 1, label64, 63, NRES_DNS_A) > 0);
  /* 253 bytes of name: 255 in wire form, the most there is */
  for (size_t i = 0; i < sizeof(longest); i++)
    longest[i] = i % 2 ? '.' : 'a';
  assert_true(nres_dns_query(b, sizeof(b), 1, longest, 253, NRES_DNS_A) > 0);
  longest[253] = 'a';
  assert_int_equal(nres_dns_query(b, sizeof(b), 1, longest, 254, NRES_DNS_A), NRES_EINVAL);
  assert_int_equal(nres_dns_query(b, sizeof(b), 1, "a.b", 3, 5), NRES_EINVAL);
  assert_int_equal(nres_dns_query(b, 20, 1, "app.test", 8, NRES_DNS_A), NRES_EINVAL);
  assert_int_equal(nres_dns_query(NULL, 512, 1, "app.test", 8, NRES_DNS_A), NRES_EINVAL);
}

static void test_addresses(void **state) {
  msg_t m;
  nres_dns_answer_t a;
  static const uint8_t v6[16] = { 0xfd, 0, [15] = 1 };
  (void) state;
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 2);
  record(&m, NULL, 0, NRES_DNS_A, 30, A1, 4);
  record(&m, "\3APP\4Test\0", 10, NRES_DNS_A, 10, A2, 4); /* case does not matter */
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.rcode, 0);
  assert_int_equal(a.n, 2);
  assert_int_equal(a.ttl, 10);
  assert_memory_equal(a.addr[0], A1, 4);
  assert_memory_equal(a.addr[1], A2, 4);

  start(&m, "app.test", NRES_DNS_AAAA, 0);
  answers(&m, 2);
  record(&m, NULL, 0, NRES_DNS_A, 5, A1, 4); /* not the type asked: skipped */
  record(&m, NULL, 0, NRES_DNS_AAAA, 0x80000000u, v6, 16);
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.n, 1);
  assert_int_equal(a.ttl, 0); /* a TTL past 2^31 - 1 is 0 */
  assert_memory_equal(a.addr[0], v6, 16);

  /* no answer (NODATA): no address, TTL 0 */
  start(&m, "app.test", NRES_DNS_A, 0);
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.n, 0);
  assert_int_equal(a.ttl, 0);
}

static void test_cname_chain(void **state) {
  msg_t m;
  nres_dns_answer_t a;
  (void) state;
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 4);
  record(&m, NULL, 0, 5, 60, "\4real\xC0\x10", 7);  /* app.test CNAME real.test */
  record(&m, "\5other\4test\0", 12, NRES_DNS_A, 60, A1, 4); /* not in the chain */
  size_t real = m.qn + 12;                           /* the CNAME's rdata: real.test */
  uint8_t ptr[2] = { (uint8_t) (0xC0 | real >> 8), (uint8_t) real };
  record(&m, (const char *) ptr, 2, NRES_DNS_A, 20, A2, 4);
  record(&m, "\4real\4test\0", 11, NRES_DNS_A, 40, A1, 4);
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.n, 2);
  assert_memory_equal(a.addr[0], A2, 4);
  assert_memory_equal(a.addr[1], A1, 4);
  assert_int_equal(a.ttl, 20);
}

static void test_errors_kept(void **state) {
  msg_t m;
  nres_dns_answer_t a;
  (void) state;
  start(&m, "app.test", NRES_DNS_A, 3); /* NXDOMAIN */
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.rcode, 3);
  start(&m, "app.test", NRES_DNS_A, 2); /* SERVFAIL, an answer anyway: not used */
  answers(&m, 1);
  record(&m, NULL, 0, NRES_DNS_A, 30, A1, 4);
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.rcode, 2);
  assert_int_equal(a.n, 0);
}

static void test_not_ours(void **state) {
  msg_t m;
  nres_dns_answer_t a;
  const char *why = NULL;
  (void) state;
  start(&m, "app.test", NRES_DNS_A, 0);
  m.b[1] ^= 1;
  assert_int_equal(read_reply(&m, &a, &why), NRES_EAGAIN);
  assert_string_equal(why, "another id");
  start(&m, "app.test", NRES_DNS_A, 0);
  m.b[2] &= 0x7F; /* a query, not a reply */
  assert_int_equal(read_reply(&m, &a, &why), NRES_EAGAIN);
  start(&m, "app.test", NRES_DNS_A, 0);
  m.b[13] = 'b'; /* bpp.test */
  assert_int_equal(read_reply(&m, &a, &why), NRES_EAGAIN);
  assert_string_equal(why, "another question");
  start(&m, "app.test", NRES_DNS_A, 0);
  m.b[m.qn - 3] = NRES_DNS_AAAA;
  assert_int_equal(read_reply(&m, &a, &why), NRES_EAGAIN);
  start(&m, "app.test", NRES_DNS_A, 0);
  m.b[13] = 'A'; /* APP.test: the same name */
  assert_int_equal(read_reply(&m, &a, &why), 0);
}

static void test_malformed(void **state) {
  msg_t m, good;
  nres_dns_answer_t a;
  const char *why = NULL;
  (void) state;
  start(&good, "app.test", NRES_DNS_A, 0);
  answers(&good, 3);
  record(&good, NULL, 0, 5, 60, "\4real\xC0\x10", 7);
  record(&good, "\4real\4test\0", 11, NRES_DNS_A, 40, A1, 4);
  record(&good, "\4real\4test\0", 11, NRES_DNS_A, 40, A2, 4);
  assert_int_equal(read_reply(&good, &a, NULL), 0);
  /* every prefix of the good reply is refused, never read past its end */
  for (size_t n = 0; n < good.n; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, good.b, n);
    int rc = nres_dns_reply(cut, n, good.q, good.qn, &a, &why);
    assert_true(rc == NRES_EINVAL || (rc == NRES_EAGAIN && n < 12));
    free(cut);
  }
  m = good;
  m.b[2] |= 0x02; /* TC */
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  assert_string_equal(why, "truncated (TC)");
  /* an owner name that points at itself, forward, into the header */
  const uint16_t ptrs[] = { 0, 1, 5, 11 };
  for (size_t i = 0; i < 5; i++) {
    start(&m, "app.test", NRES_DNS_A, 0);
    answers(&m, 1);
    size_t at = m.n;
    uint16_t to = i < 4 ? ptrs[i] : (uint16_t) (at + 2);
    uint8_t p[2] = { (uint8_t) (0xC0 | to >> 8), (uint8_t) to };
    if (i == 0) {
      p[0] = (uint8_t) (0xC0 | at >> 8);
      p[1] = (uint8_t) at;
    }
    record(&m, (const char *) p, 2, NRES_DNS_A, 1, A1, 4);
    assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  }
  /* a two-step loop: label "x" then a pointer back to that label */
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 1);
  size_t at = m.n;
  uint8_t loop[4] = { 1, 'x', (uint8_t) (0xC0 | at >> 8), (uint8_t) at };
  record(&m, (const char *) loop, 4, NRES_DNS_A, 1, A1, 4);
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  /* a label type nobody uses, an A record of 5 bytes, a CNAME past its rdata */
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 1);
  record(&m, "\x41x\0", 3, NRES_DNS_A, 1, A1, 4);
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 1);
  record(&m, NULL, 0, NRES_DNS_A, 1, "\1\2\3\4\5", 5);
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 1);
  record(&m, NULL, 0, 5, 1, "\1x\0\0", 4);
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
  /* two questions */
  m = good;
  m.b[5] = 2;
  assert_int_equal(read_reply(&m, &a, &why), NRES_EINVAL);
}

static void test_many(void **state) {
  msg_t m;
  nres_dns_answer_t a;
  (void) state;
  start(&m, "app.test", NRES_DNS_A, 0);
  answers(&m, 40);
  for (int i = 0; i < 40; i++) {
    uint8_t ip[4] = { 10, 0, 1, (uint8_t) i };
    record(&m, NULL, 0, NRES_DNS_A, 9, ip, 4);
  }
  assert_int_equal(read_reply(&m, &a, NULL), 0);
  assert_int_equal(a.n, NRES_DNS_ADDRS_MAX);
  assert_int_equal(a.dropped, 40 - NRES_DNS_ADDRS_MAX);
}

/* A UDP "server" on loopback: answers a stray datagram (another id) first,
 * then the reply, from a thread. */
typedef struct {
  int fd;
  int answer;
} server_t;

static void *serve(void *arg) {
  server_t *s = arg;
  uint8_t buf[512];
  struct sockaddr_storage from;
  socklen_t fl = sizeof(from);
  ssize_t n = recvfrom(s->fd, buf, sizeof(buf), 0, (struct sockaddr *) &from, &fl);
  if (n <= 0 || !s->answer)
    return NULL;
  msg_t m;
  memcpy(m.b, buf, (size_t) n);
  m.n = (size_t) n;
  m.b[2] |= 0x80;
  answers(&m, 1);
  record(&m, NULL, 0, NRES_DNS_A, 7, A2, 4);
  m.b[0] ^= 0xFF;
  sendto(s->fd, m.b, m.n, 0, (struct sockaddr *) &from, fl);
  m.b[0] ^= 0xFF;
  sendto(s->fd, m.b, m.n, 0, (struct sockaddr *) &from, fl);
  return NULL;
}

static int bound_socket(int *port) {
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t sl = sizeof(sa);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *) &sa, &sl), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

static void test_exchange(void **state) {
  uint8_t q[NRES_DNS_QUERY_MAX];
  nres_dns_answer_t a;
  const char *why = NULL;
  int port, qn = nres_dns_query(q, sizeof(q), nres_dns_id(), "app.test", 8, NRES_DNS_A);
  server_t s = { bound_socket(&port), 1 };
  pthread_t t;
  (void) state;
  assert_int_equal(pthread_create(&t, NULL, serve, &s), 0);
  assert_int_equal(nres_dns_exchange("127.0.0.1", port, q, (size_t) qn, 2000, &a, &why), 0);
  pthread_join(t, NULL);
  assert_int_equal(a.n, 1);
  assert_int_equal(a.ttl, 7);
  assert_memory_equal(a.addr[0], A2, 4);
  /* silence: a timeout */
  s.answer = 0;
  assert_int_equal(pthread_create(&t, NULL, serve, &s), 0);
  assert_int_equal(nres_dns_exchange("127.0.0.1", port, q, (size_t) qn, 100, &a, &why),
                   NRES_ETIMEDOUT);
  pthread_join(t, NULL);
  /* nobody there: refused at once */
  close(s.fd);
  assert_int_equal(nres_dns_exchange("127.0.0.1", port, q, (size_t) qn, 2000, &a, &why),
                   NRES_EINVAL);
  assert_string_equal(why, "connection refused");
  assert_int_equal(nres_dns_exchange("resolver.test", 53, q, (size_t) qn, 100, &a, &why),
                   NRES_EINVAL);
}

/* The pieces the resolving timer polls: nothing waiting is NRES_EAGAIN at
 * once, a stray datagram (another id) is skipped, the reply is read. */
static void test_polled(void **state) {
  uint8_t q[NRES_DNS_QUERY_MAX];
  nres_dns_answer_t a;
  const char *why = NULL;
  int port, qn = nres_dns_query(q, sizeof(q), 0x4242, "app.test", 8, NRES_DNS_A);
  server_t s = { bound_socket(&port), 1 };
  pthread_t t;
  (void) state;
  int fd = nres_dns_open("127.0.0.1", port, &why);
  assert_true(fd >= 0);
  assert_int_equal(nres_dns_recv(fd, q, (size_t) qn, &a, &why), NRES_EAGAIN);
  assert_int_equal(pthread_create(&t, NULL, serve, &s), 0);
  assert_int_equal(nres_dns_send(fd, q, (size_t) qn, &why), 0);
  pthread_join(t, NULL); /* both datagrams sent */
  int rc = NRES_EAGAIN;
  for (int i = 0; i < 1000 && rc == NRES_EAGAIN; i++) {
    rc = nres_dns_recv(fd, q, (size_t) qn, &a, &why);
    if (rc == NRES_EAGAIN)
      usleep(1000);
  }
  assert_int_equal(rc, 0);
  assert_int_equal(a.n, 1);
  assert_int_equal(nres_dns_recv(fd, q, (size_t) qn, &a, &why), NRES_EAGAIN);
  nres_dns_close(fd);
  close(s.fd);
  assert_int_equal(nres_dns_open("app.test", 53, &why), NRES_EINVAL);
  assert_int_equal(nres_dns_open("127.0.0.1", 0, &why), NRES_EINVAL);
}

static void test_ids(void **state) {
  unsigned seen = 0;
  uint16_t first = nres_dns_id();
  (void) state;
  for (int i = 0; i < 16; i++)
    seen += nres_dns_id() != first;
  assert_true(seen >= 14); /* 16 draws of 16 random bits */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_query),       cmocka_unit_test(test_addresses),
    cmocka_unit_test(test_cname_chain), cmocka_unit_test(test_errors_kept),
    cmocka_unit_test(test_not_ours),    cmocka_unit_test(test_malformed),
    cmocka_unit_test(test_many),        cmocka_unit_test(test_exchange),
    cmocka_unit_test(test_polled),      cmocka_unit_test(test_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* http_int.h - what the HTTP client's files share: the host entry (its
 * connection pool, waiters and derived policies) and the connection.
 *
 * http.c runs requests and speaks HTTP on a connection; http_pool.c owns
 * hosts, derived policies and the connections' lifecycle. Never installed.
 */
#ifndef NRES_EXEC_HTTP_INT_H
#define NRES_EXEC_HTTP_INT_H

#include <http_parser.h>

#include "nres/http.h"
#include "internal.h"

#define NRES__HTTP_HEAD_MAX 4096     /* request head, formatted per attempt */
#define NRES__HTTP_RBUF 4096         /* read buffer per connection */
#define NRES__HTTP_KEY_MAX 64        /* "host:port" */
#define NRES__HTTP_RA_MAX 64         /* Retry-After value kept */
#define NRES__HTTP_INTERIM_MAX 16    /* 1xx answers skipped per attempt */

/* The part of a policy compared to tell whether a derived copy is still a
 * copy of it: the public fields before the hedge window (whose atomics
 * change with use), then the pointers to shared state and the listener. */
#define NRES__SNAP_A offsetof(nres_policy_t, hedge.window)
#define NRES__SNAP_B0 offsetof(nres_policy_t, budget)
#define NRES__SNAP_B1 offsetof(nres_policy_t, own)

typedef struct nres__http_slot_s {
  const nres_policy_t *tmpl;         /* NULL: unused */
  uint32_t inflight;                 /* calls running under it */
  uint32_t reserved_;
  unsigned char snap_a[NRES__SNAP_A];
  unsigned char snap_b[NRES__SNAP_B1 - NRES__SNAP_B0];
  nres_breaker_config_t breaker_cfg; /* of an own breaker */
  int64_t budget_cfg[3];             /* deposit, capacity, refill */
  nres_breaker_t breaker;
  nres_budget_t budget;
  nres_throttle_t throttle;          /* of an own throttle */
  nres_policy_t retry;               /* the template, on this host's state */
  nres_policy_t once;                /* the same, attempts = 1 */
} nres__http_slot_t;

typedef struct nres__http_host_s {
  char key[NRES__HTTP_KEY_MAX];      /* authority as written in the URL */
  size_t key_len;
  struct sockaddr_storage addr;
  uint32_t conns;                    /* open or opening */
  nres_http_link_t idle;             /* pooled connections, most recent first */
  nres_http_link_t waiters;          /* req->wait_[slot], oldest first */
  nres__http_slot_t slot[NRES_HTTP_HOST_POLICIES];
} nres__http_host_t;

enum {
  CONN_CONNECTING = 1,
  CONN_IDLE,
  CONN_BUSY,
  CONN_CLOSING
};

typedef struct nres__http_conn_s {
  nres_http_link_t link;             /* idle list or free list */
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  http_parser parser;
  nres_http_client_t *client;
  nres__http_host_t *host;
  nres_http_req_t *req;              /* attempt in progress, or NULL */
  uint32_t token;
  uint8_t slot;
  uint8_t state;
  uint8_t reused;                    /* 1: this attempt reuses it */
  uint8_t got;                       /* 1: response bytes seen */
  uint8_t done;                      /* 1: message complete */
  uint8_t in_ra;                     /* parsing the Retry-After value */
  uint8_t ra_bad;                    /* the value was too long */
  uint8_t field_ra;                  /* the header field being read */
  uint8_t writing;                   /* 1: the request write is pending */
  uint8_t head_req;                  /* 1: a HEAD request (no body) */
  uint8_t interim;                   /* 1: a 1xx answer just ended */
  uint8_t interims;                  /* 1xx answers of this attempt */
  uint32_t head_bytes;
  uint32_t ra_len;
  size_t body_len;                   /* full length */
  size_t body_kept;                  /* in body[] */
  char ra[NRES__HTTP_RA_MAX];
  char head[NRES__HTTP_HEAD_MAX];
  char rbuf[NRES__HTTP_RBUF];
  char body[];                       /* client->config.body_max */
} nres__http_conn_t;

#define NRES__CONTAINER(ptr, type, member)                                   \
  ((type *) (void *) ((char *) (ptr) - offsetof(type, member)))

static inline void nres__list_init(nres_http_link_t *l) {
  l->prev = l->next = l;
}
static inline int nres__list_empty(const nres_http_link_t *l) {
  return l->next == l;
}
static inline void nres__list_remove(nres_http_link_t *e) {
  e->prev->next = e->next;
  e->next->prev = e->prev;
  e->prev = e->next = e;
}
static inline void nres__list_push_front(nres_http_link_t *l,
                                         nres_http_link_t *e) {
  e->next = l->next;
  e->prev = l;
  l->next->prev = e;
  l->next = e;
}
static inline void nres__list_push_back(nres_http_link_t *l,
                                        nres_http_link_t *e) {
  e->prev = l->prev;
  e->next = l;
  l->prev->next = e;
  l->prev = e;
}

/* http_pool.c */
/* The host entry for an authority, created on first use: 0, NRES_EFULL,
 * NRES_ENOMEM, NRES_EINVAL (not a literal address or bad port). */
int nres__http_host(nres_http_client_t *client, const char *authority,
                    size_t len, nres__http_host_t **out);
/* The derived policy slot of `tmpl` on `host`: 0 or NRES_EFULL /
 * NRES_EINVAL (the copy does not build). */
int nres__http_slot(nres__http_host_t *host, const nres_policy_t *tmpl,
                    nres__http_slot_t **out);
/* A connection for (req, slot): an idle one, a new one (connecting), or
 * none (*out NULL: the attempt must wait). 0 or a negative errno. */
int nres__http_conn_get(nres_http_client_t *client, nres__http_host_t *host,
                        nres__http_conn_t **out);
/* After a complete response on a keep-alive connection. */
void nres__http_conn_put(nres__http_conn_t *conn);
/* Close it; its memory returns to the client's free list. */
void nres__http_conn_close(nres__http_conn_t *conn);
/* Free every host (client close). */
void nres__http_hosts_free(nres_http_client_t *client);

/* http.c: the response parser. */
/* Reset conn's response parser and per-answer state for a new answer. */
void nres__http_parse_start(nres__http_conn_t *conn);
/* Feed `len` bytes of the answer to conn's parser. 1: a final answer is
 * complete (*used: the bytes it took; more are not its own), 0: more bytes
 * are needed (all taken), or -EPROTO: malformed, over head_max, a 101 or
 * more than NRES__HTTP_INTERIM_MAX 1xx answers. Interim 1xx answers (100,
 * 102, 103...) are skipped: the parser starts over after each. With
 * data == NULL and len == 0: the peer closed (an answer delimited by the
 * close completes). Needs conn->client (its config) and conn->body's room;
 * conn->req may be NULL. */
int nres__http_parse(nres__http_conn_t *conn, const char *data, size_t len,
                     size_t *used);
/* For fuzzers and tests: parse `len` bytes (any bytes) as the answer to one
 * request (a HEAD if head_req), on a connection of a client with the
 * default config (body_max 4096, head_max 16 KiB), without a socket, in
 * reads of at most NRES__HTTP_RBUF bytes as the connection would, then the
 * peer's close if eof. Returns the final status (>= 200) when an answer is
 * complete, 0 when more bytes were needed, or -EPROTO. Allocates and frees
 * its connection on each call. */
int nres__http_parse_response_for_test(const char *data, size_t len,
                                       int head_req, int eof);

/* http.c: the pool calls these back. */
void nres__http_on_connect(nres__http_conn_t *conn, int status);
void nres__http_on_read(nres__http_conn_t *conn, ssize_t nread);
/* A connection became available on `host` (pooled or closed): hand it to
 * the oldest waiter, if any. */
void nres__http_serve_waiters(nres_http_client_t *client,
                              nres__http_host_t *host);

#endif /* NRES_EXEC_HTTP_INT_H */

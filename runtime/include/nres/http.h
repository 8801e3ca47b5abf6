/* SPDX-License-Identifier: MIT */
/* nres/http.h - the HTTP client handler: HTTP/1.1 requests on libuv, each
 * one a call of the flat executor.
 *
 * A caller-owned request (nres_http_req_t) runs under a policy on the
 * client's loop. Each attempt takes a keep-alive connection from the pool of
 * the URL's host (or opens one), sends the request with an X-Deadline-Ms
 * header (the attempt's time left), parses the answer with http-parser and
 * reports nres_classify_http's verdict (Retry-After read in both forms);
 * transport errors (refused, reset, a reset mid-response) are classified as
 * errno, so they are transient. Attempt timeouts, waits and hedges come from
 * the libuv driver (nres/uv.h) embedded in the request.
 *
 * Interim answers: 1xx responses before the final one (100 Continue, 102
 * Processing, 103 Early Hints, any other 1xx but 101) are read and skipped,
 * up to 16 per attempt and within head_max for all the heads together;
 * the result fields describe the final answer. A 101 Switching Protocols
 * (never asked for: we send no Upgrade), a 17th 1xx, a status below 100 or
 * a malformed answer end the attempt with error = UV_EPROTO and
 * status_code 0, classified PERMANENT (nres_classify_errno): the server
 * does not speak our HTTP, and asking again would get the same; its
 * connection is closed. A server that sends 1xx answers slowly for ever is
 * stopped by the attempt timeout like any stalled answer.
 *
 * Per host: breaker and budget. A policy whose breaker, budget or estimator
 * is its own (the `own` storage, the default) is not used as it is: the
 * host keeps a derived copy of it (one of NRES_HTTP_HOST_POLICIES per host)
 * whose breaker, budget and estimator belong to that host, so a failing
 * host trips its own breaker and spends its own budget. State the policy
 * points at elsewhere (a named, shared budget) stays shared, as the caller
 * asked. Derived copies are made on a host's first request with a policy
 * and kept until the client closes (a copy with no request in flight is
 * replaced when a fifth distinct policy arrives: NRES_EFULL if all are busy).
 *
 * Idempotency: POST and PATCH are not retried (nor hedged) unless the
 * request has NRES_HTTP_IDEMPOTENT: they run under a sibling of the derived
 * policy with attempts = 1 that shares its breaker and budget, so a failure
 * still counts for the host and the call stops with "attempts exhausted".
 *
 * Memory: the caller owns the client and every request. The client
 * allocates a host's state at its first request and connections as the pool
 * grows (up to max_conns per host); closed connections are kept for reuse,
 * so a steady load allocates nothing per request. Everything is freed by
 * nres_http_client_close.
 *
 * Threads: a client and its requests belong to the loop's thread; callbacks
 * run there. Names: host literals only (IPv4, [IPv6] or localhost); no DNS.
 * No TLS, proxies or redirects (see http.c for why a lean client). As in any
 * libuv program writing to sockets, the process should ignore SIGPIPE.
 * Idle pooled connections do not keep the loop alive (uv_unref).
 *
 * For a binding that cannot take C callbacks (LuaJIT FFI): the host program
 * (nresrun) passes its own C callback and resumes the waiting coroutine from
 * it; the request's result fields are plain data readable from Lua.
 */
#ifndef NRES_HTTP_H
#define NRES_HTTP_H

#include "uv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRES_HTTP_MAX_HOSTS 16       /* distinct hosts per client */
#define NRES_HTTP_HOST_POLICIES 4    /* distinct policies per host at once */

/* Request flags. */
enum {
  NRES_HTTP_IDEMPOTENT = 1,          /* POST/PATCH may be retried */
  NRES_HTTP_NO_DEADLINE_HEADER = 2   /* do not send X-Deadline-Ms */
};

typedef struct nres_http_client_s nres_http_client_t;
typedef struct nres_http_req_s nres_http_req_t;

/* The call ended: status 0 on success (a response classified OK, whatever
 * its code), else the NRES_E* of the stop reason. The request's result
 * fields are set; it may be started again from here. */
typedef void (*nres_http_cb)(nres_http_req_t *req, int status);
typedef void (*nres_http_close_cb)(nres_http_client_t *client);
typedef void (*nres_http_req_close_cb)(nres_http_req_t *req);

typedef struct nres_http_config_s {
  uint32_t max_conns;     /* connections per host; default 64. Attempts
                             beyond wait for one (within their timeout) */
  uint32_t body_max;      /* response body bytes kept per connection (what
                             can be copied to resp_body); default 4096 */
  uint32_t head_max;      /* largest response head accepted; 16 KiB */
} nres_http_config_t;

/* Intrusive list link (private). */
typedef struct nres_http_link_s {
  struct nres_http_link_s *prev, *next;
} nres_http_link_t;

/* An attempt waiting for a connection (private). */
typedef struct nres_http_wait_s {
  nres_http_link_t link;
  nres_http_req_t *req;
  uint32_t slot;
} nres_http_wait_t;

struct nres_http_client_s {
  void *data;                        /* the caller's */
  uv_loop_t *loop;
  nres_http_config_t config;
  /* counters, for tests and reports (read any time on the loop thread) */
  uint64_t connects;                 /* connections opened */
  uint64_t sent;                     /* requests written (attempts, resends) */
  uint64_t reused;                   /* sent on a pooled connection */
  uint64_t resent;                   /* stale pooled connection: sent again */
  uint32_t open;                     /* connections open now */
  uint32_t hosts;                    /* host entries in use */
  /* private */
  void *host_[NRES_HTTP_MAX_HOSTS];
  nres_http_link_t free_;            /* closed connections kept for reuse */
  uint32_t closing_;                 /* handle closes in progress */
  uint32_t running_;                 /* requests running */
  uint8_t closed_;
  nres_http_close_cb close_cb_;
  uv_timer_t timer_;                 /* defers close_cb to the loop */
};

struct nres_http_req_s {
  void *data;                        /* the caller's */
  /* In: set before nres_http_start; the memory must stay valid and
   * unchanged until the callback. */
  const char *url;                   /* http://host[:port][/path][?query] */
  const char *method;                /* NULL = "GET"; a token <= 16 chars */
  const char *headers;               /* NULL, or extra header lines, each
                                        ending "\r\n" */
  const char *body;                  /* request body (may be NULL) */
  size_t body_len;
  char *resp_body;                   /* NULL, or where the final response's
                                        body is copied (up to resp_cap) */
  size_t resp_cap;
  uint32_t flags;                    /* NRES_HTTP_* */
  /* Out: valid in the callback; describe the last attempt that ended. */
  int status_code;                   /* HTTP status, 0 if no response */
  int error;                         /* transport error of that attempt
                                        (negative errno), 0 if answered */
  uint32_t attempts;                 /* attempts started */
  uint32_t stop;                     /* nres_stop_t */
  size_t resp_len;                   /* the response body's full length */
  size_t resp_copied;                /* bytes copied into resp_body */
  nres_time_t retry_after;           /* parsed Retry-After, NRES_TIME_NEVER
                                        if none or unparseable */
  /* private */
  nres_uv_t uv_;
  nres_http_client_t *client_;
  nres_http_cb cb_;
  void *host_;
  void *slot_;
  void *conn_[NRES_MAX_INFLIGHT];    /* connection of each attempt slot */
  nres_time_t deadline_[NRES_MAX_INFLIGHT];   /* of each attempt */
  uint32_t token_[NRES_MAX_INFLIGHT];
  int32_t failed_[NRES_MAX_INFLIGHT];         /* deferred failure */
  nres_http_wait_t wait_[NRES_MAX_INFLIGHT];  /* waiting for a connection */
  uv_timer_t defer_;                 /* reports failures found while
                                        starting an attempt, from the loop */
  uint8_t resends_[NRES_MAX_INFLIGHT];
  uint16_t path_off_, path_len_;
  uint16_t method_len_, headers_len_;
  uint16_t key_len_;
  uint8_t active_, closed_, head_, slash_, clen_, closing_;
  nres_http_req_close_cb close_cb_;
};

NRES_EXTERN void nres_http_config_init(nres_http_config_t *config);
/* config may be NULL (defaults). NRES_EINVAL on a zero or absurd field. */
NRES_EXTERN int nres_http_client_init(uv_loop_t *loop,
                                      nres_http_client_t *client,
                                      const nres_http_config_t *config);
/* Close every connection and free the client's memory; close_cb (may be
 * NULL) runs once all is closed. Requests must be closed (or idle) first:
 * a request still running is NRES_EBUSY and nothing is closed. */
NRES_EXTERN int nres_http_client_close(nres_http_client_t *client,
                                       nres_http_close_cb close_cb);
/* The executor's counters summed over every host's derived policies. */
NRES_EXTERN void nres_http_client_counters(const nres_http_client_t *client,
                                           nres_counters_t *out);

/* Initialise a request's timers on the client's loop (once; it is reused
 * for any number of calls). */
NRES_EXTERN int nres_http_req_init(nres_http_client_t *client,
                                   nres_http_req_t *req);
/* Run the request under `policy` (built). inbound: an inherited absolute
 * deadline or NRES_TIME_NEVER. NRES_EINVAL for a bad URL (scheme, host not a
 * literal, port), method, header block, or a request head over 4 KiB;
 * NRES_EBUSY if running; NRES_EFULL when the host table or its policy
 * slots are full; NRES_ENOMEM. On error the callback is never called. */
NRES_EXTERN int nres_http_start(nres_http_req_t *req, nres_policy_t *policy,
                                nres_time_t inbound, nres_http_cb cb);
/* Give up the running call: cb runs with NRES_ECANCELED before return. */
NRES_EXTERN int nres_http_cancel(nres_http_req_t *req);
/* Close the request's timers (a running call is canceled without cb). */
NRES_EXTERN void nres_http_req_close(nres_http_req_t *req,
                                     nres_http_req_close_cb close_cb);

/* Retry-After, either form (RFC 9110 10.2.3): delay-seconds (digits only;
 * huge values saturate at NRES_HTTP_RETRY_AFTER_MAX) or an HTTP-date
 * (IMF-fixdate, RFC 850 or asctime; a past date gives 0), relative to
 * now_unix (seconds since the epoch). Surrounding blanks are allowed. 0 and
 * *out set, or NRES_EINVAL for anything else (*out untouched). */
#define NRES_HTTP_RETRY_AFTER_MAX ((nres_time_t) 100 * 365 * 86400 * NRES_SEC)
NRES_EXTERN int nres_http_retry_after(const char *value, size_t len,
                                      int64_t now_unix, nres_time_t *out);

/* Sizes for bindings. */
NRES_EXTERN size_t nres_http_client_size(void);
NRES_EXTERN size_t nres_http_req_size(void);

#ifdef __cplusplus
}
#endif
#endif /* NRES_HTTP_H */

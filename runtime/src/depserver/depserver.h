/* SPDX-License-Identifier: MIT */
/* depserver.h - the dependency server: a fault-injecting HTTP/1.1 server on
 * libuv for the http cells of nresrun and the HTTP client's tests.
 *
 * It is its own process in the stress suite (nres-depserver, or
 * `nresrun serve` through nres_depserver_main), so its allocations never mix
 * with the client's figures; tests may also run it on a thread of their own
 * with nres_depserver_new on a private loop. Endpoints and options are
 * documented at nres_depserver_main's usage text in depserver.c.
 */
#ifndef NRES_HOST_DEPSERVER_H
#define NRES_HOST_DEPSERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct nres_depserver_s nres_depserver_t;

typedef struct nres_depserver_config_s {
  int port;                 /* 0: the kernel picks one */
  uint32_t flaky_every;     /* /flaky fails every Nth request; default 4 */
  uint32_t max_conns;       /* open connections at most; more wait in the
                               kernel's backlog. Default 256 */
  uint32_t idle_ms;         /* a connection silent this long mid-request or
                               between requests is closed. Default 10000 */
  uint32_t head_ms;         /* a request head must arrive whole within this
                               of its first byte, however steadily it
                               trickles (slowloris). Default 10000 */
  uint32_t write_ms;        /* an answer the peer does not take within this
                               closes the connection (reading stops while
                               one is queued). Default 10000 */
  uint32_t out_max;         /* unread answer bytes the kernel holds for a
                               peer (SO_SNDBUF, fixed; Linux doubles it),
                               4 KiB..64 MiB. Default 64 KiB */
  uint32_t head_max;        /* request line + headers, bytes; 8192 */
  uint32_t body_max;        /* request body read and dropped; 1 MiB */
  uint64_t seed;            /* /slow's random latencies */
} nres_depserver_config_t;

void nres_depserver_config_init(nres_depserver_config_t *config);
/* Listen on 127.0.0.1 on `loop`. 0, or a negative errno (EINVAL naming no
 * field: the command line checks fields one by one). Allocates the
 * connection table once (max_conns entries); nothing per request. */
int nres_depserver_new(uv_loop_t *loop, const nres_depserver_config_t *config,
                       nres_depserver_t **out);
/* The port it listens on. */
int nres_depserver_port(const nres_depserver_t *server);
/* Close every handle; the loop then ends. Loop thread only. */
void nres_depserver_stop(nres_depserver_t *server);
/* The same from any thread. */
void nres_depserver_stop_async(nres_depserver_t *server);
/* Free it, once its loop has ended (uv_run returned). */
void nres_depserver_free(nres_depserver_t *server);

/* For fuzzers and tests: feed `len` bytes (any bytes) to the request
 * parser and handlers of one fresh connection, as reads would (the server's
 * buffer limits and pipelining included), without a socket: answers are
 * counted instead of written, and /slow's delayed answer never comes. The
 * server behind it is made on the first call and kept (counters and all);
 * one thread only. Returns the number of answers, or -1 (no memory). */
int nres_depserver_parse_for_test(const char *buf, size_t len);

/* The command: `nres-depserver [--port N] [--flaky-every N] ...`; prints
 * "port N" on stdout, stops when stdin closes or on SIGTERM/SIGINT.
 * Returns the process exit status (0, or 2 for a bad command line). */
int nres_depserver_main(int argc, char **argv);

#endif /* NRES_HOST_DEPSERVER_H */

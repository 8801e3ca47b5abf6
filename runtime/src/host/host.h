/* host.h - what the nresrun executable offers its Lua code through the FFI.
 *
 * nresrun is a LuaJIT state with the nres modules on its path. These few
 * functions are the host services Lua cannot do well itself: counting the
 * Lua state's own allocations, running a child process with a time limit
 * while capturing its output, facts about the process, and (when built
 * with the http component: NRES_HOST_HTTP) the event loop that carries the
 * http cells' requests and the dependency server beside them. They are
 * exported from the executable (ENABLE_EXPORTS), and lua/nres/host.lua
 * declares them.
 */
#ifndef NRES_HOST_H
#define NRES_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "nres.h"

/* Bytes the Lua state has allocated since it started (never decreases). */
NRES_EXTERN double nres_host_lua_bytes(void);
/* Bytes libnres has allocated through its allocator since start. */
NRES_EXTERN double nres_host_heap_bytes(void);
/* Peak resident set size of this process, in KiB. */
NRES_EXTERN long nres_host_peak_rss_kb(void);
/* Absolute path of this executable (static buffer). */
NRES_EXTERN const char *nres_host_exe(void);
/* 1 if fd is a terminal. */
NRES_EXTERN int nres_host_isatty(int fd);

/* Run argv[0] (a path) with argv, stdin from /dev/null, collecting stdout
 * and stderr (each truncated to its capacity, NUL-terminated). Waits at
 * most timeout_s seconds, then kills the child's process group (SIGKILL).
 * *status: the exit code, 128 + signal if killed by a signal, or -1 when
 * the time limit killed it. Returns 0, or a negative NRES_E* if the child
 * could not be started. */
typedef struct nres_host_child_s {
  int status;
  int timed_out;
  double seconds;               /* wall time it ran */
  size_t out_len, err_len;
} nres_host_child_t;

NRES_EXTERN int nres_host_spawn(const char *const *argv, double timeout_s,
                                char *out, size_t out_cap, char *err,
                                size_t err_cap, nres_host_child_t *child);

/* ------------------------------------------- the cells' loop (loop.c)
 *
 * One libuv loop per process with the HTTP client (nres/http.h) on it. C
 * never calls Lua: a finished request's slot id goes to a ring that the
 * Lua scheduler drains after running the loop. Loop thread = the Lua
 * thread. Not thread-safe. */
#define NRES_HOST_HTTP_MAX 65536       /* request slots per process */

/* A request slot: plain fields Lua reads once its id comes out of the ring
 * (the private request follows it in memory). */
typedef struct nres_host_http_s {
  int32_t id;                 /* index of the slot, 0.. */
  int32_t running;            /* 1 from start to completion */
  int32_t status;             /* 0: success, else NRES_E* of the stop */
  int32_t status_code;        /* HTTP status of the last attempt, 0 if none */
  int32_t error;              /* its transport error (negative errno) */
  uint32_t attempts;
  uint32_t stop;              /* nres_stop_t */
  double resp_len;            /* response body length */
} nres_host_http_t;

/* Make the loop and the client (once; again after close). 0 or NRES_E*. */
NRES_EXTERN int nres_host_loop_init(void);
/* A new slot (allocated once, reused for any number of requests); NULL
 * when out of memory, past NRES_HOST_HTTP_MAX or before init. */
NRES_EXTERN nres_host_http_t *nres_host_http_new(void);
/* Start a request (see nres_http_start): url and method must stay valid
 * until the slot's id comes out of the ring. 0, or NRES_E* and the id never
 * comes out. */
NRES_EXTERN int nres_host_http_start(nres_host_http_t *slot, const char *url,
                                     const char *method, uint32_t flags,
                                     nres_policy_t *policy);
/* Run the loop once, waiting at most timeout_ns (rounded down to whole
 * milliseconds; under 1 ms it only polls), unless finished requests are
 * already waiting to be taken. Returns how many are waiting. */
NRES_EXTERN int nres_host_loop_run(double timeout_ns);
/* Move up to cap finished slot ids into ids; returns how many. */
NRES_EXTERN int nres_host_loop_take(int32_t *ids, int cap);
/* The client's executor counters (summed over its per-host policies) and
 * client_out = { requests sent, connections opened, sends on a reused
 * connection, connections open }. Either may be NULL. */
NRES_EXTERN int nres_host_http_counters(nres_counters_t *out,
                                        double client_out[4]);
/* Close every slot (running requests are canceled without completion),
 * the client and the loop; frees the slots. */
NRES_EXTERN int nres_host_loop_close(void);

/* ----------------------------- the dependency server child (depchild.c) */
typedef struct nres_host_server_s {
  int pid;                    /* 0 once reaped */
  int stdin_fd;               /* write end of its stdin; -1 once closed */
  int port;
  int status;                 /* exit status once reaped (128 + signal) */
} nres_host_server_t;

/* Start argv (e.g. nresrun serve --port 0) with stdin a pipe, and wait at
 * most timeout_s for its "port N" line. 0; NRES_ESTATE if it exited first,
 * NRES_ETIMEDOUT if it said nothing in time (it is then stopped). */
NRES_EXTERN int nres_host_server_start(const char *const *argv,
                                       double timeout_s,
                                       nres_host_server_t *srv);
/* Close its stdin, then SIGTERM, then SIGKILL, reaping it each time (a few
 * seconds at most). 0, or NRES_ETIMEDOUT if it could not be reaped. */
NRES_EXTERN int nres_host_server_stop(nres_host_server_t *srv);
/* A blocking GET of path on 127.0.0.1:port (Connection: close) within
 * timeout_s: the status code, body copied to out (NUL-terminated,
 * truncated), or a negative errno. For control requests only. */
NRES_EXTERN int nres_host_http_get(int port, const char *path,
                                   double timeout_s, char *out,
                                   size_t out_cap);

#endif /* NRES_HOST_H */

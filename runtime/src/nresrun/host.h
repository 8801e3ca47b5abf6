/* SPDX-License-Identifier: MIT */
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
/* The same, of the Lua state of the calling thread only (each state lives
 * on one thread: the main one, or one of nres_host_threads_run's). */
NRES_EXTERN double nres_host_thread_lua_bytes(void);
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

/* ----------------------------------------- a cell's threads (threads.c)
 *
 * Run n OS threads (1..NRES_HOST_THREADS_MAX), each with a fresh Lua state
 * (as nresrun's own) running the Lua source `chunk` with (arg, index
 * 1..n); wait for them all. Thread i's returned string goes to
 * out + i * cap (truncated to cap - 1, NUL-terminated), its length to
 * len[i]; status[i] is 0, or 1 when its chunk raised (out then holds the
 * error with a traceback). Returns 0, NRES_EINVAL (bad arguments) or
 * NRES_ENOMEM (a thread could not start: the started ones still ran, the
 * others have status 1). */
#define NRES_HOST_THREADS_MAX 64
NRES_EXTERN int nres_host_threads_run(int n, const char *chunk, const char *arg,
                                      char *out, size_t cap, int *status,
                                      size_t *len);
/* Called by each thread of a run when it is ready to start its clock:
 * returns once every thread of the run has called it (or ended, or never
 * started), with the run's common start time (nres_step_now() ns). Outside
 * a run: nres_step_now(). */
NRES_EXTERN double nres_host_threads_start(void);

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
/* Move up to cap finished slot ids into ids (HTTP slots >= 0, pool jobs
 * < 0); returns how many. */
NRES_EXTERN int nres_host_loop_take(int32_t *ids, int cap);
/* The client's executor counters (summed over its per-host policies) and
 * client_out = { requests sent, connections opened, sends on a reused
 * connection, connections open }. Either may be NULL. */
NRES_EXTERN int nres_host_http_counters(nres_counters_t *out,
                                        double client_out[4]);
/* Close every slot (running requests are canceled without completion),
 * the pool (queued jobs canceled, running ones finish; their ids are
 * dropped), the client and the loop; frees the slots. */
NRES_EXTERN int nres_host_loop_close(void);

/* ------------------------- pool jobs on the cells' loop (loop.c)
 *
 * With the pool component too (NRES_HOST_POOL): a work pool owned by the
 * loop runs built-in C jobs, and each finished job comes back through the
 * pool's one uv_async_t (nres_pool_uv_*) to the loop thread, where its id
 * goes to the same ring as the HTTP slots'. Ids >= 0 in the ring are HTTP
 * slots, ids < 0 pool job slots. Loop thread only. */
#define NRES_HOST_POOL_MAX 4096        /* job slots per process */

typedef enum {
  NRES_HOST_JOB_SLEEP = 1,    /* sleep arg ns on the worker */
  NRES_HOST_JOB_SPIN = 2      /* busy-loop arg ns on the worker */
} nres_host_job_kind_t;

/* A job slot (allocated once, reused): plain fields Lua reads once its id
 * comes out of the ring. */
typedef struct nres_host_job_s {
  int32_t id;                 /* -(index + 1): its id in the ring */
  int32_t running;            /* 1 from start to completion */
  int32_t status;             /* nres_job_status_t once over */
  int32_t result;             /* the job's return: 0, NRES_E* */
  int32_t worker;             /* index of the worker that ran it, or -1 */
  int32_t kind;               /* nres_host_job_kind_t */
  double arg;                 /* ns */
} nres_host_job_t;

/* Start the loop if needed and the pool on it: threads 0 = $NRES_THREADS,
 * else the number of cores; max_wait ns > 0: the pool's admission by
 * expected wait (nres_pool_options_t.max_wait; a refused job's start
 * returns NRES_ELIMITED). Again with 0 or the same count and max_wait: 0.
 * NRES_ESTATE if it already runs otherwise; else as nres_pool_init. */
NRES_EXTERN int nres_host_pool_init(uint32_t threads, double max_wait);
/* A new job slot; NULL before nres_host_pool_init, past
 * NRES_HOST_POOL_MAX, or out of memory. */
NRES_EXTERN nres_host_job_t *nres_host_job_new(void);
/* Submit a built-in job (kind, arg ns in [0, 3600e9]) from the loop
 * thread. 0, or NRES_EINVAL (bad slot, kind or arg), NRES_EBUSY (running),
 * NRES_ESTATE, NRES_ELIMITED (max_wait); then the id never comes out. */
NRES_EXTERN int nres_host_job_start(nres_host_job_t *job, int kind,
                                    double arg);
/* out = { threads, jobs submitted, jobs executed, most jobs running at
 * once, job slots made, jobs in flight }. NRES_EINVAL before init. */
NRES_EXTERN int nres_host_pool_stats(double out[6]);

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

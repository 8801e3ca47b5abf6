/* SPDX-License-Identifier: MIT */
/* threads.c - a cell's OS threads: N pthreads, each with a Lua state of its own.
 *
 * A scenario's `threads` load runs the cell's worker loop on several OS
 * threads inside the cell's process, as a multi-threaded C server or the
 * workers of one nginx would. A LuaJIT state belongs to one thread, so each
 * thread makes its own (nres_host_lua_new: same module path, same counting
 * allocator) and runs a Lua chunk given as source with two arguments, the
 * caller's string and the thread's index (1-based); the chunk returns a
 * string (the thread's results, JSON). What the threads share - the
 * policy's C state - is plain C memory whose address the caller passes in
 * that string; nothing Lua crosses threads. The calling state blocks here
 * until every thread has finished.
 *
 * Setting a thread up (a Lua state, the scenario loaded, its policy found)
 * can take longer than a short cell's whole window on a loaded machine, so
 * the threads start their clocks together: each calls
 * nres_host_threads_start() when ready, which returns once all have (a
 * thread that fails or never starts counts as arrived), with the same
 * start time for all.
 */
#include <lauxlib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nresrun/luahost.h"

/* The threads' common start. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t all_in;
  int expected, arrived;
  double start;                 /* nres_step_now() as the last one arrived */
} rendezvous_t;

typedef struct {
  rendezvous_t *rendezvous;
  const char *chunk;
  const char *arg;
  int index;
  int status;                   /* 0 ok, 1 the chunk failed */
  char *out;
  size_t cap, len;
  pthread_t tid;
} job_t;

static _Thread_local rendezvous_t *thread_rendezvous;   /* NULL: not in a run */
static _Thread_local int thread_arrived;

/* Count `count` threads in; the last one in takes the start time. Returns
 * with the lock held. */
static void arrive(rendezvous_t *r, int count) {
  pthread_mutex_lock(&r->lock);
  r->arrived += count;
  if (r->arrived >= r->expected) {
    r->start = nres_step_now();
    pthread_cond_broadcast(&r->all_in);
  }
}

double nres_host_threads_start(void) {
  rendezvous_t *r = thread_rendezvous;
  double start;

  if (r == NULL)
    return nres_step_now();
  if (thread_arrived) {
    pthread_mutex_lock(&r->lock);
  } else {
    thread_arrived = 1;
    arrive(r, 1);
  }
  while (r->arrived < r->expected)
    pthread_cond_wait(&r->all_in, &r->lock);
  start = r->start;
  pthread_mutex_unlock(&r->lock);
  return start;
}

/* A thread that ends (or failed) before it called nres_host_threads_start
 * counts as arrived, so the others are not kept waiting for it. */
static void leave(rendezvous_t *r) {
  if (!thread_arrived) {
    thread_arrived = 1;
    arrive(r, 1);
    pthread_mutex_unlock(&r->lock);
  }
  thread_rendezvous = NULL;
}

static void put(job_t *j, const char *s, size_t n) {
  if (j->cap == 0)
    return;
  if (n > j->cap - 1)
    n = j->cap - 1;
  memcpy(j->out, s, n);
  j->out[n] = '\0';
  j->len = n;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

static void *thread_main(void *arg) {
  job_t *j = arg;
  lua_State *L;
  const char *s;
  size_t n;

  thread_rendezvous = j->rendezvous;
  thread_arrived = 0;
  L = nres_host_lua_new(nres_host_exe());
  if (L == NULL) {
    j->status = 1;
    put(j, "cannot create a Lua state", 25);
    leave(j->rendezvous);
    return NULL;
  }
  lua_pushcfunction(L, traceback);
  if (luaL_loadstring(L, j->chunk) != 0) {
    j->status = 1;
  } else {
    lua_pushstring(L, j->arg);
    lua_pushinteger(L, j->index);
    j->status = lua_pcall(L, 2, 1, 1) != 0;
  }
  s = lua_tolstring(L, -1, &n);
  if (s != NULL)
    put(j, s, n);
  else
    put(j, j->status ? "(error object is not a string)" : "", j->status ? 30 : 0);
  lua_close(L);
  leave(j->rendezvous);
  return NULL;
}

int nres_host_threads_run(int n, const char *chunk, const char *arg, char *out,
                          size_t cap, int *status, size_t *len) {
  job_t *jobs;
  rendezvous_t r;
  int started = 0, rc = 0;

  if (n < 1 || n > NRES_HOST_THREADS_MAX || chunk == NULL || arg == NULL ||
      out == NULL || status == NULL || len == NULL)
    return NRES_EINVAL;
  jobs = calloc((size_t) n, sizeof(*jobs));
  if (jobs == NULL)
    return NRES_ENOMEM;
  memset(&r, 0, sizeof(r));
  pthread_mutex_init(&r.lock, NULL);
  pthread_cond_init(&r.all_in, NULL);
  r.expected = n;
  for (int i = 0; i < n; i++) {
    jobs[i].rendezvous = &r;
    jobs[i].chunk = chunk;
    jobs[i].arg = arg;
    jobs[i].index = i + 1;
    jobs[i].out = out + (size_t) i * cap;
    jobs[i].cap = cap;
    if (cap > 0)
      jobs[i].out[0] = '\0';
    if (pthread_create(&jobs[i].tid, NULL, thread_main, &jobs[i]) != 0) {
      rc = NRES_ENOMEM;
      break;
    }
    started++;
  }
  if (started < n) {             /* the threads that never started count in */
    arrive(&r, n - started);
    pthread_mutex_unlock(&r.lock);
  }
  for (int i = 0; i < started; i++) {
    pthread_join(jobs[i].tid, NULL);
    status[i] = jobs[i].status;
    len[i] = jobs[i].len;
  }
  for (int i = started; i < n; i++) {
    status[i] = 1;
    len[i] = 0;
  }
  pthread_cond_destroy(&r.all_in);
  pthread_mutex_destroy(&r.lock);
  free(jobs);
  return rc;
}

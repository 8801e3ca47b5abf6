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
 */
#include <lauxlib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nresrun/luahost.h"

typedef struct {
  const char *chunk;
  const char *arg;
  int index;
  int status;                   /* 0 ok, 1 the chunk failed */
  char *out;
  size_t cap, len;
  pthread_t tid;
} job_t;

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
  lua_State *L = nres_host_lua_new(nres_host_exe());
  const char *s;
  size_t n;

  if (L == NULL) {
    j->status = 1;
    put(j, "cannot create a Lua state", 25);
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
  return NULL;
}

int nres_host_threads_run(int n, const char *chunk, const char *arg, char *out,
                          size_t cap, int *status, size_t *len) {
  job_t *jobs;
  int started = 0, rc = 0;

  if (n < 1 || n > NRES_HOST_THREADS_MAX || chunk == NULL || arg == NULL ||
      out == NULL || status == NULL || len == NULL)
    return NRES_EINVAL;
  jobs = calloc((size_t) n, sizeof(*jobs));
  if (jobs == NULL)
    return NRES_ENOMEM;
  for (int i = 0; i < n; i++) {
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
  for (int i = 0; i < started; i++) {
    pthread_join(jobs[i].tid, NULL);
    status[i] = jobs[i].status;
    len[i] = jobs[i].len;
  }
  for (int i = started; i < n; i++) {
    status[i] = 1;
    len[i] = 0;
  }
  free(jobs);
  return rc;
}

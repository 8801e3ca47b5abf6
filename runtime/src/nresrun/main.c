/* SPDX-License-Identifier: MIT */
/* main.c - nresrun: the scenario runner's executable.
 *
 * A thin C host: it counts libnres's allocations (so cells can report heap
 * bytes per operation), makes the Lua state (luahost.c), points the Lua
 * face at the very libnres this executable is linked with, and hands the
 * command line to lua/nresrun/cli.lua, whose return value is the exit code.
 * Everything else - the scenario DSL, the runner, the reports - is Lua.
 * `nresrun serve ...` is the HTTP dependency server instead (depserver.c),
 * so the http cells need no other binary.
 */
#include <dlfcn.h>
#include <lauxlib.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nresrun/luahost.h"
#ifdef NRES_HOST_HTTP
#include "depserver/depserver.h"
#endif

static atomic_ullong heap_bytes;

static void *count_malloc(size_t n) {
  atomic_fetch_add_explicit(&heap_bytes, n, memory_order_relaxed);
  return malloc(n);
}
static void *count_realloc(void *p, size_t n) {
  atomic_fetch_add_explicit(&heap_bytes, n, memory_order_relaxed);
  return realloc(p, n);
}
static void *count_calloc(size_t c, size_t n) {
  atomic_fetch_add_explicit(&heap_bytes, c * n, memory_order_relaxed);
  return calloc(c, n);
}

double nres_host_heap_bytes(void) {
  return (double) atomic_load_explicit(&heap_bytes, memory_order_relaxed);
}

static char exe_path[PATH_MAX];

const char *nres_host_exe(void) {
  return exe_path;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

int main(int argc, char **argv) {
  Dl_info info;
  lua_State *L;
  ssize_t n;
  int rc;

  /* Sockets (the http cells, the server) report a peer gone as EPIPE. */
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) {
#ifdef NRES_HOST_HTTP
    return nres_depserver_main(argc - 1, argv + 1);
#else
    fprintf(stderr, "nresrun: serve: built without the http component\n");
    return 2;
#endif
  }
  nres_replace_allocator(count_malloc, count_realloc, count_calloc, free);
  n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
  if (n <= 0) {
    strncpy(exe_path, argv[0], sizeof(exe_path) - 1);
    n = (ssize_t) strlen(exe_path);
  }
  exe_path[n] = '\0';
  /* The Lua face must bind the libnres we are linked with, not another. */
  if (getenv("NRES_LIB") == NULL && dladdr((void *) nres_version, &info) &&
      info.dli_fname != NULL)
    setenv("NRES_LIB", info.dli_fname, 1);

  L = nres_host_lua_new(exe_path);
  if (L == NULL) {
    fprintf(stderr, "nresrun: cannot create the Lua state\n");
    return 2;
  }
  lua_pushcfunction(L, traceback);
  if (luaL_loadstring(L, "return require('nresrun.cli').main(...)") != 0) {
    fprintf(stderr, "nresrun: %s\n", lua_tostring(L, -1));
    return 2;
  }
  for (int i = 1; i < argc; i++)
    lua_pushstring(L, argv[i]);
  if (lua_pcall(L, argc - 1, 1, 1) != 0) {
    fprintf(stderr, "nresrun: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return 2;
  }
  rc = lua_isnumber(L, -1) ? (int) lua_tointeger(L, -1) : 0;
  fflush(stdout);
  lua_close(L);
  return rc;
}

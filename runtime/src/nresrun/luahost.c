/* SPDX-License-Identifier: MIT */
/* luahost.c - the LuaJIT state of nresrun, and the Lua allocation counter.
 *
 * The state is made with lua_newstate and an allocator that counts every
 * byte LuaJIT asks for (possible with LuaJIT's GC64 mode, the default on
 * x86-64), so a cell can report Lua garbage per operation exactly rather
 * than guess it from collectgarbage("count"). The module path is set so
 * `require "nres"` finds the modules beside the executable (the build
 * tree) or under the install prefix, and NRES_LIB points at the libnres
 * this executable was built with.
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nresrun/luahost.h"

static atomic_ullong lua_bytes;
/* Each Lua state lives on one thread: this thread's state's bytes. */
static _Thread_local unsigned long long thread_lua_bytes;

static void *count_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void) ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (nsize > osize) {
    size_t grown = nsize - (ptr ? osize : 0);
    atomic_fetch_add_explicit(&lua_bytes, grown, memory_order_relaxed);
    thread_lua_bytes += grown;
  }
  return realloc(ptr, nsize);
}

double nres_host_lua_bytes(void) {
  return (double) atomic_load_explicit(&lua_bytes, memory_order_relaxed);
}

double nres_host_thread_lua_bytes(void) {
  return (double) thread_lua_bytes;
}

/* Set package.path from the executable's place: DIR/../lua (build tree or
 * source checkout) and DIR/../share/lua/5.1 (installed), before the
 * default path. */
static void set_paths(lua_State *L, const char *exe) {
  char dir[4096];
  const char *slash = strrchr(exe, '/');
  size_t n = slash ? (size_t) (slash - exe) : 0;
  char path[16384];

  if (n >= sizeof(dir))
    n = sizeof(dir) - 1;
  memcpy(dir, exe, n);
  dir[n] = '\0';
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
#ifndef NRES_SOURCE_LUA_DIR
# define NRES_SOURCE_LUA_DIR "/nonexistent"
#endif
  /* The build's own source tree last: a build directory anywhere works. */
  snprintf(path, sizeof(path),
           "%s/../lua/?.lua;%s/../share/lua/5.1/?.lua;%s/../../lua/?.lua;"
           NRES_SOURCE_LUA_DIR "/?.lua;%s",
           dir, dir, dir, lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_pushstring(L, path);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
}

lua_State *nres_host_lua_new(const char *exe) {
  lua_State *L = lua_newstate(count_alloc, NULL);
  if (L == NULL)
    return NULL;
  luaL_openlibs(L);
  set_paths(L, exe);
  return L;
}

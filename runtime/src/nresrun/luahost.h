/* SPDX-License-Identifier: MIT */
/* luahost.h - making nresrun's Lua state (see luahost.c). */
#ifndef NRES_HOST_LUAHOST_H
#define NRES_HOST_LUAHOST_H

#include <lua.h>

#include "nresrun/host.h"

/* A new state with the standard libraries, a counting allocator and the
 * nres modules on its path (found relative to the executable `exe`). */
lua_State *nres_host_lua_new(const char *exe);

#endif /* NRES_HOST_LUAHOST_H */

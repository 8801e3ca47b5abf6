/* host.h - what the nresrun executable offers its Lua code through the FFI.
 *
 * nresrun is a LuaJIT state with the nres modules on its path. These few
 * functions are the host services Lua cannot do well itself: counting the
 * Lua state's own allocations, running a child process with a time limit
 * while capturing its output, and facts about the process. They are
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

#endif /* NRES_HOST_H */

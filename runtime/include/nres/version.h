/* nres/version.h - release and ABI version numbers.
 *
 * NRES_ABI_VERSION changes whenever a public struct changes size or layout;
 * the Lua binding compares it with nres_abi_version() at load time so that a
 * stale libnres is a clear error instead of a crash.
 */
#ifndef NRES_VERSION_H
#define NRES_VERSION_H

#define NRES_VERSION_MAJOR 0
#define NRES_VERSION_MINOR 1
#define NRES_VERSION_PATCH 0
#define NRES_VERSION_HEX ((NRES_VERSION_MAJOR << 16) | \
                          (NRES_VERSION_MINOR << 8)  | \
                          (NRES_VERSION_PATCH))
#define NRES_ABI_VERSION 1

#endif /* NRES_VERSION_H */

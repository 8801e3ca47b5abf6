/* SPDX-License-Identifier: MIT */
/* nres/errno.h - the one list of nres error codes.
 *
 * Every code nres returns comes from NRES_ERRNO_MAP. The enum in nres.h and
 * the name and message tables in core/errors.c are generated from it, so the
 * three can never drift. The list is append-only: codes are never renumbered,
 * because Lua bindings and logs keep the numbers.
 *
 * Codes below -1000 are nres's own; the others mirror the POSIX errno of the
 * same name (negated) so that a C caller can pass them through unchanged.
 */
#ifndef NRES_ERRNO_H
#define NRES_ERRNO_H

#define NRES_ERRNO_MAP(XX)                                                   \
  XX(EINVAL,     -22,   "invalid argument")                                  \
  XX(ENOMEM,     -12,   "not enough memory")                                 \
  XX(EBUSY,      -16,   "resource busy")                                     \
  XX(ETIMEDOUT,  -110,  "timed out")                                         \
  XX(ECANCELED,  -125,  "operation canceled")                                \
  XX(EAGAIN,     -11,   "try again")                                         \
  XX(ESTATE,     -1001, "operation not valid in the current state")          \
  XX(EATTEMPTS,  -1002, "attempts exhausted")                                \
  XX(EDEADLINE,  -1003, "deadline exceeded")                                 \
  XX(EBUDGET,    -1004, "budget exhausted")                                  \
  XX(ECIRCUIT,   -1005, "circuit open")                                      \
  XX(ELIMITED,   -1006, "rate limited")                                      \
  XX(EPERMANENT, -1007, "permanent failure")                                 \
  XX(EDRAINING,  -1008, "draining")                                          \
  XX(EFULL,      -1009, "no capacity left")                                  \
  XX(EABI,       -1010, "ABI version mismatch")                              \
  XX(ETHROTTLED, -1011, "throttled locally")                                 \
  XX(ECALLBACK,  -1012, "callback error")                                    \

#endif /* NRES_ERRNO_H */

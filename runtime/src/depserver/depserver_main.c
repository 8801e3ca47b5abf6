/* SPDX-License-Identifier: MIT */
/* depserver_main.c - the nres-depserver executable: the dependency server
 * as a process of its own, so that its allocations never mix with the
 * client's figures. Everything is in depserver.c (nresrun exposes the same
 * entry as `nresrun serve`).
 */
#include "depserver.h"

int main(int argc, char **argv) {
  return nres_depserver_main(argc, argv);
}

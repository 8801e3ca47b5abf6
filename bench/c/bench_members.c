/* SPDX-License-Identifier: MIT */
/* bench_members.c - what a shared membership (peers added and removed at
 * run time, runtime/src/gateway/members.c) costs a gateway request over
 * fixed peers: admission, pick, try start and the call's end, three
 * healthy peers, no membership change, in one process.
 *
 *   bench_members fixed|members p2c|round-robin N   N requests, then exit
 *
 * Instructions per request under callgrind (deterministic, unlike ns):
 * run it at N and 2N and divide the difference by N, as
 * bench/c/callgrind.sh does for bench_call; docs/gateway-peers.md gives
 * the figures. Reported, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nres/gateway.h"

#define SEC 1000000000ull
#define SLOTS 8

int main(int argc, char **argv) {
  if (argc != 4 || (strcmp(argv[1], "fixed") != 0 && strcmp(argv[1], "members") != 0) ||
      (strcmp(argv[2], "p2c") != 0 && strcmp(argv[2], "round-robin") != 0) ||
      atoi(argv[3]) < 1) {
    fprintf(stderr, "usage: bench_members fixed|members p2c|round-robin N\n");
    return 2;
  }
  int members = strcmp(argv[1], "members") == 0, n = atoi(argv[3]);
  static const char *names[] = { "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80" };
  static nres_estimator_t est[SLOTS];
  nres_shm_t *scope, *peers;
  nres_shm_config_t sc, pc;
  nres_shm_config_init(&sc);
  sc.slots = 8;
  nres_shm_config_init(&pc);
  pc.slots = SLOTS;
  pc.flags = NRES_SHM_BREAKER;
  if (nres_shm_new(&sc, &scope) != 0 || nres_shm_new(&pc, &peers) != 0)
    return 1;
  for (int i = 0; i < SLOTS; i++)
    nres_estimator_init(&est[i], SEC);
  uint32_t slots[3];
  nres_gw_members_t *m = NULL;
  if (members) {
    size_t size = nres_gw_members_size(SLOTS);
    m = calloc(1, size);
    if (m == NULL ||
        nres_gw_members_declare(m, size, peers, SLOTS, names, NULL, NULL, 3, 60 * SEC, SEC) < 0)
      return 1;
  } else {
    for (int i = 0; i < 3; i++)
      slots[i] = (uint32_t)nres_shm_acquire(peers, names[i], strlen(names[i]), 1,
                                            NRES_TIME_NEVER, NULL);
  }
  nres_gw_config_t cfg = {
    .name = "backend", .key = "backend", .scope = scope, .peers = peers, .estimators = est,
    .peer_names = names, .peer_slots = members ? NULL : slots, .npeers = 3, .attempts = 2,
    .deadline = 10 * SEC, .attempt_timeout = 2 * SEC, .hold = 60 * SEC,
    .choice = strcmp(argv[2], "p2c") == 0 ? NRES_GW_P2C : NRES_GW_ROUND_ROBIN, .panic = 0.5,
    .budget = 1, .breaker = 1, .members = m };
  nres_gw_upstream_t *u = nres_gw_upstream_new(&cfg);
  if (u == NULL)
    return 1;
  nres_time_t now = 10 * SEC;
  for (int k = 0; k < n; k++) {
    nres_gw_request_t r;
    uint32_t permit;
    int has;
    now += 1000;
    nres_gw_admit(u, &r, now, -1);
    int i = nres_gw_pick(u, now, -1, &permit, &has);
    nres_gw_try_begin(u, &r, now, i, permit, has);
    nres_gw_request_end(u, &r, now + 500000, 200);
  }
  nres_gw_upstream_free(u);
  nres_shm_free(scope);
  nres_shm_free(peers);
  free(m);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* sync_consumer.c - a program built against an installed libnres_sync
 * through libnres_sync.pc, as a C user builds one:
 * cc sync_consumer.c $(pkg-config --cflags --libs libnres_sync).
 *
 * It makes an agent (no Redis needed: nothing connects before a round),
 * adds a budget entry and frees it. Exit 0 and "ok" when all holds.
 */
#include <nres.h>
#include <nres/sync.h>

#include <stdio.h>

int main(void) {
  nres_sync_config_t config;
  nres_sync_t *sync = NULL;
  static nres_budget_t budget;
  int id;

  nres_sync_config_init(&config);
  config.port = 1;   /* never reached: no round runs */
  config.fleet = "consumer";   /* required: part of every key */
  if (nres_sync_new(&config, &sync) != 0 || sync == NULL) {
    fprintf(stderr, "sync_consumer: nres_sync_new failed\n");
    return 1;
  }
  if (nres_budget_init(&budget, 0.1, 3, 30) != 0) {
    fprintf(stderr, "sync_consumer: nres_budget_init failed\n");
    return 1;
  }
  id = nres_sync_add_budget(sync, "orders", &budget, -1);
  if (id < 0) {
    fprintf(stderr, "sync_consumer: nres_sync_add_budget: %s\n", nres_strerror(id));
    return 1;
  }
  nres_sync_free(sync);
  puts("ok");
  return 0;
}

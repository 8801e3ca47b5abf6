/* syncd.c - nres-syncd: the fleet sync agent as a process of its own, for a
 * gateway whose policy state lives in a shared-memory region (nres/shm.h).
 *
 *   nres-syncd --region /dev/shm/nres-gw --redis 127.0.0.1:6379 \
 *              [--scope NAME] [--interval MS] [--breaker] [--node NAME]
 *              [--local-share X] [--prefix P] [--status FILE] [--once]
 *
 * It maps the region file (MAP_SHARED, checked by nres_shm_attach) and,
 * every interval, puts each key in use under a scope "<scope>:<key>" (the
 * table's budget, rate limiter and, with --breaker, breaker), lets go of
 * keys that left their slot, and runs one round of the agent on its own
 * thread: nginx workers never talk to Redis. With --status it writes the
 * agent's figures as JSON (written to FILE.tmp, renamed) once a second.
 * SIGTERM or SIGINT ends it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nres.h"
#include "nres/shm.h"
#include "nres/sync.h"

typedef struct {
  uint32_t gen;
  int live;
  int id[3];                    /* budget, rate limit, breaker entries */
} slot_map_t;

static volatile sig_atomic_t stop_now;

static void on_signal(int sig) {
  (void) sig;
  stop_now = 1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: nres-syncd --region FILE [--redis HOST:PORT] [--scope NAME]\n"
          "                  [--interval MS] [--breaker] [--node NAME]\n"
          "                  [--local-share X] [--prefix P] [--status FILE] [--once]\n");
  exit(2);
}

/* A key as a scope name: printable bytes as they are, others as %XX. */
static void scope_of(char *out, size_t cap, const char *scope, const char *k,
                     int len) {
  size_t n;
  int i;

  n = (size_t) snprintf(out, cap, "%s:", scope);
  for (i = 0; i < len && n + 4 < cap; i++) {
    unsigned char c = (unsigned char) k[i];
    if (c > 32 && c < 127 && c != '%')
      out[n++] = (char) c;
    else
      n += (size_t) snprintf(out + n, cap - n, "%%%02X", c);
  }
  out[n] = '\0';
}

static void write_status(nres_sync_t *sync, slot_map_t *map, uint32_t slots,
                         const char *path) {
  static const char *const kinds[] = { "", "budget", "ratelimit", "breaker" };
  char tmp[4096];
  nres_sync_info_t info;
  nres_sync_stats_t st;
  FILE *f;
  uint32_t i;
  int k, first = 1;

  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  f = fopen(tmp, "w");
  if (f == NULL)
    return;
  nres_sync_info(sync, &info);
  fprintf(f, "{\"node\":\"%s\",\"connected\":%u,\"rounds\":%llu,"
          "\"failures\":%llu,\"connects\":%llu,\"entries\":[",
          nres_sync_node(sync), info.connected,
          (unsigned long long) info.rounds, (unsigned long long) info.failures,
          (unsigned long long) info.connects);
  for (i = 0; i < slots; i++) {
    if (!map[i].live)
      continue;
    for (k = 0; k < 3; k++) {
      if (map[i].id[k] < 0 || nres_sync_stats(sync, map[i].id[k], &st) != 0)
        continue;
      fprintf(f, "%s{\"scope\":\"%s\",\"kind\":\"%s\",\"synced\":%u,"
              "\"hosts\":%u,\"fleet\":%.3f,\"local\":%.3f,\"demand\":%.3f,"
              "\"prober\":%u}",
              first ? "" : ",", st.scope, kinds[st.kind], st.synced, st.hosts,
              st.fleet, st.local, st.demand, st.prober);
      first = 0;
    }
  }
  fprintf(f, "]}\n");
  if (fclose(f) == 0)
    rename(tmp, path);
}

/* Map the region file and check it: 0, or 1 with a message. */
static int map_region(const char *path, void **mem, size_t *size,
                      nres_shm_t **shm, struct stat *sb) {
  int fd, rc;

  fd = open(path, O_RDWR);
  if (fd < 0 || fstat(fd, sb) != 0) {
    fprintf(stderr, "nres-syncd: %s: %s\n", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return 1;
  }
  *size = (size_t) sb->st_size;
  *mem = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (*mem == MAP_FAILED) {
    fprintf(stderr, "nres-syncd: mmap %s: %s\n", path, strerror(errno));
    return 1;
  }
  rc = nres_shm_attach(*mem, *size, shm);
  if (rc != 0) {
    fprintf(stderr, "nres-syncd: %s is not an nres shm region of this build "
            "(%s)\n", path, nres_strerror(rc));
    munmap(*mem, *size);
    return 1;
  }
  return 0;
}

static slot_map_t *new_map(uint32_t slots) {
  slot_map_t *map = calloc(slots, sizeof(*map));
  uint32_t i;

  if (map == NULL) {
    fprintf(stderr, "nres-syncd: out of memory\n");
    exit(1);
  }
  for (i = 0; i < slots; i++)
    map[i].id[0] = map[i].id[1] = map[i].id[2] = -1;
  return map;
}

/* Let go of every key of the map. */
static void forget(nres_sync_t *sync, slot_map_t *map, uint32_t slots) {
  uint32_t i;
  int k;

  for (i = 0; i < slots; i++) {
    for (k = 0; k < 3; k++)
      if (map[i].id[k] >= 0)
        nres_sync_remove(sync, map[i].id[k]);
    map[i].live = 0;
    map[i].id[0] = map[i].id[1] = map[i].id[2] = -1;
  }
}

int main(int argc, char **argv) {
  const char *region = NULL, *redis = "127.0.0.1:6379", *scope = "shm";
  const char *status = NULL;
  char host[256], name[NRES_SYNC_SCOPE_MAX], key[NRES_SHM_KEY_MAX];
  nres_sync_config_t cfg;
  nres_sync_t *sync;
  const nres_shm_config_t *tc;
  nres_shm_slot_t *slot;
  nres_shm_t *shm;
  slot_map_t *map;
  struct stat sb, now_sb;
  size_t size;
  nres_time_t next_look = 0;
  struct sigaction sa;
  nres_time_t next_status = 0;
  uint32_t i, gen, slots;
  int rc, k, len, breaker = 0, once = 0, warned = 0;
  void *mem;
  char *colon;

  nres_sync_config_init(&cfg);
  for (k = 1; k < argc; k++) {
    if (strcmp(argv[k], "--breaker") == 0) { breaker = 1; continue; }
    if (strcmp(argv[k], "--once") == 0) { once = 1; continue; }
    if (k + 1 >= argc)
      usage();
    if (strcmp(argv[k], "--region") == 0) region = argv[++k];
    else if (strcmp(argv[k], "--redis") == 0) redis = argv[++k];
    else if (strcmp(argv[k], "--scope") == 0) scope = argv[++k];
    else if (strcmp(argv[k], "--node") == 0) cfg.node = argv[++k];
    else if (strcmp(argv[k], "--prefix") == 0) cfg.prefix = argv[++k];
    else if (strcmp(argv[k], "--status") == 0) status = argv[++k];
    else if (strcmp(argv[k], "--interval") == 0)
      cfg.interval = (nres_time_t) (atof(argv[++k]) * 1e6);
    else if (strcmp(argv[k], "--local-share") == 0)
      cfg.local_share = atof(argv[++k]);
    else
      usage();
  }
  if (region == NULL)
    usage();
  snprintf(host, sizeof(host), "%s", redis);
  colon = strrchr(host, ':');
  if (colon != NULL) {
    *colon = '\0';
    cfg.port = atoi(colon + 1);
  }
  cfg.host = host;

  if (map_region(region, &mem, &size, &shm, &sb) != 0)
    return 1;
  tc = nres_shm_config(shm);
  slots = tc->slots;
  rc = nres_sync_new(&cfg, &sync);
  if (rc != 0) {
    fprintf(stderr, "nres-syncd: bad settings (%s)\n", nres_strerror(rc));
    return 2;
  }
  map = new_map(slots);

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  while (!stop_now) {
    nres_time_t now = nres_clock_now();
    struct timespec ts;

    /* A gateway that changes a table's layout replaces its file: map the
     * new one (checked once a second). */
    if (now >= next_look) {
      next_look = now + NRES_SEC;
      if (stat(region, &now_sb) == 0 &&
          (now_sb.st_ino != sb.st_ino || now_sb.st_dev != sb.st_dev)) {
        void *m2;
        size_t s2;
        nres_shm_t *shm2;

        if (map_region(region, &m2, &s2, &shm2, &now_sb) == 0) {
          forget(sync, map, slots);
          munmap(mem, size);
          mem = m2;
          size = s2;
          shm = shm2;
          sb = now_sb;
          tc = nres_shm_config(shm);
          slots = tc->slots;
          free(map);
          map = new_map(slots);
          fprintf(stderr, "nres-syncd: %s replaced: mapped the new file\n",
                  region);
        }
      }
    }
    /* Keys in use now; a slot with a new key (another generation) is let
     * go of and taken again. */
    for (i = 0; i < slots; i++) {
      len = nres_shm_key(shm, i, key, sizeof(key), &gen, NULL);
      if (map[i].live && (len < 0 || gen != map[i].gen)) {
        for (k = 0; k < 3; k++)
          if (map[i].id[k] >= 0)
            nres_sync_remove(sync, map[i].id[k]);
        map[i].live = 0;
        map[i].id[0] = map[i].id[1] = map[i].id[2] = -1;
      }
      if (len <= 0 || map[i].live)
        continue;
      slot = nres_shm_slot(shm, i);
      scope_of(name, sizeof(name), scope, key, len);
      map[i].live = 1;
      map[i].gen = gen;
      if (tc->flags & NRES_SHM_BUDGET)
        map[i].id[0] = nres_sync_add_budget(sync, name, &slot->budget,
                                             tc->budget_min_per_sec);
      if (tc->flags & NRES_SHM_RATELIMIT)
        map[i].id[1] = nres_sync_add_ratelimit(sync, name, &slot->ratelimit,
                                                tc->rate);
      if (breaker && (tc->flags & NRES_SHM_BREAKER))
        map[i].id[2] = nres_sync_add_breaker(sync, name, &slot->breaker);
      for (k = 0; k < 3; k++)
        if (map[i].id[k] == NRES_EFULL && !warned) {
          fprintf(stderr, "nres-syncd: more than %d entries: the rest stay "
                  "local\n", NRES_SYNC_MAX_ENTRIES);
          warned = 1;
        }
    }
    nres_sync_tick(sync, now);
    if (status != NULL && now >= next_status) {
      write_status(sync, map, slots, status);
      next_status = now + NRES_SEC;
    }
    if (once)
      break;
    now = nres_clock_now() - now;
    if (now < cfg.interval) {
      now = cfg.interval - now;
      ts.tv_sec = (time_t) (now / NRES_SEC);
      ts.tv_nsec = (long) (now % NRES_SEC);
      nanosleep(&ts, NULL);
    }
  }
  if (status != NULL)
    write_status(sync, map, slots, status);
  nres_sync_free(sync);
  free(map);
  munmap(mem, size);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* syncd.c - nres-syncd: the fleet sync agent as a process of its own, for a
 * gateway whose policy state lives in shared-memory region files
 * (nres/shm.h; the nginx gateway's <dir>/<name>.<kind>.<table>.shm).
 *
 *   nres-syncd --fleet NAME --region FILE[=SCOPE] [--region FILE[=SCOPE]...]
 *              [--redis HOST:PORT|unix:PATH | --sentinel HOST:PORT...
 *               --master NAME | --cluster HOST:PORT...] [--db N] [--user NAME]
 *              [--password-file FILE | --password-env VAR]
 *              [--tls [--tls-ca FILE] [--tls-cert FILE] [--tls-key FILE]
 *               [--tls-name NAME]]
 *              [--interval MS] [--breaker] [--quorum X] [--node NAME]
 *              [--local-share X] [--prefix P] [--status FILE] [--once]
 *
 * --fleet is required: it is part of every key, so two fleets (staging and
 * production) on one Redis never share a record. A password is never taken
 * from the command line (ps shows it). --once runs one round and exits 1 if
 * it did not reach Redis or Redis answered something refused.
 *
 * It maps each region file (MAP_SHARED, checked by nres_shm_attach) and,
 * every interval, puts each key in use under a scope "<SCOPE>:<key>"
 * (SCOPE defaults to the file's name without ".shm"; the fleet's hosts
 * must use the same): the table's budget, rate limiter and, with
 * --breaker, breaker. It lets go of keys that left their slot, maps a
 * file again when the gateway replaces it (another layout), and runs one
 * round of the agent, then a probe half-way to the next (a Redis that
 * hangs is seen within one interval): nginx workers never talk to Redis.
 * Rate limiters are synced with the table's rate and burst as the fleet's
 * (each host holds its part of both). With --status it
 * writes the agent's figures as JSON (FILE.tmp renamed) once a second.
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

#define MAX_REGIONS 32

typedef struct {
  uint32_t gen;
  int live;
  int id[3];                    /* budget, rate limit, breaker entries */
} slot_map_t;

typedef struct {
  const char *path;
  char scope[NRES_SYNC_SCOPE_MAX / 2];
  void *mem;
  size_t size;
  nres_shm_t *shm;
  struct stat sb;
  uint32_t slots;
  slot_map_t *map;
} region_t;

static volatile sig_atomic_t stop_now;

static void on_signal(int sig) {
  (void) sig;
  stop_now = 1;
}

/* Sleep until `t` on nres_clock_now's clock (a signal cuts it short). */
static void sleep_until(nres_time_t t) {
  nres_time_t now = nres_clock_now();
  struct timespec ts;

  if (t <= now)
    return;
  ts.tv_sec = (time_t) ((t - now) / NRES_SEC);
  ts.tv_nsec = (long) ((t - now) % NRES_SEC);
  nanosleep(&ts, NULL);
}

/* The help text is also nres-syncd(8): cmake/manpage.cmake makes the
 * manual page from `nres-syncd --help` at build time. */
#define USAGE \
  "usage: nres-syncd --fleet NAME --region FILE[=SCOPE]...\n" \
  "                  [--redis HOST:PORT|unix:PATH | --sentinel HOST:PORT...\n" \
  "                   --master NAME [--sentinel-user NAME]\n" \
  "                   [--sentinel-password-file FILE | --sentinel-password-env VAR]\n" \
  "                   | --cluster HOST:PORT...] [--db N]\n" \
  "                  [--user NAME]\n" \
  "                  [--password-file FILE | --password-env VAR]\n" \
  "                  [--tls [--tls-ca FILE] [--tls-cert FILE] [--tls-key FILE]\n" \
  "                   [--tls-name NAME]]\n" \
  "                  [--interval MS] [--breaker] [--quorum X] [--node NAME]\n" \
  "                  [--fleet-ratio X [--fleet-min-calls N]]\n" \
  "                  [--local-share X] [--prefix P] [--status FILE] [--once]\n" \
  "\n" \
  "nres-syncd syncs an nres gateway's shared tables with Redis, so that\n" \
  "every host of a fleet shares one retry budget, one rate limit and, with\n" \
  "--breaker, one breaker view per key. It runs beside nginx; nginx's\n" \
  "workers never talk to Redis. Every interval it runs one round of the\n" \
  "sync agent (nres/sync.h), then a probe half-way to the next, so a Redis\n" \
  "that hangs is seen within one interval. If Redis is down, each host\n" \
  "falls back to its local share of the fleet's figures and reconnects\n" \
  "with backoff. Every reply is checked before it is applied; an error\n" \
  "reply (NOAUTH, READONLY, NOSCRIPT) is logged once per change.\n" \
  "\n" \
  "Options:\n" \
  "  --fleet NAME           the fleet's name, required: part of every key, so\n" \
  "                         two fleets on one Redis never share a record\n" \
  "  --region FILE[=SCOPE]  a gateway region file to sync (up to 32), as\n" \
  "                         <dir>/<name>.<kind>.<table>.shm; each key in\n" \
  "                         use is synced under SCOPE:key, SCOPE being the\n" \
  "                         file's name without .shm unless given; every\n" \
  "                         host of the fleet must use the same scopes\n" \
  "  --redis HOST:PORT      the Redis server (default 127.0.0.1:6379), or\n" \
  "  --redis unix:PATH      its unix socket\n" \
  "  --sentinel HOST:PORT   a Redis Sentinel (repeat, up to 8): the primary\n" \
  "                         is asked of the Sentinels, with --master NAME\n" \
  "  --master NAME          the Sentinel master's name\n" \
  "  --sentinel-user NAME   the Sentinels' ACL user\n" \
  "  --sentinel-password-file FILE, --sentinel-password-env VAR\n" \
  "                         the Sentinels' own password (requirepass in\n" \
  "                         sentinel.conf), as --password-file and\n" \
  "                         --password-env\n" \
  "  --cluster HOST:PORT    a Redis Cluster node to learn the slots from\n" \
  "                         (repeat, up to 8): each key's calls go to the\n" \
  "                         node serving its slot, MOVED and ASK followed\n" \
  "  --db N                 SELECT this database after connecting\n" \
  "  --user NAME            the ACL user (default: AUTH with the password\n" \
  "                         alone, as requirepass wants)\n" \
  "  --password-file FILE   the password, from the file's first line\n" \
  "  --password-env VAR     the password, from this environment variable\n" \
  "                         (never on the command line: ps shows it)\n" \
  "  --tls                  TLS to Redis (not to the Sentinels); the server's\n" \
  "                         certificate is verified\n" \
  "  --tls-ca FILE          the CAs to verify it with (default: the system's)\n" \
  "  --tls-cert FILE        a client certificate (PEM), if Redis asks for one\n" \
  "  --tls-key FILE         its key (default: in the --tls-cert file)\n" \
  "  --tls-name NAME        the name or IP the certificate must carry\n" \
  "                         (default: the host of --redis)\n" \
  "  --interval MS          milliseconds between rounds, 1 to 3600000\n" \
  "                         (default 100)\n" \
  "  --breaker              sync the breakers too, by quorum (--quorum)\n" \
  "  --quorum X             the fleet opens a key's breaker when more than\n" \
  "                         this share of the hosts that saw the dependency\n" \
  "                         lately are open, 0 to 0.999999 (default 0.5: a\n" \
  "                         strict majority; 0: the first host that opens)\n" \
  "  --fleet-ratio X        or when at least this share of the fleet's calls\n" \
  "                         (the breakers' windows, over every host) failed,\n" \
  "                         0 to 1 (default 0: off); a host open itself\n" \
  "                         claims the break for all\n" \
  "  --fleet-min-calls N    the fleet's calls the ratio needs, 1 to 1e9\n" \
  "                         (default 20)\n" \
  "  --node NAME            this host's name in the fleet, without quotes,\n" \
  "                         backslashes or blanks (default hostname:pid:\n" \
  "                         random)\n" \
  "  --local-share X        the share of the fleet's figures a host keeps\n" \
  "                         while Redis is unreachable, 0 to 1 (default 0:\n" \
  "                         one over the hosts seen at the last sync)\n" \
  "  --prefix P             the first part of every Redis key (default nres)\n" \
  "  --status FILE          write the agent's figures as JSON to FILE once a\n" \
  "                         second (FILE.tmp, then renamed); gw.fleet(FILE)\n" \
  "                         shows them in the gateway's /nres/status\n" \
  "  --once                 run one round and exit\n" \
  "  --help                 print this help and exit\n" \
  "\n" \
  "Signals:\n" \
  "  SIGTERM, SIGINT        write the status file once more and exit\n" \
  "\n" \
  "Exit status:\n" \
  "  0                      stopped by a signal, or --once done\n" \
  "  1                      a region file could not be mapped, memory ran\n" \
  "                         out, or --once's round failed\n" \
  "  2                      a usage error or bad settings, naming the flag\n"

static void usage(void) {
  fputs(USAGE, stderr);
  exit(2);
}

/* A flag's environment variable: its value, or a line naming the flag and
 * exit 2 if it is unset or empty. */
static const char *env_flag(const char *flag, const char *var) {
  const char *v = getenv(var);

  if (v == NULL || v[0] == '\0') {
    fprintf(stderr, "nres-syncd: %s: expected the name of a set environment "
            "variable, got \"%s\" (unset or empty)\n", flag, var);
    exit(2);
  }
  return v;
}

/* A flag's number: the whole text a finite number within [lo, hi], or a
 * line naming the flag and exit 2 (never atof's silent 0, never a cast of
 * an out-of-range double). */
static double number_flag(const char *flag, const char *text, double lo, double hi) {
  char *end;
  double v;

  errno = 0;
  v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !(v >= lo && v <= hi)) {
    fprintf(stderr, "nres-syncd: %s: expected a number from %g to %g, got \"%s\"\n",
            flag, lo, hi, text);
    exit(2);
  }
  return v;
}

/* A key as a scope name: printable bytes as they are, others as %XX. A
 * key can come from a client (a limiter keyed by API key), so '"' and '\\'
 * are escaped too: the name goes into the --status JSON as it is. */
static size_t escape_into(char *out, size_t n, size_t cap, const char *s, size_t len) {
  for (size_t i = 0; i < len && n + 4 < cap; i++) {
    unsigned char c = (unsigned char) s[i];
    if (c > 32 && c < 127 && c != '%' && c != '"' && c != '\\')
      out[n++] = (char) c;
    else
      n += (size_t) snprintf(out + n, cap - n, "%%%02X", c);
  }
  return n;
}

static void scope_of(char *out, size_t cap, const char *scope, const char *k,
                     int len) {
  size_t n = escape_into(out, 0, cap, scope, strlen(scope));

  if (n + 2 < cap)
    out[n++] = ':';
  n = escape_into(out, n, cap, k, (size_t) len);
  out[n] = '\0';
}

static void write_status(nres_sync_t *sync, region_t *regions, int nregions,
                         const char *path) {
  static const char *const kinds[] = { "", "budget", "ratelimit", "breaker" };
  char tmp[4096];
  nres_sync_info_t info;
  nres_sync_stats_t st;
  FILE *f;
  uint32_t i;
  int k, r, first = 1;

  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  f = fopen(tmp, "w");
  if (f == NULL)
    return;
  nres_sync_info(sync, &info);
  fprintf(f, "{\"node\":\"%s\",\"written_unix\":%lld,\"connected\":%u,\"rounds\":%llu,"
          "\"failures\":%llu,\"connects\":%llu,\"errors\":%llu,\"error\":\"",
          nres_sync_node(sync), (long long) time(NULL), info.connected,
          (unsigned long long) info.rounds, (unsigned long long) info.failures,
          (unsigned long long) info.connects, (unsigned long long) info.errors);
  for (const char *c = info.error; *c != '\0'; c++)   /* a JSON string */
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if ((unsigned char) *c < 32)
      fprintf(f, "\\u%04x", (unsigned) (unsigned char) *c);
    else
      fputc(*c, f);
  fprintf(f, "\",\"entries\":[");
  for (r = 0; r < nregions; r++)
  for (i = 0; i < regions[r].slots; i++) {
    slot_map_t *map = regions[r].map;

    if (!map[i].live)
      continue;
    for (k = 0; k < 3; k++) {
      if (map[i].id[k] < 0 || nres_sync_stats(sync, map[i].id[k], &st) != 0)
        continue;
      fprintf(f, "%s{\"scope\":\"%s\",\"kind\":\"%s\",\"synced\":%u,"
              "\"hosts\":%u,\"fleet\":%.3f,\"local\":%.3f,\"demand\":%.3f,"
              "\"prober\":%u,\"leases_expired\":%llu}",
              first ? "" : ",", st.scope, kinds[st.kind], st.synced, st.hosts,
              st.fleet, st.local, st.demand, st.prober,
              (unsigned long long) st.leases_expired);
      first = 0;
    }
  }
  fprintf(f, "]}\n");
  if (fclose(f) == 0)
    rename(tmp, path);
}

/* Map the region file and check it: 0, or 1 with a message. The file
 * passes the checks the gateway's own files pass (nres_shm_file_open:
 * not a symbolic link, a regular file of this user with no group or other
 * access, not empty), then its layout is checked against its size
 * (nres_shm_attach: a file too short for its header's layout is refused):
 * a file someone else made or can write is never mapped. */
static int map_region(const char *path, void **mem, size_t *size,
                      nres_shm_t **shm, struct stat *sb) {
  char why[256];
  int fd, rc;

  rc = nres_shm_file_open(path, 0, &fd, why, sizeof(why));
  if (rc != 0 || fstat(fd, sb) != 0) {
    fprintf(stderr, "nres-syncd: %s: refused: %s\n", path,
            rc != 0 ? why : strerror(errno));
    if (fd >= 0)
      close(fd);
    return 1;
  }
  *size = (size_t) sb->st_size;
  *mem = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*mem == MAP_FAILED) {
    fprintf(stderr, "nres-syncd: mmap %s: %s\n", path, strerror(errno));
    close(fd);
    return 1;
  }
  close(fd);
  /* The layout must fit the file (a gateway's file may carry more after
   * it: its control area). */
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

/* Keys in use in region r now: new ones added, gone ones let go of. */
static void scan(nres_sync_t *sync, region_t *r, int breaker, int *warned) {
  const nres_shm_config_t *tc = nres_shm_config(r->shm);
  char name[NRES_SYNC_SCOPE_MAX], key[NRES_SHM_KEY_MAX];
  slot_map_t *map = r->map;
  nres_shm_slot_t *slot;
  uint32_t i, gen;
  int k, len;

  for (i = 0; i < r->slots; i++) {
    len = nres_shm_key(r->shm, i, key, sizeof(key), &gen, NULL);
    if (map[i].live && (len < 0 || gen != map[i].gen)) {
      for (k = 0; k < 3; k++)
        if (map[i].id[k] >= 0)
          nres_sync_remove(sync, map[i].id[k]);
      map[i].live = 0;
      map[i].id[0] = map[i].id[1] = map[i].id[2] = -1;
    }
    if (len <= 0 || map[i].live)
      continue;
    slot = nres_shm_slot(r->shm, i);
    scope_of(name, sizeof(name), r->scope, key, len);
    map[i].live = 1;
    map[i].gen = gen;
    if (tc->flags & NRES_SHM_BUDGET)
      map[i].id[0] = nres_sync_add_budget(sync, name, &slot->budget,
                                           tc->budget_min_per_sec);
    if (tc->flags & NRES_SHM_RATELIMIT)
      map[i].id[1] = nres_sync_add_ratelimit_burst(sync, name,
                                                    &slot->ratelimit,
                                                    tc->rate, tc->burst);
    if (breaker && (tc->flags & NRES_SHM_BREAKER))
      map[i].id[2] = nres_sync_add_breaker(sync, name, &slot->breaker);
    for (k = 0; k < 3; k++)
      if (map[i].id[k] == NRES_EFULL && !*warned) {
        fprintf(stderr, "nres-syncd: more than %d entries: the rest stay "
                "local\n", NRES_SYNC_MAX_ENTRIES);
        *warned = 1;
      }
  }
}

/* A gateway that changes a table's layout replaces its file: map the new
 * one, let go of the old keys. */
static void look_again(nres_sync_t *sync, region_t *r) {
  struct stat sb;
  void *mem;
  size_t size;
  nres_shm_t *shm;

  if (stat(r->path, &sb) != 0 ||
      (sb.st_ino == r->sb.st_ino && sb.st_dev == r->sb.st_dev))
    return;
  if (map_region(r->path, &mem, &size, &shm, &sb) != 0)
    return;
  forget(sync, r->map, r->slots);
  munmap(r->mem, r->size);
  free(r->map);
  r->mem = mem;
  r->size = size;
  r->shm = shm;
  r->sb = sb;
  r->slots = nres_shm_config(shm)->slots;
  r->map = new_map(r->slots);
  fprintf(stderr, "nres-syncd: %s replaced: mapped the new file\n", r->path);
}

int main(int argc, char **argv) {
  const char *redis = "127.0.0.1:6379", *status = NULL;
  region_t regions[MAX_REGIONS];
  char host[256], sentinels[2048] = "", seeds[2048] = "";
  nres_sync_config_t cfg;
  nres_sync_t *sync;
  struct sigaction sa;
  nres_time_t next_look = 0, next_status = 0;
  int nregions = 0, rc, k, r, breaker = 0, once = 0, warned = 0;
  char *colon, *eq, *base;

  memset(regions, 0, sizeof(regions));
  nres_sync_config_init(&cfg);
  for (k = 1; k < argc; k++) {
    if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (strcmp(argv[k], "--breaker") == 0) { breaker = 1; continue; }
    if (strcmp(argv[k], "--once") == 0) { once = 1; continue; }
    if (strcmp(argv[k], "--tls") == 0) { cfg.tls = 1; continue; }
    if (k + 1 >= argc)
      usage();
    if (strcmp(argv[k], "--region") == 0) {
      region_t *g = &regions[nregions];

      if (nregions == MAX_REGIONS)
        usage();
      g->path = argv[++k];
      eq = strchr(argv[k], '=');
      if (eq != NULL) {
        *eq = '\0';
        snprintf(g->scope, sizeof(g->scope), "%s", eq + 1);
      } else {
        base = strrchr(g->path, '/');
        snprintf(g->scope, sizeof(g->scope), "%s", base ? base + 1 : g->path);
        if (strlen(g->scope) > 4 &&
            strcmp(g->scope + strlen(g->scope) - 4, ".shm") == 0)
          g->scope[strlen(g->scope) - 4] = '\0';
      }
      nregions++;
    }
    else if (strcmp(argv[k], "--redis") == 0) redis = argv[++k];
    else if (strcmp(argv[k], "--node") == 0) {
      cfg.node = argv[++k];   /* written into the status JSON as it is */
      if (cfg.node[0] == '\0' || strpbrk(cfg.node, "\"\\\n\t ") != NULL) {
        fprintf(stderr, "nres-syncd: --node: expected a name without quotes, "
                "backslashes or blanks, got \"%s\"\n", cfg.node);
        return 2;
      }
    }
    else if (strcmp(argv[k], "--prefix") == 0) cfg.prefix = argv[++k];
    else if (strcmp(argv[k], "--fleet") == 0) cfg.fleet = argv[++k];
    else if (strcmp(argv[k], "--user") == 0) cfg.user = argv[++k];
    else if (strcmp(argv[k], "--password-file") == 0) cfg.password_file = argv[++k];
    else if (strcmp(argv[k], "--password-env") == 0)
      cfg.password = env_flag("--password-env", argv[++k]);
    else if (strcmp(argv[k], "--sentinel-user") == 0) cfg.sentinel_user = argv[++k];
    else if (strcmp(argv[k], "--sentinel-password-file") == 0)
      cfg.sentinel_password_file = argv[++k];
    else if (strcmp(argv[k], "--sentinel-password-env") == 0)
      cfg.sentinel_password = env_flag("--sentinel-password-env", argv[++k]);
    else if (strcmp(argv[k], "--password") == 0) {
      fprintf(stderr, "nres-syncd: --password: never on the command line (ps "
              "shows it): use --password-file FILE or --password-env VAR\n");
      return 2;
    }
    else if (strcmp(argv[k], "--sentinel") == 0) {
      size_t n = strlen(sentinels);

      snprintf(sentinels + n, sizeof(sentinels) - n, "%s%s", n ? "," : "", argv[++k]);
      cfg.sentinels = sentinels;
    }
    else if (strcmp(argv[k], "--master") == 0) cfg.master = argv[++k];
    else if (strcmp(argv[k], "--cluster") == 0) {
      size_t n = strlen(seeds);

      snprintf(seeds + n, sizeof(seeds) - n, "%s%s", n ? "," : "", argv[++k]);
      cfg.cluster = seeds;
    }
    else if (strcmp(argv[k], "--tls-ca") == 0) cfg.tls_ca_file = argv[++k];
    else if (strcmp(argv[k], "--tls-cert") == 0) cfg.tls_cert_file = argv[++k];
    else if (strcmp(argv[k], "--tls-key") == 0) cfg.tls_key_file = argv[++k];
    else if (strcmp(argv[k], "--tls-name") == 0) cfg.tls_server_name = argv[++k];
    else if (strcmp(argv[k], "--db") == 0)
      cfg.db = (int) number_flag("--db", argv[++k], 0, 1000000);
    else if (strcmp(argv[k], "--quorum") == 0)
      cfg.breaker_quorum = number_flag("--quorum", argv[++k], 0, 0.999999);
    else if (strcmp(argv[k], "--fleet-ratio") == 0)
      cfg.breaker_fleet_ratio = number_flag("--fleet-ratio", argv[++k], 0, 1);
    else if (strcmp(argv[k], "--fleet-min-calls") == 0) {
      double v = number_flag("--fleet-min-calls", argv[++k], 1, 1e9);

      if (v != (double) (uint32_t) v) {
        fprintf(stderr, "nres-syncd: --fleet-min-calls: expected a whole "
                "number of calls, got \"%s\"\n", argv[k]);
        return 2;
      }
      cfg.breaker_fleet_min_calls = (uint32_t) v;
    }
    else if (strcmp(argv[k], "--status") == 0) status = argv[++k];
    else if (strcmp(argv[k], "--interval") == 0)   /* 1 ms to an hour */
      cfg.interval = (nres_time_t) (number_flag("--interval", argv[++k], 1, 3600e3) * 1e6);
    else if (strcmp(argv[k], "--local-share") == 0)
      cfg.local_share = number_flag("--local-share", argv[++k], 0, 1);
    else
      usage();
  }
  if (nregions == 0)
    usage();
  if (cfg.fleet == NULL) {
    fprintf(stderr, "nres-syncd: --fleet: expected the fleet's name (every key "
            "carries it: two fleets on one Redis must differ), got none\n");
    return 2;
  }
  if (cfg.password != NULL && cfg.password_file != NULL) {
    fprintf(stderr, "nres-syncd: --password-file and --password-env: expected "
            "one of them, got both\n");
    return 2;
  }
  if (cfg.cluster != NULL && (cfg.sentinels != NULL || cfg.db != 0 ||
                              strncmp(redis, "unix:", 5) == 0)) {
    fprintf(stderr, "nres-syncd: --cluster: expected no --sentinel, --db or "
            "unix socket with it (a Cluster has only database 0), got one\n");
    return 2;
  }
  if ((cfg.sentinels != NULL) != (cfg.master != NULL)) {
    fprintf(stderr, "nres-syncd: --sentinel and --master: expected both "
            "(the Sentinels and the master's name), got one\n");
    return 2;
  }
  if (cfg.sentinel_password != NULL && cfg.sentinel_password_file != NULL) {
    fprintf(stderr, "nres-syncd: --sentinel-password-file and "
            "--sentinel-password-env: expected one of them, got both\n");
    return 2;
  }
  if (cfg.sentinel_user != NULL && cfg.sentinel_password == NULL &&
      cfg.sentinel_password_file == NULL) {
    fprintf(stderr, "nres-syncd: --sentinel-user: expected a password too "
            "(--sentinel-password-file or --sentinel-password-env), got none\n");
    return 2;
  }
  if ((cfg.sentinel_user != NULL || cfg.sentinel_password != NULL ||
       cfg.sentinel_password_file != NULL) && cfg.sentinels == NULL) {
    fprintf(stderr, "nres-syncd: --sentinel-user, --sentinel-password-file, "
            "--sentinel-password-env: expected --sentinel too, got none\n");
    return 2;
  }
  if (cfg.user != NULL && cfg.password == NULL && cfg.password_file == NULL) {
    fprintf(stderr, "nres-syncd: --user: expected a password too "
            "(--password-file or --password-env), got none\n");
    return 2;
  }
  snprintf(host, sizeof(host), "%s", redis);
  if (strncmp(host, "unix:", 5) == 0) {
    cfg.unix_path = host + 5;
  } else {
    colon = strrchr(host, ':');
    if (colon != NULL) {
      *colon = '\0';
      cfg.port = (int) number_flag("--redis port", colon + 1, 1, 65535);
    }
    cfg.host = host;
  }

  rc = nres_sync_new(&cfg, &sync);
  if (rc != 0) {
    fprintf(stderr, "nres-syncd: bad settings (%s): a line above names it, "
            "or --fleet is not 1..64 bytes without blanks, braces or colons\n",
            nres_strerror(rc));
    return 2;
  }

  for (r = 0; r < nregions; r++) {
    if (map_region(regions[r].path, &regions[r].mem, &regions[r].size,
                   &regions[r].shm, &regions[r].sb) != 0) {
      nres_sync_free(sync);
      return 1;
    }
    regions[r].slots = nres_shm_config(regions[r].shm)->slots;
    regions[r].map = new_map(regions[r].slots);
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  /* Each loop: a round, then a probe `timeout` (interval / 2) before the
   * next one, so that a Redis that hangs is seen within one interval. */
  while (!stop_now) {
    nres_time_t now = nres_clock_now(), start = now;

    if (now >= next_look) {   /* files replaced: checked once a second */
      next_look = now + NRES_SEC;
      for (r = 0; r < nregions; r++)
        look_again(sync, &regions[r]);
    }
    for (r = 0; r < nregions; r++)
      scan(sync, &regions[r], breaker, &warned);
    rc = nres_sync_tick(sync, now);
    if (status != NULL && now >= next_status) {
      write_status(sync, regions, nregions, status);
      next_status = now + NRES_SEC;
    }
    if (once)
      break;
    if (nres_clock_now() < start + cfg.interval / 2) {
      sleep_until(start + cfg.interval / 2);
      if (!stop_now)
        nres_sync_probe(sync, nres_clock_now());
    }
    sleep_until(start + cfg.interval);
  }
  if (status != NULL)
    write_status(sync, regions, nregions, status);
  nres_sync_free(sync);
  for (r = 0; r < nregions; r++) {
    free(regions[r].map);
    munmap(regions[r].mem, regions[r].size);
  }
  return once && rc != 0 ? 1 : 0;
}

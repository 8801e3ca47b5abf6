/* sync_int.h - what the fleet sync agent's files share (never installed):
 * the agent's and entries' structs (sync.c runs rounds over them), the
 * script texts (scripts.c), the reply checks (reply.c), the connection
 * with its credentials and its log (conn.c).
 */
#ifndef NRES_SYNC_INT_H
#define NRES_SYNC_INT_H

#include <pthread.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "nres/sync.h"

extern const char nres__sync_budget_lua[];
extern const char nres__sync_rate_lua[];
extern const char nres__sync_breaker_lua[];

enum { NRES__SCRIPT_BUDGET, NRES__SCRIPT_RATE, NRES__SCRIPT_BREAKER,
       NRES__SCRIPTS };

#define NRES__SYNC_KEY_MAX (NRES_SYNC_SCOPE_MAX + 160)
#define NRES__SYNC_LINE_MAX NRES_SYNC_ERROR_MAX
#define NRES__SYNC_SENTINELS_MAX 8

typedef struct {
  int used;
  int kind;
  void *state;
  char key[3][NRES__SYNC_KEY_MAX];  /* the record; a breaker's vote sets */
  int fresh;                    /* next good round starts a new baseline */
  nres_time_t last_tick;        /* the previous round, good or not */
  double demand;                /* smoothed, per second */
  /* budget */
  int64_t set;                  /* tokens right after our last write,
                                   less activity we had not seen */
  int64_t read;                 /* tokens read for this round */
  double floor;                 /* the fleet's floor per s (the local
                                   budget's when it was added) */
  uint64_t spent, refused;
  /* rate limit */
  double fleet_rate;
  uint32_t burst;               /* the fleet's burst */
  uint32_t lburst;              /* the burst we set last */
  double rate;                  /* the rate we set last */
  nres_time_t tat;
  uint64_t limited;
  nres_time_t since;            /* demand measured from here (a probe) */
  /* breaker */
  nres_time_t imposed;          /* the break we gave it (ns, to the ms) */
  int bstate;                   /* state read for this round */
  nres_sync_stats_t st;
} nres__sync_entry_t;

struct nres_sync_s {
  nres_sync_config_t cfg;
  char host[256];
  char prefix[64];
  char fleet[65];
  char node[65];
  char user[128];
  char password[256];
  char unix_path[108];
  char cur_host[256];           /* the node connected to: host, or the */
  int cur_port;                 /* primary the Sentinels named */
  char master[128];             /* Sentinel: the master's name */
  struct { char host[256]; int port; } sentinel[NRES__SYNC_SENTINELS_MAX];
  int nsentinels;               /* 0: no Sentinel */
  redisContext *sub;            /* subscribed to +switch-master */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running;
  int stopping;
  redisContext *rc;
  char sha[NRES__SCRIPTS][41];
  nres__sync_entry_t *e;
  int n;                        /* entries allocated (used or not) */
  nres_backoff_t backoff;
  nres_backoff_state_t bstate;
  nres_rng_t rng;
  uint32_t attempt;
  nres_sync_info_t info;        /* info.error: the last line said */
};

/* ----------------------------------------------------------- reply.c */

typedef struct {
  int64_t share, level;         /* micro-tokens */
  uint32_t hosts;
  double weight;
} nres__budget_reply_t;

typedef struct {
  double quota, sum;
  uint32_t hosts;
} nres__rate_reply_t;

typedef struct {
  int state;                    /* 0 no record, 1 open, 2 closed */
  int64_t until_ms, now_ms;     /* Redis's clock */
  int prober, live;
  uint32_t voters, open;
} nres__breaker_reply_t;

/* Each: 0 and *out filled, or NRES_ESTATE and `why` (one line: the
 * element, expected, got, and the reply's shape). */
int nres__sync_budget_reply(const redisReply *r, int64_t capacity,
                            nres__budget_reply_t *out, char *why, size_t cap);
int nres__sync_rate_reply(const redisReply *r, double fleet_rate,
                          nres__rate_reply_t *out, char *why, size_t cap);
int nres__sync_breaker_reply(const redisReply *r, int64_t max_ms,
                             nres__breaker_reply_t *out, char *why,
                             size_t cap);
/* Reply-object functions for hiredis's reader that refuse an array of
 * more than NRES__SYNC_REPLY_ELEMENTS_MAX elements (conn.c sets them on
 * every connection). */
#define NRES__SYNC_REPLY_ELEMENTS_MAX 64
redisReplyObjectFunctions *nres__sync_reply_functions(void);
/* "array[4]: integer, bulk string, ..." */
void nres__sync_reply_shape(const redisReply *r, char *out, size_t cap);

/* ------------------------------------------------------------ conn.c */

/* Connect (TCP or unix socket), AUTH, SELECT, load the scripts: 0, or
 * NRES_EAGAIN (unreachable, no answer in time) / NRES_ESTATE (an error
 * reply: NOAUTH, WRONGPASS...), said with nres__sync_say. */
int nres__sync_connect(nres_sync_t *s);
void nres__sync_drop(nres_sync_t *s);
/* "host:port" of the node (or the unix socket) for lines said. */
const char *nres__sync_where(const nres_sync_t *s, char *buf, size_t cap);
/* Say a line (to the log callback, or stderr) unless it is the last one
 * said: an error repeated every round is one line until it changes. */
void nres__sync_say(nres_sync_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A good round: if something was said, say that it is over. */
void nres__sync_said_ok(nres_sync_t *s);
/* Read a password file (first line, without its newline): 0 or -1 with
 * a line in `why`. */
int nres__sync_read_secret(const char *path, char *out, size_t cap,
                           char *why, size_t wcap);

/* -------------------------------------------------------- sentinel.c */

/* "host:port,host:port" and the master's name: 0, or NRES_EINVAL. */
int nres__sync_sentinel_parse(nres_sync_t *s, const char *list,
                              const char *master);
/* Ask the Sentinels for the primary (cur_host, cur_port): 0 or
 * NRES_EAGAIN (said). Subscribes to +switch-master if not yet. */
int nres__sync_sentinel_primary(nres_sync_t *s);
/* The connected node says it is a master: 0, or NRES_ESTATE (said). */
int nres__sync_sentinel_role(nres_sync_t *s);
/* 1 if +switch-master for our master arrived since the last look. */
int nres__sync_sentinel_switched(nres_sync_t *s);
void nres__sync_sentinel_close(nres_sync_t *s);

#endif /* NRES_SYNC_INT_H */

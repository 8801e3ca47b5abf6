/* SPDX-License-Identifier: MIT */
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
#define NRES__SYNC_LINKS_MAX 32       /* Cluster nodes the agent talks to */

typedef struct {
  char host[256];
  int port;
} nres__sync_addr_t;

/* A connection to one node of a Cluster (cluster.c swaps it in). */
typedef struct {
  char host[256];
  int port;
  redisContext *rc;
  struct ssl_st *tls;
  char sha[NRES__SCRIPTS][41];
} nres__sync_link_t;

typedef struct {
  int used;
  int kind;
  void *state;
  char key[4][NRES__SYNC_KEY_MAX];  /* the record; a breaker's vote sets
                                       and its fleet's calls */
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
  int64_t lapsed;               /* the lapsed claim last counted (its until) */
  uint16_t slot;                /* Cluster: the slot of its hash tag */
  char args[12][32];            /* this round's arguments, */
  int nargs;                    /* kept for a redirected call */
  redisReply *reply;            /* this round's answer */
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
  char sentinel_user[128];
  char sentinel_password[256];
  char unix_path[108];
  char cur_host[256];           /* the node connected to: host, or the */
  int cur_port;                 /* primary the Sentinels named */
  char master[128];             /* Sentinel: the master's name */
  char sentinel_err[200];       /* a Sentinel's refusal, this lookup */
  nres__sync_addr_t sentinel[NRES__SYNC_SENTINELS_MAX];
  int nsentinels;               /* 0: no Sentinel */
  redisContext *sub;            /* subscribed to +switch-master */
  /* Cluster (cluster.c): the seeds, a link per node, the slot map. */
  nres__sync_addr_t seed[NRES__SYNC_SENTINELS_MAX];
  int nseeds;                   /* 0: no Cluster */
  nres__sync_link_t link[NRES__SYNC_LINKS_MAX];
  int nlinks;
  int map_ok;                   /* 0: CLUSTER SLOTS asked at the next round */
  uint8_t slot_link[16384];     /* 0xff: no node known */
  struct ssl_ctx_st *tls_ctx;   /* TLS: the context (tls.c), NULL: none */
  struct ssl_st *tls;           /* the session on rc's socket */
  char tls_name[256];
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
  int64_t lapsed_ms;            /* until of a claim seen lapsed, or 0 */
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
#define NRES__SYNC_REPLY_ELEMENTS_MAX 4096   /* CLUSTER SLOTS' ranges */
redisReplyObjectFunctions *nres__sync_reply_functions(void);
/* "array[4]: integer, bulk string, ..." */
void nres__sync_reply_shape(const redisReply *r, char *out, size_t cap);

/* ------------------------------------------------------------ conn.c */

/* Connect (TCP or unix socket), AUTH, SELECT, load the scripts: 0, or
 * NRES_EAGAIN (unreachable, no answer in time) / NRES_ESTATE (an error
 * reply: NOAUTH, WRONGPASS...), said with nres__sync_say. */
int nres__sync_connect(nres_sync_t *s);
void nres__sync_drop(nres_sync_t *s);
/* "host:port,host:port,..." into out (at most `max`): how many, or -1
 * if one is not host:port or there are more (Sentinels, Cluster seeds). */
int nres__sync_parse_addrs(const char *list, nres__sync_addr_t *out, int max);
/* "host:port" of the node (or the unix socket) for lines said. */
const char *nres__sync_where(const nres_sync_t *s, char *buf, size_t cap);
/* Say a line (to the log callback, or stderr) unless it is the last one
 * said: an error repeated every round is one line until it changes. */
void nres__sync_say(nres_sync_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A good round: if something was said, say that it is over. */
void nres__sync_said_ok(nres_sync_t *s);
/* Read a password file (first line, without its newline): 0 or -1 with
 * a line in `why` naming `field` (the setting that named the file). */
int nres__sync_read_secret(const char *field, const char *path, char *out,
                           size_t cap, char *why, size_t wcap);

/* ------------------------------------------------------------- tls.c */

/* The TLS context from the configuration (CA, client certificate): 0, or
 * NRES_EINVAL / NRES_ENOMEM with a line in `why`. */
int nres__sync_tls_init(nres_sync_t *s, char *why, size_t cap);
void nres__sync_tls_free(nres_sync_t *s);
/* The handshake on rc's socket, the peer verified: 0, or NRES_EAGAIN
 * (said). */
int nres__sync_tls_start(nres_sync_t *s);
void nres__sync_tls_close(nres_sync_t *s);
/* The next reply on the connection, plain or TLS: REDIS_OK or REDIS_ERR
 * (rc->err, rc->errstr set). */
int nres__sync_get_reply(nres_sync_t *s, redisReply **out);
/* The output buffer written, plain or TLS: REDIS_OK or REDIS_ERR. */
int nres__sync_flush(nres_sync_t *s);
/* One command and its reply, or NULL (rc->errstr says why). */
redisReply *nres__sync_call(nres_sync_t *s, int argc, const char **argv);

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

/* --------------------------------------------------------- cluster.c */

uint16_t nres__sync_key_slot(const char *key);
/* "host:port,..." seeds: 0, or NRES_EINVAL. */
int nres__sync_cluster_parse(nres_sync_t *s, const char *seeds);
/* Every used entry's call sent to the node serving its slot, redirections
 * followed once; each entry's reply in e->reply: 0, or NRES_EAGAIN /
 * NRES_ESTATE (said; the replies had are in e->reply). */
int nres__sync_cluster_exchange(nres_sync_t *s);
/* Every link dropped, the map asked again at the next round. */
void nres__sync_cluster_drop(nres_sync_t *s);
/* PING on every connected link: 0, or NRES_EAGAIN. */
int nres__sync_cluster_ping(nres_sync_t *s);

/* ------------------------------------------------------------ sync.c */

/* An entry's EVALSHA (its keys, node, this round's arguments): argc,
 * at most NRES__SYNC_ARGV_MAX. */
#define NRES__SYNC_ARGV_MAX 24
int nres__sync_argv(nres_sync_t *s, nres__sync_entry_t *e, const char **argv);
/* nres_sync_tick in two halves, for bench/fleet_scale.c, which drives a
 * thousand agents from two threads and must not wait for one agent's
 * answer before sending the next one's round (a thousand hosts would
 * not): send writes the round (connecting first if due) and returns 0,
 * or the failed round's code (the round is over); recv reads the answers
 * (blocking; call it once the socket is readable) and applies them, as
 * nres_sync_tick would, with the same `now`. One agent, no Cluster, the
 * agent's thread not started. */
int nres__sync_round_send(nres_sync_t *s, nres_time_t now);
int nres__sync_round_recv(nres_sync_t *s, nres_time_t now);

#endif /* NRES_SYNC_INT_H */

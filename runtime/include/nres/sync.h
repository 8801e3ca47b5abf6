/* SPDX-License-Identifier: MIT */
/* nres/sync.h - one retry budget, one rate limit and one breaker view for a
 * fleet of processes and gateways, shared through Redis.
 *
 * Every nres state (budget, rate limiter, breaker) lives in one process or
 * one nginx. A sync agent reconciles such local state with one fleet record
 * per scope in Redis, off the request path: every `interval` (100 ms by
 * default) it sends each scope's local activity in one pipelined round trip
 * of server-side scripts (EVALSHA, loaded once per connection) and writes
 * the answer back into the local state with atomics. Requests never talk to
 * Redis: they keep using the local state exactly as before, and their
 * latency does not change whether Redis is fast, slow or gone.
 *
 * Semantics, per scope (a name shared by the fleet's hosts; `node` names
 * the host):
 *
 * - Budget. The fleet has one bucket with the local budget's capacity and
 *   floor (tokens per second; each OK deposits `ratio` locally). At each
 *   sync a host sends what its local tokens did since its last sync
 *   (deposits, floor credit and refunds less spends) and the script adds
 *   it to the fleet level (capped at capacity, allowed down to -capacity:
 *   an overspend is a debt repaid by later deposits). The host then holds
 *   a share of the fleet level as its local tokens, and earns the same
 *   share of the fleet floor (nres_budget_set_floor), shares split by
 *   recent demand (retries asked for per second, + 1). The shares add up
 *   to at most the fleet level, so over any stretch the fleet's retries
 *   are at most ratio * successes + floor * seconds + capacity, plus the
 *   shares handed out in the last interval and not reported yet (at most
 *   another capacity), where N unsynced hosts have N capacities and N
 *   floors. A new record starts full.
 * - Rate limit. The fleet rate and burst are the local limiter's when it
 *   was added. Each host reports its demand (admissions, estimated from
 *   the limiter's theoretical arrival time, + refusals, per second, since
 *   the probe before the round: the last half interval by default); the
 *   script hands out quotas that add up to the fleet rate: proportional to
 *   demand when the fleet asks for more than the rate, otherwise each
 *   host's demand plus an equal part of the rest. The agent sets the local
 *   limiter to its quota (nres_ratelimit_set_rate, which carries
 *   admissions already made over to the new rate) and to the part of the
 *   fleet's burst that gives it the fleet's tolerance in time (burst *
 *   quota / fleet rate, rounded, at least 2 or the fleet's burst if
 *   smaller: a burst of 1 admits a steady stream a little faster than the
 *   rate at about half the rate), so the hosts at once admit about the
 *   fleet's burst, not hosts times it. Before its first round (at once
 *   when the thread starts) a host has the whole rate and burst; alone, or
 *   with Redis never reached, it keeps them. A host below its quota is
 *   measured at up to its quota (tat moved that far); its quota shrinks
 *   round by round until it refuses, and from then on its demand is
 *   exact, so a load that moves between hosts faster than a few intervals
 *   is followed late (bench/README.md "Fleet" has the figures).
 * - Breaker (opt-in: nres_sync_add_breaker). A quorum decides: the fleet
 *   opens a scope's breaker only when more than breaker_quorum (a strict
 *   majority by default) of its voters are open, voters being the hosts
 *   that saw the dependency lately (calls in their breaker's window, or
 *   open) and reported within three intervals, or, with
 *   breaker_fleet_ratio, when that share of the fleet's calls failed (the
 *   voters' breaker windows summed in Redis, at least
 *   breaker_fleet_min_calls calls). Below the quorum a host whose breaker
 *   opens protects itself only. At the quorum, a host whose
 *   breaker opened by itself publishes "open until T" (T on Redis's clock)
 *   and becomes the break's prober. Other hosts open theirs
 *   (nres_breaker_open_until) at their next sync, until T plus two
 *   intervals, extended at each sync while the prober's claim lives, so
 *   they send no probes of their own: the prober's half-open probes are
 *   the fleet's one probe per break. When the prober's breaker closes it
 *   publishes "closed" and the others close the break they were given
 *   (nres_breaker_close_if; a break of their own is left to run). The
 *   claim has a lease: it lapses when the prober is silent for three
 *   intervals, or probe_lease after its break ends unless it opens again
 *   (a failed probe) or closes, so a prober wedged half-open cannot hold
 *   the fleet; the next host whose own breaker is open or half-open takes
 *   over.
 *
 * Failure handling. A round or probe that fails (refused, reset, no answer
 * within `timeout`: a stopped Redis) drops the connection and every scope
 * falls back to local-only protection at once. The thread sends a probe
 * (PING) `timeout` before each round, so a Redis that is killed is seen at
 * the next request and one that hangs within max(interval, 2 * timeout):
 * one interval with the default timeout (interval / 2). Local-only: the
 * rate limiter gets local_share of the fleet rate (and of its burst), the
 * budget keeps at most local_share of the capacity and earns local_share
 * of its floor, given breaks run out. Reconnection
 * waits by an nres backoff (exponential, full jitter, from `interval` up to
 * `reconnect_max`), whatever failed: a refused connection, an error reply
 * (NOAUTH, READONLY, NOSCRIPT) or a reply refused by its checks (reply.c:
 * types, finite values, ranges). Each trouble is said in one line when it
 * starts or changes (the log callback, or stderr), and its end in one
 * more; the first round after it starts from a fresh baseline
 * (activity while apart is not replayed into the fleet). A Redis that comes
 * back empty starts every record again (a full fleet bucket, no break); a
 * missing script is loaded again. Keys are prefix:fleet:{scope}:kind: the
 * fleet's name is required, so two fleets on one Redis never share a
 * record, and the scope is a hash tag (Redis Cluster would put a scope's
 * keys in one slot). They expire
 * when no host has written them for `ttl` (10 s by default), so an
 * abandoned scope disappears; a host silent for three intervals no longer
 * counts in the shares.
 *
 * One Redis. The agent talks to one Redis node: host:port or a unix
 * socket, with AUTH (a password, or an ACL user), SELECT and TLS as
 * configured, or the primary that Redis Sentinel names (asked at every
 * connection, ROLE checked before the first write, +switch-master
 * followed at once), or, on a Redis Cluster, the node serving each
 * scope's slot (a connection per node, MOVED and ASK followed). Losing
 * Redis costs
 * accuracy, never availability: every host falls back to local shares and
 * comes back when it returns (its records start again: a full budget, no
 * break). Fleet records need no persistence (save "" and appendonly no
 * are fine): they are rebuilt within a few intervals.
 * docs/fleet-production.md says how to run it against such a Redis.
 *
 * Threads. nres_sync_start runs the agent on a thread of its own;
 * nres_sync_tick runs one round on the caller's thread (a program with its
 * own loop, tests). Add, remove, stats and info may be called from any
 * thread; they wait for a round in progress (at most about `timeout`).
 * The local state must outlive its entry (remove it, or free the agent),
 * and live on nres_clock_now's clock (CLOCK_MONOTONIC: the C drivers,
 * the plain and nginx Lua drivers, a gateway's shm region).
 */
#ifndef NRES_SYNC_H
#define NRES_SYNC_H

#include "../nres.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRES_SYNC_SCOPE_MAX 128       /* bytes of a scope name */
#define NRES_SYNC_MAX_ENTRIES 4096

typedef struct nres_sync_s nres_sync_t;   /* the agent; opaque */

#define NRES_SYNC_ERROR_MAX 320

/* A line the agent says (an error reply, a refused reply, a lost
 * connection, "synced again"), without a newline. Called on the agent's
 * thread, with its lock held: keep it short, never call the agent. */
typedef void (*nres_sync_log_cb)(void *arg, const char *line);

typedef enum {
  NRES_SYNC_BUDGET = 1,
  NRES_SYNC_RATELIMIT = 2,
  NRES_SYNC_BREAKER = 3
} nres_sync_kind_t;

typedef struct nres_sync_config_s {
  const char *host;             /* Redis address. "127.0.0.1" */
  int port;                     /* 6379 */
  const char *prefix;           /* first part of every key. "nres" */
  const char *node;             /* this host's name in the fleet (<= 64
                                   bytes); NULL: hostname:pid:random */
  nres_time_t interval;         /* between rounds. 100 ms */
  nres_time_t timeout;          /* connect, and each answer; 0 = interval/2 */
  nres_time_t reconnect_max;    /* longest wait between reconnections;
                                   0 = 1 s (or the interval if longer): a
                                   host is back in the fleet within about
                                   that and an interval of Redis returning */
  nres_time_t ttl;              /* a record no host writes for this long
                                   expires; 0 = max(10 s, 20 * interval) */
  double local_share;           /* share of the fleet's rate and capacity a
                                   host keeps without Redis, in (0, 1];
                                   0 = 1 / the hosts of the last sync */
  uint64_t seed;                /* reconnection jitter; 0 = from the clock */
  const char *fleet;            /* the fleet's name, required (1..64 bytes,
                                   no blanks, braces or colons): every key
                                   is prefix:fleet:{scope}:kind, so two
                                   fleets on one Redis never share a record */
  const char *unix_path;        /* a unix socket instead of host:port */
  const char *user;             /* ACL user (NULL: AUTH with the password
                                   alone, as requirepass wants) */
  const char *password;         /* NULL: no AUTH. Copied at nres_sync_new */
  const char *password_file;    /* or read from this file's first line at
                                   nres_sync_new (never from argv) */
  int db;                       /* SELECT db after connecting; 0 = none */
  double breaker_quorum;        /* the fleet opens a scope's breaker when
                                   more than this share of the hosts that
                                   saw the dependency lately (calls in their
                                   window, or open) are open: 0.5 = a strict
                                   majority (default); 0 = the first host
                                   that opens, for every host. In [0, 1) */
  nres_time_t probe_lease;      /* a prober's claim lapses this long after
                                   its break ends unless it closes or opens
                                   again (a wedged half-open host cannot
                                   hold the fleet); 0 = the breaker's
                                   break_for */
  const char *sentinels;        /* "host:port,host:port,..." (at most 8):
                                   find the primary through Redis Sentinel
                                   (host and port are then unused) */
  const char *master;           /* the Sentinel master's name */
  const char *cluster;          /* "host:port,..." (at most 8): seeds of a
                                   Redis Cluster; each scope's calls go to
                                   the node serving its slot (MOVED and ASK
                                   followed). Not with sentinels, db or
                                   unix_path */
  int tls;                      /* 1: TLS to Redis (not to Sentinels) */
  const char *tls_ca_file;      /* CAs to verify Redis with; NULL: the
                                   system's */
  const char *tls_cert_file;    /* a client certificate (PEM), if Redis
                                   asks for one (tls-auth-clients) */
  const char *tls_key_file;     /* its key; NULL: in tls_cert_file */
  const char *tls_server_name;  /* the name (or IP) Redis's certificate
                                   must carry; NULL: host */
  nres_sync_log_cb log;         /* one line per change of error; NULL:
                                   stderr, "nres-sync: " first */
  void *log_arg;
  double breaker_fleet_ratio;   /* and the fleet opens it when at least
                                   this share of the fleet's calls failed
                                   (each host's breaker window, summed over
                                   the hosts that report), with at least
                                   breaker_fleet_min_calls calls; a host
                                   must be open itself to claim the break.
                                   In [0, 1]; 0 = off (default) */
  uint32_t breaker_fleet_min_calls;   /* 1 .. 1e9; default 20 */
  const char *sentinel_user;    /* the Sentinels' ACL user (NULL: AUTH with
                                   the password alone) */
  const char *sentinel_password;       /* the Sentinels' own password
                                          (NULL: no AUTH to Sentinels) */
  const char *sentinel_password_file;  /* or from this file's first line */
} nres_sync_config_t;

/* Agent-wide figures. */
typedef struct nres_sync_info_s {
  uint32_t connected;           /* 1: the last round reached Redis */
  uint32_t entries;
  uint64_t rounds;              /* rounds that reached Redis */
  uint64_t failures;            /* rounds (or connections) that failed */
  uint64_t connects;            /* connections made */
  nres_time_t last_sync;        /* when the last good round ended; 0 never */
  nres_time_t next_connect;     /* while apart: when the next try is due */
  uint64_t errors;              /* error replies and refused replies */
  char error[NRES_SYNC_ERROR_MAX]; /* the last trouble said, "" after a
                                   good round */
} nres_sync_info_t;

/* One entry's figures, as of its last round. */
typedef struct nres_sync_stats_s {
  char scope[NRES_SYNC_SCOPE_MAX];
  uint32_t kind;                /* nres_sync_kind_t */
  uint32_t synced;              /* 1: fleet-synced now; 0: local only */
  uint32_t hosts;               /* live hosts of the scope at last sync */
  uint32_t prober;              /* breaker: 1 if this host probes */
  nres_time_t last_sync;        /* local ns of its last good round; 0 never */
  double fleet;                 /* budget: fleet tokens; rate: fleet demand
                                   per s; breaker: 1 open, 2 closed, 0 none */
  double local;                 /* budget: this host's share (tokens); rate:
                                   its quota per s; breaker: ms left of the
                                   break it was given (0: none) */
  double demand;                /* what this host reported: budget retries
                                   asked per s, rate admissions + refusals
                                   per s */
  uint64_t rounds;              /* good rounds of this entry */
  uint64_t leases_expired;      /* breaker: prober claims seen lapse by
                                   their lease (a prober wedged half-open),
                                   each counted once */
} nres_sync_stats_t;

/* Defaults as above. */
NRES_EXTERN void nres_sync_config_init(nres_sync_config_t *config);
/* Make an agent (it allocates; nothing connects yet). NRES_EINVAL for a
 * bad configuration, NRES_ENOMEM. */
NRES_EXTERN int nres_sync_new(const nres_sync_config_t *config,
                              nres_sync_t **out);
/* Stop the thread if running, close the connection, free. NULL ignored. */
NRES_EXTERN void nres_sync_free(nres_sync_t *sync);

/* Put local state under the scope's fleet record. Each returns an entry id
 * (>= 0) for nres_sync_remove and nres_sync_stats, or NRES_EINVAL (a NULL,
 * a scope of 0 or more than NRES_SYNC_SCOPE_MAX - 1 bytes, a bad figure, a
 * second entry of a kind for a scope), NRES_EFULL (NRES_SYNC_MAX_ENTRIES),
 * NRES_ENOMEM. The fleet's figures: the budget's capacity, and fleet_floor
 * tokens per second (< 0: the budget's floor now); fleet_rate admissions
 * per second (0: the limiter's rate now), with the limiter's burst. Pass
 * them explicitly for state an earlier agent may have changed (a shared
 * region outliving nres-syncd). */
NRES_EXTERN int nres_sync_add_budget(nres_sync_t *sync, const char *scope,
                                     nres_budget_t *budget,
                                     double fleet_floor);
NRES_EXTERN int nres_sync_add_ratelimit(nres_sync_t *sync, const char *scope,
                                        nres_ratelimit_t *limit,
                                        double fleet_rate);
/* The same with the fleet's burst given (0: the limiter's burst now), for
 * a limiter an earlier agent may have given a part of the burst. */
NRES_EXTERN int nres_sync_add_ratelimit_burst(nres_sync_t *sync,
                                              const char *scope,
                                              nres_ratelimit_t *limit,
                                              double fleet_rate,
                                              uint32_t fleet_burst);
NRES_EXTERN int nres_sync_add_breaker(nres_sync_t *sync, const char *scope,
                                      nres_breaker_t *breaker);
/* Let go of an entry: the local state keeps what it has (a limiter its
 * last quota). NRES_EINVAL for an unknown id. */
NRES_EXTERN int nres_sync_remove(nres_sync_t *sync, int id);

/* One round at `now` (nres_clock_now's clock): connect if due, sync every
 * entry, or fall back. Blocks at most about 2 * timeout. 0 if the round
 * reached Redis; NRES_EAGAIN if it did not (refused, reset, no answer in
 * time, or waiting to reconnect): every entry is local-only; NRES_ESTATE
 * if Redis answered something unexpected (the connection is made again
 * at the next round). NRES_EINVAL with the thread running. */
NRES_EXTERN int nres_sync_tick(nres_sync_t *sync, nres_time_t now);
/* Between rounds: check that Redis still answers (a PING within
 * `timeout`); if it does not, every entry falls back to local-only
 * protection now, as in a failed round. The thread probes `timeout`
 * before each round, so a Redis that hangs (accepts, never answers) is
 * seen within max(interval, 2 * timeout): one interval with the default
 * timeout. A program running its own rounds with nres_sync_tick calls it
 * likewise (nres-syncd does). 0 if Redis answered; NRES_EAGAIN if it did
 * not, or if the agent is not connected (nothing to check: entries are
 * local-only already); NRES_EINVAL with the thread running. */
NRES_EXTERN int nres_sync_probe(nres_sync_t *sync, nres_time_t now);
/* Run rounds every interval (and probes between them) on a thread of the
 * agent's. */
NRES_EXTERN int nres_sync_start(nres_sync_t *sync);
/* Stop the thread (waits for a round in progress). */
NRES_EXTERN int nres_sync_stop(nres_sync_t *sync);

NRES_EXTERN void nres_sync_info(nres_sync_t *sync, nres_sync_info_t *out);
/* NRES_EINVAL for an unknown id. */
NRES_EXTERN int nres_sync_stats(nres_sync_t *sync, int id,
                                nres_sync_stats_t *out);
/* This host's node name (static for the agent's life). */
NRES_EXTERN const char *nres_sync_node(nres_sync_t *sync);

#ifdef __cplusplus
}
#endif
#endif /* NRES_SYNC_H */

/* SPDX-License-Identifier: MIT */
/* nres/gateway.h - the gateway's balancer-mode decisions, in C once.
 *
 * nginx's proxy moves the bytes; these functions decide: admit a request
 * (inbound deadline, the upstream's breaker), pick a peer (power of two
 * choices over latency x sqrt(in-flight + 1), or round robin; never the peer
 * that just failed while another is admitted; panic threshold), size a
 * try's timeouts from the time left, grant one more try (attempts, time,
 * the upstream's retry budget by criticality), record each try into its
 * peer's breaker and latency estimator, and finish the call (upstream
 * breaker, budget deposit, a reserved token given back, counters). The
 * Lua balancer (lua/nres/ngx/balancer.lua) declares an upstream in
 * init_by_lua: its shared tables (the scope's, with the upstream's key,
 * and the peers' table with an estimator per slot) are file-backed
 * regions nres.shm made; nres_gw_upstream_new copies their pointers and
 * the policy's figures into an upstream, registered by name, which the
 * nginx module (runtime/src/ngx) finds after init_by_lua ran.
 *
 * An upstream's shared state is in the regions; the rest (in-flight tries
 * per peer, this process's view of the peers, its round-robin cursor and
 * random state) is per process: nginx workers fork from the master that
 * made it, each gets its own copy. Nothing here allocates per request; a
 * request's state (nres_gw_request_t) is the caller's memory.
 */
#ifndef NRES_GATEWAY_H
#define NRES_GATEWAY_H

#include "../nres.h"
#include "shm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRES_GW_NAME_MAX 64     /* bytes of an upstream's name, key, peer */
#define NRES_GW_PEERS_MAX 256
#define NRES_GW_WEIGHT_MAX 10000   /* a peer's weight: 1..this */
#define NRES_GW_SOCKADDR_MAX 28 /* bytes of a peer's address (sockaddr_in6) */

enum { NRES_GW_P2C = 0, NRES_GW_ROUND_ROBIN = 1 };

/* A latency histogram in a shared table (Prometheus' histogram type):
 * counts per bucket of NRES_GW_HIST_BUCKETS upper bounds (nres_gw_hist_bound;
 * gateway figures, 1 ms to 30 s) and one over the last, and the sum, in
 * the writing process's shard (nres_shard_set) so workers never write one
 * line; nres_gw_hist_read sums them. Zeroed memory is an empty one. */
#define NRES_GW_HIST_BUCKETS 14
typedef struct nres_gw_hist_s {
  struct {
    NRES_ATOMIC(uint64_t) n[NRES_GW_HIST_BUCKETS + 1];
    NRES_ATOMIC(uint64_t) sum;  /* ns */
  } shard[NRES_SHARDS];
} nres_gw_hist_t;

/* What the control API (nres.ngx.control) changes, in a table's shared
 * memory (its region file: every worker at once, kept across reloads):
 * a scope's or a limiter's (one each) and each peer's (one per slot of
 * the peers' table). Zeroed memory is "nothing changed". */
#define NRES_GW_DRY_RUN 1u      /* decide as usual, count would_refuse, let
                                   the request through */
#define NRES_GW_DRAIN 2u        /* a peer's: no new tries (in-flight ones
                                   finish) */
#define NRES_GW_RATE_SET 4u     /* a limiter's: rate and burst below replace
                                   the declared ones */
#define NRES_GW_HEALTH 8u       /* a peer's: its breaker isolated by the
                                   active health checks (not an operator) */
enum { NRES_GW_WOULD_CIRCUIT = 0, NRES_GW_WOULD_RATE = 1, NRES_GW_WOULD_MAX = 4 };
typedef struct nres_gw_control_s {
  NRES_ATOMIC(uint32_t) flags;  /* NRES_GW_DRY_RUN | NRES_GW_DRAIN | ... */
  uint32_t burst;               /* with NRES_GW_RATE_SET */
  double rate;
  nres_time_t interval, tolerance;   /* rate and burst as nres_ratelimit_t's */
  NRES_ATOMIC(uint64_t) would_refuse[NRES_GW_WOULD_MAX];   /* dry-run's
                                   refusals by reason (NRES_GW_WOULD_*) */
  NRES_ATOMIC(uint32_t) weight; /* a peer's: its weight set at run time
                                   (1..NRES_GW_WEIGHT_MAX), 0: the declared */
  uint32_t reserved32_;
  uint64_t reserved_[1];
} nres_gw_control_t;

/* What nres_gw_upstream_new copies (every pointer stays the caller's to
 * keep mapped: the regions outlive the upstream). */
typedef struct nres_gw_config_s {
  const char *name;             /* the upstream's name (registry key) */
  const char *key;              /* its key in the scope's table */
  nres_shm_t *scope;            /* the scope's table */
  nres_shm_t *peers;            /* the peers' table */
  nres_estimator_t *estimators; /* one per slot of the peers' table */
  const char *const *peer_names;   /* "host:port", npeers of them */
  const uint32_t *peer_slots;   /* each peer's slot in the peers' table */
  uint32_t npeers;
  uint32_t attempts;            /* the policy's attempts (>= 1) */
  nres_time_t deadline;         /* the policy's deadline (ns) */
  nres_time_t attempt_timeout;  /* its attempt timeout (ns) */
  nres_time_t hold;             /* the scope's lease of a key (ns) */
  int choice;                   /* NRES_GW_P2C or NRES_GW_ROUND_ROBIN */
  double panic;                 /* share of closed peers under which
                                   ejection is ignored, 0..1 */
  int budget;                   /* the scope's table keeps a budget */
  int breaker;                  /* ... and a breaker */
  nres_gw_hist_t *try_hists;    /* one per slot of the peers' table (as
                                   estimators): each try's duration; or
                                   NULL */
  nres_gw_hist_t *request_hist; /* each request's duration (admission to
                                   end), or NULL */
  nres_gw_control_t *control;   /* the scope's (dry-run), or NULL */
  nres_gw_control_t *peer_controls;   /* one per slot of the peers' table
                                   (drain), or NULL */
  const uint32_t *peer_weights; /* each peer's weight (1..NRES_GW_WEIGHT_MAX),
                                   or NULL: all 1 */
  const uint8_t *peer_backup;   /* nonzero: a backup peer, tried only when
                                   no other is admitted; or NULL: none (at
                                   least one peer is not a backup) */
  nres_time_t slow_start;       /* ns over which a new or recovered peer's
                                   share ramps up to its weight (0: none) */
  struct nres_gw_members_s *members;   /* the membership in the peers'
                                   table's memory (nres_gw_members_declare
                                   put the declared peers in), or NULL: the
                                   peers above, fixed */
} nres_gw_config_t;

typedef struct nres_gw_peer_s {
  nres_breaker_t *breaker;      /* in the peers' table */
  nres_estimator_t *estimator;
  nres_shm_slot_t *counters;    /* its slot there (nres_shm_slot_record) */
  nres_gw_hist_t *hist;         /* its tries' durations, or NULL */
  nres_gw_control_t *control;   /* its drain flag, or NULL */
  uint32_t slot;
  uint32_t inflight;            /* this process's tries in flight */
  double cost;                  /* this process's view: p75 latency, ns */
  int state;                    /* breaker state at the last refresh */
  int drained;                  /* NRES_GW_DRAIN at the last refresh */
  int windowed;                 /* its breaker counts calls in a window
                                   (the table's configuration, kept here
                                   so that a try's end reads no line of
                                   it) */
  uint32_t declared;            /* its declared weight (1 by default) */
  uint32_t weight;              /* the control API's, else the declared */
  int backup;                   /* a backup peer */
  int up;                       /* closed and not drained at the last
                                   refresh (weighted upstreams only) */
  nres_time_t since;            /* when it last came up (slow start) */
  double share;                 /* its weight x slow start's ramp */
  double current;               /* smooth weighted round robin's */
  char name[NRES_GW_NAME_MAX + 1];
  int removed;                  /* no longer a member: no new tries; its
                                   entry is reused once its tries here
                                   ended */
  uint32_t socklen;             /* its address (a member's), or 0 */
  union { uint8_t bytes[NRES_GW_SOCKADDR_MAX]; uint64_t align_; } sockaddr;
} nres_gw_peer_t;

typedef struct nres_gw_upstream_s nres_gw_upstream_t;
struct nres_gw_upstream_s {
  nres_gw_upstream_t *next;     /* the registry's list */
  char name[NRES_GW_NAME_MAX + 1];
  char key[NRES_GW_NAME_MAX + 1];
  nres_shm_t *scope, *peers;
  nres_time_t deadline, attempt_timeout, hold;
  uint32_t attempts, n;
  int choice, budget, breaker;
  int windowed;                 /* the scope's breakers count calls in a
                                   window (as nres_gw_peer_t's) */
  double panic;
  /* this process's */
  int32_t sidx;                 /* the key's slot in the scope (-1: none) */
  nres_shm_slot_t *sslot;
  nres_time_t lookup_at;        /* when to look the slot up again */
  nres_time_t checked;          /* last refresh of the peers' view */
  uint32_t rr;                  /* round-robin cursor (peer index) */
  int panicking;
  uint64_t overflow;            /* lookups refused: the scope was full */
  nres_rng_t rng;
  nres_gw_hist_t *hist;         /* the requests' durations, or NULL */
  nres_gw_control_t *control;   /* the scope's, or NULL */
  nres_time_t slow_start;
  int weighted;                 /* a peer has a weight, a backup, or slow
                                   start is on: nres_gw_pick weighs (else
                                   every peer is alike) */
  int tier;                     /* 0: the primaries are chosen from, 1:
                                   the backups (no primary is up) */
  int declared_weighted;        /* weighted by its declaration */
  int windowed_peers;           /* the peers' breakers count in a window */
  nres_estimator_t *estimators; /* the config's (one per peers' slot) */
  nres_gw_hist_t *try_hists;    /* the config's, or NULL */
  nres_gw_control_t *peer_controls;   /* the config's, or NULL */
  struct nres_gw_members_s *members;   /* shared membership, or NULL */
  uint64_t gen;                 /* members->gen this view was made at */
  uint32_t cap;                 /* entries of peer[] */
  uint32_t view;                /* bumped whenever an entry changes peer
                                   (bindings mirroring the view) */
  uint32_t row_words;           /* counts per shard's row (members') */
  uint32_t reserved_;
  NRES_ATOMIC(uint32_t) *inflight;   /* members' tries in flight: shard k's
                                   row at k * row_words, one per slot */
  nres_gw_peer_t peer[];
};

/* One request's state, in the caller's memory (nginx: its pool). */
typedef struct nres_gw_request_s {
  nres_time_t deadline;
  nres_time_t t0;               /* the current try's start */
  nres_shm_slot_t *slot;        /* the upstream's slot, or NULL */
  int32_t idx;                  /* its index, -1 without one */
  int32_t peer;                 /* the current try's peer, -1: none */
  uint32_t upermit, ppermit;    /* breaker permits (upstream, peer) */
  uint8_t has_upermit, has_ppermit;
  uint8_t reserved;             /* a budget token is held for a retry */
  uint8_t budget_refused;
  int8_t cls;                   /* criticality, -1 until it is read */
  uint8_t reserved_[3];
  uint32_t tries, retries;
  nres_time_t begun;            /* admission (or nres_gw_unadmitted) */
} nres_gw_request_t;

/* Admission refusals (nres_gw_admit): stop reasons (nres_stop_t), answered
 * with nres_gw_refusal's status. */
enum { NRES_GW_ADMITTED = 0, NRES_GW_DEADLINE = NRES_STOP_DEADLINE,
       NRES_GW_CIRCUIT = NRES_STOP_CIRCUIT };
/* nginx's status for a request whose client closed the connection before
 * it was answered: nres_gw_request_end judges such a call neither way. */
#define NRES_GW_CLIENT_CLOSED 499
/* nres_gw_grant's third answer: read the request's criticality and ask
 * again with it. */
#define NRES_GW_NEED_CLASS (-1)

/* ------------------------------------------------------------- registry */

/* A new upstream from cfg (NULL: bad config, or no memory), not yet
 * registered. Its per-process state starts fresh. */
NRES_EXTERN nres_gw_upstream_t *nres_gw_upstream_new(const nres_gw_config_t *cfg);
/* Unregister (if registered) and free. NULL is ignored. */
NRES_EXTERN void nres_gw_upstream_free(nres_gw_upstream_t *u);
/* Register u under its name, replacing an upstream of that name (which
 * stays the caller's to free). */
NRES_EXTERN void nres_gw_register(nres_gw_upstream_t *u);
/* The upstream registered as name (len bytes), or NULL. */
NRES_EXTERN nres_gw_upstream_t *nres_gw_find(const char *name, size_t len);
/* Forget every registration, upstreams and limiters (nothing is freed):
 * the nginx module calls it when a configuration starts, before its
 * init_by_lua declares again. */
NRES_EXTERN void nres_gw_registry_clear(void);
/* Seed this process's random choices (a worker, once forked). */
NRES_EXTERN void nres_gw_seed(nres_gw_upstream_t *u, uint64_t seed);
/* sizeof nres_gw_upstream_t (which 0), nres_gw_peer_t (1),
 * nres_gw_request_t (2), nres_gw_limiter_t (3), nres_gw_hist_t (4),
 * nres_gw_control_t (5), nres_gw_members_t (6), nres_gw_member_t (7), for bindings that declare or place them (0
 * otherwise). */
NRES_EXTERN size_t nres_gw_struct_size(int which);
/* This process's view of the peers (breaker states, p75 latencies, panic)
 * brought up to now; nres_gw_pick does it when the view is 50 ms old. */
NRES_EXTERN void nres_gw_refresh(nres_gw_upstream_t *u, nres_time_t now);

/* The upper bound of histogram bucket i in ns (0..NRES_GW_HIST_BUCKETS-1;
 * UINT64_MAX past the last). */
NRES_EXTERN uint64_t nres_gw_hist_bound(int i);
/* h's counts summed over its shards: counts[i] observations in bucket i
 * (not cumulative; counts[NRES_GW_HIST_BUCKETS] over the last bound), *sum
 * their sum in ns; returns their number. */
NRES_EXTERN uint64_t nres_gw_hist_read(const nres_gw_hist_t *h, uint64_t *counts,
                                       uint64_t *sum);

/* ------------------------------------------------------ client limiters */


/* A named client rate limiter (gw.limiter): one key per client in a
 * shared table whose slots keep a rate limiter. */
typedef struct nres_gw_limiter_s nres_gw_limiter_t;
struct nres_gw_limiter_s {
  nres_gw_limiter_t *next;      /* the registry's list */
  char name[NRES_GW_NAME_MAX + 1];
  nres_shm_t *table;
  nres_time_t hold;             /* a key's lease (ns) */
  uint64_t overflow;            /* this process's admissions with the
                                   table full (admitted unlimited) */
  nres_gw_control_t *control;   /* in the table's memory (dry-run, rate),
                                   or NULL */
};

/* A key (len bytes) for a shared table: the key itself when it fits a
 * slot (at most NRES_SHM_KEY_MAX bytes), else the lowercase hex of its MD5
 * (NRES_GW_KEY_HASHED bytes), written into buf (that many bytes), as
 * nginx's ngx.md5 gives it. *out is the key or buf; the key's length is
 * returned. Every adapter shortens keys with it, so both balancer modes
 * and the cosocket proxy find one client under one key. */
#define NRES_GW_KEY_HASHED 32
NRES_EXTERN size_t nres_gw_key(const char *key, size_t len, char *buf, const char **out);

/* A limiter on `table` (NULL: bad arguments, or no memory), registered
 * by nres_gw_limiter_register; freeing unregisters it. */
NRES_EXTERN nres_gw_limiter_t *nres_gw_limiter_new(const char *name, nres_shm_t *table,
                                                   nres_time_t hold);
NRES_EXTERN void nres_gw_limiter_free(nres_gw_limiter_t *l);
NRES_EXTERN void nres_gw_limiter_register(nres_gw_limiter_t *l);
NRES_EXTERN nres_gw_limiter_t *nres_gw_limiter_find(const char *name, size_t len);
/* One admission for `key` (len bytes, at most NRES_SHM_KEY_MAX: a longer
 * key is the caller's to shorten, e.g. to its MD5): 0, or 1 and *wait (ns)
 * until one would be allowed. An empty key is not limited (as nginx's
 * limit_req does not account it); a full table admits (counted in
 * overflow): the limiter never fails closed. */
NRES_EXTERN int nres_gw_limit(nres_gw_limiter_t *l, const char *key, size_t len,
                              nres_time_t now, nres_time_t *wait);

/* ------------------------------------------------------- control */

/* Set (on != 0) or clear flag (NRES_GW_*) in c, atomically. */
NRES_EXTERN void nres_gw_control_flag(nres_gw_control_t *c, uint32_t flag, int on);
/* Count one refusal a dry-run let through (reason NRES_GW_WOULD_*); a
 * NULL c is ignored. */
NRES_EXTERN void nres_gw_control_count(nres_gw_control_t *c, int reason);
/* A limiter's new rate (> 0, finite) and burst (>= 1) for every key: the
 * keys held now are changed at once (table's slots), the others when
 * next asked. NRES_EINVAL for a bad value (nothing changed). */
NRES_EXTERN int nres_gw_control_rate(nres_gw_control_t *c, nres_shm_t *table, double rate,
                                     uint32_t burst, nres_time_t now);

/* ------------------------------------------------------- per request */

/* Admit request r (zeroed or not: it is reset) at now. inbound_ms: the
 * client's X-Deadline-Ms, a number of ms (NaN or < 0: none; under 1:
 * NRES_GW_DEADLINE). NRES_GW_CIRCUIT when the upstream's breaker is open.
 * On NRES_GW_ADMITTED, r's deadline is the earlier of the policy's and the
 * inbound one. */
NRES_EXTERN int nres_gw_admit(nres_gw_upstream_t *u, nres_gw_request_t *r,
                              nres_time_t now, double inbound_ms);
/* A request that no admission ran for: the policy's deadline, no upstream
 * slot (no retries, nothing recorded for the upstream). */
NRES_EXTERN void nres_gw_unadmitted(nres_gw_upstream_t *u, nres_gw_request_t *r,
                                    nres_time_t now);
/* The time left of an admitted request in whole ms (X-Deadline-Ms). */
NRES_EXTERN int64_t nres_gw_left_ms(const nres_gw_request_t *r, nres_time_t now);

/* A peer for the next try, other than `avoid` (-1: none) while another is
 * admitted: its index; *permit and *has_permit its breaker's permit (none
 * in panic, or when no peer is admitted: the cheapest is taken unasked). */
NRES_EXTERN int nres_gw_pick(nres_gw_upstream_t *u, nres_time_t now, int avoid,
                             uint32_t *permit, int *has_permit);
/* Start a try of r on peer i (from nres_gw_pick): the try's timeout in ms
 * (the time left, at most the attempt timeout, at least 1). A token held
 * for a retry is now spent. */
NRES_EXTERN uint64_t nres_gw_try_begin(nres_gw_upstream_t *u, nres_gw_request_t *r,
                                       nres_time_t now, int i, uint32_t permit,
                                       int has_permit);
/* May r try once more after this try? 1 yes (a budget token is held, given
 * back by nres_gw_request_end if unused), 0 no, NRES_GW_NEED_CLASS when
 * the budget is under half full and r's criticality (cls < 0) is unknown:
 * ask again with it (nres_class_t). */
NRES_EXTERN int nres_gw_grant(nres_gw_upstream_t *u, nres_gw_request_t *r,
                              nres_time_t now, int cls);
/* An inbound X-Deadline-Ms value (len bytes; NULL: no header) as a number
 * of ms for nres_gw_admit: decimal digits with an optional fraction,
 * spaces or tabs around them, any length; anything else is NaN (no
 * deadline). */
NRES_EXTERN double nres_gw_deadline_ms(const char *value, size_t len);
/* The answer to a call the gateway stops itself with `stop` (nres_stop_t):
 * its HTTP status, and its reason (nres_stop_name: NRES_STOP_MAP's text,
 * for X-Nres-Reason and the body) in *reason (if not NULL). 504 out of
 * time; 503 circuit open, budget exhausted, draining, throttled locally,
 * rate limited by a scope's limiter; 429 rate limited by a client limiter
 * (client != 0); 502 attempts exhausted, permanent, canceled; 0 for OK and
 * anything else (no refusal). */
NRES_EXTERN int nres_gw_refusal(int stop, int client, const char **reason);
/* The class (nres_class_t) of an X-Criticality value (len bytes; NULL: no
 * header): critical or critical_plus, default, sheddable or
 * sheddable_plus, in any case; anything else is NRES_CLASS_DEFAULT. */
NRES_EXTERN int nres_gw_class(const char *value, size_t len);
/* The end of r's current try: recorded into its peer (breaker, estimator,
 * counters); failed: connect error, timeout or a 5xx. Returns the peer. */
NRES_EXTERN int nres_gw_try_end(nres_gw_upstream_t *u, nres_gw_request_t *r,
                                nres_time_t now, int failed, int timed_out);
/* r's current try let go unjudged (a new upstream session of the same
 * request): permit released, in-flight count and held token given back. */
NRES_EXTERN void nres_gw_try_abandon(nres_gw_upstream_t *u, nres_gw_request_t *r);
/* The call's end with the response status (under 100: none, or an answer
 * with no status line, a failure; lua-nginx-module says 9 for an HTTP/0.9
 * answer, nginx's status is 0): an unfinished try
 * ended with it, a held token given back, the upstream's breaker told,
 * the budget credited on success, the call counted in the scope. A call
 * that made no try (answered by a later phase) is not judged: its permit
 * of the upstream's breaker is given back, nothing is counted. A call
 * whose client left first (NRES_GW_CLIENT_CLOSED) is not judged either:
 * its unfinished try is abandoned (nres_gw_try_abandon), its permits given
 * back, the call counted as NRES_STOP_CANCELED. */
NRES_EXTERN void nres_gw_request_end(nres_gw_upstream_t *u, nres_gw_request_t *r,
                                     nres_time_t now, int status);

/* ------------------------------------------------------------- lease */

/* One holder at a time for a job run once for the whole nginx (the active
 * health checks): a word in shared memory, zeroed is "nobody". */
typedef struct nres_gw_lease_s {
  NRES_ATOMIC(uint64_t) word;   /* holder id << 32 | lease end (ms, mod 2^32) */
} nres_gw_lease_t;
/* Take or renew l for holder id (!= 0) until now + lease (0 < lease <
 * 2^31 ms): 1 if id holds it now, 0 if another holder's lease has not
 * ended, NRES_EINVAL on misuse. */
NRES_EXTERN int nres_gw_lease_take(nres_gw_lease_t *l, uint32_t id, nres_time_t now,
                                   nres_time_t lease);
/* Let l go if id holds it (a worker that exits). */
NRES_EXTERN void nres_gw_lease_drop(nres_gw_lease_t *l, uint32_t id);
/* The holder of l at now, or 0 when nobody's lease is running. */
NRES_EXTERN uint32_t nres_gw_lease_holder(nres_gw_lease_t *l, nres_time_t now);

/* ------------------------------------------------------- membership */

/* Peers added and removed at run time (docs/gateway-peers.md). The
 * membership is in the peers' table's memory, so every process (each
 * nginx worker, the module's C path) sees a change at once: one record per
 * slot of the table (a peer's slot is its key's: its breaker, estimator,
 * counters and control block stay with its address), and a generation
 * that every change bumps. nres_gw_pick compares it with its view's (one
 * load) and remakes the view only when it changed.
 *
 * A removed peer gets no new try in any process from its next pick; its
 * tries in flight finish and are recorded into its slot. The slot is
 * freed (its key let go, the record FREE) only once the tries in flight on
 * it, counted in shared memory by every process, are 0 and at least
 * NRES_GW_REMOVE_GRACE after the removal (a pick made just before the
 * removal starts its try in the same call, well within that), or after
 * the linger when a count is stuck (a worker killed with tries in flight).
 * Changes are made one at a time under a lease (a writer killed holding
 * it holds it for NRES_GW_MEMBERS_LEASE at most). */
enum { NRES_GW_MEMBER_FREE = 0, NRES_GW_MEMBER_ACTIVE = 1, NRES_GW_MEMBER_REMOVED = 2 };
#define NRES_GW_REMOVE_GRACE 1000000000u   /* ns */
#define NRES_GW_MEMBERS_LEASE 1000000000u  /* ns */

typedef struct nres_gw_member_s {
  NRES_ATOMIC(uint32_t) state;  /* NRES_GW_MEMBER_* */
  uint32_t weight;              /* its declared weight */
  uint32_t backup;
  uint32_t socklen;             /* 0: a name only the module resolves
                                   (a declared host name) */
  uint64_t removed_at;          /* ns, when it was removed */
  uint32_t key_gen;             /* its slot's key generation */
  uint32_t reserved_;
  union { uint8_t bytes[NRES_GW_SOCKADDR_MAX]; uint64_t align_; } sockaddr;
  char name[NRES_GW_NAME_MAX + 1 + 7];
} nres_gw_member_t;

typedef struct nres_gw_members_s {
  NRES_ATOMIC(uint64_t) gen;    /* bumped by every change (0: never made) */
  nres_gw_lease_t lock;         /* one writer at a time */
  uint32_t slots;               /* records (the peers' table's slots) */
  uint32_t capacity;            /* members (active or removed, not yet
                                   freed) at most: the upstream's max_peers */
  uint64_t declared;            /* a digest of the declaration the
                                   membership was made from */
  nres_time_t linger;           /* a removed peer's slot is freed after
                                   this even with tries counted in flight */
  uint64_t reserved_[3];
  /* then `slots` records (nres_gw_member_t), then tries in flight per
   * shard and slot (NRES_ATOMIC(uint32_t), each shard's row on lines of
   * its own) */
} nres_gw_members_t;

/* Bytes of a membership of `slots` records. */
NRES_EXTERN size_t nres_gw_members_size(uint32_t slots);
/* Record `slot` of m (NULL out of range). */
NRES_EXTERN nres_gw_member_t *nres_gw_member(nres_gw_members_t *m, uint32_t slot);
/* Tries in flight on slot's peer, every process's. */
NRES_EXTERN uint32_t nres_gw_member_inflight(nres_gw_members_t *m, uint32_t slot);
/* The declared peers (names "host:port", weights or NULL, backup flags or
 * NULL) of an upstream into m (size bytes, in the peers' table `peers`):
 * if m holds a membership made from the same declaration (names, weights,
 * backups, capacity), it is kept as it is (peers added or removed at run
 * time stay so: a reload that did not change the upstream) and 1 is
 * returned; else it is made anew (each declared peer's key leased for ever
 * in `peers`, any other member removed) and 0 is returned. NRES_EINVAL for
 * bad arguments, NRES_EFULL when a peer gets no slot. */
NRES_EXTERN int nres_gw_members_declare(nres_gw_members_t *m, size_t size, nres_shm_t *peers,
                                        uint32_t capacity, const char *const *names,
                                        const uint32_t *weights, const uint8_t *backup,
                                        uint32_t n, nres_time_t linger, nres_time_t now);
/* Parse "a.b.c.d:port" or "[v6]:port" into a sockaddr (out, at least
 * NRES_GW_SOCKADDR_MAX bytes): its length, or 0 if it is not that. */
NRES_EXTERN uint32_t nres_gw_parse_addr(const char *s, size_t len, void *out);
/* Errors of nres_gw_member_add and _remove, besides NRES_EBUSY (another
 * change held the lease too long) and NRES_EINVAL (no membership). */
enum { NRES_GW_MEMBER_BAD_ADDRESS = -1, NRES_GW_MEMBER_DUPLICATE = -2,
       NRES_GW_MEMBER_FULL = -3, NRES_GW_MEMBER_UNKNOWN = -4,
       NRES_GW_MEMBER_LAST_PRIMARY = -5, NRES_GW_MEMBER_BAD_WEIGHT = -6 };
/* Add peer `name` (len bytes, an IP literal and a port) to u with
 * `weight` (1..NRES_GW_WEIGHT_MAX) and `backup`: its slot (>= 0), or an
 * error above. A peer removed whose slot is not freed yet comes back with
 * its state (breaker, estimator, counters); any other starts fresh, in
 * slow start if u has it. Nothing is changed on an error. */
NRES_EXTERN int nres_gw_member_add(nres_gw_upstream_t *u, const char *name, size_t len,
                                   uint32_t weight, int backup, nres_time_t now);
/* Remove peer `name` from u: its slot (>= 0), or an error above (the last
 * primary is never removed). */
NRES_EXTERN int nres_gw_member_remove(nres_gw_upstream_t *u, const char *name, size_t len,
                                      nres_time_t now);
/* Free the slots of removed peers whose tries all ended (see above): the
 * number freed. add and remove call it; a status page may. */
NRES_EXTERN int nres_gw_members_reap(nres_gw_upstream_t *u, nres_time_t now);
/* This process's view of u's peers brought up to the membership (no-op
 * when the generation did not change): removed peers get no new try,
 * added ones get an entry. nres_gw_pick does it; bindings mirroring the
 * view call it before reading it. */
NRES_EXTERN void nres_gw_sync(nres_gw_upstream_t *u, nres_time_t now);

#ifdef __cplusplus
}
#endif
#endif

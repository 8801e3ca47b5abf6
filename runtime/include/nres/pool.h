/* SPDX-License-Identifier: MIT */
/* nres/pool.h - the work pool: blocking work on background threads.
 *
 * A pool of T threads runs jobs: a function and its argument in a job
 * record the caller owns (or borrows from the pool's own records), so a
 * job allocates nothing. A job submitted from one of the pool's workers
 * goes to that worker's own queue and runs there next, without waking
 * another thread; idle workers steal from the others' queues, spin a
 * bounded while, then park on a futex (an idle pool burns no core).
 *
 * On top of the pool, in files of their own:
 * - gates (fan-out/join): add N jobs, wait for all, the first K successes,
 *   a timeout or a cancellation; each job ends OK, ERROR, TIMEOUT or
 *   CANCELED (nres_gate_*, nres_pool_for);
 * - delayed jobs (nres_pool_submit_at), which hold no thread while they
 *   wait, and with them policy-driven calls whose attempts run on workers
 *   and whose backoff waits hold no worker (nres_pool_call_*);
 * - completion on a libuv loop through one uv_async_t (nres_pool_uv_*);
 * - the execution log: "executing" and "completed" events as JSON lines,
 *   through a bounded lock-free ring drained by a writer thread
 *   (nres_joblog_*).
 *
 * Ownership: a job record is the caller's; from a successful submit until
 * its completion (its done_cb has returned, or its gate is closed) the pool
 * owns it and the caller must not touch it except through the nres_job_*
 * readers. The pool allocates at nres_pool_init only (threads, queues,
 * records) and frees everything at nres_pool_close.
 */
#ifndef NRES_POOL_H
#define NRES_POOL_H

#include <pthread.h>
#include <uv.h>

#include "../nres.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nres_job_s nres_job_t;
typedef struct nres_pool_s nres_pool_t;
typedef struct nres_pool_options_s nres_pool_options_t;
typedef struct nres_pool_stats_s nres_pool_stats_t;
typedef struct nres_gate_s nres_gate_t;
typedef struct nres_joblog_s nres_joblog_t;
typedef struct nres_joblog_event_s nres_joblog_event_t;
typedef struct nres_pool_uv_s nres_pool_uv_t;
typedef struct nres_pool_call_s nres_pool_call_t;
/* For atomic pointers (NRES_ATOMIC(nres_job_ptr_t) would be a pointer to an
 * atomic job). */
typedef nres_job_t *nres_job_ptr_t;

/* ------------------------------------------------------------------ jobs */

/* The work: runs once on a worker. Return 0 for success, a negative
 * error (NRES_E* or -errno) for failure; it is kept in job->result. */
typedef int (*nres_job_fn)(nres_job_t *job);
/* A job is over: the pool no longer touches the record (except a pooled
 * one, given back once this returns), so the callback may submit it
 * again. Runs on the worker that ran the job, or on the loop thread for a
 * job submitted with nres_pool_uv_submit. */
typedef void (*nres_job_cb)(nres_job_t *job);

/* How a job ended (job->status). */
typedef enum {
  NRES_JOB_PENDING = 0,        /* queued or running */
  NRES_JOB_OK = 1,             /* fn returned 0 */
  NRES_JOB_ERROR = 2,          /* fn returned an error (job->result) */
  NRES_JOB_TIMEOUT = 3,        /* its gate's wait timed out first */
  NRES_JOB_CANCELED = 4        /* its gate or the pool canceled it first */
} nres_job_status_t;

/* "pending", "ok", "error", "timeout", "canceled"; "unknown" otherwise. */
NRES_EXTERN const char *nres_job_status_name(int status);

struct nres_job_s {
  /* Set by the caller (nres_job_init) before a submit. */
  nres_job_fn fn;
  void *arg;                    /* the caller's */
  void *data;                   /* the caller's */
  nres_job_cb done_cb;          /* may be NULL */
  /* Results, readable once the job is over. */
  int32_t result;               /* fn's return value */
  NRES_ATOMIC(uint32_t) status; /* nres_job_status_t */
  uint64_t id;                  /* with the execution log on: unique in the
                                   pool (0 otherwise) */
  uint64_t parent;              /* with the log on: id of the job that
                                   submitted this one (0 from outside) */
  uint32_t worker;              /* index of the worker that ran it */
  uint32_t flags;               /* private: NRES__JOB_* */
  /* private */
  NRES_ATOMIC(uint32_t) state;
  uint32_t reserved_;
  nres_job_t *next;             /* queue links (injector, loop, records) */
  nres_job_t *gate_next;        /* the gate's list of its jobs */
  nres_gate_t *gate;
  nres_pool_uv_t *loop;
  nres_pool_t *pool;            /* pooled records: their owner */
  nres_time_t due;              /* delayed jobs */
};

/* Fill in a record: fn and arg, everything else zero. NRES_EINVAL if job
 * or fn is NULL. */
NRES_EXTERN int nres_job_init(nres_job_t *job, nres_job_fn fn, void *arg);
/* The status (acquire load: a non-PENDING status makes result readable). */
NRES_EXTERN int nres_job_status(const nres_job_t *job);
/* For long jobs to poll: 1 once the job's outcome is already decided
 * (its gate timed out, was canceled or has its K successes; the pool is
 * closing with NRES_POOL_CANCEL), so the work is unwanted. */
NRES_EXTERN int nres_job_canceled(const nres_job_t *job);

/* ------------------------------------------------------------------ pool */

typedef enum {
  NRES_JOBLOG_BLOCK = 0,        /* a full ring makes the producer wait */
  NRES_JOBLOG_DROP = 1          /* a full ring drops the event, counted */
} nres_joblog_full_t;

struct nres_pool_options_s {
  uint32_t threads;             /* 0: $NRES_THREADS, else the number of
                                   online cores. At most 1024 */
  uint32_t queue_size;          /* per-worker queue, a power of two; 0 =
                                   4096. A worker whose queue is full
                                   submits to the shared queue instead */
  uint32_t records;             /* pooled job records (nres_pool_job_get);
                                   0 = 1024 */
  uint32_t timers;              /* delayed jobs at once; 0 = 4096 */
  uint32_t spin;                /* rounds an idle worker looks for work
                                   before parking; 0 = 64 */
  uint32_t reserved_;
  nres_joblog_t *log;           /* the execution log, or NULL (off) */
  /* Admission by expected wait: a job submitted from outside the pool
   * and not under a gate (nres_pool_submit, nres_pool_uv_submit,
   * nres_pool_call_start) is refused with NRES_ELIMITED when the pool
   * expects it to wait longer than max_wait before a worker starts it.
   * 0 or NRES_TIME_NEVER: off, the queue is unbounded in time. */
  nres_time_t max_wait;
  /* The service time to expect until the pool has measured one (ns);
   * 0: admit everything until the first job has run. */
  nres_time_t service;
};

/* Counters, relaxed reads. */
struct nres_pool_stats_s {
  uint64_t submitted;           /* accepted submits, delayed ones included */
  uint64_t executed;            /* jobs whose fn ran */
  uint64_t skipped;             /* jobs ended without running (canceled) */
  uint64_t local;               /* submits that went to the own queue */
  uint64_t injected;            /* submits that went to the shared queue */
  uint64_t stolen;              /* jobs taken from another worker's queue */
  uint64_t parks;               /* times a worker went to sleep */
  uint64_t wakes;               /* times a sleeping worker was woken */
  uint64_t timers_fired;        /* delayed jobs that came due */
  uint64_t shed;                /* submits refused by max_wait */
  nres_time_t service;          /* with max_wait: the service time the
                                   pool expects (moving average of the
                                   jobs' run times), else 0 */
};

/* One cache line per hot word. */
#define NRES_POOL_LINE 64

struct nres_pool_s {
  uint32_t threads;             /* read-only after init */
  uint32_t magic_;
  /* private */
  void *workers_;               /* the workers (nres__worker_t[threads]) */
  nres_joblog_t *log_;
  uint32_t spin_;
  uint32_t max_spinning_;
  nres_job_t *records_;         /* the pooled records' block */
  char pad0_[NRES_POOL_LINE];
  NRES_ATOMIC(uint32_t) sleepers_;
  NRES_ATOMIC(uint32_t) spinning_;
  NRES_ATOMIC(uint32_t) closing_;     /* 0, or 1 + NRES_POOL_DRAIN/CANCEL */
  NRES_ATOMIC(uint32_t) exit_;
  NRES_ATOMIC(uint32_t) timekeeper_;  /* 1 + worker index parked with the
                                         timers' deadline, or 0 */
  NRES_ATOMIC(uint32_t) wake_next_;
  NRES_ATOMIC(uint64_t) next_id_;
  NRES_ATOMIC(uint64_t) timer_next_;  /* earliest due time, or NEVER */
  char pad1_[NRES_POOL_LINE];
  /* The shared queue for submits from outside the pool. */
  pthread_mutex_t inject_lock_;
  nres_job_t *inject_head_, *inject_tail_;
  NRES_ATOMIC(uint64_t) inject_count_;
  uint64_t injected_;
  char pad2_[NRES_POOL_LINE];
  /* Delayed jobs: a binary heap on due time. */
  pthread_mutex_t timer_lock_;
  nres_job_t **timer_heap_;
  uint32_t timer_count_, timer_cap_;
  uint32_t timers_closed_;
  uint32_t reserved_;
  uint64_t timers_fired_;
  /* Free records: a lock-free stack of indexes into records_, with a
   * tag against ABA (tag << 32 | index + 1; 0 = empty). */
  NRES_ATOMIC(uint64_t) record_head_;
  NRES_ATOMIC(uint32_t) *record_next_;
  uint32_t record_count_;
  uint32_t reserved1_;
  NRES_ATOMIC(uint64_t) wakes_;
  uint64_t timers_added_;
  /* Admission by expected wait (options.max_wait; all 0 when off). */
  nres_time_t max_wait_;
  NRES_ATOMIC(uint64_t) service_;     /* ns, moving average */
  NRES_ATOMIC(uint64_t) shed_;
  char pad3_[NRES_POOL_LINE];
  NRES_ATOMIC(int64_t) queued_;       /* counted jobs not yet started */
  char pad4_[NRES_POOL_LINE];
};

typedef enum {
  NRES_POOL_DRAIN = 0,          /* close: run every queued job first */
  NRES_POOL_CANCEL = 1          /* close: end queued jobs as CANCELED
                                   without running them */
} nres_pool_close_t;

/* Defaults (all zero: see the fields). */
NRES_EXTERN void nres_pool_options_init(nres_pool_options_t *options);
/* Start the pool's threads. options may be NULL. NRES_EINVAL for a bad
 * option (threads > 1024, queue_size not a power of two or above 2^24,
 * $NRES_THREADS not a number in 1..1024), NRES_ENOMEM, or the error of a
 * thread that could not start (nothing is left running then). */
NRES_EXTERN int nres_pool_init(nres_pool_t *pool,
                               const nres_pool_options_t *options);
/* Stop the pool: submits fail with NRES_ESTATE from now on, except, with
 * NRES_POOL_DRAIN, those of the pool's own workers (jobs in flight finish
 * their fan-outs and chains: a job resubmitting itself for ever keeps the
 * pool open for ever). Queued jobs run (DRAIN) or end CANCELED without
 * running (NRES_POOL_CANCEL); delayed jobs not yet due end CANCELED; every
 * job's completion (done_cb, gate, loop) still happens. Returns once every thread has exited and
 * everything the pool allocated is freed. NRES_EINVAL from one of the
 * pool's own workers (it would wait for itself) or on a bad argument. */
NRES_EXTERN int nres_pool_close(nres_pool_t *pool, int how);

/* Queue a job (any thread). From a worker of this pool the job goes to
 * that worker's own queue. NRES_EINVAL (no fn, bad pool), NRES_EBUSY (the
 * record is queued or running), NRES_ESTATE (the pool is closing),
 * NRES_ELIMITED (options.max_wait: the pool expects the job to wait longer
 * than that before it starts; nothing was queued).
 *
 * The expected wait: with Q counted jobs queued and each worker free in
 * f_i (a running job's remaining time: the service estimate minus the
 * time it has run, at least 0; 0 for an idle worker), min f_i when Q = 0,
 * else max(min f_i, (sum f_i + Q * service) / threads). Jobs submitted by
 * workers and under gates count in Q but are never refused (they are
 * parts of admitted work); delayed jobs are not counted. Concurrent
 * submitters may each pass the check before either is counted: the bound
 * holds to within the number of threads submitting at once. The check
 * reads every worker's state (O(threads)), only with max_wait on. */
NRES_EXTERN int nres_pool_submit(nres_pool_t *pool, nres_job_t *job);
/* Queue a job to run at `when` (nres_clock_now time) or later. It holds no
 * thread while it waits: an idle worker sleeps until the earliest due time.
 * NRES_EFULL when options.timers jobs already wait; else as submit. */
NRES_EXTERN int nres_pool_submit_at(nres_pool_t *pool, nres_job_t *job,
                                    nres_time_t when);

/* Borrow one of the pool's records (any thread, lock-free): zeroed, or
 * NULL when all are in use. Given back
 * automatically when the job is over (after its done_cb); one never
 * submitted goes back with nres_pool_job_put. */
NRES_EXTERN nres_job_t *nres_pool_job_get(nres_pool_t *pool);
NRES_EXTERN void nres_pool_job_put(nres_pool_t *pool, nres_job_t *job);

/* The index of the calling worker of this pool, or -1. */
NRES_EXTERN int nres_pool_worker(const nres_pool_t *pool);
NRES_EXTERN void nres_pool_stats(const nres_pool_t *pool,
                                 nres_pool_stats_t *out);

/* ----------------------------------------------------------------- gates */

/* A gate: caller-owned, one per fan-out. */
struct nres_gate_s {
  nres_pool_t *pool;
  uint64_t id;                  /* for the log */
  /* private */
  NRES_ATOMIC(uint32_t) total_;       /* jobs added */
  NRES_ATOMIC(uint32_t) settled_;     /* jobs with an outcome */
  NRES_ATOMIC(uint32_t) ok_;          /* of which OK */
  NRES_ATOMIC(uint32_t) released_;    /* jobs the pool is done with */
  NRES_ATOMIC(uint32_t) stop_;        /* 0, or the status left-overs get */
  NRES_ATOMIC(uint32_t) waiting_;
  NRES_ATOMIC(uint32_t) wake_;        /* futex word */
  NRES_ATOMIC(uint32_t) want_;
  NRES_ATOMIC(nres_job_ptr_t) jobs_;    /* every job added, newest first */
};

NRES_EXTERN int nres_gate_init(nres_gate_t *gate, nres_pool_t *pool);
/* Submit a job under the gate (any thread, a job of the gate included: a
 * stage adding the next; add the others before waiting). As
 * nres_pool_submit; job->gate is set. A record belongs to one gate at a
 * time, once, until nres_gate_close. A job added after the gate stopped
 * ends with the gate's stop status, unrun. NRES_ESTATE (pool closing):
 * the job still counts, ended CANCELED, unrun. */
NRES_EXTERN int nres_gate_add(nres_gate_t *gate, nres_job_t *job);
/* Wait (once per gate) until `k` jobs succeeded (k = 0: every job added
 * has ended, however), or `timeout` ns passed (NRES_TIME_NEVER: no
 * limit), or nres_gate_cancel (which wins over an end reached meanwhile).
 * Then jobs without an outcome get one: CANCELED (K reached, or canceled)
 * or TIMEOUT; queued ones will not run, running ones can see it with
 * nres_job_canceled. Returns 0 (reached), NRES_ETIMEDOUT, NRES_ECANCELED,
 * or NRES_EPERMANENT (every job ended but fewer than k succeeded). On a
 * worker of the pool the wait runs other jobs meanwhile (so nested
 * fan-outs cannot deadlock); a job it runs may overrun the timeout. */
NRES_EXTERN int nres_gate_wait(nres_gate_t *gate, uint32_t k,
                               nres_time_t timeout);
/* From any thread: the wait returns NRES_ECANCELED. */
NRES_EXTERN void nres_gate_cancel(nres_gate_t *gate);
/* Wait until the pool is done with every job of the gate (running ones
 * finished, callbacks returned); after it records and gate are the
 * caller's again. Required before reusing or freeing them. */
NRES_EXTERN void nres_gate_close(nres_gate_t *gate);
/* Counts so far. */
NRES_EXTERN uint32_t nres_gate_count(const nres_gate_t *gate, int status);

/* Parallel for: fn(arg, i) for i in [0, n), dynamic scheduling (each of
 * up to pool->threads jobs claims the next index), waiting like a gate
 * (helping when on a worker). Uses no heap: its records live on this
 * stack. NRES_EINVAL on misuse, or a submit error. */
typedef void (*nres_pool_for_fn)(void *arg, uint64_t i);
NRES_EXTERN int nres_pool_for(nres_pool_t *pool, uint64_t n,
                              nres_pool_for_fn fn, void *arg);

/* --------------------------------------------------------- execution log */

typedef enum {
  NRES_JOBLOG_EXECUTING = 0,
  NRES_JOBLOG_COMPLETED = 1,
  NRES_JOBLOG_NOTE = 2          /* a line of the caller's (baselines) */
} nres_joblog_kind_t;

struct nres_joblog_event_s {
  uint8_t kind;                 /* nres_joblog_kind_t */
  uint8_t status;               /* COMPLETED: nres_job_status_t */
  uint16_t reserved_;
  int32_t result;               /* COMPLETED: fn's return */
  uint32_t worker;
  uint32_t reserved1_;
  uint64_t job, parent, gate;
  nres_time_t time;             /* when it happened */
  nres_time_t start;            /* COMPLETED: when fn started */
};

struct nres_joblog_s {
  /* private */
  void *ring_;
  uint64_t mask_;
  int mode_;
  int fd_;
  pthread_t writer_;
  char pad0_[NRES_POOL_LINE];
  NRES_ATOMIC(uint64_t) enqueue_;
  char pad1_[NRES_POOL_LINE];
  NRES_ATOMIC(uint64_t) dequeue_;
  NRES_ATOMIC(uint32_t) kick_;        /* futex: the writer's doorbell */
  NRES_ATOMIC(uint32_t) sleeping_;
  NRES_ATOMIC(uint32_t) progress_;    /* futex: blocked producers wait */
  NRES_ATOMIC(uint32_t) blocked_;
  NRES_ATOMIC(uint32_t) stop_;
  NRES_ATOMIC(uint32_t) failed_;      /* a write failed: errno */
  NRES_ATOMIC(uint64_t) written_;
  NRES_ATOMIC(uint64_t) dropped_;
};

/* Open `path` (created or truncated, 0644) and start the writer thread.
 * capacity: events the ring holds, a power of two >= 2 (0 = 65536).
 * mode: NRES_JOBLOG_BLOCK or NRES_JOBLOG_DROP. NRES_EINVAL on a bad
 * argument, the -errno of open, NRES_ENOMEM. */
NRES_EXTERN int nres_joblog_init(nres_joblog_t *log, const char *path,
                                 uint32_t capacity, int mode);
/* Queue one event (any thread, lock-free unless the ring is full and mode
 * is BLOCK). 0, or NRES_EFULL when it was dropped. */
NRES_EXTERN int nres_joblog_emit(nres_joblog_t *log,
                                 const nres_joblog_event_t *event);
/* Write everything queued, stop the writer, close the file. Returns 0 or
 * the -errno of the first failed write. Close the pools using it first. */
NRES_EXTERN int nres_joblog_close(nres_joblog_t *log);
/* Lines written so far and events dropped. */
NRES_EXTERN void nres_joblog_counts(const nres_joblog_t *log,
                                    uint64_t *written, uint64_t *dropped);

/* ------------------------------------------------- completion on a loop */

/* One uv_async_t carries every completion back to a libuv loop: workers
 * push finished jobs on a lock-free list and signal the handle (only when
 * the list was empty); the loop thread then calls each job's done_cb. The
 * handle is referenced only while jobs are in flight, so an idle bridge
 * does not keep the loop alive. */
struct nres_pool_uv_s {
  void *data;                   /* the caller's */
  uv_loop_t *loop;
  nres_pool_t *pool;
  uint64_t completed;           /* done_cb calls made */
  /* private */
  uv_async_t async_;
  NRES_ATOMIC(nres_job_ptr_t) done_;    /* finished, newest first */
  uint32_t pending_;                  /* submitted, not yet called back
                                         (loop thread only) */
  uint32_t closed_;
  void (*close_cb_)(nres_pool_uv_t *bridge);
};

/* On the loop thread. */
NRES_EXTERN int nres_pool_uv_init(uv_loop_t *loop, nres_pool_t *pool,
                                  nres_pool_uv_t *bridge);
/* Submit from the loop thread a job whose done_cb (required) runs on the
 * loop thread once it is over; errors as nres_pool_submit, and then no
 * callback is ever called. */
NRES_EXTERN int nres_pool_uv_submit(nres_pool_uv_t *bridge, nres_job_t *job);
/* The same under a gate (the gate's wait is not needed: each job's
 * done_cb reports on the loop). */
NRES_EXTERN int nres_pool_uv_gate_add(nres_pool_uv_t *bridge,
                                      nres_gate_t *gate, nres_job_t *job);
/* Close the handle (close_cb may be NULL). NRES_EBUSY while jobs are in
 * flight (their callbacks are still due). */
NRES_EXTERN int nres_pool_uv_close(nres_pool_uv_t *bridge,
                                   void (*close_cb)(nres_pool_uv_t *bridge));

/* ------------------------------------------------ policy-driven pool calls */

/* A call under a policy whose attempts run on the pool: each attempt is a
 * job, a retry waits as a delayed job (nres_pool_submit_at), so no worker
 * is held during a backoff. The pull API (nres_call_*) decides. Attempts
 * run one at a time (no hedging, as the sync driver); an attempt is
 * bounded only by itself: it gets attempt->deadline and should honour it.
 * done_cb runs once, on a worker (or on the loop thread when started with
 * nres_pool_call_start_uv), with 0 or the NRES_E* of the stop reason;
 * pc->call keeps the details. The record is the caller's again then. */
typedef void (*nres_pool_call_cb)(nres_pool_call_t *pc, int status);

struct nres_pool_call_s {
  void *data;                   /* the caller's */
  nres_call_t call;
  int status;                   /* the result done_cb got */
  /* private */
  nres_job_t job_;              /* every step runs in this record */
  nres_pool_t *pool_;
  nres_pool_uv_t *bridge_;
  nres_policy_t *policy_;
  nres_attempt_fn fn_;
  void *arg_;
  nres_pool_call_cb done_cb_;
  nres_action_t act_;           /* the pending action */
  NRES_ATOMIC(uint32_t) cancel_;
  uint32_t phase_;
};

/* Start from any thread; pc must not be running (pc->data is kept, the
 * rest is reset). NRES_EINVAL (misuse, policy not built), NRES_ESTATE
 * (pool closing), NRES_ELIMITED (the pool's max_wait refused the first
 * attempt; later ones are never refused); on error done_cb is never
 * called, and on success never from inside this function. */
NRES_EXTERN int nres_pool_call_start(nres_pool_call_t *pc, nres_pool_t *pool,
                                     nres_policy_t *policy, nres_attempt_fn fn,
                                     void *arg, nres_pool_call_cb done_cb);
/* The same from the loop thread, done_cb on the loop thread. */
NRES_EXTERN int nres_pool_call_start_uv(nres_pool_call_t *pc,
                                        nres_pool_uv_t *bridge,
                                        nres_policy_t *policy,
                                        nres_attempt_fn fn, void *arg,
                                        nres_pool_call_cb done_cb);
/* Ask the call to stop (any thread): a running attempt finishes, then the
 * call ends CANCELED instead of retrying; a backoff being waited out ends
 * at its due time at the latest. */
NRES_EXTERN void nres_pool_call_cancel(nres_pool_call_t *pc);

#ifdef __cplusplus
}
#endif
#endif /* NRES_POOL_H */

/* SPDX-License-Identifier: MIT */
/* pool.c - the work pool: threads, per-worker queues, stealing, parking.
 *
 * Each worker owns a Chase-Lev deque (fixed capacity, C11 atomics after Le
 * et al., "Correct and efficient work-stealing for weak memory models"):
 * the owner pushes and takes at the bottom (LIFO: the job a job just
 * submitted runs next, on a warm cache), thieves take from the top. Jobs
 * submitted from outside the pool go to one shared FIFO under a mutex
 * (the injector). A worker looks for work in its deque, then due delayed
 * jobs, then the injector, then steals from the others, starting at a
 * random one.
 *
 * Waking follows tokio's scheduler: a worker that finds nothing spins a
 * bounded number of rounds (at most max_spinning workers at once), then
 * parks on a futex of its own. A submit wakes a parked worker only when no
 * worker is spinning (a spinner will find the job) and, for a submit from
 * a worker, only when its deque then holds more than the one job it will
 * run itself next: a chain of jobs each submitting the next never wakes
 * anyone. A woken worker counts as spinning; when the last spinner finds
 * work it wakes another if more work is visible, so a fan-out ramps up one
 * thread at a time without a thundering herd. Lost wake-ups are excluded
 * Dekker-style: the submitter publishes the job, then (seq_cst) reads the
 * sleeper count; the parker publishes itself as a sleeper, then (seq_cst)
 * looks for work once more before sleeping.
 *
 * With options.max_wait, submits from outside are admitted by expected
 * wait: the pool counts its queued jobs, notes when each worker's job
 * started and keeps a moving average of run times, and refuses
 * (NRES_ELIMITED) a job it expects to wait longer than max_wait, so
 * admitted work waits a bounded time however much is offered. Off, none
 * of this runs.
 *
 * Delayed jobs wait in a binary heap under a mutex. One parked worker, the
 * timekeeper, sleeps with a timeout at the earliest due time; any worker
 * looking for work moves due jobs into its own deque. So a job waiting for
 * its time holds no thread.
 *
 * Separate from gate.c (fan-out/join), joblog.c (the execution log),
 * pool_uv.c (completion on a loop) and pool_call.c (policies), which build
 * on the hooks declared in pool_int.h.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/pool_int.h"

#define DEFAULT_QUEUE 4096u
#define MAX_QUEUE (1u << 24)
#define DEFAULT_RECORDS 1024u
#define DEFAULT_TIMERS 4096u
#define DEFAULT_SPIN 64u
#define MAX_THREADS 1024u

typedef struct nres__worker_s {
  /* The deque: top is written by thieves, bottom by the owner. */
  NRES_ATOMIC(int64_t) top;
  char pad0[NRES_POOL_LINE - sizeof(int64_t)];
  NRES_ATOMIC(int64_t) bottom;
  NRES_ATOMIC(nres_job_ptr_t) *buf;
  int64_t mask;
  /* Owner-only. */
  nres_pool_t *pool;
  nres_job_t *current;          /* the job running (log: parent ids) */
  uint32_t index;
  uint32_t spinning;            /* counted in pool->spinning_ */
  uint32_t started;
  uint64_t rng;
  pthread_t thread;
  /* Counters: one writer (the owner), relaxed readers. */
  NRES_ATOMIC(uint64_t) n_local, n_executed, n_skipped, n_stolen, n_parks;
  /* max_wait on: when the running job started (0: none), for submitters
   * to estimate when this worker is free. */
  NRES_ATOMIC(uint64_t) run_start;
  char pad1[NRES_POOL_LINE];
  NRES_ATOMIC(uint32_t) sleep;  /* futex: 1 parked, 0 not */
  char pad2[NRES_POOL_LINE - sizeof(uint32_t)];
} nres__worker_t;

static _Thread_local nres__worker_t *tls_worker;

#define WORKERS(pool) ((nres__worker_t *) (pool)->workers_)

static inline void bump(NRES_ATOMIC(uint64_t) *counter) {
  nres__store(counter, nres__load(counter) + 1);   /* single writer */
}

/* ------------------------------------------------------------- the deque */

/* Owner: push at the bottom. The size after the push, or 0 if full. */
static int64_t deque_push(nres__worker_t *w, nres_job_t *job) {
  int64_t b = atomic_load_explicit(&w->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&w->top, memory_order_acquire);

  if (b - t > w->mask)
    return 0;
  atomic_store_explicit(&w->buf[b & w->mask], job, memory_order_relaxed);
  /* Release: a thief that sees the new bottom sees the job's fields. */
  atomic_store_explicit(&w->bottom, b + 1, memory_order_release);
  return b + 1 - t;
}

/* Owner: take from the bottom. */
static nres_job_t *deque_take(nres__worker_t *w) {
  int64_t b = atomic_load_explicit(&w->bottom, memory_order_relaxed) - 1;
  int64_t t;
  nres_job_t *job;

  if (b < atomic_load_explicit(&w->top, memory_order_relaxed))
    return NULL;   /* empty: no need to touch bottom at all */
  /* seq_cst store then load: the store-load order the algorithm's fence
   * gives, in a form TSan understands. */
  atomic_store_explicit(&w->bottom, b, memory_order_seq_cst);
  t = atomic_load_explicit(&w->top, memory_order_seq_cst);
  if (t > b) {
    atomic_store_explicit(&w->bottom, b + 1, memory_order_relaxed);
    return NULL;
  }
  job = atomic_load_explicit(&w->buf[b & w->mask], memory_order_relaxed);
  if (t == b) {
    /* The last one: race the thieves for it. */
    if (!atomic_compare_exchange_strong_explicit(&w->top, &t, t + 1,
                                                 memory_order_seq_cst,
                                                 memory_order_relaxed))
      job = NULL;
    atomic_store_explicit(&w->bottom, b + 1, memory_order_relaxed);
  }
  return job;
}

/* Anyone: take from the top. NULL if empty or lost a race. */
static nres_job_t *deque_steal(nres__worker_t *w) {
  int64_t t = atomic_load_explicit(&w->top, memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&w->bottom, memory_order_seq_cst);
  nres_job_t *job;

  if (t >= b)
    return NULL;
  job = atomic_load_explicit(&w->buf[t & w->mask], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&w->top, &t, t + 1,
                                               memory_order_seq_cst,
                                               memory_order_relaxed))
    return NULL;
  return job;
}

static int64_t deque_size(nres__worker_t *w) {
  int64_t b = atomic_load_explicit(&w->bottom, memory_order_seq_cst);
  int64_t t = atomic_load_explicit(&w->top, memory_order_seq_cst);
  return b - t;
}

/* ----------------------------------------------------------- the injector */

/* Append under the lock; NRES_ESTATE once the pool is closing (checked
 * under the same lock close sets it with, so no job slips in after the
 * workers were told to drain). force: the pool's own moves (timers, a
 * worker's submits, which claim() already checked). */
enum { INJECT_CHECK = 1, INJECT_COUNT = 2 };

static int inject_push(nres_pool_t *pool, nres_job_t *job, int flags) {
  pthread_mutex_lock(&pool->inject_lock_);
  if ((flags & INJECT_CHECK) && nres__load(&pool->closing_) != 0) {
    pthread_mutex_unlock(&pool->inject_lock_);
    return NRES_ESTATE;
  }
  job->next = NULL;
  if (pool->inject_tail_ != NULL)
    pool->inject_tail_->next = job;
  else
    pool->inject_head_ = job;
  pool->inject_tail_ = job;
  nres__store(&pool->inject_count_, nres__load(&pool->inject_count_) + 1);
  if (flags & INJECT_COUNT)
    pool->injected_++;
  pthread_mutex_unlock(&pool->inject_lock_);
  return 0;
}

static nres_job_t *inject_pop(nres_pool_t *pool) {
  nres_job_t *job;

  if (atomic_load_explicit(&pool->inject_count_, memory_order_seq_cst) == 0)
    return NULL;
  pthread_mutex_lock(&pool->inject_lock_);
  job = pool->inject_head_;
  if (job != NULL) {
    pool->inject_head_ = job->next;
    if (pool->inject_head_ == NULL)
      pool->inject_tail_ = NULL;
    nres__store(&pool->inject_count_, nres__load(&pool->inject_count_) - 1);
  }
  pthread_mutex_unlock(&pool->inject_lock_);
  return job;
}

/* ---------------------------------------------------------------- waking */

static void wake_worker_counted(nres_pool_t *pool, nres__worker_t *w) {
  /* The woken worker counts as spinning: it is about to look for work. */
  atomic_fetch_sub_explicit(&pool->sleepers_, 1, memory_order_seq_cst);
  atomic_fetch_add_explicit(&pool->spinning_, 1, memory_order_seq_cst);
  nres__add(&pool->wakes_, 1);
  nres__futex_wake(&w->sleep, 1);
}

/* Wake this worker if it is parked. 1 if it was. */
static int wake_worker(nres_pool_t *pool, nres__worker_t *w) {
  uint32_t one = 1;

  if (atomic_load_explicit(&w->sleep, memory_order_relaxed) != 1 ||
      !atomic_compare_exchange_strong_explicit(&w->sleep, &one, 0,
                                               memory_order_seq_cst,
                                               memory_order_relaxed))
    return 0;
  wake_worker_counted(pool, w);
  return 1;
}

/* Wake one parked worker, round robin. */
static int wake_one(nres_pool_t *pool) {
  nres__worker_t *workers = WORKERS(pool);
  uint32_t n = pool->threads;
  uint32_t start = nres__add(&pool->wake_next_, 1) % n;
  uint32_t i;

  for (i = 0; i < n; i++) {
    nres__worker_t *w = &workers[(start + i) % n];
    if (wake_worker(pool, w))
      return 1;
  }
  return 0;
}

/* New work was published: wake a parked worker unless one is spinning
 * (it will find the work) or nobody sleeps. The fence orders the
 * publication before the reads (the parker's side is its seq_cst RMW). */
static void maybe_wake(nres_pool_t *pool) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&pool->sleepers_, memory_order_seq_cst) == 0 ||
      atomic_load_explicit(&pool->spinning_, memory_order_seq_cst) != 0)
    return;
  wake_one(pool);
}

/* ---------------------------------------------------------------- timers */

static void heap_swap(nres_job_t **heap, uint32_t a, uint32_t b) {
  nres_job_t *tmp = heap[a];
  heap[a] = heap[b];
  heap[b] = tmp;
}

static void heap_up(nres_job_t **heap, uint32_t i) {
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (heap[parent]->due <= heap[i]->due)
      break;
    heap_swap(heap, parent, i);
    i = parent;
  }
}

static void heap_down(nres_job_t **heap, uint32_t count, uint32_t i) {
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < count && heap[l]->due < heap[m]->due)
      m = l;
    if (r < count && heap[r]->due < heap[m]->due)
      m = r;
    if (m == i)
      return;
    heap_swap(heap, m, i);
    i = m;
  }
}

static nres_job_t *heap_pop(nres_pool_t *pool) {
  nres_job_t **heap = pool->timer_heap_;
  nres_job_t *job = heap[0];

  heap[0] = heap[--pool->timer_count_];
  heap_down(heap, pool->timer_count_, 0);
  return job;
}

static void publish_timer_next(nres_pool_t *pool) {
  atomic_store_explicit(&pool->timer_next_,
                        pool->timer_count_ ? pool->timer_heap_[0]->due
                                           : NRES_TIME_NEVER,
                        memory_order_seq_cst);
}

/* Due delayed jobs moved per call; more stay due in the heap for the
 * next look. */
#define FIRE_BATCH 64

/* Move the due delayed jobs into w's deque (the shared queue if full),
 * which is empty (find_work looked first). The owner takes from the
 * bottom, so they go in latest first: several due at once (a worker late
 * off the CPU) still run in due order. */
static void fire_timers(nres_pool_t *pool, nres__worker_t *w,
                        nres_time_t now) {
  nres_job_t *batch[FIRE_BATCH];
  uint32_t moved = 0, i;

  pthread_mutex_lock(&pool->timer_lock_);
  while (moved < FIRE_BATCH && pool->timer_count_ > 0 &&
         pool->timer_heap_[0]->due <= now) {
    nres_job_t *job = heap_pop(pool);
    nres__store(&job->state, NRES__JOB_QUEUED);
    batch[moved++] = job;
  }
  for (i = moved; i-- > 0;)
    if (deque_push(w, batch[i]) == 0)
      inject_push(pool, batch[i], 0);
  pool->timers_fired_ += moved;
  publish_timer_next(pool);
  pthread_mutex_unlock(&pool->timer_lock_);
  if (moved > 1)
    maybe_wake(pool);
}

static int timers_due(nres_pool_t *pool) {
  nres_time_t next = atomic_load_explicit(&pool->timer_next_,
                                          memory_order_seq_cst);
  return next != NRES_TIME_NEVER && next <= nres_clock_now();
}

/* ----------------------------------------------------------- finding work */

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static nres_job_t *find_work(nres__worker_t *w) {
  nres_pool_t *pool = w->pool;
  nres__worker_t *workers = WORKERS(pool);
  nres_job_t *job;
  uint32_t n = pool->threads, start, i;

  if ((job = deque_take(w)) != NULL)
    return job;
  if (nres__load(&pool->timer_next_) != NRES_TIME_NEVER) {
    nres_time_t now = nres_clock_now();
    if (nres__load(&pool->timer_next_) <= now) {
      fire_timers(pool, w, now);
      if ((job = deque_take(w)) != NULL)
        return job;
    }
  }
  if ((job = inject_pop(pool)) != NULL)
    return job;
  if (n > 1) {
    start = (uint32_t) (xorshift(&w->rng) % n);
    for (i = 0; i < n; i++) {
      nres__worker_t *victim = &workers[(start + i) % n];
      if (victim == w)
        continue;
      if ((job = deque_steal(victim)) != NULL) {
        bump(&w->n_stolen);
        return job;
      }
    }
  }
  return NULL;
}

/* Is there anything to run? (seq_cst reads: see maybe_wake) */
static int work_visible(nres_pool_t *pool) {
  nres__worker_t *workers = WORKERS(pool);
  uint32_t i;

  if (atomic_load_explicit(&pool->inject_count_, memory_order_seq_cst) != 0)
    return 1;
  for (i = 0; i < pool->threads; i++)
    if (deque_size(&workers[i]) > 0)
      return 1;
  return timers_due(pool);
}

/* --------------------------------------------------------------- running */

static void log_event(nres_pool_t *pool, nres_job_t *job, int kind,
                      uint32_t status, nres_time_t start, nres_time_t now) {
  nres_joblog_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.kind = (uint8_t) kind;
  ev.status = (uint8_t) status;
  ev.result = job->result;
  ev.worker = job->worker;
  ev.job = job->id;
  ev.parent = job->parent;
  ev.gate = job->gate != NULL ? job->gate->id : 0;
  ev.time = now;
  ev.start = start;
  nres_joblog_emit(pool->log_, &ev);
}

static void record_put(nres_pool_t *pool, nres_job_t *job);

void nres__job_finish(nres_job_t *job) {
  nres_gate_t *gate = job->gate;
  nres_job_cb cb = job->done_cb;
  nres_pool_t *pool = job->pool;
  int pooled = (job->flags & NRES__JOB_POOLED) != 0;

  /* From here the record is the caller's again: the callback may submit
   * it anew, so nothing below reads it (a pooled record excepted, which
   * must not be resubmitted). */
  atomic_store_explicit(&job->state, NRES__JOB_IDLE, memory_order_release);
  if (cb != NULL)
    cb(job);
  if (pooled)
    record_put(pool, job);
  if (gate != NULL)
    nres__gate_release(gate);
}

/* The moving average of run times the admission check uses (1/8 weight
 * per run; a lost race drops one sample). */
static void note_service(nres_pool_t *pool, nres_time_t ran) {
  uint64_t s = nres__load(&pool->service_);
  if (ran == 0)
    ran = 1;   /* 0 means "nothing measured yet" */
  nres__store(&pool->service_,
              s == 0 ? ran : s - s / 8 + ran / 8 + (s % 8 + ran % 8) / 8);
}

static void run_job(nres__worker_t *w, nres_job_t *job) {
  nres_pool_t *pool = w->pool;
  nres_gate_t *gate = job->gate;
  nres_time_t start = 0, began = 0;
  uint64_t outer = 0;
  uint32_t stop = 0, status;
  nres_job_t *prev;

  if (job->flags & NRES__JOB_COUNTED) {
    job->flags &= ~(uint32_t) NRES__JOB_COUNTED;
    atomic_fetch_sub_explicit(&pool->queued_, 1, memory_order_relaxed);
  }
  job->worker = w->index;
  status = atomic_load_explicit(&job->status, memory_order_acquire);
  if (status == NRES_JOB_PENDING) {
    if (gate != NULL)
      stop = atomic_load_explicit(&gate->stop_, memory_order_acquire);
    if (stop == 0 &&
        nres__load(&pool->closing_) == 1 + NRES_POOL_CANCEL)
      stop = NRES_JOB_CANCELED;
  }
  if (status == NRES_JOB_PENDING && stop == 0) {
    nres__store(&job->state, NRES__JOB_RUNNING);
    if (pool->log_ != NULL) {
      start = nres_clock_now();
      log_event(pool, job, NRES_JOBLOG_EXECUTING, 0, 0, start);
    }
    if (pool->max_wait_ != 0) {
      /* A job run while helping (a gate's wait) nests: restore after. */
      began = start != 0 ? start : nres_clock_now();
      outer = nres__load(&w->run_start);
      nres__store(&w->run_start, began);
    }
    prev = w->current;
    w->current = job;
    job->result = job->fn(job);
    w->current = prev;
    if (began != 0) {
      nres_time_t end = nres_clock_now();
      note_service(pool, end > began ? end - began : 0);
      nres__store(&w->run_start, outer);
    }
    status = job->result == 0 ? NRES_JOB_OK : NRES_JOB_ERROR;
    /* A gate that stopped while the job ran decided its outcome first
     * (the job may have returned early because it saw the stop). */
    if (gate != NULL &&
        (stop = atomic_load_explicit(&gate->stop_, memory_order_acquire)) != 0)
      status = stop;
    nres__gate_settle(job, status);
    bump(&w->n_executed);
  } else {
    if (status == NRES_JOB_PENDING)
      nres__gate_settle(job, stop);
    bump(&w->n_skipped);
  }
  if (pool->log_ != NULL)
    log_event(pool, job, NRES_JOBLOG_COMPLETED,
              atomic_load_explicit(&job->status, memory_order_relaxed), start,
              nres_clock_now());
  if (job->loop != NULL)
    nres__pool_uv_push(job->loop, job);
  else
    nres__job_finish(job);
}

/* ---------------------------------------------------------------- parking */

static void unpark_self(nres_pool_t *pool, nres__worker_t *w) {
  uint32_t one = 1;
  if (atomic_compare_exchange_strong_explicit(&w->sleep, &one, 0,
                                              memory_order_seq_cst,
                                              memory_order_relaxed))
    atomic_fetch_sub_explicit(&pool->sleepers_, 1, memory_order_seq_cst);
  else
    w->spinning = 1;   /* a waker beat us to it and counted us spinning */
}

static void park(nres__worker_t *w) {
  nres_pool_t *pool = w->pool;
  uint32_t me = w->index + 1, none = 0;
  int keeper = 0;

  bump(&w->n_parks);
  atomic_store_explicit(&w->sleep, 1, memory_order_seq_cst);
  atomic_fetch_add_explicit(&pool->sleepers_, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&pool->timer_next_, memory_order_seq_cst) !=
      NRES_TIME_NEVER)
    keeper = atomic_compare_exchange_strong_explicit(
        &pool->timekeeper_, &none, me, memory_order_seq_cst,
        memory_order_relaxed);
  if (work_visible(pool) ||
      atomic_load_explicit(&pool->exit_, memory_order_seq_cst)) {
    unpark_self(pool, w);
  } else {
    for (;;) {
      nres_time_t timeout = NRES_TIME_NEVER;
      if (keeper) {
        nres_time_t next = atomic_load_explicit(&pool->timer_next_,
                                                memory_order_seq_cst);
        if (next != NRES_TIME_NEVER) {
          nres_time_t now = nres_clock_now();
          if (next <= now) {
            unpark_self(pool, w);
            break;
          }
          timeout = next - now;
        }
      }
      nres__futex_wait(&w->sleep, 1, timeout);
      if (atomic_load_explicit(&w->sleep, memory_order_acquire) == 0) {
        w->spinning = 1;   /* woken: the waker counted us spinning */
        break;
      }
      if (keeper && timers_due(pool)) {
        unpark_self(pool, w);
        break;
      }
    }
  }
  if (keeper) {
    atomic_store_explicit(&pool->timekeeper_, 0, memory_order_seq_cst);
    /* Delayed jobs still waiting need a timekeeper: hand the role over
     * to another sleeper (it takes it when it parks again). */
    if (!timers_due(pool) &&
        atomic_load_explicit(&pool->timer_next_, memory_order_seq_cst) !=
            NRES_TIME_NEVER)
      maybe_wake(pool);
  }
}

static void stop_spinning(nres_pool_t *pool, nres__worker_t *w) {
  w->spinning = 0;
  atomic_fetch_sub_explicit(&pool->spinning_, 1, memory_order_seq_cst);
}

static void *worker_main(void *arg) {
  nres__worker_t *w = arg;
  nres_pool_t *pool = w->pool;
  uint32_t spins = 0;

  tls_worker = w;
  for (;;) {
    nres_job_t *job = find_work(w);
    if (job != NULL) {
      if (w->spinning) {
        /* The last spinner to find work makes sure the rest is seen. */
        w->spinning = 0;
        if (atomic_fetch_sub_explicit(&pool->spinning_, 1,
                                      memory_order_seq_cst) == 1 &&
            work_visible(pool))
          maybe_wake(pool);
      }
      run_job(w, job);
      spins = 0;
      continue;
    }
    if (atomic_load_explicit(&pool->exit_, memory_order_acquire))
      break;
    if (!w->spinning) {
      uint32_t s = atomic_load_explicit(&pool->spinning_,
                                        memory_order_relaxed);
      if (s < pool->max_spinning_ &&
          atomic_compare_exchange_strong_explicit(
              &pool->spinning_, &s, s + 1, memory_order_seq_cst,
              memory_order_relaxed))
        w->spinning = 1;
    }
    if (w->spinning && spins < pool->spin_) {
      int i;
      spins++;
      for (i = 0; i < 32; i++)
        nres__cpu_relax();
      continue;
    }
    if (w->spinning)
      stop_spinning(pool, w);
    park(w);
    spins = 0;
  }
  if (w->spinning)
    stop_spinning(pool, w);
  tls_worker = NULL;
  return NULL;
}

int nres__pool_help(nres_pool_t *pool) {
  nres__worker_t *w = tls_worker;
  nres_job_t *job;

  if (w == NULL || w->pool != pool || (job = find_work(w)) == NULL)
    return 0;
  run_job(w, job);
  return 1;
}

int nres__pool_on_worker(const nres_pool_t *pool) {
  return tls_worker != NULL && tls_worker->pool == pool;
}

int nres_pool_worker(const nres_pool_t *pool) {
  return nres__pool_on_worker(pool) ? (int) tls_worker->index : -1;
}

/* -------------------------------------------------------------- records */

static void record_put(nres_pool_t *pool, nres_job_t *job) {
  uint32_t i = (uint32_t) (job - pool->records_);
  uint64_t head = atomic_load_explicit(&pool->record_head_,
                                       memory_order_relaxed);
  uint64_t next;

  do {
    atomic_store_explicit(&pool->record_next_[i], (uint32_t) head,
                          memory_order_relaxed);
    next = (((head >> 32) + 1) << 32) | (i + 1);
  } while (!atomic_compare_exchange_weak_explicit(&pool->record_head_, &head,
                                                  next, memory_order_release,
                                                  memory_order_relaxed));
}

nres_job_t *nres_pool_job_get(nres_pool_t *pool) {
  uint64_t head, next;
  uint32_t i;
  nres_job_t *job;

  if (pool == NULL || pool->magic_ != NRES__POOL_MAGIC)
    return NULL;
  head = atomic_load_explicit(&pool->record_head_, memory_order_acquire);
  do {
    if ((uint32_t) head == 0)
      return NULL;
    i = (uint32_t) head - 1;
    /* A stale read here is caught by the tag in the CAS. */
    next = (((head >> 32) + 1) << 32) |
           atomic_load_explicit(&pool->record_next_[i], memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(&pool->record_head_, &head,
                                                  next, memory_order_acquire,
                                                  memory_order_acquire));
  job = &pool->records_[i];
  memset(job, 0, sizeof(*job));
  job->flags = NRES__JOB_POOLED;
  job->pool = pool;
  return job;
}

void nres_pool_job_put(nres_pool_t *pool, nres_job_t *job) {
  if (pool == NULL || job == NULL || pool->magic_ != NRES__POOL_MAGIC ||
      !(job->flags & NRES__JOB_POOLED) || job->pool != pool ||
      job < pool->records_ || job >= pool->records_ + pool->record_count_ ||
      nres__load(&job->state) != NRES__JOB_IDLE)
    return;
  record_put(pool, job);
}

/* --------------------------------------------------------------- submits */

int nres_job_init(nres_job_t *job, nres_job_fn fn, void *arg) {
  if (job == NULL || fn == NULL)
    return NRES_EINVAL;
  memset(job, 0, sizeof(*job));
  job->fn = fn;
  job->arg = arg;
  return 0;
}

int nres_job_status(const nres_job_t *job) {
  return (int) atomic_load_explicit(&job->status, memory_order_acquire);
}

int nres_job_canceled(const nres_job_t *job) {
  if (atomic_load_explicit(&job->status, memory_order_relaxed) !=
      NRES_JOB_PENDING)
    return 1;
  if (job->gate != NULL &&
      atomic_load_explicit(&job->gate->stop_, memory_order_relaxed) != 0)
    return 1;
  return job->pool != NULL &&
         nres__load(&job->pool->closing_) == 1 + NRES_POOL_CANCEL;
}

const char *nres_job_status_name(int status) {
  switch (status) {
    case NRES_JOB_PENDING: return "pending";
    case NRES_JOB_OK: return "ok";
    case NRES_JOB_ERROR: return "error";
    case NRES_JOB_TIMEOUT: return "timeout";
    case NRES_JOB_CANCELED: return "canceled";
    default: return "unknown";
  }
}

/* The wait a job queued now can expect before a worker starts it (see
 * nres_pool_submit in nres/pool.h). */
static nres_time_t expected_wait(nres_pool_t *pool, nres_time_t service) {
  nres__worker_t *workers = WORKERS(pool);
  nres_time_t now = nres_clock_now(), first = NRES_TIME_NEVER, sum = 0;
  int64_t queued = atomic_load_explicit(&pool->queued_, memory_order_relaxed);
  uint32_t i;

  for (i = 0; i < pool->threads; i++) {
    nres_time_t began = nres__load(&workers[i].run_start), free = 0;
    if (began != 0 && began + service > now)
      free = began + service - now;
    sum += free;
    if (free < first)
      first = free;
  }
  if (queued <= 0)
    return first;
  sum = (sum + (nres_time_t) queued * service) / pool->threads;
  return sum > first ? sum : first;
}

/* Admission by expected wait: 0, or NRES_ELIMITED, counted. */
static int admit(nres_pool_t *pool) {
  nres_time_t service = nres__load(&pool->service_);

  if (service == 0 || expected_wait(pool, service) <= pool->max_wait_)
    return 0;
  nres__add(&pool->shed_, 1);
  return NRES_ELIMITED;
}

/* Checks common to every submit, admission by expected wait (max_wait on:
 * a job from outside, not delayed, not under a gate); claims the record.
 * A refused record is left as it was. */
static int claim(nres_pool_t *pool, nres_job_t *job, uint32_t state,
                 int from_worker) {
  nres__worker_t *w;
  uint32_t closing;

  if (pool == NULL || pool->magic_ != NRES__POOL_MAGIC || job == NULL ||
      job->fn == NULL)
    return NRES_EINVAL;
  if ((job->flags & NRES__JOB_POOLED) && job->pool != pool)
    return NRES_EINVAL;
  if (nres__load(&job->state) != NRES__JOB_IDLE)
    return NRES_EBUSY;
  closing = nres__load(&pool->closing_);
  /* While draining, the jobs in flight may still submit (their fan-outs
   * and chains complete); nobody else may. */
  if (closing != 0 && (closing != 1 + NRES_POOL_DRAIN || !from_worker ||
                       state == NRES__JOB_DELAYED))
    return NRES_ESTATE;
  if (pool->max_wait_ != 0 && state == NRES__JOB_QUEUED && !from_worker &&
      job->gate == NULL && admit(pool) != 0)
    return NRES_ELIMITED;
  nres__store(&job->state, state);
  atomic_store_explicit(&job->status, NRES_JOB_PENDING, memory_order_relaxed);
  job->pool = pool;
  job->result = 0;
  if (pool->log_ != NULL) {
    w = tls_worker;
    job->id = nres__add(&pool->next_id_, 1) + 1;
    job->parent = w != NULL && w->pool == pool && w->current != NULL
                      ? w->current->id
                      : 0;
  }
  return 0;
}

int nres__pool_submit(nres_pool_t *pool, nres_job_t *job) {
  nres__worker_t *w = tls_worker;
  int64_t size;
  int rc;

  int mine = w != NULL && w->pool == pool;

  if ((rc = claim(pool, job, NRES__JOB_QUEUED, mine)) != 0)
    return rc;
  if (pool->max_wait_ != 0) {
    /* Counted before it is visible to workers, so run_job's decrement
     * never comes first. */
    job->flags |= NRES__JOB_COUNTED;
    atomic_fetch_add_explicit(&pool->queued_, 1, memory_order_relaxed);
  }
  if (mine) {
    size = deque_push(w, job);
    if (size > 0) {
      bump(&w->n_local);
      /* One job is the next thing this worker runs: nobody to wake. */
      if (size > 1)
        maybe_wake(pool);
      return 0;
    }
  }
  if ((rc = inject_push(pool, job,
                        mine ? INJECT_COUNT : INJECT_CHECK | INJECT_COUNT)) !=
      0) {
    if (job->flags & NRES__JOB_COUNTED) {
      job->flags &= ~(uint32_t) NRES__JOB_COUNTED;
      atomic_fetch_sub_explicit(&pool->queued_, 1, memory_order_relaxed);
    }
    nres__store(&job->state, NRES__JOB_IDLE);
    return rc;
  }
  maybe_wake(pool);
  return 0;
}

int nres_pool_submit(nres_pool_t *pool, nres_job_t *job) {
  if (job != NULL && pool != NULL && pool->magic_ == NRES__POOL_MAGIC &&
      nres__load(&job->state) == NRES__JOB_IDLE) {
    job->gate = NULL;
    job->loop = NULL;
  }
  return nres__pool_submit(pool, job);
}

int nres_pool_submit_at(nres_pool_t *pool, nres_job_t *job,
                        nres_time_t when) {
  int rc, earliest;
  uint32_t keeper;

  if (job != NULL && pool != NULL && pool->magic_ == NRES__POOL_MAGIC &&
      nres__load(&job->state) == NRES__JOB_IDLE) {
    job->gate = NULL;
    job->loop = NULL;
  }
  if ((rc = claim(pool, job, NRES__JOB_DELAYED, 0)) != 0)
    return rc;
  job->due = when;
  pthread_mutex_lock(&pool->timer_lock_);
  if (pool->timers_closed_ || pool->timer_count_ == pool->timer_cap_) {
    rc = pool->timers_closed_ ? NRES_ESTATE : NRES_EFULL;
    pthread_mutex_unlock(&pool->timer_lock_);
    nres__store(&job->state, NRES__JOB_IDLE);
    return rc;
  }
  pool->timer_heap_[pool->timer_count_++] = job;
  pool->timers_added_++;
  heap_up(pool->timer_heap_, pool->timer_count_ - 1);
  earliest = pool->timer_heap_[0] == job;
  if (earliest)
    publish_timer_next(pool);
  pthread_mutex_unlock(&pool->timer_lock_);
  if (earliest) {
    /* The timekeeper sleeps until the old earliest time: make it re-arm,
     * or get one if there is none. */
    atomic_thread_fence(memory_order_seq_cst);
    keeper = atomic_load_explicit(&pool->timekeeper_, memory_order_seq_cst);
    if (keeper == 0 || !wake_worker(pool, &WORKERS(pool)[keeper - 1]))
      maybe_wake(pool);
  }
  return 0;
}

/* ------------------------------------------------------------- lifecycle */

void nres_pool_options_init(nres_pool_options_t *options) {
  if (options != NULL)
    memset(options, 0, sizeof(*options));
}

static int default_threads(uint32_t *out) {
  const char *env = getenv("NRES_THREADS");
  long cores;

  if (env != NULL && *env != '\0') {
    char *end;
    unsigned long v;
    errno = 0;
    v = strtoul(env, &end, 10);
    if (errno != 0 || *end != '\0' || v == 0 || v > MAX_THREADS ||
        env[0] == '-')
      return NRES_EINVAL;
    *out = (uint32_t) v;
    return 0;
  }
  cores = sysconf(_SC_NPROCESSORS_ONLN);
  *out = cores < 1 ? 1 : cores > (long) MAX_THREADS ? MAX_THREADS
                                                     : (uint32_t) cores;
  return 0;
}

static void free_pool(nres_pool_t *pool) {
  nres__worker_t *workers = WORKERS(pool);
  uint32_t i;

  if (workers != NULL)
    for (i = 0; i < pool->threads; i++)
      nres__free((void *) workers[i].buf);
  nres__free(workers);
  nres__free(pool->records_);
  nres__free((void *) pool->record_next_);
  nres__free(pool->timer_heap_);
  pthread_mutex_destroy(&pool->inject_lock_);
  pthread_mutex_destroy(&pool->timer_lock_);
  pool->workers_ = NULL;
  pool->records_ = NULL;
  pool->record_next_ = NULL;
  pool->timer_heap_ = NULL;
  pool->magic_ = 0;
}

static void stop_workers(nres_pool_t *pool) {
  nres__worker_t *workers = WORKERS(pool);
  uint32_t i;

  atomic_store_explicit(&pool->exit_, 1, memory_order_seq_cst);
  for (i = 0; i < pool->threads; i++)
    wake_worker(pool, &workers[i]);
  for (i = 0; i < pool->threads; i++)
    if (workers[i].started)
      pthread_join(workers[i].thread, NULL);
}

int nres_pool_init(nres_pool_t *pool, const nres_pool_options_t *options) {
  nres_pool_options_t defaults;
  nres__worker_t *workers;
  uint32_t threads, queue, records, timers, i;
  int rc;

  if (pool == NULL)
    return NRES_EINVAL;
  if (options == NULL) {
    nres_pool_options_init(&defaults);
    options = &defaults;
  }
  threads = options->threads;
  if (threads == 0 && (rc = default_threads(&threads)) != 0)
    return rc;
  queue = options->queue_size ? options->queue_size : DEFAULT_QUEUE;
  records = options->records ? options->records : DEFAULT_RECORDS;
  timers = options->timers ? options->timers : DEFAULT_TIMERS;
  if (threads > MAX_THREADS || queue > MAX_QUEUE || (queue & (queue - 1)) ||
      options->max_wait == NRES_TIME_INVALID ||
      options->service == NRES_TIME_INVALID ||
      options->service == NRES_TIME_NEVER)
    return NRES_EINVAL;

  memset(pool, 0, sizeof(*pool));
  pool->threads = threads;
  pool->log_ = options->log;
  pool->spin_ = options->spin ? options->spin : DEFAULT_SPIN;
  /* Spinners burn a core each: never more than half the workers (at
   * least one), never more than the cores. */
  pool->max_spinning_ = threads / 2 ? threads / 2 : 1;
  {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores >= 1 && pool->max_spinning_ > (uint32_t) cores)
      pool->max_spinning_ = (uint32_t) cores;
  }
  atomic_init(&pool->timer_next_, NRES_TIME_NEVER);
  pthread_mutex_init(&pool->inject_lock_, NULL);
  pthread_mutex_init(&pool->timer_lock_, NULL);
  pool->timer_cap_ = timers;
  if (options->max_wait != NRES_TIME_NEVER) {
    pool->max_wait_ = options->max_wait;
    atomic_init(&pool->service_, options->max_wait ? options->service : 0);
  }

  workers = nres__calloc(threads, sizeof(*workers));
  pool->workers_ = workers;
  pool->records_ = nres__calloc(records, sizeof(nres_job_t));
  pool->record_next_ = nres__calloc(records, sizeof(*pool->record_next_));
  pool->record_count_ = records;
  pool->timer_heap_ = nres__calloc(timers, sizeof(nres_job_t *));
  if (workers == NULL || pool->records_ == NULL ||
      pool->record_next_ == NULL || pool->timer_heap_ == NULL)
    goto nomem;
  for (i = 0; i < threads; i++) {
    workers[i].buf = nres__calloc(queue, sizeof(*workers[i].buf));
    if (workers[i].buf == NULL)
      goto nomem;
    workers[i].mask = (int64_t) queue - 1;
    workers[i].pool = pool;
    workers[i].index = i;
    workers[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
  }
  for (i = records; i-- > 0;)
    record_put(pool, &pool->records_[i]);
  pool->magic_ = NRES__POOL_MAGIC;
  for (i = 0; i < threads; i++) {
    rc = pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
    if (rc != 0) {
      stop_workers(pool);
      free_pool(pool);
      return rc == EAGAIN ? NRES_EAGAIN : NRES_ENOMEM;
    }
    workers[i].started = 1;
  }
  return 0;

nomem:
  free_pool(pool);
  return NRES_ENOMEM;
}

int nres_pool_close(nres_pool_t *pool, int how) {
  nres_job_t *job;

  if (pool == NULL || pool->magic_ != NRES__POOL_MAGIC ||
      (how != NRES_POOL_DRAIN && how != NRES_POOL_CANCEL) ||
      nres__pool_on_worker(pool))
    return NRES_EINVAL;
  pthread_mutex_lock(&pool->inject_lock_);
  if (nres__load(&pool->closing_) != 0) {
    pthread_mutex_unlock(&pool->inject_lock_);
    return NRES_EINVAL;
  }
  atomic_store_explicit(&pool->closing_, 1 + (uint32_t) how,
                        memory_order_seq_cst);
  pthread_mutex_unlock(&pool->inject_lock_);

  /* Delayed jobs will never come due: they end CANCELED, through a worker
   * like any other job, so their completions run as usual. */
  pthread_mutex_lock(&pool->timer_lock_);
  pool->timers_closed_ = 1;
  while (pool->timer_count_ > 0) {
    job = heap_pop(pool);
    nres__gate_settle(job, NRES_JOB_CANCELED);
    nres__store(&job->state, NRES__JOB_QUEUED);
    inject_push(pool, job, 0);
  }
  publish_timer_next(pool);
  pthread_mutex_unlock(&pool->timer_lock_);
  maybe_wake(pool);   /* the timekeeper may sleep until a canceled due time */

  /* DRAIN: every accepted job ends while all workers still run. Stopping
   * them first let an idle worker exit while a running job was about to
   * queue work and wait for it (a fan-out inside a job), stranding that
   * work behind the blocked worker. Jobs submit only from workers now,
   * and the counters settle once nothing runs. */
  if (how == NRES_POOL_DRAIN) {
    nres_pool_stats_t st;
    for (;;) {
      struct timespec nap = { 0, 100 * 1000 };
      nres_pool_stats(pool, &st);
      if (st.executed + st.skipped >= st.submitted)
        break;
      nanosleep(&nap, NULL);
    }
  }

  stop_workers(pool);

  /* Every job reached a worker: the injector and the deques are empty,
   * since nothing could be queued once closing was set except by a worker,
   * which drains its own queue before it exits. */
  free_pool(pool);
  return 0;
}

void nres_pool_stats(const nres_pool_t *pool, nres_pool_stats_t *out) {
  nres__worker_t *workers;
  uint32_t i;

  if (out == NULL)
    return;
  memset(out, 0, sizeof(*out));
  if (pool == NULL || pool->magic_ != NRES__POOL_MAGIC)
    return;
  workers = WORKERS(pool);
  for (i = 0; i < pool->threads; i++) {
    out->local += nres__load(&workers[i].n_local);
    out->executed += nres__load(&workers[i].n_executed);
    out->skipped += nres__load(&workers[i].n_skipped);
    out->stolen += nres__load(&workers[i].n_stolen);
    out->parks += nres__load(&workers[i].n_parks);
  }
  out->wakes = nres__load(&pool->wakes_);
  pthread_mutex_lock((pthread_mutex_t *) &pool->inject_lock_);
  out->injected = pool->injected_;
  pthread_mutex_unlock((pthread_mutex_t *) &pool->inject_lock_);
  pthread_mutex_lock((pthread_mutex_t *) &pool->timer_lock_);
  out->timers_fired = pool->timers_fired_;
  out->submitted = pool->timers_added_;
  pthread_mutex_unlock((pthread_mutex_t *) &pool->timer_lock_);
  out->submitted += out->local + out->injected;
  out->shed = nres__load(&pool->shed_);
  out->service = nres__load(&pool->service_);
}

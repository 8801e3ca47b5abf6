/* SPDX-License-Identifier: MIT */
/* loop.c - the event loop of nresrun's cells: a libuv loop, the HTTP client
 * on it, request slots, and a ring of finished requests for Lua to drain.
 *
 * The cell's workers are Lua coroutines run by lua/nresrun/sched.lua, and C
 * must never call into Lua (a callback re-entering the LuaJIT state from
 * inside uv_run would run a coroutine on the wrong stack). So the HTTP
 * completion callback only appends the slot's id to a ring and copies the
 * results into the slot's plain fields; the scheduler, when it would sleep,
 * runs the loop once (nres_host_loop_run, bounded by its next timer), then
 * takes the ids (nres_host_loop_take) and resumes the coroutines waiting on
 * them. Each slot has at most one call running, so a ring as large as the
 * slot table never overflows.
 *
 * Memory: a slot is allocated once (nres_host_http_new) and reused for any
 * number of requests; the Lua side keeps them on a free list, so a steady
 * load allocates nothing here. One loop per process (cells are processes).
 *
 * With the pool component (NRES_HOST_POOL) the loop also owns a work pool
 * (nres/pool.h), made on first use. Its built-in jobs (sleep, spin) run on
 * the pool's threads; each finished job comes back through the pool's one
 * uv_async_t to the loop thread, whose callback does what on_done does for
 * a request: copy the outcome into the job slot's plain fields and append
 * its id to the same ring. Job ids are negative (-(index + 1)), HTTP slot
 * ids are not, so one ring and one drain serve both; the ring holds one
 * entry per slot of either kind, so it still never overflows. Job slots
 * are allocated once and reused as request slots are.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nresrun/host.h"
#include "nres/http.h"

#ifdef NRES_HOST_POOL
#include <stdatomic.h>
#include <time.h>

#include "nres/pool.h"
#endif

#define RING_CAP (NRES_HOST_HTTP_MAX + NRES_HOST_POOL_MAX)

typedef struct {
  nres_host_http_t pub;          /* first: what Lua reads */
  nres_http_req_t req;
} slot_t;

static uv_loop_t loop;
static nres_http_client_t client;
static uv_timer_t wake;
static int ready;                 /* 1 once initialised, 0 after close */
static slot_t **slots;            /* by id */
static int32_t nslots;
static int32_t ring[RING_CAP];
static uint32_t ring_head, ring_count;

static void ring_push(int32_t id) {
  ring[(ring_head + ring_count) % RING_CAP] = id;
  ring_count++;
}

#ifdef NRES_HOST_POOL
static void pool_close(void);
#endif

int nres_host_loop_init(void) {
  int rc;
  if (ready)
    return 0;
  slots = calloc(NRES_HOST_HTTP_MAX, sizeof(*slots));
  if (slots == NULL)
    return NRES_ENOMEM;
  if (uv_loop_init(&loop) != 0) {
    free(slots);
    return NRES_ENOMEM;
  }
  if ((rc = nres_http_client_init(&loop, &client, NULL)) != 0) {
    uv_loop_close(&loop);
    free(slots);
    return rc;
  }
  uv_timer_init(&loop, &wake);
  nslots = 0;
  ring_head = ring_count = 0;
  ready = 1;
  return 0;
}

nres_host_http_t *nres_host_http_new(void) {
  slot_t *s;
  if (!ready || nslots >= NRES_HOST_HTTP_MAX)
    return NULL;
  s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  if (nres_http_req_init(&client, &s->req) != 0) {
    free(s);
    return NULL;
  }
  s->pub.id = nslots;
  s->req.data = s;
  slots[nslots++] = s;
  return &s->pub;
}

static void on_done(nres_http_req_t *req, int status) {
  slot_t *s = req->data;
  s->pub.status = status;
  s->pub.status_code = req->status_code;
  s->pub.error = req->error;
  s->pub.attempts = req->attempts;
  s->pub.stop = req->stop;
  s->pub.resp_len = (double) req->resp_len;
  s->pub.running = 0;
  ring_push(s->pub.id);
}

int nres_host_http_start(nres_host_http_t *h, const char *url,
                         const char *method, uint32_t flags,
                         nres_policy_t *policy) {
  slot_t *s = (slot_t *) h;
  int rc;
  if (!ready || h == NULL || h->id < 0 || h->id >= nslots ||
      slots[h->id] != s || url == NULL || policy == NULL)
    return NRES_EINVAL;
  if (h->running)
    return NRES_EBUSY;
  s->req.url = url;
  s->req.method = method;
  s->req.flags = flags;
  h->status = 0;
  h->status_code = 0;
  h->error = 0;
  h->attempts = 0;
  h->stop = 0;
  h->resp_len = 0;
  h->running = 1;
  rc = nres_http_start(&s->req, policy, NRES_TIME_NEVER, on_done);
  if (rc != 0)
    h->running = 0;
  return rc;
}

static void on_wake(uv_timer_t *t) {
  (void) t;
}

int nres_host_loop_run(double timeout_ns) {
  double ms;
  if (!ready)
    return NRES_EINVAL;
  if (ring_count > 0)
    return (int) ring_count;
  /* libuv counts milliseconds: round down, so a wait never overshoots the
   * scheduler's next timer; under 1 ms this only polls (the scheduler then
   * comes back, spinning on the sub-millisecond rest). */
  ms = timeout_ns > 0 ? floor(timeout_ns / 1e6) : 0;
  if (ms < 1) {
    uv_run(&loop, UV_RUN_NOWAIT);
  } else {
    if (ms > 3600e3)
      ms = 3600e3;
    uv_timer_start(&wake, on_wake, (uint64_t) ms, 0);
    uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&wake);
  }
  return (int) ring_count;
}

int nres_host_loop_take(int32_t *ids, int cap) {
  int n = 0;
  if (ids == NULL || cap <= 0)
    return 0;
  while (ring_count > 0 && n < cap) {
    ids[n++] = ring[ring_head];
    ring_head = (ring_head + 1) % RING_CAP;
    ring_count--;
  }
  return n;
}

int nres_host_http_counters(nres_counters_t *out, double client_out[4]) {
  if (!ready)
    return NRES_EINVAL;
  if (out != NULL)
    nres_http_client_counters(&client, out);
  if (client_out != NULL) {
    client_out[0] = (double) client.sent;
    client_out[1] = (double) client.connects;
    client_out[2] = (double) client.reused;
    client_out[3] = (double) client.open;
  }
  return 0;
}

static void on_req_closed(nres_http_req_t *req) {
  free(req->data);
}

int nres_host_loop_close(void) {
  int32_t i;
  int rc;
  if (!ready)
    return 0;
#ifdef NRES_HOST_POOL
  pool_close();
#endif
  for (i = 0; i < nslots; i++)
    nres_http_req_close(&slots[i]->req, on_req_closed);   /* cancels, no cb */
  uv_close((uv_handle_t *) &wake, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  rc = nres_http_client_close(&client, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0 && rc == 0)
    rc = NRES_EBUSY;
  free(slots);
  slots = NULL;
  nslots = 0;
  ring_head = ring_count = 0;
  ready = 0;
  return rc;
}

#ifdef NRES_HOST_POOL
/* ------------------------------------------------- pool jobs on the loop */

typedef struct {
  nres_host_job_t pub;            /* first: what Lua reads */
  nres_job_t job;
  nres_time_t ns;
} job_slot_t;

static nres_pool_t pool;
static nres_pool_uv_t bridge;
static int pool_ready;
static job_slot_t **jobs;         /* by index (-id - 1) */
static int32_t njobs;
static uint32_t inflight;         /* loop thread */
static uint64_t submitted;        /* loop thread */
static atomic_uint running_now, running_max;

#define SLICE_NS 10000000ull      /* a job polls for cancellation */
#define ARG_MAX_NS 3600e9

static void running_enter(void) {
  unsigned n = atomic_fetch_add_explicit(&running_now, 1,
                                         memory_order_relaxed) + 1;
  unsigned max = atomic_load_explicit(&running_max, memory_order_relaxed);
  while (n > max &&
         !atomic_compare_exchange_weak_explicit(&running_max, &max, n,
                                                memory_order_relaxed,
                                                memory_order_relaxed))
    ;
}

static void running_leave(void) {
  atomic_fetch_sub_explicit(&running_now, 1, memory_order_relaxed);
}

/* Sleep in slices, so a pool closing with CANCEL is not held up. */
static int job_sleep(nres_job_t *job) {
  job_slot_t *s = job->arg;
  nres_time_t end = nres_clock_now() + s->ns, now;
  int rc = 0;
  running_enter();
  while ((now = nres_clock_now()) < end) {
    uint64_t left = end - now;
    struct timespec ts;
    if (left > SLICE_NS)
      left = SLICE_NS;
    ts.tv_sec = (time_t) (left / 1000000000ull);
    ts.tv_nsec = (long) (left % 1000000000ull);
    nanosleep(&ts, NULL);   /* EINTR: the loop sleeps the rest */
    if (nres_job_canceled(job)) {
      rc = NRES_ECANCELED;
      break;
    }
  }
  running_leave();
  return rc;
}

static int job_spin(nres_job_t *job) {
  job_slot_t *s = job->arg;
  nres_time_t end = nres_clock_now() + s->ns;
  unsigned turns = 0;
  int rc = 0;
  running_enter();
  while (nres_clock_now() < end) {
    if ((++turns & 1023) == 0 && nres_job_canceled(job)) {
      rc = NRES_ECANCELED;
      break;
    }
  }
  running_leave();
  return rc;
}

/* On the loop thread, through the bridge's uv_async_t. */
static void on_job_done(nres_job_t *job) {
  job_slot_t *s = job->arg;
  s->pub.status = nres_job_status(job);
  s->pub.result = job->result;
  s->pub.worker = s->pub.status == NRES_JOB_OK ||
                  s->pub.status == NRES_JOB_ERROR ? (int32_t) job->worker : -1;
  s->pub.running = 0;
  inflight--;
  ring_push(s->pub.id);
}

int nres_host_pool_init(uint32_t threads, double max_wait) {
  nres_pool_options_t opts;
  int rc;
  if (!(max_wait >= 0 && max_wait <= ARG_MAX_NS))   /* NaN too */
    return NRES_EINVAL;
  if (pool_ready)
    return (threads == 0 || threads == pool.threads) &&
                   (nres_time_t) max_wait == pool.max_wait_
               ? 0
               : NRES_ESTATE;
  if (threads > 1024)
    return NRES_EINVAL;
  if ((rc = nres_host_loop_init()) != 0)
    return rc;
  jobs = calloc(NRES_HOST_POOL_MAX, sizeof(*jobs));
  if (jobs == NULL)
    return NRES_ENOMEM;
  nres_pool_options_init(&opts);
  opts.threads = threads;
  opts.max_wait = (nres_time_t) max_wait;
  if ((rc = nres_pool_init(&pool, &opts)) != 0) {
    free(jobs);
    jobs = NULL;
    return rc;
  }
  if ((rc = nres_pool_uv_init(&loop, &pool, &bridge)) != 0) {
    nres_pool_close(&pool, NRES_POOL_CANCEL);
    free(jobs);
    jobs = NULL;
    return rc;
  }
  njobs = 0;
  inflight = 0;
  submitted = 0;
  atomic_store(&running_now, 0);
  atomic_store(&running_max, 0);
  pool_ready = 1;
  return 0;
}

nres_host_job_t *nres_host_job_new(void) {
  job_slot_t *s;
  if (!pool_ready || njobs >= NRES_HOST_POOL_MAX)
    return NULL;
  s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  s->pub.id = -(njobs + 1);
  s->pub.worker = -1;
  jobs[njobs++] = s;
  return &s->pub;
}

int nres_host_job_start(nres_host_job_t *h, int kind, double arg) {
  job_slot_t *s = (job_slot_t *) h;
  int32_t index;
  int rc;
  if (!pool_ready || h == NULL)
    return NRES_EINVAL;
  index = -h->id - 1;
  if (index < 0 || index >= njobs || jobs[index] != s)
    return NRES_EINVAL;
  if (!(arg >= 0 && arg <= ARG_MAX_NS))   /* NaN too */
    return NRES_EINVAL;
  if (h->running)
    return NRES_EBUSY;
  switch (kind) {
  case NRES_HOST_JOB_SLEEP:
    rc = nres_job_init(&s->job, job_sleep, s);
    break;
  case NRES_HOST_JOB_SPIN:
    rc = nres_job_init(&s->job, job_spin, s);
    break;
  default:
    return NRES_EINVAL;
  }
  if (rc != 0)
    return rc;
  s->job.done_cb = on_job_done;
  s->ns = (nres_time_t) arg;
  h->kind = kind;
  h->arg = arg;
  h->status = NRES_JOB_PENDING;
  h->result = 0;
  h->worker = -1;
  h->running = 1;
  if ((rc = nres_pool_uv_submit(&bridge, &s->job)) != 0) {
    h->running = 0;
    return rc;
  }
  inflight++;
  submitted++;
  return 0;
}

int nres_host_pool_stats(double out[6]) {
  nres_pool_stats_t st;
  if (!pool_ready || out == NULL)
    return NRES_EINVAL;
  nres_pool_stats(&pool, &st);
  out[0] = (double) pool.threads;
  out[1] = (double) submitted;
  out[2] = (double) st.executed;
  out[3] = (double) atomic_load_explicit(&running_max, memory_order_relaxed);
  out[4] = (double) njobs;
  out[5] = (double) inflight;
  return 0;
}

/* Cancel what is queued, let running jobs end (they poll), deliver every
 * completion (ids dropped with the ring), close the bridge, free. */
static void pool_close(void) {
  int32_t i;
  if (!pool_ready)
    return;
  nres_pool_close(&pool, NRES_POOL_CANCEL);
  while (inflight > 0)
    uv_run(&loop, UV_RUN_ONCE);   /* the bridge's async delivers them */
  nres_pool_uv_close(&bridge, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  for (i = 0; i < njobs; i++)
    free(jobs[i]);
  free(jobs);
  jobs = NULL;
  njobs = 0;
  pool_ready = 0;
}
#endif /* NRES_HOST_POOL */

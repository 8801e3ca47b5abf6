/* loop.c - the event loop of nresrun's cells: a libuv loop, the HTTP client
 * on it, request slots, and a ring of finished requests for Lua to drain.
 *
 * The cell's workers are Lua coroutines run by lua/nres/sched.lua, and C
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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "nres/http.h"

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
static int32_t ring[NRES_HOST_HTTP_MAX];
static uint32_t ring_head, ring_count;

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
  ring[(ring_head + ring_count) % NRES_HOST_HTTP_MAX] = s->pub.id;
  ring_count++;
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
    ring_head = (ring_head + 1) % NRES_HOST_HTTP_MAX;
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

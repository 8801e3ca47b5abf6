/* SPDX-License-Identifier: MIT */
/* http_pool.c - the HTTP client's per-host state: address, keep-alive
 * connection pool, waiters, and the policies derived for the host.
 *
 * Separate from http.c (which speaks HTTP on one connection for one
 * attempt) because this is the part that owns memory: host entries, the
 * derived policies with the host's own breaker and budget, and connection
 * structs, which are allocated as the pool grows and, once closed, kept on
 * the client's free list for the next connection. After warm-up a steady
 * load allocates nothing. Everything here runs on the loop's thread.
 */
#include <string.h>

#include "exec/http_int.h"
#include "core/policy.h"

/* ------------------------------------------------------------------ hosts */

/* A literal address: a.b.c.d, [v6] or localhost, with an optional port. */
static int parse_authority(const char *s, size_t len,
                           struct sockaddr_storage *addr) {
  char host[NRES__HTTP_KEY_MAX];
  const char *colon = NULL, *h = s, *hend;
  size_t i, hlen;
  unsigned port = 80;

  if (len == 0 || len >= NRES__HTTP_KEY_MAX)
    return NRES_EINVAL;
  if (s[0] == '[') {
    hend = memchr(s, ']', len);
    if (hend == NULL)
      return NRES_EINVAL;
    h = s + 1;
    if (hend + 1 < s + len) {
      if (hend[1] != ':')
        return NRES_EINVAL;
      colon = hend + 1;
    }
  } else {
    colon = memchr(s, ':', len);
    hend = colon != NULL ? colon : s + len;
  }
  if (colon != NULL) {
    const char *p = colon + 1;
    if (p == s + len || s + len - p > 5)
      return NRES_EINVAL;
    port = 0;
    for (; p < s + len; p++) {
      if (*p < '0' || *p > '9')
        return NRES_EINVAL;
      port = port * 10 + (unsigned) (*p - '0');
    }
    if (port == 0 || port > 65535)
      return NRES_EINVAL;
  }
  hlen = (size_t) (hend - h);
  if (hlen == 0)
    return NRES_EINVAL;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  for (i = 0; i < hlen; i++)
    if (host[i] >= 'A' && host[i] <= 'Z')
      host[i] = (char) (host[i] - 'A' + 'a');
  memset(addr, 0, sizeof(*addr));
  if (s[0] == '[')
    return uv_ip6_addr(host, (int) port, (struct sockaddr_in6 *) addr) == 0
               ? 0 : NRES_EINVAL;
  if (strcmp(host, "localhost") == 0)
    strcpy(host, "127.0.0.1");
  return uv_ip4_addr(host, (int) port, (struct sockaddr_in *) addr) == 0
             ? 0 : NRES_EINVAL;
}

int nres__http_host(nres_http_client_t *client, const char *authority,
                    size_t len, nres__http_host_t **out) {
  nres__http_host_t *host;
  struct sockaddr_storage addr;
  uint32_t i;
  int rc;

  for (i = 0; i < client->hosts; i++) {
    host = client->host_[i];
    if (host->key_len == len && memcmp(host->key, authority, len) == 0) {
      *out = host;
      return 0;
    }
  }
  if ((rc = parse_authority(authority, len, &addr)) != 0)
    return rc;
  if (client->hosts == NRES_HTTP_MAX_HOSTS)
    return NRES_EFULL;
  host = nres__calloc(1, sizeof(*host));
  if (host == NULL)
    return NRES_ENOMEM;
  memcpy(host->key, authority, len);
  host->key_len = len;
  host->addr = addr;
  nres__list_init(&host->idle);
  nres__list_init(&host->waiters);
  client->host_[client->hosts++] = host;
  *out = host;
  return 0;
}

void nres__http_hosts_free(nres_http_client_t *client) {
  uint32_t i;
  for (i = 0; i < client->hosts; i++) {
    nres__free(client->host_[i]);
    client->host_[i] = NULL;
  }
  client->hosts = 0;
}

/* ------------------------------------------------------ derived policies */

static int same_template(const nres__http_slot_t *slot,
                         const nres_policy_t *tmpl) {
  const unsigned char *t = (const unsigned char *) tmpl;

  if (slot->tmpl != tmpl ||
      memcmp(slot->snap_a, t, NRES__SNAP_A) != 0 ||
      memcmp(slot->snap_b, t + NRES__SNAP_B0, sizeof(slot->snap_b)) != 0)
    return 0;
  /* Same pointers; an own breaker or budget may have a new configuration
   * (a policy rebuilt in place). */
  if (tmpl->breaker == &tmpl->own.breaker &&
      memcmp(&slot->breaker_cfg, &tmpl->own.breaker.config,
             sizeof(slot->breaker_cfg)) != 0)
    return 0;
  if (tmpl->budget == &tmpl->own.budget &&
      (slot->budget_cfg[0] != tmpl->own.budget.deposit ||
       slot->budget_cfg[1] != tmpl->own.budget.capacity ||
       slot->budget_cfg[2] != (int64_t) tmpl->own.budget.refill_per_sec))
    return 0;
  if (tmpl->throttle == &tmpl->own.throttle &&
      (slot->throttle.k != tmpl->own.throttle.k ||
       slot->throttle.window.width != tmpl->own.throttle.window.width ||
       slot->throttle.window.count != tmpl->own.throttle.window.count ||
       slot->throttle.fast_failure != tmpl->own.throttle.fast_failure))
    return 0;
  return 1;
}

/* Copy the template's configuration into `p`, pointing at the slot's own
 * state where the template pointed at its own. */
static void derive(nres__http_slot_t *slot, nres_policy_t *p,
                   const nres_policy_t *tmpl) {
  const nres_window_t *hw = &tmpl->hedge.window;

  memset(p, 0, sizeof(*p));
  memcpy(p, tmpl, NRES__SNAP_A);
  memcpy((char *) p + NRES__SNAP_B0, (const char *) tmpl + NRES__SNAP_B0,
         NRES__SNAP_B1 - NRES__SNAP_B0);
  if (hw->count == 0 || nres_window_init(&p->hedge.window,
                                         nres__mul_sat(hw->width, hw->count),
                                         hw->count) != 0)
    nres_window_init(&p->hedge.window, 10 * NRES_SEC, 10);
  if (tmpl->breaker == &tmpl->own.breaker)
    p->breaker = &slot->breaker;
  if (tmpl->budget == &tmpl->own.budget)
    p->budget = &slot->budget;
  if (tmpl->throttle == &tmpl->own.throttle)
    p->throttle = &slot->throttle;
  if (tmpl->estimator == &tmpl->own.estimator) {
    nres_estimator_init(&p->own.estimator, tmpl->own.estimator.period);
    p->estimator = &p->own.estimator;
  }
}

static int derive_slot(nres__http_slot_t *slot, const nres_policy_t *tmpl) {
  int rc;

  slot->tmpl = NULL;
  if (tmpl->breaker == &tmpl->own.breaker) {
    slot->breaker_cfg = tmpl->own.breaker.config;
    if (nres_breaker_init(&slot->breaker, &slot->breaker_cfg) != 0)
      return NRES_EINVAL;
  }
  if (tmpl->budget == &tmpl->own.budget) {
    const nres_budget_t *b = &tmpl->own.budget;
    slot->budget_cfg[0] = b->deposit;
    slot->budget_cfg[1] = b->capacity;
    slot->budget_cfg[2] = (int64_t) b->refill_per_sec;
    slot->budget.deposit = b->deposit;
    slot->budget.capacity = b->capacity;
    slot->budget.refill_per_sec = b->refill_per_sec;
    nres__store(&slot->budget.tokens, b->capacity);   /* starts full */
    nres__store(&slot->budget.refilled_at, 0);
    nres__store(&slot->budget.spent, 0);
    nres__store(&slot->budget.refused, 0);
  }
  if (tmpl->throttle == &tmpl->own.throttle) {
    const nres_throttle_t *t = &tmpl->own.throttle;
    if (nres_throttle_init(&slot->throttle, t->k,
                           nres__mul_sat(t->window.width, t->window.count),
                           t->window.count) != 0)
      return NRES_EINVAL;
    slot->throttle.fast_failure = t->fast_failure;
  }
  derive(slot, &slot->retry, tmpl);
  if ((rc = nres_policy_build(&slot->retry)) != 0)
    return rc;
  /* The not-idempotent sibling: one attempt, no hedge, same host state and
   * the same latency estimator. */
  derive(slot, &slot->once, tmpl);
  slot->once.attempts = 1;
  slot->once.hedge.max = 0;
  if (slot->retry.estimator == &slot->retry.own.estimator)
    slot->once.estimator = &slot->retry.own.estimator;
  if ((rc = nres_policy_build(&slot->once)) != 0)
    return rc;
  memcpy(slot->snap_a, tmpl, NRES__SNAP_A);
  memcpy(slot->snap_b, (const char *) tmpl + NRES__SNAP_B0,
         sizeof(slot->snap_b));
  slot->tmpl = tmpl;
  return 0;
}

int nres__http_slot(nres__http_host_t *host, const nres_policy_t *tmpl,
                    nres__http_slot_t **out) {
  nres__http_slot_t *pick = NULL;
  unsigned i;
  int rc;

  for (i = 0; i < NRES_HTTP_HOST_POLICIES; i++) {
    nres__http_slot_t *s = &host->slot[i];
    if (s->tmpl != NULL && same_template(s, tmpl)) {
      *out = s;
      return 0;
    }
  }
  /* A new policy (or one changed in place): an unused slot, else the first
   * with nothing in flight (its host state and counters start over). */
  for (i = 0; i < NRES_HTTP_HOST_POLICIES && pick == NULL; i++)
    if (host->slot[i].tmpl == NULL)
      pick = &host->slot[i];
  for (i = 0; i < NRES_HTTP_HOST_POLICIES && pick == NULL; i++)
    if (host->slot[i].inflight == 0)
      pick = &host->slot[i];
  if (pick == NULL)
    return NRES_EFULL;
  if ((rc = derive_slot(pick, tmpl)) != 0)
    return rc;
  *out = pick;
  return 0;
}

/* ----------------------------------------------------------- connections */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  nres__http_conn_t *conn = handle->data;
  (void) suggested;
  buf->base = conn->rbuf;
  buf->len = sizeof(conn->rbuf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  (void) buf;
  nres__http_on_read(stream->data, nread);
}

static void on_connect(uv_connect_t *creq, int status) {
  nres__http_conn_t *conn = creq->handle->data;

  if (conn->state == CONN_CLOSING)
    return;   /* abandoned while connecting; closing already */
  if (status == 0) {
    status = uv_read_start((uv_stream_t *) &conn->tcp, on_alloc, on_read);
    if (status == 0)
      conn->state = CONN_BUSY;
  }
  nres__http_on_connect(conn, status);
}

int nres__http_conn_get(nres_http_client_t *client, nres__http_host_t *host,
                        nres__http_conn_t **out) {
  nres__http_conn_t *conn;
  int rc;

  *out = NULL;
  if (!nres__list_empty(&host->idle)) {
    nres_http_link_t *l = host->idle.next;
    nres__list_remove(l);
    conn = NRES__CONTAINER(l, nres__http_conn_t, link);
    conn->state = CONN_BUSY;
    conn->reused = 1;
    uv_ref((uv_handle_t *) &conn->tcp);
    *out = conn;
    return 0;
  }
  if (host->conns >= client->config.max_conns)
    return 0;   /* wait for one */
  if (!nres__list_empty(&client->free_)) {
    nres_http_link_t *l = client->free_.next;
    nres__list_remove(l);
    conn = NRES__CONTAINER(l, nres__http_conn_t, link);
  } else {
    conn = nres__malloc(sizeof(*conn) + client->config.body_max);
    if (conn == NULL)
      return NRES_ENOMEM;
  }
  memset(conn, 0, offsetof(nres__http_conn_t, ra));
  nres__list_init(&conn->link);
  conn->client = client;
  conn->host = host;
  if ((rc = uv_tcp_init(client->loop, &conn->tcp)) != 0) {
    nres__list_push_front(&client->free_, &conn->link);
    return rc;
  }
  conn->tcp.data = conn;
  conn->state = CONN_CONNECTING;
  host->conns++;
  client->open++;
  client->connects++;
  uv_tcp_nodelay(&conn->tcp, 1);
  rc = uv_tcp_connect(&conn->connect, &conn->tcp,
                      (const struct sockaddr *) &host->addr, on_connect);
  if (rc != 0) {
    nres__http_conn_close(conn);
    return rc;
  }
  *out = conn;
  return 0;
}

void nres__http_conn_put(nres__http_conn_t *conn) {
  conn->state = CONN_IDLE;
  conn->req = NULL;
  conn->token = 0;
  nres__list_push_front(&conn->host->idle, &conn->link);
  /* A pooled connection still reads (to see the server close it) but
   * does not keep the loop alive, as an idle socket of Node's agent. */
  uv_unref((uv_handle_t *) &conn->tcp);
}

static void finish_close(nres_http_client_t *client);

static void on_close(uv_handle_t *handle) {
  nres__http_conn_t *conn = handle->data;
  nres_http_client_t *client = conn->client;

  nres__list_push_front(&client->free_, &conn->link);
  if (--client->closing_ == 0 && client->closed_)
    finish_close(client);
}

void nres__http_conn_close(nres__http_conn_t *conn) {
  nres_http_client_t *client = conn->client;

  if (conn->state == CONN_CLOSING)
    return;
  if (conn->state == CONN_IDLE)
    nres__list_remove(&conn->link);
  conn->state = CONN_CLOSING;
  conn->req = NULL;
  conn->token = 0;
  conn->host->conns--;
  client->open--;
  client->closing_++;
  uv_close((uv_handle_t *) &conn->tcp, on_close);
}

/* ----------------------------------------------------------------- client */

void nres_http_config_init(nres_http_config_t *config) {
  config->max_conns = 64;
  config->body_max = 4096;
  config->head_max = 16 * 1024;
}

int nres_http_client_init(uv_loop_t *loop, nres_http_client_t *client,
                          const nres_http_config_t *config) {
  nres_http_config_t c;

  if (loop == NULL || client == NULL)
    return NRES_EINVAL;
  if (config == NULL)
    nres_http_config_init(&c);
  else
    c = *config;
  if (c.max_conns < 1 || c.max_conns > 65536 || c.body_max > (64u << 20) ||
      c.head_max < 256 || c.head_max > (1u << 20))
    return NRES_EINVAL;
  memset(client, 0, sizeof(*client));
  client->loop = loop;
  client->config = c;
  nres__list_init(&client->free_);
  uv_timer_init(loop, &client->timer_);
  client->timer_.data = client;
  return 0;
}

static void finish_close(nres_http_client_t *client) {
  nres_http_close_cb cb = client->close_cb_;

  while (!nres__list_empty(&client->free_)) {
    nres_http_link_t *l = client->free_.next;
    nres__list_remove(l);
    nres__free(NRES__CONTAINER(l, nres__http_conn_t, link));
  }
  nres__http_hosts_free(client);
  if (cb != NULL)
    cb(client);
}

static void on_timer_close(uv_handle_t *handle) {
  nres_http_client_t *client = handle->data;
  if (--client->closing_ == 0)
    finish_close(client);
}

int nres_http_client_close(nres_http_client_t *client,
                           nres_http_close_cb close_cb) {
  uint32_t i;

  if (client == NULL || client->loop == NULL)
    return NRES_EINVAL;
  if (client->closed_)
    return NRES_ESTATE;
  if (client->running_ != 0)
    return NRES_EBUSY;
  client->closed_ = 1;
  client->close_cb_ = close_cb;
  for (i = 0; i < client->hosts; i++) {
    nres__http_host_t *host = client->host_[i];
    while (!nres__list_empty(&host->idle))
      nres__http_conn_close(
          NRES__CONTAINER(host->idle.next, nres__http_conn_t, link));
  }
  client->closing_++;
  uv_close((uv_handle_t *) &client->timer_, on_timer_close);
  return 0;
}

static void add_counters(nres_counters_t *sum, const nres_policy_t *p) {
  nres_counters_t c;
  int i;

  nres_policy_counters(p, &c);
  sum->calls += c.calls;
  sum->attempts += c.attempts;
  sum->retries += c.retries;
  sum->hedges += c.hedges;
  sum->abandoned += c.abandoned;
  sum->fallbacks += c.fallbacks;
  sum->late += c.late;
  for (i = 0; i < NRES_VERDICT_COUNT; i++)
    sum->verdicts[i] += c.verdicts[i];
  for (i = 0; i < NRES_STOP_COUNT; i++)
    sum->stops[i] += c.stops[i];
  for (i = 0; i < NRES_REJECT_COUNT; i++)
    sum->rejects[i] += c.rejects[i];
}

void nres_http_client_counters(const nres_http_client_t *client,
                               nres_counters_t *out) {
  uint32_t i, j;

  memset(out, 0, sizeof(*out));
  for (i = 0; i < client->hosts; i++) {
    const nres__http_host_t *host = client->host_[i];
    for (j = 0; j < NRES_HTTP_HOST_POLICIES; j++) {
      if (host->slot[j].tmpl == NULL)
        continue;
      add_counters(out, &host->slot[j].retry);
      add_counters(out, &host->slot[j].once);
    }
  }
}

size_t nres_http_client_size(void) { return sizeof(nres_http_client_t); }
size_t nres_http_req_size(void) { return sizeof(nres_http_req_t); }

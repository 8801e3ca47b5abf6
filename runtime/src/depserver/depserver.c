/* SPDX-License-Identifier: MIT */
/* depserver.c - the dependency server: HTTP/1.1 keep-alive on libuv with
 * http-parser, and endpoints that fail, stall and throttle on request.
 *
 * It is what the http cells and the client's tests call: a dependency
 * whose faults are chosen by the caller, so a run can be reproduced. It is
 * a separate process in the stress suite (its allocations must not mix
 * with the client's), and one job apart from the client because it is the
 * other side of the wire: it must survive anything a client sends.
 *
 * Memory is bounded: a fixed table of max_conns connections, each with a
 * fixed read and write buffer, allocated once; beyond max_conns new
 * connections wait in the kernel's backlog. Garbage gets a 400 (431 for an
 * oversized head, 414 for a long URL, 413 for a large body) and a close;
 * a client that stalls is closed after idle_ms; a reset just closes. One
 * request per connection is handled at a time: pipelined requests stay
 * buffered (the parser paused) and reading stops until the answer is out.
 *
 * Hostile clients cannot hold a slot for ever. A request head must arrive
 * whole within head_ms of its first byte, however steadily it trickles (the
 * idle timer alone is re-armed by every byte: slowloris). A connection's
 * unread output is bounded: the kernel holds out_max bytes of it (the
 * socket's send buffer, fixed rather than autotuned up to megabytes), libuv
 * one answer more (at most WBUF bytes queued: one answer at a time); while
 * that answer is queued nothing more is read (back-pressure), and a peer
 * that does not take it within write_ms (one that pipelines and never
 * reads) is closed.
 *
 * http-parser (Debian's libhttp-parser-dev, 2.9) rather than llhttp: llhttp
 * is not packaged in Debian 12, and http-parser is its predecessor with the
 * same callback model, maintained in Debian with security fixes.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <http_parser.h>

#include "depserver.h"

#define URL_MAX 1024
#define RBUF 4096
#define WBUF 2048

enum { EP_ECHO, EP_FLAKY, EP_SLOW, EP_THROTTLE, EP_OUTAGE, EP_TRUNCATE,
       EP_STATUS, EP_OTHER, EP_COUNT };
static const char *const ep_name[EP_COUNT] = {
  "echo", "flaky", "slow", "throttle", "outage", "truncate", "status",
  "other" };

typedef struct conn_s {
  uv_tcp_t tcp;
  uv_timer_t timer;          /* idle timeout, or a /slow answer's delay */
  uv_write_t write;
  http_parser parser;
  struct nres_depserver_s *srv;
  int in_use;
  int handles;               /* handles still open (close in progress) */
  int shut;                  /* conn_close ran */
  int busy;                  /* a request is being answered */
  int close_after;           /* close once the answer is written */
  int reset_after;           /* reset (RST) once the answer is written */
  int done;                  /* on_message_complete ran */
  int keep_alive;
  int head_error;            /* status to answer a head over a limit */
  int in_head;               /* a request head is arriving (head_at) */
  int head_done;             /* its headers are complete */
  uint64_t head_at;          /* uv_now of the head's first byte */
  uint32_t head_bytes;
  uint64_t body_bytes;
  size_t url_len;
  size_t rlen, roff;         /* buffered bytes, and how far parsed */
  size_t wlen;
  int has_deadline;          /* an X-Deadline-Ms value is being read */
  uint64_t deadline_ms;      /* its value, once the head is complete */
  size_t deadline_len;
  char deadline[24];         /* its raw bytes; longer ones are invalid */
  int field_is_deadline;     /* 1 + chars of "x-deadline-ms" matched */
  int in_value;
  char url[URL_MAX];
  char rbuf[RBUF];
  char wbuf[WBUF];
} conn_t;

struct nres_depserver_s {
  uv_loop_t *loop;
  nres_depserver_config_t config;
  uv_tcp_t listener;
  uv_async_t wake;
  uv_signal_t sigterm, sigint;
  union { uv_pipe_t pipe; uv_tty_t tty; } in;
  int in_watched;
  int stopping;
  int sink;                  /* parse_for_test: answers are counted, not
                                written */
  uint32_t sink_answers;
  int sink_written;          /* an answer waits for its on_written */
  int pending_accept;        /* a connection waits for a free slot */
  int port;
  conn_t *conns;
  uint32_t *free_list;
  uint32_t free_count;
  uint64_t rng;
  /* counters (reset by /reset) */
  uint64_t requests, by_ep[EP_COUNT], failures_flaky, failures_outage;
  uint64_t bad_requests, accepted, closed, idle_timeouts, deadline_headers;
  uint64_t head_timeouts, write_timeouts;
  uint64_t flaky_counter;
  uint64_t last_deadline;    /* ms; valid if has_last_deadline */
  int has_last_deadline;
  uint64_t outage_until;     /* uv_now ms; 0 = none */
  uint32_t open;
};

static const http_parser_settings settings;

/* --------------------------------------------------------------- helpers */

static uint64_t rng_next(uint64_t *s) {   /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) {
  return (double) (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* The value of `name` in a query string, %-decoded ('+' is a space), into
 * out (NUL-terminated). 1 found, 0 absent, -1 malformed or too long. */
static int query_param(const char *q, const char *name, char *out,
                       size_t cap) {
  size_t nlen = strlen(name);

  while (q != NULL && *q != '\0') {
    const char *end = strchr(q, '&');
    size_t len = end != NULL ? (size_t) (end - q) : strlen(q);
    if (len > nlen && strncmp(q, name, nlen) == 0 && q[nlen] == '=') {
      size_t i, o = 0;
      for (i = nlen + 1; i < len; i++) {
        char c = q[i];
        if (c == '+') {
          c = ' ';
        } else if (c == '%') {
          char hex[3];
          char *e;
          if (i + 2 >= len || !isxdigit((unsigned char) q[i + 1]) ||
              !isxdigit((unsigned char) q[i + 2]))
            return -1;
          hex[0] = q[i + 1];
          hex[1] = q[i + 2];
          hex[2] = '\0';
          c = (char) strtol(hex, &e, 16);
          i += 2;
        }
        if (o + 1 >= cap)
          return -1;
        out[o++] = c;
      }
      out[o] = '\0';
      return 1;
    }
    q = end != NULL ? end + 1 : NULL;
  }
  return 0;
}

/* A finite number in [lo, hi]. 1 ok, 0 absent (value unchanged), -1 bad. */
static int num_param(const char *q, const char *name, double lo, double hi,
                     double *value) {
  char buf[32];
  char *end;
  double v;
  int rc = query_param(q, name, buf, sizeof(buf));

  if (rc <= 0)
    return rc;
  errno = 0;
  v = strtod(buf, &end);
  if (end == buf || *end != '\0' || errno != 0 || !isfinite(v) || v < lo ||
      v > hi)
    return -1;
  *value = v;
  return 1;
}

static void http_date(char *out, size_t cap, time_t t) {
  static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri",
                                   "Sat" };
  static const char mons[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
  struct tm tm;
  gmtime_r(&t, &tm);
  snprintf(out, cap, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
           tm.tm_mday, mons[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
           tm.tm_min, tm.tm_sec);
}

static const char *reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

/* --------------------------------------------------------- connections */

static void conn_close(conn_t *c);
static void process(conn_t *c);
static void accept_one(nres_depserver_t *srv);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_idle(uv_timer_t *t) {
  conn_t *c = t->data;
  c->srv->idle_timeouts++;
  conn_close(c);
}

static void on_head_timeout(uv_timer_t *t) {
  conn_t *c = t->data;
  c->srv->head_timeouts++;
  conn_close(c);   /* no answer: a slowloris client would not read it */
}

static void on_write_timeout(uv_timer_t *t) {
  conn_t *c = t->data;
  c->srv->write_timeouts++;
  conn_close(c);
}

/* While reading: idle_ms from now, or less if the head in progress would
 * overrun its deadline first. */
static void arm_idle(conn_t *c) {
  uint64_t ms = c->srv->config.idle_ms;
  uv_timer_cb cb = on_idle;

  if (c->in_head && !c->head_done) {
    uint64_t now = uv_now(c->srv->loop);
    uint64_t end = c->head_at + c->srv->config.head_ms;
    uint64_t left = end > now ? end - now : 0;
    if (left <= ms) {
      ms = left;
      cb = on_head_timeout;
    }
  }
  uv_timer_start(&c->timer, cb, ms, 0);
}

/* Bytes arrived for a request not yet begun: its head deadline starts. */
static void head_begins(conn_t *c) {
  if (!c->in_head && !c->head_done && c->rlen > 0) {
    c->in_head = 1;
    c->head_at = uv_now(c->srv->loop);
  }
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  nres_depserver_t *srv = c->srv;

  if (--c->handles > 0)
    return;
  c->in_use = 0;
  srv->free_list[srv->free_count++] = (uint32_t) (c - srv->conns);
  if (srv->pending_accept && !srv->stopping) {
    srv->pending_accept = 0;
    /* libuv stopped watching the listener until this one is accepted */
    accept_one(srv);
  }
}

static void conn_close(conn_t *c) {
  if (c->shut || !c->in_use)
    return;   /* closing already */
  c->shut = 1;
  c->srv->open--;
  c->srv->closed++;
  uv_close((uv_handle_t *) &c->timer, on_conn_closed);
  /* A reset fails on a socket already gone (or none: parse_for_test) */
  if (!c->reset_after || uv_tcp_close_reset(&c->tcp, on_conn_closed) != 0)
    uv_close((uv_handle_t *) &c->tcp, on_conn_closed);
}

static int closing(const conn_t *c) {
  return c->shut;
}

static void on_written(uv_write_t *w, int status) {
  conn_t *c = w->data;

  if (closing(c))
    return;
  if (status != 0 || c->close_after || c->reset_after) {
    conn_close(c);
    return;
  }
  uv_timer_stop(&c->timer);   /* the write deadline */
  c->busy = 0;
  c->done = 0;
  c->in_head = 0;
  c->head_done = 0;
  http_parser_pause(&c->parser, 0);
  head_begins(c);   /* pipelined bytes: the next head started with them */
  process(c);       /* a pipelined request may be waiting */
  if (!c->busy && !closing(c)) {
    if (!c->srv->sink)
      uv_read_start((uv_stream_t *) &c->tcp, on_alloc, on_read);
    arm_idle(c);
  }
}

/* Write the answer in wbuf. Reading is stopped until it is written (the
 * output bound); the peer has write_ms to take it. */
static void send_buf(conn_t *c) {
  uv_buf_t b = uv_buf_init(c->wbuf, (unsigned) c->wlen);
  c->write.data = c;
  if (c->srv->sink) {   /* parse_for_test: no socket */
    c->srv->sink_answers++;
    c->srv->sink_written = 1;
    return;
  }
  uv_timer_start(&c->timer, on_write_timeout, c->srv->config.write_ms, 0);
  if (uv_write(&c->write, (uv_stream_t *) &c->tcp, &b, 1, on_written) != 0)
    conn_close(c);
}

/* Format an answer into wbuf. extra: header lines ("K: V\r\n") or "". */
static void respond(conn_t *c, int status, const char *extra,
                    const char *body) {
  size_t blen = strlen(body);
  int n;

  if (!c->keep_alive)
    c->close_after = 1;
  n = snprintf(c->wbuf, sizeof(c->wbuf),
               "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
               "Content-Length: %zu\r\n%s%s\r\n%s",
               status, reason(status), blen, extra,
               c->close_after ? "Connection: close\r\n" : "", body);
  if (n < 0 || (size_t) n >= sizeof(c->wbuf)) {   /* cannot happen: bodies
                                                     are short */
    c->close_after = 1;
    n = snprintf(c->wbuf, sizeof(c->wbuf),
                 "HTTP/1.1 500 Error\r\nContent-Length: 0\r\n"
                 "Connection: close\r\n\r\n");
  }
  c->wlen = (size_t) n;
  send_buf(c);
}

static void bad_request(conn_t *c, int status, const char *why) {
  char body[160];
  c->srv->bad_requests++;
  c->close_after = 1;
  c->keep_alive = 0;
  c->busy = 1;
  uv_read_stop((uv_stream_t *) &c->tcp);
  uv_timer_stop(&c->timer);
  snprintf(body, sizeof(body), "%s\n", why);
  respond(c, status, "", body);
}

static void on_slow_done(uv_timer_t *t) {
  conn_t *c = t->data;
  char extra[48] = "";
  if (c->has_deadline)
    snprintf(extra, sizeof(extra), "X-Deadline-Ms-Seen: %llu\r\n",
             (unsigned long long) c->deadline_ms);
  respond(c, 200, extra, "slow\n");
}

static void stats_json(nres_depserver_t *srv, char *out, size_t cap) {
  uint64_t now = uv_now(srv->loop);
  size_t o = 0;
  char last[24] = "null";
  int i;

  if (srv->has_last_deadline)
    snprintf(last, sizeof(last), "%llu",
             (unsigned long long) srv->last_deadline);

  o += (size_t) snprintf(out + o, cap - o, "{\"requests\":%llu,\"by_endpoint\":{",
                         (unsigned long long) srv->requests);
  for (i = 0; i < EP_COUNT; i++)
    o += (size_t) snprintf(out + o, cap - o, "%s\"%s\":%llu", i ? "," : "",
                           ep_name[i], (unsigned long long) srv->by_ep[i]);
  snprintf(out + o, cap - o,
           "},\"failures\":{\"flaky\":%llu,\"outage\":%llu},"
           "\"flaky_counter\":%llu,\"bad_requests\":%llu,"
           "\"connections\":{\"open\":%u,\"accepted\":%llu,\"closed\":%llu,"
           "\"idle_timeouts\":%llu,\"head_timeouts\":%llu,"
           "\"write_timeouts\":%llu,\"max\":%u},"
           "\"deadline_headers\":%llu,\"last_deadline_ms\":%s,"
           "\"outage_left_ms\":%llu}\n",
           (unsigned long long) srv->failures_flaky,
           (unsigned long long) srv->failures_outage,
           (unsigned long long) srv->flaky_counter,
           (unsigned long long) srv->bad_requests, srv->open,
           (unsigned long long) srv->accepted,
           (unsigned long long) srv->closed,
           (unsigned long long) srv->idle_timeouts,
           (unsigned long long) srv->head_timeouts,
           (unsigned long long) srv->write_timeouts, srv->config.max_conns,
           (unsigned long long) srv->deadline_headers, last,
           (unsigned long long) (srv->outage_until > now
                                     ? srv->outage_until - now : 0));
}

static void reset_counters(nres_depserver_t *srv) {
  srv->requests = 0;
  memset(srv->by_ep, 0, sizeof(srv->by_ep));
  srv->failures_flaky = srv->failures_outage = 0;
  srv->bad_requests = srv->accepted = srv->closed = 0;
  srv->idle_timeouts = srv->deadline_headers = 0;
  srv->head_timeouts = srv->write_timeouts = 0;
  srv->flaky_counter = 0;
  srv->has_last_deadline = 0;
  srv->last_deadline = 0;
  srv->outage_until = 0;
}

/* Answer the request parsed into c (url, keep_alive, deadline). */
static void handle(conn_t *c) {
  nres_depserver_t *srv = c->srv;
  char path[URL_MAX], body[WBUF - 256], extra[160], buf[96];
  const char *q;
  uint64_t now = uv_now(srv->loop);
  int ep;

  c->busy = 1;
  uv_read_stop((uv_stream_t *) &c->tcp);
  uv_timer_stop(&c->timer);
  memcpy(path, c->url, c->url_len);
  path[c->url_len] = '\0';
  q = NULL;
  {
    char *qm = strchr(path, '?');
    if (qm != NULL) {
      *qm = '\0';
      q = qm + 1;
    }
  }
  extra[0] = '\0';

  if (strcmp(path, "/stats") == 0) {
    stats_json(srv, body, sizeof(body));
    respond(c, 200, "", body);
    return;
  }
  if (strcmp(path, "/reset") == 0) {
    reset_counters(srv);
    respond(c, 200, "", "reset\n");
    return;
  }

  if (strcmp(path, "/echo") == 0) ep = EP_ECHO;
  else if (strcmp(path, "/flaky") == 0) ep = EP_FLAKY;
  else if (strcmp(path, "/slow") == 0) ep = EP_SLOW;
  else if (strcmp(path, "/throttle") == 0) ep = EP_THROTTLE;
  else if (strcmp(path, "/outage") == 0) ep = EP_OUTAGE;
  else if (strcmp(path, "/truncate") == 0) ep = EP_TRUNCATE;
  else if (strcmp(path, "/status") == 0) ep = EP_STATUS;
  else ep = EP_OTHER;
  srv->requests++;
  srv->by_ep[ep]++;
  if (c->has_deadline) {
    srv->deadline_headers++;
    srv->last_deadline = c->deadline_ms;
    srv->has_last_deadline = 1;
    snprintf(extra, sizeof(extra), "X-Deadline-Ms-Seen: %llu\r\n",
             (unsigned long long) c->deadline_ms);
  }

  if (ep != EP_OUTAGE && srv->outage_until > now) {
    srv->failures_outage++;
    respond(c, 503, extra, "outage\n");
    return;
  }

  switch (ep) {
    case EP_ECHO:
      respond(c, 200, extra, "ok\n");
      return;
    case EP_FLAKY: {
      double n = srv->config.flaky_every;
      if (num_param(q, "n", 1, 1e9, &n) < 0 || n != floor(n)) {
        bad_request(c, 400, "bad parameter n: expected an integer 1..1e9");
        return;
      }
      srv->flaky_counter++;
      if (srv->flaky_counter % (uint64_t) n == 0) {
        srv->failures_flaky++;
        respond(c, 503, extra, "flaky\n");
      } else {
        respond(c, 200, extra, "ok\n");
      }
      return;
    }
    case EP_SLOW: {
      double ms = 100, lo = 0, hi = 100, median = 50, sigma = 0.5;
      char dist[16] = "fixed";
      if (query_param(q, "dist", dist, sizeof(dist)) < 0 ||
          num_param(q, "ms", 0, 60000, &ms) < 0 ||
          num_param(q, "min", 0, 60000, &lo) < 0 ||
          num_param(q, "max", 0, 60000, &hi) < 0 ||
          num_param(q, "median", 0, 60000, &median) < 0 ||
          num_param(q, "sigma", 0, 10, &sigma) < 0 || hi < lo) {
        bad_request(c, 400, "bad /slow parameter: ms, min<=max, median in "
                            "0..60000 ms, sigma in 0..10");
        return;
      }
      if (strcmp(dist, "uniform") == 0) {
        ms = lo + (hi - lo) * rng_unit(&srv->rng);
      } else if (strcmp(dist, "lognormal") == 0) {
        double u1 = rng_unit(&srv->rng), u2 = rng_unit(&srv->rng);
        double z = sqrt(-2 * log(1 - u1)) * cos(2 * M_PI * u2);
        ms = median * exp(sigma * z);
        if (ms > 60000)
          ms = 60000;
      } else if (strcmp(dist, "fixed") != 0) {
        bad_request(c, 400, "bad parameter dist: fixed, uniform or lognormal");
        return;
      }
      uv_timer_start(&c->timer, on_slow_done, (uint64_t) llround(ms), 0);
      return;
    }
    case EP_THROTTLE: {
      double after = 1, status = 429;
      char form[16] = "seconds", raw[64];
      int has_raw = query_param(q, "ra", raw, sizeof(raw));
      size_t i, o = strlen(extra);
      if (num_param(q, "after", 0, 1e9, &after) < 0 ||
          num_param(q, "status", 429, 503, &status) < 0 ||
          (status != 429 && status != 503) || has_raw < 0 ||
          query_param(q, "form", form, sizeof(form)) < 0 ||
          (strcmp(form, "seconds") != 0 && strcmp(form, "date") != 0)) {
        bad_request(c, 400, "bad /throttle parameter: after >= 0 s, "
                            "status 429|503, form seconds|date, ra <= 63");
        return;
      }
      if (has_raw) {
        for (i = 0; raw[i] != '\0'; i++)
          if ((unsigned char) raw[i] < 0x20 || raw[i] == 0x7f) {
            bad_request(c, 400, "bad parameter ra: control characters");
            return;
          }
        snprintf(extra + o, sizeof(extra) - o, "Retry-After: %s\r\n", raw);
      } else if (strcmp(form, "date") == 0) {
        http_date(buf, sizeof(buf), time(NULL) + (time_t) ceil(after));
        snprintf(extra + o, sizeof(extra) - o, "Retry-After: %s\r\n", buf);
      } else {
        snprintf(extra + o, sizeof(extra) - o, "Retry-After: %.0f\r\n",
                 ceil(after));
      }
      respond(c, (int) status, extra, "throttled\n");
      return;
    }
    case EP_OUTAGE: {
      double secs = 1;
      if (num_param(q, "for", 0, 3600, &secs) < 0) {
        bad_request(c, 400, "bad parameter for: seconds in 0..3600");
        return;
      }
      srv->outage_until = secs > 0 ? now + (uint64_t) llround(secs * 1000) : 0;
      snprintf(body, sizeof(body), "outage %llu ms\n",
               (unsigned long long) llround(secs * 1000));
      respond(c, 200, "", body);
      return;
    }
    case EP_TRUNCATE:
      /* Promise 100 bytes, send 10, then reset the connection. */
      c->reset_after = 1;
      c->wlen = (size_t) snprintf(c->wbuf, sizeof(c->wbuf),
                                  "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
                                  "\r\n0123456789");
      send_buf(c);
      return;
    case EP_STATUS: {
      double code = 200;
      if (num_param(q, "code", 200, 999, &code) < 0 || code != floor(code)) {
        bad_request(c, 400, "bad parameter code: an integer 200..999");
        return;
      }
      respond(c, (int) code, extra, "");   /* no body: 204 and 304 have none */
      return;
    }
    default:
      respond(c, 404, extra, "not found\n");
      return;
  }
}

/* Parse what is buffered; answer a complete request or a parse error. */
static void process(conn_t *c) {
  while (!c->busy && !closing(c) && c->roff < c->rlen) {
    size_t n = http_parser_execute(&c->parser, &settings, c->rbuf + c->roff,
                                   c->rlen - c->roff);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    c->roff += n;
    if (c->done) {
      handle(c);
      break;
    }
    if (e != HPE_OK) {
      if (c->head_error)
        bad_request(c, c->head_error,
                    c->head_error == 431 ? "request head too large"
                    : c->head_error == 414 ? "URL too long"
                                            : "request body too large");
      else
        bad_request(c, 400, http_errno_description(e));
      return;
    }
  }
  if (c->roff == c->rlen) {
    c->roff = c->rlen = 0;
  } else if (c->roff > 0) {
    memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
    c->rlen -= c->roff;
    c->roff = 0;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  (void) suggested;
  buf->base = c->rbuf + c->rlen;
  buf->len = sizeof(c->rbuf) - c->rlen;   /* 0: ENOBUFS, closed below */
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  (void) buf;

  if (nread < 0) {
    conn_close(c);   /* EOF, reset, ENOBUFS */
    return;
  }
  if (nread == 0)
    return;
  c->rlen += (size_t) nread;
  head_begins(c);
  process(c);
  if (!c->busy && !closing(c))
    arm_idle(c);   /* after process: the head may have completed */
}

/* -------------------------------------------------------------- parsing */

static int head_add(conn_t *c, size_t len, int status) {
  c->head_bytes += (uint32_t) len;
  if (c->head_bytes > c->srv->config.head_max) {
    c->head_error = status;
    return 1;
  }
  return 0;
}

static int on_message_begin(http_parser *p) {
  conn_t *c = p->data;
  c->url_len = 0;
  c->head_bytes = 0;
  c->body_bytes = 0;
  c->has_deadline = 0;
  c->field_is_deadline = 0;
  c->in_value = 1;
  c->head_error = 0;
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
  conn_t *c = p->data;
  if (head_add(c, len, 431))
    return 1;
  if (c->url_len + len >= URL_MAX) {
    c->head_error = 414;
    return 1;
  }
  memcpy(c->url + c->url_len, at, len);
  c->url_len += len;
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  static const char name[] = "x-deadline-ms";
  conn_t *c = p->data;
  size_t i, have;

  if (head_add(c, len, 431))
    return 1;
  if (c->in_value) {
    c->in_value = 0;
    c->field_is_deadline = 1;
  }
  if (c->field_is_deadline == 0)
    return 0;
  have = (size_t) c->field_is_deadline - 1;
  if (have + len > sizeof(name) - 1) {
    c->field_is_deadline = 0;
    return 0;
  }
  for (i = 0; i < len; i++) {
    char ch = at[i];
    if (ch >= 'A' && ch <= 'Z')
      ch = (char) (ch - 'A' + 'a');
    if (ch != name[have + i]) {
      c->field_is_deadline = 0;
      return 0;
    }
  }
  c->field_is_deadline += (int) len;
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  conn_t *c = p->data;
  size_t i;

  if (head_add(c, len, 431))
    return 1;
  if (!c->in_value) {
    c->in_value = 1;
    if (c->field_is_deadline == 14) {   /* the last one counts */
      c->has_deadline = 1;
      c->deadline_len = 0;
    }
  }
  if (c->field_is_deadline == 14) {
    for (i = 0; i < len; i++) {
      if (c->deadline_len >= sizeof(c->deadline)) {
        c->deadline_len = sizeof(c->deadline) + 1;   /* too long: invalid */
        break;
      }
      c->deadline[c->deadline_len++] = at[i];
    }
  }
  return 0;
}

/* The largest deadline taken: a JSON number any reader holds exactly. */
#define DEADLINE_MAX 9007199254740991ull   /* 2^53 - 1 */

/* An X-Deadline-Ms value: decimal digits (leading zeros allowed), blanks
 * around them, at most DEADLINE_MAX. 0 and *out set, or -1. It is echoed
 * in a header and in /stats' JSON, so anything else is ignored. */
static int deadline_parse(const char *s, size_t len, uint64_t *out) {
  size_t i = 0;
  uint64_t v = 0;

  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
    len--;
  while (i < len && (s[i] == ' ' || s[i] == '\t'))
    i++;
  if (i == len)
    return -1;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (uint64_t) (s[i] - '0');
    if (v > DEADLINE_MAX)
      return -1;
  }
  *out = v;
  return 0;
}

static int on_headers_complete(http_parser *p) {
  conn_t *c = p->data;
  c->keep_alive = http_should_keep_alive(p);
  c->head_done = 1;
  if (c->has_deadline &&
      (c->deadline_len > sizeof(c->deadline) ||
       deadline_parse(c->deadline, c->deadline_len, &c->deadline_ms) != 0))
    c->has_deadline = 0;
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  conn_t *c = p->data;
  (void) at;
  c->body_bytes += len;
  if (c->body_bytes > c->srv->config.body_max) {
    c->head_error = 413;
    return 1;
  }
  return 0;
}

static int on_message_complete(http_parser *p) {
  conn_t *c = p->data;
  c->keep_alive = http_should_keep_alive(p);
  c->done = 1;
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings settings = {
  .on_message_begin = on_message_begin,
  .on_url = on_url,
  .on_header_field = on_header_field,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

/* --------------------------------------------------------------- server */

/* Take a free slot (the caller checked there is one) and set it up. */
static conn_t *conn_open(nres_depserver_t *srv) {
  conn_t *c = &srv->conns[srv->free_list[--srv->free_count]];

  memset(c, 0, offsetof(conn_t, url));
  c->srv = srv;
  c->in_use = 1;
  uv_tcp_init(srv->loop, &c->tcp);
  uv_timer_init(srv->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->handles = 2;
  srv->open++;
  srv->accepted++;
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->in_value = 1;
  return c;
}

static void accept_one(nres_depserver_t *srv) {
  conn_t *c;

  if (srv->free_count == 0) {
    srv->pending_accept = 1;   /* libuv waits until we accept */
    return;
  }
  c = conn_open(srv);
  if (uv_accept((uv_stream_t *) &srv->listener, (uv_stream_t *) &c->tcp) != 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  {
    int size = (int) srv->config.out_max;
    uv_send_buffer_size((uv_handle_t *) &c->tcp, &size);
  }
  uv_read_start((uv_stream_t *) &c->tcp, on_alloc, on_read);
  arm_idle(c);
}

static void on_connection(uv_stream_t *listener, int status) {
  nres_depserver_t *srv = listener->data;
  if (status != 0 || srv->stopping)
    return;
  accept_one(srv);
}

void nres_depserver_config_init(nres_depserver_config_t *config) {
  memset(config, 0, sizeof(*config));
  config->flaky_every = 4;
  config->max_conns = 256;
  config->idle_ms = 10000;
  config->head_ms = 10000;
  config->write_ms = 10000;
  config->out_max = 64 * 1024;
  config->head_max = 8192;
  config->body_max = 1u << 20;
  config->seed = 0x6e726573;
}

static void on_wake(uv_async_t *a) {
  nres_depserver_stop(a->data);
}

int nres_depserver_new(uv_loop_t *loop, const nres_depserver_config_t *config,
                       nres_depserver_t **out) {
  nres_depserver_t *srv;
  struct sockaddr_in addr;
  struct sockaddr_storage name;
  int namelen = sizeof(name), rc;
  uint32_t i;

  if (loop == NULL || config == NULL || out == NULL ||
      config->port < 0 || config->port > 65535 || config->flaky_every < 1 ||
      config->max_conns < 1 || config->max_conns > 65536 ||
      config->idle_ms < 1 || config->head_ms < 1 || config->write_ms < 1 ||
      config->out_max < 4096 || config->out_max > (64u << 20) ||
      config->head_max < 64)
    return UV_EINVAL;
  srv = calloc(1, sizeof(*srv));
  if (srv == NULL)
    return UV_ENOMEM;
  srv->conns = calloc(config->max_conns, sizeof(conn_t));
  srv->free_list = calloc(config->max_conns, sizeof(uint32_t));
  if (srv->conns == NULL || srv->free_list == NULL) {
    free(srv->conns);
    free(srv->free_list);
    free(srv);
    return UV_ENOMEM;
  }
  for (i = 0; i < config->max_conns; i++)
    srv->free_list[i] = config->max_conns - 1 - i;
  srv->free_count = config->max_conns;
  srv->loop = loop;
  srv->config = *config;
  srv->rng = config->seed;

  uv_tcp_init(loop, &srv->listener);
  srv->listener.data = srv;
  uv_ip4_addr("127.0.0.1", config->port, &addr);
  rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *) &addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *) &srv->listener, 511, on_connection);
  if (rc == 0)
    rc = uv_tcp_getsockname(&srv->listener, (struct sockaddr *) &name,
                            &namelen);
  uv_async_init(loop, &srv->wake, on_wake);
  srv->wake.data = srv;
  if (rc != 0) {
    nres_depserver_stop(srv);
    uv_run(loop, UV_RUN_DEFAULT);   /* let the handles close */
    nres_depserver_free(srv);
    return rc;
  }
  srv->port = ntohs(((struct sockaddr_in *) &name)->sin_port);
  *out = srv;
  return 0;
}

int nres_depserver_port(const nres_depserver_t *server) {
  return server->port;
}

void nres_depserver_stop(nres_depserver_t *srv) {
  uint32_t i;

  if (srv->stopping)
    return;
  srv->stopping = 1;
  uv_close((uv_handle_t *) &srv->listener, NULL);
  uv_close((uv_handle_t *) &srv->wake, NULL);
  if (srv->sigterm.loop != NULL) {   /* the command's signal handlers */
    uv_close((uv_handle_t *) &srv->sigterm, NULL);
    uv_close((uv_handle_t *) &srv->sigint, NULL);
  }
  if (srv->in_watched)
    uv_close((uv_handle_t *) &srv->in, NULL);
  for (i = 0; i < srv->config.max_conns; i++)
    if (srv->conns[i].in_use)
      conn_close(&srv->conns[i]);
}

void nres_depserver_stop_async(nres_depserver_t *srv) {
  uv_async_send(&srv->wake);
}

void nres_depserver_free(nres_depserver_t *srv) {
  if (srv == NULL)
    return;
  free(srv->conns);
  free(srv->free_list);
  free(srv);
}

/* ---------------------------------------------------- parse without I/O */

/* One connection of a server with no listener on a private loop, fed as
 * reads would feed it (at most RBUF bytes buffered), answers counted in
 * place of writes. The loop and server are made on the first call and
 * kept: a fuzzer calls this millions of times. */
int nres_depserver_parse_for_test(const char *buf, size_t len) {
  static uv_loop_t loop;
  static nres_depserver_t *srv;
  conn_t *c;
  size_t off = 0;
  int answers;

  if (srv == NULL) {
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL || uv_loop_init(&loop) != 0) {
      free(srv);
      srv = NULL;
      return -1;
    }
    nres_depserver_config_init(&srv->config);
    srv->config.max_conns = 1;
    srv->config.body_max = 64 * 1024;
    srv->conns = calloc(1, sizeof(conn_t));
    srv->free_list = calloc(1, sizeof(uint32_t));
    if (srv->conns == NULL || srv->free_list == NULL)
      abort();
    srv->free_count = 1;
    srv->loop = &loop;
    srv->sink = 1;
    srv->stopping = 1;   /* no accepts: there is no listener */
  }
  if (buf == NULL && len > 0)
    return -1;
  srv->rng = srv->config.seed;
  srv->sink_answers = 0;
  c = conn_open(srv);
  while (!closing(c) && (off < len || srv->sink_written)) {
    if (srv->sink_written) {   /* the answer is "written": go on */
      srv->sink_written = 0;
      on_written(&c->write, 0);
      continue;
    }
    if (c->busy)
      break;   /* a /slow answer waits for its timer: never here */
    {
      size_t room = sizeof(c->rbuf) - c->rlen;
      size_t n = len - off < room ? len - off : room;
      if (n == 0)
        break;   /* a full buffer: the server closes (ENOBUFS) */
      memcpy(c->rbuf + c->rlen, buf + off, n);
      off += n;
      on_read((uv_stream_t *) &c->tcp, (ssize_t) n, NULL);
    }
  }
  srv->sink_written = 0;
  conn_close(c);
  uv_run(&loop, UV_RUN_DEFAULT);   /* the handles close */
  answers = (int) srv->sink_answers;
  return answers;
}

/* ------------------------------------------------------------- command */

static void on_signal(uv_signal_t *s, int signum) {
  (void) signum;
  nres_depserver_stop(s->data);
}

static void on_stdin_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char sink[256];
  (void) h;
  (void) suggested;
  buf->base = sink;
  buf->len = sizeof(sink);
}

static void on_stdin(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void) buf;
  if (nread < 0)
    nres_depserver_stop(s->data);   /* EOF: whoever started us is gone */
}

/* The help text is also nres-depserver(1): cmake/manpage.cmake makes the
 * manual page from `nres-depserver --help` at build time. */
static const char usage[] =
  "usage: nres-depserver [options]\n"
  "       nresrun serve [options]\n"
  "\n"
  "nres-depserver is the HTTP dependency that nresrun's http cells call: a\n"
  "server on 127.0.0.1 whose endpoints echo, fail, stall, throttle or go\n"
  "down on request. Its memory is bounded (a fixed connection table, header\n"
  "limits); garbage gets 400, 413, 414 or 431 and a close.\n"
  "\n"
  "Options:\n"
  "  --port N          listen on 127.0.0.1:N (0: pick one; default 0)\n"
  "  --flaky-every N   /flaky answers 503 on every Nth request (default 4)\n"
  "  --max-conns N     open connections at most (default 256)\n"
  "  --idle-ms N       close a connection silent this long (default 10000)\n"
  "  --head-ms N       a request head must arrive whole within N ms of its\n"
  "                    first byte, however it trickles (default 10000)\n"
  "  --write-ms N      close a connection whose peer does not take an\n"
  "                    answer within N ms (default 10000)\n"
  "  --out-max N       unread answer bytes held for a peer: the socket's\n"
  "                    send buffer (default 65536)\n"
  "  --head-max N      request head bytes at most (default 8192)\n"
  "  --seed N          seed of /slow's random latencies\n"
  "  --no-stdin        do not stop when stdin closes\n"
  "  --help            print this help and exit\n"
  "\n"
  "It prints \"port N\" on stdout once it listens, and stops when its\n"
  "standard input closes (unless --no-stdin), or on SIGTERM or SIGINT.\n"
  "\n"
  "Endpoints (any method):\n"
  "  /echo                    200 \"ok\"\n"
  "  /flaky?n=N               503 on every Nth request (one counter)\n"
  "  /slow?ms=M               answer after M ms; dist=uniform&min=&max=,\n"
  "                           dist=lognormal&median=&sigma=\n"
  "  /throttle?after=S        429 with Retry-After: S; form=date (HTTP-date),\n"
  "                           status=503, ra=RAW (the header value as given)\n"
  "  /outage?for=S            every endpoint but /stats /reset /outage\n"
  "                           answers 503 for S seconds (0 ends it)\n"
  "  /truncate                promises 100 bytes, sends 10, resets\n"
  "  /status?code=N           answers status N (200..999), empty body\n"
  "  /stats                   counters as JSON (not counted)\n"
  "  /reset                   zero the counters, end an outage (not counted)\n"
  "\n"
  "Exit status:\n"
  "  0                 stopped: standard input closed, or a signal\n"
  "  1                 it could not listen on the port\n"
  "  2                 a usage error, naming the option\n";

static int parse_u(const char *opt, const char *s, unsigned long lo,
                   unsigned long hi, unsigned long long *out) {
  char *end;
  unsigned long long v;
  if (s == NULL) {
    fprintf(stderr, "nres-depserver: %s needs a value\n%s", opt, usage);
    return -1;
  }
  errno = 0;
  v = strtoull(s, &end, 10);
  if (*s == '-' || end == s || *end != '\0' || errno != 0 || v < lo ||
      v > hi) {
    fprintf(stderr, "nres-depserver: %s: expected an integer %lu..%lu, got "
            "'%s'\n", opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

int nres_depserver_main(int argc, char **argv) {
  nres_depserver_config_t cfg;
  nres_depserver_t *srv;
  uv_loop_t loop;
  unsigned long long v;
  int i, rc, watch_stdin = 1;

  nres_depserver_config_init(&cfg);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(a, "--no-stdin") == 0) {
      watch_stdin = 0;
      continue;
    } else if (strcmp(a, "--port") == 0) {
      if (parse_u(a, val, 0, 65535, &v)) return 2;
      cfg.port = (int) v;
    } else if (strcmp(a, "--flaky-every") == 0) {
      if (parse_u(a, val, 1, 1000000000, &v)) return 2;
      cfg.flaky_every = (uint32_t) v;
    } else if (strcmp(a, "--max-conns") == 0) {
      if (parse_u(a, val, 1, 65536, &v)) return 2;
      cfg.max_conns = (uint32_t) v;
    } else if (strcmp(a, "--idle-ms") == 0) {
      if (parse_u(a, val, 1, 86400000, &v)) return 2;
      cfg.idle_ms = (uint32_t) v;
    } else if (strcmp(a, "--head-ms") == 0) {
      if (parse_u(a, val, 1, 86400000, &v)) return 2;
      cfg.head_ms = (uint32_t) v;
    } else if (strcmp(a, "--write-ms") == 0) {
      if (parse_u(a, val, 1, 86400000, &v)) return 2;
      cfg.write_ms = (uint32_t) v;
    } else if (strcmp(a, "--out-max") == 0) {
      if (parse_u(a, val, 4096, 64ul << 20, &v)) return 2;
      cfg.out_max = (uint32_t) v;
    } else if (strcmp(a, "--head-max") == 0) {
      if (parse_u(a, val, 64, 1 << 20, &v)) return 2;
      cfg.head_max = (uint32_t) v;
    } else if (strcmp(a, "--seed") == 0) {
      if (parse_u(a, val, 0, ~0ul, &v)) return 2;
      cfg.seed = v;
    } else {
      fprintf(stderr, "nres-depserver: unknown option '%s'\n%s", a, usage);
      return 2;
    }
    i++;
  }

  signal(SIGPIPE, SIG_IGN);   /* a client gone mid-write is just an error */
  uv_loop_init(&loop);
  rc = nres_depserver_new(&loop, &cfg, &srv);
  if (rc != 0) {
    fprintf(stderr, "nres-depserver: cannot listen on 127.0.0.1:%d: %s\n",
            cfg.port, uv_strerror(rc));
    uv_loop_close(&loop);
    return 1;
  }
  uv_signal_init(&loop, &srv->sigterm);
  uv_signal_init(&loop, &srv->sigint);
  srv->sigterm.data = srv->sigint.data = srv;
  uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
  uv_signal_start(&srv->sigint, on_signal, SIGINT);
  if (watch_stdin) {
    uv_handle_type t = uv_guess_handle(0);
    if (t == UV_NAMED_PIPE && uv_pipe_init(&loop, &srv->in.pipe, 0) == 0 &&
        uv_pipe_open(&srv->in.pipe, 0) == 0) {
      srv->in_watched = 1;
    } else if (t == UV_TTY && uv_tty_init(&loop, &srv->in.tty, 0, 1) == 0) {
      srv->in_watched = 1;
    } else {
      fprintf(stderr, "nres-depserver: stdin is not a pipe or terminal; "
              "stop it with SIGTERM\n");
    }
    if (srv->in_watched) {
      srv->in.pipe.data = srv;
      uv_read_start((uv_stream_t *) &srv->in, on_stdin_alloc, on_stdin);
    }
  }
  printf("port %d\n", srv->port);
  fflush(stdout);
  uv_run(&loop, UV_RUN_DEFAULT);
  nres_depserver_free(srv);
  uv_loop_close(&loop);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* http_reference.h - a reading of HTTP/1.1 bytes by http-parser alone,
 * for the fuzz targets to hold the client and the dependency server to.
 *
 * reference() reads an answer as RFC 9110 and the client's documented
 * limits say it should be read: interim 1xx answers (at most
 * REF_INTERIM_MAX, each by a fresh parser, as a 1xx may leave http-parser
 * dead) skipped, the first final answer (complete, or delimited by the
 * close), its body (the first REF_BODY_MAX bytes kept) and its last
 * Retry-After value; a 101 or a status under 100 refused. requests_in()
 * counts the requests a server could read whole from a client's bytes.
 * Both targets that read answers include it, so their reference is one.
 */
#ifndef NRES_FUZZ_HTTP_REFERENCE_H
#define NRES_FUZZ_HTTP_REFERENCE_H

#include <stdint.h>
#include <string.h>

#include <http_parser.h>

#define REF_BODY_MAX 64                  /* body bytes kept */
#define REF_RA_MAX 64                    /* Retry-After bytes kept */
#define REF_INTERIM_MAX 16               /* 1xx answers skipped */

typedef struct {
  int head;                  /* answering a HEAD */
  int found;                 /* a final response is complete */
  int refused;               /* a 101, a status under 100, a 1xx flood */
  int interim;               /* a 1xx just ended */
  int status;
  size_t end;                /* bytes read up to the final's last one */
  uint64_t head_bytes;       /* status, fields, values up to the final's end */
  uint64_t body_len;
  char body[REF_BODY_MAX];
  size_t body_kept;
  char field[16];            /* the header name being read, lowercased */
  size_t field_len;
  int field_long;
  int in_value;
  int ra_seen;
  char ra[REF_RA_MAX + 1];
  size_t ra_len;
  int ra_long;
} ref_t;

static inline int ref_begin(http_parser *p) {
  ref_t *r = p->data;
  r->body_len = r->body_kept = 0;
  r->ra_seen = 0;
  r->ra_len = 0;
  r->ra_long = 0;
  r->field_len = 0;
  r->in_value = 1;
  return 0;
}

static inline int ref_status(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  (void) at;
  r->head_bytes += len;
  return 0;
}

static inline int ref_field(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  size_t i;
  r->head_bytes += len;
  if (r->in_value) {
    r->in_value = 0;
    r->field_len = 0;
    r->field_long = 0;
  }
  for (i = 0; i < len; i++) {
    char c = at[i];
    if (r->field_len == sizeof(r->field)) {
      r->field_long = 1;
      break;
    }
    if (c >= 'A' && c <= 'Z')
      c = (char) (c - 'A' + 'a');
    r->field[r->field_len++] = c;
  }
  return 0;
}

static inline int is_ra(const ref_t *r) {
  return !r->field_long && r->field_len == 11 &&
         memcmp(r->field, "retry-after", 11) == 0;
}

static inline int ref_value(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  r->head_bytes += len;
  if (!r->in_value) {
    r->in_value = 1;
    if (is_ra(r)) {   /* the last Retry-After field counts */
      r->ra_seen = 1;
      r->ra_len = 0;
      r->ra_long = 0;
    }
  }
  if (is_ra(r)) {
    if (r->ra_len + len > REF_RA_MAX) {
      r->ra_long = 1;
    } else {
      memcpy(r->ra + r->ra_len, at, len);
      r->ra_len += len;
    }
  }
  return 0;
}

static inline int ref_headers_done(http_parser *p) {
  ref_t *r = p->data;
  if (p->status_code < 100 || p->status_code == 101) {
    r->refused = 1;
    return -1;
  }
  return r->head || p->status_code < 200 ? 1 : 0;   /* no body */
}

static inline int ref_body(http_parser *p, const char *at, size_t len) {
  ref_t *r = p->data;
  size_t room = REF_BODY_MAX - r->body_kept;
  size_t n = len < room ? len : room;
  memcpy(r->body + r->body_kept, at, n);
  r->body_kept += n;
  r->body_len += len;
  return 0;
}

static inline int ref_complete(http_parser *p) {
  ref_t *r = p->data;
  if (p->status_code >= 200) {
    r->found = 1;
    r->status = p->status_code;
  } else {
    r->interim = 1;
  }
  http_parser_pause(p, 1);
  return 0;
}

/* Read `size` bytes as the answer to a request (a HEAD if head). */
static inline void reference(const uint8_t *data, size_t size, int head,
                             ref_t *r) {
  static const http_parser_settings ref_settings = {
    .on_message_begin = ref_begin,
    .on_status = ref_status,
    .on_header_field = ref_field,
    .on_header_value = ref_value,
    .on_headers_complete = ref_headers_done,
    .on_body = ref_body,
    .on_message_complete = ref_complete,
  };
  const char *at = (const char *) data;
  http_parser p;
  int interims = 0;

  memset(r, 0, sizeof(*r));
  r->head = head;
  for (;;) {
    size_t n;
    http_parser_init(&p, HTTP_RESPONSE);
    p.data = r;
    r->interim = 0;
    n = http_parser_execute(&p, &ref_settings, at, size);
    at += n;
    size -= n;
    r->end = (size_t) (at - (const char *) data);
    if (r->found || r->refused)
      return;
    if (!r->interim)
      break;
    if (++interims > REF_INTERIM_MAX) {
      r->refused = 1;
      return;
    }
    if (size == 0)
      break;
  }
  if (HTTP_PARSER_ERRNO(&p) == HPE_OK)
    http_parser_execute(&p, &ref_settings, NULL, 0);   /* the close */
  r->end = (size_t) (at - (const char *) data);
}

static inline int ref_count_request(http_parser *p) {
  (*(unsigned *) p->data)++;
  return 0;
}

/* Requests a parser finds whole in a client's bytes. http-parser stops
 * after a request asking for an Upgrade; a server that never agrees to one
 * reads the bytes after it as the next request. */
static inline unsigned requests_in(const char *data, size_t size) {
  static const http_parser_settings counting = {
    .on_message_complete = ref_count_request,
  };
  http_parser p;
  unsigned n = 0;
  size_t off = 0;

  http_parser_init(&p, HTTP_REQUEST);
  p.data = &n;
  while (off < size) {
    size_t used = http_parser_execute(&p, &counting, data + off, size - off);
    off += used;
    if (!p.upgrade || used == 0 || HTTP_PARSER_ERRNO(&p) != HPE_OK)
      break;
  }
  return n;
}

#endif /* NRES_FUZZ_HTTP_REFERENCE_H */

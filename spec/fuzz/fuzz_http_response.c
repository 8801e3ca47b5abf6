/* SPDX-License-Identifier: MIT */
/* fuzz_http_response.c - libFuzzer target for the HTTP client's response
 * parser (nres__http_parse in runtime/src/exec/http.c), without sockets:
 * status line, headers, bodies by length, chunked or by close, interim 1xx
 * answers, the head limit, the Retry-After value and the body it keeps.
 *
 * The bytes after the first are an answer, fed to one connection's parser
 * in reads cut where the first byte says (bits 3-7: 3 * n bytes, 0: one
 * read), then the peer's close; bit 0 makes it the answer to a HEAD. What
 * the parser makes of them must equal the reference reading of
 * http_reference.h: the final answer's status, where it ends, its body
 * length and kept bytes, its Retry-After; or a refusal (-EPROTO) or "more
 * needed" exactly when there is no final answer to read. Fast, so it is
 * the one that digs; fuzz_http_wire.c runs whole requests on a socket.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/http_int.h"
#include "fuzz_input.h"
#include "http_reference.h"

#define HEAD_MAX 512                     /* small limits: reachable */
#define NOW_UNIX INT64_C(1764547200)     /* 2025-12-01, for dates */

static nres_http_client_t client;        /* only its config is read */
static nres__http_conn_t *conn;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void) argc;
  (void) argv;
  nres_http_config_init(&client.config);
  client.config.head_max = HEAD_MAX;
  client.config.body_max = REF_BODY_MAX;
  conn = calloc(1, sizeof(*conn) + REF_BODY_MAX);
  FUZZ_CHECK(conn != NULL);
  conn->client = &client;
  return 0;
}

/* Retry-After as the client turns it into a delay: NRES_TIME_NEVER when
 * there is none, it was too long, or it does not parse. */
static nres_time_t delay_of(const char *v, size_t len, int too_long) {
  nres_time_t out = NRES_TIME_NEVER;
  if (len == 0 || too_long || nres_http_retry_after(v, len, NOW_UNIX, &out))
    return NRES_TIME_NEVER;
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t chunk, off = 0, used = 0;
  uint8_t flags;
  ref_t ref;
  int rc = 0;

  if (size == 0)
    return 0;
  flags = data[0];
  data++;
  size--;
  chunk = (flags >> 3) == 0 ? NRES__HTTP_RBUF : (size_t) (flags >> 3) * 3;

  conn->head_req = flags & 1;
  nres__http_parse_start(conn);
  while (rc == 0 && off < size) {
    size_t n = size - off < chunk ? size - off : chunk;
    rc = nres__http_parse(conn, (const char *) data + off, n, &used);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EPROTO);
    FUZZ_CHECK(used <= n);
    if (rc == 0)
      FUZZ_CHECK(used == n);   /* "more needed" takes everything */
    off += rc == 1 ? used : n;
  }
  if (rc == 0 && size > 0) {   /* the peer closes */
    rc = nres__http_parse(conn, NULL, 0, &used);
    FUZZ_CHECK(rc == 0 || rc == 1);
  }
  FUZZ_CHECK(conn->body_kept <= REF_BODY_MAX &&
             conn->body_kept <= conn->body_len);
  FUZZ_CHECK(conn->ra_len <= sizeof(conn->ra));

  reference(data, size, flags & 1, &ref);
  if (ref.found && !ref.refused && ref.head_bytes <= HEAD_MAX) {
    if (rc != 1)
      fprintf(stderr, "parser: %d, reference: status %d\n", rc, ref.status);
    FUZZ_CHECK(rc == 1);
    FUZZ_CHECK(conn->parser.status_code == ref.status);
    FUZZ_CHECK(off == ref.end);
    FUZZ_CHECK(conn->body_len == ref.body_len);
    FUZZ_CHECK(conn->body_kept == ref.body_kept &&
               memcmp(conn->body, ref.body, ref.body_kept) == 0);
    FUZZ_CHECK(delay_of(conn->ra, conn->ra_len, conn->ra_bad) ==
               delay_of(ref.ra, ref.ra_len, ref.ra_long || !ref.ra_seen));
  } else {
    if (rc == 1)
      fprintf(stderr, "parser: status %d, reference: none (refused %d, "
              "head %llu bytes)\n", conn->parser.status_code, ref.refused,
              (unsigned long long) ref.head_bytes);
    FUZZ_CHECK(rc != 1);
  }
  return 0;
}

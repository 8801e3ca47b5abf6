/* SPDX-License-Identifier: MIT */
/* fuzz_depserver.c - libFuzzer target for the dependency server's request
 * parser and handlers, without sockets (nres_depserver_parse_for_test).
 *
 * The bytes are what one client connection sends: http-parser's callbacks,
 * the head, URL and body limits, every endpoint's query parameters and
 * pipelined requests all run as they would on reads, answers are formatted
 * and counted instead of written. Fast (no socket, no loop per input), so
 * it is the one that digs; fuzz_depserver_wire.c sends bytes over a real
 * socket and checks what comes back. Here the server must survive (ASan,
 * UBSan) and answer at most once per request it could have read, plus one
 * refusal (400, 413, 414, 431) that ends the connection.
 *
 * The server behind the entry point is kept between inputs (its counters
 * and an outage set by /outage carry over), as a long-lived one would be.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "depserver.h"
#include "fuzz_input.h"
#include "http_reference.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int answers = nres_depserver_parse_for_test((const char *) data, size);

  FUZZ_CHECK(answers >= 0);
  FUZZ_CHECK((unsigned) answers <= requests_in((const char *) data, size) + 1);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* consumer.c - a program built against an installed libnres (headers and
 * nres.pc from `cmake --install` or the Debian packages), the way a C user
 * builds one: cc consumer.c $(pkg-config --cflags --libs nres).
 *
 * It builds a policy (3 attempts, a 5 s deadline), runs a call that fails
 * twice and then succeeds, and one that fails permanently, and checks what
 * nres_run and the counters say. With an argument it also checks that the
 * library's version string is that one. Exit 0 and "ok" when all holds.
 */
#include <nres.h>

#include <stdio.h>
#include <string.h>

static int failed;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "consumer: check failed: %s (line %d)\n", #cond, \
              __LINE__);                                              \
      failed = 1;                                                     \
    }                                                                 \
  } while (0)

/* Fails with a transient error until the third attempt. */
static nres_verdict_t flaky(void *arg, const nres_attempt_t *attempt) {
  unsigned *calls = arg;
  (*calls)++;
  return nres_verdict(attempt->number < 3 ? NRES_TRANSIENT : NRES_OK);
}

static nres_verdict_t broken(void *arg, const nres_attempt_t *attempt) {
  unsigned *calls = arg;
  (void) attempt;
  (*calls)++;
  return nres_verdict(NRES_PERMANENT);
}

int main(int argc, char **argv) {
  static nres_policy_t policy;   /* must not move once initialised */
  nres_call_t call;
  nres_counters_t counters;
  unsigned calls = 0;

  CHECK(strcmp(nres_version_string(), NRES_VERSION_STRING) == 0);
  CHECK(nres_version() == NRES_VERSION_HEX);
  CHECK(nres_abi_version() == NRES_ABI_VERSION);
  if (argc > 1) {
    CHECK(strcmp(nres_version_string(), argv[1]) == 0);
  }

  CHECK(nres_policy_init(&policy, NRES_PRESET_TRIVIAL) == 0);
  policy.attempts = 3;
  policy.deadline = 5 * NRES_SEC;
  int rc = nres_policy_build(&policy);
  if (rc != 0) {
    fprintf(stderr, "consumer: policy refused: %s\n", nres_strerror(rc));
    return 1;
  }

  CHECK(nres_run(&policy, flaky, &calls, &call) == 0);
  CHECK(calls == 3);
  CHECK(call.attempts == 3 && call.retries == 2);
  CHECK(call.stop == NRES_STOP_OK);

  calls = 0;
  CHECK(nres_run(&policy, broken, &calls, &call) != 0);
  CHECK(calls == 1);
  CHECK(call.stop == NRES_STOP_PERMANENT);
  CHECK(strcmp(nres_stop_name(call.stop), "permanent") == 0);

  nres_policy_counters(&policy, &counters);
  CHECK(counters.calls == 2);
  CHECK(counters.attempts == 4);
  CHECK(counters.retries == 2);
  CHECK(counters.stops[NRES_STOP_OK] == 1 && counters.stops[NRES_STOP_PERMANENT] == 1);

  if (failed) return 1;
  printf("ok: nres %s, %u attempts\n", nres_version_string(), (unsigned) counters.attempts);
  return 0;
}

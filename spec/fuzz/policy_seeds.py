#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# policy_seeds.py - writes the seed corpus of fuzz_policy
# (spec/fuzz/corpus/fuzz_policy/): policies and call scripts in the byte
# layout fuzz_policy.c reads, one file per scenario worth starting from.
#
# The encoders mirror fuzz_input.h (fuzz_count, fuzz_duration, fuzz_double)
# and the order of fill_policy/run_call in fuzz_policy.c: change them
# together. Run from the repository root: python3 spec/fuzz/policy_seeds.py
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "corpus", "fuzz_policy")


def count(n):           # fuzz_count: 0..15 in one byte, else raw u32
    return bytes([n]) if n < 16 else bytes([0xc0]) + struct.pack("<I", n)


def ms(n):              # fuzz_duration: n ms (n < 32)
    return bytes([0x20 | n])


def sec(n):             # fuzz_duration: n s (n < 32)
    return bytes([0x40 | n])


ZERO = bytes([0x00])
NEVER = bytes([0x80])
INVALID = bytes([0x81])  # NRES_TIME_INVALID: NaN or negative seconds


def dbl(x):             # fuzz_double: one of the edge values, or n / 16
    edge = {0.0: 0, 1.0: 2, 0.5: 4, 0.1: 5, 0.95: 6, 2.0: 7, 3.0: 15}
    if x in edge:
        return bytes([edge[x]])
    if x != x:
        return bytes([0x40])                   # NaN
    if x == float("inf"):
        return bytes([0x21])
    return bytes([0x60 | int(x * 16)])


def policy(preset=1, attempts=3, telemetry=1, backoff=(0, 0, 2.0, ZERO, ZERO, ZERO),
           deadline=ZERO, attempt_timeout=ZERO, ceiling=(0.0, 0.95, ZERO, 0),
           slow=(ZERO, 3.0), limit_wait=ZERO, fallback=0, hedge=(0, 0, ZERO, 0.95, 0.5),
           shared=b"\x00", on_event=1):
    kind, jitter, factor, base, mx, throttled = backoff
    cf, cq, floor, samples = ceiling
    b = bytes([preset]) + count(attempts) + count(telemetry)
    b += bytes([kind, jitter]) + dbl(factor) + base + mx + throttled
    b += deadline + attempt_timeout + dbl(cf) + dbl(cq) + floor + count(samples)
    b += slow[0] + dbl(slow[1]) + limit_wait + count(fallback)
    b += struct.pack("<Q", 0x6e726573)                       # seed
    hmax, hmin, hdelay, hq, hsup = hedge
    b += count(hmax) + count(hmin) + hdelay + dbl(hq) + dbl(hsup)
    b += b"\x00"                                             # window: 10 s
    b += shared + bytes([on_event])
    return b


# Call scripts: after the policy, the clock, the number of calls, then per
# call a drain byte and a `how` byte (bit 0: an inbound deadline follows;
# bits 1-3: bulkhead slots other callers hold), then one op per step.
def calls(n, clock=sec(1)):
    return clock + bytes([n - 1])


def call(how=0, inbound=None):
    b = b"\x00" + bytes([how])
    return b + (inbound if inbound is not None else b"")


OK, TRANSIENT, THROTTLED, PERMANENT = 0, 1, 2, 3


def report(latency, kind, retry_after=None):
    # op 0 on an attempt in flight: latency, then the verdict.
    flags = 4 if retry_after is not None else 0
    b = b"\x00" + latency + bytes([kind | (flags << 3), 0])
    return b + (retry_after if retry_after is not None else b"")


RESUME = b"\x00"        # op 0 with nothing in flight: the wait's time comes
HEDGE = b"\x02"         # op with bit 1: resume at the hedge time
CANCEL = b"\xf8"


def breaker(consecutive):
    return (bytes([0]) + count(consecutive) + count(0) + dbl(0.0) + dbl(0.0)
            + sec(30) + count(10) + count(1) + count(1) + sec(5) + sec(20)
            + dbl(0.0))


def bulkhead(limit, queue, timeout):
    return (bytes([0]) + count(limit) + count(queue) + timeout + ms(1)
            + count(0) + count(1) + count(10) + ZERO + dbl(0.5))


seeds = {
    # DEFAULT-like: exponential backoff, budget, breaker, estimator; a
    # call that retries through TRANSIENT and THROTTLED (Retry-After),
    # one PERMANENT, one under a tight inbound deadline.
    "retries_budget_breaker":
        policy(preset=2, attempts=3, backoff=(3, 1, 2.0, ms(20), sec(1), ZERO),
               deadline=sec(30), attempt_timeout=sec(10),
               ceiling=(3.0, 0.95, ms(20), 15), shared=bytes([0x45]))
        + calls(3)
        + call() + report(ms(5), TRANSIENT) + RESUME
        + report(ms(5), THROTTLED, retry_after=ms(1)) + RESUME + report(ms(5), OK)
        + call() + report(ms(5), PERMANENT)
        + call(how=1, inbound=ms(2)) + report(sec(5), TRANSIENT),
    # Hedging after a fixed 10 ms: two hedges start, the first attempt
    # wins, the others are handed back to abandon.
    "hedges_abandoned":
        policy(attempts=4, hedge=(3, 0, ms(10), 0.95, 0.5))
        + calls(1) + call() + HEDGE + HEDGE + report(ms(1), OK),
    # A breaker that trips after 2 failures in a row: the third call is
    # refused (CIRCUIT).
    "breaker_trips":
        policy(attempts=1, shared=bytes([0x08]) + breaker(2))
        + calls(3) + call() + report(ms(1), TRANSIENT)
        + call() + report(ms(1), TRANSIENT) + call(),
    # A rate limit of 1/s with burst 1 and limit_wait 10 s: the second
    # call waits for its admission; the fallback runs after a failure.
    "rate_limit_waits":
        policy(attempts=2, limit_wait=sec(10), fallback=1,
               shared=bytes([0x10]) + dbl(1.0) + count(1))
        + calls(2) + call() + report(ms(1), OK)
        + call() + RESUME + report(ms(1), PERMANENT),
    # A bulkhead of 2 with a queue: both slots are held by others when
    # the call begins, so it queues, polls, and gets in when one is freed.
    "bulkhead_queue":
        policy(attempts=2, shared=bytes([0x20]) + bulkhead(2, 4, sec(5)))
        + calls(1) + call(how=2 << 1) + RESUME + b"\xe0" + report(ms(1), OK),
    # A bulkhead whose poll (2^64 - 3 ns) passes its rule (poll < NEVER)
    # but saturates: the queued call is told to wait until NRES_TIME_NEVER
    # with nothing in flight, so it would never look again. Fails until
    # the executor refuses (or bounds) a wait that cannot end.
    "bulkhead_poll_saturates":
        policy(attempts=2, shared=bytes([0x20]) + bytes([0]) + count(1)
               + count(1) + NEVER + bytes([0x82]) + count(0) + count(1)
               + count(10) + ZERO + dbl(0.5))
        + calls(1) + call(how=1 << 1) + RESUME + report(ms(1), OK),
    # The caller cancels while its retry waits in backoff.
    "cancel_in_backoff":
        policy(attempts=5, backoff=(1, 0, 1.0, ms(100), ms(100), ZERO))
        + calls(1) + call() + report(ms(1), TRANSIENT) + CANCEL,
    # Refused: a NaN deadline, a timeout above the deadline, a NaN factor,
    # no attempts. Calls on them must end at once.
    "refused_nan_deadline": policy(deadline=INVALID),
    "refused_timeout_above_deadline": policy(deadline=sec(1), attempt_timeout=sec(2)),
    "refused_nan_factor": policy(backoff=(3, 0, float("nan"), ms(1), sec(1), ZERO)),
    "refused_no_attempts": policy(attempts=0),
    # Near the end of time (2^64 - 2^40 ns): delays and a Retry-After of
    # NRES_TIME_NEVER saturate.
    "end_of_time":
        policy(attempts=3, backoff=(3, 1, 2.0, ms(1), NEVER, NEVER))
        + calls(1, clock=bytes([0xc0]) + struct.pack("<Q", 2**64 - 2**40)) + call() + report(NEVER, THROTTLED, retry_after=NEVER)
        + RESUME + report(ZERO, OK),
}

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)

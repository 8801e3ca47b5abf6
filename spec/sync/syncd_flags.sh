#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# syncd_flags.sh NRES_SYNCD - nres-syncd's flags as a hostile operator
# types them: every bad value exits 2 with a line naming the flag before
# anything is mapped or connected; --help exits 0.
set -uo pipefail
syncd=${1:?usage: $0 path/to/nres-syncd}
failed=0
check() {   # EXPECTED_EXIT EXPECTED_STDERR_PART ARGS...
  local want=$1 part=$2; shift 2
  local err rc
  err=$("$syncd" "$@" 2>&1 >/dev/null </dev/null); rc=$?
  if [ "$rc" != "$want" ] || [[ "$err" != *"$part"* ]]; then
    echo "FAIL: nres-syncd $*: exit $rc (want $want), stderr: $err"
    failed=1
  else
    echo "ok: nres-syncd $* -> $rc"
  fi
}
check 0 "" --help
check 2 "usage:"
check 2 "usage:" --region
check 2 "usage:" --bogus 1 --region /nonexistent
for v in nan inf -1 0 1e300 abc 5x ""; do
  check 2 "--interval: expected a number from 1 to 3.6e+06, got \"$v\"" --interval "$v" --region /nonexistent
done
for v in nan -0.5 2 x; do
  check 2 "--local-share: expected a number from 0 to 1, got \"$v\"" --local-share "$v" --region /nonexistent
done
for v in 0 70000 x -1; do
  check 2 "--redis port: expected a number from 1 to 65535, got \"$v\"" --fleet t --redis "127.0.0.1:$v" --region /nonexistent
done
check 2 '--node: expected a name without quotes' --node 'a"b' --region /nonexistent
check 2 '--node: expected a name without quotes' --node '' --region /nonexistent
check 1 "" --fleet t --region /nonexistent/region.shm   # a region that cannot be mapped: exit 1, named
# The fleet's name is required (it is part of every key) and checked.
check 2 "--fleet: expected the fleet's name" --region /nonexistent
check 2 "braces or colons" --fleet 'a:b' --region /nonexistent
check 2 "braces or colons" --fleet '{x}' --region /nonexistent
# A password never comes from argv; the others are checked by name.
check 2 "--password: never on the command line" --password secret --fleet t --region /nonexistent
unset NRES_SYNCD_TEST_UNSET
check 2 "--password-env: expected the name of a set environment variable" \
  --password-env NRES_SYNCD_TEST_UNSET --fleet t --region /nonexistent
check 2 "--user: expected a password too" --user alice --fleet t --region /nonexistent
check 2 "--sentinel-password-env: expected the name of a set environment variable" \
  --sentinel-password-env NRES_SYNCD_TEST_UNSET --sentinel 127.0.0.1:1 --master m --fleet t --region /nonexistent
check 2 "--sentinel-user: expected a password too" --sentinel-user s --sentinel 127.0.0.1:1 \
  --master m --fleet t --region /nonexistent
check 2 "expected --sentinel too" --sentinel-password-file /dev/null --fleet t --region /nonexistent
check 2 "sentinel_password_file /nonexistent/pw" --sentinel-password-file /nonexistent/pw \
  --sentinel 127.0.0.1:1 --master m --fleet t --region /nonexistent
check 2 "password_file /nonexistent/pw" --password-file /nonexistent/pw --fleet t --region /nonexistent
for v in 1 -0.1 x; do
  check 2 "--quorum: expected a number from 0 to" --quorum "$v" --fleet t --region /nonexistent
done
for v in 1.5 -0.1 x; do
  check 2 "--fleet-ratio: expected a number from 0 to 1, got \"$v\"" --fleet-ratio "$v" --fleet t --region /nonexistent
done
check 2 "--fleet-min-calls: expected a number from 1 to 1e+09, got \"0\"" --fleet-min-calls 0 --fleet t --region /nonexistent
check 2 "--fleet-min-calls: expected a whole number of calls, got \"2.5\"" --fleet-min-calls 2.5 --fleet t --region /nonexistent
check 2 "--db: expected a number from 0 to 1e+06, got \"-1\"" --db -1 --fleet t --region /nonexistent
check 2 "--sentinel and --master: expected both" --sentinel 127.0.0.1:1 --fleet t --region /nonexistent
check 2 "--sentinel and --master: expected both" --master m --fleet t --region /nonexistent
check 2 "--cluster: expected no --sentinel, --db" --cluster 127.0.0.1:7000 --db 2 --fleet t --region /nonexistent
exit $failed

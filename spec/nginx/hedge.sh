#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/hedge.sh LIBNRES [N] - hedging in the gateway's cosocket mode,
# in a real nginx in front of nres-depserver (issue 15).
#
# Checks (scope "fixed": hedge after 50 ms, deterministic upstream delays):
#   1. a GET whose upstream answer takes 200 ms is hedged: the upstream sees
#      2 requests, the call answers 200, the worker's status counts one
#      hedge and one canceled loser (its light thread killed, socket closed);
#   2. a POST is not hedged (1 upstream request); a POST with an
#      Idempotency-Key header is (2);
#   3. a GET answered in 10 ms is not hedged;
#   4. X-Criticality: with one of 2 slots taken, a sheddable call is refused
#      (reserve 0.5) and a critical one admitted; counted by class;
#   5. p:run with the nginx driver (spawn/wait_any/kill on ngx.thread)
#      hedges a slow GET and kills the loser;
# then the figure (printed, and the last line is machine-readable): N GETs
# (default 1500, 4 at a time, after 300 to warm the latency estimator) to
# /slow?dist=lognormal&median=20&sigma=1 through scope "plain" (no hedge)
# and scope "hedged" (hedge at the live p95): p50, p99, upstream requests
# per call; latency is the call's time inside the gateway (X-Call-Ms), not
# curl's. Skipped (exit 0) without nginx and its Lua module.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
lib=${1:-${NRES_LIB:-}}
N=${2:-1500}
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"

nres_spec_begin hedge "$lib"   # sets $work, NRES_LIB, fail, pass, jit_dir
depserver=${NRES_DEPSERVER:-$(dirname "$NRES_LIB")/nres-depserver}
if [ ! -x "$depserver" ]; then
  echo "skipped: no nres-depserver beside $NRES_LIB (the http component; or set NRES_DEPSERVER)"
  failed=0
  exit 0
fi
dep_pid=""
trap 'nres_nginx_stop_all; [ -n "$dep_pid" ] && kill "$dep_pid" 2>/dev/null; [ "${failed:-1}" = 0 ] && rm -rf "$work" || echo "logs kept in $work"' EXIT
dep_port=$(nres_free_port)
gw_port=$(nres_free_port)
while [ "$gw_port" = "$dep_port" ]; do gw_port=$(nres_free_port); done
"$depserver" --port "$dep_port" --seed 1 --no-stdin >"$work/dep.out" 2>&1 &
dep_pid=$!
nres_render "$here/hedge.conf.in" "$work/gw/nginx.conf" \
  PREFIX="$work/gw" PORT="$gw_port" DEP_PORT="$dep_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
dep="http://127.0.0.1:$dep_port"
gw="http://127.0.0.1:$gw_port"
nres_wait_http "$dep/stats"
nres_wait_http "$gw/nres/status"

json() { luajit "$here/json.lua" "$1"; }
slow_count() { curl -sf "$dep/stats" | json 'j.by_endpoint.slow'; }
worker() { curl -sf "$gw/nres/status" | json "key('$1', '127.0.0.1:$dep_port').this_worker.$2"; }

# 1. hedged GET
before=$(slow_count)
code=$(curl -s -o "$work/body" -w '%{http_code}' "$gw/fixed/slow?ms=200")
after=$(slow_count)
[ "$code" = 200 ] || fail "hedged GET: status $code ($(cat "$work/body"))"
[ $((after - before)) = 2 ] || fail "hedged GET: upstream saw $((after - before)) requests, want 2"
[ "$(worker fixed hedges)" = 1 ] || fail "status: hedges $(worker fixed hedges), want 1"
[ "$(worker fixed hedges_canceled)" = 1 ] || fail "status: hedges_canceled $(worker fixed hedges_canceled), want 1"
pass "a 200 ms GET is hedged at 50 ms: 2 upstream requests, 1 hedge, 1 loser canceled"

# 2. POST: not hedged, unless it says it is idempotent
before=$(slow_count)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data x "$gw/fixed/slow?ms=200")
after=$(slow_count)
[ "$code" = 200 ] && [ $((after - before)) = 1 ] || fail "POST: status $code, upstream requests $((after - before)), want 200 and 1"
before=$after
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Idempotency-Key: k1' --data x "$gw/fixed/slow?ms=200")
after=$(slow_count)
[ "$code" = 200 ] && [ $((after - before)) = 2 ] || fail "POST with Idempotency-Key: status $code, upstream requests $((after - before)), want 200 and 2"
pass "POST is not hedged (1 upstream request); with an Idempotency-Key it is (2)"

# 3. fast GET: no hedge
before=$(slow_count)
curl -sf -o /dev/null "$gw/fixed/slow?ms=10"
after=$(slow_count)
[ $((after - before)) = 1 ] || fail "a 10 ms GET: upstream saw $((after - before)) requests, want 1"
pass "a 10 ms GET is not hedged"

# 4. criticality: scope "crit" has 2 slots and reserve 0.5 (sheddable 1,
# critical 3). One default call holds a slot; a sheddable one is refused;
# a critical one is admitted; the status counts the refusal by class.
curl -s -o /dev/null "$gw/crit/slow?ms=600" &
held=$!
sleep 0.2
body=$(curl -s -H 'X-Criticality: sheddable' "$gw/crit/slow?ms=10")
case "$body" in *"rate limited"*) ;; *) fail "sheddable call with a slot taken: got '$body', want rate limited" ;; esac
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Criticality: CRITICAL_PLUS' "$gw/crit/slow?ms=10")
[ "$code" = 200 ] || fail "critical call: status $code"
wait "$held"
[ "$(worker crit refused_by_class.sheddable)" = 1 ] || fail "status: sheddable refusals $(worker crit refused_by_class.sheddable), want 1"
[ "$(worker crit refused_by_class.critical)" = 0 ] || fail "status: critical refusals $(worker crit refused_by_class.critical), want 0"
[ "$(worker crit limit)" = 2 ] || fail "status: limit $(worker crit limit), want 2"
pass "X-Criticality: sheddable refused first, critical admitted into the headroom, counted by class"

# 5. p:run on the nginx driver hedges too (light threads; the loser killed).
before=$(slow_count)
out=$(curl -s "$gw/prun/slow?ms=200")
after=$(slow_count)
echo "$out" | json 'j.ok and j.driver == "nginx" and j.hedges == 1 and j.hedges_won == 0 and j.hedges_canceled == 1 or nil' \
  | grep -q true || fail "p:run on the nginx driver: $out"
[ $((after - before)) = 2 ] || fail "p:run on the nginx driver: upstream saw $((after - before)) requests, want 2"
out=$(curl -s "$gw/prun/slow?dist=uniform&min=150&max=150")
echo "$out" | json 'j.hedges == 2 and j.hedges_canceled == 2 or nil' | grep -q true ||
  fail "p:run on the nginx driver, second call: $out"
pass "p:run under nginx: a 200 ms GET hedged at 50 ms, first attempt wins, the hedge's light thread killed"

# The figure.
url='slow?dist=lognormal&median=20&sigma=1'
measure() {   # scope count -> file of latencies (ms)
  seq 1 "$2" | xargs -P 4 -I{} curl -s -o /dev/null -w '%{http_code} %header{x-call-ms}\n' "$gw/$1/$url" \
    >"$work/$1.raw"
  # the upstream may drop a kept-alive connection now and then: counted, not
  # fatal (a one-attempt scope passes the failure on)
  bad=$(awk '$1 != 200 { n++ } END { print n + 0 }' "$work/$1.raw")
  [ "$bad" -le $(($2 / 100)) ] || fail "$1: $bad non-200 answers of $2"
  awk '$1 == 200 { print $2 }' "$work/$1.raw" | sort -n >"$work/$1.ms"
}
q() { awk -v q="$2" '{ a[NR] = $1 } END { i = int(q * NR + 0.999999); if (i < 1) i = 1; print a[i] }' "$1"; }
line=""
for scope in plain hedged; do
  measure "$scope" 300 >/dev/null
  before=$(slow_count)
  measure "$scope" "$N"
  after=$(slow_count)
  p50=$(q "$work/$scope.ms" 0.5); p99=$(q "$work/$scope.ms" 0.99)
  per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN { printf "%.3f", (a - b) / n }')
  echo "$scope: $N calls ($bad not 200), p50 ${p50} ms, p99 ${p99} ms, upstream requests per call $per"
  line="$line $scope p50=$p50 p99=$p99 req_per_call=$per failed=$bad"
done
echo "hedges (this worker): $(worker hedged hedges), canceled $(worker hedged hedges_canceled)"
echo "RESULT$line"
if grep -E '\[(error|crit|alert|emerg)\]' "$work/gw/error.log"; then fail "error.log has errors"; fi
pass "error.log clean"
failed=0

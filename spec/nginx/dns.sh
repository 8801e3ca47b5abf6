#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/dns.sh LIBNRES [MODULE] - peers by name (issue 25) in a real
# nginx with the Lua balancer (spec/nginx/balancer.conf.in, 2 workers) or,
# when MODULE (ngx_http_nres_module.so) is given, the nginx module
# (spec/nginx/cbalancer.conf.in). A dnsmasq on
# a loopback port serves app.test from a hosts file the test rewrites
# (dnsmasq rereads it on SIGHUP; TTL 1 s); the upstream is one plain nginx
# listening on 127.0.0.1, .2 and .3 (one port), answering with the address
# it was reached on. The gateway declares peers = { "app.test:PORT" } with
# resolve = { resolver = dnsmasq, min_ttl = 1, max_ttl = 2 } and a scope
# deadline of 1 s (a vanished address is drained, then removed 1 s later).
# Under two request loops that run from start to end:
#   1. at start the name's two addresses are the peers; the status shows
#      the name, its addresses, TTL and last result;
#   2. an address added (.3): a peer within max_ttl + slack, and it gets
#      requests; the surviving peer's counters carry on;
#   3. one removed (.2): gone from the peers within max_ttl + a look
#      (0.5 s) + deadline + slack; no request reaches it afterwards;
#   4. all changed ({.1, .3} -> {.2}): the peers follow;
#   4b. nginx -s reload: the peer and its counters carry on;
#   5. one worker resolves: dnsmasq's query log has one A and one AAAA
#      query per TTL, not one per worker;
#   6. dnsmasq stopped: the last good set is kept, the failure is logged
#      once (not per attempt), requests still succeed;
#   7. not one request of the loops failed; error.log has no [error],
#      [crit], [alert] or [emerg] line;
#   8. nginx with a name that does not resolve (and no region file) does
#      not start, naming the peer, the name and the resolver.
# About 25 s. Skipped (exit 0) without nginx's Lua module or dnsmasq.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
DNSMASQ=$(command -v dnsmasq || echo /usr/sbin/dnsmasq)
if [ ! -x "$DNSMASQ" ]; then
  echo "skipped: no dnsmasq (Debian package dnsmasq-base)"
  exit 0
fi
nres_spec_begin dns "${1:-${NRES_LIB:-}}"   # sets $work
module=${2:-}
tpl=("$here/balancer.conf.in")
[ -z "$module" ] || tpl=("$here/cbalancer.conf.in" MODULE="$module")

mapfile -t ports < <(nres_free_ports 3)
dns_port=${ports[0]}; up_port=${ports[1]}; gw_port=${ports[2]}
gw="http://127.0.0.1:$gw_port"
json() { luajit "$here/json.lua" "$1"; }
status() { curl -sf -H "Connection: close" "$gw/nres/status"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
within() { awk -v e="$1" -v l="$2" 'BEGIN { exit !(e <= l) }'; }

# the name's addresses, one hosts line each; then dnsmasq rereads them
hosts() {
  local a
  : >"$work/hosts.new"
  for a in "$@"; do echo "$a app.test" >>"$work/hosts.new"; done
  mv "$work/hosts.new" "$work/hosts"
  [ -z "${dns_pid:-}" ] || kill -HUP "$dns_pid"
}
hosts 127.0.0.1 127.0.0.2
"$DNSMASQ" --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
  --addn-hosts="$work/hosts" --local=/test/ --local-ttl=1 --listen-address=127.0.0.1 --bind-interfaces \
  --port="$dns_port" --pid-file= --user="$(id -un)" --log-queries \
  --log-facility="$work/dnsmasq.log" &
dns_pid=$!
NRES_STARTED_PIDS="$NRES_STARTED_PIDS $dns_pid"   # stopped on exit, failure included
for _ in $(seq 1 100); do grep -q "started" "$work/dnsmasq.log" 2>/dev/null && break; sleep 0.05; done

mkdir -p "$work/up/tmp"
cat >"$work/up/nginx.conf" <<EOF
worker_processes 1;
pid $work/up/nginx.pid;
error_log $work/up/error.log notice;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/up/tmp;
  server {
    listen 127.0.0.1:$up_port; listen 127.0.0.2:$up_port; listen 127.0.0.3:$up_port;
    location / { return 200 "\$server_addr"; }
  }
}
EOF
nres_nginx_start "$work/up" "$work/up/nginx.conf"

resolve="resolve = { resolver = \"127.0.0.1:$dns_port\", min_ttl = 1, max_ttl = 2 }"
nres_render "${tpl[0]}" "$work/gw/nginx.conf" "${tpl[@]:1}" PREFIX="$work/gw" PORT="$gw_port" \
  LUA="$repo/lua/?.lua" CHOICE=round-robin \
  POLICY='{ base = "gateway", deadline = 1, attempt_timeout = 0.5 }' \
  PEERS="{ \"app.test:$up_port\" }, slow_start = \"1s\", $resolve"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "$gw/nres/status"

# peers: the upstream's peers, sorted, on one line
peers() {
  status | json "(function() local t = {}
    for _, p in ipairs(j.upstreams.backend.peers) do t[#t + 1] = p.peer end
    table.sort(t) return table.concat(t, ' ') end)()"
}
want() { local a out=(); for a in "$@"; do out+=("$a:$up_port"); done; echo "${out[*]}"; }
# wait_peers BOUND ADDR...: until the peers are ADDR... (at most BOUND s):
# prints the time it took
wait_peers() {
  local bound=$1 t w
  shift
  w=$(want "$@"); t=$(now)
  while [ "$(peers)" != "$w" ] && within "$(elapsed "$t")" "$(( ${bound%.*} + 3 ))"; do
    sleep 0.05
  done
  [ "$(peers)" = "$w" ] || fail "peers $(peers), expected $w after $(elapsed "$t") s: $(status)"
  e=$(elapsed "$t")
  within "$e" "$bound" || fail "peers $w after $e s (bound $bound s)"
}
tries_of() {
  status | json "(function() for _, p in ipairs(j.upstreams.backend.peers) do
    if p.peer == '$1:$up_port' then return p.tries end end end)()"
}

# 1. at start
[ "$(peers)" = "$(want 127.0.0.1 127.0.0.2)" ] || fail "peers at start: $(peers)"
s=$(status)
[ "$(json "j.upstreams.backend.names[1].name .. ' ' .. j.upstreams.backend.names[1].last
  .. ' ' .. j.upstreams.backend.names[1].ttl" <<<"$s")" = "app.test ok 1" ] ||
  fail "the name's status: $s"
prom() { curl -sf "$gw/nres/status?format=prometheus" | grep "^$1{upstream=\"backend\",name=\"app.test:$up_port\"}"; }
[ "$(prom nres_name_addresses)" = "nres_name_addresses{upstream=\"backend\",name=\"app.test:$up_port\"} 2" ] ||
  fail "Prometheus: $(prom nres_name_addresses)"
pass "at start: app.test resolved to $(peers) (status: name, last ok, TTL 1 s; nres_name_addresses 2)"

# the request loops: each line "address status"
: >"$work/requests"
loop() {
  while [ ! -f "$work/stop" ] && kill -0 $$ 2>/dev/null; do   # ends with the script
    curl -s --max-time 5 -w ' %{http_code}\n' "$gw/loop" 2>/dev/null || echo "- 000"
  done >>"$work/requests.$1"
}
loop 1 & loop1=$!
loop 2 & loop2=$!
for _ in $(seq 1 100); do [ -f "$work/requests.2" ] && [ -f "$work/requests.1" ] && break; sleep 0.05; done
# mark: where each loop's log is now; served_since MARK ADDR: requests
# ADDR answered since
mark() { echo "$(wc -l <"$work/requests.1") $(wc -l <"$work/requests.2")"; }
served_since() {
  local m1 m2
  read -r m1 m2 <<<"$1"
  { tail -n +"$(( m1 + 1 ))" "$work/requests.1"; tail -n +"$(( m2 + 1 ))" "$work/requests.2"; } |
    grep -c "^$2 " || true
}
sleep 1

# 2. an address added
before=$(tries_of 127.0.0.1)
hosts 127.0.0.1 127.0.0.2 127.0.0.3
wait_peers 3.5 127.0.0.1 127.0.0.2 127.0.0.3
m=$(mark); sleep 1.5
[ "$(served_since "$m" 127.0.0.3)" -gt 0 ] || fail "the added peer gets no request"
after=$(tries_of 127.0.0.1)
[ "$after" -gt "$before" ] || fail "127.0.0.1's tries went from $before to $after"
pass "127.0.0.3 added: a peer in $e s (bound 3.5 s), $(served_since "$m" 127.0.0.3) requests since; 127.0.0.1's tries carried on ($before -> $after)"

# 3. one removed
hosts 127.0.0.1 127.0.0.3
wait_peers 4.5 127.0.0.1 127.0.0.3
m=$(mark); sleep 1
[ "$(served_since "$m" 127.0.0.2)" = 0 ] || fail "127.0.0.2 served requests after its removal"
pass "127.0.0.2 removed: gone from the peers in $e s (bound 4.5 s: TTL, look, drain deadline), no request since"

# 4. all changed
hosts 127.0.0.2
wait_peers 4.5 127.0.0.2
m=$(mark); sleep 1
for a in 127.0.0.1 127.0.0.3; do
  [ "$(served_since "$m" "$a")" = 0 ] || fail "$a served requests after the change"
done
[ "$(served_since "$m" 127.0.0.2)" -gt 0 ] || fail "127.0.0.2 gets no request"
pass "all changed to 127.0.0.2 in $e s (bound 4.5 s)"

# 4b. nginx -s reload: the name resolved again at start, the peer and its
# state carried on (the same region files), and requests still served
before=$(tries_of 127.0.0.2)
nres_nginx_signal "$work/gw" "$work/gw/nginx.conf" reload || fail "nginx -s reload failed"
sleep 2
[ "$(peers)" = "$(want 127.0.0.2)" ] || fail "peers after the reload: $(peers)"
after=$(tries_of 127.0.0.2)
[ "$after" -gt "$before" ] || fail "127.0.0.2's tries went from $before to $after over the reload"
[ "$(status | json "j.upstreams.backend.names[1].last")" = ok ] || fail "the name after the reload: $(status)"
pass "nginx -s reload: peers $(peers), 127.0.0.2's tries carried on ($before -> $after)"

# 5. one worker resolves: queries in a 3 s window (one A and one AAAA per
# TTL of 1 s: 6, give or take a round; two workers would send 12)
q0=$(grep -c "query\[A*\] app.test" "$work/dnsmasq.log" || true)
sleep 3
q=$(( $(grep -c "query\[A*\] app.test" "$work/dnsmasq.log" || true) - q0 ))
[ "$q" -ge 4 ] && [ "$q" -le 10 ] || fail "$q queries for app.test in 3 s (one resolver: about 6; two: 12)"
pass "one resolver for 2 workers: $q queries (A and AAAA) in 3 s"

# 6. the resolver down
kill "$dns_pid"; wait "$dns_pid" 2>/dev/null || true
sleep 4
[ "$(peers)" = "$(want 127.0.0.2)" ] || fail "peers with the resolver down: $(peers)"
last=$(status | json "j.upstreams.backend.names[1].last")
[ "$last" != ok ] || fail "the name's last result with the resolver down: $last"
n=$(grep -c "app.test did not resolve" "$work/gw/error.log" || true)
[ "$n" = 1 ] || fail "$n log lines for the resolver's failure (one expected): $(grep "did not resolve" "$work/gw/error.log")"
prom nres_name_resolve_failing | grep -q " 1$" || fail "Prometheus: $(prom nres_name_resolve_failing)"
pass "resolver down 4 s: last good set kept, last result \"$last\", one log line, nres_name_resolve_failing 1"

# 7. no failed request
touch "$work/stop"; wait "$loop1" "$loop2"
cat "$work/requests.1" "$work/requests.2" >"$work/requests"
total=$(wc -l <"$work/requests")
bad=$(awk '$2 != 200' "$work/requests" | wc -l)
[ "$bad" = 0 ] || fail "$bad of $total requests failed: $(awk '$2 != 200' "$work/requests" | sort | uniq -c)"
[ "$total" -ge 100 ] || fail "only $total requests in the loops"
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then fail "error.log has errors"; fi
pass "$total requests under the changes, none failed; error.log clean"

# 8. a name that does not resolve: nginx does not start, and says why
# (nginx -t runs no init_by_lua: it cannot see this)
bad_port=$(nres_free_port)
mkdir -p "$work/bad" && chmod 777 "$work/bad"
nres_render "${tpl[0]}" "$work/bad/nginx.conf" "${tpl[@]:1}" PREFIX="$work/bad" PORT="$bad_port" \
  LUA="$repo/lua/?.lua" CHOICE=round-robin POLICY='"gateway"' \
  PEERS="{ \"127.0.0.9:$up_port\", \"nowhere.test:$up_port\" }, $resolve"
out=$(nres_nginx_start "$work/bad" "$work/bad/nginx.conf" 2>&1 || echo "exit $?")
grep -q "peers\[2\]: nowhere.test did not resolve through 127.0.0.1:$dns_port" <<<"$out" &&
  grep -q "exit 1" <<<"$out" || fail "nginx with a name that does not resolve: $out"
pass "nginx refuses to start with a name that does not resolve: $(grep -o 'peers\[2\][^,]*known' <<<"$out" | head -1)"

failed=0

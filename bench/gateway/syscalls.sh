#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/syscalls.sh - a gateway worker's system calls per request
# (issue 12): the kernel side of the gateway's cost, which callgrind.sh
# does not count. Counts, not times: nearly the same from run to run.
#
#   bash bench/gateway/syscalls.sh [--lib build/libnres.so] [N1 N2]
#
# Each gateway runs with one worker in front of the test upstream (spec/
# nginx/nres_upstream.lua, healthy), on 127.0.0.1 high ports, and is warmed
# up (its upstream keepalive connection open). strace follows the worker
# while curl sends N1 requests on one keepalive connection, then N2:
# calls per request = (calls(N2) - calls(N1)) / (N2 - N1), by name, and
# bytes per request written to and read from the client (the accepted
# connection) and the upstream (any other socket). Then strace -c follows
# it under wrk -t1 -c16 -d2s (calls over the requests wrk reports: with
# 16 connections epoll batches events, so these are lower and move a
# little with the machine's load). The gateways:
#   plain        nginx proxy_pass (bench/gateway/nginx.conf.in)
#   plain-lua    the same with lua-nginx-module loaded and the module
#                arm's init_by_lua (bench/gateway/run.sh's nginx-plain-lua)
#   nres-module  nres balancer mode through the nginx module
#                (bench/gateway/nres-module.conf.in)
# Defaults N1=200 N2=1200; about a minute. NRES_SC_VARIANTS narrows a run;
# NRES_KEEP=1 keeps the traces.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

gw_counts_args 200 1200 "$@"
gw_need "$lib" strace curl wrk
gw_scratch sc
export NRES_REGION_DIR_FIXED=$regions
strace_pid=""
cleanup() {
  [ -n "$strace_pid" ] && kill -INT "$strace_pid" 2>/dev/null
  gw_scratch_remove
}
trap cleanup EXIT
gw_test_upstream
lua="$repo/lua/?.lua;${jit_dir}?.lua"

# start NAME: the gateway, one worker, its pid in $worker (not in a
# subshell: the EXIT trap stops the masters this shell started).
worker=""
start() {
  local p="$work/$1"
  mkdir -p "$p/tmp"; chmod 777 "$p"
  case $1 in
    plain|plain-lua)
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="    server 127.0.0.1:$up;" NEXT="proxy_next_upstream off;"
      [ "$1" = plain-lua ] && gw_with_lua "$p" "$gw_port" "{ \"127.0.0.1:$up\" }" "$lua" ;;
    nres-module)
      nres_render "$here/nres-module.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="{ \"127.0.0.1:$up\" }" LUA="$lua" MODULE="$module" ;;
  esac
  sed -i 's/^worker_processes 2;/worker_processes 1;/' "$p/nginx.conf"
  nres_nginx_start "$p" "$p/nginx.conf" >&2
  nres_wait_http "http://127.0.0.1:$gw_port/warm" >&2
  curl -s -o /dev/null "http://127.0.0.1:$gw_port/warm?[1-50]"
  worker=$(pgrep -P "$(cat "$p/nginx.pid")" | head -1)
}

# traced WORKER FILE CMD...: CMD run while strace writes WORKER's calls
# into FILE (strace's own options first in STRACE_OPTS).
traced() {
  local worker=$1 file=$2; shift 2
  # shellcheck disable=SC2086
  strace -qq ${STRACE_OPTS:-} -o "$file" -p "$worker" &
  strace_pid=$!
  sleep 0.5   # attached
  "$@"
  sleep 0.3
  kill -INT "$strace_pid"; wait "$strace_pid" || true; strace_pid=""
}

# tally FILE: "name<TAB>calls" and "bytes:client-out<TAB>n" (and -in,
# upstream-out, upstream-in) of a trace.
tally() {
  awk '
    /^[a-z0-9_]+\(/ {
      name = $0; sub(/\(.*/, "", name); calls[name]++
      fd = $0; sub(/^[a-z0-9_]+\(/, "", fd); sub(/[^0-9].*/, "", fd)
      ret = $0; sub(/.*\) += /, "", ret); sub(/ .*/, "", ret)
      if (ret !~ /^[0-9]+$/) next
      if (name == "accept4") { client[ret] = 1; next }
      if (fd == "") next
      side = (fd in client) ? "client" : "upstream"
      if (name ~ /^(writev|write|sendto|sendmsg|sendfile)$/) bytes[side "-out"] += ret
      if (name ~ /^(readv|read|recvfrom|recvmsg)$/) bytes[side "-in"] += ret
    }
    END {
      for (n in calls) print n "\t" calls[n]
      for (b in bytes) print "bytes:" b "\t" bytes[b]
    }' "$1" | LC_ALL=C sort
}

variants="plain plain-lua"
[ -n "$module" ] && variants="$variants nres-module"
variants=${NRES_SC_VARIANTS:-$variants}
for v in $variants; do
  start "$v"
  for n in "$N1" "$N2"; do
    traced "$worker" "$work/$v.$n.trace" \
      curl -s -o /dev/null "http://127.0.0.1:$gw_port/bench?[1-$n]"
    tally "$work/$v.$n.trace" >"$work/$v.$n.tally"
  done
  STRACE_OPTS="-c -U name,calls" traced "$worker" "$work/$v.wrk" \
    wrk -t1 -c16 -d2s "http://127.0.0.1:$gw_port/bench" >"$work/$v.wrk.out"
  req=$(awk '/requests in/ {print $1}' "$work/$v.wrk.out")
  awk -v req="$req" '$2 ~ /^[0-9]+$/ && $1 != "total" { printf "%s\t%.3f\n", $1, $2 / req }' \
    "$work/$v.wrk" | LC_ALL=C sort >"$work/$v.wrk.tally"
  nres_stop_pid "$(cat "$work/$v/nginx.pid")"
done

# One table: each variant's sequential calls (and bytes) per request, then
# its calls per request under wrk.
echo "| per request | ${variants// / | } |"
echo "|---$(for _ in $variants; do printf '|---'; done)|"
keys=$(for v in $variants; do cut -f1 "$work/$v.$N1.tally" "$work/$v.$N2.tally"; done | LC_ALL=C sort -u)
for k in $keys; do
  printf '| %s |' "$k"
  for v in $variants; do
    a=$(awk -F'\t' -v k="$k" '$1 == k {print $2}' "$work/$v.$N1.tally"); b=$(awk -F'\t' -v k="$k" '$1 == k {print $2}' "$work/$v.$N2.tally")
    awk -v a="${a:-0}" -v b="${b:-0}" -v d=$((N2 - N1)) 'BEGIN { printf " %.2f |", (b - a) / d }'
  done
  echo
done
keys=$(for v in $variants; do cut -f1 "$work/$v.wrk.tally"; done | LC_ALL=C sort -u)
for k in $keys; do
  printf '| wrk -c16: %s |' "$k"
  for v in $variants; do
    c=$(awk -F'\t' -v k="$k" '$1 == k {print $2}' "$work/$v.wrk.tally")
    printf ' %s |' "${c:-0}"
  done
  echo
done

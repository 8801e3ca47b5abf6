#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/signals.sh LIBNRES [MODULE] - nginx's own operator commands
# with nres loaded (issue 26), in both balancer modes: the Lua balancer
# (spec/nginx/balancer.conf.in) and, when MODULE is given, the nginx module
# (spec/nginx/cbalancer.conf.in). Each command is run as Debian's systemd
# unit runs it (lib.sh: nres_nginx_signal, nres_nginx_test), with this
# test's own prefix and configuration; in about 10 s per mode:
#   1. `nginx -t -q` (ExecStartPre) passes;
#   2. `nginx -s reload` (ExecReload, `systemctl reload`) exits 0 and the
#      master has new workers that answer 200 through nres;
#   3. `nginx -s reopen` (logrotate's postrotate) exits 0 and nginx
#      opens a new error.log after the old one was moved away (the
#      master's exit lines of step 4 are in it);
#   4. `nginx -s quit` exits 0 and the master leaves; nginx starts again
#      (`systemctl restart`: stop, then start) and answers 200;
#   5. `nginx -s stop` exits 0 and the master leaves;
#   6. no [emerg], [alert] or [crit] line in error.log.
# The signaller process parses the whole configuration, and runs no
# init_by_lua: the module must not ask it for gw.upstream's names (it did:
# `nres_balancer "backend": expected an upstream declared with peers in
# init_by_lua ... got none`, rc 1). Skipped (exit 0) without nginx's Lua
# module; the module's half without MODULE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
nres_spec_begin signals "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 2)
up_port=${ports[0]}; gw_port=${ports[1]}
gw="http://127.0.0.1:$gw_port"
nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$up_port" SPEC="$here" EXTRA_LISTEN=""
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$up_port/admin"

# workers MASTER: its worker pids, sorted, on one line
workers() { pgrep -P "$1" | sort | tr '\n' ' '; }
# gone PID: wait (5 s) until PID has left
gone() {
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  return 1
}
# has_old: true when a pid in $new was there before the reload ($old)
has_old() {
  local p
  for p in $new; do case " $old " in *" $p "*) return 0 ;; esac; done
  return 1
}
# answers WHAT: a request through the gateway answers 200
answers() {
  local c
  c=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' "$gw/healthy") || true
  [ "$c" = 200 ] || fail "$mode: $1: expected 200 through the gateway, got $c"
}
# signal SIG: nres_nginx_signal for this mode's gateway; fails the test
# with the signaller's own words unless it exits 0 saying nothing alarming
signal() {
  local out
  out=$(nres_nginx_signal "$prefix" "$conf" "$1" 2>&1) ||
    fail "$mode: nginx -s $1 exited non-zero: $out"
  if printf '%s' "$out" | grep -Eq '\[(emerg|alert|crit|error)\]'; then
    fail "$mode: nginx -s $1: $out"
  fi
}

# check_mode MODE TEMPLATE [KEY=VALUE...]: steps 1-6 on a gateway rendered
# from TEMPLATE (one peer, the test upstream).
check_mode() {
  mode=$1
  local tpl=$2 master old new
  shift 2
  prefix="$work/$mode"
  conf="$prefix/nginx.conf"
  mkdir -p "$prefix/tmp" "$prefix/regions"
  nres_render "$tpl" "$conf" PREFIX="$prefix" PORT="$gw_port" LUA="$repo/lua/?.lua" \
    POLICY='"gateway"' CHOICE=p2c PEERS="{ \"127.0.0.1:$up_port\" }" "$@"
  # balancer.conf.in's jit.v logs are not wanted here
  sed -i 's/^env NRES_JITV;//' "$conf"

  nres_nginx_test "$prefix" "$conf" || fail "$mode: nginx -t -q failed"
  nres_nginx_start "$prefix" "$conf"
  master=$(cat "$prefix/nginx.pid")
  nres_wait_http "$gw/nres/status"
  answers "after start"

  old=$(workers "$master")
  signal reload
  # new workers, and the old ones gone (nothing keeps them: no connection)
  for _ in $(seq 1 100); do
    new=$(workers "$master")
    [ -n "$new" ] && ! has_old && break
    sleep 0.05
  done
  [ -n "$new" ] && ! has_old ||
    fail "$mode: no new workers after nginx -s reload (before: $old, now: $new)"
  answers "after nginx -s reload"

  mv "$prefix/error.log" "$prefix/error.log.1"
  signal reopen
  for _ in $(seq 1 100); do
    [ -e "$prefix/error.log" ] && break
    sleep 0.05
  done
  [ -e "$prefix/error.log" ] || fail "$mode: no new error.log after nginx -s reopen"
  answers "after nginx -s reopen"

  signal quit
  gone "$master" || fail "$mode: the master $master is still there after nginx -s quit"
  # the master's last words went to the reopened file
  grep -q "$master#$master: exit" "$prefix/error.log" ||
    fail "$mode: the reopened error.log lacks the master's exit: $(cat "$prefix/error.log")"
  cat "$prefix/error.log.1" "$prefix/error.log" >"$prefix/error.all"
  rm "$prefix/error.log"
  nres_nginx_start "$prefix" "$conf"
  master=$(cat "$prefix/nginx.pid")
  nres_wait_http "$gw/nres/status"
  answers "after a restart"

  signal stop
  gone "$master" || fail "$mode: the master $master is still there after nginx -s stop"
  cat "$prefix/error.log" >>"$prefix/error.all"
  if grep -E '\[(emerg|alert|crit)\]' "$prefix/error.all"; then
    fail "$mode: error.log has the lines above"
  fi
  pass "$mode: nginx -t, -s reload (new workers answer), -s reopen (a new error.log), -s quit, start again, -s stop"
}

check_mode lua "$here/balancer.conf.in"
if [ -n "$module" ] && [ -f "$module" ]; then
  module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
  check_mode module "$here/cbalancer.conf.in" MODULE="$module"
else
  echo "skipped: the module's half (no ngx_http_nres_module.so; needs nginx-dev to build)"
fi
failed=0

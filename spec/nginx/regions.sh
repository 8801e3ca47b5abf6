#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/regions.sh LIBNRES [MODULE] - region files trust nothing
# (issue 28), in a real nginx, in Lua balancer mode and (with MODULE, the
# ngx_http_nres_module.so) in module mode:
#   1. by default the tables live in <prefix>/nres, made 0700, files 0600;
#      a default directory open to others is refused at start, naming it;
#   2. in a world-writable sticky directory (as /dev/shm), files pre-made by
#      user nobody from a real region (valid size, magic, configuration) are
#      not attached: replaced, one [warn] naming the owner; likewise a file
#      of ours with group/other access, and a symbolic link (its target is
#      left alone);
#   3. a full filesystem (a 64 KiB tmpfs): the start fails with an [emerg]
#      saying so, never a signal; at a reload that needs a new, larger
#      table (on a tmpfs with room for one copy only) the reload fails with
#      a [warn], the master lives on and the running workers keep serving
#      from the old tables;
#   4. a region file truncated in place: workers started after it (here:
#      after a kill -9 of the running ones) keep serving from a table of
#      their own with one [alert], never SIGBUS; the next reload makes a
#      new file and the workers share again.
# Needs root (tmpfs mounts, runuser); skipped (exit 0) without it or nginx.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v runuser >/dev/null; then
  echo "skipped: needs root (tmpfs mounts) and runuser"
  exit 0
fi
module=${2:-}
[ -n "$module" ] && [ -f "$module" ] && module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
nres_spec_begin regions "${1:-${NRES_LIB:-}}"   # sets $work
mounts=()
cleanup_mounts() { local m; for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap 'nres_nginx_stop_all; cleanup_mounts; [ "${failed:-1}" = 0 ] && [ -z "${NRES_KEEP:-}" ] && rm -rf "$work" || echo "logs kept in $work"' EXIT

mapfile -t ports < <(nres_free_ports 2)
port=${ports[0]}; uport=${ports[1]}
gw="http://127.0.0.1:$port"
gwp=$work/gw

render() {   # MODE SLOTS
  nres_mode_lines "$1" "$module"
  nres_render "$here/regions.conf.in" "$gwp/nginx.conf" PREFIX="$gwp" PORT="$port" \
    UPORT="$uport" LUA="$repo/lua/?.lua" SLOTS="$2" LOAD="$nres_load" \
    BALANCER="$nres_balancer" ADMIT="$nres_admit"
}
# Start with region directory DIR ("default": nres' own) and SLOTS.
start() {   # MODE DIR SLOTS
  render "$1" "$3"
  : >"$gwp/error.log"
  NRES_REGION_DIR_FIXED=$2 nres_nginx_start "$gwp" "$gwp/nginx.conf"
  nres_wait_http "$gw/"
}
stop() { nres_nginx_stop_all; }
ok200() {   # N: N requests, all 200
  local i code
  for i in $(seq 1 "$1"); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$gw/" || true)
    [ "$code" = 200 ] || return 1
  done
}
no_signal() {   # no worker or master killed by a signal other than our kill -9
  ! grep -E "exited on signal (7|11)" "$gwp/error.log" ||
    fail "a process died of SIGBUS/SIGSEGV"
}
fresh_dir() { rm -rf "$1"; mkdir -p "$1"; }
mode_of() { stat -c %a "$1"; }
owner_of() { stat -c %U "$1"; }
# `nginx -s reload`, as systemd's ExecReload runs it.
reload() { nres_nginx_signal "$gwp" "$gwp/nginx.conf" reload; }
wait_log() {   # PATTERN: until error.log has it (5 s)
  for _ in $(seq 1 100); do grep -qE "$1" "$gwp/error.log" && return 0; sleep 0.05; done
  return 1
}

modes=(lua)
if [ -n "$module" ] && [ -f "$module" ]; then modes+=(module); else echo "note: no module, Lua balancer mode only"; fi

for mode in "${modes[@]}"; do
  echo "== $mode mode"
  # 1. the default directory: private, made by the master
  rm -rf "$gwp/nres"
  start "$mode" default 64
  ok200 5 || fail "$mode: default dir: requests failed"
  [ "$(mode_of "$gwp/nres")" = 700 ] || fail "$mode: $gwp/nres has mode $(mode_of "$gwp/nres"), expected 700"
  n=0
  for f in "$gwp"/nres/*.shm; do
    [ "$(mode_of "$f")" = 600 ] || fail "$mode: $f has mode $(mode_of "$f"), expected 600"
    n=$((n + 1))
  done
  [ "$n" = 2 ] || fail "$mode: expected 2 region files in $gwp/nres, got $n"
  stop
  pass "$mode: default directory $gwp/nres is 0700, its $n files 0600"
  chmod 755 "$gwp/nres"
  render "$mode" 64
  if NRES_REGION_DIR_FIXED=default nres_nginx_start "$gwp" "$gwp/nginx.conf" 2>/dev/null; then
    fail "$mode: started with a default region directory of mode 755"
  fi
  grep -q "region directory $gwp/nres: expected a directory of this user with no group or other access" "$gwp/error.log" ||
    fail "$mode: no line naming the open default directory"
  rm -rf "$gwp/nres"
  pass "$mode: a default directory open to others is refused, named"

  # 2. a shared sticky directory: files made by nobody, open to others, links
  shared=$work/shared
  fresh_dir "$shared"; chmod 1777 "$shared"
  start "$mode" "$shared" 64
  ok200 3 || fail "$mode: requests failed in $shared"
  stop
  scope_file=$(ls "$shared"/*.scope.upstreams.shm)
  peers_file=$(ls "$shared"/*.peers.backend.shm)
  cp "$scope_file" "$work/scope.copy"; cp "$peers_file" "$work/peers.copy"
  chmod 644 "$work/scope.copy" "$work/peers.copy"
  rm -f "$scope_file" "$peers_file"
  runuser -u nobody -- cp "$work/scope.copy" "$scope_file"
  runuser -u nobody -- cp "$work/peers.copy" "$peers_file"
  runuser -u nobody -- chmod 666 "$scope_file" "$peers_file"
  start "$mode" "$shared" 64
  ok200 3 || fail "$mode: requests failed after nobody's files"
  for f in "$scope_file" "$peers_file"; do
    [ "$(owner_of "$f")" = root ] || fail "$mode: $f is $(owner_of "$f")'s: attached"
    [ "$(mode_of "$f")" = 600 ] || fail "$mode: $f has mode $(mode_of "$f")"
  done
  ! grep -q "kept the state in" "$gwp/error.log" || fail "$mode: nobody's file was attached"
  grep -q "owned by uid 65534, not by this process's (0); made a new region there" "$gwp/error.log" ||
    fail "$mode: no [warn] naming nobody's file"
  stop
  pass "$mode: files pre-made by nobody are replaced with one [warn]"

  chmod 640 "$scope_file"
  start "$mode" "$shared" 64
  ok200 2 || fail "$mode: requests failed"
  [ "$(mode_of "$scope_file")" = 600 ] || fail "$mode: a group-readable file was kept"
  grep -q "with group or other access (mode 0640, expected 0600 or 0700); made a new region there" "$gwp/error.log" ||
    fail "$mode: no [warn] naming the group-readable file"
  stop
  pass "$mode: a file of ours with group access is replaced with one [warn]"

  cp -p "$scope_file" "$work/target.shm"; chmod 600 "$work/target.shm"
  before=$(md5sum <"$work/target.shm")
  rm -f "$scope_file"; ln -s "$work/target.shm" "$scope_file"
  start "$mode" "$shared" 64
  ok200 2 || fail "$mode: requests failed"
  [ ! -L "$scope_file" ] || fail "$mode: the symbolic link was followed and kept"
  grep -q "a symbolic link; made a new region there" "$gwp/error.log" ||
    fail "$mode: no [warn] naming the symbolic link"
  [ "$(md5sum <"$work/target.shm")" = "$before" ] || fail "$mode: the link's target was written"
  stop
  pass "$mode: a symbolic link is replaced, its target untouched"

  # 3. a full filesystem: at start, then at a reload needing a new table
  full=$work/full
  fresh_dir "$full"
  mount -t tmpfs -o size=64k,mode=0700 tmpfs "$full"; mounts+=("$full")
  render "$mode" 256
  rc=0
  NRES_REGION_DIR_FIXED=$full nres_nginx_start "$gwp" "$gwp/nginx.conf" 2>/dev/null || rc=$?
  [ "$rc" != 0 ] || fail "$mode: started on a full filesystem"
  no_signal
  grep -q "\[emerg\].*nres: scope \"upstreams\": no room for its region file" "$gwp/error.log" ||
    fail "$mode: no [emerg] for a full filesystem at start"
  [ -z "$(ls "$full")" ] || fail "$mode: files left on the full filesystem: $(ls "$full")"
  umount "$full"; mounts=()
  pass "$mode: a full filesystem at start is one [emerg], no signal"

  # Room for the 64-slot tables, not for the 256-slot one beside them.
  mount -t tmpfs -o size=320k,mode=0700 tmpfs "$full"; mounts+=("$full")
  start "$mode" "$full" 64
  master=$(cat "$gwp/nginx.pid")
  ok200 3 || fail "$mode: requests failed before the reload"
  render "$mode" 256
  reload || fail "$mode: nginx -s reload could not signal the master"
  wait_log "no room for its region file" || fail "$mode: no line for a full filesystem at reload"
  sleep 0.5
  kill -0 "$master" 2>/dev/null || fail "$mode: the master died at the reload"
  grep -q "\[warn\].*nres: scope \"upstreams\": no room for its region file.*the reload fails and the running tables are kept" "$gwp/error.log" ||
    fail "$mode: the reload's full filesystem is not one [warn]"
  ok200 5 || fail "$mode: the running workers stopped serving after the failed reload"
  no_signal
  stop
  umount "$full"; mounts=()
  pass "$mode: a full filesystem at reload is a [warn]; master and tables live on"

  # 4. a file truncated in place
  trunc=$work/trunc
  fresh_dir "$trunc"; chmod 700 "$trunc"
  start "$mode" "$trunc" 64
  master=$(cat "$gwp/nginx.pid")
  ok200 3 || fail "$mode: requests failed"
  scope_file=$(ls "$trunc"/*.scope.upstreams.shm)
  peers_file=$(ls "$trunc"/*.peers.backend.shm)
  truncate -s 0 "$scope_file" "$peers_file"
  for w in $(ps --ppid "$master" -o pid=); do kill -KILL "$w"; done   # the running workers: new ones start after the truncation
  sleep 0.5
  ok200 10 || fail "$mode: requests failed after the truncation"
  no_signal
  grep -q "\[alert\].*was truncated to 0 bytes.*this worker keeps its own fresh table" "$gwp/error.log" ||
    fail "$mode: no [alert] for the truncated file"
  reload
  wait_log "a size of 0 bytes.*made a new region there" || fail "$mode: the reload did not replace the truncated file"
  sleep 0.5
  ok200 5 || fail "$mode: requests failed after the reload"
  [ "$(stat -c %s "$scope_file")" -gt 0 ] || fail "$mode: the reload left the file truncated"
  no_signal
  stop
  pass "$mode: a truncated file: new workers serve from their own table, a reload makes a new file"
done

failed=0

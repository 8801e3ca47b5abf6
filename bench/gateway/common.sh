# SPDX-License-Identifier: MIT
# bench/gateway/common.sh - what the gateway benchmarks (run.sh,
# callgrind.sh, syscalls.sh) share: $repo and spec/nginx/lib.sh, the tools
# and the library they need, their scratch directories, and the counting
# scripts' test upstream.
# shellcheck shell=bash disable=SC2034,SC2154  # work, regions, module, lib, N1, N2: the
#   sourcing script's

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$repo/spec/nginx/lib.sh"

# gw_counts_args N1 N2 [ARG...]: a counting script's arguments,
# [--lib LIB] [N1 N2] (the defaults given first): $lib, $N1 and $N2, or
# exit 2 with the usage.
gw_counts_args() {
  local d1=$1 d2=$2; shift 2
  lib="$repo/build/libnres.so"
  if [ "${1:-}" = --lib ]; then lib=${2:-}; shift 2 || true; fi
  N1=${1:-$d1}; N2=${2:-$d2}
  if ! [[ "$N1" =~ ^[0-9]+$ && "$N2" =~ ^[0-9]+$ ]] || [ "$N2" -le "$N1" ]; then
    echo "usage: $0 [--lib libnres.so] [N1 N2] (whole numbers, N2 > N1)" >&2; exit 2
  fi
}

# gw_need LIB TOOL...: exit 2 naming what is missing (a tool, nginx's Lua
# module, the library); then NRES_LIB is LIB's absolute path and $module
# the nginx module built beside it (runtime/src/ngx), or "" if it is not.
gw_need() {
  local lib=$1 tool; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
  done
  nres_have_nginx_lua || { echo "missing: nginx with libnginx-mod-http-lua" >&2; exit 2; }
  [ -f "$lib" ] || { echo "no $lib: build first (cmake --build build)" >&2; exit 2; }
  NRES_LIB=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  export NRES_LIB
  module=$(dirname "$NRES_LIB")/ngx_http_nres_module.so
  [ -f "$module" ] || module=""
}

# gw_scratch TAG: $work, a directory under /tmp, and $regions, one on the
# /dev/shm tmpfs for nres's region files (as in production: a MAP_SHARED
# file on a disk is written back and stalls the workers). The caller's
# EXIT trap removes both.
gw_scratch() {
  work=$(mktemp -d "/tmp/nres-bench-$1.XXXXXX")
  chmod 755 "$work"
  regions=$(mktemp -d "/dev/shm/nres-bench-$1.XXXXXX")
}

# gw_scratch_remove: what an EXIT trap does after stopping its own
# processes: every nginx started, the region files, and $work (kept, and
# named, with NRES_KEEP=1).
gw_scratch_remove() {
  nres_nginx_stop_all
  rm -rf "$regions"
  if [ -n "${NRES_KEEP:-}" ]; then echo "kept: $work" >&2; else rm -rf "$work"; fi
}

# gw_test_upstream: two free ports, $up and $gw_port, and the test
# upstream (spec/nginx/upstream.conf.in) started on $up in $work/up, with
# $jit_dir, LuaJIT's own modules (for a gateway's lua_package_path).
gw_test_upstream() {
  jit_dir=$(ls -d /usr/share/luajit-2.1*/ 2>/dev/null | head -1)
  mapfile -t ports < <(nres_free_ports 2)
  up=${ports[0]}; gw_port=${ports[1]}
  mkdir -p "$work/up" && chmod 777 "$work/up"
  nres_render_upstream "$work/up" "$up"
  nres_nginx_start "$work/up" "$work/up/nginx.conf"
  nres_wait_http "http://127.0.0.1:$up/admin"
}

# gw_stop PID: a gateway stopped between cells: TERM (nginx's fast
# shutdown, HAProxy's hard stop; no graceful wait), KILL after 2 s.
gw_stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  nres_stop_pid "$1"
}

# gw_with_lua DIR PORT PEERS LUA: DIR/nginx.conf (nginx.conf.in, rendered)
# given the module arm's lua-nginx-module lines and init_by_lua, no nres
# directive: the nginx-plain-lua control arm (PEERS: a Lua list of
# "host:port", LUA: the lua_package_path).
gw_with_lua() {
  local here; here=$(dirname "${BASH_SOURCE[0]}")
  nres_render "$here/nres-module.conf.in" "$1/module.conf" PREFIX="$1" PORT="$2" \
    PEERS="$3" LUA="$4" MODULE=none
  bash "$here/with-lua.sh" "$1/nginx.conf" "$1/module.conf"
}

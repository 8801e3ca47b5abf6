# SPDX-License-Identifier: MIT
# spec/nginx/lib.sh - shared by spec/nginx/run.sh and bench/gateway/run.sh:
# render an nginx.conf template, start nginx under its own prefix, stop it
# by pid. Source it; nothing here starts anything by itself.

NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
NRES_SPEC_NGINX=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NRES_STARTED_PIDS=${NRES_STARTED_PIDS:-}

# nres_spec_begin NAME LIB: the opening of an nginx test script: exits 0
# ("skipped: ...") without nginx's Lua module, 2 without a LIB file;
# exports NRES_LIB (absolute), makes $work (/tmp/nres-NAME.XXXXXX) with
# up/ and gw/ in it, and on exit stops every nginx started and removes
# $work unless the script failed (failed != 0) or NRES_KEEP is set; sets
# failed=1, fail, pass and jit_dir.
nres_spec_begin() {
  local name=$1 lib=$2
  if ! nres_have_nginx_lua; then
    echo "skipped: no nginx lua module (need nginx and libnginx-mod-http-lua)"
    exit 0
  fi
  if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    echo "usage: $0 path/to/libnres.so (got '${lib}')" >&2
    exit 2
  fi
  NRES_LIB=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  export NRES_LIB
  work=$(mktemp -d "/tmp/nres-$name.XXXXXX")
  chmod 755 "$work"
  trap 'nres_nginx_stop_all; [ "${failed:-1}" = 0 ] && [ -z "${NRES_KEEP:-}" ] && rm -rf "$work" || echo "logs kept in $work"' EXIT
  mkdir -p "$work/up" "$work/gw"
  chmod 777 "$work/up" "$work/gw"   # workers may run as nobody
  # What every such script uses: its verdict (failed=0 at the very end
  # keeps no logs), fail/pass lines, and LuaJIT's own modules (jit.v) for
  # lua_package_path.
  failed=1
  fail() { echo "FAIL: $*"; exit 1; }
  pass() { echo "ok: $*"; }
  jit_dir=$(ls -d /usr/share/luajit-2.1*/ 2>/dev/null | head -1)
  [ -n "$jit_dir" ] || jit_dir=/usr/share/luajit-2.1.0-beta3/
}

# nres_have_nginx_lua: 0 when nginx and its Lua module are installed.
nres_have_nginx_lua() {
  [ -x "$NGINX" ] && [ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] &&
    [ -f /usr/lib/nginx/modules/ndk_http_module.so ]
}

# nres_free_port: a TCP port on 127.0.0.1 nobody listens on, taken below
# the kernel's ephemeral range: a port in that range can be held by any
# client socket of a test running beside us (seen: bind() failed with
# "Address already in use" while the HTTP tests were connecting).
nres_free_port() {
  local p low=32768 hi span
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  hi=$(( low > 21000 ? low - 1 : 59999 ))
  span=$(( hi - 20000 ))
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % span))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

# nres_free_ports N: N distinct free ports (nres_free_port), one a line.
nres_free_ports() {
  local out=() p
  while [ "${#out[@]}" -lt "$1" ]; do
    p=$(nres_free_port) || return 1
    case " ${out[*]:-} " in *" $p "*) ;; *) out+=("$p") ;; esac
  done
  printf '%s\n' "${out[@]}"
}

# nres_render_upstream DIR PORT [PORT...]: DIR/nginx.conf for the test
# upstream (upstream.conf.in beside this file, nres_upstream.lua), listening
# on every PORT given; each port is a peer of its own (its own mode and
# counters, set and read through its /admin).
nres_render_upstream() {
  local dir=$1 port=$2 extra="" p
  shift 2
  for p in "$@"; do extra="$extra
    listen 127.0.0.1:$p reuseport;"; done
  nres_render "$NRES_SPEC_NGINX/upstream.conf.in" "$dir/nginx.conf" \
    PREFIX="$dir" PORT="$port" SPEC="$NRES_SPEC_NGINX" EXTRA_LISTEN="$extra"
}

# nres_mode_lines MODE MODULE: what a small gateway template's @LOAD@,
# @BALANCER@ and @ADMIT@ take in MODE, set in nres_load, nres_balancer
# and nres_admit: "module" loads MODULE (ngx_http_nres_module) and uses
# nres_balancer and nres_admit; "lua" uses balancer_by_lua and an
# admission in set_by_lua that answers 503 when refused, with log_by_lua.
nres_mode_lines() {
  if [ "$1" = module ]; then
    nres_load="load_module $2;"
    nres_balancer="nres_balancer;"
    nres_admit="nres_admit backend;"
  else
    nres_load=""
    nres_balancer='balancer_by_lua_block { require("nres.ngx").balance("backend") }'
    nres_admit='set_by_lua_block $nres_ms { return require("nres.ngx").admit("backend") }
      if ($nres_ms = "") { return 503; }
      log_by_lua_block { require("nres.ngx").log() }'
  fi
}

# nres_render TEMPLATE OUT KEY=VALUE...: replace @KEY@ with VALUE.
nres_render() {
  local tpl=$1 out=$2; shift 2
  local sed_args=() kv
  for kv in "$@"; do
    local k=${kv%%=*} v=${kv#*=}
    v=${v//\\/\\\\}; v=${v//|/\\|}; v=${v//&/\\&}; v=${v//$'\n'/\\$'\n'}
    sed_args+=(-e "s|@$k@|$v|g")
  done
  sed "${sed_args[@]}" "$tpl" >"$out"
  if grep -q "@[A-Z_]*@" "$out"; then
    echo "nres_render: unreplaced placeholder in $out:" >&2
    grep -n "@[A-Z_]*@" "$out" >&2
    return 1
  fi
}

# nres_nginx_start PREFIX CONF: test the config, start nginx, wait for its
# pid file. The master's pid is remembered for nres_nginx_stop_all.
# NRES_REGION_DIR_FIXED: the region directory (default PREFIX/regions;
# "default": none set, nres.ngx.files' own default, PREFIX/nres).
# NRES_NGINX_GLOBALS: more main-context directives (nginx -g), e.g.
# "env NRES_LIB;" for a config that does not say it.
nres_nginx_start() {
  local prefix=$1 conf=$2 user=() globals
  mkdir -p "$prefix/tmp" "$prefix/regions"
  # nres's region files (nres.ngx.files) go under the prefix, removed with
  # it, not into /dev/shm; the master reads this at start and on reloads.
  export NRES_REGION_DIR=${NRES_REGION_DIR_FIXED:-$prefix/regions}
  [ "$NRES_REGION_DIR" = default ] && unset NRES_REGION_DIR
  globals=$(nres_nginx_globals)
  [ -n "$globals" ] && user=(-g "$globals")
  "$NGINX" -p "$prefix" -e "$prefix/error.log" -c "$conf" "${user[@]}" -t -q ||
    { echo "nginx -t failed for $conf" >&2; return 1; }
  "$NGINX" -p "$prefix" -e "$prefix/error.log" -c "$conf" "${user[@]}" ||
    { echo "nginx failed to start ($conf):" >&2; tail -5 "$prefix/error.log" >&2; return 1; }
  for _ in $(seq 1 100); do
    [ -s "$prefix/nginx.pid" ] && break
    sleep 0.05
  done
  [ -s "$prefix/nginx.pid" ] || { echo "nginx did not write $prefix/nginx.pid" >&2; return 1; }
  NRES_STARTED_PIDS="$NRES_STARTED_PIDS $(cat "$prefix/nginx.pid")"
}

# nres_nginx_globals: the main-context directives nres_nginx_start passes
# with -g: NRES_NGINX_GLOBALS, and, started as root, "user root root;"
# (nginx would run its workers as nobody, who cannot read a checkout under
# a private directory: mktemp -d is 0700).
nres_nginx_globals() {
  local globals=${NRES_NGINX_GLOBALS:-}
  [ "$(id -u)" = 0 ] && globals="user root root; $globals"
  printf '%s' "$globals"
}

# nres_nginx_signal PREFIX CONF SIGNAL: `nginx -s SIGNAL` (reload, reopen,
# quit, stop) as Debian's systemd unit runs it for `systemctl reload`
# (ExecReload=nginx -g 'daemon on; master_process on;' -s reload), with
# the prefix, configuration and globals nres_nginx_start used. The
# signaller parses the configuration before it signals the master in
# PREFIX's pid file; its output goes to stderr, its status is returned.
nres_nginx_signal() {
  local prefix=$1 conf=$2 sig=$3
  "$NGINX" -p "$prefix" -e "$prefix/error.log" -c "$conf" \
    -g "daemon on; master_process on; $(nres_nginx_globals)" -s "$sig"
}

# nres_nginx_test PREFIX CONF: `nginx -t -q` as the unit's ExecStartPre runs it.
nres_nginx_test() {
  "$NGINX" -p "$1" -e "$1/error.log" -c "$2" \
    -g "daemon on; master_process on; $(nres_nginx_globals)" -t -q
}

# nres_wait_http URL: until it answers (5 s at most).
nres_wait_http() {
  for _ in $(seq 1 100); do
    curl -s -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.05
  done
  echo "no answer from $1" >&2
  return 1
}

# nres_stop_pid PID: QUIT (graceful), then TERM, then KILL; waits for it.
nres_stop_pid() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -QUIT "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
}

# Stop every master this shell started (for an EXIT trap).
nres_nginx_stop_all() {
  local pid
  for pid in $NRES_STARTED_PIDS; do nres_stop_pid "$pid"; done
  NRES_STARTED_PIDS=""
}

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ngx.sh BUILD_DIR MODULEDIR - the installed nginx module: `cmake --install`
# into a temporary prefix puts ngx_http_nres_module.so in MODULEDIR (under
# the prefix), its rpath names the installed libnres ($ORIGIN-relative: it
# resolves there), nginx -t accepts a configuration loading the installed
# file, and an nginx started from it (own prefix, high ports) with no
# NRES_LIB (the Lua side uses the module's own library) declares an
# upstream in init_by_lua that the module finds, and proxies a request
# through it (X-Deadline-Ms set). The Lua balancer, without the module and
# without NRES_LIB, finds the installed library by its soname through the
# system's loader (LD_LIBRARY_PATH stands in for ldconfig's cache of
# /usr/lib or /usr/local/lib). Skipped (exit 0) without nginx's Lua module
# or a module built.
set -euo pipefail
build=$(cd "$1" && pwd)
moddir=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$repo/spec/nginx/lib.sh"
if [ ! -f "$build/ngx_http_nres_module.so" ]; then
  echo "skipped: $build/ngx_http_nres_module.so not built (needs nginx-dev)"
  exit 0
fi
nres_spec_begin ngx-install "$build/libnres.so"   # sets $work, fail, pass

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
module=$prefix/$moddir/ngx_http_nres_module.so
[ -f "$module" ] || fail "no module at $module; installed: $(find "$prefix" -name '*.so*' | tr '\n' ' ')"
lib=$(find "$prefix" -name libnres.so.0 | head -1)
[ -n "$lib" ] || fail "no libnres.so.0 under $prefix"
runpath=$(readelf -d "$module" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
case "$runpath" in
  '$ORIGIN'*) ;;
  *) fail "the installed module's RUNPATH: expected \$ORIGIN/..., got '$runpath'" ;;
esac
resolved=$(ldd "$module" | awk '$1 == "libnres.so.0" {print $3}')
[ "$(readlink -f "$resolved")" = "$(readlink -f "$lib")" ] ||
  fail "the installed module loads libnres from '$resolved', expected $lib"
luadir=$(dirname "$(find "$prefix" -name nres.lua | head -1)")

mapfile -t ports < <(nres_free_ports 2)
peer=${ports[0]}; port=${ports[1]}
cat >"$work/gw/nginx.conf" <<CONF
worker_processes 1;
pid $work/gw/nginx.pid;
error_log $work/gw/error.log warn;
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
load_module $module;
events { worker_connections 64; }
http {
  access_log off;
  lua_package_path "$luadir/?.lua;;";
  init_by_lua_block {
    local gw = require "nres.ngx"
    gw.scope("upstreams", { policy = "gateway" })
    gw.upstream("backend", { scope = "upstreams", peers = { "127.0.0.1:$peer" } })
  }
  upstream backend { server 0.0.0.1; nres_balancer; }
  server {
    listen 127.0.0.1:$peer;
    location / { return 200 "peer deadline=\$http_x_deadline_ms\n"; }
  }
  server {
    listen 127.0.0.1:$port;
    location / {
      nres_admit backend;
      proxy_set_header X-Deadline-Ms \$nres_deadline_ms;
      proxy_pass http://backend;
    }
  }
}
CONF
out=$("$NGINX" -t -p "$work/gw" -e "$work/gw/error.log" -c "$work/gw/nginx.conf" 2>&1) ||
  fail "nginx -t with the installed module: $out"
pass "installed at $moddir, RUNPATH $runpath -> $lib; nginx -t accepts it"

# the Lua face and the module load the same installed library, the
# module's: one registry, and nothing to set
unset NRES_LIB
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "http://127.0.0.1:$port/"
body=$(curl -s "http://127.0.0.1:$port/x")
case "$body" in
  "peer deadline="[1-9]*) ;;
  *) fail "a request through the installed module answered '$body'" ;;
esac
nres_nginx_stop_all
pass "started with no NRES_LIB: a request through the installed module: $body"

# the Lua balancer, no module: the installed library by its soname
sed -e "/load_module \$module;/d" \
    -e 's|nres_balancer;|balancer_by_lua_block { require("nres.ngx").balance("backend") }|' \
    -e 's|nres_admit backend;|set_by_lua_block $nres_deadline_ms { return require("nres.ngx").admit("backend") }|' \
    -e 's|proxy_pass http://backend;|proxy_pass http://backend; log_by_lua_block { require("nres.ngx").log() }|' \
    "$work/gw/nginx.conf" >"$work/gw/lua.conf"
grep -q balancer_by_lua "$work/gw/lua.conf" || fail "no Lua balancer configuration made"
LD_LIBRARY_PATH=$(dirname "$lib") nres_nginx_start "$work/gw" "$work/gw/lua.conf"
nres_wait_http "http://127.0.0.1:$port/"
body=$(curl -s "http://127.0.0.1:$port/x")
case "$body" in
  "peer deadline="[1-9]*) ;;
  *) fail "a request through the Lua balancer answered '$body'" ;;
esac
pass "Lua balancer, no NRES_LIB: libnres.so.0 through the loader: $body"
failed=0

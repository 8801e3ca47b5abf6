#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/findlib.sh BUILD_DIR - finding libnres (issue 26): each nginx
# block of docs/gateway-regions.md and docs/gateway.md marked
# `<!-- readme-test: nginx -->`
# starts as written, with nothing the page does not say: no NRES_LIB in the
# environment, no `env NRES_LIB;`, the default region directory. The
# substitutions are spec/readme/run.sh's (/path/to/nres/build, /path/to/nres,
# 127.0.0.1:8000 the gateway, 127.0.0.1:8080 an nres-depserver); /echo
# through the gateway answers 200 and /nres/status is JSON. Then the
# error without any way to find the library names the ways the page gives.
# The module's block is passed over without a built module.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
docs=(gateway-regions.md gateway.md)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
nres_spec_begin findlib "$build/libnres.so"   # sets $work; exports NRES_LIB
unset NRES_LIB
depserver_pid=
trap 'nres_nginx_stop_all; [ -n "$depserver_pid" ] && kill "$depserver_pid" 2>/dev/null; [ "${failed:-1}" = 0 ] && [ -z "${NRES_KEEP:-}" ] && rm -rf "$work" || echo "logs kept in $work"' EXIT

for page in "${docs[@]}"; do
  awk -v dir="$work" -v page="$page" '
    /^<!-- readme-test: nginx -->/ { want = NR + 1; next }
    /^```nginx/ && NR == want { out = dir "/" page ":" NR; print out >> (dir "/blocks"); next }
    /^```/ && out != "" { close(out); out = ""; next }
    out != "" { print > out }
  ' "$repo/docs/$page"
done
[ -s "$work/blocks" ] || fail "no nginx block marked in ${docs[*]}"

mapfile -t ports < <(nres_free_ports 2)
up=${ports[0]}; gwport=${ports[1]}
"$build/nres-depserver" --no-stdin --port "$up" </dev/null >"$work/depserver.log" 2>&1 &
depserver_pid=$!
nres_wait_http "http://127.0.0.1:$up/echo" || fail "nres-depserver did not start"

n=0
while read -r block; do
  line=${block##*/}   # page:line
  if grep -q 'ngx_http_nres_module\.so' "$block" && [ ! -f "$build/ngx_http_nres_module.so" ]; then
    echo "skipped: docs/$line needs ngx_http_nres_module.so"
    continue
  fi
  ! grep -q 'NRES_LIB' "$block" || fail "docs/$line uses NRES_LIB"
  prefix=$work/gw-${line//[^a-z0-9]/-}
  mkdir -p "$prefix"
  sed -e "s|/path/to/nres/build|$build|g" -e "s|/path/to/nres|$repo|g" \
      -e "s|127\.0\.0\.1:8000|127.0.0.1:$gwport|g" -e "s|127\.0\.0\.1:8080|127.0.0.1:$up|g" \
      "$block" >"$prefix/nginx.conf"
  NRES_REGION_DIR_FIXED=default nres_nginx_start "$prefix" "$prefix/nginx.conf" ||
    fail "docs/$line does not start as written: $(tail -3 "$prefix/error.log")"
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$gwport/echo" || true)
  [ "$code" = 200 ] || fail "docs/$line: /echo gave $code"
  curl -s --max-time 5 "http://127.0.0.1:$gwport/nres/status" |
    luajit -e 'assert(type(require("cjson").decode(io.read("*a"))) == "table")' ||
    fail "docs/$line: /nres/status is not JSON"
  [ -d "$prefix/nres" ] || fail "docs/$line: no default region directory $prefix/nres"
  nres_nginx_stop_all
  pass "docs/$line starts as written, no NRES_LIB: /echo 200, /nres/status JSON"
  n=$((n + 1))
done <"$work/blocks"
[ "$n" -ge 1 ] || fail "no block ran"

# Nothing to find it by: the error names the ways.
out=$(cd "$work" && env -u NRES_LIB LUA_PATH="$repo/lua/?.lua;;" LUA_CPATH="./?.so" \
      LD_LIBRARY_PATH= luajit -e 'require "nres"' 2>&1 || true)
case "$out" in
  *"cannot load libnres"*"lua_package_cpath"*"env NRES_LIB;"*docs/gateway-regions.md*) ;;
  *) fail "the error without a library: $out" ;;
esac
pass "without a library the error names lua_package_cpath, env NRES_LIB and the page"
failed=0

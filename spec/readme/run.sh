#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/readme/run.sh BUILD_DIR - run the code blocks of README.md and of
# every page under docs/ that a user would copy, extracted from the pages
# themselves (not copied into a test), so a change to either side breaks
# the build.
#
# Every ```lua, ```c, ```nginx and ```sh block of those pages must be
# preceded by a marker line saying what to do with it:
#   <!-- readme-test: luajit -->    run with luajit against the build's libnres
#   <!-- readme-test: nresrun -->   a scenario or simulation file: nresrun --quick
#   <!-- readme-test: cc -->        `cmake --install` into a temp prefix, then
#                                   build with gcc and run as README.md's quick
#                                   start says: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig,
#                                   LD_LIBRARY_PATH=PREFIX/lib
#   <!-- readme-test: nginx -->     start it in a real nginx (own prefix, test
#                                   ports), in front of nres-depserver; GET /echo
#                                   and /nres/status through it
#   <!-- readme-test: skip REASON --> not run, and why (e.g. the test command
#                                   itself)
# A block without a marker fails the test: nothing a user copies goes
# untested by accident. For the nginx block only these are substituted:
# /path/to/nres/build (BUILD_DIR: the nginx module's block is passed over
# when it has no ngx_http_nres_module.so), /path/to/nres (the checkout),
# 127.0.0.1:8000 (the gateway's listen),
# 127.0.0.1:8080 or port = 8080 (the upstream, e.g. a balancer peer: a
# depserver started here).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
# The pages, relative to the checkout: README.md, then docs/ in order.
pages=(README.md)
while IFS= read -r page; do pages+=("$page"); done \
  < <(cd "$repo" && find docs -name '*.md' 2>/dev/null | LC_ALL=C sort)
# shellcheck source=spec/nginx/lib.sh
. "$repo/spec/nginx/lib.sh"

work=$(mktemp -d /tmp/nres-readme.XXXXXX)
chmod 755 "$work"
depserver_pid=
cleanup() {
  nres_nginx_stop_all
  [ -n "$depserver_pid" ] && kill "$depserver_pid" 2>/dev/null || true
  if [ "${ok:-0}" = 1 ]; then rm -rf "$work"; else echo "kept: $work"; fi
}
trap cleanup EXIT

passed=0
failed=0
pass() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# Extract: one file per marked block, named by its page and line
# (docs/x.md:LINE), and a list "KIND PAGE:LINE FILE" in $work/blocks.
# Unmarked code blocks are listed in $work/unmarked.
n=0
for page in "${pages[@]}"; do
n=$((n + 1))
awk -v dir="$work" -v page="$page" -v n="$n" '
  function flush() { if (out != "") close(out) }
  /^<!-- readme-test: / {
    marker = $0; sub(/^<!-- readme-test: /, "", marker); sub(/ *-->.*$/, "", marker)
    marked = NR; next
  }
  /^```/ && !inblock {
    lang = substr($0, 4); sub(/[ \t].*$/, "", lang)
    inblock = 1; start = NR + 1
    if (lang == "lua" || lang == "c" || lang == "nginx" || lang == "sh") {
      if (marked == NR - 1) {
        split(marker, w, " ")
        if (w[1] == "skip") { out = "" }
        else {
          out = dir "/block" n "-" NR "." lang
          print w[1], page ":" NR, out >> (dir "/blocks")
        }
      } else {
        out = ""
        print page ":" NR ": a ```" lang " block without a <!-- readme-test: ... --> marker" >> (dir "/unmarked")
      }
    } else { out = "" }
    next
  }
  /^```/ && inblock { inblock = 0; flush(); out = ""; next }
  inblock && out != "" { print > out }
' "$repo/$page"
done

# README.md stays a front page: at most 200 lines, and each quick start's
# code block at most 15 lines (issue 24).
lines=$(wc -l <"$repo/README.md")
[ "$lines" -le 200 ] || fail "README.md has $lines lines: a front page has at most 200 (move the rest to docs/)"
awk '/^## / { qs = ($0 ~ /^## Quick start/) }
     /^```/ { if (inb) { if (qs && n > 15) print "README.md:" start ": a quick start block of " n " lines (at most 15)"; inb = 0 }
              else { inb = 1; n = 0; start = NR }
              next }
     inb { n++ }' "$repo/README.md" >"$work/long"
while read -r line; do fail "$line"; done <"$work/long"

if [ -s "$work/unmarked" ]; then
  while read -r line; do fail "$line"; done <"$work/unmarked"
fi
[ -s "$work/blocks" ] || { fail "README.md and docs/ have no marked code block"; exit 1; }

lib=$build/libnres.so
export LUA_PATH="$repo/lua/?.lua;;"
export NRES_LIB=$lib

run_luajit() {   # FILE LINE
  if (cd "$work" && timeout 60 luajit "$1") >"$1.out" 2>&1; then
    pass "$2 (lua) runs: $(head -c 200 "$1.out" | tr '\n' ' ')"
  else
    fail "$2 (lua) failed:"; cat "$1.out"
  fi
}

run_nresrun() {   # FILE LINE
  if timeout 300 "$build/nresrun" "$1" --quick --out "$work/reports" >"$1.out" 2>&1; then
    pass "$2 (nresrun) runs and reports: $(grep -o 'reports: .*' "$1.out" | head -1)"
  else
    local rc=$?
    # 1 is "a cell is untrusted" (a busy machine misses open-loop
    # arrivals): the file ran; a scenario error is 2.
    if [ "$rc" = 1 ] && grep -q '^reports: ' "$1.out"; then
      pass "$2 (nresrun) runs (some cells untrusted on this machine)"
    else
      fail "$2 (nresrun) exited $rc:"; tail -20 "$1.out"
    fi
  fi
}

prefix=
install_prefix() {   # once: cmake --install into a temp prefix
  [ -n "$prefix" ] && return 0
  prefix=$work/prefix
  cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; return 1; }
}

run_cc() {   # FILE LINE
  install_prefix || { fail "$2 (c): cmake --install failed"; return; }
  local pc flags exe=${1%.c}
  # The variables exactly as README.md's C quick start sets them.
  if ! flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs nres); then
    fail "$2 (c): pkg-config nres failed"; return
  fi
  # shellcheck disable=SC2086
  if ! gcc -std=c11 -Wall -Wextra -Werror -o "$exe" "$1" $flags >"$1.out" 2>&1; then
    fail "$2 (c) does not build against the installed nres.pc:"; cat "$1.out"; return
  fi
  if LD_LIBRARY_PATH=$prefix/lib timeout 30 "$exe" >"$1.out" 2>&1; then
    pass "$2 (c) builds and runs: $(head -c 200 "$1.out" | tr '\n' ' ')"
  else
    fail "$2 (c) exited non-zero:"; cat "$1.out"
  fi
}

# One nginx block: whatever happens in run_nginx_block, the nginx and the
# depserver it started are stopped before the next block (a block that
# failed to start used to leave its depserver running).
run_nginx() {   # FILE LINE
  run_nginx_block "$@"
  nres_nginx_stop_all
  [ -n "$depserver_pid" ] && kill "$depserver_pid" 2>/dev/null
  depserver_pid=
}

run_nginx_block() {   # FILE LINE
  if ! nres_have_nginx_lua; then
    fail "$2 (nginx): nginx or its Lua module is missing"; return
  fi
  local up_port gw_port conf=$work/nginx$2
  up_port=$(nres_free_port); gw_port=$(nres_free_port)
  while [ "$gw_port" = "$up_port" ]; do gw_port=$(nres_free_port); done
  grep -q '127.0.0.1:8000' "$1" || { fail "$2 (nginx): no 'listen 127.0.0.1:8000'"; return; }
  grep -q 'port = 8080\|127\.0\.0\.1:8080' "$1" ||
    { fail "$2 (nginx): no upstream '127.0.0.1:8080' or 'port = 8080'"; return; }
  if grep -q 'ngx_http_nres_module\.so' "$1" && [ ! -f "$build/ngx_http_nres_module.so" ]; then
    pass "$2 (nginx) skipped: no $build/ngx_http_nres_module.so (needs nginx-dev)"
    return
  fi
  mkdir -p "$conf"
  sed -e "s|/path/to/nres/build|$build|g" \
      -e "s|/path/to/nres|$repo|g" -e "s|127\.0\.0\.1:8000|127.0.0.1:$gw_port|g" \
      -e "s|port = 8080|port = $up_port|g" -e "s|127\.0\.0\.1:8080|127.0.0.1:$up_port|g" \
      "$1" >"$conf/nginx.conf"
  "$build/nres-depserver" --no-stdin --port "$up_port" </dev/null >"$conf/depserver.log" 2>&1 &
  depserver_pid=$!
  nres_wait_http "http://127.0.0.1:$up_port/echo" || { fail "$2: depserver did not start"; return; }
  # As a reader starts it: no NRES_LIB. The module, or lua_package_cpath,
  # finds the build's libnres (docs/gateway-regions.md).
  local started=0
  unset NRES_LIB
  nres_nginx_start "$conf" "$conf/nginx.conf" && started=1
  export NRES_LIB=$lib
  [ "$started" = 1 ] ||
    { fail "$2 (nginx) does not start as written:"; tail -5 "$conf/error.log" 2>/dev/null; return; }
  local code status
  code=$(curl -s -o "$conf/echo.out" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$gw_port/echo" || true)
  status=$(curl -s --max-time 5 "http://127.0.0.1:$gw_port/nres/status" || true)
  if [ "$code" = 200 ] && printf '%s' "$status" | luajit -e '
      local t = require("cjson").decode(io.read("*a")); assert(type(t) == "table")' 2>/dev/null; then
    pass "$2 (nginx) starts as written; /echo through it: 200; /nres/status: JSON"
  else
    fail "$2 (nginx): /echo gave $code, /nres/status gave: $(printf '%s' "$status" | head -c 200)"
    tail -5 "$conf/error.log" 2>/dev/null || true
  fi
}

while read -r kind line file; do
  case $kind in
    luajit)  run_luajit "$file" "$line" </dev/null ;;
    nresrun) run_nresrun "$file" "$line" </dev/null ;;
    cc)      run_cc "$file" "$line" </dev/null ;;
    nginx)   run_nginx "$file" "$line" </dev/null ;;
    *)       fail "$line: unknown readme-test kind '$kind'" ;;
  esac
done <"$work/blocks"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && ok=1
[ "$failed" -eq 0 ]

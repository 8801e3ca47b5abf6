#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/with-lua.sh - turns a rendered plain proxy_pass config
# (bench/gateway/nginx.conf.in) into the "plain with Lua" control arm:
# the module arm's lua-nginx-module lines added, no nres directive, so a
# run can tell what loading lua-nginx-module costs by itself.
#
#   bash bench/gateway/with-lua.sh PLAIN_CONF MODULE_CONF
#
# MODULE_CONF is a rendered bench/gateway/nres-module.conf.in. Taken from
# it: the load_module lines of ndk and lua-nginx-module (not the nres
# module's: it would add its phase handler and variable) and its env lines,
# into PLAIN_CONF's main context; its http-context Lua lines, from
# lua_package_path to init_worker_by_lua (its init_by_lua declaring the
# upstream in libnres as the module arm does), at the top of PLAIN_CONF's
# http block. PLAIN_CONF is rewritten in place.
set -euo pipefail

if [ $# != 2 ] || [ ! -f "$1" ] || [ ! -f "$2" ]; then
  echo "usage: $0 PLAIN_CONF MODULE_CONF (both rendered, both present)" >&2; exit 2
fi
plain=$1 module_conf=$2

main=$(grep -E '^(load_module .*/(ndk_http_module|ngx_http_lua_module)\.so;|env )' "$module_conf")
http=$(awk '/^  lua_package_path / { on = 1 } on { print } /^  init_worker_by_lua/ { exit }' \
         "$module_conf")
if [ -z "$main" ] || ! grep -q '^  init_worker_by_lua' <<<"$http"; then
  echo "with-lua.sh: expected load_module lines and lua_package_path .. init_worker_by_lua" \
       "in $module_conf, got none" >&2; exit 1
fi
if ! grep -q '^http {$' "$plain" || ! grep -q '^events ' "$plain"; then
  echo "with-lua.sh: expected an events line and \"http {\" in $plain, got none" >&2; exit 1
fi

awk -v main="$main" -v http="$http" '
  /^events / { print main; print "" }
  { print }
  /^http \{$/ { print http; print "" }' "$plain" >"$plain.with-lua"
mv "$plain.with-lua" "$plain"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# configure.sh NGINX_SRC TREE INCS LIBDIR [RPATH] - configure a copy of nginx's
# source (Debian's nginx-dev: /usr/share/nginx/src, with its configure
# flags in conf_flags, --with-compat among them) into TREE with this
# module added, so `make -f objs/Makefile modules` in TREE builds
# ngx_http_nres_module.so loadable into that nginx, linked with libnres
# from LIBDIR, found at run time in RPATH (default LIBDIR). Never writes into
# NGINX_SRC. About 15 s; CMake runs it again only when this file, the
# module's config or conf_flags change.
set -euo pipefail
src=$1 tree=$2 incs=$3 libdir=$4 rpath=${5:-$4}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tree"
cp -r "$src" "$tree"
cd "$tree"
# shellcheck disable=SC1091
. ./conf_flags
export NRES_NGX_INCS="$incs" NRES_NGX_LIBDIR="$libdir" NRES_NGX_RPATH="$rpath"
# -O2 as Debian builds nginx itself (its --with-cc-opt, which conf_flags
# leaves out): nginx's configure alone compiles with -O, and the module
# runs on every request.
if ! ./configure "${NGX_CONF_FLAGS[@]}" --with-cc-opt=-O2 --add-dynamic-module="$here" \
     >configure.log 2>&1; then
  echo "nginx configure failed (see $tree/configure.log):" >&2
  tail -5 configure.log >&2
  exit 1
fi

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# man.sh BUILD_DIR - the manual pages: `cmake --install` into a temporary
# prefix puts nresrun(1), nres-depserver(1) and nres-syncd(8) (those the
# build has) under share/man; each page is what cmake/manpage.awk makes of
# the installed program's --help today (so a page cannot drift from its
# --help), man renders it without a warning, and it has the sections a
# reader looks for. Nothing outside the temporary directory is written.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
awkfile=$here/../../cmake/manpage.awk
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nres-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "man.sh: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/p" >/dev/null
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
checked=0
for entry in nresrun:1 nres-depserver:1 nres-syncd:8; do
  prog=${entry%:*} section=${entry#*:}
  [ -x "$build/$prog" ] || continue
  page=$tmp/p/share/man/man$section/$prog.$section.gz
  [ -f "$page" ] || fail "no $page after cmake --install"
  [ -x "$tmp/p/bin/$prog" ] || fail "no bin/$prog installed"
  summary=$(zcat "$page" | sed -n '/^\.SH NAME/{n;s/^[^\\]*\\- //p;}')
  "$tmp/p/bin/$prog" --help >"$tmp/help" || fail "$prog --help exited non-zero"
  awk -v name="$prog" -v section="$section" -v summary="$summary" -v version="$version" \
    -f "$awkfile" "$tmp/help" >"$tmp/want"
  zcat "$page" | diff -u "$tmp/want" - >&2 || fail "$prog.$section differs from $prog --help (rebuild?)"
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 >/dev/null || true)
  [ -z "$warnings" ] || fail "$prog.$section: man warns: $warnings"
  for sh in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS"; do
    zcat "$page" | grep -qx "\.SH $sh" || fail "$prog.$section has no $sh section"
  done
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || fail "no program to check in $build"
echo "man.sh: $checked manual pages installed, equal to --help, rendered without warnings"

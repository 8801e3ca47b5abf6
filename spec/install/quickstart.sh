#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# quickstart.sh BUILD_DIR - README.md's C quick start, run as a reader
# runs it: the install line of "From source" (cmake --install build
# --prefix "$HOME/nres"), then the two lines of "Quick start: C" (the
# PKG_CONFIG_PATH and LD_LIBRARY_PATH exports, cc, ./example) on the C
# block saved as example.c, all read from README.md itself. HOME is a
# temporary directory and `build` a link to BUILD_DIR, so the lines run
# exactly as printed and write nothing outside it.
set -euo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nres-quickstart.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "quickstart.sh: $*" >&2; exit 1; }

# The code blocks of a README section: SECTION LANG -> the blocks' lines.
blocks() {
  awk -v section="$1" -v lang="$2" '
    /^## / { in_section = ($0 == "## " section) }
    in_section && /^```/ && !inblock { inblock = 1; want = (substr($0, 4) == lang); next }
    inblock && /^```/ { inblock = 0; next }
    inblock && want { print }
  ' "$repo/README.md"
}
install_line=$(blocks Install sh | grep '^cmake --install build ')
[ -n "$install_line" ] || fail "README.md's Install section has no 'cmake --install build' line"
run_lines=$(blocks "Quick start: C" sh)
[ -n "$run_lines" ] || fail "README.md's C quick start has no sh block"
blocks "Quick start: C" c >"$tmp/example.c"
[ -s "$tmp/example.c" ] || fail "README.md's C quick start has no c block"

ln -s "$build" "$tmp/build"
out=$(cd "$tmp" && env -i PATH="$PATH" HOME="$tmp" bash -euo pipefail -c "$install_line >/dev/null
$run_lines" 2>&1) || fail "the quick start failed as written: $out"
case $out in *"ok after 3 attempts"*) ;; *) fail "unexpected output: $out" ;; esac
echo "quickstart.sh: README.md's C quick start works from a prefix install: $out"

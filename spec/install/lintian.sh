#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# lintian.sh DEB_DIR PACKAGING_CMAKE - lintian on every .deb of DEB_DIR:
# no error, and no warning but those that PACKAGING_CMAKE justifies, each
# on a comment line "lintian-allow: PACKAGE TAG" where the package is
# defined. Informational tags (I:, P:) are not judged. Called by deb.sh on
# the packages it built.
set -euo pipefail
debs=$1
rules=$2
command -v lintian >/dev/null || { echo "lintian.sh: lintian is not installed (.ci/deps)" >&2; exit 1; }
allowed=$(sed -n 's/^#[[:space:]]*lintian-allow:[[:space:]]*\([^[:space:]]*\)[[:space:]]*\([^[:space:]]*\).*/\1: \2/p' "$rules")
out=$(lintian --tag-display-limit 0 "$debs"/*.deb 2>&1 | grep -v 'running with root privileges' || true)
bad=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  case $line in
    E:*) echo "lintian.sh: error: $line" >&2; bad=1 ;;
    W:*)
      # "W: PACKAGE: TAG [detail]" against the allowed "PACKAGE: TAG"
      key=$(printf '%s\n' "$line" | awk '{print $2, $3}')
      if ! printf '%s\n' "$allowed" | grep -qxF "$key"; then
        echo "lintian.sh: warning not justified in $rules: $line" >&2; bad=1
      fi ;;
  esac
done <<<"$out"
[ "$bad" = 0 ] || exit 1
echo "lintian.sh: $(ls "$debs"/*.deb | wc -l) packages: 0 errors, $(grep -c '^W:' <<<"$out" || true) justified warnings"

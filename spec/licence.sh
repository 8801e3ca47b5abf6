#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/licence.sh - every source file git tracks carries the licence's SPDX
# line (C, Lua, shell, CMake, templates), among its first five lines; names
# the files that do not. Data (corpora, results, JSON) and prose are not
# source.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
while IFS= read -r f; do
  case "$f" in
    spec/fuzz/corpus/*|bench/results/*|bench/peers/node_modules/*|*.pc.in|*changelog.in) continue ;;
    *.c|*.h|*.lua|*.sh|*.cmake|*.in|*.rockspec|*.js|*.py|*.awk|CMakeLists.txt|.ci/*|spec/run|runtime/src/ngx/config) ;;
    *) continue ;;
  esac
  [ -f "$f" ] || continue
  if ! head -n 5 "$f" | grep -q "SPDX-License-Identifier: MIT"; then
    echo "no SPDX line: $f"
    missing=$((missing + 1))
  fi
done < <(git ls-files)
if [ "$missing" -ne 0 ]; then
  echo "$missing file(s) without 'SPDX-License-Identifier: MIT' in their first five lines"
  exit 1
fi
echo "every source file carries the MIT licence's SPDX line"

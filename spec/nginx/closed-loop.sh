#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/closed-loop.sh LIBNRES - the plumbing of
# bench/gateway/closed-loop.sh, run with --quick (one fault, 3 s runs, about
# 20 s): it records an access log that nresrun tune reads as an nginx log,
# writes a policy.lua that nres.policy takes and the gateway starts with,
# writes the module's JSON try log that nresrun tune reads as jsonl with no
# line skipped (so $nres_tries agrees with nginx's $upstream_status on every
# request), and a report with a predicted and a measured row per policy.
# Only such deterministic properties: the figures are the benchmark's.
# Skipped (exit 0) when nginx, its Lua module, wrk or the module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
lib=${1:-$repo/build/libnres.so}
if ! command -v wrk >/dev/null || ! nres_have_nginx_lua ||
   [ ! -f "$(dirname "$lib")/ngx_http_nres_module.so" ]; then
  echo "skipped: needs wrk, nginx with its Lua module, and ngx_http_nres_module.so beside $lib"
  exit 0
fi
keep=$(mktemp -d /tmp/nres-spec-closed-loop.XXXXXX)
trap 'rm -rf "$keep"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash "$repo/bench/gateway/closed-loop.sh" --lib "$lib" --quick --out "$keep/report.md" --keep "$keep/run" ||
  fail "closed-loop.sh --quick exited $?"
d="$keep/run/failures/1"
[ -s "$d/tune/policy.lua" ] || fail "no policy.lua written"
export LUA_PATH="$repo/lua/?.lua;;" NRES_LIB=$lib
luajit - "$d" <<'EOF' || fail "see above"
local d = arg[1]
local trace = require "nresrun.tune.trace"
local p = require("nres.policy").new(dofile(d .. "/tune/policy.lua"), 1)
assert(p, "policy.lua does not load")
local rec = assert(trace.read(d .. "/record/access.log"))
assert(rec.format == "nginx", "the recorded log read as " .. rec.format)
assert(rec.skipped == 0, rec.skipped .. " lines of the recorded log skipped: " .. table.concat(rec.warnings, "; "))
for _, arm in ipairs { "tuned", "default" } do
  local t = assert(trace.read(d .. "/" .. arm .. "/tries.log"))
  assert(t.format == "jsonl", arm .. "'s try log read as " .. t.format)
  assert(t.skipped == 0, arm .. ": " .. t.skipped .. " lines skipped: " .. table.concat(t.warnings, "; "))
  local tries = 0
  for _, r in ipairs(t.requests) do tries = tries + #r.tries end
  assert(tries >= #t.requests, arm .. ": fewer tries than requests")
end
EOF
for arm in tuned default; do
  for kind in "predicted" "predicted, the gateway's tries" "measured"; do
    grep -Eq "^\| failures \| $arm \| $kind( \| [0-9.]+){5} \|$" "$keep/report.md" ||
      fail "no $kind row for $arm in the report: $(cat "$keep/report.md")"
  done
done
echo "ok: record, tune, policy, try logs, report"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/chaos.sh - the chaos soak: a gateway in front of three peers under
# wrk while a seeded script breaks things, then a check that nothing stayed
# broken. Usage:
#   bash bench/chaos.sh LIBNRES [MODULE] [NRES_SYNCD]
# Environment:
#   NRES_CHAOS_SECONDS  how long faults are injected, per mode (default 30)
#   NRES_CHAOS_SEED     the fault script's seed (default 1)
#   NRES_CHAOS_MODES    "module lua" (default; module needs MODULE)
#   NRES_CHAOS_REPORT   a Markdown file to append the figures to
#
# The faults, drawn one every 0.2-0.8 s by bash's RANDOM seeded with the
# seed: kill -9 of a gateway worker, `nginx -s reload`, a peer flapping
# (down, then back), a peer hanging (answers after 3 s), a burst of client
# aborts against a hanging peer, and with redis-server and nres-syncd
# (--breaker) both installed: Redis killed and restarted, or stopped
# (SIGSTOP) and continued.
#
# Afterwards, with every peer healthy and Redis running, it waits for the
# last hung try (3 s), break_for and the probe lease, with light traffic
# (NRES_CHAOS_SETTLE seconds; NRES_CHAOS_TRACE=1 prints the peers' states
# each second meanwhile), and requires:
#   - every breaker (the upstream's, each peer's) closed, so no probe
#     permit is out (a closed breaker holds none);
#   - each key's calls equal to the sum of its stops, exactly;
#   - the region directory holds the same files as before the faults;
#   - error.log: no [crit] or [emerg], and [alert] lines only for the
#     workers this script killed.
# Exits 0 when every mode passed, 1 otherwise; prints the figures
# (requests, faults by kind, wedges, probe permits whose lease expired)
# and appends them to the report.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
spec=$repo/spec/nginx
# shellcheck source=spec/nginx/lib.sh
. "$spec/lib.sh"

seconds=${NRES_CHAOS_SECONDS:-30}
seed=${NRES_CHAOS_SEED:-1}
modes=${NRES_CHAOS_MODES:-module lua}
report=${NRES_CHAOS_REPORT:-}
module=${2:-}
syncd=${3:-}
case "$seconds" in ''|*[!0-9]*) echo "NRES_CHAOS_SECONDS: a whole number of seconds expected, got '$seconds'" >&2; exit 2 ;; esac
case "$seed" in ''|*[!0-9]*) echo "NRES_CHAOS_SEED: a whole number expected, got '$seed'" >&2; exit 2 ;; esac
command -v wrk >/dev/null || { echo "skipped: no wrk"; exit 0; }
if [ -n "$module" ] && [ -f "$module" ]; then
  module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
else
  module=""
fi
fleet=0
if [ -n "$syncd" ] && [ -x "$syncd" ] && command -v redis-server >/dev/null; then fleet=1; fi

nres_spec_begin chaos "${1:-${NRES_LIB:-}}"   # sets $work, fail, pass
pids=()
trap 'for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null || true; done
      nres_nginx_stop_all
      [ "${failed:-1}" = 0 ] && [ -z "${NRES_KEEP:-}" ] && rm -rf "$work" || echo "logs kept in $work"' EXIT

json() { luajit "$spec/json.lua" "$1"; }
break_for=2

# run_mode MODE: one soak; sets the figures below, returns 1 on a wedge.
run_mode() {
  local mode=$1 dir=$work/$mode
  local conf_in ports up_port p2 p3 gw_port redis_port redis_pid=""
  mkdir -p "$dir/up" "$dir/gw" "$dir/redis"
  chmod 777 "$dir/up" "$dir/gw"
  mapfile -t ports < <(nres_free_ports 5)
  up_port=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}; redis_port=${ports[4]}
  local peers=("$up_port" "$p2" "$p3")
  nres_render "$spec/upstream.conf.in" "$dir/up/nginx.conf" \
    PREFIX="$dir/up" PORT="$up_port" SPEC="$spec" EXTRA_LISTEN="
    listen 127.0.0.1:$p2 reuseport;
    listen 127.0.0.1:$p3 reuseport;"
  local policy="{ base = \"gateway\", breaker = { break_for = $break_for, break_max = $break_for } }"
  local peer_list="{ \"127.0.0.1:$up_port\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\" }"
  if [ "$mode" = module ]; then
    nres_render "$spec/cbalancer.conf.in" "$dir/gw/nginx.conf" \
      PREFIX="$dir/gw" PORT="$gw_port" LUA="$repo/lua/?.lua" MODULE="$module" \
      POLICY="$policy" CHOICE=p2c PEERS="$peer_list"
  else
    nres_render "$spec/balancer.conf.in" "$dir/gw/nginx.conf" \
      PREFIX="$dir/gw" PORT="$gw_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
      POLICY="$policy" CHOICE=p2c PEERS="$peer_list"
  fi
  # Peers' breaks do not grow here (by default an ejection's break doubles
  # up to 30 s): the bound checked at the end is break_for + the lease.
  sed -i "s|gw.upstream(\"backend\", { scope = \"upstreams\",|gw.upstream(\"backend\", { scope = \"upstreams\", eject = { break_for = $break_for, break_max = $break_for },|" "$dir/gw/nginx.conf"
  grep -q "eject = { break_for" "$dir/gw/nginx.conf" || fail "$mode: could not set the peers' eject in $dir/gw/nginx.conf"
  if [ "$fleet" = 1 ]; then
    sed -i "s|gw.upstream(\"backend\"|gw.fleet(\"$dir/gw/fleet.json\")\n    gw.upstream(\"backend\"|" "$dir/gw/nginx.conf"
  fi
  nres_nginx_start "$dir/up" "$dir/up/nginx.conf"
  nres_nginx_start "$dir/gw" "$dir/gw/nginx.conf"
  local gw="http://127.0.0.1:$gw_port" master
  master=$(cat "$dir/gw/nginx.pid")
  nres_wait_http "http://127.0.0.1:$up_port/admin"
  nres_wait_http "$gw/nres/status"
  admin() { curl -sf --max-time 2 "http://127.0.0.1:$1/admin?$2" >/dev/null || true; }
  for p in "${peers[@]}"; do admin "$p" "mode=healthy&reset=1"; done
  for i in $(seq 1 30); do curl -s -o /dev/null "$gw/warm$i"; done

  redis_start() {
    redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" \
      --save "" --appendonly no --daemonize no >>"$dir/redis/log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
  }
  if [ "$fleet" = 1 ]; then
    redis_start
    local file
    file=$(ls "$dir"/gw/regions/*.scope.upstreams.shm 2>/dev/null | head -1)
    [ -n "$file" ] || fail "$mode: no scope region file under $dir/gw/regions"
    "$syncd" --region "$file=upstreams" --redis "127.0.0.1:$redis_port" --interval 50 \
      --fleet chaos --breaker --node "chaos-$mode" --status "$dir/gw/fleet.json" \
      >"$dir/syncd.log" 2>&1 </dev/null &
    pids+=($!)
  fi
  local regions_before
  regions_before=$(ls "$dir/gw/regions" | sort | tr '\n' ' ')

  # Load: wrk for the whole soak, plus the fault script below.
  wrk -t1 -c16 -d"$((seconds + 2))"s --timeout 4s "$gw/load" >"$dir/wrk.txt" 2>&1 &
  local wrk_pid=$!
  pids+=("$wrk_pid")

  local kills=0 reloads=0 flaps=0 hangs=0 aborts=0 redis_kills=0 redis_stops=0
  local end=$((SECONDS + seconds)) action victim w
  RANDOM=$seed
  while [ "$SECONDS" -lt "$end" ]; do
    action=$((RANDOM % 8))
    victim=${peers[$((RANDOM % 3))]}
    case $action in
      0) w=$(pgrep -P "$master" | shuf -n1 --random-source=<(yes "$seed") || true)
         if [ -n "$w" ]; then kill -9 "$w" 2>/dev/null && kills=$((kills + 1)) || true; fi ;;
      1) "$NGINX" -p "$dir/gw" -e "$dir/gw/error.log" -c "$dir/gw/nginx.conf" \
           ${NRES_NGINX_GLOBALS_CHAOS:-} -s reload >/dev/null 2>&1 ||
           kill -HUP "$master"
         reloads=$((reloads + 1)) ;;
      2) admin "$victim" "mode=down"; flaps=$((flaps + 1)) ;;
      3) admin "$victim" "mode=healthy" ;;
      4) admin "$victim" "mode=healthy&delay=3000"; hangs=$((hangs + 1)) ;;
      5) for i in 1 2 3 4 5; do curl -s -o /dev/null --max-time 0.05 "$gw/abort$i" & done
         aborts=$((aborts + 5)) ;;
      6) if [ "$fleet" = 1 ]; then
           if kill -0 "$redis_pid" 2>/dev/null; then
             kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_kills=$((redis_kills + 1))
           else redis_start; fi
         fi ;;
      7) if [ "$fleet" = 1 ] && kill -0 "$redis_pid" 2>/dev/null; then
           kill -STOP "$redis_pid"; sleep 0.3; kill -CONT "$redis_pid"; redis_stops=$((redis_stops + 1))
         fi ;;
    esac
    sleep "0.$((2 + RANDOM % 7))"
  done
  wait "$wrk_pid" 2>/dev/null || true

  # Recovery: every peer healthy, Redis up, then break_for plus a lease
  # bound (the attempt timeout of the gateway preset and a margin) and
  # light traffic so half-open breakers see their probes.
  for p in "${peers[@]}"; do admin "$p" "mode=healthy"; done
  if [ "$fleet" = 1 ] && ! kill -0 "$redis_pid" 2>/dev/null; then redis_start; fi
  # The bound: a try that started while its peer hung ends as a failure up
  # to the hang (3 s) after the peer is healthy again and may eject it
  # once more; then break_for, then the probe's lease (break_for), and a
  # margin for the probes' own requests.
  local settle=${NRES_CHAOS_SETTLE:-$((3 + 2 * break_for + 3))}
  local t_end=$((SECONDS + settle))
  while [ "$SECONDS" -lt "$t_end" ]; do
    curl -s -o /dev/null --max-time 5 "$gw/settle"; sleep 0.05
    if [ -n "${NRES_CHAOS_TRACE:-}" ]; then
      curl -sf --max-time 5 "$gw/nres/status" | json '(function() local t = {}
        for _, u in pairs(j.upstreams or {}) do for _, p in ipairs(u.peers) do
          t[#t + 1] = p.state .. "/" .. (p.recent_tries or "?") .. "/" .. string.format("%.1f", p.score_ms or -1) end end
        return table.concat(t, " ") end)()' | sed "s/^/$SECONDS s: /"
    fi
  done
  local st wedges=0 bad=""
  st=$(curl -sf --max-time 5 "$gw/nres/status")
  printf '%s\n' "$st" >"$dir/status.json"
  local open_keys open_peers mismatched lapsed
  open_keys=$(printf '%s' "$st" | json '(function() local n = 0
      for _, s in pairs(j.scopes) do for _, k in ipairs(s.keys) do
        if k.breaker and k.breaker ~= "closed" then n = n + 1 end end end return n end)()')
  open_peers=$(printf '%s' "$st" | json '(function() local n = 0
      for _, u in pairs(j.upstreams or {}) do for _, p in ipairs(u.peers) do
        if p.state ~= "closed" then n = n + 1 end end end return n end)()')
  mismatched=$(printf '%s' "$st" | json '(function() local out = {}
      for name, s in pairs(j.scopes) do for _, k in ipairs(s.keys) do
        local sum = 0 for _, n in pairs(k.stops) do sum = sum + n end
        if sum ~= k.calls then out[#out + 1] = name .. "/" .. k.key .. " calls " .. k.calls .. " stops " .. sum end
      end end return table.concat(out, "; ") end)()')
  lapsed=$(printf '%s' "$st" | json '(function() local n = 0
      for _, s in pairs(j.scopes) do for _, k in ipairs(s.keys) do
        n = n + (k.leases_expired or 0) end end
      for _, u in pairs(j.upstreams or {}) do for _, p in ipairs(u.peers) do
        n = n + (p.leases_expired or 0) end end return n end)()')
  wedges=$((open_keys + open_peers))
  [ "$wedges" -eq 0 ] || bad="$bad; $open_keys breaker(s) and $open_peers peer(s) not closed ${settle} s after recovery"
  [ -z "$mismatched" ] || bad="$bad; calls != sum(stops): $mismatched"
  local regions_after
  regions_after=$(ls "$dir/gw/regions" | sort | tr '\n' ' ')
  [ "$regions_after" = "$regions_before" ] || bad="$bad; region files changed: [$regions_before] -> [$regions_after]"
  local alerts crits
  alerts=$(grep -c "\[alert\]" "$dir/gw/error.log" || true)
  local killed_alerts
  killed_alerts=$(grep "\[alert\]" "$dir/gw/error.log" | grep -c "exited on signal 9" || true)
  crits=$(grep -cE "\[(crit|emerg)\]" "$dir/gw/error.log" || true)
  [ "$crits" -eq 0 ] || bad="$bad; $crits [crit]/[emerg] line(s): $(grep -E "\[(crit|emerg)\]" "$dir/gw/error.log" | head -3)"
  [ "$alerts" -eq "$killed_alerts" ] || bad="$bad; [alert] lines beyond the kills: $(grep "\[alert\]" "$dir/gw/error.log" | grep -v "exited on signal 9" | head -3)"
  local requests
  requests=$(awk '/requests in/ { print $1 }' "$dir/wrk.txt")
  local line
  line="| $mode | $seed | $seconds | ${requests:-?} | $kills | $reloads | $flaps | $hangs | $aborts | $redis_kills | $redis_stops | $wedges | ${lapsed:-0} |"
  echo "$line"
  [ -n "$report" ] && echo "$line" >>"$report"
  nres_nginx_stop_all
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
  done
  pids=()
  if [ -n "$bad" ]; then echo "FAIL: $mode:${bad#;}"; return 1; fi
  pass "$mode: ${requests:-?} requests, $kills kills, $reloads reloads, $((flaps + hangs + aborts + redis_kills + redis_stops)) other faults; every breaker closed ($lapsed probe permits given back by their lease), calls == sum(stops), no region file leaked, no [alert] beyond the kills"
}

header="| mode | seed | s | requests | kills | reloads | flaps | hangs | aborts | redis kills | redis stops | wedges | leases expired |"
echo "$header"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
if [ -n "$report" ] && [ ! -s "$report" ]; then
  printf '%s\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n' "$header" >"$report"
fi
status=0
for mode in $modes; do
  case $mode in
    module) [ -n "$module" ] || { echo "skipped module mode: no ngx_http_nres_module.so"; continue; } ;;
    lua) ;;
    *) echo "NRES_CHAOS_MODES: 'module' or 'lua' expected, got '$mode'" >&2; exit 2 ;;
  esac
  run_mode "$mode" || status=1
done
[ "$fleet" = 1 ] || echo "note: no redis-server or nres-syncd: the fleet faults were not injected"
[ "$status" -eq 0 ] && failed=0
exit "$status"

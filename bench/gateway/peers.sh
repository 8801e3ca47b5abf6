#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/peers.sh - peers that come and go under load (issue 25):
# a rolling deploy, a scale out and in, and a peer that hangs while the
# upstream is idle; nginx, HAProxy and nres side by side.
#
#   bash bench/gateway/peers.sh [--rolling] [--scale] [--idle-hang] [--out FILE.md]
#        [--lib build/libnres.so] [--arms "nginx haproxy nres-module ..."] [--smoke]
#
# No scenario named: all three. Writes FILE.md (verdict first) and
# FILE.json. --smoke: the nres arm's rolling deploy alone, short (the
# ctest bench_peers_smoke); the exit status is 10 when that deploy, made
# through the control API's membership actions, failed a request. About 3 minutes for the whole run on 2 cores.
#
# Each peer is its own test upstream (spec/nginx/nres_upstream.lua, one
# worker) on its own port, so it can be stopped and a new one started on a
# new port. The arms and how each changes its peers:
#   nginx          proxy_pass, proxy_next_upstream error timeout http_502..504
#                  (3 tries), passive checks (max_fails=1 fail_timeout=10s):
#                  the upstream block rewritten and `nginx -s reload` per change
#   haproxy        retries 2 + redispatch, HTTP checks (GET /_health, 0.5 s,
#                  fall 2, rise 2), slowstart 2 s: the runtime API on a stats
#                  socket (set server state drain / maint, add server, del server)
#   nres-module    the nginx module (balancer mode, no Lua per request),
#   nres-balancer  the Lua balancer: both with health checks (GET /_health
#                  every 0.5 s, 2 failures eject) and slow_start 2 s; peers
#                  changed with the control API (drain, remove, add) when the
#                  build has the membership actions, otherwise drain through the
#                  API and a reload with the new peer list (said in the report)
# Scenarios (wrk, 2 threads, 8 connections, --timeout 5s, on /bench):
#   rolling    steady: wrk for STEADY s, nothing changes; then wrk while the
#              3 peers are replaced one by one: drain, 1 s, stop (graceful),
#              remove, start a new peer on a new port, add, 0.5 s; wrk stopped
#              1 s after the last step. Failed = non-2xx + socket errors.
#   scale      wrk while 3 peers become 6 (3 new ones started and added at
#              once) and, 5 s later, 3 again (the new ones drained, 1 s,
#              stopped, removed); every peer's request count sampled each
#              0.5 s: the time until each new peer's share of a window is at
#              least 0.8 of an equal share.
#   idle-hang  no traffic; one peer starts answering nothing (every request
#              and health check waits 30 s); 3 s later wrk for 3 s: the client
#              requests the hung peer received, failed, p99.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

lib="$repo/build/libnres.so"
out_md="$repo/bench/results/peers-$(date +%Y-%m-%d).md"
scenarios="" arms_given="" smoke=""
SLOW_START=2   # s: nres slow_start and HAProxy slowstart
STEADY=4; DRAIN_S=1; GAP_S=0.5; SCALE_HOLD=5; HANG_WAIT=3; HANG_D=3
while [ $# -gt 0 ]; do
  case $1 in
    --rolling|--scale|--idle-hang) scenarios="$scenarios ${1#--}"; shift ;;
    --out) out_md=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --arms) arms_given=$2; shift 2 ;;
    --smoke) smoke=1; scenarios=" rolling"; STEADY=1; DRAIN_S=0.3; GAP_S=0.2; shift ;;
    *) echo "usage: $0 [--rolling] [--scale] [--idle-hang] [--out FILE.md] [--lib LIB]" \
            "[--arms \"nginx haproxy nres-module nres-balancer\"] [--smoke]" >&2; exit 2 ;;
  esac
done
[ -n "$scenarios" ] || scenarios=" rolling scale idle-hang"
case $out_md in *.md) ;; *) echo "--out: expected a FILE.md, got '$out_md'" >&2; exit 2 ;; esac
gw_need "$lib" wrk curl luajit
[ -n "$smoke" ] || gw_need "$lib" haproxy
nres_arm=nres-balancer; [ -n "$module" ] && nres_arm=nres-module
arms=${arms_given:-nginx haproxy $nres_arm}
[ -n "$smoke" ] && arms=${arms_given:-$nres_arm}
for a in $arms; do
  case $a in
    nginx|haproxy|nres-balancer) ;;
    nres-module) [ -n "$module" ] || { echo "--arms: nres-module, but no module beside $lib" >&2; exit 2; } ;;
    *) echo "--arms: expected nginx, haproxy, nres-module or nres-balancer, got '$a'" >&2; exit 2 ;;
  esac
done

# The membership actions (add, remove) come with the upstream's max_peers:
# room for the peers added at run time (declared there when the Lua face
# takes it; the control API is asked again once a gateway runs).
max_peers=""
if LUA_PATH="$repo/lua/?.lua;;" luajit -e '
  local gw = require "nres.ngx"
  gw.scope("s", { policy = "gateway" })
  os.exit(pcall(gw.upstream, "b", { scope = "s", peers = { "127.0.0.1:1" }, max_peers = 16 })
          and 0 or 1)' 2>/dev/null; then
  max_peers=" max_peers = 16,"
fi

gw_scratch peers
haproxy_pid="" wrk_pid="" sampler_pid=""
cleanup() {
  [ -n "$wrk_pid" ] && kill "$wrk_pid" 2>/dev/null
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
  [ -n "$haproxy_pid" ] && kill -TERM "$haproxy_pid" 2>/dev/null
  gw_scratch_remove
}
trap cleanup EXIT
jit_dir=$(ls -d /usr/share/luajit-2.1*/ 2>/dev/null | head -1)
tsv=$work/results.tsv; : >"$tsv"
started=$(date +%s)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# --- peers: one test upstream each ---------------------------------------
declare -A peer_pid
peer_start() {   # PORT...
  local p d
  for p in "$@"; do
    d=$work/peer-$p; mkdir -p "$d" && chmod 777 "$d"
    nres_render_upstream "$d" "$p"
    sed -i 's/^worker_processes 2;/worker_processes 1;/' "$d/nginx.conf"
    NRES_UPSTREAM_DEADLINES=off nres_nginx_start "$d" "$d/nginx.conf"
    peer_pid[$p]=$(cat "$d/nginx.pid")
  done
  for p in "$@"; do nres_wait_http "http://127.0.0.1:$p/admin"; done
}
peer_stop() {    # PORT...: graceful (QUIT: requests in flight finish), all at once
  local p
  for p in "$@"; do kill -QUIT "${peer_pid[$p]}" 2>/dev/null || true; done
  for p in "$@"; do nres_stop_pid "${peer_pid[$p]}"; unset "peer_pid[$p]"; done
}
peer_admin() { curl -sf "http://127.0.0.1:$1/admin?$2"; }
peer_requests() { peer_admin "$1" "" | grep -o '"requests":[0-9]*' | cut -d: -f2; }
new_ports() { nres_free_ports "$1"; }

# --- gateways ------------------------------------------------------------
# live: the peers the gateway is configured with now (ports)
live=() gw_port="" gw_pid="" gw_dir="" hsock="" membership=""
lua_peers() { local s="" p; for p in "${live[@]}"; do s="$s\"127.0.0.1:$p\", "; done; echo "{ ${s%, } }"; }

render_gateway() {
  local a=$1 d=$gw_dir p servers=""
  case $a in
    nginx)
      for p in "${live[@]}"; do servers="$servers    server 127.0.0.1:$p max_fails=1 fail_timeout=10s;
"; done
      nres_render "$here/nginx.conf.in" "$d/nginx.conf" PREFIX="$d" PORT="$gw_port" \
        PEERS="$servers" \
        NEXT="proxy_next_upstream error timeout http_502 http_503 http_504; proxy_next_upstream_tries 3;" ;;
    nres-module|nres-balancer)
      local tpl=$here/nres-balancer.conf.in mod=()
      [ "$a" = nres-module ] && tpl=$here/nres-module.conf.in mod=(MODULE="$module")
      # the upstream's declaration gets health checks and slow start after
      # its peer list, and the server a control location
      nres_render "$tpl" "$d/nginx.conf" PREFIX="$d" PORT="$gw_port" "${mod[@]}" \
        LUA="$repo/lua/?.lua;${jit_dir}?.lua" PEERS="$(lua_peers), slow_start = $SLOW_START,$max_peers
      health = { path = \"/_health\", interval = 0.5, timeout = 0.3, unhealthy = 2, healthy = 2 }"
      sed -i 's|^    location = /nres/status {|    location = /nres/control { content_by_lua_block { require("nres.ngx").control() } }\n&|' \
        "$d/nginx.conf"
      grep -q 'location = /nres/control' "$d/nginx.conf" ||
        { echo "peers.sh: no /nres/status location in $tpl to put the control location beside" >&2; exit 1; } ;;
  esac
}

hcmd() {   # one HAProxy runtime API command over its stats socket (TCP)
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$hsock"
  printf '%s\n' "$1" >&3
  reply=$(cat <&3); exec 3<&-
  printf '%s' "$reply"
}
hserver() { echo "p$1 127.0.0.1:$1 check inter 500ms fall 2 rise 2 slowstart ${SLOW_START}s maxconn 1000"; }

start_gateway() {   # ARM PORT...
  local a=$1; shift
  live=("$@"); gw_port=$(nres_free_port); gw_dir=$work/gw-$a
  rm -rf "$gw_dir"; mkdir -p "$gw_dir/tmp"; chmod 777 "$gw_dir"
  if [ "$a" = haproxy ]; then
    local p servers="  option httpchk GET /_health
  timeout check 300ms"
    for p in "${live[@]}"; do servers="$servers
  server $(hserver "$p")"; done
    hsock=$(nres_free_port)
    while [ "$hsock" = "$gw_port" ]; do hsock=$(nres_free_port); done
    nres_render "$here/haproxy.cfg.in" "$gw_dir/haproxy.cfg" PREFIX="$gw_dir" PORT="$gw_port" \
      SERVERS="$servers"
    printf 'global\n  stats socket ipv4@127.0.0.1:%s level admin\n' "$hsock" >"$gw_dir/api.cfg"
    haproxy -q -f "$gw_dir/haproxy.cfg" -f "$gw_dir/api.cfg"
    for _ in $(seq 1 100); do [ -s "$gw_dir/haproxy.pid" ] && break; sleep 0.05; done
    haproxy_pid=$(head -1 "$gw_dir/haproxy.pid"); gw_pid=$haproxy_pid
  else
    export NRES_REGION_DIR_FIXED=$regions/$a
    rm -rf "$NRES_REGION_DIR_FIXED"; mkdir -p "$NRES_REGION_DIR_FIXED"; chmod 777 "$NRES_REGION_DIR_FIXED"
    render_gateway "$a"
    nres_nginx_start "$gw_dir" "$gw_dir/nginx.conf"
    gw_pid=$(cat "$gw_dir/nginx.pid")
  fi
  nres_wait_http "http://127.0.0.1:$gw_port/warm"
  case $a in
    nginx) membership="config rewrite + nginx -s reload" ;;
    haproxy) membership="runtime API (stats socket)" ;;
    nres-*)
      # the membership actions, or a drain through the API and a reload
      if control '{"action":"remove","upstream":"backend","peer":"127.0.0.1:1"}' | grep -q '"error":"peer'; then
        membership="control API (drain, remove, add)"
      else
        membership="control API drain + config rewrite and reload (no membership actions in this build)"
      fi ;;
  esac
  row "membership $a $membership"
}

stop_gateway() {
  gw_stop "$gw_pid"
  [ "$gw_pid" = "$haproxy_pid" ] && haproxy_pid=""
  gw_pid=""
}

control() {   # JSON: the nres control API's answer (any status)
  curl -s "http://127.0.0.1:$gw_port/nres/control" -d "$1"
}
control_ok() {
  local r; r=$(curl -s -w '\n%{http_code}' "http://127.0.0.1:$gw_port/nres/control" -d "$1")
  [ "${r##*$'\n'}" = 200 ] || { echo "peers.sh: control $1 answered: $r" >&2; return 1; }
}

reload_gateway() {   # nginx -s reload, and wait until the old workers are gone
  local old; old=$(pgrep -P "$gw_pid" | tr '\n' ' ')
  render_gateway "$1"
  nres_nginx_signal "$gw_dir" "$gw_dir/nginx.conf" reload
  for _ in $(seq 1 200); do
    local p gone=1
    for p in $old; do kill -0 "$p" 2>/dev/null && gone=0; done
    [ "$gone" = 1 ] && break
    sleep 0.02
  done
}

without() {   # live minus the ports given
  local keep=() p q drop
  for p in "${live[@]}"; do
    drop=0; for q in "$@"; do [ "$p" = "$q" ] && drop=1; done
    [ "$drop" = 1 ] || keep+=("$p")
  done
  live=("${keep[@]}")
}

# arm_drain / arm_remove / arm_add ARM PORT...: the membership changes
arm_drain() {
  local a=$1 p; shift
  case $a in
    nginx) without "$@"; reload_gateway "$a" ;;   # no new request to them
    haproxy) for p in "$@"; do hcmd "set server upstream/p$p state drain" >/dev/null; done ;;
    nres-*) for p in "$@"; do
              control_ok "{\"action\":\"drain\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p\"}"
            done ;;
  esac
}
arm_remove() {
  local a=$1 p r; shift
  case $a in
    nginx) ;;   # gone with the drain's reload
    haproxy)
      for p in "$@"; do
        hcmd "set server upstream/p$p state maint" >/dev/null
        for _ in $(seq 1 50); do   # refused while it still holds connections
          r=$(hcmd "del server upstream/p$p")
          case $r in *"Server deleted"*) break ;; esac
          sleep 0.1
        done
        case $r in *"Server deleted"*) ;; *) echo "peers.sh: del server p$p: $r" >&2; return 1 ;; esac
      done ;;
    nres-*)
      if [ "${membership#control API (}" != "$membership" ]; then
        for p in "$@"; do
          control_ok "{\"action\":\"remove\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p\"}"
        done
      else
        without "$@"; reload_gateway "$a"
      fi ;;
  esac
}
arm_add() {
  local a=$1 p r; shift
  case $a in
    nginx) live+=("$@"); reload_gateway "$a" ;;
    haproxy)
      for p in "$@"; do
        r=$(hcmd "add server upstream/$(hserver "$p")")
        case $r in *"New server registered"*) ;; *) echo "peers.sh: add server p$p: $r" >&2; return 1 ;; esac
        hcmd "enable health upstream/p$p" >/dev/null
        hcmd "enable server upstream/p$p" >/dev/null
      done ;;
    nres-*)
      if [ "${membership#control API (}" != "$membership" ]; then
        for p in "$@"; do
          control_ok "{\"action\":\"add\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p\",\"weight\":1}"
        done
      else
        live+=("$@"); reload_gateway "$a"
      fi ;;
  esac
}

# --- wrk -------------------------------------------------------------------
gw_url() { echo "http://127.0.0.1:$gw_port/bench"; }
wrk_for() {   # SECONDS: the RESULT line
  wrk -t2 -c8 -d"$1"s --timeout 5s -s "$here/wrk.lua" "$(gw_url)" | grep '^RESULT' | cut -d' ' -f2-
}
wrk_begin() {   # until wrk_end (wrk prints its summary on SIGINT)
  wrk -t2 -c8 -d600s --timeout 5s -s "$here/wrk.lua" "$(gw_url)" >"$work/wrk.out" 2>&1 &
  wrk_pid=$!
  sleep 0.3
}
wrk_end() {   # in this shell (not in $(...): wait needs the parent); then $wrk_result
  kill -INT "$wrk_pid"; wait "$wrk_pid" || true; wrk_pid=""
  wrk_result=$(grep '^RESULT' "$work/wrk.out" | cut -d' ' -f2-) ||
    { echo "peers.sh: no RESULT from wrk:" >&2; cat "$work/wrk.out" >&2; return 1; }
}
row() { printf '%s\n' "$*" >>"$tsv"; }   # KIND ARM SCENARIO key=value...

# --- scenarios ---------------------------------------------------------------
rolling() {
  local a=$1 old new t0 steps=""
  mapfile -t old < <(new_ports 3)
  peer_start "${old[@]}"
  start_gateway "$a" "${old[@]}"
  wrk -t2 -c8 -d1s "$(gw_url)" >/dev/null   # warm-up
  row "wrk $a steady $(wrk_for "$STEADY")"
  wrk_begin; sleep 1
  t0=$(now)
  for o in "${old[@]}"; do
    new=$(nres_free_port)
    arm_drain "$a" "$o"; sleep "$DRAIN_S"
    peer_stop "$o"
    arm_remove "$a" "$o"
    peer_start "$new"
    arm_add "$a" "$new"
    steps="$steps$(since "$t0"),"
    sleep "$GAP_S"
  done
  sleep 1
  wrk_end
  row "wrk $a rolling steps_done_at=${steps%,} $wrk_result"
  stop_gateway
  peer_stop "${!peer_pid[@]}"
}

sampler() {   # every 0.5 s: t and each peer's requests (one curl), until killed
  local t0=$1 p urls
  while :; do
    urls=(); for p in $(cat "$work/sampled"); do urls+=("http://127.0.0.1:$p/admin"); done
    echo "share t=$(since "$t0") $(curl -s --max-time 1 -w '|%{url_effective}' "${urls[@]}" |
      tr '\n' ' ' | grep -o '"requests":[0-9]*[^|]*|http://127.0.0.1:[0-9]*' |
      sed 's|"requests":\([0-9]*\).*:\([0-9]*\)$|\2=\1|' | tr '\n' ' ')" >>"$work/samples"
    sleep 0.5
  done
}

scale() {
  local a=$1 old new t0
  mapfile -t old < <(new_ports 3)
  peer_start "${old[@]}"
  start_gateway "$a" "${old[@]}"
  wrk -t2 -c8 -d1s "$(gw_url)" >/dev/null
  echo "${old[*]}" >"$work/sampled"; : >"$work/samples"
  wrk_begin
  t0=$(now)
  sampler "$t0" & sampler_pid=$!
  sleep 1.5
  mapfile -t new < <(new_ports 3)
  peer_start "${new[@]}"
  echo "${old[*]} ${new[*]}" >"$work/sampled"
  local added; added=$(since "$t0")
  arm_add "$a" "${new[@]}"
  local added_done; added_done=$(since "$t0")
  sleep "$SCALE_HOLD"
  local drained; drained=$(since "$t0")
  arm_drain "$a" "${new[@]}"; sleep "$DRAIN_S"
  peer_stop "${new[@]}"
  echo "${old[*]}" >"$work/sampled"
  arm_remove "$a" "${new[@]}"
  local removed; removed=$(since "$t0")
  sleep 1.5
  kill "$sampler_pid"; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""
  wrk_end
  row "wrk $a scale old=$(IFS=,; echo "${old[*]}") new=$(IFS=,; echo "${new[*]}") added_at=$added added_done_at=$added_done" \
      "drained_at=$drained removed_at=$removed $wrk_result"
  sed "s/^share/share $a/" "$work/samples" >>"$tsv"
  stop_gateway
  peer_stop "${!peer_pid[@]}"
}

ejected() {   # ARM PORT: 0 when the gateway's checks took the peer out
  case $1 in
    haproxy) hcmd "show stat" | grep -q "^upstream,p$2,.*,DOWN," ;;
    nres-*) curl -s "http://127.0.0.1:$gw_port/nres/status?format=prometheus" |
              grep -q "^nres_peer_ejected_by{.*127.0.0.1:$2.*by=\"active\"} 1" ;;
    *) return 1 ;;   # nginx: passive checks only
  esac
}

idle_hang() {
  local a=$1 ports
  mapfile -t ports < <(new_ports 3)
  peer_start "${ports[@]}"
  start_gateway "$a" "${ports[@]}"
  wrk -t2 -c8 -d1s "$(gw_url)" >/dev/null
  sleep 1   # idle
  local hung=${ports[1]}
  peer_admin "$hung" "mode=healthy&delay=30000&reset=1" >/dev/null
  # the checks' ejection, watched for HANG_WAIT s; then the traffic
  local t0 ej=never; t0=$(now)
  while awk -v s="$(since "$t0")" -v w="$HANG_WAIT" 'BEGIN { exit !(s < w) }'; do
    if [ "$ej" = never ] && ejected "$a" "$hung"; then ej=$(since "$t0"); fi
    sleep 0.1
  done
  local r; r=$(wrk_for "$HANG_D")
  row "wrk $a idle-hang hung_requests=$(peer_requests "$hung") waited=$HANG_WAIT ejected_after=$ej $r"
  stop_gateway
  peer_stop "${!peer_pid[@]}"
}

for a in $arms; do
  for s in $scenarios; do
    echo "== $a / $s" >&2
    case $s in
      rolling) rolling "$a" ;;
      scale) scale "$a" ;;
      idle-hang) idle_hang "$a" ;;
    esac
  done
done
elapsed=$(( $(date +%s) - started ))

mkdir -p "$(dirname "$out_md")"
status=0
luajit "$here/peers-report.lua" "$tsv" "$elapsed" "${out_md%.md}.json" "$SLOW_START" >"$out_md" || status=$?
echo "wrote $out_md and ${out_md%.md}.json (${elapsed}s)" >&2
# 10: an nres arm's rolling deploy failed a request (fails --smoke only)
[ "$status" = 10 ] && [ -z "$smoke" ] && status=0
if [ -n "$smoke" ]; then
  sed -n '/^## Verdict/,/^One run/p' "$out_md" >&2
  grep -q '^- nres[^:]*: control API (' "$out_md" ||
    echo "peers.sh --smoke: no membership actions in this build (a reload per change):" \
         "the harness ran; the 0-failed check needs them and was not made" >&2
fi
exit "$status"

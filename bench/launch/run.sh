#!/usr/bin/env bash
# bench/launch — session open → shim ready, p50/p95 over N sessions (default 20), beside a raw
# `docker run --rm --runtime=runsc IMAGE <no-op>` in the same run, interleaved one for one.
#
#   bench/launch/run.sh [N]
#
# jailbox's figure is the time from POST /v1/jailbox to the session in awaiting_agent, i.e.
# the worker has claimed the job, pre-scanned the workspace, created, attached and started the
# container, handed over the filter, and the jailed shim has answered status and ping (the
# client polls every 5 ms; the server-side figure, updatedAt - createdAt, is printed too).
# The raw figure is the docker CLI creating, starting, waiting for and removing a container
# of the same image under runsc whose command exits at once (the image has no `true`; the
# shim's --version is its no-op). Needs root, Docker with runsc, a built tree.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-20}
BUILD=${BUILD:-$ROOT/build}
IMAGE=${IMAGE:-jailbox-sandbox:bench}
"$ROOT/deploy/start-dockerd.sh" >/dev/null
"$ROOT/deploy/sandbox-image/build.sh" --shim "$BUILD/jailbox-shim" --tag "$IMAGE" >/dev/null

T=$(mktemp -d /tmp/jbbench-launch.XXXXXX)
chmod 0711 "$T"
mkdir -p "$T/ws/w"
for i in $(seq 1 20); do echo "file $i" > "$T/ws/w/f$i.txt"; done
JB_PID=""
cleanup() {
  [ -n "$JB_PID" ] && kill -TERM "$JB_PID" 2>/dev/null && wait "$JB_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_WS_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$T/state" \
  JAILBOX_WORKSPACE_ROOT="$T/ws" JAILBOX_WORKERS=1 JAILBOX_SANDBOX_IMAGE="$IMAGE" \
  "$BUILD/jailboxd" 2>"$T/jb.log" &
JB_PID=$!
URL=""
for _ in $(seq 1 600); do
  URL=$(grep -o '"msg":"listening","addr":"[^"]*' "$T/jb.log" | sed 's/.*"addr":"/http:\/\//' | tail -1 || true)
  [ -n "$URL" ] && grep -q '"msg":"worker ready"' "$T/jb.log" && break
  sleep 0.1
done
grep -q '"msg":"worker ready"' "$T/jb.log" || { echo "worker not ready:"; tail -20 "$T/jb.log"; exit 1; }
TOK=$(cat "$T/state/service.token")

now_ms() { date +%s%3N; }
: > "$T/jailbox.ms"; : > "$T/server.ms"; : > "$T/raw.ms"; : > "$T/phases"
for i in $(seq 1 "$N"); do
  t0=$(now_ms)
  opened=$(curl -sf -X POST -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' \
        -d '{"agentId":"bench","workspace":"w"}' "$URL/v1/jailbox")
  job=$(jq -r .jobId <<<"$opened")
  for _ in $(seq 1 4000); do
    s=$(curl -sf -H "Authorization: Bearer $TOK" "$URL/v1/jailbox/$job")
    st=$(jq -r .state <<<"$s")
    [ "$st" = awaiting_agent ] || [ "$st" = failed ] && break
    sleep 0.005
  done
  t1=$(now_ms)
  [ "$st" = awaiting_agent ] || { echo "session $job: $st $(jq -r .stateReason <<<"$s")"; exit 1; }
  echo $((t1 - t0)) >> "$T/jailbox.ms"
  jq -r '((.updatedAt | sub("\\.[0-9]+Z$"; "Z") | fromdate) * 1000 + (.updatedAt | capture("\\.(?<ms>[0-9]+)Z").ms | tonumber))
        - ((.createdAt | sub("\\.[0-9]+Z$"; "Z") | fromdate) * 1000 + (.createdAt | capture("\\.(?<ms>[0-9]+)Z").ms | tonumber))' <<<"$s" >> "$T/server.ms"
  jq -c .walls.timingsMs <<<"$s" >> "$T/phases"
  # end the session (teardown removes its container) before the next measurement
  curl -sf -X POST -H "Authorization: Bearer $(jq -r .buyerToken <<<"$opened")" "$URL/v1/jailbox/$job/abort" >/dev/null
  for _ in $(seq 1 400); do
    [ -z "$(docker ps -aq --filter "label=jailbox.session=$job")" ] && break
    sleep 0.01
  done
  r0=$(now_ms)
  docker run --rm --runtime=runsc --network none "$IMAGE" /opt/jailbox/bin/jailbox-shim --version >/dev/null
  r1=$(now_ms)
  echo $((r1 - r0)) >> "$T/raw.ms"
done

pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int((NR*p/100)+0.999); if (i<1) i=1; print a[i]}'; }
j50=$(pct "$T/jailbox.ms" 50); j95=$(pct "$T/jailbox.ms" 95)
s50=$(pct "$T/server.ms" 50); s95=$(pct "$T/server.ms" 95)
r50=$(pct "$T/raw.ms" 50); r95=$(pct "$T/raw.ms" 95)
echo "launch, $N sessions ($(nproc) cores, $(docker version -f '{{.Server.Version}}' 2>/dev/null), $(runsc --version 2>/dev/null | head -1))"
printf '  %-44s p50 %5d ms   p95 %5d ms\n' "jailbox open -> shim ready (client)" "$j50" "$j95"
printf '  %-44s p50 %5d ms   p95 %5d ms\n' "jailbox open -> awaiting_agent (server clock)" "$s50" "$s95"
printf '  %-44s p50 %5d ms   p95 %5d ms\n' "docker run --rm --runtime=runsc (no-op)" "$r50" "$r95"
printf '  %-44s p50 %+5d ms\n' "jailbox overhead over the raw start" "$((j50 - r50))"
echo "  worker phases, median ms:"
for k in createMs attachMs startMs readyMs statusMs pingMs; do
  jq -r ".$k // 0" "$T/phases" > "$T/k"
  printf '    %-10s %4d\n' "$k" "$(pct "$T/k" 50)"
done

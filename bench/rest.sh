#!/usr/bin/env bash
# bench/rest.sh — REST throughput on loopback, with nginx serving a static JSON file of the
# same size as the baseline, measured in the same run.
#   GET  /v1/jailbox/:jobId          (buyer token, one database read per request)
#   POST /v1/jailbox/:jobId/approve/:opId on fresh pending ops (each decision committed
#        before the answer; the run then checks every 200 is a committed 'approved' row)
# Prints requests/s, p50/p99 latency, and ratios. Targets (2 cores): GET >= 0.5x nginx,
# approve >= 2000/s. Usage: bench/rest.sh [seconds per run, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DUR=${1:-10}
THREADS=2
CONNS=32

command -v wrk >/dev/null && command -v nginx >/dev/null || \
  { apt-get update -qq && apt-get install -y -qq wrk nginx-light >/dev/null; }
BUILD=${BUILD:-$ROOT/build} # the build whose jailboxd is measured (bench/ab.sh sets it)
[ -x "$BUILD/jailboxd" ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j >/dev/null; }

T=$(mktemp -d /tmp/jbbench.XXXXXX); chmod 0711 "$T"
JB_PID=""; NGX_PID=""
cleanup() {
  [ -n "$JB_PID" ] && kill -TERM "$JB_PID" 2>/dev/null && wait "$JB_PID" 2>/dev/null
  [ -n "$NGX_PID" ] && kill "$NGX_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

# --- jailboxd with its embedded database, no workers (REST only: a session that launched
#     without its image would fail and revoke its tokens)
mkdir -p "$T/ws/bench"
JAILBOX_WORKERS=0 JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$T/state" JAILBOX_WORKSPACE_ROOT="$T/ws" \
  JAILBOX_LOG_LEVEL=info JAILBOX_WS_LISTEN=127.0.0.1:0 JAILBOX_HTTP_THREADS=${JB_HTTP_THREADS:-8} JAILBOX_DB_POOL_SIZE=${JB_DB_POOL:-16} \
  "$BUILD/jailboxd" 2>"$T/jb.log" &
JB_PID=$!
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o '"msg":"listening","addr":"127.0.0.1:[0-9]*' "$T/jb.log" 2>/dev/null | head -1 | sed 's/.*://' || true)
  [ -n "$PORT" ] && break; sleep 0.1
done
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] && break; sleep 0.1; done
SVC=$(cat "$T/state/service.token")
OPEN=$(curl -s -X POST "$URL/v1/jailbox" -H "Authorization: Bearer $SVC" \
  -d '{"jobId":"bench-1","agentId":"bench-agent","workspace":"bench"}')
BUYER=$(printf '%s' "$OPEN" | sed 's/.*"buyerToken":"\([^"]*\)".*/\1/')
PSQL=(psql -X -q -t -A -h "$T/state/pg/run" -U jailbox -d jailbox)
"${PSQL[@]}" -c "UPDATE sessions SET state = 'active' WHERE job_id = 'bench-1'"

# --- nginx serving the same bytes as the GET answer
curl -s "$URL/v1/jailbox/bench-1" -H "Authorization: Bearer $BUYER" > "$T/session.json"
SIZE=$(stat -c %s "$T/session.json")
mkdir -p "$T/ngx/html" "$T/ngx/tmp"
cp "$T/session.json" "$T/ngx/html/session.json"
# a port no socket uses in any state: a client's connection bound to it (the ephemeral range
# holds jailboxd's own port) makes nginx's bind fail too
NPORT=$((PORT + 1)); while ss -tanH | awk '{print $4}' | grep -q ":$NPORT$"; do NPORT=$((NPORT + 1)); done
cat > "$T/ngx/nginx.conf" <<NGX
worker_processes 2;
pid $T/ngx/nginx.pid;
error_log $T/ngx/error.log warn;
daemon off;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $T/ngx/tmp; proxy_temp_path $T/ngx/tmp; fastcgi_temp_path $T/ngx/tmp;
  uwsgi_temp_path $T/ngx/tmp; scgi_temp_path $T/ngx/tmp;
  default_type application/json;
  server { listen 127.0.0.1:$NPORT; root $T/ngx/html; }
}
NGX
nginx -c "$T/ngx/nginx.conf" &
NGX_PID=$!
sleep 0.5

# wrk output -> "rps p50_ms p99_ms"
parse() {
  awk '/Requests\/sec/ {r=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2}
       function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
       END { printf "%.0f %.3f %.3f\n", r, ms(p50), ms(p99) }' "$1"
}

echo "bench/rest.sh: ${DUR}s per run, wrk -t$THREADS -c$CONNS, response body $SIZE bytes"
wrk -t$THREADS -c$CONNS -d"${DUR}s" --latency "http://127.0.0.1:$NPORT/session.json" > "$T/ngx.txt"
read -r N_RPS N_P50 N_P99 < <(parse "$T/ngx.txt")
wrk -t$THREADS -c$CONNS -d"${DUR}s" --latency -H "Authorization: Bearer $BUYER" "$URL/v1/jailbox/bench-1" > "$T/get.txt"
read -r G_RPS G_P50 G_P99 < <(parse "$T/get.txt")
G_NON2XX=$(grep -o 'Non-2xx or 3xx responses: [0-9]*' "$T/get.txt" | grep -o '[0-9]*$' || echo 0)

# --- approvals on fresh pending ops: enough for the run at up to 20000/s
NOPS=$((DUR * 20000))
"${PSQL[@]}" -c "INSERT INTO ops (job_id, tool, path, state) SELECT 'bench-1', 'write', 'f' || g, 'pending' FROM generate_series(1, $NOPS) g"
FIRST=$("${PSQL[@]}" -c "SELECT min(op_id) FROM ops WHERE job_id = 'bench-1' AND state = 'pending'")
cat > "$T/approve.lua" <<LUA
-- each wrk thread walks its own stride of op ids, so no op is decided twice
-- (setup runs in the main state; "tid" becomes a global of each thread's own state)
local first, stride = $FIRST, $THREADS
local id = 0
local next_tid = 0
function setup(thread) thread:set("tid", next_tid); next_tid = next_tid + 1 end
function init(args) id = first + tid end
function request()
  local path = "/v1/jailbox/bench-1/approve/" .. id
  id = id + stride
  return wrk.format("POST", path, {["Authorization"] = "Bearer $BUYER"})
end
LUA
wrk -t$THREADS -c$CONNS -d"${DUR}s" --latency -s "$T/approve.lua" "$URL" > "$T/approve.txt"
read -r A_RPS A_P50 A_P99 < <(parse "$T/approve.txt")
A_NON2XX=$(grep -o 'Non-2xx or 3xx responses: [0-9]*' "$T/approve.txt" | grep -o '[0-9]*$' || echo 0)
A_TOTAL=$(grep -o '[0-9]* requests in' "$T/approve.txt" | grep -o '^[0-9]*')
APPROVED=$("${PSQL[@]}" -c "SELECT count(*) FROM ops WHERE job_id = 'bench-1' AND state = 'approved'")

printf '\n%-34s %10s %9s %9s %8s\n' "" "req/s" "p50 ms" "p99 ms" "ratio"
printf '%-34s %10s %9s %9s %8s\n' "nginx static JSON ($SIZE B)" "$N_RPS" "$N_P50" "$N_P99" "1.00"
printf '%-34s %10s %9s %9s %8s\n' "GET /v1/jailbox/:jobId" "$G_RPS" "$G_P50" "$G_P99" "$(awk "BEGIN{printf \"%.2f\", $G_RPS/$N_RPS}")"
printf '%-34s %10s %9s %9s %8s\n' "POST approve (durable)" "$A_RPS" "$A_P50" "$A_P99" "-"
echo
echo "GET non-2xx: $G_NON2XX; approve requests: $A_TOTAL, non-2xx: $A_NON2XX, committed 'approved' rows: $APPROVED"
echo "targets: GET >= 0.50x nginx -> $(awk "BEGIN{print ($G_RPS/$N_RPS >= 0.5) ? \"met\" : \"NOT met\"}"); approve >= 2000/s -> $(awk "BEGIN{print ($A_RPS >= 2000) ? \"met\" : \"NOT met\"}")"

#!/usr/bin/env bash
# bench/audit/run.sh — audit chain benchmarks, run on demand (not by CTest).
#
# 1. Durable append throughput (entries/s, each append its own committed transaction) on
#    jailboxd's embedded PostgreSQL (fsync on, synchronous_commit on): one session with one
#    writer, one session with 16 writers (serialized by the session's row lock), and 16
#    sessions with one writer each. In the same run, pgbench on the same cluster with a
#    single-row-insert script (one committed INSERT of a row about as wide as an audit entry)
#    at 1 and 16 clients: the storage bound. Target: appends >= 0.7 x pgbench.
# 2. Offline verification rate (parse every JSON line + verify, as `jailboxctl audit verify`
#    does, one thread, reading the lines one at a time) beside libsodium's
#    crypto_sign_verify_detached alone on the same signatures, one thread, same run; both in
#    CPU time of the thread, so that other processes on the machine do not skew the ratio.
#    Target: >= 0.8 x raw.
#
# Usage: [ROUNDS=3] [SLICES=5] bench/audit/run.sh [seconds per measurement, default 10] [entries to verify, default 50000]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
DUR=${1:-10}
NVERIFY=${2:-50000}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/pgbench" ] || { echo "pgbench not found (Debian: postgresql-15 ships it in $PGBIN)"; exit 2; }
if [ ! -x build/audit_bench ] || [ ! -x build/jailboxd ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j >/dev/null
fi

T=$(mktemp -d /tmp/jbaudit.XXXXXX); chmod 0711 "$T"
JB_PID=""
cleanup() {
  [ -n "$JB_PID" ] && kill -TERM "$JB_PID" 2>/dev/null && wait "$JB_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

mkdir -p "$T/ws"
JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_WS_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$T/state" JAILBOX_WORKSPACE_ROOT="$T/ws" \
  JAILBOX_LOG_LEVEL=info "$ROOT/build/jailboxd" 2>"$T/jb.log" &
JB_PID=$!
for _ in $(seq 1 300); do grep -q '"msg":"listening"' "$T/jb.log" 2>/dev/null && break; sleep 0.1; done
grep -q '"msg":"listening"' "$T/jb.log" || { cat "$T/jb.log"; exit 1; }
CI="host=$T/state/pg/run user=jailbox dbname=jailbox"
PSQL=(psql -X -q -t -A "$CI" -v ON_ERROR_STOP=1)
KEY="$T/state/audit-signing.key"
echo "PostgreSQL: $("${PSQL[@]}" -c "SELECT version()" | cut -d, -f1); fsync=$("${PSQL[@]}" -c 'SHOW fsync'), synchronous_commit=$("${PSQL[@]}" -c 'SHOW synchronous_commit'), wal_sync_method=$("${PSQL[@]}" -c 'SHOW wal_sync_method'); $(nproc) cores; $DUR s per run"

"${PSQL[@]}" -c "INSERT INTO agents (agent_id) VALUES ('bench');
  INSERT INTO sessions (job_id, agent_id, workspace)
    SELECT p || i, 'bench', '/bench' FROM generate_series(0, 15) i,
           unnest(ARRAY['one', 'many', 'par']) p;
  CREATE TABLE bench_rows (id bigserial PRIMARY KEY, client int NOT NULL, payload text NOT NULL);"
# one committed single-row insert per transaction; the payload is about an audit row's width
cat > "$T/insert.sql" <<'EOF'
INSERT INTO bench_rows (client, payload) VALUES (:client_id, repeat('x', 700));
EOF

rate_of() { sed -n 's/.*rate \([0-9]*\).*/\1/p'; }
pgbench_tps() {  # CLIENTS SECONDS
  "$PGBIN/pgbench" -n -h "$T/state/pg/run" -U jailbox -f "$T/insert.sql" -c "$1" -j "$(( $1 < 2 ? 1 : 2 ))" \
    -T "$2" -M prepared jailbox 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | cut -d. -f1
}

echo "== durable appends vs pgbench single-row inserts (committed rows/s)"
# The machine is shared and its disk's flush latency drifts by 2x within seconds: each round
# alternates SLICES slices of DUR/SLICES seconds of appends and of pgbench, so that both
# sides of a ratio see the same minutes; a round's figures are the means of its slices. Each
# row is ROUNDS rounds and shows the round with the median ratio.
ROUNDS=${ROUNDS:-3}
SLICES=${SLICES:-5}
SLICE=$(awk -v d="$DUR" -v s="$SLICES" 'BEGIN { x = d / s; if (x < 1) x = 1; printf "%d", x }')
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# measure LABEL SESSIONS WRITERS PGCLIENTS PREFIX: one row
measure() {
  local label=$1 sessions=$2 writers=$3 clients=$4 prefix=$5 r s a p sa sp rows=""
  for r in $(seq 1 "$ROUNDS"); do
    sa=0; sp=0
    for s in $(seq 1 "$SLICES"); do
      a=$(AUDIT_BENCH_VERIFY=$([ "$s" = "$SLICES" ] && echo 1 || echo 0) \
          "$ROOT/build/audit_bench" append "$CI" "$KEY" "$SLICE" "$sessions" "$writers" "$prefix" | rate_of)
      [ -n "$a" ] || { echo "audit_bench append failed (or a chain did not verify)"; exit 1; }
      p=$(pgbench_tps "$clients" "$SLICE")
      sa=$((sa + a)); sp=$((sp + p))
    done
    a=$((sa / SLICES)); p=$((sp / SLICES))
    rows+="$(ratio "$a" "$p") $a $p"$'\n'
  done
  local all mid
  all=$(printf '%s' "$rows" | sort -n | awk '{ printf "%s%s", sep, $1; sep = " " }')
  mid=$(printf '%s' "$rows" | sort -n | sed -n "$(( (ROUNDS + 1) / 2 ))p")
  read -r rr aa pp <<< "$mid"
  printf '%-48s %10s %10s %7s   (rounds: %s)\n' "$label" "$aa" "$pp" "$rr" "$all"
}
printf '%-48s %10s %10s %7s\n' "" "appends/s" "pgbench" "ratio"
measure "1 session, 1 writer (vs pgbench -c 1)" 1 1 1 one
measure "16 sessions, 1 writer each (vs pgbench -c 16)" 16 1 16 par
measure "1 session, 16 writers (vs pgbench -c 16)" 1 16 16 many
echo "(every chain written was verified intact after its run; target ratio >= 0.7)"

echo "== offline verification vs raw libsodium verify (one thread, $NVERIFY entries, thread CPU time, best of 3)"
OUT=$("$ROOT/build/audit_bench" verify "$NVERIFY")
read -r _ V _ R _ X _ B <<< "$OUT"
printf '%-44s %10s entries/s\n' "jailboxctl-equivalent verify (parse + check)" "$V"
printf '%-44s %10s verifies/s\n' "crypto_sign_verify_detached alone" "$R"
printf '%-44s %10s   (target >= 0.8; %s bytes per JSON line)\n' "ratio" "$X" "$B"

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
#    does, one thread) beside libsodium's crypto_sign_verify_detached alone on the same
#    signatures, one thread, same run. Target: >= 0.8 x raw.
#
# Usage: bench/audit/run.sh [seconds per measurement, default 10] [entries to verify, default 50000]
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
           unnest(ARRAY['one', 'many', 'par', 'nn', 'np']) p;
  CREATE TABLE bench_rows (id bigserial PRIMARY KEY, client int NOT NULL, payload text NOT NULL);"
# one committed single-row insert per transaction; the payload is about an audit row's width
cat > "$T/insert.sql" <<'EOF'
INSERT INTO bench_rows (client, payload) VALUES (:client_id, repeat('x', 700));
EOF

rate_of() { sed -n 's/.*rate \([0-9]*\).*/\1/p'; }
pgbench_tps() {  # CLIENTS
  "$PGBIN/pgbench" -n -h "$T/state/pg/run" -U jailbox -f "$T/insert.sql" -c "$1" -j "$(( $1 < 2 ? 1 : 2 ))" \
    -T "$DUR" -M prepared jailbox 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | cut -d. -f1
}

echo "== durable appends vs pgbench single-row inserts (committed rows/s)"
A1=$("$ROOT/build/audit_bench" append "$CI" "$KEY" "$DUR" 1 1 one | rate_of)
P1=$(pgbench_tps 1)
A16=$("$ROOT/build/audit_bench" append "$CI" "$KEY" "$DUR" 16 1 par | rate_of)
P16=$(pgbench_tps 16)
A1W=$("$ROOT/build/audit_bench" append "$CI" "$KEY" "$DUR" 1 16 many | rate_of)
# the same two runs without the session change notification (migration 004's sessions_change
# trigger NOTIFYs on every UPDATE of sessions, so on every append, and PostgreSQL serializes
# the commits of notifying transactions)
"${PSQL[@]}" -c "ALTER TABLE sessions DISABLE TRIGGER sessions_change"
N1=$("$ROOT/build/audit_bench" append "$CI" "$KEY" "$DUR" 1 1 nn | rate_of)
N16=$("$ROOT/build/audit_bench" append "$CI" "$KEY" "$DUR" 16 1 np | rate_of)
"${PSQL[@]}" -c "ALTER TABLE sessions ENABLE TRIGGER sessions_change"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
row() { printf '%-52s %10s %10s %7s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
printf '%-52s %10s %10s %7s\n' "" "appends/s" "pgbench" "ratio"
row "1 session, 1 writer (vs pgbench -c 1)" "$A1" "$P1"
row "16 sessions, 1 writer each (vs pgbench -c 16)" "$A16" "$P16"
row "1 session, 16 writers (vs pgbench -c 1)" "$A1W" "$P1"
row "1 session, sessions_change trigger off" "$N1" "$P1"
row "16 sessions, sessions_change trigger off" "$N16" "$P16"
echo "(every chain written was verified intact after its run; target ratio >= 0.7)"

echo "== offline verification vs raw libsodium verify (one thread, $NVERIFY entries, best of 3)"
OUT=$("$ROOT/build/audit_bench" verify "$NVERIFY")
read -r _ V _ R _ X _ B <<< "$OUT"
printf '%-44s %10s entries/s\n' "jailboxctl-equivalent verify (parse + check)" "$V"
printf '%-44s %10s verifies/s\n' "crypto_sign_verify_detached alone" "$R"
printf '%-44s %10s   (target >= 0.8; %s bytes per JSON line)\n' "ratio" "$X" "$B"

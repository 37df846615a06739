#!/usr/bin/env bash
# tests/gcbreak.sh — runs the group-commit break-it commands of audit_driver against a
# throwaway jailboxd (embedded PostgreSQL). Usage: tests/gcbreak.sh [BUILD_DIR, default build]
set -u
cd "$(dirname "$0")/.."
B=${1:-build}
D=$B/tests/audit_driver
T=$(mktemp -d /tmp/gcbreak.XXXXXX); chmod 0711 "$T"; mkdir -p "$T/ws"
JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_WS_LISTEN=127.0.0.1:0 JAILBOX_WORKERS=0 JAILBOX_STATE_DIR="$T/state" \
  JAILBOX_WORKSPACE_ROOT="$T/ws" "$B/jailboxd" 2>"$T/jb.log" &
JB=$!
trap 'kill -TERM $JB 2>/dev/null; wait $JB 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 1 300); do grep -q '"msg":"listening"' "$T/jb.log" && break; sleep 0.1; done
CI="host=$T/state/pg/run user=jailbox dbname=jailbox"
K="$T/state/audit-signing.key"
M=$("$D" slotmate "$CI" "$K" "")
psql -X -q -t -A "$CI" -c "INSERT INTO agents (agent_id) VALUES ('t');
  INSERT INTO sessions (job_id, agent_id, workspace) SELECT 's' || i, 't', '/x' FROM generate_series(0, 9) i;
  INSERT INTO sessions (job_id, agent_id, workspace) VALUES ('$M', 't', '/x')"
echo "== mixrace, two processes on s1 (one seals)"
"$D" mixrace "$CI" "$K" s1 3 1 2>/dev/null & P=$!; "$D" mixrace "$CI" "$K" s1 2 0 2>/dev/null; wait $P
echo "== collide: '$M' (exists) against '' (empty id, same slot)"
"$D" collide "$CI" "$K" "$M" "" 3 2>&1 | grep -v "^: "
echo "== timeouts on s2"
"$D" timeouts "$CI" "$K" s2
echo "== twokeys on s3"
"$D" twokeys "$CI" "$K" s3
echo "== killer on s4"
"$D" killer "$CI" "$K" s4 3
echo "== keyrace on s5 (1 writer: no group commit)"
KEYRACE_WRITERS=1 GC_FRESH_KEY=1 "$D" keyrace "$CI" "$K" s5 40 | grep -v "verify ok"
echo "== keyrace on s6 (8 writers)"
GC_FRESH_KEY=1 "$D" keyrace "$CI" "$K" s6 40 | grep -v "verify ok"

#!/usr/bin/env bash
# JAILBOX_DATABASE_URL: jailboxd uses a separately started PostgreSQL and starts none of its
# own; two instances starting at once apply each migration exactly once; /readyz follows
# the database going away and coming back.
. "$(dirname "$0")/lib.sh"

start_external_pg || { fail "external PostgreSQL started"; finish; }
PSQL=(psql -X -q -t -A "$PG_EXT_URL" -v ON_ERROR_STOP=1)

# two instances at once on an empty database, sharing one signing key file (an instance with a
# key of its own refuses to start: api/audit.md "Keys at start")
S1="$T/s1"; S2="$T/s2"
(umask 077; openssl rand -hex 32 > "$T/shared.key")
export JAILBOX_SIGNING_KEY_FILE="$T/shared.key"
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S1" JAILBOX_DATABASE_URL="$PG_EXT_URL" "$JAILBOXD" 2>"$S1.log" &
P1=$!
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S2" JAILBOX_DATABASE_URL="$PG_EXT_URL" "$JAILBOXD" 2>"$S2.log" &
P2=$!
for _ in $(seq 1 100); do
  grep -q '"msg":"listening"' "$S1.log" && grep -q '"msg":"listening"' "$S2.log" && break
  sleep 0.1
done
check_match "instance 1 listening" '"msg":"listening".*"database":"external"' "$(cat "$S1.log")"
check_match "instance 2 listening" '"msg":"listening".*"database":"external"' "$(cat "$S2.log")"
N=$(ls "$(dirname "$0")/../../migrations" | grep -c '\.sql$')
check "each migration recorded once" "$N" "$("${PSQL[@]}" -c 'SELECT count(*) FROM schema_migrations')"
check "exactly one instance applied them" "1" "$(grep -h '"msg":"migrations up to date"' "$S1.log" "$S2.log" | grep -vc '"applied_now":"0"')"
check "no embedded cluster created" no "$([ -e "$S1/pg" ] || [ -e "$S2/pg" ] && echo yes || echo no)"
check "one key published, by whichever started first" "1" "$("${PSQL[@]}" -c 'SELECT count(*) FROM audit_signing_keys')"
kill -TERM $P1 $P2; wait $P1; R1=$?; wait $P2; R2=$?
check "both stop cleanly" "0 0" "$R1 $R2"

# readiness follows the database
S="$T/s3"
start_jb "$S" JAILBOX_DATABASE_URL="$PG_EXT_URL" JAILBOX_DB_CONNECT_TIMEOUT=2 || { fail "start"; finish; }
wait_ready && ok "readyz 200 with external database" || fail "readyz 200 with external database"
"${PSQL[@]}" -c "INSERT INTO agents (agent_id) VALUES ('ext-agent')" && ok "row written" || fail "row written"
stop_external_pg
R=$(http GET /readyz)
check_match "readyz 503 when the database is down" '^503 \{"error":\{"code":"database_unavailable","message":"[^"]+' "$R"
check "healthz still 200" '200 {"status":"ok"}' "$(http GET /healthz)"
start_external_pg_again() {
  su -s /bin/sh jailbox -c "$PGBIN/pg_ctl -D '$PG_EXT_DIR' -l '$T/extpg-run/pg.log' -w -o \"-c listen_addresses='' -k $T/extpg-run\" start" >/dev/null
}
start_external_pg_again
wait_ready && ok "readyz 200 again once the database is back" || fail "readyz 200 again once the database is back"
check "data intact" 1 "$("${PSQL[@]}" -c "SELECT count(*) FROM agents WHERE agent_id='ext-agent'")"
stop_jb TERM; check "SIGTERM exits 0" 0 "$JB_RC"
check "external database left running" 1 "$("${PSQL[@]}" -c 'SELECT 1')"
finish

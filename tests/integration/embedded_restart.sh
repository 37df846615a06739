#!/usr/bin/env bash
# Embedded PostgreSQL: first start creates the cluster, a row written survives SIGTERM and a
# second start, and the cluster is stopped with jailboxd.
. "$(dirname "$0")/lib.sh"

S="$T/state"
# pg_state STATE PID: "gone" when the postmaster has exited (a zombie counts as exited) and
# removed its pid file, "running" otherwise.
pg_state() {
  local st; st=$(ps -o stat= -p "$2" 2>/dev/null | tr -d ' ')
  if [ ! -f "$1/pg/data/postmaster.pid" ] && { [ -z "$st" ] || [ "${st#Z}" != "$st" ]; }; then echo gone; else echo running; fi
}
start_jb "$S" || { fail "first start"; finish; }
wait_ready && ok "readyz 200 after first start" || fail "readyz 200 after first start"
check "healthz" '200 {"status":"ok"}' "$(http GET /healthz)"
check_match "readyz body" '^200 \{"status":"ready","migrations":[0-9]+\}$' "$(http GET /readyz)"
check "cluster under the state directory" yes "$([ -f "$S/pg/data/PG_VERSION" ] && echo yes || echo no)"
check "cluster owned by the unprivileged user" jailbox "$(stat -c %U "$S/pg/data")"
check "no TCP listener in the cluster's settings" "listen_addresses = ''" "$(grep -o "listen_addresses = ''" "$S/pg/data/jailbox.conf")"
PGPID=$(head -1 "$S/pg/data/postmaster.pid")
check "postgres runs as jailbox" jailbox "$(ps -o user= -p "$PGPID" | tr -d ' ')"

PSQL=(psql -X -q -t -A -h "$S/pg/run" -U jailbox -d jailbox -v ON_ERROR_STOP=1)
"${PSQL[@]}" -c "INSERT INTO agents (agent_id, trust_score) VALUES ('agent-survivor', 77)" \
  && ok "insert through a migration-created table" || fail "insert through a migration-created table"

stop_jb TERM; check "SIGTERM exits 0" 0 "$JB_RC"
check "embedded cluster stopped with jailboxd" gone "$(pg_state "$S" "$PGPID")"
check_match "clean stop logged" '"msg":"stopped"' "$(tail -1 "$S.log")"

start_jb "$S" || { fail "second start"; finish; }
wait_ready && ok "readyz 200 after restart" || fail "readyz 200 after restart"
check "reused, not re-created" 0 "$(grep -c 'creating embedded' "$S.log")"
check "row survived the restart" 77 "$("${PSQL[@]}" -c "SELECT trust_score FROM agents WHERE agent_id='agent-survivor'")"
check "migrations recorded once" 1 "$("${PSQL[@]}" -c "SELECT count(*) FROM schema_migrations WHERE version=1")"

# SIGKILL leaves the cluster running; the next start adopts it
PGPID=$(head -1 "$S/pg/data/postmaster.pid")
stop_jb KILL
start_jb "$S" || { fail "start after SIGKILL"; finish; }
wait_ready && ok "readyz 200 after SIGKILL and restart" || fail "readyz 200 after SIGKILL and restart"
check "row intact after SIGKILL" 77 "$("${PSQL[@]}" -c "SELECT trust_score FROM agents WHERE agent_id='agent-survivor'")"
stop_jb INT; check "SIGINT exits 0" 0 "$JB_RC"
check "cluster stopped after SIGINT" gone "$(pg_state "$S" "$PGPID")"
finish

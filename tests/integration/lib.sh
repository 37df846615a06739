# lib.sh — helpers shared by the integration tests: a temp directory, starting and stopping
# jailboxd on a free port, a separately started PostgreSQL, and assertions that count.
# Needs: JAILBOXD (path of the binary, set by CTest), curl, psql, PostgreSQL server binaries.
set -u
trap "" PIPE  # a write to a socket the server closed must not end the test
: "${JAILBOXD:?JAILBOXD must name the jailboxd binary}"

T=$(mktemp -d /tmp/jbtest.XXXXXX)
chmod 0711 "$T"
PASSED=0
FAILED=0
JB_PID=""
JB_PORT=""
PG_EXT_DIR=""

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

cleanup() {
  [ -n "$JB_PID" ] && kill -9 "$JB_PID" 2>/dev/null
  for d in "$T"/*/pg/data "$PG_EXT_DIR"; do
    [ -n "$d" ] && [ -f "$d/postmaster.pid" ] && su -s /bin/sh jailbox -c "$PGBIN/pg_ctl -D '$d' -m immediate stop" >/dev/null 2>&1
  done
  rm -rf "$T"
}
trap cleanup EXIT

ok()   { PASSED=$((PASSED+1)); echo "ok - $*"; }
fail() { FAILED=$((FAILED+1)); echo "not ok - $*"; }
# check DESCRIPTION EXPECTED ACTUAL
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1 (expected '$2', got '$3')"; fi; }
# check_match DESCRIPTION REGEX ACTUAL
check_match() { if printf '%s' "$3" | grep -Eq -- "$2"; then ok "$1"; else fail "$1 ('$3' does not match /$2/)"; fi; }

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
  exit $?
}

# start_jb STATE_DIR [VAR=value ...]: starts jailboxd on a free port, logs to STATE_DIR.log,
# waits (30 s at most) for its "listening" line, and sets JB_PID and JB_PORT.
start_jb() {
  local state=$1; shift
  local log="$state.log"
  : > "$log"
  # no jailbox-worker unless a test asks for one (JAILBOX_WORKERS=1 among its arguments)
  env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_WORKERS=0 JAILBOX_STATE_DIR="$state" "$@" "$JAILBOXD" 2>>"$log" &
  JB_PID=$!
  JB_PORT=""
  for _ in $(seq 1 300); do
    # the closing quote too: a line read while it is being written gives no cut-off port
    JB_PORT=$(grep -o '"msg":"listening","addr":"127.0.0.1:[0-9]*"' "$log" | tail -1 | sed 's/.*:\([0-9]*\)"$/\1/')
    [ -n "$JB_PORT" ] && return 0
    kill -0 "$JB_PID" 2>/dev/null || { echo "jailboxd exited early:"; cat "$log"; return 1; }
    sleep 0.1
  done
  echo "jailboxd did not start:"; cat "$log"; return 1
}

# stop_jb [SIGNAL]: signals jailboxd and waits for it; sets JB_RC to its exit status.
# (Not to be called in $(...): the wait must run in this shell.)
stop_jb() {
  kill -"${1:-TERM}" "$JB_PID" 2>/dev/null
  JB_RC=0
  wait "$JB_PID" || JB_RC=$?
  JB_PID=""
}

# http METHOD PATH [curl args...]: prints "STATUS BODY".
http() {
  local m=$1 p=$2; shift 2
  curl -s -o "$T/body" -w '%{http_code}' -X "$m" "http://127.0.0.1:$JB_PORT$p" "$@" > "$T/code" || true
  printf '%s %s' "$(cat "$T/code")" "$(cat "$T/body" 2>/dev/null)"
}

# wait_ready: polls /readyz until 200 (20 s at most); returns non-zero otherwise.
wait_ready() {
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$JB_PORT/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}

# start_external_pg: a PostgreSQL cluster of its own, Unix socket in $T/extpg-run; sets
# PG_EXT_URL (a libpq URL) and PG_EXT_DIR.
start_external_pg() {
  PG_EXT_DIR="$T/extpg"
  mkdir -p "$PG_EXT_DIR" "$T/extpg-run"
  chown jailbox "$PG_EXT_DIR" "$T/extpg-run"
  su -s /bin/sh jailbox -c "$PGBIN/initdb -D '$PG_EXT_DIR' -U ext -A trust --no-instructions" >"$T/extpg-init.log" 2>&1 || { cat "$T/extpg-init.log"; return 1; }
  su -s /bin/sh jailbox -c "$PGBIN/pg_ctl -D '$PG_EXT_DIR' -l '$T/extpg-run/pg.log' -w -o \"-c listen_addresses='' -k $T/extpg-run\" start" >/dev/null || { cat "$T/extpg-run/pg.log"; return 1; }
  PG_EXT_URL="postgresql:///postgres?host=$T/extpg-run&user=ext"
}

stop_external_pg() {
  su -s /bin/sh jailbox -c "$PGBIN/pg_ctl -D '$PG_EXT_DIR' -m fast -w stop" >/dev/null 2>&1
}

#!/usr/bin/env bash
# Bad input gets the JSON error shape: unknown route, wrong method, bodies over the limit
# (declared and chunked), smuggling-shaped headers; an unreachable database URL is one clear
# line and a non-zero exit; a request in flight at SIGTERM still gets its answer.
. "$(dirname "$0")/lib.sh"

S="$T/state"
start_jb "$S" JAILBOX_MAX_BODY_BYTES=1024 || { fail "start"; finish; }
wait_ready || fail "ready"

check "unknown route 404 JSON" '404 {"error":{"code":"not_found","message":"no such route"}}' "$(http GET /v1/nope)"
check_match "trailing slash is another route" '^404 ' "$(http GET /healthz/)"
R=$(curl -s -i -X DELETE "http://127.0.0.1:$JB_PORT/healthz")
check_match "wrong method 405" '^HTTP/1.1 405' "$R"
check_match "405 names Allow" 'Allow: GET' "$R"
check_match "405 JSON body" '"code":"method_not_allowed"' "$R"

SVC=$(cat "$S/service.token")
head -c 2048 /dev/zero > "$T/big"
check_match "declared body over limit 413 JSON" '^413 \{"error":\{"code":"payload_too_large"' \
  "$(http POST /v1/jailbox --data-binary @"$T/big" -H "Authorization: Bearer $SVC" -H 'Content-Type: application/octet-stream')"
check_match "chunked body over limit 413 JSON" '^413 \{"error":\{"code":"payload_too_large"' \
  "$(http POST /v1/jailbox --data-binary @"$T/big" -H "Authorization: Bearer $SVC" -H 'Transfer-Encoding: chunked')"
head -c 1000 /dev/zero > "$T/small"
check_match "body under the limit reaches the handler" '^400 .*malformed JSON' "$(http POST /v1/jailbox -H "Authorization: Bearer $SVC" --data-binary @"$T/small")"
check_match "a body off the API is answered without being read" '^405 ' "$(http POST /healthz --data-binary @"$T/small")"
check_match "an API body with an unknown token is refused before it is read" '^401 ' \
  "$(http POST /v1/jailbox -H "Authorization: Bearer jbt_$(printf 'A%.0s' $(seq 43))" --data-binary @"$T/small")"

# raw requests over /dev/tcp: STATUS LINE of the first answer, and whether the server closed
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$JB_PORT"
  printf "$1" >&3
  timeout 5 cat <&3 > "$T/raw" || true
  exec 3<&-
  head -1 "$T/raw" | tr -d '\r'
}
R=$(raw 'POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\nhello')
check "two Content-Length headers 400" "HTTP/1.1 400 Bad Request" "$R"
check_match "connection closed after it" 'Connection: close' "$(cat "$T/raw")"
check "only one answer on that connection" 1 "$(grep -c '^HTTP/1.1' "$T/raw")"
R=$(raw 'POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\nabc')
check "huge declared body refused before reading it" "HTTP/1.1 413 Content Too Large" "$R"
check_match "and the connection closed" 'Connection: close' "$(cat "$T/raw")"
# headers first: the refusal comes before any body byte is read; then the smuggled request
exec 3<>"/dev/tcp/127.0.0.1/$JB_PORT"
printf 'POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n' >&3
R=$(timeout 5 head -1 <&3 | tr -d '\r')
check "Content-Length with chunked 400" "HTTP/1.1 400 Bad Request" "$R"
printf '0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n' >&3 2>/dev/null
timeout 3 cat <&3 > "$T/raw" 2>/dev/null
exec 3<&-
check "smuggled request not served" 0 "$(grep -c '^HTTP/1.1 404' "$T/raw")"
H=""; for i in $(seq 1 101); do H="${H}X-H$i: v\r\n"; done
check_match "more than 100 headers 431" '^HTTP/1.1 431' "$(raw "GET /healthz HTTP/1.1\r\nHost: x\r\n${H}Connection: close\r\n\r\n")"
check_match "431 JSON body" '"code":"headers_too_large"' "$(cat "$T/raw")"

# a request in flight when SIGTERM arrives still gets its answer
exec 4<>"/dev/tcp/127.0.0.1/$JB_PORT"
printf "POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $SVC\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"a\":" >&4
sleep 0.3
kill -TERM "$JB_PID"
sleep 0.5
check "still running while a request is in flight" yes "$(kill -0 "$JB_PID" 2>/dev/null && echo yes || echo no)"
check "no new connections while draining" 000 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$JB_PORT/healthz")"
printf '"bcde"}' >&4
R=$(timeout 5 head -1 <&4 | tr -d '\r')
exec 4<&-
check "in-flight request answered after SIGTERM" "HTTP/1.1 400 Bad Request" "$R"
stop_jb TERM; check "exit 0 after drain" 0 "$JB_RC"

# an unreachable database URL: non-zero exit, one clear line
set +e
OUT=$(env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$T/s2" JAILBOX_DB_CONNECT_TIMEOUT=2 \
  JAILBOX_DATABASE_URL="postgresql://nobody:secretpw@127.0.0.1:1/none" timeout 30 "$JAILBOXD" 2>&1)
RC=$?
set -e; set +e
check "unreachable database exits 1" 1 "$RC"
check "exactly one line" 1 "$(printf '%s\n' "$OUT" | grep -c .)"
check_match "the line names the problem" '"level":"fatal","msg":"cannot connect to PostgreSQL: connection to server at .*127\.0\.0\.1.*port 1 failed' "$OUT"
check "password not echoed" 0 "$(printf '%s' "$OUT" | grep -c secretpw)"
OUT=$(env JAILBOX_LISTEN=nonsense "$JAILBOXD" 2>&1); RC=$?
check "bad setting exits 2" 2 "$RC"
check_match "bad setting named" 'JAILBOX_LISTEN' "$OUT"
"$JAILBOXD" --help > "$T/help"; RC=$?
check "--help exits 0" 0 "$RC"
check_match "--help lists settings with defaults" 'JAILBOX_STATE_DIR +default: \./var' "$(cat "$T/help")"
finish

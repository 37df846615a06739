#!/usr/bin/env bash
# The audit chain end to end on jailboxd's embedded PostgreSQL: a chain written with the
# server's own signing key, exported and verified through the REST API and offline with
# jailboxctl; then every tamper class, once directly in PostgreSQL (seen by
# GET …/audit/verify and by an offline check of a fresh export) and once in an exported
# file; the 16 × 50 concurrent-append race; lock isolation between sessions; roles; key
# rotation with old keys staying published; and retired keys valid only before retiredAt.
# Needs: JAILBOXD, JAILBOXCTL, AUDIT_DRIVER (set by CTest), curl, psql, jq.
. "$(dirname "$0")/lib.sh"
: "${JAILBOXCTL:?JAILBOXCTL must name the jailboxctl binary}"
: "${AUDIT_DRIVER:?AUDIT_DRIVER must name the audit_driver binary}"

S="$T/state"
WS="$T/workspaces"
mkdir -p "$WS/wa" "$WS/wb" "$WS/wc" "$WS/wd" "$WS/wg"
start_jb "$S" JAILBOX_WORKSPACE_ROOT="$WS" || { fail "jailboxd started"; finish; }
wait_ready || { fail "ready"; finish; }
CI="host=$S/pg/run user=jailbox dbname=jailbox"
PSQL=(psql -X -q -t -A "$CI" -v ON_ERROR_STOP=1)
KEY="$S/audit-signing.key"
SVC=$(cat "$S/service.token")
D="$AUDIT_DRIVER"
C="$JAILBOXCTL"
export JAILBOX_URL="http://127.0.0.1:$JB_PORT"

check "signing key file created 0600" "600" "$(stat -c %a "$KEY")"

# get PATH [TOKEN]: the body; the status goes to $T/code
get() {
  local auth=()
  [ -n "${2:-}" ] && auth=(-H "Authorization: Bearer $2")
  curl -s -o "$T/get" -w '%{http_code}' "${auth[@]}" "http://127.0.0.1:$JB_PORT$1" > "$T/code"
  cat "$T/get"
}
# open JOB WORKSPACE: opens a session through the API, prints "buyerToken agentToken"
open_session() {
  curl -s -H "Authorization: Bearer $SVC" -H 'Content-Type: application/json' \
    -d "{\"jobId\":\"$1\",\"agentId\":\"agent-audit\",\"workspace\":\"$2\"}" \
    "http://127.0.0.1:$JB_PORT/v1/jailbox" | jq -r '"\(.buyerToken) \(.agentToken)"'
}
head_seq() { "${PSQL[@]}" -c "SELECT seq FROM audit_heads WHERE job_id = '$1'"; }
# verify_api JOB: "REASON FIRSTBADSEQ" from the server's verification ("ok null" when intact)
verify_api() {
  get "/v1/jailbox/$1/audit/verify" "$SVC" | jq -r 'if .ok then "ok \(.firstBadSeq)" else "\(.reason) \(.firstBadSeq)" end'
}
# verify_file FILE [ARGS...]: "EXIT REASON FIRSTBADSEQ" from jailboxctl against keys.json
verify_file() {
  local f=$1; shift
  local out rc=0
  out=$("$C" audit verify "$f" --keys "$T/keys.json" --json "$@") || rc=$?
  printf '%s %s' "$rc" "$(printf '%s' "$out" | jq -r 'if .ok then "ok" else "\(.reason) \(.firstBadSeq)" end')"
}

# --- a real chain ---------------------------------------------------------------------------
read -r BUYER_A AGENT_A < <(open_session job-a wa)
read -r BUYER_B _ < <(open_session job-b wb)
check_match "sessions opened" '^jbt_' "$BUYER_A"
BASE=$(head_seq job-a)    # entries the server itself wrote at open (none, or a state entry)
H12=$("$D" append "$CI" "$KEY" job-a 12) || fail "append 12 entries"
check_match "appended: head SEQ:HASH" "^$((BASE + 12)):[0-9a-f]{64}$" "$H12"
N=$((BASE + 13))          # the seal
"$D" seal "$CI" "$KEY" job-a > "$T/seal" || fail "seal"
check_match "sealed at $N" "^$N:" "$(cat "$T/seal")"
HN=$(cat "$T/seal")
"${PSQL[@]}" -c "UPDATE sessions SET state = 'aborted', ended_at = now() WHERE job_id = 'job-a'"
check "append after the seal refused" "1" "$("$D" append "$CI" "$KEY" job-a 1 >/dev/null 2>&1; echo $?)"
check "head stays at the seal" "$N" "$(head_seq job-a)"

KEYS_BODY=$(get /v1/audit/keys)
check "GET /v1/audit/keys without a token" 200 "$(cat "$T/code")"
printf '%s' "$KEYS_BODY" > "$T/keys.json"
check "one active key, id = key file's" "1 $(grep -o '"key_id":"[0-9a-f]*' "$S.log" | tail -1 | cut -d'"' -f4)" \
  "$(jq -r '[.keys[] | select(.retiredAt == null)] | "\(length) \(.[0].keyId)"' "$T/keys.json")"

get /v1/jailbox/job-a/audit "$SVC" > "$T/a.jsonl"
check "export 200" 200 "$(cat "$T/code")"
check "export content type" "application/x-ndjson" \
  "$(curl -s -o /dev/null -w '%{content_type}' -H "Authorization: Bearer $SVC" "$JAILBOX_URL/v1/jailbox/job-a/audit")"
check "export has every entry" "$N" "$(wc -l < "$T/a.jsonl")"
check "export lines carry every member" \
  "canonical,details,hash,keyId,operation,path,prevHash,seq,session,signature,timestamp" \
  "$(head -1 "$T/a.jsonl" | jq -r 'keys | join(",")')"
check "first prevHash is 64 zeros" "$(printf '0%.0s' $(seq 64))" "$(head -1 "$T/a.jsonl" | jq -r .prevHash)"
check "canonical bytes are the signed entry" 1 "$(head -1 "$T/a.jsonl" | jq -r .canonical | base64 -d | jq .seq)"
check "last line is the seal" "seal $((N - 1))" "$(tail -1 "$T/a.jsonl" | jq -r '"\(.operation) \(.details.entries)"')"
# details come from the canonical bytes (no other copy is stored, migration 017) and are
# written in their order, so that `jailboxctl audit verify` reads the lines by its fast path
same=0
while IFS= read -r line; do
  d=$(printf '%s' "$line" | sed -n 's/.*,"details":\(.*\),"prevHash":.*/\1/p')
  c=$(printf '%s' "$line" | jq -r .canonical | base64 -d)
  [[ -n "$d" && "$c" == "{\"details\":$d,"* ]] && same=$((same + 1))
done < "$T/a.jsonl"
check "export details are the canonical bytes' details, byte for byte" "$N" "$same"
check "API verify: intact" "ok null" "$(verify_api job-a)"
check "API verify body" "true $N $N true job-a" \
  "$(get /v1/jailbox/job-a/audit/verify "$SVC" | jq -r '"\(.ok) \(.entries) \(.head.seq) \(.sealed) \(.session)"')"
check "offline verify: intact (exit 0)" "0 ok" "$(verify_file "$T/a.jsonl" --sealed --head "$HN" --session job-a)"
check_match "offline verify, text output" "^intact: $N entries, sealed, session job-a, head $N:" \
  "$("$C" audit verify "$T/a.jsonl" --keys "$T/keys.json")"
JAILBOX_TOKEN="$SVC" "$C" audit export job-a > "$T/a2.jsonl"
check "jailboxctl audit export = GET …/audit" "" "$(cmp "$T/a.jsonl" "$T/a2.jsonl")"
check "jailboxctl audit keys = GET /v1/audit/keys" "$KEYS_BODY" "$("$C" audit keys)"

# roles: the session's buyer reads it (read-only use of its token), others do not
check "no token: 401" 401 "$(get /v1/jailbox/job-b/audit >/dev/null; cat "$T/code")"
check "buyer of A on B: 403" 403 "$(get /v1/jailbox/job-b/audit "$BUYER_A" >/dev/null; cat "$T/code")"
check "buyer of A on B verify: 403" 403 "$(get /v1/jailbox/job-b/audit/verify "$BUYER_A" >/dev/null; cat "$T/code")"
# an agent token ends with its session (only the buyer keeps read access, JAILBOX_BUYER_READ_RETENTION_S)
check "agent token of the ended session: 401" 401 "$(get /v1/jailbox/job-a/audit "$AGENT_A" >/dev/null; cat "$T/code")"
check "buyer of B on B: 200" 200 "$(get /v1/jailbox/job-b/audit "$BUYER_B" >/dev/null; cat "$T/code")"
check "unknown session: 404" 404 "$(get /v1/jailbox/nope/audit/verify "$SVC" >/dev/null; cat "$T/code")"
check "bad ?head: 400" 400 "$(get '/v1/jailbox/job-a/audit/verify?head=x' "$SVC" >/dev/null; cat "$T/code")"
check "?head beyond the chain: truncated" "truncated $((N + 1))" \
  "$(get "/v1/jailbox/job-a/audit/verify?head=$((N + 5)):${HN#*:}" "$SVC" | jq -r '"\(.reason) \(.firstBadSeq)"')"

# --- tampering in PostgreSQL -----------------------------------------------------------------
"${PSQL[@]}" -c "CREATE TABLE bak AS SELECT * FROM audit_entries WHERE job_id = 'job-a';
                 CREATE TABLE bak_head AS SELECT seq, hash, sealed FROM audit_heads WHERE job_id = 'job-a'"
restore() {
  "${PSQL[@]}" -c "DELETE FROM audit_entries WHERE job_id = 'job-a';
                   INSERT INTO audit_entries SELECT * FROM bak;
                   UPDATE audit_heads h SET seq = b.seq, hash = b.hash, sealed = b.sealed
                     FROM bak_head b WHERE h.job_id = 'job-a'"
  check "restored chain verifies" "ok null" "$(verify_api job-a)"
}
# db_case NAME SQL EXPECTED-API [EXPECTED-OFFLINE]: tamper, verify via the API and offline on a
# fresh export (with the buyer's kept head and keys.json saved before), restore
db_case() {
  "${PSQL[@]}" -c "$2"
  check "db: $1 (API)" "$3" "$(verify_api job-a)"
  if [ -n "${4:-}" ]; then
    get /v1/jailbox/job-a/audit "$SVC" > "$T/t.jsonl"
    check "db: $1 (offline)" "$4" "$(verify_file "$T/t.jsonl" --sealed --head "$HN")"
  fi
  restore
}
K=$((BASE + 5))
db_case "one field changed (path)" \
  "UPDATE audit_entries SET path = '/etc/shadow' WHERE job_id = 'job-a' AND seq = $K" \
  "content changed $K" "1 content changed $K"
# details are stored only in the canonical bytes (migration 017): changing them is changing those
db_case "one field changed (details value)" \
  "UPDATE audit_entries SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'),
     '{\"details\":', '{\"details\":{\"decision\":\"approved\",\"forged\":1},\"was\":'), 'UTF8')
   WHERE job_id = 'job-a' AND seq = $K" \
  "content changed $K" "1 content changed $K"
db_case "one field changed (operation)" \
  "UPDATE audit_entries SET operation = 'read' WHERE job_id = 'job-a' AND seq = $((K + 1))" \
  "content changed $((K + 1))" "1 content changed $((K + 1))"
db_case "one field changed (timestamp)" \
  "UPDATE audit_entries SET created_at = created_at - interval '1 hour' WHERE job_id = 'job-a' AND seq = $K" \
  "content changed $K" "1 content changed $K"
db_case "canonical bytes changed" \
  "UPDATE audit_entries SET canonical = overlay(canonical placing '9' from 40 for 1) WHERE job_id = 'job-a' AND seq = $K" \
  "content changed $K" "1 content changed $K"
db_case "a middle entry deleted" \
  "DELETE FROM audit_entries WHERE job_id = 'job-a' AND seq = $K" \
  "gap $K" "1 gap $K"
db_case "two entries swapped" \
  "UPDATE audit_entries SET seq = 1000000 WHERE job_id = 'job-a' AND seq = $K;
   UPDATE audit_entries SET seq = $K WHERE job_id = 'job-a' AND seq = $((K + 3));
   UPDATE audit_entries SET seq = $((K + 3)) WHERE job_id = 'job-a' AND seq = 1000000" \
  "reordered $K" "1 reordered $K"
db_case "the last entries deleted" \
  "DELETE FROM audit_entries WHERE job_id = 'job-a' AND seq > $((N - 3))" \
  "truncated $((N - 2))" "1 truncated $((N - 2))"
db_case "the last entries deleted and the session head rolled back" \
  "DELETE FROM audit_entries WHERE job_id = 'job-a' AND seq > $((N - 3));
   UPDATE audit_heads SET seq = $((N - 3)),
     hash = (SELECT hash FROM audit_entries WHERE job_id = 'job-a' AND seq = $((N - 3)))
   WHERE job_id = 'job-a'" \
  "unsealed $((N - 2))" "1 truncated $((N - 2))"
db_case "every entry deleted" \
  "DELETE FROM audit_entries WHERE job_id = 'job-a'" \
  "truncated 1" "1 truncated 1"
db_case "every entry deleted and the head reset" \
  "DELETE FROM audit_entries WHERE job_id = 'job-a';
   UPDATE audit_heads SET seq = 0, hash = NULL WHERE job_id = 'job-a'" \
  "unsealed 1" "1 truncated 1"
db_case "canonical bytes re-serialized through jsonb" \
  "UPDATE audit_entries SET canonical = convert_to(convert_from(canonical, 'UTF8')::jsonb::text, 'UTF8')
   WHERE job_id = 'job-a' AND seq = $K" \
  "content changed $K" "1 content changed $K"
FRESH=$("$D" forge "$CI" job-a "$K")   # altered, re-signed with a fresh key, published in the table
check_match "forged with a fresh key" '^[0-9a-f]{16}$' "$FRESH"
check "db: re-signed with a fresh published key (API: the next link breaks)" "broken link $((K + 1))" "$(verify_api job-a)"
get /v1/jailbox/job-a/audit "$SVC" > "$T/t.jsonl"
check "db: re-signed with a fresh key (offline, keys saved before)" "1 unknown key $K" "$(verify_file "$T/t.jsonl" --sealed)"
check_match "published keys cannot be deleted" 'never deleted' \
  "$("${PSQL[@]}" -c "DELETE FROM audit_signing_keys WHERE key_id = '$FRESH'" 2>&1)"
check_match "… nor truncated" 'never deleted' "$("${PSQL[@]}" -c "TRUNCATE audit_signing_keys CASCADE" 2>&1)"
check_match "a session with audit entries cannot be deleted (no foreign key since 012)" \
  'session job-a has audit entries; it is never deleted' \
  "$("${PSQL[@]}" -c "DELETE FROM tokens WHERE job_id = 'job-a'; DELETE FROM sessions WHERE job_id = 'job-a'" 2>&1)"
check_match "… nor renamed away from its entries (014)" \
  'session job-a has audit entries; its job id never changes' \
  "$("${PSQL[@]}" -c "UPDATE sessions SET job_id = 'renamed' WHERE job_id = 'job-a'" 2>&1)"
check_match "… nor truncated (014)" 'sessions have audit entries; they are never deleted' \
  "$("${PSQL[@]}" -c "TRUNCATE sessions CASCADE" 2>&1)"
check_match "its audit head cannot be deleted (015)" \
  'session job-a has audit entries; its audit head is never deleted or moved' \
  "$("${PSQL[@]}" -c "DELETE FROM audit_heads WHERE job_id = 'job-a'" 2>&1)"
# (the head's primary key and its reference to sessions refuse most moves already: the target
# here is a session whose own head was deleted, allowed as it has no entries)
check_match "… nor moved to another job id (015)" \
  'session job-a has audit entries; its audit head is never deleted or moved' \
  "$("${PSQL[@]}" -c "INSERT INTO sessions (job_id, agent_id, workspace) VALUES ('job-x', 'agent-audit', '/x');
                      DELETE FROM audit_heads WHERE job_id = 'job-x';
                      UPDATE audit_heads SET job_id = 'job-x' WHERE job_id = 'job-a'" 2>&1)"
check "… and a session without entries goes with its head" "0 0" \
  "$("${PSQL[@]}" -c "INSERT INTO sessions (job_id, agent_id, workspace) VALUES ('job-y', 'agent-audit', '/y');
                      DELETE FROM sessions WHERE job_id = 'job-y';
                      SELECT count(*), (SELECT count(*) FROM audit_heads WHERE job_id = 'job-y')
                        FROM sessions WHERE job_id = 'job-y'" | tr '|' ' ')"
check_match "… nor truncated (015)" 'sessions have audit entries; their audit heads are never deleted' \
  "$("${PSQL[@]}" -c "TRUNCATE audit_heads" 2>&1)"
# (an attacker with the database can still disable the trigger, as the clean-up here does)
"${PSQL[@]}" -c "DELETE FROM audit_entries WHERE job_id = 'job-a';
                 ALTER TABLE audit_signing_keys DISABLE TRIGGER audit_signing_keys_kept;
                 DELETE FROM audit_signing_keys WHERE key_id = '$FRESH';
                 ALTER TABLE audit_signing_keys ENABLE TRIGGER audit_signing_keys_kept"
restore

# --- tampering in an exported file --------------------------------------------------------------
# edit_line FILE N JQ: FILE with line N replaced by jq's output on it
edit_line() {
  local new
  new=$(sed -n "${2}p" "$1" | jq -c "$3")
  awk -v n="$2" -v l="$new" 'NR == n { print l; next } { print }' "$1"
}
F="$T/a.jsonl"
check "file: one field changed (path)" "1 content changed $K" \
  "$(edit_line "$F" "$K" '.path = "/etc/shadow"' > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
check "file: one field changed (details)" "1 content changed $K" \
  "$(edit_line "$F" "$K" '.details.forged = 1' > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
check "file: one field changed (seq)" "1 content changed $K" \
  "$(edit_line "$F" "$K" '.seq = 99' > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
check "file: signature of another entry" "1 bad signature $K" \
  "$(edit_line "$F" "$K" ".signature = $(sed -n 1p "$F" | jq .signature)" > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
check "file: a middle entry deleted" "1 gap $K" \
  "$(sed "${K}d" "$F" > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
check "file: two entries swapped" "1 reordered $K" \
  "$(awk -v a="$K" -v b="$((K + 3))" '{ l[NR] = $0 } END { t = l[a]; l[a] = l[b]; l[b] = t; for (i = 1; i <= NR; i++) print l[i] }' "$F" > "$T/t.jsonl"; verify_file "$T/t.jsonl" --sealed)"
head -n $((N - 3)) "$F" > "$T/t.jsonl"
check "file: the last entries deleted, kept head" "1 truncated $((N - 2))" "$(verify_file "$T/t.jsonl" --head "$HN")"
check "file: the last entries deleted, session ended" "1 unsealed $((N - 2))" "$(verify_file "$T/t.jsonl" --sealed)"
H5="$K:$(sed -n "${K}p" "$F" | jq -r .hash)"
check "file: the last entries deleted, an older kept head is still inside" "0 ok" "$(verify_file "$T/t.jsonl" --head "$H5")"
: > "$T/t.jsonl"
check "file: truncated to nothing, kept head" "1 truncated 1" "$(verify_file "$T/t.jsonl" --head "$HN")"
check "file: truncated to nothing, session ended" "1 unsealed 1" "$(verify_file "$T/t.jsonl" --sealed)"
"$D" forge-line "$F" "$K" > "$T/t.jsonl"
check "file: re-signed with a fresh key" "1 unknown key $K" "$(verify_file "$T/t.jsonl" --sealed)"
check "file: re-signed with a fresh key under the real key id" "1 bad signature $K" \
  "$(edit_line "$T/t.jsonl" "$K" ".keyId = $(head -1 "$F" | jq .keyId)" > "$T/t2.jsonl"; verify_file "$T/t2.jsonl" --sealed)"
check "file: keys re-ordered (line and details): still intact" "0 ok" \
  "$(edit_line "$F" "$K" 'to_entries | reverse | from_entries | .details |= (to_entries | reverse | from_entries)' > "$T/t.jsonl"
     verify_file "$T/t.jsonl" --sealed --head "$HN")"
check_match "re-ordered line really starts with another key" '^\{"canonical"' "$(sed -n "${K}p" "$T/t.jsonl")"
check "file: another session's chain" "1 wrong session 1" "$(verify_file "$F" --session job-b)"
check "file: untouched chain verifies" "0 ok" "$(verify_file "$F" --sealed --head "$HN")"
OUT=$("$C" audit verify "$T/t2.jsonl" --keys "$T/keys.json"); RC=$?
check "tampered: exit 1, names seq and reason" "1 TAMPERED at seq $K: bad signature" "$RC ${OUT%% (*}"
# a member of terminal escapes (erase the line, print a fake verdict, hide the rest) reaches the
# terminal as printable text, and the exit status still says tampered
edit_line "$F" "$K" '. + {"\u001b[2K\rintact: 99 entries, session job-a\u001b[8m": 1}' > "$T/t3.jsonl"
OUT=$("$C" audit verify "$T/t3.jsonl" --keys "$T/keys.json"); RC=$?
check "file: member of terminal escapes: exit 1, malformed" "1 TAMPERED at seq $K: malformed" "$RC ${OUT%% (*}"
check "file: … printed without control characters" "0" "$(printf '%s' "$OUT" | LC_ALL=C grep -c $'[\x01-\x1f\x7f]')"
check "file: … --json still answers" "1 malformed $K" "$(verify_file "$T/t3.jsonl")"
# keys.json listing one key twice (once retired, once not) is refused, whatever the order
jq '.keys += [.keys[0] | .retiredAt = "2020-01-01T00:00:00.000Z"]' "$T/keys.json" > "$T/keys2.json"
check "keys.json with a key twice: exit 2" 2 "$("$C" audit verify "$F" --keys "$T/keys2.json" >/dev/null 2>&1; echo $?)"
check "usage error: exit 2" 2 "$("$C" audit verify "$F" >/dev/null 2>&1; echo $?)"
check "unreadable keys: exit 2" 2 "$("$C" audit verify "$F" --keys /nonexistent >/dev/null 2>&1; echo $?)"

# --- concurrency: 16 connections × 50 appends to one session ---------------------------------------
read -r _ _ < <(open_session job-c wc)
CB=$(head_seq job-c)
OUT=$("$D" concurrent "$CI" "$KEY" job-c 16 50); RC=$?
check "16 × 50 concurrent appends, all committed and verified" "0" "$RC"
echo "# $OUT"
check "800 entries, 800 distinct prevHash, seq 1..n without holes" "$((CB + 800)) $((CB + 800)) $((CB + 800)) $((CB + 800))" \
  "$("${PSQL[@]}" -c "SELECT count(*), count(DISTINCT prev_hash), count(DISTINCT hash), max(seq) FROM audit_entries WHERE job_id = 'job-c'" | tr '|' ' ')"
check "every prevHash is the hash of the entry before" "0" \
  "$("${PSQL[@]}" -c "SELECT count(*) FROM audit_entries e JOIN audit_entries p ON p.job_id = e.job_id AND p.seq = e.seq - 1
                      WHERE e.job_id = 'job-c' AND e.prev_hash <> p.hash")"
check "concurrent chain verifies (API)" "ok null" "$(verify_api job-c)"
# group commit: concurrent appends of one session share a statement and a commit; a malformed
# one among them fails alone, the chain stays whole, and a sealed chain refuses a whole group
read -r _ _ < <(open_session job-g wg)
OUT=$("$D" grouped-errors "$CI" "$KEY" job-g 8 20); RC=$?
echo "# $OUT"
check "group commit: bad appends refused alone, good ones grouped and verified, sealed refuses all" "0" "$RC"
read -r _ _ < <(open_session job-d wd)
check "a held append blocks its own session only" "0" "$("$D" noblock "$CI" "$KEY" job-c job-d >/dev/null; echo $?)"
check "appends join the caller's transaction, or commit their own" "0" "$("$D" txn "$CI" "$KEY" job-d >/dev/null; echo $?)"
# jb_db_pipeline (an op's outcome and its COMMIT in one round trip): a failing step — an
# error, or a status its statement cannot give — never lets the COMMIT after it commit, and
# the connection goes back to the pool usable
check "pipeline: a failed step stops the COMMIT; the connection stays usable" "0" \
  "$("$D" pipeline "$CI" > "$T/pipeline" 2>&1; echo $?)"
[ "$(cat "$T/pipeline" | grep -c 'NO\|NOT')" = 0 ] || cat "$T/pipeline"

# --- long chains: the export streams 512 rows a page, the server verifies 2048 a page -----------------
mkdir -p "$WS/we"
read -r _ _ < <(open_session job-e we)
EB=$(head_seq job-e)
"$D" append "$CI" "$KEY" job-e $((2100 - EB)) >/dev/null || fail "append 2100 entries"
check "API verify across pages: intact" "true 2100" \
  "$(get /v1/jailbox/job-e/audit/verify "$SVC" | jq -r '"\(.ok) \(.entries)"')"
curl -s -D "$T/hdr" -o "$T/e.jsonl" -H "Authorization: Bearer $SVC" "$JAILBOX_URL/v1/jailbox/job-e/audit"
check "streamed export: chunked" "1" "$(grep -ci '^transfer-encoding: chunked' "$T/hdr")"
check "streamed export: every entry once, in order" "2100 1 2100 2100" \
  "$(jq -s -r '"\(length) \(.[0].seq) \(.[-1].seq) \([.[].seq] | unique | length)"' "$T/e.jsonl")"
check "streamed export verifies offline" "0 ok" "$(verify_file "$T/e.jsonl" --head "$(head_seq job-e):$(tail -1 "$T/e.jsonl" | jq -r .hash)")"
JAILBOX_TOKEN="$SVC" "$C" audit export job-e > "$T/e2.jsonl"
check "jailboxctl audit export of a long chain = GET …/audit" "" "$(cmp "$T/e.jsonl" "$T/e2.jsonl")"
"${PSQL[@]}" -c "UPDATE audit_entries SET seq = 1000000 WHERE job_id = 'job-e' AND seq = 2047;
                 UPDATE audit_entries SET seq = 2047 WHERE job_id = 'job-e' AND seq = 2050;
                 UPDATE audit_entries SET seq = 2050 WHERE job_id = 'job-e' AND seq = 1000000"
check "db: entries swapped across a verify page boundary (API)" "reordered 2047" "$(verify_api job-e)"
"${PSQL[@]}" -c "DELETE FROM audit_entries WHERE job_id = 'job-e' AND seq = 1500"
get /v1/jailbox/job-e/audit "$SVC" > "$T/t.jsonl"
check "db: … and an entry deleted past the first export pages (offline)" "1 gap 1500" "$(verify_file "$T/t.jsonl")"
check "db: … the export still has every remaining row" "2099" "$(wc -l < "$T/t.jsonl")"

# --- rotation: keys rotate, the new key file in place; the running jailboxd takes it up ---------------
OLD_ID=$(jq -r '.keys[0].keyId' "$T/keys.json")
"$D" append "$CI" "$KEY" job-d 3 >/dev/null
cp -p "$KEY" "$T/old.key"   # the old secret key, as someone who kept (or stole) it would
OUT=$("$C" keys rotate --key "$T/new.key" --grace 0 --state-dir "$S")
check_match "jailboxctl keys rotate (FILE generated)" "key [0-9a-f]{16} \\($T/new.key, generated\\) is active; retired $OLD_ID as of .* \\(grace 0s\\)" "$OUT"
NEW_ID=$(printf '%s' "$OUT" | grep -o 'key [0-9a-f]\{16\}' | head -1 | cut -d' ' -f2)
check "… the new key file is private" "600" "$(stat -c %a "$T/new.key")"
for _ in $(seq 1 100); do   # told by NOTIFY jb_key, else within 2 s
  [ "$(curl -s -o "$T/rz" -w '%{http_code}' "$JAILBOX_URL/readyz")" = 503 ] && break; sleep 0.1
done
check "until its file holds the new key, jailboxd answers key_retired (readyz)" "key_retired" \
  "$(jq -r .error.code "$T/rz")"
cp -p "$T/new.key" "$KEY.next" && mv "$KEY.next" "$KEY"   # the key file replaced (rename)
for _ in $(seq 1 100); do
  grep -q '"msg":"audit signing key switched".*"key_id":"'"$NEW_ID"'"' "$S.log" && break; sleep 0.1
done
check "jailboxd took up the new key from its file, no restart" "200" \
  "$(curl -s -o /dev/null -w '%{http_code}' "$JAILBOX_URL/readyz")"
get /v1/audit/keys > "$T/keys.json"
check "old key retired, new key active" "$OLD_ID:retired $NEW_ID:active" \
  "$(jq -r '[.keys[] | "\(.keyId):\(if .retiredAt then "retired" else "active" end)"] | join(" ")' "$T/keys.json")"
"$D" append "$CI" "$KEY" job-d 3 >/dev/null
check "a chain signed by both keys verifies (API)" "ok null" "$(verify_api job-d)"
get /v1/jailbox/job-d/audit "$SVC" > "$T/d.jsonl"
check "… and offline" "0 ok" "$(verify_file "$T/d.jsonl")"
check "… entries carry both key ids" "$OLD_ID $NEW_ID" "$(jq -r .keyId "$T/d.jsonl" | uniq | tr '\n' ' ' | sed 's/ $//')"
check "the old sealed chain still verifies" "ok null" "$(verify_api job-a)"

# retired keys: valid for what they signed before their retirement, never after it
DN=$(head_seq job-d)
check_match "keys.json states when the old key was retired" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' \
  "$(jq -r --arg k "$OLD_ID" '.keys[] | select(.keyId == $k) | .retiredAt' "$T/keys.json")"
OUT=$("$D" append "$CI" "$T/old.key" job-d 1 2>&1); RC=$?
check "an append signed with the retired key is refused" "1" "$RC"
check_match "… saying the key is retired" "signing key $OLD_ID was retired at" "$OUT"
check "… and the chain does not move" "$DN" "$(head_seq job-d)"
"$D" resign "$CI" "$T/old.key" job-d "$DN" || fail "re-sign in the database"
check "db: the last entry re-signed with the retired key (API)" "retired key $DN" "$(verify_api job-d)"
get /v1/jailbox/job-d/audit "$SVC" > "$T/t.jsonl"
check "db: … (offline, keys.json with retiredAt)" "1 retired key $DN" "$(verify_file "$T/t.jsonl")"
check_match "db: … (offline, text)" "^TAMPERED at seq $DN: retired key \\(signed at .* with key $OLD_ID, retired at " \
  "$("$C" audit verify "$T/t.jsonl" --keys "$T/keys.json")"
"$D" resign "$CI" "$KEY" job-d "$DN" || fail "re-sign back with the current key"
check "re-signed back with the current key: intact" "ok null" "$(verify_api job-d)"
"$D" resign-line "$T/old.key" "$T/d.jsonl" "$DN" > "$T/t.jsonl"
check "file: the last entry re-signed with the retired key" "1 retired key $DN" "$(verify_file "$T/t.jsonl")"
"$D" resign-line "$T/old.key" "$T/d.jsonl" 2 > "$T/t.jsonl"
check "file: an entry the retired key signed before its retirement, re-signed by it: intact" "0 ok" \
  "$(verify_file "$T/t.jsonl")"
jq -c '.keys |= map(del(.retiredAt))' "$T/keys.json" > "$T/keys-undated.json"
"$D" resign-line "$T/old.key" "$T/d.jsonl" "$DN" > "$T/t.jsonl"
check "file: the same with retiredAt stripped from keys.json: not seen (the interval is in keys.json)" "0" \
  "$("$C" audit verify "$T/t.jsonl" --keys "$T/keys-undated.json" >/dev/null; echo $?)"
jq -c '.keys |= map(select(.keyId != "'"$OLD_ID"'"))' "$T/keys.json" > "$T/keys-new-only.json"
cp "$T/keys-new-only.json" "$T/keys.json"
check "without the old public key: unknown key" "1 unknown key 1" "$(verify_file "$T/a.jsonl")"

# JAILBOX_SIGNING_KEY_FILE: a key file of the operator's, made active by keys rotate, loaded as it is
OP_ID=$("$C" keys rotate --key "$T/operator.key" --state-dir "$S" | grep -o 'key [0-9a-f]\{16\}' | head -1 | cut -d' ' -f2)
stop_jb TERM
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S" JAILBOX_WORKSPACE_ROOT="$WS" \
  JAILBOX_SIGNING_KEY_FILE="$T/old.key" "$JAILBOXD" 2> "$T/retired.log"
check_match "a retired key is never made active again" "key $OLD_ID is retired as of .* never signs again" \
  "$(cat "$T/retired.log")"
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S" JAILBOX_WORKSPACE_ROOT="$WS" "$JAILBOXD" 2> "$T/replaced.log"
check_match "a key whose retirement is scheduled (the grace of a rotation) does not start either" \
  "key $NEW_ID is retired as of .* \\(active: $OP_ID\\)" "$(cat "$T/replaced.log")"
check "keys rotate without a database publishes nothing (exit 3; FILE generated)" "3" "$("$C" keys rotate --key "$T/stray.key" --state-dir "$S" >/dev/null 2>&1; echo $?)"
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S" JAILBOX_SIGNING_KEY_FILE="$T/stray.key" "$JAILBOXD" 2> "$T/stray.log"
STRAY_ID=$(grep -o 'signing key [0-9a-f]\{16\}' "$T/stray.log" | head -1 | cut -d' ' -f3)
check_match "a key of its own: the start is refused, naming both keys and the fix" \
  "key $STRAY_ID of jailboxd \\(file $T/stray.key\\) is not the active key $OP_ID.*jailboxctl keys rotate --key $T/stray.key" \
  "$(cat "$T/stray.log")"
chmod 0644 "$T/operator.key"
env JAILBOX_LISTEN=127.0.0.1:0 JAILBOX_STATE_DIR="$S" JAILBOX_SIGNING_KEY_FILE="$T/operator.key" "$JAILBOXD" 2> "$T/loose.log"
check_match "a key file others can read is refused" 'group or others' "$(cat "$T/loose.log")"
chmod 0600 "$T/operator.key"
start_jb "$S" JAILBOX_WORKSPACE_ROOT="$WS" JAILBOX_SIGNING_KEY_FILE="$T/operator.key" || { fail "start with key file"; finish; }
check "active key is the operator's, earlier ones kept" "3 $OP_ID" \
  "$(get /v1/audit/keys | jq -r '"\(.keys | length) \([.keys[] | select(.retiredAt == null) | .keyId] | join(","))"')"
stop_jb TERM; check "stopped" 0 "$JB_RC"
finish

#!/usr/bin/env bash
# Group commit of audit appends (db/audit_store.c) under the races a break-it review found,
# on a jailboxd of its own (one check retires every key): two processes appending to one
# session in every way at once while one seals (grouped, inside transactions, pipelines, bad
# arguments); a real session sharing its batch slot with an empty id; per-connection lock
# timeouts beside grouped appends; two keyrings in one process (never in one batch, and an
# unpublished key reported as ENOKEY); backends killed mid-batch; 60 threads on one session
# (batches of 32, leadership handed between keyrings); a COMMIT failing after the batch
# statement; and key retirement racing appends — in the same millisecond, with the retiring
# process's clock stepped back or behind the writers', against an append in a caller's
# REPEATABLE READ transaction: no entry stamped at or after its key's retiredAt is stored.
# Needs: JAILBOXD, AUDIT_DRIVER (set by CTest), psql, cc (the LD_PRELOAD clock shim).
. "$(dirname "$0")/lib.sh"
: "${AUDIT_DRIVER:?AUDIT_DRIVER must name the audit_driver binary}"
S="$T/state"
mkdir -p "$T/ws"
start_jb "$S" JAILBOX_WORKSPACE_ROOT="$T/ws" JAILBOX_WORKERS=0 || { fail "jailboxd started"; finish; }
wait_ready || { fail "ready"; finish; }
CI="host=$S/pg/run user=jailbox dbname=jailbox"
K="$S/audit-signing.key"
D="$AUDIT_DRIVER"
M=$("$D" slotmate "$CI" "$K" "")
M2=$("$D" slotmate "$CI" "$K" s29)
psql -X -q -t -A "$CI" -v ON_ERROR_STOP=1 -c "INSERT INTO agents (agent_id) VALUES ('t');
  INSERT INTO sessions (job_id, agent_id, workspace) SELECT 's' || i, 't', '/x' || i FROM generate_series(0, 29) i;
  INSERT INTO sessions (job_id, agent_id, workspace) VALUES ('$M', 't', '/m'), ('$M2', 't', '/m2')" >/dev/null
SHIM="$T/clockshim.so"
cc -shared -fPIC -O2 "$(dirname "$0")/../clockshim.c" -o "$SHIM" -ldl || fail "clock shim built"
# run NAME CMD...: CMD's output as comments, its exit status 0
run() { local name=$1; shift; OUT=$("$@" 2>&1); RC=$?; echo "$OUT" | sed 's/^/# /'; check "$name" 0 "$RC"; }

"$D" mixrace "$CI" "$K" s1 3 1 2>"$T/mix1.err" > "$T/mix1" & P=$!
"$D" mixrace "$CI" "$K" s1 2 0 2>"$T/mix2.err" > "$T/mix2"; R2=$?; wait $P; R1=$?
echo "# $(cat "$T/mix1")"; echo "# $(cat "$T/mix2")"
check "two processes, every kind of append at once, one seals: no fork, gap or wrong head" "0 0" "$R1 $R2"

OUT=$("$D" collide "$CI" "$K" "$M" "" 3 2>/dev/null); RC=$?
echo "$OUT" | sed 's/^/# /'
check "a session sharing its slot with an empty id: never given that id's result" "0" "$RC"

OUT=$("$D" timeouts "$CI" "$K" s2); RC=$?
echo "$OUT" | sed 's/^/# /'
check "lock_timeout (own transaction) bounds an append whatever waits beside it" "0" "$RC"

OUT=$("$D" twokeys "$CI" "$K" s3); RC=$?
echo "$OUT" | sed 's/^/# /'
check "two keyrings: each entry signed by its caller's key" "0" "$RC"
check_match "an unpublished key is refused as ENOKEY, never as retired" "ENOKEY 400, with EKEYREVOKED 0" "$OUT"

OUT=$("$D" killer "$CI" "$K" s4 3); RC=$?
echo "# $OUT"
check "backends killed mid-batch: every head reported stored is in the chain, which verifies" "0" "$RC"

run "60 threads on one session, two keyrings, malformed ones among them" env GC_FRESH_KEY=1 "$D" burst "$CI" "$K" s11 60 3
run "60 threads, one keyring: batches of 32" env GC_FRESH_KEY=1 BURST_ONEKEY=1 "$D" burst "$CI" "$K" s12 60 3
run "two real sessions in one batch slot, both with waiters" env GC_FRESH_KEY=1 "$D" collide "$CI" "$K" s29 "$M2" 2
run "a COMMIT failing after the batch statement: every call fails, the head cache is not left on it" \
  env GC_FRESH_KEY=1 "$D" commitfail "$CI" "$K" s13

# last: these retire every other key, the server's too
run "retiring process's clock stepped back 1 s: entries stored before stay valid" \
  env LD_PRELOAD="$SHIM" SHIM_OFFSET_MS=-1000 SHIM_TRIGGER="$T/trig" "$D" stepback "$CI" "$K" s14
(GC_FRESH_KEY=1 "$D" writers "$CI" "$K" s15 1.0 4 > "$T/w.out" 2>&1; echo $? > "$T/w.rc") & WP=$!
sleep 0.5; LD_PRELOAD="$SHIM" SHIM_OFFSET_MS=-20 "$D" retire "$CI" "$K" x | sed 's/^/# /'; wait $WP
sed 's/^/# /' "$T/w.out"; check "retiring process's clock 20 ms behind the writers': no stored entry at or after retiredAt" 0 "$(cat "$T/w.rc")"
run "an append in a caller's REPEATABLE READ transaction after a retirement is refused" "$D" rrretire "$CI" "$K" s16
OUT=$(KEYRACE_WRITERS=1 GC_FRESH_KEY=1 "$D" keyrace "$CI" "$K" s5 15); RC=$?
echo "$OUT" | grep -v "verify ok" | sed 's/^/# /'
check "key retired while one writer appends: nothing stored stamped at or after retiredAt" "0" "$RC"
OUT=$(GC_FRESH_KEY=1 "$D" keyrace "$CI" "$K" s6 10); RC=$?
echo "$OUT" | grep -v "verify ok" | sed 's/^/# /'
check "key retired while 8 grouped writers append: the same" "0" "$RC"
stop_jb TERM
finish

#!/usr/bin/env bash
# demo.sh — one real jailbox session, end to end, against a running jailboxd with a worker:
# the workspace is the source tree of a real C library from Debian's archive (apt-get source
# libyaml; kept in a cache for the next run); a scripted agent (demo-agent.sh) speaks MCP
# through `jailboxctl mcp-bridge`; this script plays the buyer with jailboxctl: it shows the
# session contract, watches the events live, approves the agent's change, sees the flagged
# write refused, approves the agent's build and test commands (`exec` inside the walls, in the
# image with a toolchain) and watches their output live, accepts, prints the change summary
# and verifies the audit chain offline.
# Used by quickstart.sh and by the end-to-end test (tests/integration/quickstart_flow.sh).
#
# Environment: JAILBOXCTL (default build/jailboxctl), JAILBOX_URL, JAILBOX_WS_URL (optional),
# JAILBOX_SERVICE_TOKEN, JAILBOX_WORKSPACE_ROOT (the server's), DEMO_CACHE (where the source
# is kept), DEMO_PACKAGE (default libyaml), DEMO_SRC (a local tree used instead of the
# archive's), DEMO_FALLBACK_SRC (a local tree used, and
# reported, when the archive cannot be reached; it must build with ./configure && make, or
# ./bootstrap first, and have `make check`), DEMO_IMAGE (the session's sandbox image, default
# jailbox-sandbox-build: the jailbox-sandbox-build:latest of `build.sh --userland`; it must be
# in the server's JAILBOX_SANDBOX_IMAGES). Exit status 0 only when every step worked: a build
# or a test that fails inside the walls fails the demo.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CTL=${JAILBOXCTL:-$HERE/../build/jailboxctl}
export JAILBOXCTL=$CTL
: "${JAILBOX_URL:?}" "${JAILBOX_SERVICE_TOKEN:?}" "${JAILBOX_WORKSPACE_ROOT:?}"
PKG=${DEMO_PACKAGE:-libyaml}
CACHE=${DEMO_CACHE:-/var/cache/jailbox-demo}
T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { printf '\n== %s  (+%s s)\n' "$*" "$(elapsed)"; }
JOB=""
# a failure ends the session it opened (the buyer's abort), says why and exits 1
fail() {
  echo "demo.sh: FAILED: $*" >&2
  if [ -n "$JOB" ] && [ -n "${BUYER:-}" ]; then
    JAILBOX_TOKEN=$BUYER "$CTL" abort "$JOB" --reason "demo failed: $*" >/dev/null 2>&1 || true
  fi
  exit 1
}

# ---- the workspace: a real project from Debian's archive ----
step "workspace: the source of Debian's $PKG"
if [ -n "${DEMO_SRC:-}" ]; then
  SRC=$DEMO_SRC
  echo "the tree given in DEMO_SRC: $SRC"
elif SRC=$("$HERE/demo-source.sh" "$PKG" "$CACHE"); then
  :
elif [ -n "${DEMO_FALLBACK_SRC:-}" ]; then
  SRC=$DEMO_FALLBACK_SRC
  echo "FALLBACK: apt-get source $PKG failed (no archive?); using the local tree $SRC"
else
  fail "apt-get source $PKG failed and no DEMO_FALLBACK_SRC was given"
fi
WS_NAME=demo-$PKG-$(date +%s)-$$
WS=$JAILBOX_WORKSPACE_ROOT/$WS_NAME
mkdir -p "$JAILBOX_WORKSPACE_ROOT"
cp -a "$SRC" "$WS"
echo "workspace $WS: $(find "$WS" -type f | wc -l) files, $(du -sh "$WS" | cut -f1)"

# ---- open the session (service token) ----
IMAGE=${DEMO_IMAGE:-jailbox-sandbox-build}
step "open a supervised session for agent demo-agent (sandbox image $IMAGE)"
OPENED=$(JAILBOX_TOKEN=$JAILBOX_SERVICE_TOKEN "$CTL" open --workspace "$WS_NAME" --agent demo-agent --mode supervised --image "$IMAGE" --json)
JOB=$(jq -r .jobId <<<"$OPENED")
BUYER=$(jq -r .buyerToken <<<"$OPENED")
AGENT=$(jq -r .agentToken <<<"$OPENED")
echo "job $JOB (buyer and agent tokens minted, shown once)"
export JAILBOX_TOKEN=$BUYER
# the buyer's web console: a one-time link (a code, not the token) to watch this session live
"$CTL" console || echo "(no console link: jailboxctl console failed)"

for _ in $(seq 1 600); do
  ST=$("$CTL" status "$JOB" --json | jq -r .state)
  case "$ST" in awaiting_agent|active) break ;; failed|aborted) "$CTL" status "$JOB" >&2; fail "the session did not start ($ST)" ;; esac
  sleep 0.1
done
[ "$ST" = awaiting_agent ] || fail "the sandbox was not ready in 60 s (state $ST)"

step "the session contract (jailboxctl explain $JOB)"
"$CTL" explain "$JOB"

# ---- the buyer watches live; the agent works ----
step "the agent works; the buyer watches (jailboxctl watch) and decides"
WATCH_LOG=$(mktemp)
"$CTL" watch "$JOB" --until-end > >(tee "$WATCH_LOG" | sed -u 's/^/  buyer sees: /') 2>/dev/null &
WATCH_PID=$!
AGENT_PID=""
trap 'kill $WATCH_PID $AGENT_PID 2>/dev/null || true; rm -f "$WATCH_LOG"' EXIT
JAILBOX_AGENT_TOKEN=$AGENT "$HERE/demo-agent.sh" "$JOB" &
AGENT_PID=$!

# the buyer decides each op the agent asks for as it comes (having read it in the watch: the
# diff of a write, the command, cwd, env names and writability of an exec): here it approves
# the README change and the build and test commands, whose output it then watches live
APPROVED=()
while kill -0 $AGENT_PID 2>/dev/null; do
  P=$("$CTL" ops "$JOB" --state pending --json | jq -c '.ops[0] // empty')
  if [ -z "$P" ]; then sleep 0.2; continue; fi
  OP=$(jq -r .opId <<<"$P")
  case "$(jq -r .tool <<<"$P")" in
    exec) WHY="build and tests: the workspace only, no network" ;;
    *) WHY="build note looks good" ;;
  esac
  "$CTL" ops "$JOB" --state pending | sed 's/^/  pending: /'
  echo "  buyer: jailboxctl approve $JOB $OP"
  "$CTL" approve "$JOB" "$OP" --reason "$WHY" | sed 's/^/  buyer: /' || fail "approving op $OP failed"
  APPROVED+=("$OP")
done
wait $AGENT_PID || fail "the agent's script failed (above: what it saw)"
[ ${#APPROVED[@]} -ge 3 ] || fail "the buyer approved ${#APPROVED[@]} ops, not the write, the build and the tests"

for _ in $(seq 1 100); do
  ST=$("$CTL" status "$JOB" --json | jq -r .state)
  [ "$ST" = done ] && break
  sleep 0.1
done
[ "$ST" = done ] || fail "the session is $ST, not done"
grep -q 'SECURITY ALERT' "$WATCH_LOG" || sleep 1
grep -q 'SECURITY ALERT' "$WATCH_LOG" || fail "the buyer saw no security alert for the flagged write"
grep -q 'APPROVAL REQUESTED' "$WATCH_LOG" || fail "the buyer saw no approval request"

step "the build and the tests, as the buyer saw them end (jailboxctl ops)"
OPS=$("$CTL" ops "$JOB" --json)
EXECS=$(jq -c '[.ops[] | select(.tool == "exec")]' <<<"$OPS")
[ "$(jq length <<<"$EXECS")" = 2 ] || fail "the agent ran $(jq length <<<"$EXECS") commands, not the build and the tests"
# (an op's result: {ok, result: the command's} once it ran, as GET …/ops stores it)
jq -r --argjson all "$OPS" '.[] | (.result.result // .result // {}) as $r | ($r.changes // []) as $c |
  "  op #\(.opId) exec `\(.args.command // (.args.argv | join(" ")))`: \(.state), " +
  "exit \($r.exitCode // "none")\(if $r.timedOut then " (TIMED OUT)" else "" end) " +
  "in \(($r.durationMs // 0) / 100 | round / 10) s, stdout \($r.stdoutBytes // 0) bytes, " +
  "stderr \($r.stderrBytes // 0) bytes, " +
  (if $r.changeset then ([$all.ops[] | select(.opId == $r.changeset.opId)][0] // {}) as $cs |
     "changeset op \($r.changeset.opId): \($cs.result.result.applied // 0) of " +
     "\($r.changeset.files // 0) files applied (\($cs.state // $r.changeset.state))"
   else "\($r.changesTotal // ($c | length)) workspace changes " +
     "(\([$c[] | select(.change == "added")] | length) added)" end)' <<<"$EXECS"
OK=$(jq '[.[] | (.result.result // .result // {}) as $r |
  select(.state == "done" and $r.exitCode == 0 and ($r.timedOut | not))] | length' <<<"$EXECS")
[ "$OK" = 2 ] ||
  fail "the build or the tests did not exit 0 inside the walls"
# the live view: the test driver's summary as the buyer's watch printed it
grep -Eq 'stdout\| # TOTAL: +[1-9]' "$WATCH_LOG" || sleep 1
grep -E 'stdout\| # (TOTAL|PASS|FAIL|ERROR):' "$WATCH_LOG" | sed 's/^/  buyer saw: /'
grep -Eq 'stdout\| # TOTAL: +[1-9]' "$WATCH_LOG" || fail "the buyer saw no test summary in the live output"
grep -Eq 'stdout\| # (FAIL|ERROR): +[1-9]' "$WATCH_LOG" && fail "the buyer saw failed tests"

step "the buyer accepts (jailboxctl accept) — and the change summary"
"$CTL" accept "$JOB" --reason "thanks" || fail "accept failed ($?)"
# the session has ended: its buyer token is revoked; the operator's service token reads on
export JAILBOX_TOKEN=$JAILBOX_SERVICE_TOKEN
[ "$("$CTL" status "$JOB" --json | jq -r .state)" = accepted ] || fail "the session was not accepted"
wait $WATCH_PID 2>/dev/null || true
echo "on disk:"
diff -u "$SRC/ReadMe.md" "$WS/ReadMe.md" | sed 's/^/  /' || true
[ ! -e "$WS/tools/bootstrap-deps.sh" ] || fail "the flagged write reached the disk"
grep -q 'Building in a jailbox' "$WS/ReadMe.md" || fail "the approved write is not on disk"

step "the audit chain, verified offline (jailboxctl audit export + audit verify --keys)"
OUT=$(mktemp -d)
"$CTL" audit export "$JOB" > "$OUT/chain.jsonl"
"$CTL" keys > "$OUT/keys.json"
echo "exported $(wc -l < "$OUT/chain.jsonl") entries to $OUT/chain.jsonl; keys in $OUT/keys.json"
jq -r '"  #\(.seq) \(.operation) \(.path // "") \(.details | tostring | .[0:90])"' "$OUT/chain.jsonl"
SEALED=""
for _ in $(seq 1 50); do
  if "$CTL" audit verify "$OUT/chain.jsonl" --keys "$OUT/keys.json" --session "$JOB" --sealed >/dev/null 2>&1; then SEALED=1; break; fi
  sleep 0.2
  "$CTL" audit export "$JOB" > "$OUT/chain.jsonl"
done
echo "  \$ jailboxctl audit verify chain.jsonl --keys keys.json --session $JOB --sealed"
"$CTL" audit verify "$OUT/chain.jsonl" --keys "$OUT/keys.json" --session "$JOB" ${SEALED:+--sealed} | sed 's/^/  /'
[ -n "$SEALED" ] || fail "the chain did not verify as sealed"
printf '\ndemo: session %s done in %s s\n' "$JOB" "$(elapsed)"

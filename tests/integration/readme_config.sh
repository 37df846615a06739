#!/usr/bin/env bash
# readme_config.sh — keeps the configuration reference (docs/configuration.md) true: every
# setting that `jailboxd --help`, `jailbox-worker --help` and `jailboxctl --help` name must have
# a row there with its default, and every JAILBOX_* name in README.md and docs/*.md must be a
# real setting.
#   readme_config.sh            check (the test; JAILBOXD, JAILBOX_WORKER, JAILBOXCTL from CTest)
#   readme_config.sh --print    print the rows for jailboxd and the worker, to paste
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/../..
CONFIG=$ROOT/docs/configuration.md
: "${JAILBOXD:?}" "${JAILBOX_WORKER:?}" "${JAILBOXCTL:?}"

# VAR<TAB>default<TAB>meaning, from jailboxd's help ("  --flag  VAR  default: X" + a line)
server_rows() {
  "$JAILBOXD" --help | awk '
    /^  --[a-z-]+ +JAILBOX_[A-Z0-9_]+ +default: / {
      var = $2; d = $0; sub(/.*default: /, "", d); getline m; sub(/^ +/, "", m)
      print var "\t" d "\t" m }'
}
# the same from the worker's help ("  VAR  default: X" + a line)
worker_rows() {
  "$JAILBOX_WORKER" --help | awk '
    /^  JAILBOX_[A-Z0-9_]+ +default: / {
      var = $1; d = $0; sub(/.*default: /, "", d); getline m; sub(/^ +/, "", m)
      print var "\t" d "\t" m }'
}

if [ "${1:-}" = --print ]; then
  { server_rows; worker_rows; } | awk -F'\t' '!seen[$1]++ { printf "| `%s` | `%s` | %s |\n", $1, $2, $3 }'
  exit 0
fi

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); }
bad() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }

N=0
while IFS=$'\t' read -r var def _; do
  N=$((N + 1))
  row=$(grep -F "| \`$var\` |" "$CONFIG" | head -1)
  if [ -z "$row" ]; then bad "docs/configuration.md has no row for $var"; continue; fi
  if printf '%s' "$row" | grep -qF "\`$def\`"; then ok; else bad "docs/configuration.md row of $var does not give its default \`$def\`: $row"; fi
done < <({ server_rows; worker_rows; })
[ "$N" -ge 30 ] && ok || bad "only $N settings parsed from the --help texts (the parser is out of step)"

# jailboxctl's own environment
for var in $("$JAILBOXCTL" --help | grep -o 'JAILBOX_[A-Z_]*' | sort -u); do
  if grep -qF "| \`$var\` |" "$CONFIG"; then ok; else bad "docs/configuration.md has no row for jailboxctl's $var"; fi
done

# nothing stale: every JAILBOX_* the README or docs/ name is a setting of one of the three programs
known=$({ "$JAILBOXD" --help; "$JAILBOX_WORKER" --help; "$JAILBOXCTL" --help; } | grep -o 'JAILBOX_[A-Z0-9_]*' | sort -u)
for f in "$ROOT/README.md" "$ROOT"/docs/*.md; do
  for var in $(grep -o 'JAILBOX_[A-Z0-9_]*' "$f" | sort -u); do
    if printf '%s\n' "$known" | grep -qx "$var"; then ok; else bad "${f#"$ROOT"/} names $var, which no --help knows"; fi
  done
done
[ -s "$CONFIG" ] && ok || bad "no configuration reference at $CONFIG"

# jailboxd warns about a JAILBOX_* variable no program reads: the names the other programs
# read (worker and jailboxctl --help) are in the list its --help ends with, so never warned
others=$("$JAILBOXD" --help | sed -n '/^Other JAILBOX_\* variables/,$p' | grep -o 'JAILBOX_[A-Z0-9_]*' | sort -u)
own=$(server_rows | cut -f1 | sort -u)
for var in $({ "$JAILBOX_WORKER" --help; "$JAILBOXCTL" --help; } | grep -o 'JAILBOX_[A-Z0-9_]*' | sort -u); do
  if printf '%s\n' "$own" "$others" | grep -qx "$var"; then ok; else bad "jailboxd would warn about $var, which another program reads"; fi
done
# … and does, naming the setting meant, before anything else can stop the start (here: a
# policy file that does not exist); a worker's setting and a jailboxctl one pass quietly
out=$(env JAILBOX_MAX_WAITNG_CALLS=1 JAILBOX_REQUIRE_WALLS=1 JAILBOX_TOKEN=x JAILBOX_POLICY_FILE=/nonexistent/policy.jsonl \
  JAILBOX_STATE_DIR="$(mktemp -d)" "$JAILBOXD" 2>&1)
if printf '%s' "$out" | grep -q '"name":"JAILBOX_MAX_WAITNG_CALLS","didYouMean":"JAILBOX_MAX_WAITING_CALLS"'; then ok; else bad "no warning for a misspelled setting: $out"; fi
if printf '%s' "$out" | grep -q 'unknown setting.*\(REQUIRE_WALLS\|JAILBOX_TOKEN\)'; then bad "a warning for a setting another program reads: $out"; else ok; fi

echo "$PASSED passed, $FAILED failed ($N settings in the --help texts)"
[ "$FAILED" = 0 ]

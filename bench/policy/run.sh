#!/usr/bin/env bash
# bench/policy/run.sh — the cost of deciding an op against 256 approval rules: the same MCP
# write in a session without rules and in one with 256 (none matching; then the last one
# allowing it), alternating, through the whole stack (bench.mjs); then the matcher alone
# (build/rules_bench: jb_rules_match against 256 compiled rules, beside compiling them).
#
#   bench/policy/run.sh [ROUNDS]    (env: BUILD=build; needs root, Docker with runsc, a built tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] && [ -x "$BUILD/rules_bench" ] ||
  { echo "run.sh: build first ($BUILD/jailboxd, $BUILD/rules_bench)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
"$BUILD/rules_bench"
JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/policy/bench.mjs" "${1:-300}"

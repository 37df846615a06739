#!/usr/bin/env bash
# bench/exec/run.sh — `exec true` through the whole stack against `docker exec CONTAINER true`
# on the same session container, alternating (bench.mjs). Prints p50/p90/min and the ratio.
#
#   bench/exec/run.sh [ROUNDS]      (env: BUILD=build; needs root, Docker with runsc, a built tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] || { echo "run.sh: build first ($BUILD/jailboxd)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/exec/bench.mjs" "${1:-30}"

#!/usr/bin/env bash
# bench/edit/run.sh — one changed line of a 100 KiB file as an MCP `edit` against the same
# change as a `write` of the whole file, alternating, through the whole stack (bench.mjs).
# Prints p50/p99 of each, their argument sizes and the ratio of the medians.
#
#   bench/edit/run.sh [ROUNDS]      (env: BUILD=build; needs root, Docker with runsc, a built tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] || { echo "run.sh: build first ($BUILD/jailboxd)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/edit/bench.mjs" "${1:-200}"

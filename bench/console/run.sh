#!/usr/bin/env bash
# bench/console/run.sh — the time from an approval request leaving jailboxd to its diff
# painted in the web console (headless Chromium), against the same event reaching a plain
# socket.io-client in Node, in the same run (bench.mjs). Prints p50/p90 of each.
#
#   bench/console/run.sh [ROUNDS]   (env: BUILD=build; needs root, Docker with runsc,
#                                    /usr/bin/chromium, a built tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] || { echo "run.sh: build first ($BUILD/jailboxd)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/playwright-core" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
JAILBOXD=$BUILD/jailboxd JAILBOXCTL=$BUILD/jailboxctl node "$ROOT/bench/console/bench.mjs" "${1:-50}"

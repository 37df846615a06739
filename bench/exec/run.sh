#!/usr/bin/env bash
# bench/exec/run.sh — `exec true` through the whole stack against `docker exec CONTAINER true`
# on the same session container, alternating (bench.mjs: p50/p90/min, the ratio, E2B's and
# Daytona's published first-exec figures, where the time went); then Debian's libyaml built with
# `make -j2` through `exec` against the same build in `docker run --runtime=runsc` of the same
# image, alternating (build.mjs: the ratio; the jailbox-sandbox-build image, build.sh --userland).
#
#   bench/exec/run.sh [ROUNDS [BUILD_ROUNDS [LANDING_ROUNDS]]]   (defaults 30, 3 and 3; 0 skips)
#   env: BUILD=build, GAP_MS (idle before each exec true, default 1000), JB_IMAGE_SUFFIX;
#   BASE_BUILD=DIR (a build of the tree before the landing checks): then landing.mjs compares a
#   writable libyaml build through exec on BUILD against the same on BASE_BUILD, alternating.
#   Needs root, Docker with runsc, a built tree; the build part the Debian archive once (cached
#   under var/sandbox-image/ and var/demo-src/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] || { echo "run.sh: build first ($BUILD/jailboxd)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/exec/bench.mjs" "${1:-30}"
if [ "${2:-3}" != 0 ]; then
  JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/exec/build.mjs" "${2:-3}"
fi
if [ -n "${BASE_BUILD:-}" ] && [ "${3:-3}" != 0 ]; then
  JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/exec/landing.mjs" "${3:-3}"
fi

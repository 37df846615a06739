#!/usr/bin/env bash
# bench/changeset/run.sh — what holding a command's effects for the buyer costs (bench.mjs):
# a 200-file changeset applied against cp -a of the same files, and libyaml's make through a
# writable exec on the overlay against the same without it, alternating.
#
#   bench/changeset/run.sh [APPLY_ROUNDS [BUILD_ROUNDS]]   (defaults 5 and 3; 0 skips)
#   env: BUILD=build, JB_IMAGE_SUFFIX. Needs root, Docker with runsc, a built tree; the build
#   part the Debian archive once (cached under var/sandbox-image/ and var/demo-src/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/jailboxd" ] || { echo "run.sh: build first ($BUILD/jailboxd)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] ||
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
JAILBOXD=$BUILD/jailboxd node "$ROOT/bench/changeset/bench.mjs" "${1:-5}" "${2:-3}"

#!/usr/bin/env bash
# bench/scale/run.sh — approvals per second and event delivery p99, one jailboxd against two
# behind nginx, in the same run on one PostgreSQL (external DB mode) and, for the two, real
# Redis fan-out. No worker: the pending ops are database fixtures (the walls are not what is
# measured). Per phase: CONC sessions (default 16), each with a buyer socket, OPS approvals in
# all (default 3000) sent over REST, CONC in flight; an approval's event latency is from
# sending the request to the buyer's socket receiving its jailbox:op. Prints both phases, the
# ratio, and the CPU each process (jailboxd, postgres backends, redis-server, nginx) used
# over the phase (from /proc/<pid>/stat), naming the bottleneck.
# Usage: bench/scale/run.sh   (env: OPS, CONC, HTTP_THREADS per instance, default 8)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$ROOT/build/jailboxd" ] || { echo "run.sh: build first (build/jailboxd)" >&2; exit 1; }
command -v redis-server >/dev/null && command -v nginx >/dev/null || { echo "run.sh: needs redis-server and nginx (deploy/install-deps.sh)" >&2; exit 1; }
[ -d "$ROOT/tests/node/node_modules/socket.io-client" ] || (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund >/dev/null)
exec node "$ROOT/bench/scale/bench.mjs"

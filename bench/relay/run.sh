#!/usr/bin/env bash
# bench/relay/run.sh — the op relay: sequential MCP tools/call `read` of a 4 KiB
# file and `write` of 1 MiB, agent (npm socket.io-client) → jailboxd → jailbox-worker (a read
# on its ops socket, a write queued as an ops row) → jailbox-shim inside gVisor + Docker +
# bwrap/seccomp → the op's durable record → ack, in an unsupervised session; in the same run, against the same session container, the
# docker CLI a user would otherwise reach for: `docker exec CONTAINER cat FILE` and
# `docker exec -i CONTAINER sh -c 'cat > FILE'`. Prints ops/s, p50 and p99 of each and the
# ratio of the rates. Targets: 4 KiB read p50 <= 2 ms and >= 50x the docker exec
# rate; the same figures are printed for the 1 MiB write. Three floors of the read, measured
# in the same minutes, say where its time goes: an MCP ping on the same agent socket (no
# worker, no database), the same read handed to the worker on its ops socket (shim through
# the walls and the durable record, no jailboxd), and one durable single-row commit on the
# same PostgreSQL (pgbench -c 1). Last, wake.c: what one hand-over between two processes
# costs here when the receiver slept 0 to 2,500 µs.
#
#   bench/relay/run.sh            (env: N_READ=2000 N_WRITE=200 N_EXEC=40 BUILD=build)
#
# The session's image is built with /usr/bin/cat and /bin/sh added (--extra), so that the
# baseline has a `cat` to run; the production image has neither. Needs root, Docker with
# runsc and a built tree.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
BUILD=${BUILD:-$ROOT/build}
IMAGE=${IMAGE:-jailbox-sandbox:bench-relay}
[ -d node_modules/socket.io-client ] || npm ci --no-audit --no-fund >/dev/null
"$ROOT/deploy/start-dockerd.sh" >/dev/null
"$ROOT/deploy/sandbox-image/build.sh" --shim "$BUILD/jailbox-shim" --tag "$IMAGE" \
  --extra /usr/bin/cat --extra "$(readlink -f /bin/sh):/bin/sh" >/dev/null
JAILBOXD=$BUILD/jailboxd IMAGE=$IMAGE node bench.mjs
# what the machine charges for waking a process that slept (wake.c): most of a read's
# hand-overs wake one that slept for more than a few hundred µs
WAKE=$(mktemp -d)
trap 'rm -rf "$WAKE"' EXIT
cc -O2 -o "$WAKE/wake" wake.c && "$WAKE/wake"

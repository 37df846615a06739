#!/usr/bin/env bash
# bench/ws/run.sh — Socket.IO benchmark: idle memory per connection and broadcast
# fan-out, jailboxd against a minimal Node socket.io server in the same run (see bench.mjs).
# Targets: <= 20 KiB RSS per idle connection; >= 3x Node's delivered events/s at <= 1/5 of
# its memory per connection. Usage: bench/ws/run.sh   (env N, F, C, SECONDS, WORKERS, RATE)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
[ -d node_modules/socket.io ] || npm ci --no-audit --no-fund >/dev/null
[ -x "$ROOT/build/jailboxd" ] || { cmake -S "$ROOT" -B "$ROOT/build" >/dev/null && cmake --build "$ROOT/build" -j >/dev/null; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
JAILBOXD=${JAILBOXD:-$ROOT/build/jailboxd} exec node bench.mjs

#!/usr/bin/env bash
# Quickstart: on a fresh Debian 12 machine, as root — installs what is missing, builds,
# builds the two sandbox images (the minimal one, and the one with a Debian userland and a
# toolchain: debootstrapped on the first run, a few minutes, then taken from var/sandbox-image/),
# starts dockerd with runsc, starts jailboxd with its embedded defaults (its own PostgreSQL
# under the state directory, one worker), then runs one real session (deploy/demo.sh): a
# scripted MCP agent works on the source of Debian's libyaml through `jailboxctl mcp-bridge`,
# builds it and runs its tests inside the walls, while this script plays the buyer with
# jailboxctl. jailboxd keeps running; the last lines say how to stop it. DEMO=0 skips the
# session. JAILBOX_SANDBOX_IMAGE and JAILBOX_BUILD_IMAGE name the two images (defaults
# jailbox-sandbox:latest and jailbox-sandbox-build:latest, jailboxd's defaults); when either
# is set, jailboxd's allowlist (JAILBOX_SANDBOX_IMAGES, unless set too) is the two.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T_START=$(date +%s.%N)

./deploy/install-deps.sh
echo "== building"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
echo "== Docker and the sandbox images (the walls)"
./deploy/start-dockerd.sh
MIN_IMAGE=${JAILBOX_SANDBOX_IMAGE:-jailbox-sandbox:latest}
BUILD_IMAGE=${JAILBOX_BUILD_IMAGE:-jailbox-sandbox-build:latest}
./deploy/sandbox-image/build.sh --shim "$ROOT/build/jailbox-shim" --tag "$MIN_IMAGE"
T_IMG=$(date +%s)
./deploy/sandbox-image/build.sh --userland --shim "$ROOT/build/jailbox-shim" --tag "$BUILD_IMAGE"
echo "   (the userland image: $(($(date +%s) - T_IMG)) s)"
IMAGE_ENV=()
if [ -n "${JAILBOX_SANDBOX_IMAGE:-}${JAILBOX_BUILD_IMAGE:-}" ]; then
  IMAGE_ENV=(JAILBOX_SANDBOX_IMAGE="$MIN_IMAGE" JAILBOX_SANDBOX_IMAGES="${JAILBOX_SANDBOX_IMAGES:-$MIN_IMAGE,$BUILD_IMAGE}")
fi

# The embedded cluster runs as the unprivileged user 'jailbox', which must reach the state
# directory; a checkout under a private home (e.g. /root) falls back to /var/lib/jailbox.
STATE=${JAILBOX_STATE_DIR:-$ROOT/var}
if [ -z "${JAILBOX_STATE_DIR:-}" ] && ! su -s /bin/sh jailbox -c "test -x '$ROOT'" 2>/dev/null; then
  STATE=/var/lib/jailbox
fi
mkdir -p "$STATE"
LISTEN=${JAILBOX_LISTEN:-127.0.0.1:8080}
WSROOT=${JAILBOX_WORKSPACE_ROOT:-$ROOT/workspaces}
mkdir -p "$WSROOT"
LOG="$STATE/jailboxd.log"
PIDFILE="$STATE/jailboxd.pid"

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "== stopping the jailboxd started earlier (pid $(cat "$PIDFILE"))"
  kill -TERM "$(cat "$PIDFILE")"
  for _ in $(seq 1 150); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
fi

[ -f "$LOG" ] && mv -f "$LOG" "$LOG.1"
echo "== starting jailboxd (state: $STATE, log: $LOG)"
env ${IMAGE_ENV[@]+"${IMAGE_ENV[@]}"} JAILBOX_STATE_DIR="$STATE" JAILBOX_LISTEN="$LISTEN" JAILBOX_WORKSPACE_ROOT="$WSROOT" setsid "$ROOT/build/jailboxd" >>"$LOG" 2>&1 < /dev/null &
echo $! > "$PIDFILE"

URL=""
for _ in $(seq 1 300); do
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "jailboxd exited; the end of its log:" >&2
    tail -5 "$LOG" >&2
    exit 1
  fi
  URL=$(grep -o '"msg":"listening","addr":"[^"]*","url":"[^"]*' "$LOG" | tail -1 | sed 's/.*"url":"//' || true)
  if [ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ]; then break; fi
  sleep 0.1
done
[ -n "$URL" ] || { echo "jailboxd did not become ready; see $LOG" >&2; exit 1; }
WS_URL=ws://$(grep -o '"msg":"ws listening","addr":"[^"]*' "$LOG" | tail -1 | sed 's/.*"addr":"//')

if [ "${DEMO:-1}" != 0 ]; then
  echo
  echo "== one real session: a scripted agent on Debian's libyaml source (edits, a build and its tests inside the walls), you as the buyer"
  DEMO_IMAGE=$BUILD_IMAGE JAILBOX_URL=$URL JAILBOX_WS_URL=$WS_URL JAILBOX_SERVICE_TOKEN=$(cat "$STATE/service.token") \
    JAILBOX_WORKSPACE_ROOT="$WSROOT" JAILBOXCTL="$ROOT/build/jailboxctl" DEMO_CACHE="$STATE/demo-src" \
    ./deploy/demo.sh
fi

echo
echo "jailboxd is listening on $URL (pid $(cat "$PIDFILE"))"
echo "  readiness: curl $URL/readyz  ->  $(curl -s "$URL/readyz")"
echo "  log:       $LOG"
echo "  socket:    $WS_URL/socket.io/"
# the service sign-in link is the operator's: it goes to a file only root reads, never to the
# terminal (a terminal's output is logged, shared and scrolled back by others)
LINKFILE=$STATE/console-link
(umask 077 && rm -f "$LINKFILE" &&
  JAILBOX_URL=$URL JAILBOX_TOKEN=$(cat "$STATE/service.token") "$ROOT/build/jailboxctl" console 2>/dev/null |
  sed -n 's/^console (one-time link, [0-9]* s): //p' > "$LINKFILE") || true
if [ -s "$LINKFILE" ]; then
  echo "  console:   one-time service sign-in link (5 min; the session list) in $LINKFILE (mode 0600)"
else
  echo "  console:   $URL/console/ (paste a token)"
fi
echo "  service token: $STATE/service.token   (export JAILBOX_URL=$URL JAILBOX_TOKEN=\$(cat $STATE/service.token); $ROOT/build/jailboxctl --help)"
echo "  stop:      kill -TERM \$(cat $PIDFILE)   (stops its embedded PostgreSQL and workers too)"
printf '  quickstart took %s s\n' "$(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"

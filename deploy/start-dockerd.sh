#!/usr/bin/env bash
# Starts dockerd in the background when it is not already answering on its socket, and waits
# (60 s at most) until it does. For machines without systemd (containers, CI VMs); where
# systemd manages docker, the socket answers already and nothing is started.
# Log: /var/log/jailbox-dockerd.log. Exit 0 when the daemon answers, 1 otherwise.
set -euo pipefail

SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
LOG=${JAILBOX_DOCKERD_LOG:-/var/log/jailbox-dockerd.log}

answers() {
  [ -S "$SOCK" ] && curl -s -m 2 --unix-socket "$SOCK" -o /dev/null -w '%{http_code}' \
    http://localhost/_ping 2>/dev/null | grep -qx 200
}

if answers; then
  echo "start-dockerd.sh: dockerd answers on $SOCK"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "start-dockerd.sh: dockerd is not running and starting it needs root" >&2
  exit 1
fi
command -v dockerd >/dev/null || { echo "start-dockerd.sh: dockerd not installed (deploy/install-deps.sh)" >&2; exit 1; }

# A daemon that crashed leaves its pid file behind; dockerd refuses to start over a live one.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  rm -f /var/run/docker.pid
fi
if [ -f /var/run/docker.pid ]; then
  echo "start-dockerd.sh: dockerd (pid $(cat /var/run/docker.pid)) runs but does not answer yet; waiting"
else
  echo "start-dockerd.sh: starting dockerd (log: $LOG)"
  # setsid: the daemon outlives this shell and a terminal's Ctrl-C does not reach it
  setsid dockerd >>"$LOG" 2>&1 < /dev/null &
fi
for _ in $(seq 1 600); do
  if answers; then
    echo "start-dockerd.sh: dockerd answers on $SOCK"
    exit 0
  fi
  sleep 0.1
done
echo "start-dockerd.sh: dockerd did not answer within 60 s; the end of $LOG:" >&2
tail -20 "$LOG" >&2 || true
exit 1

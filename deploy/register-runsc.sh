#!/usr/bin/env bash
# Registers gVisor's runsc as the Docker runtime "runsc" in /etc/docker/daemon.json with the
# arguments jailbox relies on, keeping every other key of an existing file:
#   --network=none   runsc refuses NetworkMode "none" containers without it
#   --oci-seccomp    gVisor enforces the container's seccomp profile as well
#   --host-uds=open  a process in the sandbox may connect to a host Unix socket in its mounts:
#                    jailbox-shim's launcher reaches the worker's per-session socket that way
#                    (without it the shim speaks over the slower Docker attach stream); the
#                    jailed shim itself cannot connect (Wall 3's filter; sandbox/WALLS.md)
# Idempotent; a running dockerd is sent SIGHUP (runtimes are reloadable). Needs jq.
set -euo pipefail

CONF=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
RUNSC=$(command -v runsc || true)
[ -n "$RUNSC" ] || { echo "register-runsc.sh: runsc not installed" >&2; exit 1; }
command -v jq >/dev/null || { echo "register-runsc.sh: jq not installed" >&2; exit 1; }

mkdir -p "$(dirname "$CONF")"
current='{}'
if [ -s "$CONF" ]; then
  current=$(jq -e 'if type == "object" then . else error("not an object") end' "$CONF") || {
    echo "register-runsc.sh: $CONF is not a JSON object; not touching it" >&2; exit 1; }
fi
wanted=$(printf '%s' "$current" | jq --arg path "$RUNSC" \
  '.runtimes.runsc = ((.runtimes.runsc // {}) + {path: $path, runtimeArgs: ["--network=none", "--oci-seccomp", "--host-uds=open"]})')
if [ "$(printf '%s' "$current" | jq -S .)" = "$(printf '%s' "$wanted" | jq -S .)" ]; then
  echo "register-runsc.sh: runsc already registered in $CONF"
  exit 0
fi
tmp=$(mktemp "$CONF.XXXXXX")
printf '%s\n' "$wanted" > "$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$CONF"
echo "register-runsc.sh: registered runsc ($RUNSC) in $CONF"
if [ "$CONF" = /etc/docker/daemon.json ] && [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  kill -HUP "$(cat /var/run/docker.pid)"
  echo "register-runsc.sh: asked the running dockerd to reload its configuration"
fi

#!/usr/bin/env bash
# Builds the jailbox control-plane image offline from this host's build and its Debian
# libraries, and imports it into the local Docker daemon (no registry; the tests use this).
# The same image runs jailboxd (default command) and jailbox-worker (command
# /opt/jailbox/bin/jailbox-worker); deploy/Dockerfile builds the equivalent from a registry.
#   /opt/jailbox/bin/{jailboxd,jailboxctl,jailbox-worker}  from --build (default build/)
#   their shared libraries (ldd) and the dynamic loader
#   /etc/passwd, /etc/group  root, nobody and jailbox (uid/gid 10001)
#   /etc/ssl/certs/ca-certificates.crt  for TLS to PostgreSQL/Redis
#   /var/lib/jailbox (state), /workspaces, /tmp
# Usage: build.sh [--build DIR] [--tag NAME:TAG] [--socket PATH]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD="$ROOT/build"
TAG=jailbox:latest
SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --socket) SOCK=$2; shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
. "$ROOT/deploy/lib/rootfs.sh"
for b in jailboxd jailboxctl jailbox-worker; do
  [ -x "$BUILD/$b" ] || { echo "build.sh: no $BUILD/$b (build first)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/jailbox-cp-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"
mkdir -p "$R"/{etc,tmp,var/lib/jailbox,workspaces,opt/jailbox/bin}
for b in jailboxd jailboxctl jailbox-worker; do rootfs_put_bin "$BUILD/$b" "/opt/jailbox/bin/$b"; done
[ -f /etc/ssl/certs/ca-certificates.crt ] && rootfs_put /etc/ssl/certs/ca-certificates.crt
printf 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\njailbox:x:10001:10001:jailbox:/var/lib/jailbox:/nonexistent\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\njailbox:x:10001:\n' > "$R/etc/group"
printf 'hosts: files dns\n' > "$R/etc/nsswitch.conf"
chmod 0644 "$R/etc/passwd" "$R/etc/group" "$R/etc/nsswitch.conf"
chmod 1777 "$R/tmp"
rootfs_tar "$WORK/rootfs.tar"
# the state directory belongs to the jailbox user inside the image
tar --delete -f "$WORK/rootfs.tar" ./var/lib/jailbox 2>/dev/null || true
tar --append -f "$WORK/rootfs.tar" --owner=10001 --group=10001 --numeric-owner --mtime=@0 --no-recursion -C "$R" ./var/lib/jailbox

id=$(rootfs_import "$WORK/rootfs.tar" "$TAG" "$SOCK" "USER 10001:10001
WORKDIR /var/lib/jailbox
ENV JAILBOX_STATE_DIR=/var/lib/jailbox JAILBOX_WORKSPACE_ROOT=/workspaces JAILBOX_WORKERS=0 JAILBOX_LISTEN=0.0.0.0:8080 JAILBOX_WS_LISTEN=0.0.0.0:8081 JAILBOX_DRAIN_DELAY_MS=5000
EXPOSE 8080 8081
ENTRYPOINT [\"/opt/jailbox/bin/jailboxd\"]
LABEL org.opencontainers.image.title=jailbox jailbox.build=offline")
echo "build.sh: imported $TAG ($id)"

#!/usr/bin/env bash
# Builds the jailbox sandbox image offline from this host's own files and imports it into the
# local Docker daemon through the Engine API (no registry, no docker CLI needed):
#   /usr/bin/bwrap, /usr/bin/setpriv      from the host's bubblewrap and util-linux packages
#   their shared libraries (found with ldd) and the dynamic loader
#   /opt/jailbox/bin/jailbox-shim         the static shim (--shim, default build/jailbox-shim)
#   /etc/passwd, /etc/group               root and nobody only
#   /etc/jailbox/manifest                 SHA-256 of every file above
#   empty mount points /workspace /tmp /proc /sys /dev
# The tar stream is deterministic (sorted names, numeric owners, fixed times), so the
# manifest digest names the content. Usage:
#   build.sh [--shim PATH] [--tag NAME:TAG] [--socket PATH] [--rootfs DIR (keep it there)]
#            [--extra /HOST/BINARY[:/IMAGE/PATH] ...]  (extra host binaries with their
#            libraries, e.g. /usr/bin/cat for a benchmark image; never in the production image)
#   build.sh --userland [...]   the image with a Debian userland and a toolchain,
#            jailbox-sandbox-build:latest (userland.sh, which takes the other arguments)
set -euo pipefail
for a in "$@"; do
  if [ "$a" = --userland ]; then
    rest=()
    for b in "$@"; do [ "$b" = --userland ] || rest+=("$b"); done
    exec "$(dirname "$0")/userland.sh" ${rest[@]+"${rest[@]}"}
  fi
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/deploy/lib/rootfs.sh"
SHIM="$ROOT/build/jailbox-shim"
TAG=jailbox-sandbox:latest
SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
KEEP=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shim) SHIM=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --socket) SOCK=$2; shift 2 ;;
    --rootfs) KEEP=$2; shift 2 ;;
    --extra) EXTRA+=("$2"); shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$SHIM" ] || { echo "build.sh: no shim at $SHIM (build it first)" >&2; exit 1; }
if ldd "$SHIM" >/dev/null 2>&1; then
  echo "build.sh: $SHIM is dynamically linked; the image expects the static shim" >&2; exit 1
fi
BWRAP=$(command -v bwrap) || { echo "build.sh: bubblewrap not installed" >&2; exit 1; }
SETPRIV=$(command -v setpriv) || { echo "build.sh: setpriv (util-linux) not installed" >&2; exit 1; }

WORK=$(mktemp -d /tmp/jailbox-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"
mkdir -p "$R"/{usr/bin,opt/jailbox/bin,etc/jailbox,workspace,tmp,proc,sys,dev}

# the binaries and their libraries at the paths ldd prints (deploy/lib/rootfs.sh)
rootfs_put_bin "$BWRAP" /usr/bin/bwrap
rootfs_put_bin "$SETPRIV" /usr/bin/setpriv
for x in "${EXTRA[@]}"; do
  rootfs_put_bin "${x%%:*}" "${x#*:}"
done
install -m 0755 "$SHIM" "$R/opt/jailbox/bin/jailbox-shim"
printf 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
chmod 0644 "$R/etc/passwd" "$R/etc/group"
chmod 1777 "$R/tmp"
(cd "$R" && find . -type f ! -path ./etc/jailbox/manifest -print0 | sort -z | xargs -0 sha256sum) > "$R/etc/jailbox/manifest"
DIGEST=$(sha256sum < "$R/etc/jailbox/manifest" | cut -d' ' -f1)
SHIM_SHA=$(sha256sum < "$SHIM" | cut -d' ' -f1)
BWRAP_VERSION=$("$BWRAP" --version | head -1)

rootfs_tar "$WORK/rootfs.tar"
[ -z "$KEEP" ] || { rm -rf "$KEEP"; cp -a "$R" "$KEEP"; }

# image metadata the worker reads back: the content digest and the shim's hash
id=$(rootfs_import "$WORK/rootfs.tar" "$TAG" "$SOCK" \
  "LABEL jailbox.image.digest=$DIGEST jailbox.shim.sha256=$SHIM_SHA jailbox.bwrap.version=\"$BWRAP_VERSION\"") || {
  echo "build.sh: import failed" >&2; exit 1; }
repo=${TAG%:*}; tag=${TAG##*:}
[ "$repo" != "$TAG" ] || tag=latest
echo "build.sh: imported $repo:$tag ($id), content digest $DIGEST, $(wc -l < "$R/etc/jailbox/manifest") files"

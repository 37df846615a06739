#!/usr/bin/env bash
# userland.sh — builds the jailbox sandbox image with a Debian userland and a toolchain
# (jailbox-sandbox-build), offline from the Debian archive: no image registry, no docker CLI.
# Run it as `build.sh --userland [...]` or directly.
#
#   debootstrap --variant=minbase of Debian bookworm, with the packages in PACKAGES (the
#   toolchain for the agent's commands, with autoconf, automake and libtool for source trees
#   that ship configure.ac but no configure script, as Debian's libyaml does; bubblewrap for
#   Wall 3; util-linux, essential in minbase, brings setpriv), trimmed: no package lists or
#   .debs, no documentation but the copyright files, no man or info pages, no translations, no
#   logs, no device nodes, no set-user-id or set-group-id bits, no ldconfig aux-cache (so
#   that two debootstraps of the same package versions give the same files). That root is
#   cached as a tar under the checkout's var/sandbox-image/ (or --cache DIR), named by a key over the suite, the architecture, the
#   variant, the package list and the trimming recipe (with the manifest of its files and
#   bubblewrap's version beside it): a later build downloads nothing.
#   Added on top: the static shim at /opt/jailbox/bin/jailbox-shim (--shim, default
#   build/jailbox-shim), an empty /workspace, and /etc/jailbox/manifest, the SHA-256 of every
#   regular file; the image's content digest (label jailbox.image.digest) is the SHA-256 of
#   that manifest, as for the minimal image (build.sh), with the labels it carries and
#   jailbox.userland (what was debootstrapped). The image's tar is the cached one with the
#   shim and the manifest appended; when the image under --tag already has that digest,
#   nothing is imported.
#
# Usage:
#   userland.sh [--shim PATH] [--tag NAME:TAG] [--socket PATH] [--cache DIR] [--mirror URL]
#               [--refresh (debootstrap again, replacing the cached root)]
#               [--rootfs DIR (keep the image's root there)]
# Needs root (debootstrap, device nodes, owners), debootstrap (deploy/install-deps.sh), jq,
# curl, and HTTP access to the mirror for the first build.
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/deploy/lib/rootfs.sh"
SHIM="$ROOT/build/jailbox-shim"
TAG=jailbox-sandbox-build:latest
SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
CACHE="$ROOT/var/sandbox-image"
MIRROR=http://deb.debian.org/debian
SUITE=bookworm
VARIANT=minbase
PACKAGES=(build-essential git python3 make pkg-config ca-certificates bubblewrap autoconf automake libtool)
# Bump when the trimming below changes, so that an older cached root is not reused.
RECIPE=2
REFRESH=""
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shim) SHIM=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --socket) SOCK=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --refresh) REFRESH=1; shift ;;
    --rootfs) KEEP=$2; shift 2 ;;
    *) echo "userland.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
say() { echo "userland.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (debootstrap, device nodes, file owners)"; exit 1; }
[ -x "$SHIM" ] || { say "no shim at $SHIM (build it first)"; exit 1; }
if ldd "$SHIM" >/dev/null 2>&1; then
  say "$SHIM is dynamically linked; the image expects the static shim"; exit 1
fi
ARCH=$(dpkg --print-architecture)
KEY=$(printf '%s\n' "recipe $RECIPE" "suite $SUITE" "arch $ARCH" "variant $VARIANT" \
  "packages $(printf '%s\n' "${PACKAGES[@]}" | sort | tr '\n' ' ')" | sha256sum | cut -c1-16)
BASE="$CACHE/userland-$SUITE-$ARCH-$KEY.tar"
mkdir -p "$CACHE"

# trim ROOTFS: what a jailed build never reads, and what differs between two debootstraps
trim() {
  local r=$1
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/usr/share/lintian \
    "$r"/var/log/* "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/dev/* \
    "$r"/etc/machine-id "$r"/etc/hostname "$r"/etc/resolv.conf "$r"/root/.bash_history \
    "$r"/var/cache/ldconfig/aux-cache
  # documentation goes; each package's copyright file stays (the licences of what we ship)
  find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  # no program in the image may raise privileges (the jail sets no_new_privs as well)
  find "$r" -xdev -type f -perm /6000 -exec chmod ug-s {} +
}

# removes the staging directory; debootstrap may have left /proc or /sys mounted in it
# when it was interrupted, and nothing is removed across a mount
drop_stage() {
  local m
  for m in $(awk -v d="$STAGE/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf --one-file-system "$STAGE"
}

# the cached root: debootstrap once per key (two builds at once: the second waits for the
# first one's root)
cached() { [ -s "$BASE" ] && [ -s "$BASE.manifest" ] && [ -s "$BASE.bwrap-version" ]; }
exec 9>"$CACHE/.lock"
flock 9
if [ -n "$REFRESH" ] || ! cached; then
  command -v debootstrap >/dev/null || { say "debootstrap not installed (deploy/install-deps.sh)"; exit 1; }
  STAGE=$(mktemp -d "$CACHE/stage.XXXXXX")
  trap 'drop_stage' EXIT
  trap 'exit 130' INT TERM
  t0=$(date +%s)
  say "debootstrap $SUITE ($VARIANT + ${PACKAGES[*]}) from $MIRROR; log in $BASE.log"
  # dpkg inside the new root skips its fsync calls (a crash only loses this staging copy)
  mkdir -p "$STAGE/rootfs/etc/dpkg/dpkg.cfg.d"
  echo force-unsafe-io > "$STAGE/rootfs/etc/dpkg/dpkg.cfg.d/jailbox-unsafe-io"
  if ! debootstrap --variant="$VARIANT" --arch="$ARCH" --components=main \
      --include="$(IFS=,; echo "${PACKAGES[*]}")" "$SUITE" "$STAGE/rootfs" "$MIRROR" > "$BASE.log" 2>&1; then
    tail -20 "$BASE.log" >&2; say "debootstrap failed"; exit 1
  fi
  for p in /usr/bin/bwrap /usr/bin/setpriv /usr/bin/gcc /usr/bin/make /usr/bin/git /usr/bin/python3 \
      /usr/bin/pkg-config /usr/bin/autoreconf /usr/bin/libtoolize /bin/sh; do
    [ -x "$STAGE/rootfs$p" ] || { say "debootstrap left no $p"; exit 1; }
  done
  chroot "$STAGE/rootfs" /usr/bin/bwrap --version | head -1 > "$STAGE/bwrap-version"
  rm -f "$STAGE/rootfs/etc/dpkg/dpkg.cfg.d/jailbox-unsafe-io"
  trim "$STAGE/rootfs"
  mkdir -p "$STAGE/rootfs/workspace"
  (cd "$STAGE/rootfs" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$STAGE/manifest"
  # the files keep their times: Python's byte-code caches name the times of their sources
  tar --sort=name --numeric-owner -C "$STAGE/rootfs" -cf "$STAGE/base.tar" .
  # roots of earlier recipes go
  find "$CACHE" -maxdepth 1 -name "userland-$SUITE-$ARCH-*" ! -name "${BASE##*/}*" -delete
  mv "$STAGE/manifest" "$BASE.manifest"
  mv "$STAGE/bwrap-version" "$BASE.bwrap-version"
  mv "$STAGE/base.tar" "$BASE"
  drop_stage
  trap - EXIT INT TERM
  say "cached $BASE ($(du -m "$BASE" | cut -f1) MiB) in $(($(date +%s) - t0)) s"
fi
exec 9>&-

# the manifest of the image: the cached root's and the shim's, sorted by path
WORK=$(mktemp -d /tmp/jailbox-userland.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SHIM_SHA=$(sha256sum < "$SHIM" | cut -d' ' -f1)
{ cat "$BASE.manifest"; printf '%s  ./opt/jailbox/bin/jailbox-shim\n' "$SHIM_SHA"; } |
  sort -t ' ' -k3 > "$WORK/manifest"
DIGEST=$(sha256sum < "$WORK/manifest" | cut -d' ' -f1)
FILES=$(wc -l < "$WORK/manifest")
repo=${TAG%:*}; tag=${TAG##*:}
[ "$repo" != "$TAG" ] || tag=latest
have=$(curl -sS --unix-socket "$SOCK" "http://localhost/images/$repo:$tag/json" 2>/dev/null |
  jq -r '.Config.Labels["jailbox.image.digest"] // empty' 2>/dev/null || true)
if [ "$have" = "$DIGEST" ] && [ -z "$KEEP" ]; then
  id=$(curl -sS --unix-socket "$SOCK" "http://localhost/images/$repo:$tag/json" | jq -r .Id)
  echo "build.sh: $repo:$tag ($id) is up to date, content digest $DIGEST, $FILES files"
  exit 0
fi

# the image's tar: the cached root's, with the shim and the manifest appended (entries with
# fixed owners and times, so the same inputs give the same stream)
A="$WORK/add"
mkdir -p "$A/opt/jailbox/bin" "$A/etc/jailbox"
chmod 0755 "$A/opt" "$A/opt/jailbox" "$A/opt/jailbox/bin" "$A/etc" "$A/etc/jailbox"
install -m 0755 "$SHIM" "$A/opt/jailbox/bin/jailbox-shim"
install -m 0644 "$WORK/manifest" "$A/etc/jailbox/manifest"
cp "$BASE" "$WORK/rootfs.tar"
tar --owner=0 --group=0 --numeric-owner --mtime=@0 --no-recursion -C "$A" -rf "$WORK/rootfs.tar" \
  ./opt/jailbox ./opt/jailbox/bin ./opt/jailbox/bin/jailbox-shim ./etc/jailbox ./etc/jailbox/manifest
if [ -n "$KEEP" ]; then
  rm -rf "$KEEP"; mkdir -p "$KEEP"
  tar --numeric-owner -C "$KEEP" -xf "$WORK/rootfs.tar"
fi
BWRAP_VERSION=$(cat "$BASE.bwrap-version")
id=$(rootfs_import "$WORK/rootfs.tar" "$TAG" "$SOCK" \
  "LABEL jailbox.image.digest=$DIGEST jailbox.shim.sha256=$SHIM_SHA jailbox.bwrap.version=\"$BWRAP_VERSION\" jailbox.userland=\"debian $SUITE $ARCH $VARIANT + ${PACKAGES[*]}\"
ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8") || { say "import failed"; exit 1; }
echo "build.sh: imported $repo:$tag ($id), content digest $DIGEST, $FILES files"

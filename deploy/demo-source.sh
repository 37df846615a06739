#!/usr/bin/env bash
# demo-source.sh — the source tree of a Debian package, kept in a cache directory: prints the
# tree's path on stdout (CACHE/PKG-VERSION), fetching it with `apt-get source PKG` first when
# the cache has none (as root, a deb-src line for bookworm is added when apt has none). Used
# by demo.sh, the refactor acceptance test (tests/node/refactor.test.mjs) and bench/.
#
# Usage: demo-source.sh PKG CACHE. What it did goes to stderr ("cached: DIR" or "downloaded
# with apt-get source PKG: SIZE in CACHE"). Exit status 1 (and nothing on stdout) when the
# archive cannot be reached.
set -euo pipefail
PKG=${1:?usage: demo-source.sh PKG CACHE}
CACHE=${2:?usage: demo-source.sh PKG CACHE}
mkdir -p "$CACHE"
SRC=$(find "$CACHE" -mindepth 1 -maxdepth 1 -type d -name "$PKG-*" 2>/dev/null | head -1)
if [ -n "$SRC" ]; then
  echo "cached: $SRC" >&2
  printf '%s\n' "$SRC"
  exit 0
fi
if [ -z "$(apt-cache showsrc "$PKG" 2>/dev/null)" ]; then
  if [ "$(id -u)" = 0 ] && ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "adding a deb-src line for bookworm (/etc/apt/sources.list.d/jailbox-deb-src.sources)" >&2
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      > /etc/apt/sources.list.d/jailbox-deb-src.sources
  fi
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; fi
fi
# into a private directory first: a half-done download never looks like a cached tree
TMP=$(mktemp -d "$CACHE/.fetch-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if ! (cd "$TMP" && apt-get source -qq "$PKG" >/dev/null 2>&1); then
  echo "apt-get source $PKG failed (no deb-src or no archive?)" >&2
  exit 1
fi
DIR=$(find "$TMP" -mindepth 1 -maxdepth 1 -type d -name "$PKG-*" | head -1)
[ -n "$DIR" ] || { echo "apt-get source $PKG made no $PKG-* directory" >&2; exit 1; }
mv "$TMP"/* "$CACHE"/ 2>/dev/null || true
SRC=$CACHE/$(basename "$DIR")
[ -d "$SRC" ] || { echo "could not keep $SRC" >&2; exit 1; }
echo "downloaded with apt-get source $PKG: $(du -sh "$CACHE" | cut -f1) in $CACHE" >&2
printf '%s\n' "$SRC"

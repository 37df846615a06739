#!/usr/bin/env bash
# Installs every build and runtime dependency of jailbox from Debian 12 packages.
# Idempotent: a second run checks what is present and installs nothing when all is there.
# Enables bookworm-backports (runsc comes from there) without touching other sources.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "install-deps.sh: must run as root (apt-get, useradd)" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive

# Packages from bookworm itself (chromium: the console's browser tests, tests/node/console.test.mjs).
PKGS=(
  build-essential cmake pkg-config clang clang-format libclang-rt-14-dev git ca-certificates curl
  libmicrohttpd-dev libwebsockets-dev libsodium-dev libpq-dev libjansson-dev
  libhiredis-dev libseccomp-dev libcmocka-dev libcurl4-openssl-dev libpcre2-dev libgit2-dev
  postgresql-15 postgresql-client-15 redis-server nginx-light
  docker.io bubblewrap util-linux iproute2 procps jq debootstrap
  nodejs npm
  chromium
)
# Packages taken from bookworm-backports.
BACKPORTS_PKGS=(runsc)

bp_list=/etc/apt/sources.list.d/bookworm-backports.list
need_update=0
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" > "$bp_list"
  need_update=1
fi

# The Debian postgresql packages create and start a 'main' cluster on install;
# jailbox runs its own cluster, so switch that off before the first install.
mkdir -p /etc/postgresql-common/createcluster.d
if [ ! -f /etc/postgresql-common/createcluster.d/jailbox.conf ]; then
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/jailbox.conf
fi

missing=()
for p in "${PKGS[@]}" "${BACKPORTS_PKGS[@]}"; do
  # nodejs/npm may come from another origin already (a node without Debian's npm package)
  if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
  if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps.sh: installing ${missing[*]}"
  need_update=1
  # apt-get update also when a list is older than the install attempt
  apt-get update -qq
  main=(); bp=()
  for p in "${missing[@]}"; do
    if printf '%s\n' "${BACKPORTS_PKGS[@]}" | grep -qx "$p"; then bp+=("$p"); else main+=("$p"); fi
  done
  [ ${#main[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${main[@]}" >/dev/null
  [ ${#bp[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends -t bookworm-backports "${bp[@]}" >/dev/null
fi

# An unprivileged system user runs the embedded PostgreSQL when jailboxd runs as root.
if ! id jailbox >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin jailbox
fi
# gVisor as Docker runtime "runsc" (--network=none, --oci-seccomp, --host-uds=open), other
# daemon.json keys kept
"$(dirname "$0")/register-runsc.sh"
echo "install-deps.sh: all dependencies present"

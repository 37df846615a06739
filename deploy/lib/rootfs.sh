# rootfs.sh — shared steps of the offline image builds (sourced, not run): copy host files
# into a root file system with the shared libraries they load, pack it reproducibly, and
# import it into the local Docker daemon through the Engine API (no registry, no docker CLI).
# The caller sets R (the rootfs directory) before calling rootfs_put / rootfs_put_bin.

# rootfs_put SRC [DST]: copies SRC to DST (default: the same path) under $R, following
# symlinks, keeping the mode.
rootfs_put() {
  local src=$1 dst=${2:-$1}
  mkdir -p "$R$(dirname "$dst")"
  cp -L --preserve=mode "$src" "$R$dst"
}

# rootfs_put_bin SRC [DST]: rootfs_put plus every shared library ldd lists for SRC (at the
# paths ldd prints, so the loader finds them unchanged).
rootfs_put_bin() {
  rootfs_put "$@"
  local lib
  for lib in $(ldd "$1" 2>/dev/null | grep -o '/[^ )]*'); do
    [ -e "$R$lib" ] || rootfs_put "$lib"
  done
}

# rootfs_tar OUT: a deterministic tar of $R (sorted names, numeric owners root, fixed times).
rootfs_tar() {
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$R" -cf "$1" .
}

# rootfs_import TAR NAME:TAG SOCKET CHANGES: imports TAR as an image with the Dockerfile
# instructions CHANGES (newline-separated: LABEL, ENV, USER, CMD …) applied; prints the id.
rootfs_import() {
  local tar=$1 ref=$2 sock=$3 changes=$4 repo tag q out
  repo=${ref%:*}; tag=${ref##*:}
  [ "$repo" != "$ref" ] || tag=latest
  q="fromSrc=-&repo=$repo&tag=$tag"
  while IFS= read -r line; do
    [ -n "$line" ] && q="$q&changes=$(printf '%s' "$line" | jq -sRr @uri)"
  done <<<"$changes"
  out=$(curl -sS --fail-with-body --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' \
    --data-binary @"$tar" "http://localhost/images/create?$q") || { echo "import failed: $out" >&2; return 1; }
  curl -sS --unix-socket "$sock" "http://localhost/images/$repo:$tag/json" | jq -r .Id
}

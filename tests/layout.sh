#!/usr/bin/env bash
# The layout's rules, checked on the tree (README "Layout"): which folder may include the
# headers of which, and that the jailed shim compiles nothing but its own folder and lib/.
# Exit 1 naming every file that breaks a rule.
set -euo pipefail
cd "$(dirname "$0")/.."

allowed() { # folder of the including file -> folders whose headers it may include
  case "$1" in
    lib) echo "lib" ;;
    db) echo "lib db" ;;
    sandbox/proto) echo "lib sandbox/proto" ;;
    sandbox/shim) echo "lib sandbox/proto sandbox/shim" ;;
    sandbox/worker) echo "lib db sandbox/proto sandbox/worker" ;;
    server) echo "lib db sandbox/proto server" ;;
    api|api/rest|api/agent) echo "lib db sandbox/proto server api api/rest api/agent" ;;
    cli) echo "lib db sandbox/proto cli" ;;
    *) echo "" ;;
  esac
}

bad=0
for f in $(git ls-files 'lib/*.[ch]' 'db/*.[ch]' 'server/*.[ch]' 'api/*.[ch]' 'sandbox/*.[ch]' 'cli/*.[ch]'); do
  dir=$(dirname "$f")
  ok=$(allowed "$dir")
  if [ -z "$ok" ]; then echo "layout: $f is in no known folder"; bad=1; continue; fi
  while IFS= read -r inc; do
    idir=$(dirname "$inc")
    hit=0
    for a in $ok; do [ "$idir" = "$a" ] && hit=1; done
    if [ $hit = 0 ]; then echo "layout: $f includes $inc ($dir may include: $ok)"; bad=1; fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

# The shim's sources: only sandbox/shim/ and lib/.
srcs=$(sed -n '/set(JB_SHIM_SOURCES/,/)/p' sandbox/shim/CMakeLists.txt | tr ' ' '\n' | grep '\.c' || true)
for s in $srcs; do
  case "$s" in
    *'${CMAKE_SOURCE_DIR}/lib/'*|[a-z_]*.c) ;;
    *) echo "layout: jailbox-shim compiles $s (only sandbox/shim/ and lib/ may be compiled into it)"; bad=1 ;;
  esac
done
[ $bad = 0 ] && echo "layout: every include follows the folder rules"
exit $bad

#!/usr/bin/env bash
# The layout's rules, checked on the C sources of lib/ db/ server/ api/ sandbox/ cli/
# (docs/design.md "Layout rules"; the model is Tor's scripts/maint/practracker/). Exit 1
# naming every break, each on a line of its own starting "layout: ". Under a second; python3
# of the standard library.
#
#   1. Includes follow the folder table in tests/layout.py (ALLOWED, DENIED): server/ includes
#      nothing of api/; api/core/ includes no door and no HTTP or WebSocket header; a door
#      (api/rest/, api/socket/, api/mcp/) includes api/core/ and itself, never another door
#      (the HTTP doors also api/http/, what they share); the top of api/ (api/main.c, the
#      composition root) may include all of api/. The jailed shim compiles nothing but
#      sandbox/shim/ and lib/.
#   2. A prototype declared in a folder's header is defined in a .c of that folder; one
#      defined in another folder, or nowhere (a dead declaration), fails.
#   3. No circle between the .c files of one folder: A -> B when A names a non-static function
#      defined in B; each strongly connected component of more than one file is a circle
#      (found with Tarjan's algorithm). api/ and its core and doors may not list one.
#   4. Sizes: a file (.c or .h) of at most 1,000 lines, a function of at most 100 (from the
#      line of its opening `{` to its closing column-0 `}`, both counted).
#
# Rules 1 and 2 have no exceptions. Rules 3 and 4 keep today's debt in tests/layout-exceptions.txt, which may only
# shrink: a circle or an offender not listed fails; a listed offender that grew fails; a listed
# circle that is gone or changed, or a listed offender now within its limit or gone, fails
# with a message saying which line to remove or rewrite (so that the debt cannot come back
# unnoticed); a listed offender that shrank but is still over its limit is only a note.
#
#   tests/layout.sh            check
#   tests/layout.sh --regen    rewrite tests/layout-exceptions.txt from the tree (today's
#                              circles and offenders with their sizes), then check
#   tests/layout.sh --list     also print the circles (with the calls that make them) and the
#                              offenders
# tests/layout_selftest.sh breaks each rule in a copy of the tree and checks that this fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bad=0
python3 tests/layout.py "$@" || bad=1

# The shim's sources: only sandbox/shim/ and lib/.
srcs=$(sed -n '/set(JB_SHIM_SOURCES/,/)/p' sandbox/shim/CMakeLists.txt | tr ' ' '\n' | grep '\.c' || true)
for s in $srcs; do
  case "$s" in
    *'${CMAKE_SOURCE_DIR}/lib/'*|[a-z_]*.c) ;;
    *) echo "layout: jailbox-shim compiles $s (only sandbox/shim/ and lib/ may be compiled into it)"; bad=1 ;;
  esac
done
exit $bad

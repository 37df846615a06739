#!/usr/bin/env bash
# The self-test of tests/layout.sh: in a copy of the checked sources (lib/ db/ server/ api/
# sandbox/ cli/, the scripts and the exceptions file, in a temporary directory), it breaks
# each rule in turn — a fresh copy for each — and checks that layout.sh fails with the message
# that names the break; and that it passes on the clean copy and at the limits (a 100-line
# function, a 1,000-line file). Exit 1 naming each case that went wrong.
set -euo pipefail
cd "$(dirname "$0")/.."

T=$(mktemp -d /tmp/jblayout.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir "$T/clean"
{
  find lib db server api sandbox cli -name '*.[ch]' -print0
  printf '%s\0' sandbox/shim/CMakeLists.txt tests/layout.sh tests/layout.py tests/layout-exceptions.txt
} | xargs -0 cp --parents -t "$T/clean"
W=$T/work
export LAYOUT_CACHE=$T/cache # the files a case leaves as they were are not parsed again

fails=0
fresh() { rm -rf "$W" && cp -a "$T/clean" "$W"; }
run() { # NAME: layout.sh on the work copy, its output in $T/out
  local rc=0
  "$W/tests/layout.sh" > "$T/out" 2>&1 || rc=$?
  return $rc
}
expect_fail() { # NAME TEXT: layout.sh fails and says TEXT
  if run; then
    echo "selftest: FAIL $1: layout.sh passed"; fails=$((fails + 1))
  elif ! grep -qF -- "$2" "$T/out"; then
    echo "selftest: FAIL $1: layout.sh failed without saying: $2"; sed 's/^/    /' "$T/out"
    fails=$((fails + 1))
  else
    echo "selftest: ok   $1: $(grep -F -- "$2" "$T/out" | head -1 | cut -c1-150)"
  fi
}
expect_pass() { # NAME
  if run; then
    echo "selftest: ok   $1: passes"
  else
    echo "selftest: FAIL $1: layout.sh failed"; sed 's/^/    /' "$T/out"; fails=$((fails + 1))
  fi
}
lines() { # N: N lines of C comment
  for ((i = 0; i < $1; i++)); do echo "/* line */"; done
}
function_of() { # NAME LINES: a function from `{` to `}` of LINES lines
  echo "int $1(void) {"
  for ((i = 0; i < $2 - 2; i++)); do echo "  ;"; done
  echo "}"
}

fresh
expect_pass "the clean tree"

fresh # server/ including an api/ header
f=$(cd "$W" && ls server/*.c | head -1)
h=$(cd "$W" && find api -name '*.h' | sort | head -1)
sed -i "1i #include \"$h\"" "$W/$f"
expect_fail "back-include" "$f:1 includes $h (server may include"

fresh # a door including another door
mkdir -p "$W/api/socket"
printf '#include "api/rest/zz_other_door.h"\n' > "$W/api/socket/zz_selftest.c"
expect_fail "door includes door" "api/socket/zz_selftest.c:1 includes api/rest/zz_other_door.h"

fresh # the core including a door
mkdir -p "$W/api/core"
printf '#include "api/mcp/zz_door.h"\n' > "$W/api/core/zz_selftest.c"
expect_fail "core includes door" "api/core/zz_selftest.c:1 includes api/mcp/zz_door.h"

fresh # the core including a WebSocket header (a folder it may include, a header it may not)
mkdir -p "$W/api/core"
printf '#include "server/app.h"\n#include "server/ws.h"\n' > "$W/api/core/zz_selftest.c"
expect_fail "core includes transport" "api/core/zz_selftest.c:2 includes server/ws.h (api/core may not include"

fresh # a header's prototype defined in another folder
printf 'int jb_zz_selftest_decl(void);\n' > "$W/lib/zz_selftest.h"
printf 'int jb_zz_selftest_decl(void) { return 0; }\n' > "$W/db/zz_selftest.c"
expect_fail "prototype defined elsewhere" \
  "lib/zz_selftest.h:1 declares jb_zz_selftest_decl(), defined in db/zz_selftest.c"

fresh # a header's prototype defined nowhere (after an inline function, over two lines)
printf '#include <stddef.h>\n\nstatic inline int jb_zz_inline(void) { return 0; }\nsize_t jb_zz_selftest_dead(const char *s,\n                          size_t n);\n' > "$W/lib/zz_selftest.h"
expect_fail "prototype defined nowhere" "lib/zz_selftest.h:4 declares jb_zz_selftest_dead(), defined nowhere"

fresh # a new circle between two .c files of one folder
printf 'int jb_zz_b(int);\nint jb_zz_a(int n) { return n ? jb_zz_b(n - 1) : 0; }\n' > "$W/lib/zz_a.c"
printf 'int jb_zz_a(int);\nint jb_zz_b(int n) { return n ? jb_zz_a(n - 1) : 1; }\n' > "$W/lib/zz_b.c"
expect_fail "new circle" "new circle in lib/: zz_a.c zz_b.c — the calls: zz_a.c -> zz_b.c (jb_zz_b); zz_b.c -> zz_a.c (jb_zz_a)"

fresh # the environment written once threads may run
printf '#include <stdlib.h>\nvoid jb_zz_env(void) { setenv("X", "1", 1); }\n' > "$W/server/zz_env.c"
expect_fail "setenv after start" "server/zz_env.c:2 calls setenv outside main's start (jb_zz_env)"

fresh # a function at the limit, then one over it
function_of jb_zz_long 100 > "$W/lib/zz_long.c"
expect_pass "a 100-line function"
function_of jb_zz_long 101 > "$W/lib/zz_long.c"
expect_fail "a 101-line function" "function-size lib/zz_long.c:jb_zz_long 101: the function is 101 lines, over 100"

fresh # a file at the limit, then one over it
lines 1000 > "$W/lib/zz_big.c"
expect_pass "a 1000-line file"
lines 1001 > "$W/lib/zz_big.c"
expect_fail "a 1001-line file" "file-size lib/zz_big.c 1001: the file is 1001 lines, over 1000"

fresh # a listed function grown by a line (one line more after the line of its `{`)
read -r fn n < <(sed -n 's/^function-size \([^ ]*\) \([0-9]*\)$/\1 \2/p' "$W/tests/layout-exceptions.txt" | head -1)
if [ -n "${fn:-}" ]; then
  file=${fn%%:*} name=${fn#*:}
  awk -v name="$name" '
    !done && !insig && $0 ~ "^[^ \t#].*(^|[^A-Za-z0-9_])" name "\\(" { insig = 1 }
    { print }
    insig && /\{$/ { print "  /* one line more */"; insig = 0; done = 1 }' \
    "$W/$file" > "$T/grown" && cp "$T/grown" "$W/$file"
  expect_fail "a listed function grown by a line" \
    "function-size $fn $((n + 1)): the function grew from $n to $((n + 1)) lines"
else
  echo "selftest: skip a listed function grown by a line: none is listed"
fi

fresh # a listed file grown by a line
read -r file n < <(sed -n 's/^file-size \([^ ]*\) \([0-9]*\)$/\1 \2/p' "$W/tests/layout-exceptions.txt" | head -1)
if [ -n "${file:-}" ]; then
  echo "/* one line more */" >> "$W/$file"
  expect_fail "a listed file grown by a line" "file-size $file $((n + 1)): the file grew from $n to $((n + 1)) lines"
else
  echo "selftest: skip a listed file grown by a line: none is listed"
fi

fresh # a listed circle that is gone, a listed offender that is within its limit now
echo "circle lib: zz_gone.c zz_too.c" >> "$W/tests/layout-exceptions.txt"
expect_fail "a stale circle" "circle lib: zz_gone.c zz_too.c: the circle is gone — remove the line"
fresh
printf 'int jb_zz_short(void) { return 0; }\n' > "$W/lib/zz_short.c"
echo "function-size lib/zz_short.c:jb_zz_short 120" >> "$W/tests/layout-exceptions.txt"
expect_fail "a stale offender" "function-size lib/zz_short.c:jb_zz_short 120: now 1 lines, within 100 — remove the line"

fresh # a circle listed where none may be
echo "circle api/core: a.c b.c" >> "$W/tests/layout-exceptions.txt"
expect_fail "a circle listed in api/core" "circle api/core: a.c b.c: api/core/ may have no circle"

if [ $fails -gt 0 ]; then
  echo "selftest: $fails case(s) went wrong"
  exit 1
fi
echo "selftest: tests/layout.sh fails on each broken rule and passes on the clean tree"

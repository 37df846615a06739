#!/usr/bin/env bash
# Prints, for each test that failed in a ctest run, its failing subtests with their diagnostics
# (TAP "not ok" lines and the YAML block after each), or the last lines of a test without TAP.
# The CI output is long; this summary goes at its end so a failure's cause is always in view.
# Usage: tests/failures.sh BUILD-DIR   (reads BUILD-DIR/Testing/Temporary/LastTest.log)
set -euo pipefail
log="$1/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; n = 0; delete buf; next }
  /^<end of output>/ { inout = 0; next }
  /^Output:/ { inout = 1; next }
  inout { buf[n++] = $0; next }
  /^Test Failed\./ {
    print "---- " name " failed:"
    shown = 0; tap = 0
    for (i = 0; i < n; i++) {
      if (buf[i] ~ /^ *not ok /) {
        tap = 1; k = 0
        for (j = i; j < n && k < 45; j++) {
          print "  " buf[j]; k++
          if (j > i && buf[j] ~ /^ *\.\.\.$/) break
        }
        shown += k
        if (shown > 300) { print "  (more cut)"; break }
      }
    }
    if (!tap) for (i = (n > 40 ? n - 40 : 0); i < n; i++) print "  " buf[i]
  }
' "$log"

#!/usr/bin/env bash
# Prints, for each test that failed in a ctest run, its failing subtests with their diagnostics
# (TAP "not ok" lines and the YAML block after each), or the last lines of a test without TAP.
# A test run more than once (ctest --repeat until-pass) is reported by its outcome: "FAILED"
# when its last run failed, "passed on run N" (a flake, with what its failed runs said) when
# a later run passed. The CI output is long; this summary goes at its end so a failure's cause
# is always in view.
# Usage: tests/failures.sh BUILD-DIR   (reads BUILD-DIR/Testing/Temporary/LastTest.log)
set -euo pipefail
log="$1/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  function show(t,   i, j, k, shown, tap, p) {
    p = "  [run " t "] "
    shown = 0; tap = 0
    for (i = 0; i < cnt[t]; i++) {
      if (out[t, i] ~ /^ *not ok /) {
        tap = 1; k = 0
        for (j = i; j < cnt[t] && k < 45; j++) {
          print p out[t, j]; k++
          if (j > i && out[t, j] ~ /^ *\.\.\.$/) break
        }
        shown += k
        if (shown > 300) { print p "(more cut)"; break }
      }
    }
    if (!tap) for (i = (cnt[t] > 40 ? cnt[t] - 40 : 0); i < cnt[t]; i++) print p out[t, i]
  }
  function flush(   t, last) {
    if (name == "" || !failed) return
    last = runs
    if (ok[last]) print "---- " name " passed on run " last " (a flake; what its failed runs said):"
    else print "---- " name " FAILED (" runs " run" (runs > 1 ? "s" : "") "):"
    for (t = 1; t <= runs; t++) if (!ok[t]) show(t)
  }
  /^[0-9]+\/[0-9]+ Testing: / {
    if ($3 != name) { flush(); name = $3; runs = 0; failed = 0; delete out; delete cnt; delete ok }
    runs++; cnt[runs] = 0; next
  }
  /^<end of output>/ { inout = 0; next }
  /^Output:/ { inout = 1; next }
  inout { out[runs, cnt[runs]++] = $0; next }
  /^Test Failed\./ { ok[runs] = 0; failed = 1 }
  /^Test Passed\./ { ok[runs] = 1 }
  END { flush() }
' "$log"

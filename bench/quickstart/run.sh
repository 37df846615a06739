#!/usr/bin/env bash
# bench/quickstart — how long README command 1 takes on a machine where everything is
# installed (target: under 30 s), and what the real session adds: N runs (default 3) of
# `deploy/quickstart.sh` (install check, incremental build, sandbox image, dockerd, jailboxd
# restart, the demo session of deploy/demo.sh), interleaved with N runs of the same script
# with DEMO=0 as the baseline measured in the same run. Prints each figure, the medians and
# the ratio. Leaves jailboxd running as the quickstart does. Needs root, a built tree.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-3}
now() { date +%s.%N; }
full=(); base=(); sess=()
for i in $(seq 1 "$N"); do
  t0=$(now)
  DEMO=0 "$ROOT/deploy/quickstart.sh" > /tmp/jbbench-qs-base.log 2>&1
  t1=$(now)
  "$ROOT/deploy/quickstart.sh" > /tmp/jbbench-qs.log 2>&1
  t2=$(now)
  b=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  f=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b - a }')
  s=$(sed -n 's/^demo: session job-[0-9a-f]* done in \([0-9.]*\) s$/\1/p' /tmp/jbbench-qs.log)
  [ -n "$s" ] || { echo "run $i: the demo session did not finish; see /tmp/jbbench-qs.log" >&2; exit 1; }
  base+=("$b"); full+=("$f"); sess+=("$s")
  echo "run $i: quickstart ${f} s (session ${s} s); without the session (DEMO=0) ${b} s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mf=$(median "${full[@]}"); mb=$(median "${base[@]}"); ms=$(median "${sess[@]}")
echo "median: quickstart ${mf} s, session ${ms} s; baseline (DEMO=0) ${mb} s; ratio $(awk -v f="$mf" -v b="$mb" 'BEGIN { printf "%.2f", f / b }')x"
awk -v f="$mf" 'BEGIN { if (f < 30) print "target (< 30 s with everything installed): met"; else print "target (< 30 s with everything installed): NOT met" }'

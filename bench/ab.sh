#!/usr/bin/env bash
# bench/ab.sh — one benchmark against two builds, alternating A B A B … in the same minutes
# (this host's speed drifts), printing each run's figure lines and, per figure, the median of
# each build and the ratio B/A.
#   bench/ab.sh A_BUILD B_BUILD ROUNDS BENCH [ARGS…]
#   e.g. bench/ab.sh /tmp/base/build build 3 bench/rest.sh 5
#        N_READ=500 N_WRITE=50 N_EXEC=10 bench/ab.sh /tmp/base/build build 2 bench/relay/run.sh
# BENCH runs with BUILD=<the build directory>. A figure is a line that starts with a label and
# then a number (the rest.sh table, the relay's "label  N ops/s …" lines): the label is the
# text before the number, the figure the number.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { sed -n 2,10p "$0"; exit 2; }
A=$(readlink -f "$1")
B=$(readlink -f "$2")
ROUNDS=$3
shift 3
OUT=$(mktemp -d /tmp/jbab.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    dir=$A
    [ $side = B ] && dir=$B
    echo "== round $r, build $side ($dir)"
    BUILD=$dir "$@" > "$OUT/$side.$r" 2>&1 || { tail -20 "$OUT/$side.$r"; exit 1; }
    grep -E '^ *[A-Za-z0-9].*[0-9]' "$OUT/$side.$r" | head -60
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def figures(path):
    f = {}
    for line in open(path, errors='replace'):
        m = re.match(r'^\s*([A-Za-z0-9][^\n]*?)\s+([0-9]+(?:\.[0-9]+)?)(\s|$)', line)
        if m and 'ratio' not in m.group(1):
            f.setdefault(m.group(1).strip(), float(m.group(2)))
    return f
runs = {s: [figures(os.path.join(out, f'{s}.{r}')) for r in range(1, rounds + 1)] for s in 'AB'}
print(f"\n{'figure':60} {'A median':>12} {'B median':>12} {'B/A':>7}")
for label in runs['A'][0]:
    a = [f[label] for f in runs['A'] if label in f]
    b = [f[label] for f in runs['B'] if label in f]
    if len(a) == rounds and len(b) == rounds and statistics.median(a) > 0:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{label[:60]:60} {ma:12.3f} {mb:12.3f} {mb / ma:7.3f}")
PY

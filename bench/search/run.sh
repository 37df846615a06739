#!/usr/bin/env bash
# bench/search/run.sh — the shim's `search` op against `grep -rnE` on the same ~40 MB source
# tree (Debian's bash source, fetched once with apt-get source into var/bench-search/, using a
# private apt configuration: the host's sources are not touched), alternating the two in the
# same minutes and printing the ratio of the medians.
#
#   direct: the static jailbox-shim on the host, no walls, chrooted into a directory whose
#           /workspace is a bind mount of the tree (needs root), speaking its line protocol
#           on stdin/stdout; the time is from the request line written to the answer read.
#   stack:  (--stack) the same op through the worker's control socket into a real session
#           (gVisor + bwrap + Wall 3), timed the same way (bench/search/stack.mjs).
#
# Usage: bench/search/run.sh [--runs N] [--pattern ERE-and-PCRE2] [--stack]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=15
PATTERN='(strcpy|strcat|sprintf) *\('
STACK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --pattern) PATTERN=$2; shift 2 ;;
    --stack) STACK=1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (chroot, bind mount)" >&2; exit 1; }
SHIM=${SHIM:-$ROOT/build/jailbox-shim}
[ -x "$SHIM" ] || { echo "run.sh: build the shim first ($SHIM)" >&2; exit 1; }
VAR=$ROOT/var/bench-search
mkdir -p "$VAR/src"
TREE=$(find "$VAR/src" -mindepth 1 -maxdepth 1 -type d -name 'bash-*' | head -1)
if [ -z "$TREE" ]; then
  A=$VAR/apt
  mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$A/src.sources"
  APT=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$A" -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache")
  apt-get "${APT[@]}" update -qq
  (cd "$VAR/src" && apt-get "${APT[@]}" source -qq bash)
  TREE=$(find "$VAR/src" -mindepth 1 -maxdepth 1 -type d -name 'bash-*' | head -1)
fi
echo "tree: $TREE ($(du -sh "$TREE" | cut -f1), $(find "$TREE" -type f | wc -l) files)"
echo "pattern: $PATTERN"

# the chroot: the static shim and an empty /workspace to bind the tree on
CR=$VAR/chroot
mkdir -p "$CR/workspace"
install -m 0755 "$SHIM" "$CR/jailbox-shim"

python3 - "$CR" "$TREE" "$RUNS" "$PATTERN" <<'PY'
import json, os, statistics, subprocess, sys, time
cr, tree, runs, pattern = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
shim = subprocess.Popen(
    ['unshare', '-m', 'sh', '-c',
     f'mount --bind "{tree}" "{cr}/workspace" && exec chroot "{cr}" /jailbox-shim'],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert json.loads(shim.stdout.readline())['event'] == 'ready'
req_id = 0
def search():
    global req_id
    req_id += 1
    line = json.dumps({'id': req_id, 'op': 'search', 'pattern': pattern, 'maxMatches': 5000}) + '\n'
    t = time.perf_counter()
    shim.stdin.write(line.encode()); shim.stdin.flush()
    a = json.loads(shim.stdout.readline())
    dt = time.perf_counter() - t
    assert a['ok'], a
    return dt, a['result']
def grep():
    t = time.perf_counter()
    p = subprocess.run(['grep', '-rnE', pattern, tree], stdout=subprocess.PIPE)
    dt = time.perf_counter() - t
    return dt, p.stdout.count(b'\n')
search(); grep()  # warm the page cache and the shim
ts, tg = [], []
for i in range(runs):
    if i % 2 == 0:
        a, r = search(); b, n = grep()
    else:
        b, n = grep(); a, r = search()
    ts.append(a); tg.append(b)
shim.stdin.close(); shim.wait()
ms, mg = statistics.median(ts) * 1000, statistics.median(tg) * 1000
print(f"shim search: {len(r['matches'])} matches, {r['filesScanned']} files scanned, "
      f"{r['filesSkipped']} skipped, truncated {r['truncated']}, jit {r.get('jit')}")
print(f"grep -rnE:   {n} matching lines")
print(f"direct: shim search p50 {ms:.1f} ms (min {min(ts)*1000:.1f}), grep -rnE p50 {mg:.1f} ms "
      f"(min {min(tg)*1000:.1f}), ratio {ms/mg:.2f}x over {runs} alternating runs")
PY

if [ "$STACK" = 1 ]; then
  node "$ROOT/bench/search/stack.mjs" "$TREE" "$RUNS" "$PATTERN"
fi

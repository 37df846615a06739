#!/usr/bin/env bash
# The test command: installs what is missing, builds both configurations (gcc release and
# clang with AddressSanitizer + UndefinedBehaviorSanitizer), and runs every test in each.
# Integration tests start the servers they need themselves (PostgreSQL clusters of their own).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

./deploy/install-deps.sh

echo "== layout (includes, declarations, circles, sizes)"
./tests/layout.sh
./tests/layout_selftest.sh
echo "== C style (.clang-format)"
./tests/format.sh

echo "== node packages for the client tests"
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error)

JOBS=$(nproc)
echo "== build (gcc, release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build -j "$JOBS"
echo "== build (clang, ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DJB_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=0"

echo "== build (clang, libFuzzer harnesses)"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DJB_SANITIZE=ON -DJB_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$JOBS" --target fuzz_json fuzz_http fuzz_audit fuzz_scan fuzz_redis fuzz_sio fuzz_shim_line fuzz_ws_frame fuzz_sio_packet fuzz_gitconfig

status=0
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
for f in json http audit scan redis sio shim_line ws_frame sio_packet gitconfig; do
  echo "== fuzz $f (${FUZZ_SECONDS}s from tests/fuzz/corpus/$f)"
  corpus=$(mktemp -d /tmp/jbfuzz.XXXXXX)
  cp tests/fuzz/corpus/$f/* "$corpus/"
  if ! "build-fuzz/tests/fuzz_$f" -max_total_time="$FUZZ_SECONDS" -max_len=8192 "$corpus" > "$corpus.log" 2>&1; then
    tail -40 "$corpus.log"; status=1
  else
    tail -1 "$corpus.log"
  fi
  rm -rf "$corpus" "$corpus.log"
done

./deploy/start-dockerd.sh  # the walls tests need a Docker daemon (no systemd here)
# The two builds' suites run at the same time (JB_TEST_SERIAL=1: one after the other): most of
# a test's time is spent waiting on sandboxes to start and sessions to settle, so two suites
# share the cores well. Each suite tags its sandbox images with its own suffix (the shims
# differ), and each test starts its own PostgreSQL, ports and deployment label, so nothing
# else is shared. Output streams as it comes, each line prefixed with its suite.
# A test that fails is run once more (JB_TEST_RUNS=1: never): on a loaded host containerd can
# hold a sandbox's start or removal for a minute, which no test can tell from a fault. A test
# that fails both times fails the suite; one that passed only on its second run is named in
# the summary at the end, with what its first run said, so a flake is reported, not hidden.
SUFFIX=${JB_IMAGE_SUFFIX:-}
RUNS=${JB_TEST_RUNS:-2}
suite() { # NAME BUILD-DIR
  echo "== tests ($1 build) started $(date -u +%T)"
  local rc=0
  JB_IMAGE_SUFFIX="$SUFFIX-$1" ctest --test-dir "$2" --output-on-failure --repeat until-pass:"$RUNS" 2>&1 |
    sed -u "s/^/[$1] /" || rc=1
  echo "== tests ($1 build) ended $(date -u +%T): $([ $rc = 0 ] && echo passed || echo FAILED)"
  return $rc
}
set -o pipefail
if [ "${JB_TEST_SERIAL:-0}" = 1 ]; then
  suite release build || status=1
  suite sanitizer build-asan || status=1
else
  suite release build & rel=$!
  suite sanitizer build-asan & san=$!
  wait $rel || status=1
  wait $san || status=1
fi
# A sandbox that would not start or go is most often Docker's or containerd's doing: their
# complaints, when a test failed or had to run again (before the failures, which stay last).
if grep -q ' passed on run \| FAILED (' <(for b in build build-asan; do ./tests/failures.sh "$b"; done); then
  echo "== dockerd and containerd: the last errors and warnings in ${JAILBOX_DOCKERD_LOG:-/var/log/jailbox-dockerd.log}"
  # (less the two warnings every gVisor sandbox's end gives)
  grep -E 'level=(error|warning)' "${JAILBOX_DOCKERD_LOG:-/var/log/jailbox-dockerd.log}" 2>/dev/null |
    grep -vE 'msg="(cleaning up after shim disconnected|cleanup warnings )' | tail -40 || true
fi
# The failing subtests and their messages, last, where a cut CI log still shows them.
for b in release:build sanitizer:build-asan; do
  echo "== failures and flakes (${b%%:*} build)"
  ./tests/failures.sh "${b#*:}" | sed "s/^/[${b%%:*}] /" || true
done
exit $status

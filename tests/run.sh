#!/usr/bin/env bash
# The test command: installs what is missing, builds both configurations (gcc release and
# clang with AddressSanitizer + UndefinedBehaviorSanitizer), and runs every test in each.
# Integration tests start the servers they need themselves (PostgreSQL clusters of their own).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

./deploy/install-deps.sh

echo "== layout (folder include rules)"
./tests/layout.sh
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
cmake --build build-fuzz -j "$JOBS" --target fuzz_json fuzz_http fuzz_audit fuzz_scan fuzz_redis fuzz_sio fuzz_shim_line fuzz_ws_frame fuzz_sio_packet

status=0
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
for f in json http audit scan redis sio shim_line ws_frame sio_packet; do
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
echo "== tests (release build)"
ctest --test-dir build --output-on-failure || status=1
echo "== tests (sanitizer build)"
ctest --test-dir build-asan --output-on-failure || status=1
exit $status

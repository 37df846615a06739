#!/usr/bin/env bash
# quickstart_flow.sh — the quickstart's session, end to end, as a test: a real jailboxd with a
# real worker (dockerd + runsc + bwrap), the source of Debian's libyaml (apt-get source; a
# small local tree with the same layout when the archive cannot be reached, reported as a
# FALLBACK), the scripted MCP agent through `jailboxctl mcp-bridge`, the buyer's jailboxctl
# verbs, the library built and tested with `exec` inside the walls in the userland image
# (build.sh --userland, cached under var/sandbox-image/) with the buyer approving and watching
# the output live, and the offline audit verification (deploy/demo.sh). Then the same flow
# with a buyer step that fails must fail, and so must a tree whose tests fail (DEMO_SRC).
# Needs root and Docker with runsc (and debootstrap + deb.debian.org for a first userland build).
# Env (CTest): JAILBOXD, JAILBOXCTL.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
: "${JAILBOXCTL:?JAILBOXCTL must name the jailboxctl binary}"
SHIM=$(dirname "$JAILBOXD")/jailbox-shim
IMAGE=jailbox-sandbox:e2e${JB_IMAGE_SUFFIX:-}
BUILD_IMAGE=jailbox-sandbox-build:e2e${JB_IMAGE_SUFFIX:-}

"$ROOT/deploy/start-dockerd.sh" >/dev/null || { fail "dockerd"; finish; }
"$ROOT/deploy/sandbox-image/build.sh" --shim "$SHIM" --tag "$IMAGE" >/dev/null || { fail "sandbox image"; finish; }
"$ROOT/deploy/sandbox-image/build.sh" --userland --shim "$SHIM" --tag "$BUILD_IMAGE" >/dev/null || { fail "userland sandbox image"; finish; }

WSROOT=$T/workspaces
mkdir -p "$WSROOT"
start_jb "$T/state" JAILBOX_WORKERS=1 JAILBOX_SANDBOX_IMAGE="$IMAGE" JAILBOX_SANDBOX_IMAGES="$IMAGE,$BUILD_IMAGE" \
  JAILBOX_WORKSPACE_ROOT="$WSROOT" || { fail "jailboxd starts"; finish; }
for _ in $(seq 1 300); do grep -q '"msg":"worker ready"' "$T/state.log" && break; sleep 0.1; done
WS_ADDR=$(grep -o '"msg":"ws listening","addr":"[^"]*' "$T/state.log" | sed 's/.*"addr":"//')

# the fallback tree: the files the scripted agent works on, in libyaml's layout, built as
# libyaml's git tree is (./bootstrap, i.e. autoreconf, then ./configure && make; make check)
FB=$T/fallback/libyaml-local
mkdir -p "$FB/src" "$FB/include" "$FB/tests"
printf '## LibYAML (local stand-in)\n\nA C library for parsing and emitting YAML.\n' > "$FB/ReadMe.md"
printf '#ifndef YAML_H\n#define YAML_H\nconst char *yaml_get_version_string(void);\n#endif\n' > "$FB/include/yaml.h"
printf '#include "yaml.h"\nconst char *yaml_get_version_string(void) { return "0.2.5"; }\n' > "$FB/src/api.c"
printf '#include "yaml.h"\nint yaml_writer_flush(void) { return 1; }\n' > "$FB/src/writer.c"
printf '#include <string.h>\n#include "yaml.h"\nint main(void) { return strcmp(yaml_get_version_string(), "0.2.5") != 0; }\n' > "$FB/tests/test-version.c"
printf 'AC_INIT([yaml-local], [0.2.5])\nAM_INIT_AUTOMAKE([foreign subdir-objects])\nAC_PROG_CC\nAC_CONFIG_FILES([Makefile])\nAC_OUTPUT\n' > "$FB/configure.ac"
printf 'AM_CPPFLAGS = -I$(top_srcdir)/include\nbin_PROGRAMS = yaml-version\nyaml_version_SOURCES = src/api.c src/writer.c tests/test-version.c\ncheck_PROGRAMS = test-version\ntest_version_SOURCES = src/api.c tests/test-version.c\nTESTS = test-version\n' > "$FB/Makefile.am"
printf '#!/bin/sh\nexec autoreconf -fvi\n' > "$FB/bootstrap"
chmod +x "$FB/bootstrap"

export JAILBOX_URL=http://127.0.0.1:$JB_PORT JAILBOX_WS_URL=ws://$WS_ADDR
export JAILBOX_SERVICE_TOKEN=$(cat "$T/state/service.token")
export JAILBOX_WORKSPACE_ROOT=$WSROOT DEMO_CACHE=$T/cache DEMO_FALLBACK_SRC=$FB JAILBOXCTL DEMO_IMAGE=$BUILD_IMAGE

# The sanitizer build runs the same flow on the small tree (real autoreconf, configure, make and
# make check, in minutes less than libyaml's under gVisor); the release build on libyaml's.
if [ "${JB_QUICKSTART_TREE:-libyaml}" = small ]; then export DEMO_SRC=$FB; fi

t0=$(date +%s)
OUT=$("$ROOT/deploy/demo.sh" 2>&1)
rc=$?
echo "# the demo session took $(($(date +%s) - t0)) s" 
printf '%s\n' "$OUT" | sed 's/^/    | /'
check "the demo session succeeds" 0 "$rc"
if [ -n "${DEMO_SRC:-}" ]; then
  check_match "the workspace is the small tree (JB_QUICKSTART_TREE=small)" 'the tree given in DEMO_SRC' "$OUT"
elif printf '%s' "$OUT" | grep -q '^FALLBACK'; then
  echo "# NOTE: apt-get source libyaml was not reachable; the local fallback tree was used"
else
  check_match "the workspace is Debian's libyaml source" 'downloaded with apt-get source libyaml|cached: .*/libyaml-' "$OUT"
fi
check_match "the session contract is printed" 'Wall 1 .*gVisor' "$OUT"
check_match "the agent initialized over MCP" 'agent initialize -> server jailbox' "$OUT"
check_match "the agent listed the tree" 'agent list \. \(recursive\) -> [0-9]+ entries' "$OUT"
check_match "the agent read files" 'agent read src/api.c -> [0-9]+ bytes' "$OUT"
check_match "the buyer saw the approval request" 'buyer sees: .*APPROVAL REQUESTED op #[0-9]+: write ReadMe.md' "$OUT"
check_match "the buyer approved with jailboxctl" 'buyer: op [0-9]+: approved' "$OUT"
check_match "the approval shows its diff (or the content where the server has no diff preview)" 'buyer sees: +(diff|content \(no diff preview\)):' "$OUT"
check_match "the flagged write was refused" 'write tools/bootstrap-deps.sh -> REFUSED \(-32015 flagged\)' "$OUT"
check_match "the buyer saw the security alert" 'buyer sees: .*SECURITY ALERT flagged_write: tools/bootstrap-deps.sh' "$OUT"
# the build and the tests, inside the walls, approved and watched by the buyer
check_match "the session runs in the userland image" "open a supervised session .*sandbox image $BUILD_IMAGE" "$OUT"
check_match "the buyer saw the build's approval request" 'buyer sees: .*APPROVAL REQUESTED op #[0-9]+: exec' "$OUT"
check_match "the request names the build command" 'buyer sees: +argv: .*\./configure && make\]' "$OUT"
check_match "the request says the workspace is writable" 'buyer sees: +workspace: WRITABLE, timeout 600 s' "$OUT"
check_match "the buyer saw configure's output live" 'buyer sees: .*op #[0-9]+ stdout\| checking for gcc\.\.\. gcc' "$OUT"
check_match "the buyer saw the compiler run live" 'buyer sees: .*op #[0-9]+ stdout\| .*gcc .*-c' "$OUT"
check_match "the build exits 0 inside the walls (the agent's result)" 'agent exec build -> exit 0 in [0-9.]+ s, .*; its changes held for the buyer as changeset op [0-9]+ \([1-9][0-9]* files\): applied, [1-9][0-9]* applied' "$OUT"
check_match "the tests exit 0 inside the walls" 'agent exec tests -> exit 0 in [0-9.]+ s' "$OUT"
check_match "the agent read the test summary" 'agent tests -> summary: TOTAL [1-9][0-9]* PASS [1-9][0-9]* .*FAIL 0 ' "$OUT"
check_match "the buyer saw the test summary live" 'buyer sees: .*stdout\| # TOTAL: +[1-9]' "$OUT"
check_match "the buyer saw the tests pass live" 'buyer sees: .*stdout\| # PASS: +[1-9]' "$OUT"
check_match "the buyer saw the build end with exit 0" 'buyer sees: .*op #[0-9]+ exec .*: done — exit 0' "$OUT"
check_match "the buyer's summary of the build: exit 0, time, files applied" 'op #[0-9]+ exec `[^`]*\./configure && make`: done, exit 0 in [0-9.]+ s, .*changeset op [0-9]+: [1-9][0-9]* of [1-9][0-9]* files applied \(done\)' "$OUT"
check_match "the buyer's summary of the tests: exit 0" 'op #[0-9]+ exec `make check`: done, exit 0 in [0-9.]+ s' "$OUT"
check_match "the buyer accepted" 'done -> accepted' "$OUT"
check_match "the change summary is printed (the write and the two commands)" 'changes of job-[0-9a-f]+: 1 file, 2 commands' "$OUT"
check_match "the change summary names the approved write" '  M ReadMe.md ' "$OUT"
check_match "the change summary names the build with its effects" '  X \. +exec `[^`]*\./configure && make`: [1-9][0-9]* added' "$OUT"
check_match "the change is on disk" '\+## Building in a jailbox' "$OUT"
check_match "the chain verifies offline, sealed" 'intact: [0-9]+ entries, sealed, session job-' "$OUT"
JOB=$(printf '%s' "$OUT" | sed -n 's/^demo: session \(job-[0-9a-f]*\) done.*/\1/p')
check_match "the session is named at the end" '^job-' "$JOB"
if [ -n "$JOB" ]; then
  check "the session is accepted" accepted "$(JAILBOX_TOKEN=$JAILBOX_SERVICE_TOKEN "$JAILBOXCTL" status "$JOB" --json | jq -r .state)"
fi

# a buyer step that fails makes the flow fail: approve answers 1 here
cat > "$T/ctl-noapprove" <<EOF
#!/bin/sh
[ "\$1" = approve ] && { echo "approve refused (test)" >&2; exit 1; }
exec "$JAILBOXCTL" "\$@"
EOF
chmod +x "$T/ctl-noapprove"
OUT2=$(JAILBOXCTL=$T/ctl-noapprove timeout 300 "$ROOT/deploy/demo.sh" 2>&1)
rc2=$?
[ "$rc2" != 0 ] && ok "a failed approval fails the flow (exit $rc2)" || fail "a failed approval did not fail the flow: $(printf '%s' "$OUT2" | tail -5)"

# a tree whose tests fail makes the flow fail, loudly: the agent reports it, the demo exits 1.
# This tree ships its configure (a small hand-written one, quick under gVisor: the agent runs
# ./configure && make with no ./bootstrap) and a `make check` that reports as automake's does.
BAD=$T/broken/libyaml-broken
mkdir -p "$T/broken"
cp -a "$FB" "$BAD"
rm -f "$BAD/bootstrap" "$BAD/configure.ac" "$BAD/Makefile.am"
printf '#include "yaml.h"\nconst char *yaml_get_version_string(void) { return "0.0.0"; }\n' > "$BAD/src/api.c"
cat > "$BAD/configure" <<'EOF2'
#!/bin/sh
echo "checking for gcc... gcc"
printf 'all: test-version\ntest-version: src/api.c tests/test-version.c\n\tgcc -Iinclude -o $@ src/api.c tests/test-version.c\ncheck: all\n\t@if ./test-version; then r=PASS; p=1; f=0; else r=FAIL; p=0; f=1; fi; echo "$$r: test-version"; echo "# TOTAL: 1"; echo "# PASS:  $$p"; echo "# FAIL:  $$f"; echo "# ERROR: 0"; exit $$f\n' > Makefile
EOF2
chmod +x "$BAD/configure"
t0=$(date +%s)
OUT3=$(DEMO_SRC=$BAD timeout 900 "$ROOT/deploy/demo.sh" 2>&1)
rc3=$?
echo "# the session with failing tests took $(($(date +%s) - t0)) s"
[ "$rc3" != 0 ] && ok "failing tests fail the flow (exit $rc3)" || fail "failing tests did not fail the flow: $(printf '%s' "$OUT3" | tail -5)"
check_match "the buyer saw the failing test live" 'buyer sees: .*stdout\| FAIL: test-version' "$OUT3"
check_match "the agent says the tests failed" 'demo-agent: the library.s tests did not all pass \(summary: TOTAL 1 PASS 0 .*FAIL 1' "$OUT3"
check_match "the demo says it failed" 'demo.sh: FAILED: ' "$OUT3"

stop_jb TERM
check "jailboxd stops cleanly" 0 "$JB_RC"
if grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T/state.log"; then fail "sanitizer report in the log"; fi
finish

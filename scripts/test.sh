#!/usr/bin/env bash
# README command 2: install what is needed (Debian packages), build, and pass the tests.
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -L unit
# Stages: install, format check, configure (-Werror), build, the thread-safety analysis
# (scripts/check-thread-safety.sh: clang over every unit that sees an annotation), the tests
# (ctest -j$TQ_JOBS: tests that cannot share the machine carry RUN_SERIAL or a RESOURCE_LOCK),
# then the sanitizer build (scripts/test-sanitizers.sh: ASan + UBSan over the unit and
# functional tests of the code that links no gRPC, in build-asan). docs/development.md says what
# each stage costs on CI's 2 cores.
# Env: TQ_BUILD_DIR (default build), TQ_JOBS (default nproc), TQ_SANITIZERS=0 to skip the
# sanitizer stage (e.g. a quick local run; CI keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TQ_BUILD_DIR:-build}
jobs=${TQ_JOBS:-$(nproc)}

scripts/install-deps.sh --rxe

echo "== format (lines changed since the merge-base with main; docs/development.md)"
scripts/check-format.sh

echo "== configure ($build)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_WERROR=ON >/dev/null
echo "== build (-j$jobs)"
ninja -C "$build" -j"$jobs"
echo "== thread-safety analysis (clang -Wthread-safety -Werror)"
TQ_JOBS=$jobs scripts/check-thread-safety.sh "$build"
echo "== test"
(cd "$build" && ctest --output-on-failure --timeout 900 -j"$jobs" "$@")
if [[ "${TQ_SANITIZERS:-1}" != 0 ]]; then
  TQ_JOBS=$jobs scripts/test-sanitizers.sh "$build"
fi

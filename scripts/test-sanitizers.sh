#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer: builds the GoogleTest executables of the
# `unit` and `functional` labels (and the programs they start) with -DTQ_SANITIZE=ON in their own
# build directory, and runs their tests there. Called by scripts/test.sh after the main build.
#   scripts/test-sanitizers.sh [MAIN_BUILD_DIR]       (default build)
# Env: TQ_ASAN_BUILD_DIR (default build-asan), TQ_JOBS (default nproc).
#
# Which tests, and why the rest are left out (docs/development.md "Sanitizer build"): the list
# comes from the main build's ctest (labels unit|functional, without privileged, etcd, fuzz, rxe
# and gpu), keeping only the tests that run a GoogleTest executable of this tree; the Python,
# shell and promtool tests run no code of ours that the sanitizers would see, or check the main
# build's own artefacts (the plugin's linkage, the packages).
set -euo pipefail
cd "$(dirname "$0")/.."
main_build=${1:-build}
asan_build=${TQ_ASAN_BUILD_DIR:-build-asan}
jobs=${TQ_JOBS:-$(nproc)}
labels='unit|functional'
excluded_labels='privileged|etcd|fuzz|rxe|gpu'
# Known findings not fixed yet, each left out by name with why (docs/development.md):
# plugin_abi.lifecycle: LeakSanitizer sees 600 bytes in 9 allocations per dlopen/dlclose cycle
# of the plugin (handle_state.h's and the registry's never-destroyed statics, made so that exit
# is safe, are lost when the library is unloaded).
known='plugin_abi\.lifecycle'

start=$(date +%s)
# "targets" (the executables to build) and "others" (regex of the tests left out), from the
# main build's test list.
read -r targets others < <(
  ctest --test-dir "$main_build" -L "$labels" -LE "$excluded_labels" --show-only=json-v1 |
    /usr/bin/python3 -c '
import json, os, re, sys
build = os.path.realpath(sys.argv[1])
targets, others = set(), []
for t in json.load(sys.stdin)["tests"]:
    cmd = (t.get("command") or [""])[0]
    if os.path.realpath(cmd).startswith(build + "/") and cmd.endswith("_test"):
        targets.add(os.path.basename(cmd))
    else:
        others.append(re.escape(t["name"]))
print(",".join(sorted(targets)), "^(" + "|".join(others) + ")$" if others else "^$")
' "$main_build")

# -Werror stays with the main build: GCC 12 warns falsely under -fsanitize=address.
echo "== sanitizers: configure ($asan_build: -DTQ_SANITIZE=ON, -O1)"
cmake -S . -B "$asan_build" -G Ninja -DTQ_SANITIZE=ON -DTQ_WERROR=OFF -DTQ_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="-O1 -g1" -DCMAKE_CXX_FLAGS="-O1 -g1" >/dev/null
IFS=, read -r -a target_list <<<"$targets"
if [[ ${#target_list[@]} -eq 0 ]]; then
  echo "test-sanitizers: no test executables in $main_build's unit/functional tests" >&2
  exit 1
fi
echo "== sanitizers: build ${#target_list[@]} test executables (-j$jobs)"
ninja -C "$asan_build" -j"$jobs" "${target_list[@]}"
built=$(date +%s)

echo "== sanitizers: test (labels $labels, without $excluded_labels)"
# halt_on_error and abort: a finding fails its test; detect_leaks: LeakSanitizer too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
(cd "$asan_build" && ctest --output-on-failure --timeout 900 -j"$jobs" -L "$labels" \
  -LE "$excluded_labels" -E "$others|^($known)\$|_NOT_BUILT\$")
echo "== sanitizers: build $((built - start)) s, tests $(($(date +%s) - built)) s"

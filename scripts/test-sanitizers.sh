#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer: builds the GoogleTest executables of the
# `unit` and `functional` labels that link no gRPC/protobuf (and the programs they start) with
# -DTQ_SANITIZE=ON in their own build directory, and runs their tests there. Called by
# scripts/test.sh after the main build's tests (TQ_SANITIZERS=0 there skips it).
#   scripts/test-sanitizers.sh [MAIN_BUILD_DIR]       (default build)
# Env: TQ_ASAN_BUILD_DIR (default build-asan), TQ_JOBS (default nproc).
#
# What it is for: the code that parses bytes another process writes and where memory errors are
# likeliest — common/ (the tenant shm, the attach protocol, token buckets), tc/, ib/, the NCCL
# plugin (inside PyTorch processes, reading tenants' shared memory and socket peers, through its
# C ABI as NCCL drives it), the agent's allocator, attach server, metrics and HTTP server,
# policy/YAML file validation, the webhook's admission rules, fabric/.
# Left out, each for its reason (docs/development.md "Sanitizer build"):
# - executables that link gRPC/protobuf (the agent's policy client and reconciler, policyd and
#   its store, tenantqosctl, rpc/, proto/, the webhook's server): their build is most of the
#   sanitized tree's cost (every unit compiles gRPC's or the generated protobuf headers), which
#   does not fit CI's 30 minutes on 2 cores; their parsing is protobuf's and gRPC's own. Decided
#   from each executable's link line in this build, so a new test joins unless it links them.
# - labels privileged, etcd, fuzz, rxe, gpu (the list below), and the Python, shell and promtool
#   tests: they run no code of ours the sanitizers would see (deploy manifests, testbed
#   analysis), or check the main build's own artefacts (the plugin's linkage, the packages).
set -euo pipefail
cd "$(dirname "$0")/.."
main_build=${1:-build}
asan_build=${TQ_ASAN_BUILD_DIR:-build-asan}
jobs=${TQ_JOBS:-$(nproc)}
labels='unit|functional'
excluded_labels='privileged|etcd|fuzz|rxe|gpu'

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

# -Werror stays with the main build: GCC 12 warns falsely under -fsanitize=address. -O0: the
# build is most of this stage's cost, and from scratch -O0 takes 40% less CPU than -O1 (468 s
# against 780 s for build and run, docs/development.md) for 12 s more of tests.
echo "== sanitizers: configure ($asan_build: -DTQ_SANITIZE=ON, -O0)"
cmake -S . -B "$asan_build" -G Ninja -DTQ_SANITIZE=ON -DTQ_WERROR=OFF -DTQ_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="-O0 -g1" -DCMAKE_CXX_FLAGS="-O0 -g1" >/dev/null
IFS=, read -r -a candidates <<<"$targets"
# Keep the executables whose link line (the last command ninja would run for them) names no
# gRPC or protobuf library.
target_list=()
grpc_list=()
for t in "${candidates[@]}"; do
  if ninja -C "$asan_build" -t commands "$t" | tail -n 1 | grep -qE 'lib(grpc|protobuf)'; then
    grpc_list+=("$t")
  else
    target_list+=("$t")
  fi
done
if [[ ${#target_list[@]} -eq 0 ]]; then
  echo "test-sanitizers: no test executables without gRPC in $main_build's unit/functional tests" >&2
  exit 1
fi
echo "== sanitizers: build ${#target_list[@]} test executables (-j$jobs; ${#grpc_list[@]} that link" \
  "gRPC/protobuf left out)"
ninja -C "$asan_build" -j"$jobs" "${target_list[@]}"
built=$(date +%s)

echo "== sanitizers: test (labels $labels, without $excluded_labels)"
# halt_on_error and abort: a finding fails its test; detect_leaks: LeakSanitizer too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
(cd "$asan_build" && ctest --output-on-failure --timeout 900 -j"$jobs" -L "$labels" \
  -LE "$excluded_labels" -E "$others|_NOT_BUILT\$")
echo "== sanitizers: build $((built - start)) s, tests $(($(date +%s) - built)) s"

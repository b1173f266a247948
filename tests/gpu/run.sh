#!/usr/bin/env bash
# On a GPU machine: configure, build only the plugin and the real-NCCL test, run it.
#   tests/gpu/run.sh
# Env: TQ_GPU_BUILD_DIR (default build-gpu), NCCL_HOME (a tarball NCCL), and what the test
# reads (TQ_GPU_RATE, TENANTQOS_TRANSPORT, ...: see tests/gpu/nccl_allreduce_gpu_test.cc).
# Needs the project's build dependencies (scripts/install-deps.sh), the CUDA toolkit and NCCL.
# Exit: 0 passed, 77 skipped (no GPU visible, or no toolkit/NCCL: the reason is printed), else
# failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${TQ_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_BUILD_BENCH=OFF \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep 'tests/gpu' "$build.configure.log"
targets=(tq_nccl_plugin)
if ninja -C "$build" -t targets all | grep -q '^nccl_allreduce_gpu_test:'; then
  targets+=(nccl_allreduce_gpu_test)
fi
ninja -C "$build" "${targets[@]}" || exit 1
out=$(ctest --test-dir "$build" -R '^gpu_nccl_allreduce$' -V 2>&1)
rc=$?
echo "$out"
if grep -q 'gpu_nccl_allreduce .*Skipped' <<<"$out"; then
  echo "run.sh: gpu_nccl_allreduce was skipped (reason above)"
  exit 77
fi
exit $rc

#!/usr/bin/env bash
# README command 1: install what is needed (Debian packages), build, and run the main job —
# tenants' allreduces on an emulated cluster, standalone, then backlogged and on/off on two
# nodes and the source article's scenario on four nodes under two leaves and one spine link
# (tenants on different node pairs meeting on the spine), under every mode (no isolation; the
# peers caps, priority, static, weights; tenantqos RDMA-like and TCP, with the cluster
# allocator on the fabric), printed as a table against each tenant's guarantee (on the spine
# for the fabric), with a plot (a panel per mode and workload). Under 5 minutes after the
# build. Extra arguments go to `tenantqos-testbed demo` (try --help).
# Env: TQ_BUILD_DIR (default build), TQ_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TQ_BUILD_DIR:-build}
jobs=${TQ_JOBS:-$(nproc)}

scripts/install-deps.sh

echo "== configure ($build)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_WERROR=ON >/dev/null
echo "== build the programs the demo runs (-j$jobs)"
ninja -C "$build" -j"$jobs" tenantqos-policyd tenantqosctl tenantqos-agent tenantqos-perf \
  tq_nccl_plugin
echo "== run"
exec testbed/tenantqos-testbed demo --build-dir "$build" "$@"

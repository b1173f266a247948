#!/usr/bin/env bash
# Installs everything tenantqos needs to build, test and run its demo, from Debian packages only.
# Idempotent: packages already present are skipped by apt; safe to run on every CI job.
# Usage: scripts/install-deps.sh [--rxe]    (--rxe also installs the Soft-RoCE VM rig's tools)
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: must run as root (apt-get); try: sudo $0" >&2
  exit 1
fi

pkgs=(
  # toolchain (clang-14: the fuzz tests and scripts/check-thread-safety.sh)
  build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev
  # style: clang-format (scripts/check-format.sh) and clang-tidy (.clang-tidy)
  clang-format clang-tidy
  # libraries
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libyaml-dev libnl-3-dev libnl-route-3-dev libibverbs-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libssl-dev libcivetweb-dev
  nlohmann-json3-dev
  # test and demo tools: real tc, real Prometheus, an independent gRPC client, plots
  iproute2 iperf3 prometheus python3 python3-grpcio python3-protobuf procps psmisc curl
  gnuplot-nox tcpdump nftables
  # the etcd store's tests (ctest -L etcd): a real etcd cluster on loopback; etcdctl for people
  etcd-server etcd-client
  # offline checks of the Kubernetes manifests (deploy/): YAML and the API's field schemas
  python3-yaml python3-kubernetes
  # the admission webhook's tests: applying its JSONPatch
  python3-jsonpatch
)
if [[ ${1:-} == --rxe ]]; then
  pkgs+=(qemu-system-x86 busybox-static kmod ibverbs-providers ibverbs-utils perftest xz-utils cpio)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600 -y --no-install-recommends)
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get "${apt_opts[@]}" install "${missing[@]}"

#!/usr/bin/env bash
# Everything of tests/gpu/device-check.sh that needs no GPU, here and in CI on every run (ctest
# gpu_device_check_rehearsal), so that the one call on a GPU machine does not fail on something
# a CPU could have caught:
#  1. the plugin-only build (device-check.sh's build stage, -DTQ_WERROR=ON) in a private mount
#     namespace where only the C/C++ toolchain's headers are left under /usr/include (every
#     entry another Debian package owns, or none, is gone: gRPC, protobuf, libnl, yaml-cpp,
#     GoogleTest, libibverbs, ...), /usr/local/include and every CMake package config and
#     pkg-config directory are empty, and a CMake dependency provider
#     (only-compiler-cuda-nccl.cmake) refuses find_package() of anything but Threads and
#     CUDAToolkit. Without the verbs headers the plugin is built socket-only, as on an image
#     without libibverbs-dev;
#  2. where this host has the CUDA toolkit and NCCL: NCCL laid out as the pip package
#     nvidia-nccl-cu* lays it out (nvidia/nccl/include/nccl.h, nvidia/nccl/lib/libnccl.so.2
#     and no libnccl.so), found through `python3 -c 'import nvidia.nccl'`; the GPU test must be
#     linked against it. NCCL_HOME is rehearsed the same way (configure only). Where the host
#     has no CUDA (CI) the plugin is built alone and the GPU stages must say why they skipped;
#  3. the skip paths: the C++ test without a GPU, the torch test without torch and with a
#     stand-in torch that sees no GPU: exit 77 with the reason, summary lines that say so,
#     device-check.sh exits 77; bad arguments to the torch test exit 2;
#  4. given the full build's plugin_abi_test, the plugin-only (socket-only) plugin through its C
#     ABI as NCCL drives it (transfers, two processes, the lifecycle, v10), its paced and
#     unpaced tenant lines as torch_allreduce.py recognizes them, and TENANTQOS_TRANSPORT=ib
#     failing init with the reason;
#  5. the time bound: with TQ_CHECK_TOTAL_S=12 the build is stopped and the summary says it did
#     not finish; with 4 no stage has time and each says so; both exit 1;
#  6. $OUT holds at most 8 files, none over 16 MiB.
#   rehearse.sh WORKDIR [PLUGIN_ABI_TEST]     (WORKDIR keeps the build between runs)
# Exit 0 rehearsed, 1 a check failed (FAIL lines), 77 not root / no unshare / no dpkg.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:?usage: rehearse.sh WORKDIR}
mkdir -p "$work" && work=$(cd "$work" && pwd) || exit 1

abi_test=${2:-}
if [[ ${TQ_REHEARSAL_INSIDE:-} != 1 ]]; then
  for tool in unshare dpkg mount; do
    command -v $tool >/dev/null || { echo "SKIP: needs $tool"; exit 77; }
  done
  if ((EUID != 0)) || ! unshare --mount true 2>/dev/null; then
    echo "SKIP: needs root for a private mount namespace (unshare --mount) to hide packages"
    exit 77
  fi
  # The namespace (and every mount in it) ends with the process: nothing to undo on the host.
  # No --fork: unshare execs this script, whose parent is then this process, outside.
  TQ_REHEARSAL_INSIDE=1 unshare --mount --propagation private "$0" "$work" "$abi_test"
  rc=$?
  rmdir "$work/view" "$work/orig-include" 2>/dev/null  # mount points: empty out here
  exit $rc
fi

# Never mount anything in the caller's mount namespace: this part runs only in a new one, made
# by the parent above (whatever the environment says).
inner_ns=$(readlink /proc/self/ns/mnt)
outer_ns=$(readlink "/proc/$PPID/ns/mnt")
if [[ -z $inner_ns || -z $outer_ns || $inner_ns == "$outer_ns" ]]; then
  echo "FAIL: not in a mount namespace of its own (${inner_ns:-?}, parent's ${outer_ns:-?}):" \
    "refusing to mount" >&2
  exit 1
fi
fail=0
FAIL() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

# ---- 1. hide everything but the toolchain ------------------------------------------------------
# The original /usr/include stays reachable read-only at $work/orig-include for the view's
# symlinks; it is only a mount in this namespace.
mkdir -p "$work/orig-include" "$work/view"
mount --bind /usr/include "$work/orig-include" &&
  mount -o remount,bind,ro "$work/orig-include" &&
  mount -t tmpfs -o size=16m tmpfs "$work/view" || exit 1
python3 - "$work/orig-include" "$work/view" <<'EOF' || exit 1
import os, re, subprocess, sys
# The C/C++ toolchain: glibc's and the kernel's headers and what libc6-dev pulls in, GCC's.
TOOLCHAIN = re.compile(r"(libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt-dev|libnsl-dev|"
                       r"libtirpc-dev|rpcsvc-proto|lib(stdc\+\+|gcc)-[0-9]+-dev|"
                       r"(gcc|g\+\+|cpp)-[0-9]+)(:.*)?")
orig, view = sys.argv[1], sys.argv[2]
hidden = []

def owners(paths):
    """Debian packages owning each /usr/include path (dpkg -S), as named under /usr/include."""
    real = {os.path.join("/usr/include", os.path.relpath(p, orig)): p for p in paths}
    r = subprocess.run(["dpkg", "-S", *real], capture_output=True, text=True)
    own = {p: set() for p in paths}
    for line in r.stdout.splitlines():
        pkgs, sep, path = line.partition(": ")
        if sep and path in real and not line.startswith("diversion "):
            own[real[path]] |= {p.strip() for p in pkgs.split(",")}
    return own

def mirror(src, dst):
    names = sorted(os.listdir(src))
    own = owners([os.path.join(src, n) for n in names]) if names else {}
    for n in names:
        s, d = os.path.join(src, n), os.path.join(dst, n)
        mine = {p for p in own[s] if TOOLCHAIN.fullmatch(p)}
        if own[s] and mine == own[s]:
            os.symlink(s, d)
        elif mine and os.path.isdir(s) and not os.path.islink(s):
            os.mkdir(d)  # shared with other packages (x86_64-linux-gnu/): keep the toolchain's
            mirror(s, d)
        else:
            hidden.append(os.path.relpath(s, orig))

mirror(orig, view)
print(f"hidden under /usr/include: {len(hidden)} entries, e.g. "
      + " ".join(h for h in hidden if h.split("/")[-1] in
                 ("grpcpp", "google", "yaml-cpp", "libnl3", "gtest", "infiniband", "openssl")))
EOF
mount -o remount,ro "$work/view" && mount --bind "$work/view" /usr/include || exit 1
for d in /usr/local/include /usr/lib/cmake /usr/lib/pkgconfig /usr/share/cmake \
  /usr/share/pkgconfig /usr/local/lib/cmake /usr/local/share/cmake /usr/local/lib/pkgconfig \
  /usr/lib/*-linux-gnu/cmake /usr/lib/*-linux-gnu/pkgconfig; do
  [[ -d $d && ! -L $d ]] && { mount -t tmpfs -o ro,size=4k tmpfs "$d" || exit 1; }
done
# The hiding must hold, or everything below proves nothing.
for h in grpcpp/grpcpp.h google/protobuf/message.h yaml-cpp/yaml.h libnl3/netlink/netlink.h \
  gtest/gtest.h infiniband/verbs.h; do
  if echo "#include <$h>" | c++ -E -x c++ - >/dev/null 2>&1; then
    FAIL "<$h> is still includable inside the namespace"
  fi
done
echo '#include <vector>
#include <pthread.h>
#include <linux/netlink.h>' | c++ -E -x c++ - >/dev/null ||
  FAIL "the toolchain's own headers are gone"
if pkg-config --exists grpc++ 2>/dev/null || pkg-config --exists yaml-cpp 2>/dev/null; then
  FAIL "pkg-config still finds grpc++ or yaml-cpp"
fi
((fail)) && exit 1
ok "only the toolchain's headers, no package configs"

# ---- 2. NCCL as the pip package lays it out (and 6., $OUT) -----------------------------------
py=$work/py
rm -rf "$py"
nccl_h="" nccl_so=""
for d in /usr/local/cuda/include /usr/local/cuda/targets/*/include "$work"/orig-include; do
  [[ -f $d/nccl.h ]] && { nccl_h=$d/nccl.h; break; }
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib /usr/lib/*-linux-gnu; do
  [[ -e $d/libnccl.so.2 ]] && { nccl_so=$d/libnccl.so.2; break; }
done
have_cuda=0
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] && have_cuda=1
if [[ -n $nccl_h && -n $nccl_so ]]; then
  mkdir -p "$py/nvidia/nccl/include" "$py/nvidia/nccl/lib"
  touch "$py/nvidia/nccl/__init__.py"
  cp "$nccl_h" "$py/nvidia/nccl/include/"
  cp -L "$nccl_so" "$py/nvidia/nccl/lib/libnccl.so.2"
  export PYTHONPATH=$py${PYTHONPATH:+:$PYTHONPATH}
  ok "NCCL from $nccl_h and $nccl_so recreated as the Python package at $py/nvidia/nccl"
else
  echo "note: no NCCL on this host: the Python package layout is not rehearsed here"
fi

out=$work/out
rm -rf "$out"
args="-DTQ_WERROR=ON -DCMAKE_PROJECT_TOP_LEVEL_INCLUDES=$here/only-compiler-cuda-nccl.cmake"
[[ -n ${TQ_REHEARSAL_LAUNCHER:-} ]] && args+=" -DCMAKE_CXX_COMPILER_LAUNCHER=$TQ_REHEARSAL_LAUNCHER"
unset NCCL_HOME
# Keep the objects for speed but find everything again: a cached result (the verbs headers, say)
# from a run that saw more than this namespace shows would hide what this one must prove.
rm -f "$work/build/CMakeCache.txt"
t0=$SECONDS
OUT=$out TQ_GPU_BUILD_DIR=$work/build TQ_CHECK_CMAKE_ARGS=$args "$repo/tests/gpu/device-check.sh"
rc=$?
echo "device-check.sh: exit $rc in $((SECONDS - t0)) s"
summary=$(cat "$out/summary.txt" 2>/dev/null)
((rc == 77)) || FAIL "device-check.sh exited $rc, want 77 (built, GPU stages skipped)"
grep -q '^stage build: PASS' <<<"$summary" || FAIL "no 'stage build: PASS' in the summary"
grep -q 'without its ib transport' "$out/build.log" ||
  FAIL "the plugin-only build did not say it left out the ib transport (verbs headers hidden)"
grep -q '^highest GLIBCXX_/CXXABI_ version referenced: none' "$out/build.log" ||
  FAIL "plugin_so_check.sh did not run on the plugin-only build"
gpu_test=$work/build/tests/gpu/nccl_allreduce_gpu_test
if ((have_cuda)) && [[ -d $py ]]; then
  grep -q 'from the Python package nvidia.nccl' <<<"$summary" ||
    FAIL "the summary does not say NCCL came from the Python package"
  [[ -x $gpu_test ]] || FAIL "nccl_allreduce_gpu_test was not built"
  lib=$(ldd "$gpu_test" 2>/dev/null | awk '$1 == "libnccl.so.2" {print $3}')
  [[ $lib == "$py/nvidia/nccl/lib/libnccl.so.2" ]] ||
    FAIL "nccl_allreduce_gpu_test loads libnccl.so.2 from '$lib', not the Python package's"
  grep -q '^stage cxx: SKIP: no GPU visible' <<<"$summary" ||
    FAIL "no 'stage cxx: SKIP: no GPU visible' in the summary"
  # NCCL_HOME wins over the Python package (configure only).
  NCCL_HOME=$py/nvidia/nccl cmake -S "$repo" -B "$work/build-home" -DTQ_PLUGIN_ONLY=ON \
    >"$work/home.log" 2>&1 || FAIL "configure with NCCL_HOME failed: $(tail -3 "$work/home.log")"
  grep -q "from NCCL_HOME=$py/nvidia/nccl" "$work/home.log" ||
    FAIL "with NCCL_HOME set, NCCL did not come from it: $(grep tests/gpu "$work/home.log")"
  NCCL_HOME=$work/nowhere cmake -S "$repo" -B "$work/build-home" -DTQ_PLUGIN_ONLY=ON \
    >"$work/home.log" 2>&1
  grep -q "not built: .*found but not NCCL in NCCL_HOME=$work/nowhere" "$work/home.log" ||
    FAIL "a wrong NCCL_HOME is not named: $(grep tests/gpu "$work/home.log")"
else
  grep -q '^stage cxx: SKIP: .*not built' <<<"$summary" ||
    FAIL "no 'stage cxx: SKIP: ... not built' in the summary of a host without CUDA/NCCL"
fi
grep -q '^stage torch: SKIP: ' <<<"$summary" || FAIL "no 'stage torch: SKIP: ...' in the summary"
n=$(find "$out" -type f | wc -l)
big=$(find "$out" -type f -size +16M)
((n <= 8)) && [[ -z $big ]] || FAIL "\$OUT has $n files (at most 8), over 16 MiB: ${big:-none}"
((fail)) || ok "device-check.sh: built, GPU stages skipped with their reasons, $n files in \$OUT"

# ---- 3. the torch test's own skip and argument paths ------------------------------------------
so=$work/build/lib/libnccl-net-tenantqos.so
stub=$work/stub-torch
mkdir -p "$stub/torch/distributed"
cat >"$stub/torch/__init__.py" <<'EOF'
"""A stand-in for PyTorch (rehearse.sh): importable, has an NCCL backend, sees no GPU."""
__version__ = "0.0+rehearsal-stand-in"


class version:
    cuda = None


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0
EOF
printf 'def is_available():\n    return True\n\n\ndef is_nccl_available():\n    return True\n' \
  >"$stub/torch/distributed/__init__.py"
msg=$(PYTHONPATH=$stub python3 "$here/torch_allreduce.py" "$so" 2>&1)
rc=$?
((rc == 77)) && grep -q '^SKIP: no GPU visible to torch 0.0+rehearsal-stand-in' <<<"$msg" ||
  FAIL "torch without a GPU: exit $rc, output: $msg"
python3 "$here/torch_allreduce.py" "$work/no-such-plugin.so" >/dev/null 2>&1
rc=$?
((rc == 2)) || FAIL "torch test with a missing plugin exited $rc, want 2"
TENANTQOS_RATE=fast python3 "$here/torch_allreduce.py" "$so" >/dev/null 2>&1
rc=$?
((rc == 2)) || FAIL "torch test with TENANTQOS_RATE=fast exited $rc, want 2"
((fail)) || ok "torch_allreduce.py: 77 without a GPU (stand-in torch), 2 for bad arguments"

# ---- 4. the plugin-only plugin through its ABI ----------------------------------------------
if [[ -n $abi_test ]]; then
  for c in symbols init_devices transfers two_process lifecycle v10; do
    TENANTQOS_TRANSPORT=auto "$abi_test" "$so" $c >"$work/abi.log" 2>&1 ||
      FAIL "plugin_abi_test $c on the plugin-only plugin: $(tail -3 "$work/abi.log")"
  done
  # What torch_allreduce.py expects of the plugin's log line, against the real plugin's.
  for mode in paced unpaced; do
    rate=2Gbps
    [[ $mode == unpaced ]] && rate=""
    TENANTQOS_TENANT=tenant-a TENANTQOS_RATE=$rate "$abi_test" "$so" transfers \
      >"$work/abi.log" 2>&1
    python3 "$here/torch_allreduce.py" --check-plugin-log "$work/abi.log" tenant-a $mode ||
      FAIL "torch_allreduce.py does not recognize the plugin's $mode tenant line in:" \
        "$(grep 'tenant tenant-a' "$work/abi.log")"
  done
  if TENANTQOS_TRANSPORT=ib "$abi_test" "$so" init_devices >"$work/abi.log" 2>&1 ||
    ! grep -q 'TENANTQOS_TRANSPORT=ib: this plugin was built without its ib transport' \
      "$work/abi.log"; then
    FAIL "TENANTQOS_TRANSPORT=ib on the socket-only plugin: $(tail -3 "$work/abi.log")"
  fi
  ((fail)) || ok "the plugin-only plugin through plugin_abi_test; its tenant lines as" \
    "torch_allreduce.py expects them; TENANTQOS_TRANSPORT=ib refused"
fi

# ---- 5. the time bound ------------------------------------------------------------------------
rm -rf "$work/bound-build" "$work/bound-out"
OUT=$work/bound-out TQ_GPU_BUILD_DIR=$work/bound-build TQ_CHECK_TOTAL_S=12 \
  "$repo/tests/gpu/device-check.sh" >"$work/bound.log" 2>&1
rc=$?
summary=$(cat "$work/bound-out/summary.txt" 2>/dev/null)
stopped='^stage build: DID NOT FINISH: stopped after .* of the 12-s bound); log: build.log'
((rc == 1)) && grep -q "$stopped" <<<"$summary" &&
  grep -q '^stage cxx: NOT RUN' <<<"$summary" || FAIL "12-s bound: exit $rc, summary: $summary"
rm -rf "$work/bound-out"
OUT=$work/bound-out TQ_GPU_BUILD_DIR=$work/bound-build TQ_CHECK_TOTAL_S=4 \
  "$repo/tests/gpu/device-check.sh" >"$work/bound.log" 2>&1
rc=$?
summary=$(cat "$work/bound-out/summary.txt" 2>/dev/null)
((rc == 1)) && grep -q '^stage probe: NOT RUN: no time left of the 4-s bound' <<<"$summary" &&
  grep -q '^stage build: NOT RUN: no time left' <<<"$summary" ||
  FAIL "4-s bound: exit $rc, summary: $summary"
rm -rf "$work/bound-build" "$work/bound-out"
((fail)) || ok "the time bound: a stopped build and stages without time are named"

((fail)) && exit 1
echo "PASS: device-check.sh rehearsed (all but what needs a GPU)"

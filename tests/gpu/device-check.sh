#!/usr/bin/env bash
# The first-GPU check: one command on a bare GPU image (nvcc, CMake, ninja, Python with PyTorch
# and nvidia-nccl-cu*; no network, none of the project's other dependencies). docs/plugin.md
# "On a GPU" says what it checks.
#   OUT=/some/dir tests/gpu/device-check.sh
# Stages, each stopped when its time is up, all together within TQ_CHECK_TOTAL_S (default 360):
#   probe  what the machine has: GPU and driver, nvcc, CMake, compiler, Python, torch, NCCL
#   build  the plugin-only build (-DTQ_PLUGIN_ONLY=ON, all cores; NCCL from NCCL_HOME, the
#          Python package nvidia.nccl or the system: tests/gpu/CMakeLists.txt), then
#          tests/functional/plugin_so_check.sh on the plugin (reported, not a failure)
#   cxx    tests/gpu/nccl_allreduce_gpu_test: NCCL's C API, two ranks through the plugin
#   torch  tests/gpu/torch_allreduce.py: PyTorch's NCCL backend, unpaced, paced, two tenants
# Writes under $OUT (default $TQ_GPU_BUILD_DIR/device-check), at most 7 files, each cut to
# 16 MiB: summary.txt (also printed at the end), build.log, cxx.log, cxx-nccl.log, torch.log,
# torch-nccl.log (NCCL's logs of every rank), torch.json (the torch test's figures).
# Exit: 0 every stage passed; 77 nothing failed but a stage was skipped (no CUDA/NCCL at
# configure time, no GPU, no torch: the reasons are in the summary); 1 a stage failed, did not
# finish or had no time left to run.
# Env: TQ_CHECK_TOTAL_S, TQ_GPU_BUILD_DIR (default build-gpu), TQ_CHECK_CMAKE_ARGS (more
# configure arguments, e.g. -DTQ_WERROR=ON), TQ_CHECK_REVISION (printed when there is no .git),
# TQ_PYTHON (default python3), NCCL_HOME, and what the tests read (TQ_GPU_RATE,
# TENANTQOS_RATE, TQ_TORCH_RATE_B, ...: see each test's header).
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$self")/../.." || exit 1
repo=$PWD
build=${TQ_GPU_BUILD_DIR:-build-gpu}
[[ $build == /* ]] || build=$repo/$build
out=${OUT:-$build/device-check}
python=${TQ_PYTHON:-python3}
so=$build/lib/libnccl-net-tenantqos.so
cxx_test=$build/tests/gpu/nccl_allreduce_gpu_test
max_bytes=$((16 * 1024 * 1024))

# ---- one stage, run as `device-check.sh --stage NAME` under timeout ------------------------
if [[ ${1:-} == --stage ]]; then
  work=$2
  case $3 in
    probe)
      echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), kernel $(uname -r), $(nproc) cores"
      if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
        echo "tree: $(git -C "$repo" describe --always --dirty 2>/dev/null)"
      else
        echo "tree: ${TQ_CHECK_REVISION:-unknown (no .git here; set TQ_CHECK_REVISION)}"
      fi
      if command -v nvidia-smi >/dev/null; then
        echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total \
          --format=csv,noheader 2>&1 | paste -sd';')"
      else
        echo "gpu: no nvidia-smi"
      fi
      echo "nvcc: $( (nvcc --version 2>/dev/null || echo none) | tail -1)"
      echo "cmake: $(cmake --version | head -1), ninja: $(ninja --version 2>/dev/null || echo none)"
      echo "c++: $( (c++ --version 2>/dev/null || echo none) | head -1)"
      echo "verbs headers: $(
        [[ -e /usr/include/infiniband/verbs.h ]] && echo present || echo 'absent (socket only)')"
      "$python" - <<'EOF' 2>&1
import importlib.metadata as md, sys
print(f"python: {sys.version.split()[0]} ({sys.executable})")
try:
    import torch
    print(f"torch: {torch.__version__}, CUDA {torch.version.cuda}, "
          f"GPUs visible: {torch.cuda.device_count() if torch.cuda.is_available() else 0}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
except Exception as e:
    print(f"torch: not usable: {e}")
try:
    import nvidia.nccl as m
    d = [x for x in md.distributions() if x.metadata["Name"].startswith("nvidia-nccl")]
    print(f"nvidia.nccl: {list(m.__path__)[0]} "
          f"({', '.join(x.metadata['Name'] + ' ' + x.version for x in d) or 'no metadata'})")
except Exception as e:
    print(f"nvidia.nccl: not importable: {e}")
EOF
      ;;
    build)
      gen=()
      command -v ninja >/dev/null && gen=(-G Ninja)
      # shellcheck disable=SC2086  # TQ_CHECK_CMAKE_ARGS is a list of arguments
      cmake -S "$repo" -B "$build" "${gen[@]}" -DTQ_PLUGIN_ONLY=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_PYTHON="$python" ${TQ_CHECK_CMAKE_ARGS:-} \
        2>&1 | tee "$work/configure.log" || exit 1
      sed -n 's/^-- tests\/gpu: //p' "$work/configure.log" >"$work/gpu-tests.txt"
      cmake --build "$build" -j "$(nproc)" || exit 1
      echo "== tests/functional/plugin_so_check.sh"
      "$repo/tests/functional/plugin_so_check.sh" "$so" 2>&1 | tee "$work/so-check.log"
      echo "${PIPESTATUS[0]}" >"$work/so-check.rc"
      ;;
    cxx)
      TQ_GPU_LOG_DIR=$work/cxx-nccl "$cxx_test" "$so"
      ;;
    torch)
      TQ_TORCH_LOG_DIR=$work/torch-nccl "$python" "$repo/tests/gpu/torch_allreduce.py" "$so" \
        >"$work/torch.stdout"
      ;;
  esac
  exit
fi

# ---- the driver ------------------------------------------------------------------------------
total=${TQ_CHECK_TOTAL_S:-360}
if ! [[ $total =~ ^[0-9]+$ ]] || ((total < 1)); then
  echo "device-check: TQ_CHECK_TOTAL_S=$total: want a whole number of seconds" >&2
  exit 2
fi
start=$SECONDS
deadline=$((start + total - 3))  # the last seconds write the summary
mkdir -p "$out" "$build" || exit 1
work=$(mktemp -d /tmp/tq-device-check.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
summary=$out/summary.txt
rm -f "$out"/{summary.txt,build.log,cxx.log,cxx-nccl.log,torch.log,torch-nccl.log,torch.json}
lines=()
failed=0
skipped=0

note() { lines+=("$*"); echo "device-check: $*"; }

# stage NAME CAP LOG: runs `device-check.sh --stage NAME` for at most CAP seconds and what is
# left of the bound; sets stage_rc (124: did not finish, 125: not run).
stage() {
  local name=$1 cap=$2 log=$3 left=$((deadline - SECONDS))
  if ((left < 5)); then
    note "stage $name: NOT RUN: no time left of the ${total}-s bound"
    stage_rc=125
    failed=1
    return
  fi
  local limit=$((cap < left ? cap : left)) t0=$SECONDS
  echo "device-check: stage $name (at most ${limit} s) ..."
  timeout -k 5 "$limit" "$self" --stage "$work" "$name" >>"$log" 2>&1
  stage_rc=$?
  stage_s=$((SECONDS - t0))
  if ((stage_rc == 124 || stage_rc == 137)); then
    note "stage $name: DID NOT FINISH: stopped after ${stage_s} s (limit ${limit} s of the" \
      "${total}-s bound); log: $(basename "$log")"
    stage_rc=124
    failed=1
  fi
}

# Concatenates NCCL's logs, the ranks' output and results in DIR into FILE, each with a header.
gather() {
  local dir=$1 file=$2 f
  [[ -d $dir ]] || return
  for f in "$dir"/*.log "$dir"/*.out "$dir"/*.json; do
    [[ -f $f ]] || continue
    echo "===== $(basename "$f")"
    cat "$f"
  done >"$file"
}

# Cuts FILE to 16 MiB: its first MiB and its last 14 MiB.
cap() {
  local f=$1 size
  [[ -f $f ]] || return
  size=$(stat -c %s "$f")
  ((size > max_bytes)) || return
  {
    head -c $((1024 * 1024)) "$f"
    printf '\n[... device-check cut %d bytes here ...]\n' $((size - 15 * 1024 * 1024))
    tail -c $((14 * 1024 * 1024)) "$f"
  } >"$f.cut" && mv "$f.cut" "$f"
}

# probe: its lines go to the summary as they are.
stage probe 30 "$work/probe.log"
probe=()
[[ -f $work/probe.log ]] && mapfile -t probe <"$work/probe.log"
if ((stage_rc != 0 && stage_rc < 124)); then
  note "stage probe: FAIL (exit $stage_rc)"
  failed=1
fi

stage build 240 "$out/build.log"
gpu_tests=$(cat "$work/gpu-tests.txt" 2>/dev/null)
if ((stage_rc == 0)); then
  note "stage build: PASS (${stage_s} s): plugin $(stat -c %s "$so") bytes;" \
    "GPU test: ${gpu_tests:-?}"
elif ((stage_rc < 124)); then
  note "stage build: FAIL (exit $stage_rc, ${stage_s} s): last lines of build.log:"
  while IFS= read -r l; do note "  $l"; done < <(grep -v '^\s*$' "$out/build.log" | tail -8)
  failed=1
fi
built=$stage_rc
# The plugin's portability (glibc <= 2.28, no libstdc++.so, only NCCL's symbols exported) as built
# on this image: reported, but it neither stops nor fails the GPU stages (an image with a newer
# glibc than CI's may add symbol versions that matter for shipping, not for this check).
if [[ -f $work/so-check.rc ]]; then
  if [[ $(cat "$work/so-check.rc") == 0 ]]; then
    note "  plugin_so_check.sh: PASS"
  else
    note "  plugin_so_check.sh: FAIL (informational here, does not fail the check):"
    while IFS= read -r l; do note "    $l"; done < <(grep -m4 '^FAIL' "$work/so-check.log")
  fi
fi

if ((built != 0)); then
  note "stage cxx: NOT RUN: the build did not pass"
  failed=1
elif [[ ! -x $cxx_test ]]; then
  note "stage cxx: SKIP: ${gpu_tests:-nccl_allreduce_gpu_test was not built}"
  skipped=1
else
  stage cxx 150 "$out/cxx.log"
  gather "$work/cxx-nccl" "$out/cxx-nccl.log"
  figures=$(grep -E '^(NCCL [0-9]|rank [0-9]: .*bus bandwidth|PASS|FAIL)' "$out/cxx.log")
  case $stage_rc in
    0) note "stage cxx: PASS (${stage_s} s)" ;;
    77) note "stage cxx: $(grep -m1 '^SKIP' "$out/cxx.log")"; skipped=1 ;;
    124) ;;
    *) note "stage cxx: FAIL (exit $stage_rc, ${stage_s} s)"; failed=1 ;;
  esac
  while IFS= read -r l; do [[ -n $l ]] && note "  $l"; done <<<"$figures"
fi

if ((built != 0)); then
  note "stage torch: NOT RUN: the build did not pass"
  failed=1
else
  stage torch 200 "$out/torch.log"
  gather "$work/torch-nccl" "$out/torch-nccl.log"
  json=$(grep '^{' "$work/torch.stdout" 2>/dev/null | tail -1)
  [[ -n $json ]] && echo "$json" >"$out/torch.json"
  case $stage_rc in
    0) note "stage torch: PASS (${stage_s} s)" ;;
    77) note "stage torch: $(grep -m1 '^SKIP' "$work/torch.stdout")"; skipped=1 ;;
    124) ;;
    *)
      note "stage torch: FAIL (exit $stage_rc, ${stage_s} s); last lines of torch.log:"
      while IFS= read -r l; do note "  $l"; done < <(tail -6 "$out/torch.log")
      failed=1
      ;;
  esac
  [[ -n $json ]] && note "  $json"
fi

result=PASS
rc=0
if ((failed)); then
  result=FAIL rc=1
elif ((skipped)); then
  result="SKIPPED (nothing failed; see the SKIP lines)" rc=77
fi
{
  echo "tenantqos device check: $result in $((SECONDS - start)) s (bound ${total} s)"
  printf '%s\n' "${probe[@]}"
  printf '%s\n' "${lines[@]}"
} >"$summary"
for f in "$out"/*; do cap "$f"; done
echo "===== $summary"
cat "$summary"
exit $rc

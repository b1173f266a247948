#!/usr/bin/env bash
# Throughput of the plugin's ib transport vs perftest's ib_write_bw, in the same Soft-RoCE VM run
# (tests/rxe/rxe-vm: rxe0 -> rxe1 over a veth pair, MTU 9000, so both use active_mtu 4096):
# 1 MiB messages, one direction, unpaced. Runs are interleaved (bw, plugin, bw, plugin, ...)
# and the medians compared, because the VM runs under qemu TCG and the host may be busy.
#
#   bench/plugin/ib_bench.sh [--build DIR] [--seconds S] [--repeat N]
#   ninja -C build bench-plugin-ib              # the same, from the build tree
#
# Prints each run, then: ib_write_bw median, plugin median, ratio (target >= 0.9).
# Exit status: 0 (figures printed), 1 if a run failed, 2 for bad usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build seconds=4 repeat=3 inside=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --inside) inside=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--seconds S] [--repeat N]" >&2; exit 2 ;;
  esac
done

if [[ $inside == 0 ]]; then
  for f in "$build/bin/tenantqos-perf" "$build/lib/libnccl-net-tenantqos.so"; do
    [[ -x $f || -f $f ]] || { echo "ib_bench: $f missing (build first)" >&2; exit 1; }
  done
  exec "$root/tests/rxe/rxe-vm" --timeout $((120 + repeat * seconds * 6)) --mtu 9000 -- \
    "$here/ib_bench.sh" --inside --build "$build" --seconds "$seconds" --repeat "$repeat"
fi

# ---- inside the VM -----------------------------------------------------------------------------
perf=$build/bin/tenantqos-perf
plugin=$build/lib/libnccl-net-tenantqos.so
mtu=$(ibv_devinfo -d rxe0 | awk '/active_mtu/ {print $2; exit}')
echo "# rxe0 -> rxe1, active_mtu $mtu, 1 MiB messages, ${seconds} s per run, $repeat runs each"

write_bw() {
  timeout $((seconds + 30)) ib_write_bw -d rxe1 -x 1 -s 1048576 -D "$seconds" --report_gbits \
    -F >/dev/null 2>&1 &
  local server=$!
  sleep 1
  local out
  out=$(timeout $((seconds + 30)) ib_write_bw -d rxe0 -x 1 -s 1048576 -D "$seconds" \
    --report_gbits -F 10.77.0.2 2>&1) || { wait $server || true; echo "ib_write_bw: $out" >&2; return 1; }
  wait $server || true
  awk '$1 == 1048576 {print $4}' <<<"$out"
}

plugin_bw() {
  local out
  out=$(timeout $((seconds + 60)) "$perf" sendrecv --local 2 --unidirectional --size 1M \
    --duration "$seconds" --no-check --json --plugin "$plugin" --timeout 30 \
    --env TENANTQOS_TRANSPORT=ib --env TENANTQOS_SOCKET_IFNAME=lo \
    --env TENANTQOS_RUN_DIR=/nonexistent/tqrxe-bench \
    --rank-env 0:TENANTQOS_IB_HCA==rxe0 --rank-env 1:TENANTQOS_IB_HCA==rxe1 2>&1) ||
    { echo "tenantqos-perf: $out" >&2; return 1; }
  sed -n 's/.*"type":"summary".*"rank":1,.*"rx_gbps":\([0-9.]*\).*/\1/p' <<<"$out"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

bw=() pl=()
for ((i = 1; i <= repeat; i++)); do
  b=$(write_bw) || exit 1
  p=$(plugin_bw) || exit 1
  [[ -n $b && -n $p ]] || { echo "ib_bench: could not parse a result (bw '$b', plugin '$p')" >&2; exit 1; }
  printf 'run %d: ib_write_bw %.3f Gbit/s, plugin (ib transport) %.3f Gbit/s\n' "$i" "$b" "$p"
  bw+=("$b") pl+=("$p")
done
mb=$(printf '%s\n' "${bw[@]}" | median)
mp=$(printf '%s\n' "${pl[@]}" | median)
printf 'median: ib_write_bw %.3f Gbit/s, plugin %.3f Gbit/s, ratio %.3f (target >= 0.9)\n' \
  "$mb" "$mp" "$(awk -v a="$mp" -v b="$mb" 'BEGIN {print a / b}')"

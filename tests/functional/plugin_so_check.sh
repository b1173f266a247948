#!/usr/bin/env bash
# Checks the shipped plugin's linkage: runtime dependencies are libc (with its loader), libm,
# libstdc++, pthread and dl only (so it loads on any host with a C++ runtime, and libibverbs
# stays dlopen'ed), and the only exported symbols are NCCL's plugin tables.
#   plugin_so_check.sh path/to/libnccl-net-tenantqos.so
set -euo pipefail
so=$1
allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libpthread\.so\.0|libdl\.so\.2|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
# Sanitizer builds (TQ_SANITIZE) link their runtimes into the plugin.
[[ ${TQ_SANITIZE:-OFF} == ON ]] && allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libpthread\.so\.0|libdl\.so\.2|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libasan\.so\.[0-9]+|libubsan\.so\.[0-9]+|libgcc_s\.so\.1)$'
fail=0
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(echo $needed)"
for lib in $needed; do
  if ! [[ $lib =~ $allowed ]]; then
    echo "FAIL: unexpected runtime dependency $lib" >&2
    fail=1
  fi
done
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
echo "exported: $(echo $exported)"
for sym in $exported; do
  if ! [[ $sym =~ ^ncclNetPlugin_v(9|10|11|12)$ ]]; then
    echo "FAIL: unexpected exported symbol $sym" >&2
    fail=1
  fi
done
for want in ncclNetPlugin_v10 ncclNetPlugin_v11; do
  grep -qx "$want" <<<"$exported" || { echo "FAIL: $want not exported" >&2; fail=1; }
done
if readelf -d "$so" | grep -q TEXTREL; then
  echo "FAIL: text relocations" >&2
  fail=1
fi
exit $fail

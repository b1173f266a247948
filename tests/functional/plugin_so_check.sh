#!/usr/bin/env bash
# Checks the shipped plugin's linkage:
# * runtime dependencies are libc (with its loader), libm, libgcc_s, pthread and dl only (so it
#   loads on any glibc host, and libibverbs stays dlopen'ed); libstdc++ is linked in statically,
#   so the host's C++ runtime (its version) does not matter;
# * no symbol needs a glibc newer than GLIBC_2.28 (RHEL 8; NCCL itself needs 2.18) and none a
#   GLIBCXX_/CXXABI_ version (see nccl-plugin/glibc_compat.cc);
# * the only exported symbols are NCCL's plugin tables, and all four (v9-v12) are there.
# Sanitizer builds (TQ_SANITIZE=ON) link their runtimes and the host's libstdc++: only the
# exported-symbol checks apply there.
#   plugin_so_check.sh path/to/libnccl-net-tenantqos.so
set -euo pipefail
so=$1
max_glibc=2.28
loader='ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1'
glibc='libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|libgcc_s\.so\.1'
allowed="^($glibc|$loader)$"
[[ ${TQ_SANITIZE:-OFF} == ON ]] &&
  allowed="^($glibc|$loader|libstdc\+\+\.so\.6|libasan\.so\.[0-9]+|libubsan\.so\.[0-9]+)$"
fail=0
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(echo $needed)"
for lib in $needed; do
  if ! [[ $lib =~ $allowed ]]; then
    echo "FAIL: unexpected runtime dependency $lib" >&2
    fail=1
  fi
done

if [[ ${TQ_SANITIZE:-OFF} != ON ]]; then
  versions=$(objdump -T "$so" | grep -o '(GLIBC_[0-9.]*)\|(GLIBCXX_[0-9.]*)\|(CXXABI_[0-9.]*)' |
             tr -d '()' | sort -u)
  highest_glibc=$(grep '^GLIBC_' <<<"$versions" | sed 's/^GLIBC_//' | sort -V | tail -1)
  echo "highest GLIBC_ version referenced: ${highest_glibc:-none} (limit $max_glibc)"
  newer=$(printf '%s\n%s\n' "${highest_glibc:-0}" "$max_glibc" | sort -V | tail -1)
  if [[ $newer != "$max_glibc" ]]; then
    echo "FAIL: symbols need GLIBC_$highest_glibc (> $max_glibc):" >&2
    objdump -T "$so" | awk -v m="$max_glibc" '
      match($0, /\(GLIBC_[0-9.]+\)/) {
        v = substr($0, RSTART + 7, RLENGTH - 8); split(v, a, "."); split(m, b, ".")
        if (a[1] * 1000 + a[2] > b[1] * 1000 + b[2]) print "  " $NF "@GLIBC_" v
      }' >&2
    fail=1
  fi
  cxx=$(grep -E '^(GLIBCXX|CXXABI)_' <<<"$versions" | sort -V | tail -1 || true)
  echo "highest GLIBCXX_/CXXABI_ version referenced: ${cxx:-none} (limit: none)"
  if [[ -n $cxx ]]; then
    echo "FAIL: the plugin depends on the host's libstdc++ (it references $cxx)" >&2
    fail=1
  fi
fi

exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
echo "exported: $(echo $exported)"
for sym in $exported; do
  if ! [[ $sym =~ ^ncclNetPlugin_v(9|10|11|12)$ ]]; then
    echo "FAIL: unexpected exported symbol $sym" >&2
    fail=1
  fi
done
for want in ncclNetPlugin_v9 ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12; do
  grep -qx "$want" <<<"$exported" || { echo "FAIL: $want not exported" >&2; fail=1; }
done
if readelf -d "$so" | grep -q TEXTREL; then
  echo "FAIL: text relocations" >&2
  fail=1
fi
exit $fail

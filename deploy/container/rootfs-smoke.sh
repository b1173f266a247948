#!/usr/bin/env bash
# Runs the Containerfile's runtime stage without a container engine, as far as that goes: a
# debootstrap'ed bookworm minbase root file system (what debian:bookworm-slim is made from), the
# runtime stage's RUN executed in it, the build stage's install/strip commands applied to a
# build tree, then a smoke test in a network namespace of its own (tqdeploy-<pid>):
#   * ldd of the five shipped files inside the root: nothing missing;
#   * policyd as uid 65532 over mutual TLS (a throwaway CA from scripts/tq-certs.sh),
#     tenantqosctl apply of deploy/kubernetes/policy.yaml (scaled by 1/100) as the admin;
#   * the agent as uid 0 / gid 7400 with CAP_NET_ADMIN and CAP_CHOWN only (as the DaemonSet
#     runs it): /readyz 200, tc classes on a veth, tenant-a's directory 0750 root:7400 with its
#     attach socket;
#   * tenantqos-perf through the plugin as uid 65532 in group 7400 (as the training pod example):
#     attached to tenant-a's socket and paced by it;
#   * SIGTERM to the agent leaves the tc tree in place.
# Manual check, not part of ctest: needs root and Debian's archive (debootstrap downloads about
# 40 MB). Usage:
#   deploy/container/rootfs-smoke.sh [--build-dir build] [--work DIR]
# The work directory (default: a new /tmp/tq-rootfs-smoke.*) is kept for inspection; delete it
# yourself. Everything else it creates (namespace, mounts, processes) is removed on exit.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$src/build
work=
while (($#)); do
  case $1 in
    --build-dir) build=$(cd "$2" && pwd); shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--work DIR]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "rootfs-smoke: must run as root (debootstrap, chroot, netns)" >&2; exit 1; }
[[ -n $work ]] || work=$(mktemp -d /tmp/tq-rootfs-smoke.XXXX)
mkdir -p "$work"
root=$work/root
ns=tqdeploy-$$
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  ip netns del "$ns" 2>/dev/null || true
  umount "$root/proc" 2>/dev/null || true
  umount "$root/dev" 2>/dev/null || true
}
trap cleanup EXIT

# The Containerfile's commands, continuation lines joined: the runtime stage's apt-get RUN, and
# the build stage's `cmake --install` part with /build and /out mapped to this machine.
extract() {
  /usr/bin/python3 - "$src/deploy/container/Containerfile" "$1" "$build" "$work/out" <<'EOF'
import re, sys
text, what, build, out = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4]
def run_block(stage_text, start):
    block = stage_text[stage_text.index(start):]
    return re.sub(r"\\\n", " ", block[:block.index("\n\n")])[len("RUN "):]
if what == "runtime":
    print(run_block(text[text.index(" AS runtime"):], "RUN apt-get"))
else:
    cmd = run_block(text[text.index(" AS build"):text.index(" AS runtime")], "RUN cmake")
    cmd = cmd[cmd.index("cmake --install"):]
    print(cmd.replace("/out", out).replace("/build ", build + " "))
EOF
}

if [[ ! -x $root/usr/bin/apt-get ]]; then
  echo "== debootstrap bookworm minbase into $root"
  if command -v debootstrap >/dev/null; then
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian
  else
    (cd "$work" && apt-get download debootstrap && dpkg -x debootstrap_*.deb dbs)
    DEBOOTSTRAP_DIR=$work/dbs/usr/share/debootstrap \
      "$work/dbs/usr/sbin/debootstrap" --variant=minbase bookworm "$root" http://deb.debian.org/debian
  fi
  # The same sources as the debian:bookworm-slim image.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  echo "== the runtime stage's RUN"
  chroot "$root" /bin/sh -ec "$(extract runtime)"
  umount "$root/proc" "$root/dev"
fi

echo "== the build stage's install + strip, from $build"
rm -rf "$work/out"
sh -ec "$(extract install)"
cp -a "$work/out/." "$root/"

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
fail=0
check() { if eval "$2"; then echo "ok    $1"; else echo "FAIL  $1"; fail=1; fi; }

echo "== ldd inside the root"
for f in /usr/local/bin/tenantqos-policyd /usr/local/bin/tenantqosctl /usr/local/bin/tenantqos-agent \
         /usr/local/bin/tenantqos-perf /usr/local/lib/tenantqos/libnccl-net-tenantqos.so; do
  check "$f: every library found" "! chroot '$root' ldd '$f' | grep -q 'not found'"
done

ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add tqd0 type veth peer name tqd1
ip -n "$ns" addr add 10.251.0.1/24 dev tqd0
ip -n "$ns" addr add 10.251.0.2/24 dev tqd1
ip -n "$ns" link set tqd0 up
ip -n "$ns" link set tqd1 up
# Foreground only: backgrounded, a shell function runs in a subshell and $! names that subshell,
# not the process (the long-running ones below call ip netns exec directly).
in_ns() { ip netns exec "$ns" "$@"; }
rm -rf "$root/tmp/pd" "$root/tmp/pki" "$root/run/tenantqos" "$root/var/lib/tenantqos"
mkdir -p "$root/tmp/pd" "$root/run/tenantqos" "$root/var/lib/tenantqos"
chown 65532:65532 "$root/tmp/pd"
# Mutual TLS as deployed: a throwaway CA and certificates (openssl on this host), policyd's and
# the admin's readable by uid 65532, the agent's by root.
"$src/scripts/tq-certs.sh" cluster "$root/tmp/pki" 127.0.0.1 smoke
chown 65532:65532 "$root/tmp/pki/policyd.key" "$root/tmp/pki/admin.key"
tls() { echo "--tls-ca=/tmp/pki/ca.crt --tls-cert=/tmp/pki/$1.crt --tls-key=/tmp/pki/$1.key"; }

echo "== policyd as uid 65532"
ip netns exec "$ns" chroot --userspec=65532:65532 "$root" /usr/local/bin/tenantqos-policyd \
  --listen=0.0.0.0:7400 --data-dir=/tmp/pd --metrics=0.0.0.0:7401 $(tls policyd) \
  >"$work/policyd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$work/policyd.log" && break; sleep 0.1; done
check "policyd listening" "grep -q 'listening on 0.0.0.0:7400' '$work/policyd.log'"
sed -e 's/0Gbps/00Mbps/g' \
  "$src/deploy/kubernetes/policy.yaml" >"$root/tmp/policy.yaml"
check "tenantqosctl apply (uid 65532)" \
  "in_ns chroot --userspec=65532:65532 '$root' /usr/local/bin/tenantqosctl $(tls admin) apply -f /tmp/policy.yaml"

echo "== agent as uid 0, gid 7400, CAP_NET_ADMIN and CAP_CHOWN only"
ip netns exec "$ns" chroot "$root" setpriv --regid=7400 --clear-groups --inh-caps=-all --bounding-set=-all,+net_admin,+chown -- \
  /usr/local/bin/tenantqos-agent --policyd=127.0.0.1:7400 --node=smoke --device=tqd0=fabric $(tls agent-smoke) \
  --run-dir=/run/tenantqos --state-dir=/var/lib/tenantqos --metrics=0.0.0.0:9464 >"$work/agent.log" 2>&1 &
agent=$!
pids+=($agent)
ready() { [[ $(in_ns curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9464/readyz) == 200 ]]; }
for _ in $(seq 100); do ready && break; sleep 0.1; done
check "agent /readyz 200" ready
check "agent capabilities: NET_ADMIN and CHOWN only" "grep -q '^CapEff:.*0000000000001001$' /proc/$agent/status"
check "tc classes for both tenants" "[[ \$(in_ns tc class show dev tqd0 | wc -l) -eq 4 ]]"
check "tenant-a's directory 0750 root:7400" \
  "[[ \$(stat -c '%a %u %g' '$root/run/tenantqos/tenants/tenant-a') == '750 0 7400' ]]"
check "tenant-a's attach socket" "[[ -S '$root/run/tenantqos/tenants/tenant-a/agent.sock' ]]"

echo "== the plugin as uid 65532 in group 7400, tenant-a (limit 600Mbps = 75 MB/s)"
in_ns chroot --userspec=65532:7400 "$root" /usr/local/bin/tenantqos-perf sendrecv --local 2 \
  --plugin /usr/local/lib/tenantqos/libnccl-net-tenantqos.so --tenant tenant-a \
  --env TENANTQOS_RUN_DIR=/run/tenantqos --env TENANTQOS_SOCKET_IFNAME==tqd0 \
  -b 4M -e 4M -n 10 -w 2 >"$work/perf.log" 2>&1 || true
cat "$work/perf.log"
# Two ranks send to each other on loopback; both draw on tenant-a's one bucket, so each gets
# about half the limit. Unpaced it would be several GB/s.
check "paced by the agent (tenant-a's socket)" \
  "awk '/^ +4194304/ {exit !(\$4 > 0.02 && \$4 < 0.05)}' '$work/perf.log'"

kill "$agent"
wait "$agent" || true
check "SIGTERM leaves the tc tree" "[[ \$(in_ns tc class show dev tqd0 | wc -l) -eq 4 ]]"

echo "== root file system: $(du -sh --exclude=proc --exclude=var/cache/apt "$root" | cut -f1) (work dir $work)"
exit $fail

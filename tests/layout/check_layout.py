#!/usr/bin/env python3
"""Checks that only convention held before: the libraries' layering and the tests' layout.

  check_layout.py SOURCE_DIR layering     a library includes only its own headers and those of
                                          the libraries below it (docs/development.md, Layout)
  check_layout.py SOURCE_DIR tests        tests/unit mirrors the source folders and each unit
                                          test's ctest target is named after its path
  check_layout.py SOURCE_DIR sources      every production .cc has its unit test
                                          (tests/unit/<dir>/<stem>_test.cc), or is listed in
                                          UNMIRRORED below with the reason and where it is tested

Every library exports the repository root as its include root, so the compiler cannot tell
"agent/" from "common/"; this script reads the #include "dir/..." lines instead. Exit 1 with
one line per violation (file:line, what it includes, what it may include).
"""
import os
import re
import sys

# Folder -> the top-level folders whose headers it may include (itself always). "tenantqos"
# is the generated protobuf code (proto/tenantqos/v1/*.pb.h): it stops at the agent, policy
# and webhook edges; "etcd" is the generated etcd v3 API subset (proto/etcd/rpc.proto), for
# the policy store only. Dependencies point one way; keep this table in step with
# docs/development.md.
ALLOWED = {
    "common": set(),
    "tc": {"common"},
    "ib": {"common"},
    "proto": {"common", "tenantqos"},
    "rpc": {"common", "proto", "tenantqos"},
    "fabric": {"common"},
    "nccl-plugin": {"common", "ib"},
    "policy": {"common", "ib", "fabric", "proto", "rpc", "tenantqos", "etcd"},
    "agent": {"common", "tc", "ib", "proto", "rpc", "tenantqos"},
    "webhook": {"common", "proto", "rpc", "tenantqos"},
}
SOURCE_EXT = (".cc", ".h", ".c")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_.+-]+)/')


def check_layering(root):
    bad = []
    for top, allowed in sorted(ALLOWED.items()):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != top and m.group(1) not in allowed:
                            rel = os.path.relpath(path, root)
                            may = ", ".join(sorted(allowed)) or "nothing else"
                            bad.append(f"{rel}:{n}: includes {m.group(1)}/ ({line.strip()}); "
                                       f"{top}/ may include {may}")
    return bad


def target_name(rel_test):
    """tests/unit/<dirs>/<stem>_test.cc -> ctest target: the folders, nccl-plugin spelled
    "plugin", then the stem without a leading repeat of the last folder, joined by "_"."""
    parts = rel_test.split("/")[:-1]
    stem = os.path.basename(rel_test)[: -len("_test.cc")]
    prefix = ["plugin" if p == "nccl-plugin" else p for p in parts]
    if prefix and (stem == prefix[-1] or stem == parts[-1]):
        stem = ""
    elif prefix and stem.startswith(prefix[-1] + "_"):
        stem = stem[len(prefix[-1]) + 1:]
    return "_".join(prefix + ([stem] if stem else [])) + "_test"


TQ_TEST = re.compile(r"tq_test\(\s*(\S+)\s+SRCS\s+(\S+)")


def check_tests(root):
    bad = []
    unit = os.path.join(root, "tests", "unit")
    for dirpath, _, files in os.walk(unit):
        for name in sorted(files):
            if not name.endswith("_test.cc"):
                continue
            test = os.path.join(dirpath, name)
            rel = os.path.relpath(test, unit).replace(os.sep, "/")
            src_dir = os.path.join(root, os.path.dirname(rel))
            stem = name[: -len("_test.cc")]
            if not any(os.path.exists(os.path.join(src_dir, stem + e)) for e in (".cc", ".h")):
                bad.append(f"tests/unit/{rel}: no {os.path.dirname(rel)}/{stem}.cc or .h: a unit "
                           "test sits in the folder of the source it tests, named after it")
            # A parent folder's CMakeLists.txt may name the file with its subpath.
            owner = _targets_up(root, test).get(os.path.normpath(test))
            want = target_name(rel)
            if owner is not None and owner != want:
                bad.append(f"tests/unit/{rel}: ctest target {owner}, expected {want} "
                           "(named after the path)")
    return bad


def _targets_up(root, test):
    """tq_test targets of every CMakeLists.txt between tests/unit and the test's folder."""
    found = {}
    d = os.path.dirname(test)
    unit = os.path.join(root, "tests", "unit")
    while os.path.commonpath([d, unit]) == unit:
        cml = os.path.join(d, "CMakeLists.txt")
        if os.path.exists(cml):
            with open(cml, encoding="utf-8") as f:
                for m in TQ_TEST.finditer(f.read()):
                    found[os.path.normpath(os.path.join(d, m.group(2)))] = m.group(1)
        if d == unit:
            break
        d = os.path.dirname(d)
    return found


# Production sources without a unit test file of their own: why, and what tests them. A
# program's main (main.cc, *_main.cc: flag parsing lives in the library, and the functional
# tests run the binary) and the fuzz targets (nccl-plugin/fuzz/: tests themselves, label fuzz)
# need no entry. An entry whose file gained its mirrored test, or is gone, is a violation too,
# so the list only shrinks.
UNMIRRORED = {
    "common/clock.cc": "the real clock's two reads; FakeClock is exercised by every timed "
                       "unit test (tests/unit/common/worker_test.cc waits on it)",
    "common/log.cc": "the log facade; its lines are asserted by the tests that capture them "
                     "(tests/unit/nccl-plugin/tenant_test.cc, agent/attach_server_test.cc)",
    "tc/netns.cc": "network namespaces need root: the privileged functional tests "
                   "(tests/functional/tc_executor_test.cc)",
    "tc/netlink.cc": "libnl sockets need a namespace: tests/functional/tc_executor_test.cc",
    "rpc/runtime.cc": "one abseil setting (no deadlock tracking): every policyd test runs with it; "
                      "its effect is measured by bench/fabric's caps push (docs/fabric.md)",
    "rpc/stream_follower.cc": "the reconnecting stream under rpc::PolicyFollower: "
                              "tests/unit/rpc/policy_follower_test.cc drives it over real gRPC",
    "nccl-plugin/glibc_compat.cc": "symbol versions of the shared object: "
                                   "tests/functional/plugin_so_check.sh (plugin_so_linkage)",
    "nccl-plugin/exports.cc": "the exported NCCL ABI: tests/unit/nccl-plugin/abi_test.cc "
                              "drives the plugin through it",
    "nccl-plugin/socket/socket_comm.cc": "one socket comm: "
                                         "tests/unit/nccl-plugin/socket/socket_transport_test.cc",
    "nccl-plugin/oob/envelope.cc": "tests/unit/nccl-plugin/oob/handshake_test.cc and the "
                                   "wire tests parse every message through it",
    "nccl-plugin/oob/tcp.cc": "sockets and marking: oob/handshake_test.cc, and the DSCP on the "
                              "wire in tests/functional/plugin_wire_dscp_test.cc",
    "nccl-plugin/oob/address.cc": "oob/handshake_test.cc (the listener block of the handles)",
    "nccl-plugin/ib/ib_device.cc": "verbs devices: tests/unit/nccl-plugin/ib/ib_transport_test.cc "
                                   "on the fake verbs, and the rxe suite (tests/rxe/)",
    "nccl-plugin/ib/ib_absent.cc": "the stand-in when the verbs headers are missing "
                                   "(TQ_PLUGIN_ONLY): gpu_device_check_rehearsal builds it",
    "nccl-plugin/perf/rank.cc": "tenantqos-perf's ranks: tests/functional/plugin_perf_test.cc",
    "nccl-plugin/perf/sendrecv.cc": "tests/functional/plugin_perf_test.cc, plugin_pacing_test.cc",
    "nccl-plugin/perf/net_plugin.cc": "the plugin loaded as NCCL loads it: every functional "
                                      "test that runs tenantqos-perf",
    "nccl-plugin/perf/exchange.cc": "tests/functional/plugin_perf_test.cc",
    "nccl-plugin/perf/pingpong.cc": "tests/functional/plugin_perf_test.cc",
    "nccl-plugin/perf/allreduce.cc": "tests/functional/plugin_perf_test.cc",
    "nccl-plugin/perf/rendezvous.cc": "tests/functional/plugin_perf_test.cc (--local ranks)",
    "nccl-plugin/perf/report.cc": "tests/functional/plugin_perf_test.cc reads its output",
    "nccl-plugin/perf/launch.cc": "the --local launcher: tests/functional/plugin_perf_test.cc",
    "nccl-plugin/nccl_log.cc": "NCCL's logger: tests/unit/nccl-plugin/abi_test.cc passes one",
    "nccl-plugin/api.cc": "the plugin's life cycle behind the ABI: "
                          "tests/unit/nccl-plugin/abi_test.cc",
    "policy/etcd_store.cc": "needs real etcd members: tests/functional/etcd_store_test.cc "
                            "(label etcd) with the store conformance suite",
    "policy/ctl.cc": "tenantqosctl against a real policyd: tests/functional/policyd_test.cc",
    "policy/wire.cc": "domain <-> wire of policyd's messages: tests/unit/policy/"
                      "grpc_service_test.cc and tests/functional/policyd_test.cc",
    "policy/metrics.cc": "read back through serialize() by tests/unit/policy/service_test.cc "
                         "and policyd_test.cc",
    "policy/file_store.cc": "tests/unit/policy/store_test.cc (the conformance suite, file backend)",
    "policy/yaml_reader.cc": "the schema reader under policy_file_test.cc and "
                             "topology_file_test.cc (every FILE:LINE error goes through it)",
    "agent/reconcile_loop.cc": "the reconcile thread: tests/unit/agent/reconciler_test.cc",
    "agent/tc_executor_applier.cc": "real tc: tests/functional/agent_test.cc (privileged)",
    "agent/agent.cc": "the agent's wiring: tests/functional/agent_test.cc runs the binary",
    "agent/http_server.cc": "/metrics, /healthz, /readyz: tests/unit/agent/metrics_test.cc",
}
LIBRARIES = ("common", "tc", "ib", "proto", "rpc", "fabric", "nccl-plugin", "policy", "agent",
             "webhook")


def check_sources(root):
    bad = []
    seen = set()
    for top in LIBRARIES:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(".cc"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if name == "main.cc" or name.endswith("_main.cc") or "/fuzz/" in rel:
                    continue
                test = f"tests/unit/{rel[:-len('.cc')]}_test.cc"
                mirrored = os.path.exists(os.path.join(root, test))
                if rel in UNMIRRORED:
                    seen.add(rel)
                    if mirrored:
                        bad.append(f"{rel}: has {test} now; drop it from UNMIRRORED "
                                   "(tests/layout/check_layout.py)")
                elif not mirrored:
                    bad.append(f"{rel}: no {test}; write it, or list the file in UNMIRRORED "
                               "(tests/layout/check_layout.py) with the reason and what tests it")
    for rel in sorted(set(UNMIRRORED) - seen):
        if os.path.isdir(os.path.join(root, rel.split("/")[0])):
            bad.append(f"{rel}: listed in UNMIRRORED but no such source")
    return bad


def main():
    modes = {"layering": check_layering, "tests": check_tests, "sources": check_sources}
    if len(sys.argv) != 3 or sys.argv[2] not in modes:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    bad = modes[sys.argv[2]](root)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} violation(s)", file=sys.stderr)
        sys.exit(1)
    print(f"{sys.argv[2]}: ok")


if __name__ == "__main__":
    main()

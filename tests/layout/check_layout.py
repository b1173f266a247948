#!/usr/bin/env python3
"""Checks that only convention held before: the libraries' layering and the tests' layout.

  check_layout.py SOURCE_DIR layering     a library includes only its own headers and those of
                                          the libraries below it (docs/development.md, Layout)
  check_layout.py SOURCE_DIR tests        tests/unit mirrors the source folders and each unit
                                          test's ctest target is named after its path

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


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("layering", "tests"):
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    bad = check_layering(root) if sys.argv[2] == "layering" else check_tests(root)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} violation(s)", file=sys.stderr)
        sys.exit(1)
    print(f"{sys.argv[2]}: ok")


if __name__ == "__main__":
    main()

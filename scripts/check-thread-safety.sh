#!/usr/bin/env bash
# Clang's thread-safety analysis (common/thread_annotations.h) over every translation unit that
# can see an annotation, as errors: clang++-14 -fsyntax-only -Wthread-safety -Werror with each
# unit's own flags from the build's compile_commands.json. Syntax only (no code generated, no
# link), and only the units whose dependencies (ninja's deps log) include
# common/thread_annotations.h: a unit that sees no annotation has nothing to check. Called by
# scripts/test.sh after the main build (which generated the protobuf headers the units include).
#   scripts/check-thread-safety.sh [BUILD_DIR]         (default build)
# Env: TQ_JOBS (default nproc), TQ_CLANGXX (default clang++-14).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${TQ_JOBS:-$(nproc)}
clangxx=${TQ_CLANGXX:-clang++-14}
command -v "$clangxx" >/dev/null || {
  echo "check-thread-safety: $clangxx not found (scripts/install-deps.sh installs clang-14)" >&2
  exit 1
}
[[ -f "$build/compile_commands.json" ]] || {
  echo "check-thread-safety: no $build/compile_commands.json: build the tree first" >&2
  exit 1
}

start=$(date +%s)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
# One shell line per unit: cd to its directory && the clang command.
ninja -C "$build" -t deps | /usr/bin/python3 -c '
import json, os, shlex, sys
build, clangxx, out = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
annotated, obj = set(), None
for line in sys.stdin:
    if line and not line[0].isspace():
        obj = line.split(":", 1)[0] if ": #deps" in line else None
    elif obj and line.strip().endswith("common/thread_annotations.h"):
        annotated.add(os.path.normpath(os.path.join(build, obj)))
units = 0
with open(out, "w") as f:
    for e in json.load(open(os.path.join(build, "compile_commands.json"))):
        args = shlex.split(e["command"]) if "command" in e else e["arguments"]
        o = e.get("output") or (args[args.index("-o") + 1] if "-o" in args else "")
        o = os.path.normpath(os.path.join(e["directory"], o))
        if not e["file"].endswith(".cc") or o not in annotated:
            continue
        if args and args[0].endswith("ccache"):
            args = args[1:]
        keep, skip = [], False
        for a in args[1:]:
            if skip:
                skip = False
            elif a in ("-o", "-MF", "-MT", "-MQ"):
                skip = True
            elif a not in ("-MD", "-MMD", "-c"):
                keep.append(a)
        cmd = [clangxx, "-fsyntax-only", "-Wthread-safety", "-Werror"] + keep
        f.write("cd " + shlex.quote(e["directory"]) + " && " + shlex.join(cmd) + "\n")
        units += 1
print(units)
' "$build" "$clangxx" "$list" >"$list.count"
units=$(cat "$list.count")
rm -f "$list.count"
if [[ "$units" -eq 0 ]]; then
  echo "check-thread-safety: no unit in $build includes common/thread_annotations.h" >&2
  exit 1
fi
echo "check-thread-safety: $units translation units (-j$jobs)"
# Every failing unit prints its diagnostics; the script fails at the end.
if ! xargs -P "$jobs" -d '\n' -n 1 bash -c 'eval "$1"' check-thread-safety <"$list"; then
  echo "check-thread-safety: FAILED (the diagnostics above; docs/development.md \"Threads\")" >&2
  exit 1
fi
echo "check-thread-safety: clean ($(($(date +%s) - start)) s)"

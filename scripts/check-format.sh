#!/usr/bin/env bash
# Format check of the C/C++ lines a change adds or modifies, against .clang-format (Debian's
# clang-format-14, clang-format-diff). Lines the change does not touch are not checked: the
# tree is not reformatted wholesale, each change keeps its own lines formatted.
#
#   scripts/check-format.sh          fails (exit 1) and prints the diff that would fix them
#   scripts/check-format.sh --fix    rewrites those lines in place
#
# The change is everything since the base (committed and not yet committed):
#   TQ_FORMAT_BASE if set (a commit, branch or tag); else the merge-base of HEAD with `main`
#   (or `origin/main`). On main itself that is HEAD, so a clean checkout of main passes.
#   Without git or without either branch the check says so and passes.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
[[ ${1:-} == --fix ]] && fix=1
tool=$(command -v clang-format-diff-14 || command -v clang-format-diff || true)
if [[ -z $tool ]]; then
  echo "check-format: clang-format-diff not found (scripts/install-deps.sh installs clang-format)" >&2
  exit 1
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check-format: not a git checkout; nothing to compare, skipped"
  exit 0
fi
base=${TQ_FORMAT_BASE:-}
if [[ -z $base ]]; then
  for ref in main origin/main; do
    if git rev-parse --verify -q "$ref" >/dev/null; then
      base=$(git merge-base HEAD "$ref")
      break
    fi
  done
fi
if [[ -z $base ]]; then
  echo "check-format: no base (set TQ_FORMAT_BASE, or have a main branch); skipped"
  exit 0
fi

# Generated and vendored-ABI files keep their upstream layout.
paths=('*.cc' '*.h' '*.c' ':(exclude)nccl-plugin/abi/*')
diff_args=(-p1 -regex '.*\.(cc|h|c)$')
if ((fix)); then
  git diff -U0 --no-color "$base" -- "${paths[@]}" | "$tool" "${diff_args[@]}" -i
  echo "check-format: reformatted the changed lines since ${base:0:12}"
  exit 0
fi
out=$(git diff -U0 --no-color "$base" -- "${paths[@]}" | "$tool" "${diff_args[@]}")
if [[ -n $out ]]; then
  echo "$out"
  echo "check-format: the lines above, changed since ${base:0:12}, are not formatted" \
       "(.clang-format); fix them with scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: changed lines since ${base:0:12} are formatted"

#!/bin/sh
# Every deliberate bug in tests/mutations/*.patch still applies to this source tree
# (`git apply --check` against the working tree), so the mutation log in tests/README.md can be
# repeated on today's code: a patch that rots when the code it breaks moves fails here, and is
# regenerated to break the same thing where the code went (tests/README.md, "Mutation log").
# Exit 77 (CTest: skipped) with the reason outside a git checkout (a source tarball) or without git.
# usage: check_mutation_patches.sh SOURCE_DIR
src=${1:?usage: check_mutation_patches.sh SOURCE_DIR}
if ! command -v git >/dev/null 2>&1; then
  echo "SKIPPED: git is not installed (git apply --check needs it)"
  exit 77
fi
top=$(cd "$src" && pwd -P)
# A source tree that is not itself the root of a checkout (a tarball, possibly unpacked inside some
# other repository) has nothing to apply the patches against.
if [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" != "$top" ]; then
  echo "SKIPPED: $src is not the root of a git checkout (the patches are checked with git apply --check)"
  exit 77
fi
n=0
bad=0
for p in "$top"/tests/mutations/*.patch; do
  [ -e "$p" ] || continue
  n=$((n + 1))
  if out=$(git -C "$top" apply --check "$p" 2>&1); then
    echo "applies: tests/mutations/${p##*/}"
  else
    bad=$((bad + 1))
    echo "DOES NOT APPLY: tests/mutations/${p##*/}"
    echo "$out" | sed 's/^/  /'
  fi
done
if [ "$n" -eq 0 ]; then
  echo "FAIL: no patch in $top/tests/mutations"
  exit 1
fi
if [ "$bad" -ne 0 ]; then
  echo "FAIL: $bad of $n mutation patches do not apply to this tree; regenerate them (tests/README.md, Mutation log)"
  exit 1
fi
echo "all $n mutation patches apply"

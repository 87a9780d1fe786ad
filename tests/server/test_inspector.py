"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector``, the TypeScript SDK most clients
use) against a real ``ferrex`` over stdio: it lists the tools, resources, resource templates and
prompts, reads a resource, gets the prompt and calls a tool.

The Inspector is installed by this test with npm into a cache directory (~/.cache/ferrex-tests
or $FERREX_TEST_CACHE, reused between runs). Skipped, visibly, when npm is missing or the npm
registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support.external_clients import cache_dir
from tests.support.harness import ferrex_command

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


@pytest.fixture(scope="module")
def inspector() -> Path:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot run the MCP Inspector")
    prefix = cache_dir() / "inspector-2.12.0"
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), INSPECTOR],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.skip(f"cannot install {INSPECTOR} from the npm registry: {done.stderr[-500:]}")
    return binary


def inspect(
    binary: Path, tmp_path: Path, models_dir: Path, method: str, *extra: str
) -> dict[str, Any]:
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")}
    server_env = {
        "FERREX_HOME": str(tmp_path / "d"),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
    }
    command = [str(binary), "--cli"]
    for key, value in server_env.items():
        command += ["-e", f"{key}={value}"]
    command += [ferrex_command(), "--model-tier", "small", "--method", method, *extra]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, (method, done.stdout[-2000:], done.stderr[-2000:])
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def test_the_inspector_lists_tools_resources_and_prompts(
    inspector: Path, tmp_path: Path, models_dir: Path
) -> None:
    tools = inspect(inspector, tmp_path, models_dir, "tools/list")
    assert sorted(t["name"] for t in tools["tools"]) == [
        "forget",
        "recall",
        "reflect",
        "stats",
        "store",
    ]
    assert all(t.get("outputSchema") and t.get("annotations") for t in tools["tools"])
    resources = inspect(inspector, tmp_path, models_dir, "resources/list")
    assert sorted(r["uri"] for r in resources["resources"]) == [
        "ferrex://namespaces",
        "ferrex://stats",
    ]
    templates = inspect(inspector, tmp_path, models_dir, "resources/templates/list")
    assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == ["ferrex://memory/{id}"]
    prompts = inspect(inspector, tmp_path, models_dir, "prompts/list")
    assert [p["name"] for p in prompts["prompts"]] == ["memory-primer"]

    stored = inspect(
        inspector,
        tmp_path,
        models_dir,
        "tools/call",
        "--tool-name",
        "store",
        "--tool-arg",
        "content=the inspector stored this memory",
    )
    assert stored.get("isError") is not True, stored
    memory_id = stored["structuredContent"]["id"]
    read = inspect(
        inspector, tmp_path, models_dir, "resources/read", "--uri", f"ferrex://memory/{memory_id}"
    )
    memory = json.loads(read["contents"][0]["text"])
    assert memory["content"] == "the inspector stored this memory"
    primer = inspect(
        inspector, tmp_path, models_dir, "prompts/get", "--prompt-name", "memory-primer"
    )
    assert "self-contained" in primer["messages"][0]["content"]["text"]

"""Errors every MCP client reads: two clients from the npm registry, the ones most MCP hosts are
built on, talk to a real ``ferrex`` over stdio.

- a short Node script on ``@modelcontextprotocol/sdk``'s ``Client`` + ``StdioClientTransport``
  (``tests/support/sdk_client.cjs``), and
- the MCP Inspector CLI (``npx @modelcontextprotocol/inspector --cli``).

That SDK validates a tool result's structured content against the tool's output schema even
when ``isError`` is true: an error must carry its code in its text (and no structured content
that the schema would refuse), or the application sees ``MCP error -32602`` instead of
``duplicate``. Both clients are installed by the test into a cache dir
(``npm`` under ``tests/external_clients.cache_dir()``: ``$FERREX_TEST_CACHE`` or
``~/.cache/ferrex-tests``) so reruns are fast; the tests skip,
saying so, only when npm or its registry cannot be reached.
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
from tests.support.paths import SUPPORT

SDK = "@modelcontextprotocol/sdk@1.32.2"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
SCRIPT = SUPPORT / "sdk_client.cjs"
CONTENT = "The release train leaves every second Tuesday from the main branch"


def _installed(directory: Path, spec: str) -> bool:
    name, _, version = spec.rpartition("@")
    manifest = directory / "node_modules" / name / "package.json"
    if not manifest.is_file():
        return False
    return json.loads(manifest.read_text()).get("version") == version


@pytest.fixture(scope="session")
def npm_dir() -> Path:
    """A node_modules with both clients, installed once and reused across runs."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm are not installed: the npm-client compatibility tests need them")
    directory = cache_dir() / "npm"
    directory.mkdir(parents=True, exist_ok=True)
    if all(_installed(directory, spec) for spec in (SDK, INSPECTOR)):
        return directory
    manifest = directory / "package.json"
    if not manifest.exists():
        manifest.write_text('{"name": "ferrex-test-clients", "private": true}\n')
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", SDK, INSPECTOR],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        ping = subprocess.run([npm, "ping"], capture_output=True, text=True, timeout=60)
        if ping.returncode != 0:
            pytest.skip(f"the npm registry cannot be reached: {ping.stderr.strip()[:200]}")
        pytest.fail(f"npm install failed: {done.stderr[-2000:]}")
    return directory


def _env(data_dir: Path, models_dir: Path) -> dict[str, str]:
    return {
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
    }


def _error(text: str) -> dict[str, Any]:
    """The error an agent reads from a tool error's text content."""
    payload = json.loads(text)
    assert set(payload) == {"error"}, payload
    error = payload["error"]
    assert isinstance(error.get("code"), str) and isinstance(error.get("message"), str), error
    return dict(error)


def test_the_typescript_sdk_client_reads_every_error_code(
    npm_dir: Path, tmp_path: Path, models_dir: Path
) -> None:
    spec = {
        "command": ferrex_command(),
        "args": ["--model-tier", "small"],
        "env": _env(tmp_path / "home", models_dir),
        "calls": [
            {"name": "store", "arguments": {"content": CONTENT}},
            {"name": "store", "arguments": {"content": CONTENT}},
            {"name": "recall", "arguments": {"query": "release train", "limit": 0}},
            {"name": "recall", "arguments": {"query": "release train", "limit": 100_000}},
            {"name": "recall", "arguments": {"query": "release train"}},
            {"name": "remember", "arguments": {"content": CONTENT}},
            {"name": "stats", "arguments": {}},
        ],
    }
    done = subprocess.run(
        ["node", str(SCRIPT), str(npm_dir), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines[0] == {"listed": ["store", "recall", "forget", "reflect", "stats"]}
    stored, duplicate, zero, huge, recalled, unknown, stats = lines[1:]
    for answer in lines[1:]:
        assert "exception" not in answer, answer  # e.g. "-32602 ... output schema"
    # Success answers: structured content valid for the output schema (the SDK checked it).
    assert not stored["isError"] and stored["structured"]["status"] == "stored"
    assert (
        not recalled["isError"]
        and recalled["structured"]["results"][0]["id"] == (stored["structured"]["id"])
    )
    assert not stats["isError"] and stats["structured"]["total"] == 1
    # Errors: isError, the code, the message and the fields to act on, in the text.
    for answer in (duplicate, zero, huge, unknown):
        assert answer["isError"] is True, answer
        assert answer["structured"] is None, answer  # no content the output schema refuses
    error = _error(duplicate["text"])
    assert error["code"] == "duplicate" and error["existing_id"] == stored["structured"]["id"]
    assert "supersedes" in error["message"]
    error = _error(zero["text"])
    assert error["code"] == "invalid_params" and error["field"] == "limit"
    error = _error(huge["text"])
    assert error["code"] == "too_large" and error["field"] == "limit"
    error = _error(unknown["text"])
    assert error["code"] == "unknown_tool" and "recall" in error["message"]


# The Inspector CLI exits with this status after printing a tool result that has isError true.
INSPECTOR_TOOL_ERROR = 5


def _inspector(npm_dir: Path, env: dict[str, str], *arguments: str) -> dict[str, Any]:
    command = [str(npm_dir / "node_modules" / ".bin" / "mcp-inspector"), "--cli", ferrex_command()]
    command += ["--model-tier", "small"]
    for key, value in env.items():
        command += ["-e", f"{key}={value}"]
    done = subprocess.run(
        [*command, *arguments], capture_output=True, text=True, timeout=180, env=dict(os.environ)
    )
    assert done.returncode in (0, INSPECTOR_TOOL_ERROR), (done.stdout[-1000:], done.stderr[-2000:])
    answer = dict(json.loads(done.stdout))
    assert (done.returncode == INSPECTOR_TOOL_ERROR) == bool(answer.get("isError")), answer
    return answer


def test_the_inspector_cli_reads_every_error_code(
    npm_dir: Path, tmp_path: Path, models_dir: Path
) -> None:
    env = _env(tmp_path / "home", models_dir)

    def tool(name: str, *pairs: str) -> dict[str, Any]:
        arguments = ["--method", "tools/call", "--tool-name", name]
        if pairs:
            arguments += ["--tool-arg", *pairs]
        return _inspector(npm_dir, env, *arguments)

    stored = tool("store", f"content={CONTENT}")
    assert not stored.get("isError"), stored
    memory_id = stored["structuredContent"]["id"]
    duplicate = tool("store", f"content={CONTENT}")
    assert duplicate.get("isError") is True, duplicate
    assert "structuredContent" not in duplicate, duplicate
    error = _error(duplicate["content"][0]["text"])
    assert error["code"] == "duplicate" and error["existing_id"] == memory_id
    invalid = tool("recall", "query=release train", "limit=0")
    assert invalid.get("isError") is True, invalid
    error = _error(invalid["content"][0]["text"])
    assert error["code"] == "invalid_params" and error["field"] == "limit"
    # An unknown tool never reaches the server from the Inspector: it checks the name against
    # tools/list itself (its own "tool_not_found"); the SDK client test sends one to ferrex.
    listed = _inspector(npm_dir, env, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == ["store", "recall", "forget", "reflect", "stats"]


def test_the_typescript_sdk_client_reads_a_redacted_store_and_a_refusal(
    npm_dir: Path, tmp_path: Path, models_dir: Path
) -> None:
    """A store answer with ``redacted`` is valid for the store tool's output schema, and a
    ``secret_detected`` refusal reads like every other error (issue 37, part 2)."""
    from tests.support.secret_samples import SECRETS

    kind, text, secret = SECRETS[3]
    content = text.format(s=secret)
    for handling in ("redact", "refuse"):
        spec = {
            "command": ferrex_command(),
            "args": ["--model-tier", "small"],
            "env": {
                **_env(tmp_path / handling, models_dir),
                "FERREX_SECRET_HANDLING": handling,
            },
            "calls": [{"name": "store", "arguments": {"content": content}}],
        }
        done = subprocess.run(
            ["node", str(SCRIPT), str(npm_dir), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        answer = json.loads(done.stdout.splitlines()[1])
        assert "exception" not in answer, answer
        assert secret not in done.stdout
        if handling == "redact":
            assert not answer["isError"]
            assert answer["structured"]["redacted"] == [{"kind": kind, "field": "content"}]
        else:
            error = _error(answer["text"])
            assert error["code"] == "secret_detected"
            assert error["redacted"] == [{"kind": kind, "field": "content"}]

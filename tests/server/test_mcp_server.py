"""The MCP surface through the SDK's real stdio client and a ``ferrex`` subprocess."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tests.support.harness import call, ferrex_command, mcp_client, ok
from tests.support.wire import handshake, spawn

from ferrex.server.tools import (
    FORGET_DESCRIPTION,
    RECALL_DESCRIPTION,
    REFLECT_DESCRIPTION,
    STATS_DESCRIPTION,
    STORE_DESCRIPTION,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


EXPECTED_ANNOTATIONS = {
    "store": (False, False, False),
    "recall": (True, False, True),
    "forget": (False, True, True),
    "reflect": (False, False, True),
    "stats": (True, False, True),
}


async def test_lists_exactly_five_tools_with_schemas_and_annotations(
    tmp_path: Path, models_dir: Path
) -> None:
    started = time.monotonic()
    async with mcp_client(tmp_path / "d", models_dir) as client:
        listed = await client.list_tools()
        elapsed = time.monotonic() - started
        assert client.instructions and "stats" in client.instructions
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["forget", "recall", "reflect", "stats", "store"]
    descriptions = {
        "store": STORE_DESCRIPTION,
        "recall": RECALL_DESCRIPTION,
        "forget": FORGET_DESCRIPTION,
        "reflect": REFLECT_DESCRIPTION,
        "stats": STATS_DESCRIPTION,
    }
    for name, tool in tools.items():
        assert tool.description == descriptions[name]
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        annotations = tool.annotations
        assert annotations is not None
        assert (
            annotations.read_only_hint,
            annotations.destructive_hint,
            annotations.idempotent_hint,
        ) == EXPECTED_ANNOTATIONS[name]
    store_props = tools["store"].input_schema["properties"]
    for parameter in (
        "type",
        "content",
        "subject",
        "predicate",
        "object",
        "confidence",
        "source",
        "entities",
        "context",
        "supersedes",
    ):
        assert parameter in store_props
    recall_props = tools["recall"].input_schema["properties"]
    for parameter in (
        "query",
        "types",
        "limit",
        "time_range",
        "entities",
        "include_stale",
        "include_invalidated",
    ):
        assert parameter in recall_props
    assert tools["recall"].input_schema["required"] == ["query"]
    assert tools["forget"].input_schema["required"] == ["ids"]
    # initialize + tools/list never wait for the embedding model.
    assert elapsed < 8.0


async def test_round_trip_for_each_memory_type(tmp_path: Path, models_dir: Path) -> None:
    recent = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with mcp_client(tmp_path / "d", models_dir) as client:
        episodic = await ok(
            client,
            "store",
            {
                "content": "user debugged a deadlock in the connection pool by switching to "
                "tokio::sync::Semaphore | 2026-04-03 | api-server project | outcome: success",
                "context": {"task": "bug-fix", "project": "api-server", "outcome": "success"},
                "timestamp": recent,
                "entities": ["connection-pool", "tokio::sync::Semaphore", "api-server"],
            },
        )
        assert episodic["type"] == "episodic" and episodic["status"] == "stored"
        semantic = await ok(
            client,
            "store",
            {
                "subject": "api-server",
                "predicate": "uses",
                "object": "tokio 1.38",
                "confidence": 0.95,
            },
        )
        assert semantic["type"] == "semantic"
        procedural = await ok(
            client,
            "store",
            {
                "type": "procedural",
                "name": "deploy-to-staging",
                "conditions": ["branch is main", "tests pass"],
                "steps": ["build release", "push to registry", "apply k8s manifest"],
            },
        )
        assert procedural["type"] == "procedural" and procedural["version"] == 1

        question = {"query": "how did we fix the connection pool deadlock?"}
        found = await ok(client, "recall", question)
        assert found["results"][0]["id"] == episodic["id"]
        first = found["results"][0]
        assert first["content"].startswith("user debugged a deadlock")
        # The design's shape, plus the event's own time (given at store, 3 days ago).
        assert set(first) == {"id", "type", "content", "score", "freshness", "timestamp"}
        assert first["timestamp"] == recent
        explained = await ok(client, "recall", {**question, "explain": True})
        details = explained["results"][0]["explain"]
        assert details["entities"] == ["connection-pool", "tokio::sync::Semaphore", "api-server"]
        assert details["context"] == {
            "task": "bug-fix",
            "project": "api-server",
            "outcome": "success",
        }

        facts = await ok(
            client, "recall", {"query": "api-server", "types": ["semantic"], "explain": True}
        )
        assert facts["results"][0]["id"] == semantic["id"]
        assert facts["results"][0]["explain"]["object"] == "tokio 1.38"

        anything = await ok(
            client, "recall", {"query": "the branch is main and the tests pass, how to ship?"}
        )
        assert procedural["id"] in [r["id"] for r in anything["results"][:2]]
        procedure = await ok(
            client,
            "recall",
            {
                "query": "the branch is main and the tests pass, how to ship?",
                "types": ["procedural"],
                "explain": True,
            },
        )
        assert procedure["results"][0]["id"] == procedural["id"]
        assert procedure["results"][0]["version"] == 1
        assert procedure["results"][0]["explain"]["steps"] == [
            "build release",
            "push to registry",
            "apply k8s manifest",
        ]


INVALID_CALLS = [
    ("store", {}, "missing_field"),
    ("store", {"type": "semantic", "subject": "x"}, "missing_field"),
    ("store", {"type": "memoir", "content": "x"}, "unknown_type"),
    ("store", {"content": 42}, "invalid_params"),
    ("store", {"content": "x" * 40_000}, "too_large"),
    ("store", {"content": "fine", "confidence": 3}, "invalid_params"),
    ("store", {"content": "fine", "surprise": True}, "invalid_params"),
    ("store", {"content": "fine", "namespace": "../etc"}, "invalid_namespace"),
    ("store", {"content": "fine", "timestamp": "yesterday"}, "invalid_params"),
    ("recall", {}, "missing_field"),
    ("recall", {"query": "   "}, "empty_query"),
    ("recall", {"query": "x", "limit": 0}, "invalid_params"),
    ("recall", {"query": "x", "limit": 201}, "too_large"),
    ("recall", {"query": "x", "types": ["dream"]}, "unknown_type"),
    ("forget", {"ids": []}, "invalid_params"),
    ("forget", {"ids": "mem_1"}, "invalid_params"),
    ("stats", {"detailed": "yes"}, "invalid_params"),
    ("reflect", {"limit": -1}, "invalid_params"),
]


async def test_invalid_calls_get_stable_error_codes_and_server_stays_up(
    tmp_path: Path, models_dir: Path
) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        for tool, arguments, code in INVALID_CALLS:
            payload = await call(client, tool, arguments)
            assert "error" in payload, (tool, arguments, payload)
            assert payload["error"]["code"] == code, (tool, arguments, payload)
            message = payload["error"]["message"]
            assert (
                "Traceback" not in message
                and str(tmp_path) not in message
                and "/site-packages/" not in message
            )
        unknown = await call(client, "remember", {})
        assert unknown["error"]["code"] == "unknown_tool"
        # Nothing was written by any rejected call, and the server still answers.
        stats = await ok(client, "stats", {"detailed": True})
        assert stats["total"] == 0
        stored = await ok(client, "store", {"content": "the server is still up after bad input"})
        assert stored["status"] == "stored"


async def test_restart_persistence(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "d"
    async with mcp_client(data, models_dir) as client:
        ids = []
        for text in (
            "the team chose PostgreSQL 16 for the billing-service ledger",
            "Lena joined the platform team as on-call lead in October",
            "the dashboard moved its state management from Redux to Zustand",
        ):
            ids.append((await ok(client, "store", {"content": text}))["id"])
        before = await ok(
            client, "recall", {"query": "which database does billing use", "limit": 3}
        )
    async with mcp_client(data, models_dir) as client:
        after = await ok(client, "recall", {"query": "which database does billing use", "limit": 3})
        stats = await ok(client, "stats", {})
    assert [r["id"] for r in after["results"]] == [r["id"] for r in before["results"]]
    assert sorted(r["id"] for r in after["results"]) == sorted(ids)
    assert stats["total"] == 3


async def test_model_pinning_refuses_another_tier(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "d"
    async with mcp_client(data, models_dir) as client:
        await ok(client, "store", {"content": "a memory embedded with all-MiniLM-L6-v2"})
    process = subprocess.run(
        [ferrex_command(), "--model-tier", "best", "--data-dir", str(data)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "FERREX_MODELS_DIR": str(models_dir),
            "FERREX_OFFLINE": "1",
            "HOME": str(tmp_path),
        },
    )
    assert process.returncode != 0
    assert "sentence-transformers/all-MiniLM-L6-v2" in process.stderr
    assert "BAAI/bge-base-en-v1.5" in process.stderr
    assert process.stdout == ""


async def test_a_refused_model_answers_every_tool_call_with_the_reason(
    tmp_path: Path, models_dir: Path
) -> None:
    """Under a real client (stdin held open) the refusal reaches the agent as a tool error with
    a stable code and the fix, instead of a server that neither answers nor exits."""
    data = tmp_path / "d"
    async with mcp_client(data, models_dir) as client:
        await ok(client, "store", {"content": "a memory embedded with all-MiniLM-L6-v2"})
    async with mcp_client(data, models_dir, "--model-tier", "best") as client:
        for tool, arguments in (("recall", {"query": "memory"}), ("stats", {})):
            with anyio.fail_after(60):
                payload = await call(client, tool, arguments)
            error = payload["error"]
            assert error["code"] == "model_mismatch", payload
            assert "sentence-transformers/all-MiniLM-L6-v2" in error["message"]
            assert "BAAI/bge-base-en-v1.5" in error["message"]
    async with mcp_client(data, models_dir) as client:  # nothing was changed by the refusal
        stats = await ok(client, "stats", {})
        assert stats["total"] == 1


def run_with_stdin_open(
    args: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Start ferrex the way an MCP client does (stdin kept open, never closed by us) and wait
    for it to exit on its own: (exit status, stdout, stderr)."""
    process = subprocess.Popen(
        [ferrex_command(), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        status = process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
        assert process.stdin is not None
        process.stdin.close()
    assert process.stdout is not None and process.stderr is not None
    return status, process.stdout.read(), process.stderr.read()


def test_unreachable_qdrant_exits_even_while_the_client_keeps_stdin_open(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    status, out, err = run_with_stdin_open(
        ["--qdrant-url", url, "--data-dir", str(tmp_path / "d")], timeout=30
    )
    assert status == 2
    assert (
        err.strip().splitlines()[-1] == f"error: cannot connect to Qdrant at {url} — is it running?"
    )
    assert out == ""


def test_a_store_that_cannot_open_exits_even_while_the_client_keeps_stdin_open(
    tmp_path: Path, models_dir: Path
) -> None:
    """Not a refusal the agent can act on (a corrupt database): say why on stderr and exit,
    rather than leave the client talking to a server that will never answer."""
    data = tmp_path / "d"
    data.mkdir(mode=0o700)
    (data / "ferrex.db").write_bytes(os.urandom(8192))
    env = {**os.environ, "FERREX_MODELS_DIR": str(models_dir), "FERREX_OFFLINE": "1"}
    status, out, err = run_with_stdin_open(
        ["--model-tier", "small", "--data-dir", str(data)], timeout=60, env=env
    )
    assert status == 2
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        "error: file is not a database"
    ]
    assert out == ""


def test_closed_qdrant_port_fails_fast_with_exact_message(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    process = subprocess.run(
        [ferrex_command(), "--qdrant-url", url, "--data-dir", str(tmp_path / "d")],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    elapsed = time.monotonic() - started
    assert process.returncode != 0
    assert (
        process.stderr.strip().splitlines()[-1]
        == f"error: cannot connect to Qdrant at {url} — is it running?"
    )
    assert elapsed < 3.5
    assert process.stdout == ""


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint"])
def test_clean_shutdown_and_stdout_is_only_protocol(
    tmp_path: Path, models_dir: Path, how: str
) -> None:
    import signal

    data = tmp_path / "d"
    process = spawn(data, models_dir)
    try:
        replies = handshake(process)
        assert [r["id"] for r in replies] == [1, 2, 3]
        assert replies[2]["result"]["structuredContent"]["status"] == "stored"
        if how == "eof":
            assert process.stdin is not None
            process.stdin.close()
        else:
            process.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        code = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0
    assert process.stdout is not None and process.stdout.read().strip() == ""
    assert process.stderr is not None and "ferrex stopped" in process.stderr.read()
    # the lock was released and the write is durable: a new server opens the store at once
    again = spawn(data, models_dir)
    try:
        handshake(again)
    finally:
        again.kill()
        again.wait()


def test_a_model_path_that_cannot_load_is_model_unavailable_without_paths_or_tracebacks(
    tmp_path: Path, models_dir: Path
) -> None:
    """A --model-path that passes the start-up check (model.onnx and tokenizer.json exist) but
    does not load: every tool that needs the model answers ``model_unavailable`` with what to
    do and no filesystem path; the background warm-up logs one line, no traceback."""
    import json

    from tests.support.wire import INITIALIZE

    broken = tmp_path / "broken-model-dir"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not an onnx model")
    (broken / "tokenizer.json").write_text("{}", encoding="utf-8")
    data = tmp_path / "d"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FERREX_HOME": str(data),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
    }
    process = subprocess.Popen(
        [ferrex_command(), "--model-tier", "small", "--model-path", str(broken)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    calls = [("store", {"content": "hello with a broken model dir"}), ("recall", {"query": "x"})]
    try:
        assert process.stdin is not None and process.stdout is not None
        messages: list[dict] = [
            INITIALIZE,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
        for number, (tool, arguments) in enumerate([*calls, ("stats", {})], start=2):
            params = {"name": tool, "arguments": arguments}
            messages.append(
                {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}
            )
        process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        process.stdin.flush()
        replies = {}
        while len(replies) < 4:
            line = process.stdout.readline()
            assert line, "server closed stdout early"
            reply = json.loads(line)
            replies[reply["id"]] = reply
        process.stdin.close()
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    for number in (2, 3):
        result = replies[number]["result"]
        assert result["isError"] is True
        assert "structuredContent" not in result  # the error is in the text every client reads
        error = json.loads(result["content"][0]["text"])["error"]
        assert error["code"] == "model_unavailable", error
        assert "--model-path" in error["message"] and "model.onnx" in error["message"]
        assert str(tmp_path) not in json.dumps(result)
    stats = replies[4]["result"]["structuredContent"]
    assert any("--model-path" in w for w in stats["warnings"]), stats
    assert str(tmp_path) not in json.dumps(stats)
    assert process.stderr is not None
    stderr = process.stderr.read()
    assert "Traceback" not in stderr and "internal error" not in stderr
    assert stderr.count("start-up failed") == 1, stderr


def test_a_server_closed_while_it_warms_up_exits_cleanly(tmp_path: Path, models_dir: Path) -> None:
    """The client goes away during start-up (the warm-up thread usually still loading the
    model in onnxruntime): the server waits for it and exits 0, never aborting in native code.
    A guard: the abort was intermittent, and the small model may load before stdin closes."""
    import json

    from tests.support.wire import INITIALIZE

    for attempt in range(2):
        process = spawn(tmp_path / f"d{attempt}", models_dir)
        try:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(INITIALIZE) + "\n")
            process.stdin.flush()
            assert json.loads(process.stdout.readline())["id"] == 1
            process.stdin.close()  # at once: the model is still loading in the background
            code = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.stderr is not None
        err = process.stderr.read()
        assert code == 0, (code, err[-1500:])
        assert "terminate called" not in err

"""The human CLI: ``ferrex store / recall / forget / stats / reflect`` as real subprocesses.

Proves that each command prints a readable table by default and the tool's own answer with
``--json``; that bad input gets the same error code and message as the MCP tool (exit 1, nothing
changed) and a usage error exits 2; and that while a ferrex server owns the store the commands
go through it (the server keeps the store, what one side stores the other recalls at once).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.support import harness
from tests.support.harness import call, mcp_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def cli(
    data_dir: Path, models_dir: Path, *args: str, check: int | None = 0
) -> subprocess.CompletedProcess[str]:
    """The harness's ``cli`` with the small model and tables 120 columns wide."""
    done: subprocess.CompletedProcess[str] = harness.cli(
        data_dir, models_dir, "--model-tier", "small", *args, check=check, env={"COLUMNS": "120"}
    )
    return done


def as_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


async def test_each_command_prints_a_table_and_the_tools_json(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    event = "the api server deadlock was fixed by switching to a tokio semaphore"
    stored = cli(data, models_dir, "store", event, "--entity", "api-server")
    assert stored.stdout.startswith("stored episodic memory mem_")
    event_id = stored.stdout.split()[3]
    fact = as_json(
        cli(
            data,
            models_dir,
            "store",
            "--subject",
            "api-server",
            "--predicate",
            "uses",
            "--object",
            "tokio 1.38",
            "--json",
        )
    )
    assert fact["status"] == "stored" and fact["type"] == "semantic"
    procedure = as_json(
        cli(
            data,
            models_dir,
            "store",
            "--type",
            "procedural",
            "--name",
            "deploy",
            "--step",
            "build the release",
            "--step",
            "push it to the registry",
            "--json",
        )
    )
    assert procedure["type"] == "procedural" and procedure["version"] == 1

    table = cli(data, models_dir, "recall", "how was the deadlock fixed?", "--limit", "2").stdout
    header, first = table.splitlines()[:2]
    assert header.split() == ["#", "score", "type", "freshness", "age", "date", "id"]
    assert first.split()[0] == "1" and event_id in first and "deadlock" in table
    answer = as_json(cli(data, models_dir, "recall", "how was the deadlock fixed?", "--json"))
    assert answer["results"][0]["id"] == event_id
    assert answer["results"][0]["freshness"]["staleness"] == "fresh"
    facts = as_json(cli(data, models_dir, "recall", "tokio", "--type", "semantic", "--json"))
    assert [r["id"] for r in facts["results"]] == [fact["id"]]
    ids = cli(data, models_dir, "recall", "how do we deploy?", "--limit", "1", "--ids").stdout
    assert ids == f"{procedure['id']}\n"

    stats = as_json(cli(data, models_dir, "stats", "--json"))
    assert stats["total"] == 3
    detailed = cli(data, models_dir, "stats", "--detailed").stdout
    assert "total: 3" in detailed and "episodic: 1" in detailed and "model:" in detailed
    reflect = as_json(cli(data, models_dir, "reflect", "--confirm", fact["id"], "--json"))
    assert fact["id"] in json.dumps(reflect)
    assert "needs_review_total" in cli(data, models_dir, "reflect").stdout

    forgot = cli(data, models_dir, "forget", event_id, "mem_00000000000000000000dead")
    assert forgot.stdout.startswith(f"deleted 1: {event_id}")
    assert "not_found: mem_00000000000000000000dead" in forgot.stdout
    assert as_json(cli(data, models_dir, "stats", "--json"))["total"] == 2


async def test_recall_prints_whole_content_the_date_and_a_procedures_steps(
    tmp_path: Path, models_dir: Path
) -> None:
    """Part 4 of issue 40: content wrapped, never cut; an event's own date beside its
    freshness (an event from last year is not just `fresh 0d`); numbered steps; --brief."""
    data = tmp_path / "d"
    words = " ".join(f"word{i}" for i in range(80))
    long_event = f"the nightly backup failed on the storage node because {words} endmarker"
    cli(data, models_dir, "store", long_event, "--timestamp", "2025-03-04T10:00:00Z")
    steps = ["build the release", "push it to the registry", "roll the canary", "watch errors"]
    args = [a for step in steps for a in ("--step", step)]
    cli(data, models_dir, "store", "--type", "procedural", "--name", "deploy", *args)

    full = cli(data, models_dir, "recall", "why did the nightly backup fail?", "--limit", "1")
    lines = full.stdout.splitlines()
    assert lines[0].split() == ["#", "score", "type", "freshness", "age", "date", "id"]
    head = lines[1].split()
    assert head[2:7] == ["episodic", "fresh", "0d", "2025-03-04", "event"], lines[1]
    body = [line for line in lines[2:] if line.startswith("    ")]
    assert len(body) > 3 and "endmarker" in full.stdout  # wrapped over lines, never cut
    assert all(len(line) <= 120 for line in lines if line.startswith("    "))
    assert " ".join(" ".join(body).split()) == long_event

    procedure = cli(data, models_dir, "recall", "how do we deploy?", "--limit", "1").stdout
    assert "procedural" in procedure and " stored " in procedure.splitlines()[1]
    for number, step in enumerate(steps, start=1):
        assert f"    {number}. {step}" in procedure.splitlines(), procedure

    brief = cli(
        data, models_dir, "recall", "nightly backup", "--type", "episodic", "--brief"
    ).stdout
    rows = brief.rstrip("\n").splitlines()
    assert len(rows) == 2 and "2025-03-04" in rows[1] and "endmarker" not in brief
    assert rows[1].endswith("…") and len(rows[1]) <= 120


async def test_errors_are_the_tools_own_and_exit_1_usage_exits_2(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    cases = [
        ("store", {"content": "   "}, ["store", "   "]),
        ("recall", {"query": "x", "limit": 0}, ["recall", "x", "--limit", "0"]),
        ("store", {"content": "a", "supersedes": "nope"}, ["store", "a", "--supersedes", "nope"]),
        ("stats", {"namespace": "bad ns!"}, ["stats", "--namespace", "bad ns!"]),
    ]
    async with mcp_client(data / "mcp", models_dir) as client:
        expected = [await call(client, tool, arguments) for tool, arguments, _ in cases]
    for (_, _, argv), tool_answer in zip(cases, expected, strict=True):
        assert "error" in tool_answer, tool_answer
        done = cli(data / "cli", models_dir, *argv, "--json", check=1)
        assert as_json(done) == tool_answer
        plain = cli(data / "cli", models_dir, *argv, check=1)
        code = tool_answer["error"]["code"]
        last = plain.stderr.strip().splitlines()[-1]
        assert plain.stdout == "" and last.startswith(f"error [{code}]: "), plain.stderr
        assert "Traceback" not in plain.stderr
    assert as_json(cli(data / "cli", models_dir, "stats", "--json"))["total"] == 0
    typo = cli(tmp_path / "no-such-dir", models_dir, "recall", "anything", "--json", check=1)
    assert as_json(typo)["error"]["code"] == "no_store" and not (tmp_path / "no-such-dir").exists()
    usage = cli(data / "cli", models_dir, "recall", check=2)
    assert "required: query" in usage.stderr
    assert cli(data / "cli", models_dir, "recall", "x", "--limit", "many", check=2).stdout == ""
    assert cli(data / "cli", models_dir, "store", "x", "--context", "{oops", check=2).stderr


async def test_the_cli_goes_through_a_running_server(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "d"
    async with mcp_client(data, models_dir) as client:
        from_agent = await call(client, "store", {"content": "the staging cluster runs k3s 1.30"})
        owner = (data / "ferrex.lock").read_text(encoding="utf-8").strip()

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return cli(data, models_dir, *args)

        found = await anyio.to_thread.run_sync(
            lambda: as_json(run("recall", "what does staging run?", "--json"))
        )
        assert found["results"][0]["id"] == from_agent["id"]
        from_shell = await anyio.to_thread.run_sync(
            lambda: as_json(run("store", "the prod cluster runs k3s 1.29", "--json"))
        )
        assert from_shell["status"] == "stored"
        seen = await call(client, "recall", {"query": "what does prod run?", "limit": 1})
        assert seen["results"][0]["id"] == from_shell["id"]
        # The server still owns the store (the CLI joined it, it did not take it over).
        assert (data / "ferrex.lock").read_text(encoding="utf-8").strip() == owner
        stats = await call(client, "stats", {})
        assert stats["total"] == 2

"""Rough edges found by using ferrex as people do (issue 37, part 4), through the CLI and MCP."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from tests.support.harness import call, cli, cli_env, ferrex_command, mcp_client, server_params
from tests.support.paths import ROOT

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_team_server_on_a_port_in_use_says_so_in_one_line(
    tmp_path: Path, models_dir: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [ferrex_command(), "--model-tier", "small", "serve", "--http", f"127.0.0.1:{port}"],
            env={**cli_env(tmp_path / "d", models_dir), "FERREX_HTTP_TOKEN": "t" * 32},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert errors == [
        f"error: cannot listen on http://127.0.0.1:{port}/mcp: Address already in use "
        "(another server uses it: pick another port)"
    ], done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr
    assert done.stdout == ""


def test_store_dash_reads_standard_input_and_a_duplicate_hint_speaks_cli(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    text = "the nightly backup of the orders database finished in 42 minutes"
    first = subprocess.run(
        [ferrex_command(), "--model-tier", "small", "store", "-", "--json"],
        env=cli_env(data, models_dir),
        input=text + "\n",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert first.returncode == 0, first.stderr
    shown = cli(data, models_dir, "--model-tier", "small", "recall", "nightly backup", "--json")
    assert text in shown.stdout and '"-"' not in shown.stdout
    again = cli(data, models_dir, "--model-tier", "small", "store", text, check=1)
    assert "error [duplicate]: a similar memory already exists: mem_" in again.stderr
    assert "run the same command with --supersedes mem_" in again.stderr
    assert 'supersedes="' not in again.stderr


async def test_an_impossible_date_is_called_one(tmp_path: Path, models_dir: Path) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        refused = await call(client, "recall", {"query": "backups", "as_of": "2026-02-30"})
        message = refused["error"]["message"]
        assert refused["error"]["code"] == "invalid_params"
        assert "'2026-02-30' is an ISO-8601 timestamp of a moment that does not exist" in message
        assert "day is out of range for month" in message
        wrong = await call(client, "recall", {"query": "backups", "as_of": "last tuesday"})
        assert "is not an ISO-8601 timestamp" in wrong["error"]["message"]


async def test_the_example_config_is_safe_to_copy_and_a_set_tier_is_named_by_its_source(
    tmp_path: Path, models_dir: Path
) -> None:
    """ferrex.toml.example copied as the store's config changes no model (model_tier is
    commented out); a model_tier set in the file on a store of another model is refused with
    what set it: the file's key for the agent, the file's path only for the person at the CLI."""
    data = tmp_path / "d"
    cli(data, models_dir, "--model-tier", "small", "store", "the staging db moved to eu-west")
    example = ROOT / "ferrex.toml.example"
    (data / "ferrex.toml").write_text(example.read_text(encoding="utf-8"), encoding="utf-8")
    assert (
        '"the staging db moved to eu-west"'
        in cli(data, models_dir, "recall", "staging db", "--json").stdout
    )
    (data / "ferrex.toml").write_text('model_tier = "best"\n', encoding="utf-8")
    refused = cli(data, models_dir, "recall", "staging db", check=1)
    assert "error [model_mismatch]" in refused.stderr
    assert "(by the model_tier key of ferrex.toml)" in refused.stderr
    assert f"(model_tier is set in {data / 'ferrex.toml'})" in refused.stderr
    params = server_params(data, models_dir)
    params.args = [a for a in params.args if a not in ("--model-tier", "small")]  # the file's
    async with Client(params) as client:
        answer = await call(client, "recall", {"query": "staging db"})
    message = answer["error"]["message"]
    assert answer["error"]["code"] == "model_mismatch"
    assert "the model_tier key of ferrex.toml" in message and str(data) not in message

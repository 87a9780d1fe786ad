"""What a person meets first: ``ferrex config <client>``, ``ferrex models``, the logs and each
command's ``--help``, run as real subprocesses of the installed ``ferrex``.

Proves that ``config`` prints valid JSON naming this ferrex's real path and the flags given (the
API key in the entry's env, never its args), reaches no server, and that ``--write`` merges into
the client's file for this OS keeping every other key and a backup (and refuses a broken file,
changing nothing); that ``models list`` shows tiers, sizes, what is available and the store's
pin; that ``models pull`` says exactly what to run when a model cannot be had; that the tools
answer one clear error naming that command while the MCP handshake answers at once; that the
server logs one start-up line (mode, data dir, model, reranker) on stderr, human-readable by
default, JSON with FERREX_LOG_FORMAT=json, copied to FERREX_LOG_FILE; and that a subcommand's
--help lists its own flags only.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.fake_model_hub import COMMIT, REPO, FakeModelHub
from tests.support.harness import ServiceFactory, call, ferrex_command, logged_client, mcp_client

from ferrex.cli.clients import desktop_config_path
from ferrex.embed.models import prepare_bundled_model
from ferrex.server.calls import run_tool as invoke

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def run(
    *args: str,
    home: Path,
    data_dir: Path | None = None,
    models_dir: Path | None = None,
    cwd: Path | None = None,
    check: int | None = 0,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FERREX_", "XDG_CONFIG_HOME", "APPDATA", "QDRANT_"))
    }
    environment.update({"HOME": str(home), "FERREX_OFFLINE": "1", "FERREX_LOG": "warning"})
    if data_dir is not None:
        environment["FERREX_HOME"] = str(data_dir)
    if models_dir is not None:
        environment["FERREX_MODELS_DIR"] = str(models_dir)
    environment.update(env)
    done = subprocess.run(
        [ferrex_command(), *args],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done


# --------------------------------------------------------------------------- config


def test_config_claude_desktop_prints_this_ferrex_with_the_flags_given(tmp_path: Path) -> None:
    data = tmp_path / "my data"
    done = run(
        "config",
        "claude-desktop",
        "--data-dir",
        str(data),
        "--qdrant-url",
        "http://127.0.0.1:9",  # nothing listens there: config must not try to reach it
        "--qdrant-api-key",
        "s3cret",
        "--model-tier",
        "small",
        home=tmp_path,
    )
    snippet = json.loads(done.stdout)
    entry = snippet["mcpServers"]["ferrex"]
    assert Path(entry["command"]).is_absolute() and os.access(entry["command"], os.X_OK)
    assert Path(entry["command"]).samefile(ferrex_command())
    assert entry["args"] == [
        "--data-dir",
        str(data.absolute()),
        "--model-tier",
        "small",
        "--qdrant-url",
        "http://127.0.0.1:9",
    ]
    assert entry["env"] == {"QDRANT_API_KEY": "s3cret"} and "s3cret" not in entry["args"]
    where = tmp_path / ".config" / "Claude" / "claude_desktop_config.json"
    assert str(where) in done.stderr and not where.exists()  # printed only, nothing written
    assert not data.exists()  # no data dir made either


def test_config_write_merges_into_the_desktop_file_and_keeps_a_backup(tmp_path: Path) -> None:
    config_home = tmp_path / "xdg"
    target = config_home / "Claude" / "claude_desktop_config.json"
    target.parent.mkdir(parents=True)
    before = {
        "mcpServers": {"other": {"command": "/usr/bin/other", "args": []}},
        "globalShortcut": "Ctrl+Space",
    }
    target.write_text(json.dumps(before), encoding="utf-8")
    done = run(
        "config",
        "claude-desktop",
        "--namespace",
        "work",
        "--write",
        home=tmp_path,
        XDG_CONFIG_HOME=str(config_home),
    )
    after = json.loads(target.read_text(encoding="utf-8"))
    assert after["globalShortcut"] == "Ctrl+Space"
    assert after["mcpServers"]["other"] == before["mcpServers"]["other"]
    assert after["mcpServers"]["ferrex"] == json.loads(done.stdout)["mcpServers"]["ferrex"]
    assert after["mcpServers"]["ferrex"]["args"] == ["--namespace", "work"]
    backups = list(target.parent.glob("claude_desktop_config.json.bak-*"))
    assert len(backups) == 1 and json.loads(backups[0].read_text(encoding="utf-8")) == before
    assert str(backups[0]) in done.stderr
    # Writing again replaces ferrex's entry (one entry, not two) and keeps another backup.
    time.sleep(1.1)
    run("config", "claude-desktop", "--write", home=tmp_path, XDG_CONFIG_HOME=str(config_home))
    again = json.loads(target.read_text(encoding="utf-8"))
    assert sorted(again["mcpServers"]) == ["ferrex", "other"]
    assert again["mcpServers"]["ferrex"]["args"] == []
    assert len(list(target.parent.glob("claude_desktop_config.json.bak-*"))) == 2


def test_config_write_refuses_a_broken_file_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "claude_desktop_config.json"
    target.write_text('{"mcpServers": {', encoding="utf-8")
    done = run("config", "claude-desktop", "--write", "--file", str(target), home=tmp_path, check=1)
    assert done.stderr.startswith("error: ") and "not valid JSON" in done.stderr
    assert target.read_text(encoding="utf-8") == '{"mcpServers": {'
    assert not list(tmp_path.glob("*.bak-*"))


def test_config_claude_code_prints_json_and_a_zsh_safe_command(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    done = run(
        "config",
        "claude-code",
        "--namespace",
        "my-project",
        "--model-path",
        str(tmp_path / "m[1]"),
        home=tmp_path,
        cwd=project,
    )
    entry = json.loads(done.stdout)["mcpServers"]["ferrex"]
    assert entry["type"] == "stdio" and entry["env"] == {}
    assert entry["args"] == ["--namespace", "my-project", "--model-path", str(tmp_path / "m[1]")]
    line = next(x for x in done.stderr.splitlines() if "claude mcp add" in x)
    command = line.split("run: ", 1)[1]
    words = shlex.split(command)
    assert words[:5] == ["claude", "mcp", "add", "--scope", "user"]
    assert words[words.index("--") + 1 :] == [entry["command"], *entry["args"]]
    # zsh expands unquoted [ ] * ? (globbing): every such word is quoted.
    assert f"'{tmp_path / 'm[1]'}'" in command
    # --write --scope project writes ./.mcp.json (new file: no backup, private mode)
    run("config", "claude-code", "--scope", "project", "--write", home=tmp_path, cwd=project)
    written = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))
    assert written["mcpServers"]["ferrex"]["command"] == entry["command"]
    assert (project / ".mcp.json").stat().st_mode & 0o077 == 0
    # --write (user scope) merges into ~/.claude.json, keeping what Claude Code keeps there
    (tmp_path / ".claude.json").write_text(json.dumps({"numStartups": 3}), encoding="utf-8")
    run("config", "claude-code", "--write", home=tmp_path, cwd=project)
    user = json.loads((tmp_path / ".claude.json").read_text(encoding="utf-8"))
    assert user["numStartups"] == 3 and "ferrex" in user["mcpServers"]
    assert len(list(tmp_path.glob(".claude.json.bak-*"))) == 1


@pytest.mark.parametrize(
    ("platform", "environ", "expected"),
    [
        (
            "darwin",
            {"HOME": "/Users/ann"},
            "/Users/ann/Library/Application Support/Claude/claude_desktop_config.json",
        ),
        ("linux", {"HOME": "/home/ann"}, "/home/ann/.config/Claude/claude_desktop_config.json"),
        (
            "linux",
            {"HOME": "/home/ann", "XDG_CONFIG_HOME": "/cfg"},
            "/cfg/Claude/claude_desktop_config.json",
        ),
        (
            "win32",
            {"HOME": "C:/Users/ann", "APPDATA": "C:/Users/ann/AppData/Roaming"},
            "C:/Users/ann/AppData/Roaming/Claude/claude_desktop_config.json",
        ),
    ],
)
def test_claude_desktop_config_location_per_os(
    platform: str, environ: dict[str, str], expected: str
) -> None:
    assert desktop_config_path(platform, environ) == Path(expected)


# --------------------------------------------------------------------------- models


def test_models_list_shows_tiers_sizes_availability_and_the_pin(
    tmp_path: Path, models_dir: Path, make_service: ServiceFactory
) -> None:
    data = tmp_path / "store"
    fresh = json.loads(
        run("models", "list", "--json", home=tmp_path, data_dir=data, models_dir=models_dir).stdout
    )
    embeddings = {m["tier"]: m for m in fresh["models"] if m["kind"] == "embedding"}
    rerankers = {m["tier"]: m for m in fresh["models"] if m["kind"] == "reranker"}
    assert sorted(embeddings) == ["best", "best-large", "mid", "multilingual", "small"]
    assert "default" in rerankers and rerankers["default"]["model"] == "BAAI/bge-reranker-base"
    assert embeddings["best"]["configured"] and embeddings["best"]["dimension"] == 768
    assert embeddings["best"]["size_mb"] == 210 and not embeddings["best"]["cached"]
    assert embeddings["small"]["bundled"] is True  # the offline extra is installed here
    assert fresh["pinned"] is None and not any(m["pinned"] for m in fresh["models"])
    service = make_service(data)
    invoke(service, "store", {"content": "the first memory pins the model"})
    service.close()
    pinned = json.loads(
        run("models", "list", "--json", home=tmp_path, data_dir=data, models_dir=models_dir).stdout
    )
    assert pinned["pinned"]["embedding_model"] == MINILM
    assert [m["tier"] for m in pinned["models"] if m["pinned"]] == ["small"]
    table = run("models", "list", home=tmp_path, data_dir=data, models_dir=models_dir).stdout
    assert "bundled (offline extra)" in table and "pinned to " + MINILM in table
    assert "210 MB" in table and "not downloaded" in table


def test_models_pull_says_exactly_what_to_run_when_it_cannot_download(
    tmp_path: Path, models_dir: Path
) -> None:
    done = run("models", "pull", "--tier", "mid", home=tmp_path, models_dir=models_dir, check=1)
    assert "error: cannot download the embedding model BAAI/bge-small-en-v1.5" in done.stderr
    assert "`ferrex models pull --tier mid`" in done.stderr and "--model-path DIR" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    reranker = run(
        "models", "pull", "--reranker", "tiny", home=tmp_path, models_dir=models_dir, check=1
    )
    assert "`ferrex models pull --reranker tiny`" in reranker.stderr
    bundled = run("models", "pull", "--tier", "small", home=tmp_path, models_dir=models_dir)
    assert "offline extra" in bundled.stderr


async def test_a_model_that_cannot_be_had_is_one_clear_error_naming_the_command(
    tmp_path: Path, models_dir: Path
) -> None:
    started = time.monotonic()
    async with mcp_client(
        tmp_path / "d", models_dir, "--model-tier", "mid", FERREX_OFFLINE_FALLBACK="false"
    ) as client:
        tools = await client.list_tools()
        handshake = time.monotonic() - started
        answer = await call(client, "store", {"content": "anything at all"})
        stats = await call(client, "stats", {})
    assert len(tools.tools) == 5 and handshake < 8.0
    assert answer["error"]["code"] == "model_unavailable"
    assert "`ferrex models pull --tier mid`" in answer["error"]["message"]
    assert str(tmp_path) not in answer["error"]["message"]  # no paths reach the agent
    assert "error" in stats or any("models pull" in w for w in stats.get("warnings", []))


# --------------------------------------------------------------------------- logs


def serve_until_eof(
    tmp_path: Path, models_dir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """Start the MCP server with stdin at end of input: it logs its start-up and leaves."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FERREX_")}
    environment.update(
        {
            "FERREX_HOME": str(tmp_path / "d"),
            "FERREX_MODELS_DIR": str(models_dir),
            "FERREX_OFFLINE": "1",
            "FERREX_LOG": "info",
            **env,
        }
    )
    return subprocess.run(
        [ferrex_command(), "--model-tier", "small"],
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_logs_are_readable_on_stderr_with_one_start_up_line(
    tmp_path: Path, models_dir: Path
) -> None:
    done = serve_until_eof(tmp_path, models_dir)
    assert done.stdout == ""  # stdout is the protocol
    starts = [line for line in done.stderr.splitlines() if "ferrex starting" in line]
    assert len(starts) == 1, done.stderr
    line = starts[0]
    assert not line.lstrip().startswith("{")
    assert "mode=embedded" in line and f"data_dir={tmp_path / 'd'}" in line
    assert MINILM in line and "reranker=" in line and "unavailable offline" in line


def test_json_logs_and_a_log_file(tmp_path: Path, models_dir: Path) -> None:
    log_file = tmp_path / "logs" / "ferrex.log"
    done = serve_until_eof(
        tmp_path, models_dir, FERREX_LOG_FORMAT="json", FERREX_LOG_FILE=str(log_file)
    )
    assert "unknown environment variable" not in done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    start = [entry for entry in lines if entry["event"] == "ferrex starting"]
    assert len(start) == 1
    assert start[0]["mode"] == "embedded" and start[0]["data_dir"] == str(tmp_path / "d")
    assert start[0]["level"] == "info" and "timestamp" in start[0]
    assert MINILM in start[0]["model"] and "reranker" in start[0]
    written = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines()]
    assert [e["event"] for e in written] == [e["event"] for e in lines]


# --------------------------------------------------------------------------- help


def help_text(*command: str, home: Path) -> str:
    return run(*command, "--help", home=home).stdout


def flags(text: str) -> set[str]:
    return {word.strip("[],") for word in text.split() if word.startswith(("--", "[--"))}


def test_each_subcommand_help_shows_its_own_flags(tmp_path: Path) -> None:
    server_only = {"--threads", "--staleness-config", "--reranker-tier", "--no-rerank"}
    everything = flags(help_text(home=tmp_path))
    assert server_only <= everything and "--qdrant-url" in everything
    models_list = flags(help_text("models", "list", home=tmp_path))
    assert models_list == {"--help", "--data-dir", "--config", "--log-level", "--json"}
    pull = flags(help_text("models", "pull", home=tmp_path))
    assert {"--tier", "--reranker"} <= pull and not pull & (server_only | {"--qdrant-url"})
    store = flags(help_text("store", home=tmp_path))
    assert {"--type", "--entity", "--subject", "--predicate", "--object", "--json"} <= store
    assert not store & server_only and "--limit" not in store
    recall = flags(help_text("recall", home=tmp_path))
    assert {"--limit", "--type", "--json", "--reranker-tier"} <= recall
    assert "--subject" not in recall and "--threads" not in recall
    desktop = flags(help_text("config", "claude-desktop", home=tmp_path))
    assert {"--write", "--name", "--file", "--qdrant-url"} <= desktop and "--scope" not in desktop
    assert "--scope" in flags(help_text("config", "claude-code", home=tmp_path))


def test_top_level_flags_still_apply_before_a_command(tmp_path: Path, models_dir: Path) -> None:
    done = run(
        "--data-dir",
        str(tmp_path / "d"),
        "models",
        "list",
        "--json",
        home=tmp_path,
        models_dir=models_dir,
    )
    payload: dict[str, Any] = json.loads(done.stdout)
    assert payload["cache"] == str(models_dir)


# --------------------------------------------------------------------------- first run


def test_models_pull_downloads_with_a_progress_bar(tmp_path: Path, models_dir: Path) -> None:
    cache = tmp_path / "cache"
    with FakeModelHub(prepare_bundled_model(models_dir)) as hub:
        done = run(
            "models",
            "pull",
            "--tier",
            "mid",
            home=tmp_path,
            models_dir=cache,
            FERREX_OFFLINE="0",
            HF_ENDPOINT=hub.url,
        )
    assert f"GET /{REPO}/resolve/{COMMIT}/model_optimized.onnx" in hub.requests
    progress = [line for line in done.stderr.splitlines() if "%|" in line or "complete" in line]
    assert progress and any("100%" in line or "complete" in line for line in progress)
    assert "embedding model BAAI/bge-small-en-v1.5 is ready" in done.stderr
    listed = json.loads(run("models", "list", "--json", home=tmp_path, models_dir=cache).stdout)
    assert [m["tier"] for m in listed["models"] if m["cached"]] == ["mid"]
    again = run("models", "pull", "--tier", "mid", home=tmp_path, models_dir=cache)
    assert "already in the cache" in again.stderr  # offline now: nothing to fetch


async def test_first_run_downloads_with_progress_while_the_handshake_answers(
    tmp_path: Path, models_dir: Path
) -> None:
    log = tmp_path / "server.log"
    with FakeModelHub(prepare_bundled_model(models_dir)) as hub:
        started = time.monotonic()
        async with logged_client(
            tmp_path / "d",
            tmp_path / "empty-cache",
            log,
            "--model-tier",
            "mid",
            "--no-rerank",
            FERREX_OFFLINE="0",
            FERREX_OFFLINE_FALLBACK="false",
            FERREX_LOG="info",
            HF_ENDPOINT=hub.url,
        ) as client:
            listed = await client.list_tools()
            handshake = time.monotonic() - started
            stored = await call(client, "store", {"content": "the first memory after a download"})
            found = await call(client, "recall", {"query": "first memory"})
    assert len(listed.tools) == 5 and handshake < 8.0
    assert stored.get("status") == "stored", stored
    assert found["results"][0]["id"] == stored["id"]
    text = log.read_text(encoding="utf-8")
    assert "downloading embedding model" in text
    assert any(("%|" in line or "complete" in line) for line in text.splitlines()), text[-2000:]
    assert "embedding model loaded" in text and "BAAI/bge-small-en-v1.5" in text

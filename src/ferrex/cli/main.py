"""``ferrex [COMMAND]``: read the flags and settings, run the command (serving MCP by default)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ferrex.cli import operator
from ferrex.cli.common import CREATING_COMMANDS, TOOL_COMMANDS, CliError, fail, require_store
from ferrex.cli.parser import build_parser
from ferrex.config import ConfigError, Settings, load_settings, model_path_problem
from ferrex.logs import configure


def _settings(args: argparse.Namespace) -> tuple[Settings, bool]:
    cli: dict[str, Any] = {
        "data_dir": getattr(args, "data_dir", None),
        "namespace": getattr(args, "namespace", None),
        "model_tier": getattr(args, "model_tier", None),
        "model_path": getattr(args, "model_path", None),
        "reranker_tier": getattr(args, "reranker_tier", None),
        "reranker_path": getattr(args, "reranker_path", None),
        "rerank": False if getattr(args, "no_rerank", None) else None,
        "qdrant_url": getattr(args, "qdrant_url", None),
        "qdrant_api_key": getattr(args, "qdrant_api_key", None),
        "qdrant_bin": getattr(args, "qdrant_bin", None),
        "log_level": getattr(args, "log_level", None),
        "offline": True if getattr(args, "offline", None) else None,
        "threads": getattr(args, "threads", None),
    }
    if getattr(args, "command", None) in TOOL_COMMANDS:
        cli["namespace"] = None  # the tool call's own argument: the tool validates it
    if getattr(args, "command", None) == "models" and getattr(args, "offline", None):
        cli["offline"] = True
    config = getattr(args, "config", None)
    staleness = getattr(args, "staleness_config", None)
    settings, warnings = load_settings(
        cli=cli,
        config_path=Path(config).expanduser() if config else None,
        staleness_path=Path(staleness).expanduser() if staleness else None,
    )
    level = settings.log_level
    explicit_level = "log_level" in settings.model_fields_set
    if getattr(args, "command", None) in TOOL_COMMANDS and not explicit_level:
        level = "warning"  # a person at a shell: warnings (a model fallback), not progress
    configure(level, settings.log_format, settings.log_file)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return settings, "model_tier" in settings.model_fields_set


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings, explicit_tier = _settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = args.command or "serve"
    if command == "config":  # writes nothing of ferrex's and reaches no server
        return _client_config(args)
    if command == "models":
        from ferrex.cli import models

        if args.models_command == "list":
            return models.list_models(settings, as_json=args.json)
        return models.pull(settings, args.tier, args.reranker)
    refused = _refuse_to_start(command, settings)
    if refused is not None:
        return refused
    if command in TOOL_COMMANDS:
        from ferrex.cli.tools import run_tool_command

        return run_tool_command(command, args, settings, explicit_tier)
    try:
        if command not in CREATING_COMMANDS and command != "doctor":
            require_store(settings)
        handler = _operator_commands(args, settings, explicit_tier).get(command)
        if handler is not None:
            return handler()
    except CliError as exc:
        return fail(exc.message)
    parser.error(f"unknown command {command}")
    return 2


def _refuse_to_start(command: str, settings: Settings) -> int | None:
    """The exit status of a start-up check that fails (a data dir that cannot be made, an
    unreachable Qdrant server, a bad --model-path); None when all pass."""
    from ferrex.datadir import DataDirError, ensure_data_dir

    try:
        # Only the server and `init` create a store: an operator command on a mistyped
        # --data-dir says so instead of creating (and reporting on) an empty one.
        if command in CREATING_COMMANDS or settings.data_dir.expanduser().exists():
            ensure_data_dir(settings.data_dir)
    except DataDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings.qdrant_url:
        from ferrex.store.qdrant import QdrantUnreachableError, connect

        try:
            connect(settings.qdrant_url, settings.qdrant_api_key).close()
        except QdrantUnreachableError as exc:
            print(str(exc), file=sys.stderr, flush=True)
            return 2
    problem = model_path_problem(settings.model_path)
    if problem and command != "doctor":  # doctor reports it as a failed check instead
        return fail(problem)
    return None


def _operator_commands(
    args: argparse.Namespace, settings: Settings, explicit_tier: bool
) -> dict[str, Callable[[], int]]:
    """The commands that are not tools, by name (each called with the parsed flags)."""

    def serve() -> int:
        if getattr(args, "http", None):
            return operator.serve_http(settings, explicit_tier, args.http)
        return operator.serve_stdio(settings, explicit_tier)

    def ui() -> int:
        from ferrex.cli.ui import run_ui_command

        return run_ui_command(settings, explicit_tier, args)

    return {
        "serve": serve,
        "ui": ui,
        "migrate-index": lambda: operator.migrate_index(settings, explicit_tier, args.target),
        "init": lambda: operator.init_store(settings, explicit_tier),
        "doctor": lambda: operator.doctor(
            settings, explicit_tier, as_json=args.json, repair=args.repair, full=args.full
        ),
        "rebuild-index": lambda: operator.rebuild_index(settings, explicit_tier),
        "export": lambda: operator.export(
            settings, explicit_tier, args.output, getattr(args, "namespace", None)
        ),
        "import": lambda: operator.import_file(settings, explicit_tier, args.file, args.batch),
    }


# Server flags that ``ferrex config`` copies into a client's entry: (attribute, flag, is_path).
_ENTRY_FLAGS = (
    ("data_dir", "--data-dir", True),
    ("config", "--config", True),
    ("namespace", "--namespace", False),
    ("model_tier", "--model-tier", False),
    ("model_path", "--model-path", True),
    ("reranker_tier", "--reranker-tier", False),
    ("reranker_path", "--reranker-path", True),
    ("no_rerank", "--no-rerank", False),
    ("qdrant_url", "--qdrant-url", False),
    ("qdrant_bin", "--qdrant-bin", True),
    ("staleness_config", "--staleness-config", True),
    ("threads", "--threads", False),
    ("log_level", "--log-level", False),
    ("offline", "--offline", False),
)


def _client_config(args: argparse.Namespace) -> int:
    from ferrex.cli.clients import run_config

    serve_args: list[str] = []
    for attribute, flag, is_path in _ENTRY_FLAGS:
        value = getattr(args, attribute, None)
        if value is None or value is False:
            continue
        if value is True:
            serve_args.append(flag)
            continue
        text = str(Path(str(value)).expanduser().absolute()) if is_path else str(value)
        serve_args += [flag, text]
    env: dict[str, str] = {}
    api_key = getattr(args, "qdrant_api_key", None)
    if api_key:
        env["QDRANT_API_KEY"] = api_key  # a secret: in the entry's env, never in its args
    return run_config(
        args.client,
        serve_args,
        env,
        name=args.name,
        write=args.write,
        scope=getattr(args, "scope", "user"),
        file=args.file,
    )

"""The ``ferrex`` command: the MCP server (default) and the operator commands.

ferrex [options]                      start the MCP server on stdio
ferrex doctor [--json] [--repair]     compare SQLite and the vector index
ferrex rebuild-index [--model-tier X] recreate the vector index from SQLite
ferrex export [--namespace NS]        JSON lines on stdout (or -o FILE)
ferrex import FILE                    restore an export
ferrex serve --http HOST:PORT         the team server: MCP streamable HTTP at /mcp
ferrex migrate-index --to MODE        rebuild the index in the sidecar or the embedded engine
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import structlog

from ferrex import __version__
from ferrex.config import ConfigError, Settings, load_settings, model_path_problem
from ferrex.logs import configure

IMPORT_BATCH = 500  # memories per import call (each call is one engine request)


class CliError(Exception):
    """An operator command failed: ``main`` prints ``error: <message>`` and exits with 2."""

    def __init__(
        self, message: str, code: str = "error", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        # A tool's refusal as the tool answers it ({"code", "message", ...}); else None.
        self.details = details


_TIERS = ["small", "mid", "best", "best-large", "multilingual"]
_RERANKERS = ["default", "multilingual", "v2-m3", "v2-m3-int8", "turbo", "tiny", "ms-marco"]
_TYPES = ["episodic", "semantic", "procedural"]

# Flag groups: each command shows (in its --help) only the groups it uses. The top-level
# parser (``ferrex [flags]`` serves MCP) has them all, so ``ferrex --data-dir X doctor`` works.
FlagAdder = Callable[[argparse._ActionsContainer, Any], None]


def _store_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--data-dir",
        default=default,
        metavar="DIR",
        help="data directory (default ~/.ferrex; env FERREX_HOME)",
    )
    group.add_argument(
        "--config",
        default=default,
        metavar="FILE",
        help="ferrex.toml to read (default <data dir>/ferrex.toml)",
    )


def _namespace_flag(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--namespace",
        default=default,
        help="namespace for calls that name none (default 'default')",
    )


def _model_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--model-tier", default=default, choices=_TIERS, help="embedding model tier (default best)"
    )
    group.add_argument(
        "--model-path",
        default=default,
        metavar="DIR",
        help="load the tier's model from this local directory",
    )
    group.add_argument(
        "--offline", action="store_true", default=default, help="never try to download models"
    )


def _rerank_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--reranker-tier",
        default=default,
        choices=_RERANKERS,
        help="cross-encoder tier (default 'default')",
    )
    group.add_argument(
        "--reranker-path", default=default, metavar="DIR", help="local ONNX cross-encoder directory"
    )
    group.add_argument(
        "--no-rerank", action="store_true", default=default, help="disable cross-encoder reranking"
    )


def _qdrant_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--qdrant-url", default=default, metavar="URL", help="use an external Qdrant server"
    )
    group.add_argument(
        "--qdrant-api-key",
        default=default,
        metavar="KEY",
        help="API key for --qdrant-url (env QDRANT_API_KEY)",
    )
    group.add_argument(
        "--qdrant-bin",
        default=default,
        metavar="FILE",
        help="qdrant binary for sidecar mode (env FERREX_QDRANT_BIN; else PATH, "
        "<data dir>/bin/qdrant)",
    )


def _tuning_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--staleness-config",
        default=default,
        metavar="FILE",
        help="TOML file with [staleness] thresholds",
    )
    group.add_argument(
        "--threads", default=default, type=int, metavar="N", help="ONNX runtime threads"
    )


def _log_flags(group: argparse._ActionsContainer, default: Any) -> None:
    group.add_argument(
        "--log-level",
        default=default,
        choices=["debug", "info", "warning", "error"],
        help="stderr log level",
    )


SERVE_FLAGS: tuple[FlagAdder, ...] = (
    _store_flags,
    _namespace_flag,
    _model_flags,
    _rerank_flags,
    _qdrant_flags,
    _tuning_flags,
    _log_flags,
)
STORE_FLAGS: tuple[FlagAdder, ...] = (_store_flags, _model_flags, _qdrant_flags, _log_flags)


def _command(
    commands: Any,
    name: str,
    flags: Sequence[FlagAdder],
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=description or help, allow_abbrev=False
    )
    for add in flags:
        add(parser, argparse.SUPPRESS)
    return parser


def _add_tool_commands(commands: Any) -> None:
    """The human CLI: one command per MCP tool, same validation and answers (``--json``)."""
    tool_flags = (*STORE_FLAGS, _namespace_flag)

    def json_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="print the tool's own JSON answer (for scripts)"
        )

    store = _command(
        commands,
        "store",
        tool_flags,
        "store a memory (as the store tool)",
        "Store a memory, as the store tool does: an event (content), a fact (--subject "
        "--predicate --object) or a procedure (--name --step ...). Exit status 0 stored, "
        "1 refused (duplicate, bad input: the tool's error code), 2 usage.",
    )
    store.add_argument("content", nargs="?", help="the memory text (events; optional for facts)")
    store.add_argument("--type", choices=_TYPES, help="memory type (auto-detected when omitted)")
    store.add_argument(
        "--entity", action="append", dest="entities", metavar="NAME", help="entity (repeatable)"
    )
    store.add_argument("--subject", help="fact subject")
    store.add_argument("--predicate", help="fact predicate")
    store.add_argument("--object", dest="object_", metavar="OBJECT", help="fact object")
    store.add_argument("--confidence", type=float, help="fact confidence in [0, 1]")
    store.add_argument("--name", help="procedure name")
    store.add_argument(
        "--step", action="append", dest="steps", metavar="TEXT", help="procedure step (repeatable)"
    )
    store.add_argument(
        "--condition",
        action="append",
        dest="conditions",
        metavar="TEXT",
        help="procedure condition (repeatable)",
    )
    store.add_argument("--timestamp", metavar="ISO", help="when the event happened (ISO 8601)")
    store.add_argument("--t-valid", metavar="ISO", help="when the fact became true")
    store.add_argument("--t-invalid", metavar="ISO", help="when the fact stopped being true")
    store.add_argument("--supersedes", metavar="ID", help="id of the memory this one replaces")
    store.add_argument("--source", help="where this came from (memory:<id> cites a memory)")
    store.add_argument("--context", metavar="JSON", help="context object as JSON")
    store.add_argument("--pinned", action="store_true", default=None, help="never evict it")
    store.add_argument(
        "--multi-valued", action="store_true", default=None, help="the predicate has many values"
    )
    json_flag(store)

    recall = _command(
        commands,
        "recall",
        (*tool_flags, _rerank_flags),
        "search memory (as the recall tool)",
        "Search memory, as the recall tool does. Exit status 0 answered (even with no "
        "results), 1 refused, 2 usage.",
    )
    recall.add_argument("query", help="what to look for")
    recall.add_argument("--limit", type=int, metavar="N", help="at most N results (default 5)")
    recall.add_argument(
        "--type", action="append", dest="types", choices=_TYPES, help="memory type (repeatable)"
    )
    recall.add_argument(
        "--entity", action="append", dest="entities", metavar="NAME", help="entity (repeatable)"
    )
    recall.add_argument("--after", metavar="ISO", help="time range start")
    recall.add_argument("--before", metavar="ISO", help="time range end")
    recall.add_argument("--as-of", metavar="ISO", help="what was true at this time")
    recall.add_argument(
        "--include-stale", action="store_true", default=None, help="also return stale memories"
    )
    recall.add_argument(
        "--include-invalidated",
        action="store_true",
        default=None,
        help="also return superseded facts",
    )
    recall.add_argument("--max-tokens", type=int, metavar="N", help="token budget for results")
    recall.add_argument("--explain", action="store_true", default=None, help="show the ranks")
    recall.add_argument(
        "--ids",
        action="store_true",
        dest="ids_only",
        help="print only the result ids, one a line (for scripts)",
    )
    recall.add_argument(
        "--brief", action="store_true", help="one line per result (content cut to the line)"
    )
    json_flag(recall)

    forget = _command(
        commands,
        "forget",
        tool_flags,
        "delete memories by id (as the forget tool)",
        "Delete memories by id, as the forget tool does. Unknown ids are reported, not fatal.",
    )
    forget.add_argument("ids", nargs="+", metavar="ID", help="memory id")
    forget.add_argument(
        "--cascade",
        action="store_true",
        default=None,
        help="also remove entities only these memories referenced",
    )
    json_flag(forget)

    stats = _command(commands, "stats", tool_flags, "memory overview (as the stats tool)")
    stats.add_argument(
        "--detailed", action="store_true", default=None, help="counts, staleness, storage, models"
    )
    json_flag(stats)

    reflect = _command(
        commands, "reflect", tool_flags, "memory health review (as the reflect tool)"
    )
    reflect.add_argument(
        "--confirm", action="append", dest="confirm_ids", metavar="ID", help="mark as reviewed"
    )
    reflect.add_argument("--pin", action="append", dest="pin_ids", metavar="ID", help="pin")
    reflect.add_argument("--unpin", action="append", dest="unpin_ids", metavar="ID", help="unpin")
    json_flag(reflect)


def _add_model_commands(commands: Any) -> None:
    models = commands.add_parser(
        "models",
        help="list and download embedding and reranker models",
        description="List the model tiers (sizes, which are cached, which the store is pinned "
        "to) and download them ahead of time.",
    )
    sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    listing = _command(sub, "list", (_store_flags, _log_flags), "tiers, sizes, cache and pin")
    listing.add_argument("--json", action="store_true", help="machine-readable list")
    pull = _command(
        sub,
        "pull",
        (_store_flags, _log_flags),
        "download models into the cache (progress on stderr)",
        "Download models into the model cache with a progress bar on stderr. Without "
        "--tier or --reranker: the configured embedding model and reranker.",
    )
    pull.add_argument("--tier", choices=_TIERS, help="embedding model tier to download")
    pull.add_argument("--reranker", choices=_RERANKERS, help="reranker tier to download")
    pull.add_argument(
        "--offline", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def _add_client_commands(commands: Any) -> None:
    config = commands.add_parser(
        "config",
        help="print (or --write) the MCP client entry that starts this ferrex",
        description="Print the entry that starts this ferrex (its real path, the flags given "
        "here) for an MCP client; --write merges it into the client's config file, keeping "
        "a backup.",
    )
    sub = config.add_subparsers(dest="client", metavar="CLIENT", required=True)
    for client, where in (
        ("claude-desktop", "claude_desktop_config.json for this OS"),
        ("claude-code", "~/.claude.json (--scope user) or ./.mcp.json (--scope project)"),
    ):
        parser = _command(
            sub,
            client,
            (
                _store_flags,
                _namespace_flag,
                _model_flags,
                _rerank_flags,
                _qdrant_flags,
                _tuning_flags,
                _log_flags,
            ),
            f"the {client} entry (server flags given here go into it)",
            f"Print the {client} entry for this ferrex. Server flags given here "
            f"(--data-dir, --qdrant-url, ...) go into the entry. --write merges it into {where}.",
        )
        parser.add_argument(
            "--write", action="store_true", help="merge into the client's config (with a backup)"
        )
        parser.add_argument("--name", default="ferrex", help="server name (default ferrex)")
        parser.add_argument("--file", metavar="FILE", help="config file to write instead")
        if client == "claude-code":
            parser.add_argument(
                "--scope", choices=["user", "project"], default="user", help="(default user)"
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferrex",
        allow_abbrev=False,  # a command's --reranker is not the server's --reranker-tier
        description=(
            "Local-first long-term memory MCP server (stdio). Without a command, serves MCP."
        ),
    )
    parser.add_argument("--version", action="version", version=f"ferrex {__version__}")
    for add in SERVE_FLAGS:
        add(parser, None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = _command(commands, "serve", SERVE_FLAGS, "start the MCP server on stdio (default)")
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP streamable HTTP at /mcp instead of stdio (host 127.0.0.1 by default; "
        "bearer token FERREX_HTTP_TOKEN, or one generated into the data dir)",
    )
    migrate = _command(
        commands,
        "migrate-index",
        STORE_FLAGS,
        "move the vector index between the embedded engine and the Qdrant sidecar",
        "Rebuild this store's vector index from SQLite in the target (the managed Qdrant "
        "sidecar or the embedded engine) and switch the store to it.",
    )
    migrate.add_argument("--to", required=True, choices=["sidecar", "embedded"], dest="target")
    _command(
        commands,
        "init",
        STORE_FLAGS,
        "create a store in the data dir (operator commands never create one)",
    )
    _add_tool_commands(commands)
    from ferrex.commands.ui import add_ui_command

    add_ui_command(commands, _command, (*STORE_FLAGS, _namespace_flag, _rerank_flags))
    doctor = _command(
        commands,
        "doctor",
        (*STORE_FLAGS, _rerank_flags),
        "check SQLite and the vector index agree",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable report")
    doctor.add_argument(
        "--repair", action="store_true", help="fix orphans both ways and replay the journal"
    )
    _command(commands, "rebuild-index", STORE_FLAGS, "recreate the vector index from SQLite")
    export = _command(
        commands,
        "export",
        (*STORE_FLAGS, _namespace_flag),
        "write every memory as JSON lines",
        "Write every memory, entity and audit entry as JSON lines. With "
        "--namespace NS only that namespace is exported.",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    importer = _command(commands, "import", STORE_FLAGS, "restore memories from an export file")
    importer.add_argument("file", metavar="FILE", help="export file (JSON lines); '-' for stdin")
    importer.add_argument(
        "--batch",
        type=int,
        default=IMPORT_BATCH,
        metavar="N",
        help=f"memories per batch (default {IMPORT_BATCH})",
    )
    _add_model_commands(commands)
    _add_client_commands(commands)
    return parser


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


def _fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return 2


TOOL_COMMANDS = ("store", "recall", "forget", "stats", "reflect")


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
        from ferrex.commands import models

        if args.models_command == "list":
            return models.list_models(settings, as_json=args.json)
        return models.pull(settings, args.tier, args.reranker)
    refused = _refuse_to_start(command, settings)
    if refused is not None:
        return refused
    if command in TOOL_COMMANDS:
        from ferrex.commands.tools import run_tool_command

        return run_tool_command(command, args, settings, explicit_tier)
    try:
        if command not in CREATING_COMMANDS and command != "doctor":
            _require_store(settings)
        handler = _operator_commands(args, settings, explicit_tier).get(command)
        if handler is not None:
            return handler()
    except CliError as exc:
        return _fail(exc.message)
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
        return _fail(problem)
    return None


def _operator_commands(
    args: argparse.Namespace, settings: Settings, explicit_tier: bool
) -> dict[str, Callable[[], int]]:
    """The commands that are not tools, by name (each called with the parsed flags)."""

    def serve() -> int:
        if getattr(args, "http", None):
            return _serve_http(settings, explicit_tier, args.http)
        return _serve(settings, explicit_tier)

    def ui() -> int:
        from ferrex.commands.ui import run_ui_command

        return run_ui_command(settings, explicit_tier, args)

    return {
        "serve": serve,
        "ui": ui,
        "migrate-index": lambda: _migrate(settings, explicit_tier, args.target),
        "init": lambda: _init(settings, explicit_tier),
        "doctor": lambda: _doctor(settings, explicit_tier, as_json=args.json, repair=args.repair),
        "rebuild-index": lambda: _rebuild(settings, explicit_tier),
        "export": lambda: _export(
            settings, explicit_tier, args.output, getattr(args, "namespace", None)
        ),
        "import": lambda: _import(settings, explicit_tier, args.file, args.batch),
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
    from ferrex.commands.clients import run_config

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


def startup_fields(settings: Settings) -> dict[str, Any]:
    """What the one start-up line says: mode, data dir, model and reranker status."""
    from ferrex.commands.models import store_pin
    from ferrex.embed.models import (
        BUNDLED_MODEL,
        EMBEDDING_TIERS,
        RERANKER_TIERS,
        bundled_model_available,
        is_cached,
    )

    pin = store_pin(settings)
    if pin.get("embedding_model"):
        model = f"{pin['embedding_model']} (pinned)"
    else:
        tier = EMBEDDING_TIERS[settings.model_tier]
        if settings.model_path is not None:
            where = "from --model-path"
        elif is_cached(tier.model, settings.model_cache):
            where = "cached"
        elif tier.model.lower() == BUNDLED_MODEL.lower() and bundled_model_available():
            where = "bundled"
        else:
            where = "not downloaded yet"
        model = f"{tier.model} ({where})"
    if not settings.rerank:
        reranker = "off (--no-rerank)"
    elif settings.reranker_path is not None:
        reranker = "local (--reranker-path)"
    else:
        name = RERANKER_TIERS[settings.reranker_tier]
        if is_cached(name, settings.model_cache, reranker=True):
            reranker = f"{name} (cached)"
        elif settings.offline:
            reranker = f"{name} unavailable offline (fused order)"
        else:
            reranker = f"{name} (downloads in the background; fused order until then)"
    from ferrex.bootstrap import preview_index_mode

    choice = preview_index_mode(settings)
    mode = f"external Qdrant {settings.qdrant_url}" if settings.qdrant_url else choice.mode
    fields = {
        "version": __version__,
        "mode": mode,
        "mode_reason": choice.reason,
        "data_dir": str(settings.data_dir),
        "model": model,
        "reranker": reranker,
    }
    if settings.model_tier_file:  # stderr only: an agent never sees a path
        fields["model_tier_from"] = settings.model_tier_file
    return fields


# --------------------------------------------------------------------------- backend


def _backend(settings: Settings, explicit_tier: bool, *, warm_up: bool = True) -> Any:
    """The engine (or a peer's link to it). Nothing of the engine is imported here: a server
    answers the MCP handshake first, and the engine's modules load when it opens."""
    from ferrex.datadir import ensure_data_dir
    from ferrex.runtime.shared import SharedBackend, hello_request

    def make_engine() -> Any:
        from ferrex.bootstrap import Options, build_service

        return build_service(settings, Options(explicit_model_tier=explicit_tier))

    def dispatch(engine: Any, op: str, arguments: dict[str, Any], key: str | None) -> Any:
        from ferrex.runtime.operations import dispatch

        return dispatch(engine, op, arguments, key)

    def on_join(reply: dict[str, Any], pid: int | None) -> None:
        from ferrex.runtime.operations import warn_overridden

        warn_overridden(settings, reply, pid)

    ensure_data_dir(settings.data_dir)
    return SharedBackend(
        settings.data_dir,
        make_engine,
        dispatch,
        hello=hello_request(settings, explicit_tier),
        on_join=on_join,
        warm_up=warm_up,
    )


def _serve(settings: Settings, explicit_tier: bool) -> int:
    from ferrex.server.app import run

    def announce() -> None:
        # The one start-up line, said when the engine opens (after the handshake): its model
        # and reranker status come from fastembed's model list, a 0.2 s import.
        structlog.get_logger("ferrex").info("ferrex starting", **startup_fields(settings))

    return run(
        _backend(settings, explicit_tier),
        settings.namespace,
        settings.retrieval.max_limit,
        announce=announce,
    )


def _serve_http(settings: Settings, explicit_tier: bool, bind_text: str) -> int:
    from ferrex.server.http import HttpSetupError, parse_bind, resolve_token, run_http

    try:
        bind = parse_bind(bind_text)
        token = resolve_token(settings.http_token, settings.data_dir, bind)
    except HttpSetupError as exc:
        raise CliError(str(exc)) from None
    structlog.get_logger("ferrex").info(
        "ferrex starting", http=bind.url, **startup_fields(settings)
    )
    return run_http(_backend(settings, explicit_tier), bind, token, settings.namespace)


def _migrate(settings: Settings, explicit_tier: bool, target: str) -> int:
    """Rebuild the index from SQLite in ``target`` and switch the store to it (this process
    must own the data dir). The store keeps its old mode until the rebuild has finished."""
    from ferrex.bootstrap import INDEX_MODE, Options, build_service
    from ferrex.core.maintenance import rebuild
    from ferrex.runtime.ownership import OwnerLock
    from ferrex.runtime.sidecar import Sidecar
    from ferrex.store.sqlite import SqliteStore

    if settings.qdrant_url:
        raise CliError(
            "migrate-index moves the index between the embedded engine and the sidecar; "
            "--qdrant-url points at an external server (drop it, or use rebuild-index there)"
        )
    lock = OwnerLock(settings.data_dir)
    if not lock.try_acquire():
        raise CliError(
            f"a ferrex server (pid {lock.owner_pid()}) is using {settings.data_dir}; stop it "
            "(close the MCP clients) and run migrate-index again"
        )
    try:
        meta = SqliteStore(settings.db_path)
        try:
            current = meta.get_meta(INDEX_MODE) or "embedded"
        finally:
            meta.close()
        if current == target:
            sys.stderr.write(f"the index is already in the {target} mode; nothing to do\n")
            return 0
        service = build_service(settings, Options(explicit_model_tier=explicit_tier), target)
        try:
            result = rebuild(service, _progress(f"rebuilding the index ({target})"))
            service.meta.set_meta(INDEX_MODE, target)
        finally:
            service.close()
        if target == "embedded":
            Sidecar(settings.data_dir, None).stop()  # one left running by an earlier owner
        left = "index" if target == "sidecar" else "qdrant-data"
        sys.stderr.write(
            f"migrated {result['memories']} memories from {current} to {target}; the old "
            f"index is left in <data dir>/{left} (delete it to reclaim the space)\n"
        )
    except CliError:
        raise
    except Exception as exc:
        raise _cli_error(exc, settings) from None
    finally:
        lock.release()
    return 0


def _operate(settings: Settings, explicit_tier: bool, op: str, arguments: dict[str, Any]) -> Any:
    return _session(settings, explicit_tier, lambda backend: backend.call(op, arguments))


def _session(settings: Settings, explicit_tier: bool, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``work(backend)`` against this data dir's engine (started here or already running).

    Any failure (a refusal such as a model mismatch, an unreadable database, ...) becomes a
    ``CliError`` with one line to show, whether or not a task group wrapped it.
    """
    # No background warm-up: each operation loads what it needs, and nothing is left running
    # in native code when the command exits.
    backend = _backend(settings, explicit_tier, warm_up=False)

    async def go() -> Any:
        async with anyio.create_task_group() as tasks:
            try:
                await backend.start(tasks)
                return await work(backend)
            finally:
                tasks.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await backend.aclose()

    try:
        return anyio.run(go)
    except Exception as exc:
        raise _cli_error(exc, settings) from None


def _first_failure(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _cli_error(exc: BaseException, settings: Settings) -> CliError:
    """One line for the operator saying what failed and what to do (no traceback)."""
    from ferrex.core.errors import FerrexError

    failure = _first_failure(exc)
    if isinstance(failure, FerrexError):
        return CliError(failure.message, failure.code, failure.to_dict())
    if isinstance(failure, sqlite3.DatabaseError) and not isinstance(
        failure, sqlite3.IntegrityError | sqlite3.OperationalError
    ):
        # Corruption ("file is not a database", "malformed"): a constraint or a lock is not.
        return CliError(
            f"cannot read the store database {settings.db_path} ({failure}); restore it from a "
            "backup, or move it away and `ferrex import` an export into a fresh data dir",
            "database_unreadable",
        )
    if isinstance(failure, sqlite3.OperationalError):
        return CliError(
            f"the store database {settings.db_path} could not be used ({failure}); try again, "
            "and run `ferrex doctor` if it persists",
            "database_error",
        )
    if isinstance(failure, OSError):
        where = f" ({failure.filename})" if failure.filename else ""
        return CliError(f"{failure.strerror or failure}{where}", "os_error")
    structlog.get_logger("ferrex.cli").debug("operator command failed", exc_info=failure)
    return CliError(
        f"unexpected failure: {type(failure).__name__}: {str(failure)[:300]} "
        "(run with --log-level debug for the traceback)",
        "internal_error",
    )


CREATING_COMMANDS = ("serve", "init")


def _require_store(settings: Settings) -> None:
    """Refuse an operator command on a data dir that holds no ferrex store (creating nothing)."""
    if settings.db_path.expanduser().is_file():
        return
    directory = settings.data_dir.expanduser()
    where = "does not exist" if not directory.exists() else "holds no ferrex store"
    raise CliError(
        f"the data dir {directory} {where}: check --data-dir (or FERREX_HOME); "
        "`ferrex init` creates a store there, as does starting the server",
        code="no_store",
    )


def _init(settings: Settings, explicit_tier: bool) -> int:
    """Create the store (data dir, database, index, model pin) as the first server start does."""
    existed = settings.db_path.expanduser().is_file()
    stats = _operate(settings, explicit_tier, "init", {})
    total = stats.get("total", 0) if isinstance(stats, dict) else 0
    state = f"already holds a store ({total} memories)" if existed else "now holds an empty store"
    sys.stdout.write(f"ferrex: {settings.data_dir.expanduser()} {state}\n")
    return 0


def _doctor(settings: Settings, explicit_tier: bool, *, as_json: bool, repair: bool) -> int:
    try:
        _require_store(settings)
        report = _operate(settings, explicit_tier, "doctor", {"repair": repair})
    except CliError as exc:
        if as_json:  # a report a script can read, even when the store cannot be opened
            failed = {
                "ok": False,
                "in_agreement": None,
                "data_dir": str(settings.data_dir),
                "error": {"code": exc.code, "message": exc.message},
            }
            sys.stdout.write(json.dumps(failed, indent=2, sort_keys=True) + "\n")
        raise
    problem = model_path_problem(settings.model_path)
    model = report.get("model")
    if problem and isinstance(model, dict) and not model.get("available"):
        model["error"] = problem  # the operator may see the directory (the agent never does)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_doctor(report))
    return 0 if report.get("ok") else 1


def render_doctor(report: dict[str, Any]) -> str:
    def mark(ok: bool) -> str:
        return "ok  " if ok else "FAIL"

    model = report.get("model", {})
    permissions = report["permissions"]
    reranker = report["reranker"]
    sqlite, index = report["sqlite"], report["index"]
    missing = report["missing_in_index"]["count"]
    orphans = report["orphans_in_index"]["count"]
    mismatched = report["chunk_mismatch"]["count"]
    wrong_model = report["model_mismatch"]["count"]
    lines = [
        f"ferrex doctor — {report['data_dir']}",
        f"[{mark(permissions['ok'])}] data dir permissions {permissions['mode']}",
        f"[ok  ] schema version {report['schema_version']}",
        f"[ok  ] vector index mode: {report['mode']}" + _mode_detail(report.get("index_mode")),
        f"[{mark(bool(model.get('available')))}] embedding model: "
        + (
            f"pinned {model.get('pinned')} ({model.get('dimension')}-d, "
            f"{model.get('variant') or 'fastembed'})"
            if model.get("pinned")
            else "not pinned yet (the first store pins the configured model)"
        )
        + ("" if model.get("available") else f" — {model.get('error')}"),
        f"[{'ok  ' if reranker['available'] else 'warn'}] reranker: "
        + ("available" if reranker["available"] else str(reranker["reason"])),
        f"[{mark(report['journal_backlog'] == 0)}] journal backlog: {report['journal_backlog']}"
        + (
            f" (replayed {report['replayed_at_start']} unfinished writes at start-up)"
            if report.get("replayed_at_start")
            else ""
        ),
        f"      SQLite: {sqlite['memories']} memories, {sqlite['expected_points']} expected points",
        f"      index:  {index['memories']} memories, {index['points']} points",
        f"[{mark(missing == 0)}] missing in index: {missing}",
        f"[{mark(orphans == 0)}] orphans in index: {orphans}",
        f"[{mark(mismatched == 0)}] chunk mismatches: {mismatched}",
        f"[{mark(wrong_model == 0)}] points of another model: {wrong_model}",
    ]
    lines.append(_secrets_line(report.get("secrets")))
    if "repaired" in report:
        lines.append(f"      repaired: {report['repaired']}")
    lines.append(
        "SQLite and the index agree."
        if report["in_agreement"]
        else "SQLite and the index DISAGREE: run `ferrex doctor --repair`."
    )
    return "\n".join(lines) + "\n"


def _secrets_line(secrets: Any) -> str:
    if not isinstance(secrets, dict):
        return "[warn] secrets: not checked"
    held = int(secrets.get("memories", 0)) + int(secrets.get("audit_entries", 0))
    kinds = ", ".join(f"{kind} {n}" for kind, n in secrets.get("kinds", {}).items())
    if "redacted" in secrets:
        return f"[ok  ] secrets: redacted in {secrets['redacted']} memories ({kinds})"
    if not held:
        return "[ok  ] secrets: none stored"
    tag = "warn" if secrets.get("handling") == "allow" else "FAIL"
    hint = (
        " (secret_handling = allow keeps them)"
        if tag == "warn"
        else ": run `ferrex doctor --repair` to redact them"
    )
    return f"[{tag}] secrets: {secrets['memories']} memories hold {kinds or 'secrets'}{hint}"


def _mode_detail(index_mode: Any) -> str:
    if not isinstance(index_mode, dict):
        return ""
    text = f" ({index_mode['reason']})" if index_mode.get("reason") else ""
    sidecar = index_mode.get("sidecar")
    if isinstance(sidecar, dict):
        text += (
            f"\n      sidecar: pid {sidecar.get('pid')}, {sidecar.get('host')}:"
            f"{sidecar.get('http_port')} (HTTP) / {sidecar.get('grpc_port')} (gRPC), "
            f"{'reused' if sidecar.get('reused') else 'started here'}, {sidecar.get('binary')}"
        )
    return text


def _progress(label: str) -> Any:
    def show(done: int, total: int) -> None:
        width = 30
        fraction = done / total if total else 1.0
        bar = "#" * int(width * fraction) + "." * (width - int(width * fraction))
        sys.stderr.write(f"\r{label}: {done}/{total} [{bar}] {fraction:4.0%}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _rebuild(settings: Settings, explicit_tier: bool) -> int:
    """Rebuild in this process (it must own the data dir: a model change needs exclusive access)."""
    from ferrex.bootstrap import Options, build_service, ensure_data_dir, load_requested_model
    from ferrex.core.errors import FerrexError
    from ferrex.core.maintenance import rebuild
    from ferrex.runtime.ownership import OwnerLock

    ensure_data_dir(settings.data_dir)
    lock = OwnerLock(settings.data_dir)
    if not lock.try_acquire():
        print(
            f"error: a ferrex server (pid {lock.owner_pid()}) is using {settings.data_dir}; "
            "stop it (close the MCP clients) and run rebuild-index again",
            file=sys.stderr,
        )
        return 2
    try:
        embedder = None
        if explicit_tier:
            # A model change: load the requested model first (refusing, with the store
            # untouched, when it cannot load), then unpin, mark the rebuild as pending (an
            # interrupted rebuild resumes at the next start) and re-embed everything with it.
            try:
                embedder = load_requested_model(settings)
            except FerrexError as exc:
                print(
                    f"error: cannot rebuild with --model-tier {settings.model_tier}: "
                    f"{exc.message} Nothing was changed; the store keeps its current model.",
                    file=sys.stderr,
                )
                return 2
            _unpin_for_rebuild(settings, embedder)
        options = Options(explicit_model_tier=explicit_tier, embedder=embedder)
        service = build_service(settings, options)
        try:
            result = rebuild(service, _progress("rebuilding index"), repin=explicit_tier)
        finally:
            service.close()
    except Exception as exc:
        raise _cli_error(exc, settings) from None
    finally:
        lock.release()
    print(json.dumps(result), file=sys.stderr)
    return 0


def _unpin_for_rebuild(settings: Settings, embedder: Any) -> None:
    from ferrex.core.pins import (
        PIN_DIMENSION,
        PIN_NAME,
        PIN_SOURCE,
        PIN_VARIANT,
        REBUILD_PENDING,
        REBUILD_TARGET,
        REBUILD_TARGET_VARIANT,
    )
    from ferrex.store.sqlite import SqliteStore

    meta = SqliteStore(settings.db_path)
    try:
        with meta.transaction():
            meta.set_meta(REBUILD_PENDING, "1")
            meta.set_meta(REBUILD_TARGET, embedder.info.name)
            meta.set_meta(REBUILD_TARGET_VARIANT, embedder.info.variant)
            for key in (PIN_NAME, PIN_DIMENSION, PIN_VARIANT, PIN_SOURCE):
                meta.delete_meta(key)
    finally:
        meta.close()


def _check_output(output: str) -> None:
    """Refuse an unusable ``-o FILE`` before the export runs (and before anything is written)."""
    target = Path(output).expanduser()
    if target.is_dir():
        raise CliError(f"{output} is a directory; pass -o FILE with a file name")
    parent = target.parent
    if not parent.is_dir():
        raise CliError(f"cannot write {output}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise CliError(f"cannot write {output}: permission denied")


def _export(
    settings: Settings, explicit_tier: bool, output: str | None, namespace: str | None
) -> int:
    if output:
        _check_output(output)
    lines = _operate(settings, explicit_tier, "export", {"namespace": namespace})
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in lines)
    if output:
        try:
            Path(output).expanduser().write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    count = sum(1 for r in lines if r.get("kind") == "memory")
    sys.stderr.write(f"exported {count} memories\n")
    return 0


def _import_batches(
    settings: Settings, explicit_tier: bool, records: list[dict[str, Any]], size: int
) -> dict[str, Any]:
    """Import in batches of memories with a progress bar. Each batch carries the header and
    the entities (importing an entity twice finds the first one), the audit rows go last."""
    header = [r for r in records if r.get("kind") == "header"][:1]
    entities = [r for r in records if r.get("kind") == "entity"]
    memories = [r for r in records if r.get("kind") == "memory"]
    audit = [r for r in records if r.get("kind") == "audit"]
    show = _progress("importing")

    async def work(backend: Any) -> dict[str, Any]:
        total: dict[str, Any] = {
            "imported": 0,
            "duplicates": [],
            "entities": len(entities),
            "redacted": 0,
        }
        starts = range(0, max(1, len(memories)), size)
        show(0, len(memories))
        for number, start in enumerate(starts):
            batch = memories[start : start + size]
            last = number == len(starts) - 1
            payload = header + entities + batch + (audit if last else [])
            result = await backend.call("import", {"records": payload})
            total["imported"] += result["imported"]
            total["duplicates"].extend(result["duplicates"])
            total["redacted"] += result.get("redacted", 0)
            show(min(start + len(batch), len(memories)), len(memories))
        return total

    result: dict[str, Any] = _session(settings, explicit_tier, work)
    return result


def _read_records(path: str) -> list[dict[str, Any]]:
    """Every record of an export file (``-`` for stdin); a ``CliError`` for an unreadable one."""
    name = "standard input" if path == "-" else path
    try:
        if path == "-":
            handle: TextIO = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
        else:
            if Path(path).is_dir():
                raise CliError(
                    f"{path} is a directory; pass an export file written by `ferrex export`"
                )
            handle = open(path, encoding="utf-8")  # noqa: SIM115
    except FileNotFoundError:
        raise CliError(f"no such file: {path}") from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    records: list[dict[str, Any]] = []
    number = 0
    try:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise CliError(
                        f"line {number} of {name} is not JSON ({exc.msg}); nothing was imported"
                    ) from None
    except UnicodeDecodeError:
        raise CliError(
            f"{name} is not UTF-8 text: not a ferrex export file; nothing was imported"
        ) from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if path != "-":
            handle.close()
    return records


def _import(settings: Settings, explicit_tier: bool, path: str, batch: int) -> int:
    from ferrex.core.errors import FerrexError
    from ferrex.core.export_format import check_records
    from ferrex.core.secret_sweep import refuse_secrets
    from ferrex.core.secrets import SecretScanner

    if batch < 1:
        raise CliError("--batch must be at least 1")
    records = _read_records(path)
    try:
        check_records(records)  # a bad file imports nothing: check every line first
        if settings.secret_handling == "refuse":  # nor does one holding credentials
            scanner = SecretScanner(settings.secrets.patterns, settings.secrets.allow)
            refuse_secrets(records, scanner)
    except FerrexError as exc:
        raise CliError(exc.message, exc.code) from None
    result = _import_batches(settings, explicit_tier, records, batch)
    redacted = f"; credentials redacted in {result['redacted']}" if result["redacted"] else ""
    print(
        f"imported {result['imported']} memories; {len(result['duplicates'])} already present "
        f"(kept as they were); {result['entities']} entities{redacted}",
        file=sys.stderr,
    )
    if result["duplicates"]:
        print("duplicates: " + ", ".join(result["duplicates"][:50]), file=sys.stderr)
    return 0

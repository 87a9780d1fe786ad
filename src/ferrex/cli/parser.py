"""The ``ferrex`` argument parser: the flag groups and every command's flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ferrex import __version__
from ferrex.cli.common import IMPORT_BATCH
from ferrex.cli.ui import add_ui_command

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


_TOOL_FLAGS: tuple[FlagAdder, ...] = (*STORE_FLAGS, _namespace_flag)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the tool's own JSON answer (for scripts)"
    )


def _add_store_command(commands: Any) -> None:
    store = _command(
        commands,
        "store",
        _TOOL_FLAGS,
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
    _json_flag(store)


def _add_recall_command(commands: Any) -> None:
    recall = _command(
        commands,
        "recall",
        (*_TOOL_FLAGS, _rerank_flags),
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
    _json_flag(recall)


def _add_tool_commands(commands: Any) -> None:
    """The human CLI: one command per MCP tool, same validation and answers (``--json``)."""
    _add_store_command(commands)
    _add_recall_command(commands)

    forget = _command(
        commands,
        "forget",
        _TOOL_FLAGS,
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
    _json_flag(forget)

    stats = _command(commands, "stats", _TOOL_FLAGS, "memory overview (as the stats tool)")
    stats.add_argument(
        "--detailed", action="store_true", default=None, help="counts, staleness, storage, models"
    )
    _json_flag(stats)

    reflect = _command(
        commands, "reflect", _TOOL_FLAGS, "memory health review (as the reflect tool)"
    )
    reflect.add_argument(
        "--confirm", action="append", dest="confirm_ids", metavar="ID", help="mark as reviewed"
    )
    reflect.add_argument("--pin", action="append", dest="pin_ids", metavar="ID", help="pin")
    reflect.add_argument("--unpin", action="append", dest="unpin_ids", metavar="ID", help="unpin")
    _json_flag(reflect)


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

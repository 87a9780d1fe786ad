"""The ``ferrex`` argument parser: the flag groups and every command's flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from ferrex import __version__, registry
from ferrex.cli.common import IMPORT_BATCH
from ferrex.cli.ui import add_ui_command
from ferrex.registry import Flag

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


# The CLI's own flags of a tool command, beside those made from its request fields (the
# registry's ``Command.cli_only`` names them).
_CLI_ONLY: dict[str, Callable[[argparse.ArgumentParser], Any]] = {
    "ids": lambda parser: parser.add_argument(
        "--ids",
        action="store_true",
        dest="ids_only",
        help="print only the result ids, one a line (for scripts)",
    ),
    "brief": lambda parser: parser.add_argument(
        "--brief", action="store_true", help="one line per result (content cut to the line)"
    ),
}


def _unwrap(annotation: Any) -> Any:
    """A field's type without ``Optional`` and ``Annotated`` (the constraints)."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or origin is UnionType:
            kept = [a for a in get_args(annotation) if a is not type(None)]
            if len(kept) != 1:
                return annotation
            annotation = kept[0]
        else:
            return annotation


def field_kind(model: type[BaseModel], path: str) -> tuple[Any, bool, list[Any] | None]:
    """The type of request field ``path`` (``a.b``: field b of the nested model a), whether it
    is a list (of that type), and its choices (a ``Literal``'s values)."""
    *outer, name = path.split(".")
    for part in outer:
        model = _unwrap(model.model_fields[part].annotation)
    kind = _unwrap(model.model_fields[name].annotation)
    is_list = get_origin(kind) is list
    if is_list:
        kind = _unwrap(get_args(kind)[0])
    choices = list(get_args(kind)) if get_origin(kind) is Literal else None
    return kind, is_list, choices


def _add_field_flag(parser: argparse.ArgumentParser, model: type[BaseModel], flag: Flag) -> None:
    kind, is_list, choices = field_kind(model, flag.field)
    options: dict[str, Any] = {"help": flag.help}
    if flag.metavar is not None:
        options["metavar"] = flag.metavar
    if choices is not None:
        options["choices"] = choices
    if flag.flag is None:  # positional: named as the field
        if is_list:
            options["nargs"] = "+"
        elif flag.optional:
            options["nargs"] = "?"
        parser.add_argument(flag.field, **options)
        return
    options["dest"] = flag.field
    if kind is bool:
        options.update(action="store_true", default=None)
    elif is_list:
        options["action"] = "append"
    elif kind is int or kind is float:
        options["type"] = kind
    parser.add_argument(flag.flag, **options)


def _add_tool_commands(commands: Any) -> None:
    """The human CLI: one command per MCP tool (``ferrex.registry``), its flags made from the
    tool's request fields; same validation and answers (``--json``)."""
    for operation in registry.COMMANDS:
        command = operation.cli
        assert command is not None and operation.request is not None
        groups = (*_TOOL_FLAGS, _rerank_flags) if command.rerank else _TOOL_FLAGS
        parser = _command(commands, operation.name, groups, command.help, command.description)
        model = registry.resolve(operation.request)
        for flag in command.flags:
            _add_field_flag(parser, model, flag)
        for name in command.cli_only:
            _CLI_ONLY[name](parser)
        _json_flag(parser)


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
    doctor.add_argument(
        "--full",
        action="store_true",
        help="scan every memory for secrets (not only what changed since the last doctor)",
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

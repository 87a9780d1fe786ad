"""The human CLI: ``ferrex store / recall / forget / stats / reflect``.

Each command builds the same arguments an agent sends to the tool of that name and sends them
through the same path (the data dir's running engine when a server owns the store, or an
engine started for the command when none does), so validation, error codes and answers are the
tools' own. Output: a readable table by default, the tool's JSON answer with ``--json``. Exit
status: 0 done, 1 refused (the answer's error code on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, get_origin

from ferrex import registry
from ferrex.cli.common import CliError, require_store
from ferrex.cli.parser import field_kind
from ferrex.cli.render import render
from ferrex.cli.session import operate
from ferrex.config import Settings

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A flag value the command cannot turn into tool arguments."""


def tool_arguments(command: str, args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The tool call's arguments, exactly as an agent would send them: the flags given (named
    by the registry's ``Command.flags``), and the namespace."""
    operation = registry.BY_NAME[command]
    if operation.cli is None or operation.request is None:
        raise UsageError(f"unknown command {command}")
    model = registry.resolve(operation.request)
    arguments: dict[str, Any] = {}
    for flag in operation.cli.flags:
        value = getattr(args, flag.field, None)
        if value is None:
            continue
        if flag.stdin and value == "-":  # the convention: "-" reads it from standard input
            value = sys.stdin.read().rstrip("\n")
        kind = field_kind(model, flag.field)[0]
        if kind is dict or get_origin(kind) is dict:  # an object, given as JSON
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{flag.flag} must be a JSON object ({exc.msg})") from None
        *outer, name = flag.field.split(".")
        target = arguments
        for part in outer:  # a nested model's field (recall's --after: time_range.after)
            target = target.setdefault(part, {})
        target[name] = value
    if "namespace" in model.model_fields:
        given = getattr(args, "namespace", None)
        arguments["namespace"] = given if given is not None else settings.namespace
    return arguments


def _cli_message(exc: Any) -> str:
    """The refusal as a person at the terminal acts on it: a duplicate's hint in CLI syntax
    (the agent's own text speaks tool syntax, ``supersedes="..."``)."""
    details = exc.details or {}
    existing = details.get("existing_id")
    if exc.code == "duplicate" and existing:
        similarity = details.get("similarity")
        cosine = f" (cosine {similarity:.3f})" if isinstance(similarity, float) else ""
        return (
            f"a similar memory already exists: {existing}{cosine}. Nothing was stored; to "
            f"replace it, run the same command with --supersedes {existing}"
        )
    return str(exc.message)


def run_tool_command(
    command: str, args: argparse.Namespace, settings: Settings, explicit_tier: bool
) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        arguments = tool_arguments(command, args, settings)
    except UsageError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    try:
        if command != "store":  # only a write creates a store; a read on a typo says so
            require_store(settings)
        sent = dict(arguments)
        if command == "recall" and not as_json and not getattr(args, "ids_only", False):
            sent["explain"] = True  # the table shows when each was stored and a procedure's steps
        answer = operate(settings, explicit_tier, command, sent)
    except CliError as exc:
        if as_json:
            error = {"error": exc.details or {"code": exc.code, "message": exc.message}}
            sys.stdout.write(json.dumps(error, indent=2, ensure_ascii=False) + "\n")
        sys.stderr.write(f"error [{exc.code}]: {_cli_message(exc)}\n")
        if exc.code == "model_mismatch" and settings.model_tier_file:
            sys.stderr.write(f"(model_tier is set in {settings.model_tier_file})\n")
        if exc.code == "storage_full":  # the disk, not the request: as the other commands do
            return EXIT_USAGE
        return EXIT_REFUSED
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2, ensure_ascii=False, default=str) + "\n")
    elif getattr(args, "ids_only", False):
        sys.stdout.write("".join(f"{r['id']}\n" for r in answer.get("results", [])))
    else:
        brief, explain = bool(getattr(args, "brief", False)), bool(arguments.get("explain"))
        sys.stdout.write(render(command, answer, brief=brief, explain=explain))
    return EXIT_OK

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
from typing import Any

from ferrex.cli.common import CliError, require_store
from ferrex.cli.render import render
from ferrex.cli.session import operate
from ferrex.config import Settings

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A flag value the command cannot turn into tool arguments."""


def _given(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def tool_arguments(command: str, args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The tool call's arguments, exactly as an agent would send them."""
    given = getattr(args, "namespace", None)
    namespace = given if given is not None else settings.namespace
    if command == "store":
        context = None
        if args.context is not None:
            try:
                context = json.loads(args.context)
            except json.JSONDecodeError as exc:
                raise UsageError(f"--context must be a JSON object ({exc.msg})") from None
        content = args.content
        if content == "-":  # the convention: "-" reads the content from standard input
            content = sys.stdin.read().rstrip("\n")
        return _given(
            content=content,
            type=args.type,
            entities=args.entities,
            subject=args.subject,
            predicate=args.predicate,
            object=args.object_,
            confidence=args.confidence,
            name=args.name,
            steps=args.steps,
            conditions=args.conditions,
            timestamp=args.timestamp,
            t_valid=args.t_valid,
            t_invalid=args.t_invalid,
            supersedes=args.supersedes,
            source=args.source,
            context=context,
            pinned=args.pinned,
            multi_valued=args.multi_valued,
            namespace=namespace,
        )
    if command == "recall":
        time_range = _given(after=args.after, before=args.before) or None
        return _given(
            query=args.query,
            limit=args.limit,
            types=args.types,
            entities=args.entities,
            time_range=time_range,
            as_of=args.as_of,
            include_stale=args.include_stale,
            include_invalidated=args.include_invalidated,
            max_tokens=args.max_tokens,
            explain=args.explain,
            namespace=namespace,
        )
    if command == "forget":
        return _given(ids=args.ids, cascade=args.cascade, namespace=namespace)
    if command == "stats":
        return _given(detailed=args.detailed, namespace=namespace)
    if command == "reflect":
        return _given(
            confirm_ids=args.confirm_ids,
            pin_ids=args.pin_ids,
            unpin_ids=args.unpin_ids,
            namespace=namespace,
        )
    raise UsageError(f"unknown command {command}")


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

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
import shutil
import sys
import textwrap
from typing import Any

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
    from ferrex.cli import CliError, _operate, _require_store

    as_json = bool(getattr(args, "json", False))
    try:
        arguments = tool_arguments(command, args, settings)
    except UsageError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    try:
        if command != "store":  # only a write creates a store; a read on a typo says so
            _require_store(settings)
        sent = dict(arguments)
        if command == "recall" and not as_json and not getattr(args, "ids_only", False):
            sent["explain"] = True  # the table shows when each was stored and a procedure's steps
        answer = _operate(settings, explicit_tier, command, sent)
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


# --------------------------------------------------------------------------- tables


def _width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def table(rows: list[list[str]], header: list[str], last_wraps: bool = True) -> list[str]:
    """Columns padded to their widest cell; the last column takes the rest of the line."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    fixed = sum(widths) + 2 * len(widths)
    room = max(20, _width() - fixed)
    lines = []
    for row in [header, *rows]:
        head = "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
        last = row[-1].replace("\n", " ")
        chunks = textwrap.wrap(last, room) if last_wraps and last else [last]
        lines.append(f"{head}  {chunks[0] if chunks else ''}".rstrip())
        lines += [f"{' ' * fixed}{chunk}" for chunk in chunks[1:3]]
        if len(chunks) > 3:
            lines[-1] += " …"
    return lines


def _pairs(data: dict[str, Any], indent: int = 0, skip: tuple[str, ...] = ()) -> list[str]:
    """Nested key: value lines (lists of objects as small tables)."""
    lines: list[str] = []
    pad = " " * indent
    for key, value in data.items():
        if key in skip:
            continue
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:")
            lines += _pairs(value, indent + 2)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key}: {len(value)}")
            lines += [pad + "  " + line for line in _objects(value)]
        else:
            lines.append(f"{pad}{key}: {_cell(value)}")
    return lines


def _objects(items: list[dict[str, Any]]) -> list[str]:
    """A list of objects as a table: scalar fields as columns, ``content`` last."""
    keys: list[str] = []
    for item in items:
        keys += [k for k, v in item.items() if k not in keys and not isinstance(v, dict | list)]
    if "content" in keys:
        keys.remove("content")
        keys.append("content")
    rows = [[_cell(item.get(k)) for k in keys] for item in items]
    return table(rows, keys) if keys else [_cell(item) for item in items]


def _date(result: dict[str, Any]) -> str:
    """An event's own time when it has one, else when the memory was stored (the day)."""
    stamp = result.get("timestamp")
    label = "event"
    if not stamp:
        stamp = (result.get("explain") or {}).get("created_at")
        label = "stored"
    return f"{str(stamp)[:10]} {label}" if stamp else "-"


def _flags(result: dict[str, Any]) -> str:
    flags = []
    if result.get("contradiction"):
        flags.append("contradiction")
    if result.get("included_as"):
        flags.append(str(result["included_as"]))
    if result.get("t_invalid"):
        flags.append("invalidated")
    if result.get("version") is not None:
        flags.append(f"v{result['version']}")
    return f"[{', '.join(flags)}]" if flags else ""


def _head(number: int, result: dict[str, Any]) -> list[str]:
    freshness = result.get("freshness") or {}
    age = freshness.get("age_days")
    return [
        str(number),
        _cell(result.get("score")),
        str(result.get("type", "")),
        str(freshness.get("staleness", "")),
        f"{age:.0f}d" if isinstance(age, int | float) else "-",
        _date(result),
        str(result.get("id", "")),
        _flags(result),
    ]


def _body(result: dict[str, Any], width: int) -> list[str]:
    """The whole content, wrapped to ``width`` and never cut: a procedure as its name, its
    conditions and its numbered steps; line breaks of the content kept."""
    details = result.get("explain") or {}
    steps = details.get("steps")
    if result.get("type") == "procedural" and isinstance(steps, list) and steps:
        paragraphs = [str(details.get("name") or "procedure") + ":"]
        conditions = details.get("conditions") or []
        if conditions:
            paragraphs.append("when: " + "; ".join(str(c) for c in conditions))
        paragraphs += [f"{i}. {step}" for i, step in enumerate(steps, start=1)]
    else:
        paragraphs = str(result.get("content") or result.get("name") or "").splitlines()
    lines: list[str] = []
    for paragraph in paragraphs:
        marker = paragraph[: len(paragraph) - len(paragraph.lstrip())]
        lines += textwrap.wrap(
            paragraph, width, subsequent_indent=marker + "   " if paragraph[:1].isdigit() else ""
        ) or [""]
    return lines


_EXPLAIN_SHOWN = (
    *("dense_rank", "bm25_rank", "cosine", "bm25", "late", "relevance", "rerank_score"),
    "recency_boost",
)


_HEADER = ["#", "score", "type", "freshness", "age", "date", "id", ""]


def _brief_lines(results: list[dict[str, Any]]) -> list[str]:
    """One line per result: the day, the id and the content cut to the line."""
    rows = []
    for number, result in enumerate(results, start=1):
        head = _head(number, result)
        content = " ".join(str(result.get("content") or result.get("name") or "").split())
        head[5] = head[5].split()[0]  # the day alone: the line is for the content
        rows.append([*head[:-1], " ".join(p for p in (head[-1], content) if p)])
    width = _width()
    return [
        line[: width - 1] + "…" if len(line) > width else line
        for line in table(rows, [*_HEADER[:-1], "content"], last_wraps=False)
    ]


def _why(result: dict[str, Any], width: int) -> list[str]:
    details = result.get("explain") or {}
    shown = {k: details[k] for k in _EXPLAIN_SHOWN if details.get(k) is not None}
    if not shown:
        return []
    why = ", ".join(f"{k} {_cell(v)}" for k, v in shown.items())
    return textwrap.wrap(f"why: {why}", width)


def _full_lines(results: list[dict[str, Any]], explain: bool) -> list[str]:
    """A head line per result, its whole content wrapped below it (and why, with explain)."""
    heads = table([_head(n, r) for n, r in enumerate(results, start=1)], _HEADER, False)
    lines = [heads[0]]
    width = _width() - 4
    for head, result in zip(heads[1:], results, strict=True):
        below = _body(result, width) + (_why(result, width) if explain else [])
        lines += [head, *("    " + line for line in below), ""]
    return lines[:-1]


def render_recall(
    answer: dict[str, Any], *, brief: bool = False, explain: bool = False
) -> list[str]:
    """Each result's score, type, freshness, age and date (an event's own time, else when it was
    stored), id and its whole content wrapped below it; ``brief``: one line per result."""
    results = answer.get("results") or []
    if not results:
        lines = ["no results"]
    else:
        lines = _brief_lines(results) if brief else _full_lines(results, explain)
    rest = {k: v for k, v in answer.items() if k != "results" and (explain or k != "explain")}
    if rest:
        lines.append("")
        lines += _pairs(rest)
    return lines


def render_store(answer: dict[str, Any]) -> list[str]:
    words = [str(answer.get("status", "stored")), str(answer.get("type", "")), "memory"]
    head = " ".join(w for w in [*words, str(answer.get("id", ""))] if w)
    return [head, *_pairs(answer, 2, skip=("status", "type", "id"))]


def render_forget(answer: dict[str, Any]) -> list[str]:
    deleted = answer.get("deleted")
    if isinstance(deleted, list):
        head = f"deleted {len(deleted)}" + (f": {', '.join(deleted)}" if deleted else "")
    else:
        head = f"deleted {deleted}"
    return [head, *_pairs(answer, 2, skip=("deleted",))]


def render(command: str, answer: Any, *, brief: bool = False, explain: bool = False) -> str:
    if not isinstance(answer, dict):
        return _cell(answer) + "\n"
    if command == "recall":
        lines = render_recall(answer, brief=brief, explain=explain)
    elif command == "store":
        lines = render_store(answer)
    elif command == "forget":
        lines = render_forget(answer)
    else:
        lines = _pairs(answer)
    return "\n".join(lines) + "\n"

"""Human renderers: the tool answers as tables, the doctor report, the progress bar."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from typing import Any

from ferrex import registry


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
    lines.extend(_scan_line(report.get("secrets")))
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
    kinds = ", ".join(f"{kind}: {n}" for kind, n in secrets.get("kinds", {}).items())
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
    count = int(secrets.get("memories", 0))
    held_by = "1 memory holds" if count == 1 else f"{count} memories hold"
    if not count:  # only the audit log's copies
        held_by = f"{secrets['audit_entries']} audit log entries hold"
    return f"[{tag}] secrets: {held_by} secrets{f' ({kinds})' if kinds else ''}{hint}"


def _scan_line(secrets: Any) -> list[str]:
    """Which secret scan it was: incremental (what was written since the last one) or full."""
    if not isinstance(secrets, dict) or not isinstance(secrets.get("rows_scanned"), dict):
        return []
    rows = secrets["rows_scanned"]
    why = f" ({secrets['full_because']})" if secrets.get("full_because") else ""
    return [
        f"      secret scan: {secrets.get('scanned')}{why}, {rows.get('memories')} memories "
        f"and {rows.get('audit_entries')} audit entries read"
    ]


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


def progress(label: str) -> Any:
    def show(done: int, total: int) -> None:
        width = 30
        fraction = done / total if total else 1.0
        bar = "#" * int(width * fraction) + "." * (width - int(width * fraction))
        sys.stderr.write(f"\r{label}: {done}/{total} [{bar}] {fraction:4.0%}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


# --------------------------------------------------------------------------- tool answers


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


def render_store(answer: dict[str, Any], **_options: bool) -> list[str]:
    words = [str(answer.get("status", "stored")), str(answer.get("type", "")), "memory"]
    head = " ".join(w for w in [*words, str(answer.get("id", ""))] if w)
    return [head, *_pairs(answer, 2, skip=("status", "type", "id"))]


def render_forget(answer: dict[str, Any], **_options: bool) -> list[str]:
    deleted = answer.get("deleted")
    if isinstance(deleted, list):
        head = f"deleted {len(deleted)}" + (f": {', '.join(deleted)}" if deleted else "")
    else:
        head = f"deleted {deleted}"
    return [head, *_pairs(answer, 2, skip=("deleted",))]


def render(command: str, answer: Any, *, brief: bool = False, explain: bool = False) -> str:
    """A tool command's answer as text: its own renderer (the registry's ``Command.render``),
    else key: value lines."""
    if not isinstance(answer, dict):
        return _cell(answer) + "\n"
    operation = registry.get(command)
    renderer = operation.cli.render if operation is not None and operation.cli else None
    if renderer is not None:
        lines = registry.resolve(renderer)(answer, brief=brief, explain=explain)
    else:
        lines = _pairs(answer)
    return "\n".join(lines) + "\n"

"""The ``ferrex`` command: the MCP server (default) and the operator commands.

ferrex [options]                      start the MCP server on stdio
ferrex doctor [--json] [--repair]     compare SQLite and the vector index
ferrex rebuild-index [--model-tier X] recreate the vector index from SQLite
ferrex export [--namespace NS]        JSON lines on stdout (or -o FILE)
ferrex import FILE                    restore an export
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

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


_TIERS = ["small", "mid", "best", "best-large", "multilingual"]
_RERANKERS = ["default", "multilingual", "v2-m3", "v2-m3-int8", "turbo", "tiny", "ms-marco"]


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    add = parser.add_argument
    add(
        "--data-dir",
        default=default,
        metavar="DIR",
        help="data directory (default ~/.ferrex; env FERREX_HOME)",
    )
    add(
        "--config",
        default=default,
        metavar="FILE",
        help="ferrex.toml to read (default <data dir>/ferrex.toml)",
    )
    add("--namespace", default=default, help="default namespace for tool calls (default 'default')")
    add("--model-tier", default=default, choices=_TIERS, help="embedding model tier (default best)")
    add(
        "--model-path",
        default=default,
        metavar="DIR",
        help="load the tier's model from this local directory",
    )
    add(
        "--reranker-tier",
        default=default,
        choices=_RERANKERS,
        help="cross-encoder tier (default 'default')",
    )
    add(
        "--reranker-path", default=default, metavar="DIR", help="local ONNX cross-encoder directory"
    )
    add("--no-rerank", action="store_true", default=default, help="disable cross-encoder reranking")
    add("--qdrant-url", default=default, metavar="URL", help="use an external Qdrant server")
    add(
        "--qdrant-api-key",
        default=default,
        metavar="KEY",
        help="API key for --qdrant-url (env QDRANT_API_KEY)",
    )
    add(
        "--staleness-config",
        default=default,
        metavar="FILE",
        help="TOML file with [staleness] thresholds",
    )
    add(
        "--log-level",
        default=default,
        choices=["debug", "info", "warning", "error"],
        help="stderr log level",
    )
    add("--offline", action="store_true", default=default, help="never try to download models")
    add("--threads", default=default, type=int, metavar="N", help="ONNX runtime threads")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferrex",
        description=(
            "Local-first long-term memory MCP server (stdio). Without a command, serves MCP."
        ),
    )
    parser.add_argument("--version", action="version", version=f"ferrex {__version__}")
    _common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    _common(common, suppress=True)
    commands.add_parser("serve", parents=[common], help="start the MCP server on stdio (default)")
    doctor = commands.add_parser(
        "doctor", parents=[common], help="check SQLite and the vector index agree"
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable report")
    doctor.add_argument(
        "--repair", action="store_true", help="fix orphans both ways and replay the journal"
    )
    commands.add_parser(
        "rebuild-index", parents=[common], help="recreate the vector index from SQLite"
    )
    export = commands.add_parser(
        "export",
        parents=[common],
        help="write every memory as JSON lines",
        description="Write every memory, entity and audit entry as JSON lines. With "
        "--namespace NS only that namespace is exported.",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    export.add_argument(
        "--only-namespace", dest="only_namespace", metavar="NS", help=argparse.SUPPRESS
    )
    importer = commands.add_parser(
        "import", parents=[common], help="restore memories from an export file"
    )
    importer.add_argument("file", metavar="FILE", help="export file (JSON lines); '-' for stdin")
    importer.add_argument(
        "--batch",
        type=int,
        default=IMPORT_BATCH,
        metavar="N",
        help=f"memories per batch (default {IMPORT_BATCH})",
    )
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
        "log_level": getattr(args, "log_level", None),
        "offline": True if getattr(args, "offline", None) else None,
        "threads": getattr(args, "threads", None),
    }
    config = getattr(args, "config", None)
    staleness = getattr(args, "staleness_config", None)
    settings, warnings = load_settings(
        cli=cli,
        config_path=Path(config).expanduser() if config else None,
        staleness_path=Path(staleness).expanduser() if staleness else None,
    )
    configure(settings.log_level)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return settings, "model_tier" in settings.model_fields_set


def _fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings, explicit_tier = _settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = args.command or "serve"
    from ferrex.bootstrap import DataDirError, ensure_data_dir

    try:
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
    try:
        if command == "serve":
            return _serve(settings, explicit_tier)
        if command == "doctor":
            return _doctor(settings, explicit_tier, as_json=args.json, repair=args.repair)
        if command == "rebuild-index":
            return _rebuild(settings, explicit_tier)
        if command == "export":
            return _export(settings, explicit_tier, args.output, getattr(args, "namespace", None))
        if command == "import":
            return _import(settings, explicit_tier, args.file, args.batch)
    except CliError as exc:
        return _fail(exc.message)
    parser.error(f"unknown command {command}")
    return 2


# --------------------------------------------------------------------------- backend


def _backend(settings: Settings, explicit_tier: bool) -> Any:
    from ferrex.bootstrap import Options, build_service, ensure_data_dir
    from ferrex.runtime.operations import dispatch, hello_request, warn_overridden
    from ferrex.runtime.shared import SharedBackend

    ensure_data_dir(settings.data_dir)
    return SharedBackend(
        settings.data_dir,
        lambda: build_service(settings, Options(explicit_model_tier=explicit_tier)),
        dispatch,
        hello=hello_request(settings, explicit_tier),
        on_join=lambda reply, pid: warn_overridden(settings, reply, pid),
    )


def _serve(settings: Settings, explicit_tier: bool) -> int:
    from ferrex.server.app import run

    return run(_backend(settings, explicit_tier), settings.namespace)


def _operate(settings: Settings, explicit_tier: bool, op: str, arguments: dict[str, Any]) -> Any:
    return _session(settings, explicit_tier, lambda backend: backend.call(op, arguments))


def _session(settings: Settings, explicit_tier: bool, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``work(backend)`` against this data dir's engine (started here or already running).

    Any failure (a refusal such as a model mismatch, an unreadable database, ...) becomes a
    ``CliError`` with one line to show, whether or not a task group wrapped it.
    """
    backend = _backend(settings, explicit_tier)

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
        return CliError(failure.message, failure.code)
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


def _doctor(settings: Settings, explicit_tier: bool, *, as_json: bool, repair: bool) -> int:
    try:
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
        f"[ok  ] vector index mode: {report['mode']}",
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
    if "repaired" in report:
        lines.append(f"      repaired: {report['repaired']}")
    lines.append(
        "SQLite and the index agree."
        if report["in_agreement"]
        else "SQLite and the index DISAGREE: run `ferrex doctor --repair`."
    )
    return "\n".join(lines) + "\n"


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
    from ferrex.core.service import (
        PIN_DIMENSION,
        PIN_NAME,
        PIN_SOURCE,
        PIN_VARIANT,
        REBUILD_PENDING,
        REBUILD_TARGET,
        REBUILD_TARGET_VARIANT,
    )
    from ferrex.store.sqlite import MetadataStore

    meta = MetadataStore(settings.db_path)
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
        total: dict[str, Any] = {"imported": 0, "duplicates": [], "entities": len(entities)}
        starts = range(0, max(1, len(memories)), size)
        show(0, len(memories))
        for number, start in enumerate(starts):
            batch = memories[start : start + size]
            last = number == len(starts) - 1
            payload = header + entities + batch + (audit if last else [])
            result = await backend.call("import", {"records": payload})
            total["imported"] += result["imported"]
            total["duplicates"].extend(result["duplicates"])
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

    if batch < 1:
        raise CliError("--batch must be at least 1")
    records = _read_records(path)
    try:
        check_records(records)  # a bad file imports nothing: check every line first
    except FerrexError as exc:
        raise CliError(exc.message, exc.code) from None
    result = _import_batches(settings, explicit_tier, records, batch)
    print(
        f"imported {result['imported']} memories; {len(result['duplicates'])} already present "
        f"(kept as they were); {result['entities']} entities",
        file=sys.stderr,
    )
    if result["duplicates"]:
        print("duplicates: " + ", ".join(result["duplicates"][:50]), file=sys.stderr)
    return 0

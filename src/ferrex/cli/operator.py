"""The operator commands: serve, init, doctor, rebuild-index, migrate-index, export, import."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

from ferrex import __version__
from ferrex.cli.common import CliError, require_store
from ferrex.cli.render import progress, render_doctor
from ferrex.cli.session import cli_error, open_backend, operate, session
from ferrex.config import Settings, model_path_problem


def startup_fields(settings: Settings) -> dict[str, Any]:
    """What the one start-up line says: mode, data dir, model and reranker status."""
    from ferrex.cli.models import store_pin
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


def serve_stdio(settings: Settings, explicit_tier: bool) -> int:
    from ferrex.server.app import run

    def announce() -> None:
        # The one start-up line, said when the engine opens (after the handshake): its model
        # and reranker status come from fastembed's model list, a 0.2 s import.
        structlog.get_logger("ferrex").info("ferrex starting", **startup_fields(settings))

    return run(
        open_backend(settings, explicit_tier),
        settings.namespace,
        settings.retrieval.max_limit,
        announce=announce,
    )


def serve_http(settings: Settings, explicit_tier: bool, bind_text: str) -> int:
    from ferrex.server.http import HttpSetupError, parse_bind, resolve_token, run_http

    try:
        bind = parse_bind(bind_text)
        token = resolve_token(settings.http_token, settings.data_dir, bind)
    except HttpSetupError as exc:
        raise CliError(str(exc)) from None
    structlog.get_logger("ferrex").info(
        "ferrex starting", http=bind.url, **startup_fields(settings)
    )
    return run_http(open_backend(settings, explicit_tier), bind, token, settings.namespace)


def migrate_index(settings: Settings, explicit_tier: bool, target: str) -> int:
    """Rebuild the index from SQLite in ``target`` and switch the store to it (this process
    must own the data dir). The store keeps its old mode until the rebuild has finished."""
    from ferrex.bootstrap import INDEX_MODE, Options, build_service
    from ferrex.core.ops.rebuild import rebuild
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
            result = rebuild(service, progress(f"rebuilding the index ({target})"))
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
        raise cli_error(exc, settings) from None
    finally:
        lock.release()
    return 0


def init_store(settings: Settings, explicit_tier: bool) -> int:
    """Create the store (data dir, database, index, model pin) as the first server start does."""
    existed = settings.db_path.expanduser().is_file()
    stats = operate(settings, explicit_tier, "init", {})
    total = stats.get("total", 0) if isinstance(stats, dict) else 0
    state = f"already holds a store ({total} memories)" if existed else "now holds an empty store"
    sys.stdout.write(f"ferrex: {settings.data_dir.expanduser()} {state}\n")
    return 0


def doctor(
    settings: Settings, explicit_tier: bool, *, as_json: bool, repair: bool, full: bool = False
) -> int:
    try:
        require_store(settings)
        report = operate(settings, explicit_tier, "doctor", {"repair": repair, "full": full})
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


def rebuild_index(settings: Settings, explicit_tier: bool) -> int:
    """Rebuild in this process (it must own the data dir: a model change needs exclusive access)."""
    from ferrex.bootstrap import Options, build_service, ensure_data_dir, load_requested_model
    from ferrex.core.errors import FerrexError
    from ferrex.core.ops.rebuild import rebuild
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
            result = rebuild(service, progress("rebuilding index"), repin=explicit_tier)
        finally:
            service.close()
    except Exception as exc:
        raise cli_error(exc, settings) from None
    finally:
        lock.release()
    print(json.dumps(result), file=sys.stderr)
    return 0


def _unpin_for_rebuild(settings: Settings, embedder: Any) -> None:
    from ferrex.core.index.pins import (
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


def export(
    settings: Settings, explicit_tier: bool, output: str | None, namespace: str | None
) -> int:
    if output:
        _check_output(output)
    lines = operate(settings, explicit_tier, "export", {"namespace": namespace})
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
    show = progress("importing")

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

    result: dict[str, Any] = session(settings, explicit_tier, work)
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


def import_file(settings: Settings, explicit_tier: bool, path: str, batch: int) -> int:
    from ferrex.core.errors import FerrexError
    from ferrex.core.ops.export_format import check_records
    from ferrex.core.secrets.scanner import SecretScanner
    from ferrex.core.secrets.sweep import refuse_secrets

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

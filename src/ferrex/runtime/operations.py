"""The engine's dispatch (every operation of ``ferrex.registry``, for its own MCP session, for
peers and for operator commands), the use cases of the operations that are no tool, and the
settings a joining process is told."""

from __future__ import annotations

import errno
from typing import Any

import structlog

from ferrex.config import Settings
from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.ops import doctor as doctor_ops
from ferrex.core.ops import rebuild as rebuild_ops
from ferrex.core.ops import transfer
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_operation
from ferrex.server.presenter import present_memory, present_namespaces

log = structlog.get_logger("ferrex.engine")

# The settings that belong to the engine (one per data dir) and are told to a joining process
# (``hello``): an allow-list, so a setting added later crosses only once someone puts it here
# (tests/test_layering.py makes every setting choose a side). What stays in each process: where
# the store is, the namespace (it travels with every call), the logs, ``model_tier`` (checked on
# joining instead) and the secrets (``qdrant_api_key``, ``http_token``), which never leave it.
ENGINE_SETTINGS = frozenset(
    {
        "model_path",
        "models_dir",
        "offline",
        "offline_fallback",
        "rerank",
        "reranker_tier",
        "reranker_path",
        "qdrant_url",
        "qdrant_bin",
        "threads",
        "runtime_spin",
        "secret_handling",
        "retrieval",
        "recency",
        "dedup",
        "conflict",
        "predicates",
        "entities",
        "staleness",
        "lifecycle",
        "cache",
        "limits",
        "secrets",
        "qdrant",
    }
)
PROCESS_SETTINGS = frozenset(
    {
        "data_dir",
        "namespace",
        "log_level",
        "log_format",
        "log_file",
        "model_tier",
        "qdrant_api_key",
        "http_token",
    }
)
_MAX_NAMED = 20


def engine_settings(settings: Settings) -> dict[str, Any]:
    """The settings that belong to the engine (one per data dir), as plain JSON values."""
    return settings.model_dump(mode="json", include=set(ENGINE_SETTINGS))


def hello(service: MemoryService, arguments: dict[str, Any]) -> dict[str, Any]:
    """A peer joins: refuse it (``model_mismatch``) if it was configured for another model,
    else tell it the engine's settings."""
    model = arguments.get("model")
    if isinstance(model, str) and model:
        dimension = arguments.get("dimension")
        source = arguments.get("source")
        service.check_peer_model(
            model,
            dimension if isinstance(dimension, int) else None,
            source if isinstance(source, str) and len(source) <= 80 else None,
        )
    return {"settings": engine_settings(service.settings)}


def overridden_settings(mine: dict[str, Any], engine: dict[str, Any]) -> list[str]:
    """Dotted names of the settings whose value in this process differs from the engine's."""
    names: list[str] = []

    def walk(a: Any, b: Any, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key), b.get(key), f"{prefix}{key}.")
        elif a != b:
            names.append(prefix.rstrip("."))

    walk(mine, engine, "")
    return names


def warn_overridden(settings: Settings, reply: dict[str, Any], engine_pid: int | None) -> None:
    """Log (stderr) which of this process's settings the shared engine overrides."""
    engine = reply.get("settings")
    if not isinstance(engine, dict):
        return
    names = overridden_settings(engine_settings(settings), engine)
    if names:
        log.warning(
            "joined the running ferrex engine: these settings of this process do not apply, "
            "the engine's do (restart every ferrex on this data dir with the same settings)",
            overridden=names[:_MAX_NAMED],
            more=max(0, len(names) - _MAX_NAMED),
            engine_pid=engine_pid,
        )


# What a full disk looks like: SQLite's SQLITE_FULL, the OS's ENOSPC / EDQUOT, and the engine's
# own wording of them (it wraps the OS error in its message).
_SQLITE_FULL = 13
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "database or disk is full")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the file system holding the store is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if any(words in str(current).lower() for words in _FULL_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


def _space_error(exc: BaseException) -> errors.StorageSpaceError | None:
    """The space check that refused (how much is needed), if one did."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None or isinstance(current, errors.StorageSpaceError):
            return current
        current = current.__cause__ or current.__context__
    return None


def dispatch(
    service: MemoryService, op: str, arguments: dict[str, Any], key: str | None = None
) -> Any:
    """Run an operation; a write the disk cannot hold answers ``storage_full`` (the data dir's
    path goes to stderr, never to the agent). ``key``: a forwarded write's idempotency key."""
    try:
        return run_operation(service, op, arguments, key)
    except FerrexError:
        raise
    except Exception as exc:
        if not disk_full(exc):
            raise
        log.error(
            "the disk holding the store is full",
            data_dir=str(service.settings.data_dir),
            operation=op,
            error=repr(exc)[:300],
        )
        raise errors.storage_full(_space_error(exc)) from exc


# ---- the use cases of the operations that are no tool (``ferrex.registry`` names them)


def ping(service: MemoryService, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


def init(service: MemoryService, arguments: dict[str, Any]) -> Any:
    """What a server's first start does: the model pinned, the index created; then stats."""
    service.ensure_ready()
    return run_operation(service, "stats", arguments)


def doctor(service: MemoryService, arguments: dict[str, Any]) -> Any:
    return doctor_ops.doctor(
        service, repair=bool(arguments.get("repair")), full=bool(arguments.get("full"))
    )


def export(service: MemoryService, arguments: dict[str, Any]) -> list[Any]:
    return list(transfer.export_lines(service, arguments.get("namespace")))


def import_batch(service: MemoryService, arguments: dict[str, Any]) -> Any:
    return transfer.import_records(service, list(arguments.get("records") or []))


def rebuild_index(service: MemoryService, arguments: dict[str, Any]) -> Any:
    return rebuild_ops.rebuild(service)


def memory(service: MemoryService, arguments: dict[str, Any]) -> dict[str, Any]:
    return present_memory(service.memory(str(arguments.get("id", ""))))


def namespaces(service: MemoryService, arguments: dict[str, Any]) -> dict[str, Any]:
    default = arguments.get("namespace") or service.settings.namespace
    return present_namespaces(service.namespaces(), str(default))

"""The engine an operator or tool command talks to (started here, or a running server's), and
one line for the operator when it fails."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from ferrex.cli.common import CliError
from ferrex.config import Settings


def open_backend(settings: Settings, explicit_tier: bool, *, warm_up: bool = True) -> Any:
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


def operate(settings: Settings, explicit_tier: bool, op: str, arguments: dict[str, Any]) -> Any:
    return session(settings, explicit_tier, lambda backend: backend.call(op, arguments))


def session(settings: Settings, explicit_tier: bool, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``work(backend)`` against this data dir's engine (started here or already running).

    Any failure (a refusal such as a model mismatch, an unreadable database, ...) becomes a
    ``CliError`` with one line to show, whether or not a task group wrapped it.
    """
    # No background warm-up: each operation loads what it needs, and nothing is left running
    # in native code when the command exits.
    backend = open_backend(settings, explicit_tier, warm_up=False)

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
        raise cli_error(exc, settings) from None


def _first_failure(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def cli_error(exc: BaseException, settings: Settings) -> CliError:
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

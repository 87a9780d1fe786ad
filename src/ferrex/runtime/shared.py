"""One engine per data dir, many clients.

Qdrant Edge (and SQLite's single writer) want one owner per data dir, but Claude Desktop and
Claude Code each start their own ``ferrex``. The first process to take ``<data dir>/ferrex.lock``
owns the store (the *engine*) and serves the others over a Unix socket in the data dir (0600 in
the 0700 data dir: the same user only), speaking MCP with the SDK's own transport (see
``ferrex.runtime.link``). The others are thin peers that forward tool calls. When the owner
exits, a peer takes the lock and becomes the engine itself: no agent ever sees a lock error.

A peer joins with a ``hello``: the engine refuses one configured for another embedding model
(exactly as the store refuses a process that opens it) and tells it its settings, so the peer
can say which of its own settings the shared engine overrides. A takeover that fails leaves the
process up, answering every call with the error.

No call fails because another process left (docs/modes.md): a leaving engine finishes the calls
in flight before it lets go of the store, and a call whose engine died (SIGKILL) is sent again
to the process that took over; a write is sent with an idempotency key recorded in its own
transaction (``ferrex.core.call_keys``), so it is applied exactly once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import structlog

from ferrex import registry
from ferrex.config import Settings
from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.embed.models import EMBEDDING_TIERS
from ferrex.runtime.link import DRAIN_SECONDS, LEAVING, EngineConnection, EngineServer
from ferrex.runtime.ownership import OwnerLock, attached, socket_path

log = structlog.get_logger("ferrex.engine")

_WATCH_SECONDS = 0.2  # how often a peer checks that the engine process still holds the lock
# How long reaching (or becoming) the engine may take: a leaving engine finishes the calls in
# flight first, and the process taking over opens the store and loads the model.
_HANDOVER_SECONDS = 90.0


class Backend(Protocol):
    """What the MCP layer calls: one coroutine per tool or operator command."""

    role: str

    async def call(self, op: str, arguments: dict[str, Any]) -> Any: ...

    async def aclose(self) -> None: ...


def hello_request(settings: Settings, explicit_model_tier: bool) -> dict[str, Any]:
    """What a process says when it joins a running engine: the model it was told to use."""
    if not explicit_model_tier:
        return {}  # it follows the store, as it would alone
    tier = EMBEDDING_TIERS[settings.model_tier]
    # What set it (a flag, a variable, a config key; never a path): the refusal names it.
    return {"model": tier.model, "dimension": tier.dimension, "source": settings.model_tier_source}


class _Threaded:
    """Run blocking callables in worker threads, serialising nothing (the service locks)."""

    def __init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(8)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)


_PAUSE_VARIABLE = "FERREX_TEST_PAUSE_AT"


def _pause_before_answer() -> None:
    """The test-only fault hook (``FERREX_TEST_PAUSE_AT=before_answer``): a forwarded write
    is applied and its answer not yet sent. Production never sets the variable."""
    from ferrex.core.index.sync import PHASE_BEFORE_ANSWER, checkpoint

    checkpoint(PHASE_BEFORE_ANSWER)


EngineFactory = Callable[[], Any]
JoinCheck = Callable[[dict[str, Any], int | None], None]
_LINK_ERRORS = (
    ConnectionError,
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)


class SharedBackend:
    """The backend of one ferrex process: engine (owner) or peer, with takeover on owner exit."""

    def __init__(
        self,
        data_dir: Path,
        make_engine: EngineFactory,
        dispatch: Callable[[Any, str, dict[str, Any], str | None], Any],
        hello: dict[str, Any] | None = None,
        on_join: JoinCheck | None = None,
        *,
        warm_up: bool = True,
    ) -> None:
        self.data_dir = data_dir
        # A server warms up in the background (model, journal replay, index upkeep, reranker)
        # so its first call is fast; a one-shot operator command does only what it needs.
        self.warm_up = warm_up
        self.make_engine = make_engine
        self.dispatch = dispatch
        # Sent to a running engine on joining it: the engine refuses a peer configured for
        # another model (as the store refuses a process that opens it), and answers with its
        # settings, which ``on_join`` compares with this process's own.
        self.hello = hello or {}
        self.on_join = on_join
        # Set when taking over the engine failed for a reason retrying cannot fix (another
        # model, an unusable store): every call answers with it, the process stays up.
        self.failure: FerrexError | None = None
        self.lock = OwnerLock(data_dir)
        self.sock = socket_path(data_dir)
        self.role = "starting"
        self.engine: Any = None
        self._threads = _Threaded()
        self._server: EngineServer | None = None
        self._connection: EngineConnection | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._switch = anyio.Lock()
        self._warm: threading.Thread | None = None
        self._closing = False
        self._in_flight = 0  # peers' calls being served (a leaving engine finishes them)
        self._leaving = False  # draining: new calls from peers are refused with LEAVING
        self._drained = anyio.Event()

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        # Attached for this process's lifetime: the owner leaving stops the Qdrant sidecar
        # only when no other ferrex process is attached (see ``AttachLock``).
        await anyio.to_thread.run_sync(attached(self.data_dir).acquire)
        await self._become_something()

    async def _become_something(self) -> None:
        deadline = anyio.current_time() + _HANDOVER_SECONDS
        while anyio.current_time() < deadline:
            if self.lock.try_acquire():
                await self._become_engine()
                return
            assert self._task_group is not None
            try:
                connection = await EngineConnection.connect(self.sock, self._task_group)
            except OSError:
                await anyio.sleep(0.05)
                continue
            try:
                reply = await connection.request("hello", self.hello)
            except _LINK_ERRORS:
                # The engine went away meanwhile, or is leaving: take over, or reach the next.
                await connection.aclose()
                await anyio.sleep(0.05)
                continue
            except FerrexError:
                await connection.aclose()  # refused (e.g. another model): as if alone
                raise
            self._task_group.start_soon(self._watch, connection)
            owner = self.lock.owner_pid()
            if self.on_join is not None:
                self.on_join(reply if isinstance(reply, dict) else {}, owner)
            self._connection = connection
            self.role = "peer"
            log.info("connected to the running ferrex engine", pid=owner)
            return
        raise FerrexError(errors.UNAVAILABLE, "could not reach or start the ferrex engine")

    async def _watch(self, connection: EngineConnection) -> None:
        """When the engine process goes away (its lock is free, or the link closed), take over
        (or reconnect) right away, not only at the next call."""
        while not connection.closed.is_set() and not self._closing:
            if await anyio.to_thread.run_sync(self.lock.is_free):
                break
            with anyio.move_on_after(_WATCH_SECONDS):
                await connection.closed.wait()
        if not self._closing:
            # A failed takeover is answered to every call (``self.failure``), never raised
            # into the task group: that would end the MCP session.
            with contextlib.suppress(FerrexError):
                await self._recover(connection)

    async def _become_engine(self) -> None:
        try:
            self.engine = await self._threads.run(self.make_engine)
        except BaseException:
            # Not the engine after all: let another process (configured right) own the store.
            self.lock.release()
            raise
        if self.role != "starting":  # the first engine's start-up line says so already
            log.info("took the store over: this process is the ferrex engine now")
        self.role = "engine"
        self._server = EngineServer(self.sock, self._serve_peer, self._drain)
        assert self._task_group is not None
        await self._task_group.start(self._server.serve)
        warm = getattr(self.engine, "warm_up", None) if self.warm_up else None
        if warm is not None:
            self._warm = threading.Thread(target=warm, name="ferrex-warm-up", daemon=True)
            self._warm.start()
        index = getattr(self.engine, "index", None)
        log.debug(
            "ferrex engine started",
            pid=os.getpid(),
            index_mode=getattr(index, "mode", None),
            why=getattr(index, "reason", None) or None,
        )

    async def _serve_peer(self, op: str, arguments: dict[str, Any], key: str | None) -> Any:
        if self._leaving:
            raise FerrexError(LEAVING, "this ferrex engine is handing the store over")
        self._in_flight += 1
        try:
            result = await self._threads.run(self.dispatch, self.engine, op, arguments, key)
        finally:
            self._in_flight -= 1
        if key is not None and _PAUSE_VARIABLE in os.environ:
            await self._threads.run(_pause_before_answer)
        return result

    async def _drain(self) -> None:
        """Leaving: refuse new calls from peers (they send them again to the process taking
        over), finish those in flight (``DRAIN_SECONDS`` at most); then the store is closed and
        handed over."""
        if self._leaving:  # already draining (a signal and the end of input both stop it)
            await self._drained.wait()
            return
        self._leaving = True
        in_flight = self._in_flight
        with anyio.move_on_after(DRAIN_SECONDS):
            while self._in_flight:
                await anyio.sleep(0.01)
        self._drained.set()
        log.info(
            "leaving: the peers' calls in flight are answered",
            drained=in_flight,
            unfinished=self._in_flight,
        )

    async def call(self, op: str, arguments: dict[str, Any]) -> Any:
        """Run one operation here (engine) or on the engine process (peer). When the engine
        process goes away mid-call, the call waits for the takeover and is sent again: reads
        as they are, writes with the idempotency key they were first sent with."""
        key: str | None = None
        spec = registry.get(op)
        deadline = anyio.current_time() + _HANDOVER_SECONDS
        while anyio.current_time() < deadline:
            if self.failure is not None:
                raise self.failure
            if self.role == "engine":
                return await self._threads.run(self.dispatch, self.engine, op, arguments, key)
            connection = self._connection
            if connection is None or connection.closed.is_set():
                # The engine went away: wait for the takeover (or reconnection), then send.
                await self._recover(connection)
                continue
            if key is None and spec is not None and spec.keyed:
                key = uuid.uuid4().hex  # one per call: every attempt carries the same
            try:
                return await connection.request(op, arguments, key)
            except _LINK_ERRORS as exc:
                # Reads, keyed writes and idempotent ones (``Operation.resend``); not the
                # operator commands that change the store (import, rebuild, doctor --repair):
                # their caller is told to check and retry.
                resend = spec is not None and spec.resend(arguments)
                if resend:
                    # Applied at most once: ask the engine that takes over (or this process).
                    log.info(
                        "the engine went away mid-call: sending it again once the store is "
                        "handed over",
                        op=op,
                        link_error=str(exc)[:120],
                    )
                await self._recover(connection)
                if resend:
                    continue
                raise FerrexError(
                    errors.UNAVAILABLE,
                    "the ferrex engine process restarted during this call; it may or may not "
                    "have been applied. Check, then retry.",
                ) from None
        raise FerrexError(errors.UNAVAILABLE, "the ferrex engine is restarting; retry shortly")

    async def _recover(self, dead: EngineConnection | None) -> None:
        async with self._switch:
            if self.failure is not None:
                raise self.failure
            if self._connection is not dead or self.role == "engine":
                return
            self._connection = None
            try:
                await self._become_something()
            except anyio.get_cancelled_exc_class():
                raise
            except FerrexError as exc:
                if exc.code != errors.UNAVAILABLE:  # unavailable: the next call tries again
                    self._fail(exc)
                raise
            except Exception as exc:
                error = FerrexError(
                    errors.INTERNAL,
                    "this ferrex process could not take over the store after the engine "
                    "process exited; see its log, then restart it",
                )
                self._fail(error, cause=exc)
                raise error from None

    def _fail(self, error: FerrexError, cause: BaseException | None = None) -> None:
        self.failure = error
        self.role = "failed"
        log.error(
            "taking over the ferrex engine failed; every tool call answers with this error",
            code=error.code,
            error=error.message,
            **({"cause": repr(cause)[:300]} if cause is not None else {}),
        )

    async def aclose(self, *, wait_for_warm_up: bool = True) -> None:
        """Close this process's side. ``wait_for_warm_up=False`` when the process leaves with
        ``os._exit`` next (signals, fatal start-up), which skips the interpreter teardown."""
        if self._closing:
            return
        self._closing = True
        if wait_for_warm_up and self._warm is not None and self._warm.is_alive():
            # Native code aborts the interpreter at exit while another thread is inside it
            # (onnxruntime building the model's session: "terminate called without an active
            # exception"; gRPC creating the sidecar's collection): let the warm-up finish
            # first, still serving peers meanwhile.
            await anyio.to_thread.run_sync(self._warm.join, 60.0)
            if self._warm.is_alive():
                log.warning("closing while the start-up work is still running (over 60 s)")
        if self._server is not None:
            await self._server.aclose()  # drains first (``_drain``)
        if self._connection is not None:
            await self._connection.aclose()
        if self.engine is not None:
            close = getattr(self.engine, "close", None)
            if close is not None:
                await anyio.to_thread.run_sync(close)
        self.lock.release()
        attached(self.data_dir).release()

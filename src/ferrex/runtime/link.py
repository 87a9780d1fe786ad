"""The link between ferrex processes: MCP over the engine's Unix socket.

The engine serves an MCP server of its own (``ferrex-engine``: every operation of
``ferrex.registry``: the five tools plus what peers, operator commands, the resources and the
memory browser send) with the ``mcp`` SDK's streamable-HTTP transport, bound to
``<data dir>/ferrex.sock`` (mode 0600 in the 0700 data dir) instead of a TCP port: the same
protocol and SDK code as the team server (``ferrex serve --http``), no framing of our own.
It runs stateless (each call stands alone, so an idle peer never loses a session) and answers
JSON. A peer holds one SDK ``Client`` on the socket.

Results travel as ``{"result": value}`` structured content; refusals as tool errors with the
engine's ``{"error": {"code", "message", ...}}``, raised again as the same ``FerrexError`` in
the peer. A failure of the link itself is a ``ConnectionError`` (the caller takes over or
reconnects).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings

from ferrex import __version__, registry
from ferrex.core import errors
from ferrex.core.errors import FerrexError

# Everything a peer or an operator command may send to the engine (its MCP tools on the
# socket): every operation of the registry (which imports no engine code).
ENGINE_OPS = registry.NAMES

log = structlog.get_logger("ferrex.engine")

ENGINE_URL = "http://ferrex-engine/mcp"  # the host is a label: the socket is the address
MAX_BODY = 64 * 1024 * 1024  # an import batch of many memories
_LONG_CALL_SECONDS = 3600.0  # an import batch or a doctor --repair may take long
DRAIN_SECONDS = 10  # a leaving engine waits this long for the peers' calls in flight

# A write a peer forwards carries its idempotency key in the call's ``_meta`` (never in the
# arguments: no tool takes it, and agents never see it; see ``ferrex.core.call_keys``).
KEY_META = "ferrex/idempotency-key"
# The code a leaving engine refuses a call with (never run; never reaches an agent: the peer
# sends the call again to the process that takes the store over).
LEAVING = "engine_leaving"
_MAX_KEY_CHARS = 80

Handler = Callable[[str, dict[str, Any], str | None], Awaitable[Any]]


def _key_of(params: types.CallToolRequestParams) -> str | None:
    key = (params.meta or {}).get(KEY_META)
    return key if isinstance(key, str) and 0 < len(key) <= _MAX_KEY_CHARS else None


def _engine_mcp(handler: Handler) -> Server[Any]:
    tools = [
        types.Tool(
            name=op, description=f"ferrex engine operation {op}", input_schema={"type": "object"}
        )
        for op in ENGINE_OPS
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            result = await handler(params.name, arguments, _key_of(params))
            payload: dict[str, Any] = {"result": result}
            failed = False
        except FerrexError as exc:
            payload, failed = {"error": exc.to_dict()}, True
        except Exception as exc:  # never crash the engine for one bad request
            log.error("engine request failed", op=params.name[:40], error=repr(exc)[:300])
            payload = {"error": {"code": errors.INTERNAL, "message": "internal error"}}
            failed = True
        text = json.dumps(payload, ensure_ascii=False, default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=json.loads(text),
            is_error=failed,
        )

    return Server(
        "ferrex-engine",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _private_unix_socket(path: Path) -> socket.socket:
    if path.exists() or path.is_symlink():
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # 0600 from the start: no window where others could connect
    try:
        sock.bind(str(path))
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    sock.listen(128)
    sock.setblocking(False)
    return sock


class EngineServer:
    """Serves the engine's MCP server to peer processes on the Unix socket.

    Stopping (cancelled, or ``aclose``) first awaits ``drain``: the engine answers the calls in
    flight and refuses new ones with ``LEAVING`` (the peer sends them again to the process
    that takes over); then the listener stops."""

    def __init__(
        self, path: Path, handler: Handler, drain: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.path = path
        self.handler = handler
        self.drain = drain
        self._uvicorn: Any = None
        self._done = anyio.Event()

    async def serve(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        import uvicorn

        sock = _private_unix_socket(self.path)
        app = _engine_mcp(self.handler).streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            max_request_body_size=MAX_BODY,
            # The socket is private to this user; there is no browser to guard against.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        logging.getLogger("uvicorn").setLevel(logging.WARNING)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

        class QuietServer(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # signals belong to the ferrex process, not to this listener

        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            # A leaving engine finishes the calls in flight before it hands the store over.
            timeout_graceful_shutdown=DRAIN_SECONDS,
        )
        server = self._uvicorn = QuietServer(config)

        async def run() -> None:
            # Shielded: cancelling uvicorn mid-flight logs a traceback from its lifespan;
            # a cancellation of ``serve`` asks it to stop instead (below).
            with anyio.CancelScope(shield=True):
                try:
                    await server.serve(sockets=[sock])
                finally:
                    sock.close()
                    self._done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            task_status.started()  # bound and listening: connections wait in the backlog
            try:
                await self._done.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop()

    async def _stop(self) -> None:
        if self.drain is not None:
            await self.drain()
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            with anyio.move_on_after(DRAIN_SECONDS + 2):
                await self._done.wait()

    async def aclose(self) -> None:
        """Finish the calls in flight, stop taking calls (``DRAIN_SECONDS`` at most each)."""
        await self._stop()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class EngineConnection:
    """A peer's MCP client session with the engine over the Unix socket."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.closed = anyio.Event()
        self._stop = anyio.Event()

    @classmethod
    async def connect(cls, path: Path, task_group: anyio.abc.TaskGroup) -> EngineConnection:
        """Open a session (held by a task in ``task_group``); ``ConnectionError`` if none."""
        if not path.exists():
            raise ConnectionError("no engine socket")
        connection = cls()
        ready = anyio.Event()

        async def hold() -> None:
            try:
                http = httpx2.AsyncClient(
                    transport=httpx2.AsyncHTTPTransport(uds=str(path)),
                    timeout=httpx2.Timeout(30.0, read=_LONG_CALL_SECONDS),
                )
                async with http, Client(streamable_http_client(ENGINE_URL, http_client=http)) as c:
                    connection.client = c
                    ready.set()
                    await connection._stop.wait()
            except Exception as exc:  # the engine went away: the link is closed, nothing more
                log.debug("engine link closed", error=repr(exc)[:200])
            finally:
                connection.client = None
                connection.closed.set()
                ready.set()

        task_group.start_soon(hold)
        await ready.wait()
        if connection.client is None:
            raise ConnectionError("could not open a session with the engine")
        return connection

    async def request(self, op: str, arguments: dict[str, Any], key: str | None = None) -> Any:
        """Send one operation; ``key``: a write's idempotency key (sent in ``_meta``)."""
        client = self.client
        if client is None or self.closed.is_set():
            raise ConnectionError("engine connection closed")
        meta: Any = {KEY_META: key} if key is not None else None
        try:
            result = await client.call_tool(op, arguments, meta=meta)
        except Exception as exc:
            raise ConnectionError(
                f"engine link failed: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        payload = result.structured_content
        if payload is None and result.content:
            payload = json.loads(getattr(result.content[0], "text", "null") or "null")
        if not isinstance(payload, dict):
            raise ConnectionError("the engine sent an unreadable answer")
        if result.is_error:
            error = payload.get("error") or {}
            if error.get("code") == LEAVING:  # not applied: send it to the next engine
                raise ConnectionError("the engine is handing the store over")
            raise FerrexError(**_error_fields(error))
        return payload.get("result")

    async def aclose(self) -> None:
        self._stop.set()
        with anyio.move_on_after(5):
            await self.closed.wait()


def _error_fields(error: dict[str, Any]) -> dict[str, Any]:
    fields = dict(error)
    return {
        "code": fields.pop("code", errors.INTERNAL),
        "message": fields.pop("message", "error"),
        **fields,
    }

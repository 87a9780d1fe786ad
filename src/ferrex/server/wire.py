"""The stdio wire: every request line gets an answer, even one the MCP SDK cannot read.

The SDK's stdio transport drops a line that is not a valid JSON-RPC message (bad JSON, a lone
surrogate escape such as ``"\\udc00"``, a wrong ``jsonrpc`` field) without replying, so a
client waits for its answer forever. ``CheckedLines`` sits between stdin and the transport:
valid lines pass through unchanged; for an invalid one it sends the JSON-RPC error the spec
asks for (-32700 parse error, -32600 invalid request) with the request's id when it can be
read, ``null`` otherwise. Notifications (no id) get no reply, as JSON-RPC requires.

When stdin and stdout are pipes or sockets (as an MCP client spawns a server), lines are read
and answers written on the event loop itself (``LoopLines``, ``LoopWriter``): the SDK's own
file streams hand every read, write and flush to a worker thread and back, and each such hand-off
wakes two threads (docs/performance.md). Anything else (a terminal, a file) keeps them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
import structlog
from mcp.shared.message import SessionMessage

from ferrex.core.errors import FerrexError
from ferrex.core.requests import invalid_text_error, invalid_text_field

log = structlog.get_logger("ferrex.server")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


READ_CHUNK = 1 << 16


def _pipe_or_socket(fd: int) -> bool:
    """Whether the event loop can wait on ``fd`` (epoll refuses regular files; a terminal is
    left to the blocking streams, as it is shared with the shell)."""
    if sys.platform == "win32":
        return False
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def stdin_lines() -> Any:
    """UTF-8 lines of a private duplicate of fd 0 (closing it never closes the real stdin)."""
    if _pipe_or_socket(0):
        return LoopLines(os.dup(0))
    raw = os.fdopen(os.dup(0), "rb")
    # Invalid bytes become lone surrogates (never U+FFFD, which would store altered text): the
    # SDK refuses such a line and CheckedLines answers it (a tool call: invalid_params).
    return anyio.wrap_file(io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape"))


class LoopLines:
    """Lines of a pipe or socket, read on the event loop: wait until the descriptor is
    readable, then read what is there (a read after readiness does not block). Each line is
    decoded whole, invalid bytes as lone surrogates, as ``stdin_lines`` decodes them; a last
    line without its newline still counts."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending = bytearray()
        self._scanned = 0  # bytes of ``_pending`` known to hold no newline (a long line)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        try:
            while True:
                newline = self._pending.find(b"\n", self._scanned)
                if newline >= 0:
                    line = bytes(self._pending[: newline + 1])
                    del self._pending[: newline + 1]
                    self._scanned = 0
                    yield line.decode("utf-8", errors="surrogateescape")
                    continue
                self._scanned = len(self._pending)
                await anyio.wait_readable(self.fd)
                try:
                    chunk = os.read(self.fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    if self._pending:
                        yield bytes(self._pending).decode("utf-8", errors="surrogateescape")
                    return
                self._pending += chunk
        finally:
            with contextlib.suppress(OSError):
                os.close(self.fd)


class LoopWriter:
    """The SDK transport's stdout, written on the event loop: a non-blocking descriptor of the
    wire's own, written until all of a message is out (waiting for room when the pipe is full,
    so the loop serves other work meanwhile). ``flush`` has nothing left to do."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, text: str) -> int:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            data = data[written:]
        return len(text)

    async def flush(self) -> None:
        await anyio.lowlevel.checkpoint()


def _same_file(a: int, b: int) -> bool:
    try:
        first, second = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


@contextlib.contextmanager
def stdout_writer() -> Iterator[LoopWriter | None]:
    """A ``LoopWriter`` of the wire when stdout is a pipe or socket of its own (not stderr's
    too: non-blocking is a property of the file both would share), else None (the SDK's
    transport claims stdout itself). Meanwhile fd 1 points at stderr, as the SDK's own claim
    does: stray output of a library misses the wire. Restored on exit."""
    if not _pipe_or_socket(1) or _same_file(1, 2):
        yield None
        return
    import fcntl

    wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    os.set_blocking(wire, False)
    os.dup2(2, 1)
    try:
        yield LoopWriter(wire)
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(wire, True)
            os.dup2(wire, 1)
        with contextlib.suppress(OSError):
            os.close(wire)


def _has_id(line: str) -> bool:
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and "id" in message


class CheckedLines:
    """An async iterable of valid JSON-RPC lines for ``stdio_server(stdin=...)``."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.replies: Any = None
        self._ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        """The transport's write stream, for error replies (set once it exists)."""
        self.replies = write_stream
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self.source:
            if not line.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except Exception:  # any rejection by the SDK's own parser
                await self._reply_to(line)
                continue
            if isinstance(message, types.JSONRPCNotification) and _has_id(line):
                # An id the SDK cannot use (null, 9.5, true, [1]) turns a request into a
                # "notification" it never answers: answer it here.
                await self._send(
                    None, INVALID_REQUEST, "invalid request: id must be a string or an integer"
                )
                continue
            yield line

    async def _reply_to(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            await self._send(None, PARSE_ERROR, "parse error: the line is not valid JSON")
            return
        if not isinstance(message, dict):
            await self._send(None, INVALID_REQUEST, "invalid request: expected a JSON object")
            return
        raw_id = message.get("id")
        request_id = (
            raw_id if isinstance(raw_id, int | str) and not isinstance(raw_id, bool) else None
        )
        if request_id is None and "method" in message and "id" not in message:
            log.warning("dropped an invalid notification", method=str(message["method"])[:40])
            return
        if request_id is not None and message.get("method") == "tools/call":
            params = message.get("params")
            tool = str(params.get("name")) if isinstance(params, dict) else "tools/call"
            arguments = params.get("arguments") if isinstance(params, dict) else None
            field = invalid_text_field(arguments) if arguments is not None else None
            if field is not None:
                # Bad text in a tool parameter is the tool's invalid_params, as in-process.
                await self._send_tool_error(request_id, invalid_text_error(tool[:40], field))
                return
        reason = "not a valid JSON-RPC 2.0 message"
        try:
            json.dumps(message, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            reason = (
                "text must be valid Unicode: lone surrogate escapes such as \\udc00 are not allowed"
            )
        await self._send(request_id, INVALID_REQUEST, f"invalid request: {reason}")

    async def _send_tool_error(self, request_id: int | str, error: FerrexError) -> None:
        await self._ready.wait()
        # The same shape as every tool error (server/app.py ``tool_error``): JSON text, no
        # structured content (a client checks that against the tool's output schema).
        payload = {"error": error.to_dict()}
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
        result = types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
        reply = types.JSONRPCResponse(
            jsonrpc="2.0",
            id=request_id,
            result=result.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.replies.send(SessionMessage(reply))

    async def _send(self, request_id: int | str | None, code: int, message: str) -> None:
        await self._ready.wait()
        reply = types.JSONRPCError(
            jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
        )
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.replies.send(SessionMessage(reply))

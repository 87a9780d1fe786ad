"""The stdio wire: every request line gets an answer, even one the MCP SDK cannot read.

The SDK's stdio transport drops a line that is not a valid JSON-RPC message (bad JSON, a lone
surrogate escape such as ``"\\udc00"``, a wrong ``jsonrpc`` field) without replying, so a
client waits for its answer forever. ``CheckedLines`` sits between stdin and the transport:
valid lines pass through unchanged; for an invalid one it sends the JSON-RPC error the spec
asks for (-32700 parse error, -32600 invalid request) with the request's id when it can be
read, ``null`` otherwise. Notifications (no id) get no reply, as JSON-RPC requires.

When stdin and stdout are pipes or sockets (as an MCP client spawns a server), lines are read
and answers written on the event loop itself (``stdio_wire``): the SDK's own file streams hand
every read, write and flush to a worker thread and back, and each such hand-off wakes two
threads (docs/performance.md). Anything else (a terminal, a file) keeps them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

if sys.platform != "win32":
    import fcntl

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


class WireEnd:
    """One end of the client's pipe or socket, read or written without ever blocking and
    without changing a flag of a file another process may share (a launcher's own stdout, a
    socket that is stdin and stdout at once): a pipe is opened again through ``/proc/self/fd``
    (Linux: a file of this process's own on the same pipe) and made non-blocking; a socket is
    read and written with ``MSG_DONTWAIT``. Elsewhere (a terminal, a file, a macOS pipe) there
    is none and the SDK's blocking streams serve."""

    def __init__(self, fd: int, sock: socket.socket | None = None) -> None:
        self.fd = fd
        self.sock = sock

    @classmethod
    def of(cls, fd: int, *, writing: bool) -> WireEnd | None:
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISSOCK(mode) and hasattr(socket, "MSG_DONTWAIT"):
                own = os.dup(fd)
                try:
                    sock = socket.socket(fileno=own)
                except OSError:
                    os.close(own)
                    raise
                return cls(sock.fileno(), sock)
            if stat.S_ISFIFO(mode) and sys.platform.startswith("linux"):
                flags = (os.O_WRONLY if writing else os.O_RDONLY) | os.O_NONBLOCK | os.O_CLOEXEC
                return cls(os.open(f"/proc/self/fd/{fd}", flags))
        except OSError:
            pass
        return None

    def read(self, size: int) -> bytes:
        """What is there, up to ``size`` bytes (b"" at the end); BlockingIOError if nothing."""
        if self.sock is not None:
            return self.sock.recv(size, socket.MSG_DONTWAIT)
        return os.read(self.fd, size)

    def write(self, data: memoryview) -> int:
        """Bytes written (some, when the pipe is nearly full); BlockingIOError if none fit."""
        if self.sock is not None:
            return self.sock.send(data, socket.MSG_DONTWAIT)
        return os.write(self.fd, data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.sock is not None:
                self.sock.close()
            else:
                os.close(self.fd)


class LoopLines:
    """Lines of the wire, read on the event loop: wait until it is readable, read what is there.
    Each line is decoded whole, invalid bytes as lone surrogates (as ``stdin_lines`` decodes
    them, so ``CheckedLines`` answers such a line); a last line without its newline counts."""

    def __init__(self, end: WireEnd) -> None:
        self.end = end
        self._pending = bytearray()
        self._scanned = 0  # bytes of ``_pending`` known to hold no newline (a long line)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            newline = self._pending.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._pending[: newline + 1])
                del self._pending[: newline + 1]
                self._scanned = 0
                yield line.decode("utf-8", errors="surrogateescape")
                continue
            self._scanned = len(self._pending)
            await anyio.wait_readable(self.end.fd)
            try:
                chunk = self.end.read(READ_CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                if self._pending:
                    yield bytes(self._pending).decode("utf-8", errors="surrogateescape")
                return
            self._pending += chunk


class LoopWriter:
    """The SDK transport's stdout, written on the event loop until all of a message is out,
    waiting for room when the pipe is full (the loop serves other work meanwhile). A message
    is encoded and handed over whole, so no other write comes between its parts; ``flush`` has
    nothing left to do."""

    def __init__(self, end: WireEnd) -> None:
        self.end = end

    async def write(self, text: str) -> int:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = self.end.write(data)
            except BlockingIOError:
                await anyio.wait_writable(self.end.fd)
                continue
            data = data[written:]
        return len(text)

    async def flush(self) -> None:
        await anyio.lowlevel.checkpoint()


def stdin_lines() -> Any:
    """UTF-8 lines of a private duplicate of fd 0 (closing it never closes the real stdin),
    read by a worker thread (the SDK's way; ``stdio_wire`` reads on the loop where it can)."""
    raw = os.fdopen(os.dup(0), "rb")
    # Invalid bytes become lone surrogates (never U+FFFD, which would store altered text): the
    # SDK refuses such a line and CheckedLines answers it (a tool call: invalid_params).
    return anyio.wrap_file(io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape"))


def _flush_stdout() -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()


@contextlib.contextmanager
def stdio_wire() -> Iterator[tuple[Any, LoopWriter | None]]:
    """The request lines and the answers' writer for the SDK's stdio transport, for the whole
    time the server serves. When stdin and stdout are both a pipe or socket ``WireEnd`` can
    use: ``LoopLines`` and a ``LoopWriter``, with fd 0 pointed at /dev/null and fd 1 at stderr
    meanwhile (as the SDK's own claim of them does: a child process reads no request, a
    library's stray output misses the wire; Python's buffered stdout is flushed before each
    switch) and both restored on exit. Otherwise the SDK's blocking streams: ``stdin_lines``,
    and None (the SDK claims stdout itself)."""
    reader = WireEnd.of(0, writing=False) if sys.platform != "win32" else None
    writer = WireEnd.of(1, writing=True) if reader is not None else None
    if reader is None or writer is None:
        if reader is not None:
            reader.close()
        yield stdin_lines(), None
        return
    saved: list[tuple[int, int]] = []
    try:
        _flush_stdout()
        for fd, target in ((0, os.devnull), (1, None)):
            kept = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            saved.append((fd, kept))
            if target is None:
                os.dup2(2, fd)
            else:
                diversion = os.open(target, os.O_RDONLY)
                os.dup2(diversion, fd)
                os.close(diversion)
    except OSError as exc:
        log.warning("stdio stays on the SDK's streams", error=str(exc)[:200])
        _restore(saved)
        reader.close()
        writer.close()
        yield stdin_lines(), None
        return
    try:
        yield LoopLines(reader), LoopWriter(writer)
    finally:
        _flush_stdout()
        _restore(saved)
        reader.close()
        writer.close()


def _restore(saved: list[tuple[int, int]]) -> None:
    for fd, kept in reversed(saved):
        with contextlib.suppress(OSError):
            os.dup2(kept, fd)
        with contextlib.suppress(OSError):
            os.close(kept)


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

"""The team server: the same five tools over MCP streamable HTTP (``ferrex serve --http``).

The ``mcp`` SDK's streamable-HTTP transport serves ``/mcp``; every request must carry
``Authorization: Bearer <token>`` (compared in constant time), else it is answered 401 before
it reaches the MCP layer, so nothing changes. The token is ``FERREX_HTTP_TOKEN`` (``http_token``)
or, on loopback only, one generated into ``<data dir>/http-token`` (0600) and printed once on
stderr. Binding a non-loopback interface without a configured token is refused.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import ipaddress
import json
import os
import secrets
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from ferrex.core.errors import STORAGE_FULL, FerrexError
from ferrex.runtime.shared import SharedBackend
from ferrex.server.app import FerrexMcp

log = structlog.get_logger("ferrex.server")

MCP_PATH = "/mcp"
DEFAULT_HOST = "127.0.0.1"
TOKEN_FILE = "http-token"


class HttpSetupError(Exception):
    """``--http`` cannot be served as asked (one line for the operator)."""


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{MCP_PATH}"


def parse_bind(text: str) -> Bind:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6."""
    value = text.strip()
    host, port_text = DEFAULT_HOST, value
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif ":" in value:
        host, _, port_text = value.rpartition(":")
        host = host or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise HttpSetupError(
            f"--http {text!r}: expected HOST:PORT (for example 127.0.0.1:8765)"
        ) from None
    if not 0 < port < 65536:
        raise HttpSetupError(f"--http {text!r}: the port must be between 1 and 65535")
    return Bind(host, port)


def resolve_token(configured: str | None, data_dir: Path, bind: Bind) -> str:
    """The bearer token: the configured one, or (loopback only) the data dir's generated one,
    printed on stderr the one time it is generated."""
    if configured:
        if len(configured) < 16:
            raise HttpSetupError("FERREX_HTTP_TOKEN is too short: use at least 16 characters")
        return configured
    if not bind.loopback:
        raise HttpSetupError(
            f"refusing to serve {bind.host} (not a loopback address) without a configured token: "
            "set FERREX_HTTP_TOKEN (at least 16 characters) and give it to the clients"
        )
    path = data_dir / TOKEN_FILE
    with contextlib.suppress(OSError):
        token = path.read_text(encoding="utf-8").strip()
        if token:
            os.chmod(path, 0o600)
            log.info("HTTP bearer token from the data dir", file=TOKEN_FILE)
            return token
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    # Printed once (it is kept in the data dir, mode 0600, for the next starts).
    sys.stderr.write(
        f"ferrex: generated an HTTP bearer token (saved in <data dir>/{TOKEN_FILE}):\n{token}\n"
    )
    sys.stderr.flush()
    return token


class BearerAuth:
    """ASGI middleware: HTTP requests without the right bearer token get 401 and go no further."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await self._refuse(send, "missing" if not given else "invalid")
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Any, what: str) -> None:
        body = json.dumps(
            {
                "error": {
                    "code": "unauthorized",
                    "message": f"{what} bearer token: send 'Authorization: Bearer <token>' "
                    "with the token of this ferrex server (FERREX_HTTP_TOKEN)",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="ferrex"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def build_app(mcp: FerrexMcp, bind: Bind, token: str) -> Any:
    app = mcp.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        # Stateless: every request stands alone (no session for an idle agent to lose, no
        # session limit); ferrex sends no server-initiated messages.
        stateless_http=True,
        host=bind.host if bind.loopback else "0.0.0.0",  # DNS-rebinding guard on loopback
    )
    return BearerAuth(app, token)


def listen(bind: Bind) -> socket.socket | None:
    """The listening socket, bound before anything starts (handed to uvicorn, so nothing can
    take the port in between); None, said in one line on stderr, when the address cannot be
    had (a port in use, a host this machine does not have)."""
    try:
        infos = socket.getaddrinfo(bind.host, bind.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        sys.stderr.write(f"error: cannot listen on {bind.url}: {exc.strerror or exc}\n")
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        hint = (
            " (another server uses it: pick another port)" if exc.errno == errno.EADDRINUSE else ""
        )
        sys.stderr.write(f"error: cannot listen on {bind.url}: {exc.strerror or exc}{hint}\n")
        return None
    sock.set_inheritable(True)
    return sock


async def serve_http(
    backend: SharedBackend, bind: Bind, token: str, default_namespace: str = "default"
) -> int:
    import uvicorn

    sock = listen(bind)
    if sock is None:
        return 2

    from ferrex.ui.server import UnderPrefix, team_server_ui

    mcp = FerrexMcp(backend, default_namespace)
    # The memory browser under /ui, logged in with the same token (docs/ui.md).
    ui, ui_app = team_server_ui(backend, bind.host, bind.port, token, default_namespace)
    config = uvicorn.Config(
        UnderPrefix(ui_app, build_app(mcp, bind, token)),
        host=bind.host,
        port=bind.port,
        log_config=None,  # no handlers of its own: nothing on stdout
        access_log=False,
        lifespan="on",
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # SIGTERM / SIGINT: a clean shutdown (exit status 0), not re-raised at the end.
            log.info("shutting down", signal=signal.Signals(sig).name)
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    server = Server(config)
    status = 0
    async with anyio.create_task_group() as tasks:

        def reopened() -> None:
            nonlocal status
            status = 0
            ui.failure = None  # the store opened once the disk had room: pages answer again

        mcp.on_reopened = reopened

        async def start_backend() -> None:
            nonlocal status
            try:
                await backend.start(tasks)
            except FerrexError as exc:
                # Every call (and page) answers with the refusal; the server stays up.
                mcp.failure = ui.failure = exc
                if exc.code == STORAGE_FULL:  # retried at each call: the disk may have room
                    mcp.reopen = lambda: backend.start(tasks)
                status = 2
                sys.stderr.write(f"error: {exc.message}\n")
            except SystemExit as exc:  # e.g. the exact Qdrant fail-fast line, already said
                status = exc.code if isinstance(exc.code, int) else 2
                server.should_exit = True
            finally:
                mcp.ready.set()
                ui.ready.set()

        tasks.start_soon(start_backend)
        log.info(
            "ferrex team server listening",
            url=bind.url,
            ui=bind.url.removesuffix(MCP_PATH) + "/ui/",
            loopback=bind.loopback,
        )
        try:
            await server.serve(sockets=[sock])
        finally:
            tasks.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await backend.aclose()
    if not server.started and status == 0:
        status = 2  # e.g. the port was taken (uvicorn said so on stderr)
    log.info("ferrex stopped")
    return status


def run_http(backend: SharedBackend, bind: Bind, token: str, default_namespace: str) -> int:
    status = 0
    with contextlib.suppress(KeyboardInterrupt):
        status = int(anyio.run(serve_http, backend, bind, token, default_namespace))
    # The store is closed. Leave without interpreter finalization, as the stdio server does:
    # a background thread still loading the model (ONNX) would abort the process there.
    sys.stderr.flush()
    os._exit(status)

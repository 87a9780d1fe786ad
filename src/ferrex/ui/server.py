"""``ferrex ui``: the memory browser on a local port.

The process is one more ferrex on the data dir: it reaches the store through the engine that
owns it (or becomes the owner, handing the store over when it exits), like any CLI command.
The first line on stdout is the address with its one-time token; logs go to stderr and never
carry memory content (no access log: query strings hold searches).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import socket
import sys
import threading
import webbrowser
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from ferrex.core.errors import FerrexError
from ferrex.ui.app import Engine, build_app
from ferrex.ui.security import Access, allowed_hosts

log = structlog.get_logger("ferrex.ui")

LOOPBACK = "127.0.0.1"


class UiSetupError(Exception):
    """``ferrex ui`` cannot serve as asked (one line for the operator)."""


@dataclass(frozen=True)
class UiOptions:
    host: str = LOOPBACK
    port: int = 0  # a free port
    open_browser: bool = True
    namespace: str = "default"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_access(options: UiOptions, configured_token: str | None, port: int) -> Access:
    """Loopback: a fresh one-time token. Another interface: only with a configured token
    (``FERREX_HTTP_TOKEN``, at least 16 characters), which stays valid for each person given
    it; refused otherwise."""
    check_host(options, configured_token)
    hosts = allowed_hosts(options.host, port)
    if _loopback(options.host):
        return Access(secrets.token_urlsafe(32), hosts, options.namespace, port=port)
    assert configured_token is not None
    return Access(configured_token, hosts, options.namespace, reusable=True, port=port)


def check_host(options: UiOptions, configured_token: str | None) -> None:
    """Refuse another interface than loopback without a configured token (before binding)."""
    if _loopback(options.host):
        return
    if not configured_token or len(configured_token) < 16:
        raise UiSetupError(
            f"refusing to serve the memory browser on {options.host} (not a loopback address) "
            "without a configured token: set FERREX_HTTP_TOKEN (at least 16 characters)"
        )


def listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        raise UiSetupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def _open_browser(url: str) -> None:
    """The desktop's browser; never a text browser taking over this terminal (a Linux
    session without a display gets the printed address only)."""
    graphical = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if sys.platform.startswith("linux") and not graphical:
        log.info("no display: open the address printed above in a browser")
        return
    if not webbrowser.open(url):
        log.info("no browser found: open the address printed above in a browser")


async def serve_ui(backend: Any, options: UiOptions, configured_token: str | None) -> int:
    import uvicorn

    check_host(options, configured_token)
    sock = listen(options.host, options.port)
    port = int(sock.getsockname()[1])
    access = resolve_access(options, configured_token, port)
    engine = Engine(backend.call)
    config = uvicorn.Config(
        build_app(engine, access),
        log_config=None,  # nothing on stdout but the address
        access_log=False,  # query strings carry searches: memory content stays out of logs
        lifespan="off",
        timeout_graceful_shutdown=3,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            log.info("shutting down", signal=signal.Signals(sig).name)
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    server = Server(config)
    url = _url(options.host, port, access.token)
    sys.stdout.write(f"ferrex ui: {url}\n")
    sys.stdout.flush()
    status = 0
    async with anyio.create_task_group() as tasks:

        async def start_backend() -> None:
            nonlocal status
            try:
                await backend.start(tasks)
            except FerrexError as exc:
                engine.failure = exc  # every page says why; the server stays up
                status = 2
                sys.stderr.write(f"error: {exc.message}\n")
            finally:
                engine.ready.set()

        tasks.start_soon(start_backend)
        if options.open_browser:
            threading.Thread(target=_open_browser, args=(url,), daemon=True).start()
        log.info("ferrex ui listening", host=options.host, port=port)
        try:
            await server.serve(sockets=[sock])
        finally:
            tasks.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await backend.aclose()
    log.info("ferrex ui stopped")
    return status


def run_ui(backend: Any, options: UiOptions, configured_token: str | None) -> int:
    status = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            status = int(anyio.run(serve_ui, backend, options, configured_token))
    except UiSetupError as exc:
        sys.stderr.write(f"error: {exc}\n")
        status = 2
    sys.stderr.flush()
    sys.stdout.flush()
    # As the servers do: leave without interpreter finalization (a model still loading in a
    # background thread would abort the process there).
    os._exit(status)


# ---------------------------------------------------------------------- under the team server

UI_PREFIX = "/ui"


class UnderPrefix:
    """ASGI: requests under ``/ui`` go to the memory browser (mounted there), the rest to the
    team server's MCP app (and its bearer check)."""

    def __init__(self, ui: Any, other: Any) -> None:
        self.ui = ui
        self.other = other

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not (path == UI_PREFIX or path.startswith(UI_PREFIX + "/")):
            await self.other(scope, receive, send)
            return
        if path == UI_PREFIX:  # the browser's pages are under /ui/
            query = scope.get("query_string", b"").decode("latin-1")
            location = f"{UI_PREFIX}/" + (f"?{query}" if query else "")
            await send(
                {
                    "type": "http.response.start",
                    "status": 308,
                    "headers": [(b"location", location.encode()), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        root = str(scope.get("root_path", "")) + UI_PREFIX
        await self.ui({**scope, "root_path": root}, receive, send)


def team_server_ui(backend: Any, host: str, port: int, token: str, namespace: str) -> Any:
    """The memory browser for ``ferrex serve --http``: logged in with the team server's token
    (``/ui/?token=...``, good for each person given it), then a session cookie."""
    engine = Engine(backend.call)
    access = Access(token, allowed_hosts(host, port), namespace, reusable=True, port=port)
    return engine, build_app(engine, access)

"""Access to the memory browser: who may read and change memories through it.

- The URL ``ferrex ui`` prints carries a token; the first request with it gets a session cookie
  (HttpOnly, SameSite=Strict) and is redirected to the same page without the token, so the
  token leaves the address bar and the history. A generated token is good once; a configured
  one (``FERREX_HTTP_TOKEN``, required with ``--host``) is good for each person given it.
- Every request whose ``Host`` is not this server's address is refused (DNS rebinding), as is
  every request whose ``Origin`` is another site's.
- Every state-changing request is a POST carrying the session's CSRF token.
- Requests without a session (and without the token) get 401 and reach nothing else.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import structlog

log = structlog.get_logger("ferrex.ui")

COOKIE = "ferrex_ui"  # + "_<port>": cookies are per host, not per port
TOKEN_PARAM = "token"
PUBLIC_PREFIX = "/static/"
MAX_SESSIONS = 64

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make POSTs send Origin: null
    (b"cache-control", b"no-store"),
]


@dataclass
class Session:
    csrf: str
    namespace: str
    flash: dict[str, str] | None = None  # one message for the next page (after a redirect)


@dataclass
class Access:
    """The token, the allowed hosts and the sessions of one running browser server."""

    token: str
    hosts: frozenset[str] | None  # None: any (a wildcard bind; the token still guards it)
    default_namespace: str
    reusable: bool = False  # a configured token logs in many times; a generated one once
    sessions: dict[str, Session] = field(default_factory=dict)
    used: bool = False
    port: int = 0

    @property
    def cookie(self) -> str:
        """The session cookie's name: one per server, so two on one host keep their own."""
        return f"{COOKIE}_{self.port}"

    def host_allowed(self, host: str) -> bool:
        if self.hosts is None:
            return bool(host)
        return host.lower() in self.hosts

    @staticmethod
    def origin_allowed(origin: str, host: str) -> bool:
        """Same origin: the page that sent it was served by this server under this Host."""
        return origin.lower() == f"http://{host.lower()}"

    def exchange(self, given: str) -> str | None:
        """A new session id for the right token (once, unless it is reusable); else None."""
        if not given or (self.used and not self.reusable):
            return None
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        self.used = True
        if len(self.sessions) >= MAX_SESSIONS:  # the oldest goes
            self.sessions.pop(next(iter(self.sessions)))
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = Session(secrets.token_urlsafe(24), self.default_namespace)
        return sid

    def session(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        for known, session in self.sessions.items():
            if hmac.compare_digest(known.encode(), sid.encode()):
                return session
        return None


def _cookies(headers: dict[bytes, bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out


class Guard:
    """ASGI middleware in front of the browser's app: Host and Origin checks, the token
    exchange, the session (``scope["state"]["session"]``) and the security headers."""

    def __init__(self, app: Any, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.access.host_allowed(host):
            await _plain(send, 403, "forbidden: this address is not the ferrex ui's own")
            return
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and not self.access.origin_allowed(origin, host):
            await _plain(send, 403, "forbidden: a request from another site")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if TOKEN_PARAM in query:
            await self._exchange(scope, send, query)
            return
        path = str(scope.get("path", "")).removeprefix(str(scope.get("root_path", "")))
        session = self.access.session(_cookies(headers).get(self.access.cookie))
        if session is None and not path.startswith(PUBLIC_PREFIX):
            await _plain(
                send,
                401,
                "unauthorized: open the address `ferrex ui` printed (it carries a one-time "
                "token), or start `ferrex ui` again for a new one",
            )
            return
        scope.setdefault("state", {})["session"] = session

        started = False

        async def send_secured(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, send_secured)
        except Exception as exc:
            # The type only: a message or a traceback could carry what was searched or stored.
            log.error("memory browser request failed", error=type(exc).__name__)
            if not started:
                await _plain(send, 500, "internal error (the ferrex ui log says which)")

    async def _exchange(self, scope: dict[str, Any], send: Any, query: dict[str, str]) -> None:
        sid = self.access.exchange(query.pop(TOKEN_PARAM))
        if sid is None:
            await _plain(
                send,
                401,
                "unauthorized: this token is wrong or was already used; start `ferrex ui` "
                "again for a new address",
            )
            return
        rest = urlencode(query)
        location = str(scope.get("path") or "/") + (f"?{rest}" if rest else "")
        cookie = f"{self.access.cookie}={sid}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1", "replace")),
                    (b"set-cookie", cookie.encode()),
                    (b"content-length", b"0"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def csrf_ok(session: Session | None, given: str | None) -> bool:
    return bool(session and given and hmac.compare_digest(session.csrf.encode(), given.encode()))


async def _plain(send: Any, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """``Host`` values that name this server: its address, and localhost on loopback; None
    (any) for a wildcard address, whose names this server cannot know."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host.lower()}
    if host in ("127.0.0.1", "localhost", "::1"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return frozenset(
        f"{name}:{port}" if ":" not in name or name.startswith("[") else f"[{name}]:{port}"
        for name in names
    )

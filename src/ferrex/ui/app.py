"""The memory browser's web app (Starlette + Jinja2): pages that read and forms that act.

Every read and write is an engine operation (``recall``, ``store``, ``forget``, ``reflect``,
``stats``, ``memory``, ``namespaces``, ``browse``, ``history``, ``activity``) sent through the
data dir's engine like any CLI command, so validation, error codes and answers are the tools'
own and a refused action changes nothing. Access is guarded by ``ui.security``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ferrex.core.errors import FerrexError
from ferrex.core.requests import validate_namespace
from ferrex.ui import charts
from ferrex.ui.security import Access, Guard, Session, csrf_ok

HERE = Path(__file__).parent
TYPES = ("episodic", "semantic", "procedural")
LEVELS = ("fresh", "aging", "stale")  # of current memories (stats counts superseded apart)
STATUS = {"not_found": 404, "internal_error": 500, "storage_full": 507}

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass
class Engine:
    """The engine link as the pages use it: waits until the backend has started."""

    call_backend: Call
    ready: anyio.Event = field(default_factory=anyio.Event)
    failure: FerrexError | None = None

    async def call(self, op: str, arguments: dict[str, Any]) -> Any:
        await self.ready.wait()
        if self.failure is not None:
            raise self.failure
        return await self.call_backend(op, arguments)


def _session(request: Request) -> Session:
    session: Session = request.scope["state"]["session"]
    return session


def _base(request: Request) -> str:
    """Where the app is mounted: "" for ``ferrex ui``, "/ui" under the team server."""
    return str(request.scope.get("root_path") or "")


def _local(path: str | None) -> str:
    """A redirect target of this app only (never another site)."""
    if path and path.startswith("/") and not path.startswith("//") and "\\" not in path:
        return path
    return "/"


class Pages:
    def __init__(self, engine: Engine, templates: Jinja2Templates) -> None:
        self.engine = engine
        self.templates = templates

    # ------------------------------------------------------------------ rendering

    async def render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        session = _session(request)
        try:
            listed = await self.engine.call("namespaces", {"namespace": session.namespace})
            namespaces = [n["name"] for n in listed["namespaces"]]
        except (FerrexError, ConnectionError):
            namespaces = []
        if session.namespace not in namespaces:
            namespaces.append(session.namespace)
        flash, session.flash = session.flash, None
        page = {
            "csrf": session.csrf,
            "namespace": session.namespace,
            "namespaces": sorted(namespaces),
            "path": request.url.path,
            "base": _base(request),
            "route": request.url.path.removeprefix(_base(request)) or "/",
            "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            "flash": flash,
            **context,
        }
        return self.templates.TemplateResponse(request, name, page, status_code=status)

    async def failed(self, request: Request, name: str, exc: Exception, **context: Any) -> Response:
        if isinstance(exc, FerrexError):
            error = {"code": exc.code, "message": exc.message}
            status = STATUS.get(exc.code, 400)
        else:  # the engine went away mid-call: the backend takes over or reconnects
            error = {"code": "unavailable", "message": "the ferrex engine is not reachable; retry"}
            status = 503
        return await self.render(request, name, {**context, "error": error}, status)

    # ------------------------------------------------------------------ GET pages

    async def search(self, request: Request) -> Response:
        params = request.query_params
        form: dict[str, Any] = {
            "q": params.get("q", ""),
            "types": [t for t in params.getlist("type") if t in TYPES],
            "entity": params.get("entity", ""),
            "after": params.get("after", ""),
            "before": params.get("before", ""),
            "as_of": params.get("as_of", ""),
            "include_stale": params.get("include_stale") == "1",
            "include_invalidated": params.get("include_invalidated") == "1",
            "limit": params.get("limit", "10"),
        }
        context: dict[str, Any] = {"form": form, "answer": None}
        if not form["q"].strip():
            return await self.render(request, "search.html", context)
        try:
            arguments = _recall_arguments(form, _session(request).namespace)
            context["answer"] = await self.engine.call("recall", arguments)
        except (FerrexError, ConnectionError, ValueError) as exc:
            if isinstance(exc, ValueError):
                exc = FerrexError("invalid_params", "limit must be a whole number")
            return await self.failed(request, "search.html", exc, **context)
        return await self.render(request, "search.html", context)

    async def memory(self, request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        try:
            history = await self.engine.call("history", {"id": memory_id})
        except (FerrexError, ConnectionError) as exc:
            return await self.failed(request, "memory.html", exc, history=None)
        return await self.render(request, "memory.html", {"history": history})

    async def review(self, request: Request) -> Response:
        try:
            report = await self.engine.call("reflect", {"namespace": _session(request).namespace})
        except (FerrexError, ConnectionError) as exc:
            return await self.failed(request, "review.html", exc, report=None)
        return await self.render(request, "review.html", {"report": report})

    async def stats(self, request: Request) -> Response:
        namespace = _session(request).namespace
        try:
            stats = await self.engine.call("stats", {"namespace": namespace, "detailed": True})
            activity = await self.engine.call("activity", {"namespace": namespace})
            listed = await self.engine.call("namespaces", {"namespace": namespace})
        except (FerrexError, ConnectionError) as exc:
            return await self.failed(request, "stats.html", exc, stats=None)
        context = {
            "stats": stats,
            "by_type": charts.bars(stats.get("counts") or {}, TYPES),
            "by_level": charts.bars(stats.get("staleness") or {}, LEVELS),
            "by_namespace": charts.bars(
                {n["name"]: n["total"] for n in listed["namespaces"]},
                [n["name"] for n in listed["namespaces"]],
            ),
            "growth": charts.stacked(activity["months"], activity["by_type"], TYPES),
        }
        return await self.render(request, "stats.html", context)

    async def browse(self, request: Request) -> Response:
        form, arguments = _browse_arguments(request, _session(request).namespace)
        context: dict[str, Any] = {"form": form, "page": None}
        try:
            context["page"] = await self.engine.call("browse", arguments)
        except (FerrexError, ConnectionError) as exc:
            return await self.failed(request, "browse.html", exc, **context)
        page = context["page"]
        pages = max(1, -(-page["total"] // page["page_size"]))
        query = {k: v for k, v in request.query_params.multi_items() if k not in ("page", "ns")}
        context.update(
            pages=pages,
            prev=_with(query, page=page["page"] - 1) if page["page"] > 1 else None,
            next=_with(query, page=page["page"] + 1) if page["page"] < pages else None,
            export=f"{_base(request)}/browse.jsonl?" + urlencode(query),
        )
        return await self.render(request, "browse.html", context)

    async def export(self, request: Request) -> Response:
        """The current browse view (every page of it) as JSON lines."""
        _, arguments = _browse_arguments(request, _session(request).namespace)
        arguments.update(page=1, page_size=200)
        lines: list[str] = []
        try:
            while True:
                page = await self.engine.call("browse", arguments)
                lines += [json.dumps(m, ensure_ascii=False) + "\n" for m in page["memories"]]
                if arguments["page"] * 200 >= page["total"]:
                    break
                arguments["page"] += 1
        except (FerrexError, ConnectionError) as exc:
            return await self.failed(request, "browse.html", exc, form={}, page=None)
        name = f"ferrex-{arguments['namespace']}.jsonl"
        return Response(
            "".join(lines),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{name}"'},
        )

    # ------------------------------------------------------------------ POST actions

    async def act(self, request: Request) -> Response:
        """confirm / pin / unpin / forget the checked memories (forget asks first)."""
        form = await request.form()
        session = _session(request)
        if not csrf_ok(session, str(form.get("csrf") or "")):
            return Response("forbidden: the form is stale; reload the page\n", 403)
        action = str(form.get("action") or "")
        ids = [str(i) for i in form.getlist("ids") if str(i)]
        namespace = str(form.get("namespace") or session.namespace)
        back = _local(str(form.get("back") or f"{_base(request)}/"))
        if not ids:
            session.flash = {"kind": "error", "text": "select at least one memory first"}
            return RedirectResponse(back, 303)
        if action == "forget" and form.get("confirmed") != "yes":
            return await self._confirm_forget(request, ids, namespace, back)
        keys = {"confirm": "confirm_ids", "pin": "pin_ids", "unpin": "unpin_ids"}
        try:
            if action == "forget":
                done = await self.engine.call("forget", {"ids": ids, "namespace": namespace})
                text = f"forgot {len(done['deleted'])}"
                if done.get("not_found"):
                    text += f"; not found: {', '.join(done['not_found'])}"
                route = back.removeprefix(_base(request))
                if route.startswith("/memory/") and route.split("/")[2] in done["deleted"]:
                    back = f"{_base(request)}/browse"  # the page of a forgotten memory is gone
            elif action in keys:
                arguments = {keys[action]: ids, "namespace": namespace}
                done = await self.engine.call("reflect", arguments)
                text = _reflect_text(action, done)
            else:
                raise FerrexError("invalid_params", f"unknown action '{action[:20]}'")
            session.flash = {"kind": "ok", "text": text}
        except (FerrexError, ConnectionError) as exc:
            message = exc.message if isinstance(exc, FerrexError) else "engine not reachable"
            session.flash = {"kind": "error", "text": message}
        return RedirectResponse(back, 303)

    async def _confirm_forget(
        self, request: Request, ids: list[str], namespace: str, back: str
    ) -> Response:
        memories = []
        for memory_id in ids[:200]:
            try:
                memories.append(await self.engine.call("memory", {"id": memory_id}))
            except FerrexError:
                memories.append({"id": memory_id, "content": "(not found)"})
        context = {"memories": memories, "forget_ns": namespace, "back": back}
        return await self.render(request, "forget.html", context)

    async def correct(self, request: Request) -> Response:
        """A fact's new value: a superseding fact, stored as the store tool stores it."""
        form = await request.form()
        session = _session(request)
        if not csrf_ok(session, str(form.get("csrf") or "")):
            return Response("forbidden: the form is stale; reload the page\n", 403)
        memory_id = request.path_params["memory_id"]
        try:
            fact = await self.engine.call("memory", {"id": memory_id})
            arguments: dict[str, Any] = {
                "type": "semantic",
                "subject": fact.get("subject"),
                "predicate": fact.get("predicate"),
                "object": str(form.get("object") or ""),
                "supersedes": memory_id,
                "namespace": fact["namespace"],
                "source": "ferrex ui correction",
            }
            if form.get("t_valid"):
                arguments["t_valid"] = str(form["t_valid"])
            stored = await self.engine.call("store", arguments)
        except (FerrexError, ConnectionError) as exc:
            message = exc.message if isinstance(exc, FerrexError) else "engine not reachable"
            session.flash = {"kind": "error", "text": f"not corrected: {message}"}
            return RedirectResponse(f"{_base(request)}/memory/{memory_id}", 303)
        if stored["status"] == "superseded":
            text = f"corrected: the new value {stored['id']} supersedes {memory_id}"
        else:  # e.g. a contradiction (the old value had a higher confidence): both kept
            text = f"stored {stored['id']} ({stored['status']}): {stored.get('message', '')}"
        session.flash = {"kind": "ok", "text": text}
        return RedirectResponse(f"{_base(request)}/memory/{stored['id']}", 303)

    async def rollback(self, request: Request) -> Response:
        """Restore a procedure version as the next version (the store tool's rollback_to)."""
        form = await request.form()
        session = _session(request)
        if not csrf_ok(session, str(form.get("csrf") or "")):
            return Response("forbidden: the form is stale; reload the page\n", 403)
        memory_id = request.path_params["memory_id"]
        try:
            procedure = await self.engine.call("memory", {"id": memory_id})
            version = int(str(form.get("version") or "0"))
            stored = await self.engine.call(
                "store",
                {
                    "name": procedure.get("name"),
                    "rollback_to": version,
                    "namespace": procedure["namespace"],
                },
            )
        except (FerrexError, ConnectionError, ValueError) as exc:
            message = exc.message if isinstance(exc, FerrexError) else "could not roll back"
            session.flash = {"kind": "error", "text": f"not rolled back: {message}"}
            return RedirectResponse(f"{_base(request)}/memory/{memory_id}", 303)
        session.flash = {"kind": "ok", "text": f"restored version {version} as {stored['id']}"}
        return RedirectResponse(f"{_base(request)}/memory/{stored['id']}", 303)


def _with(query: dict[str, str], **changes: Any) -> str:
    return "?" + urlencode({**query, **{k: str(v) for k, v in changes.items()}})


def _reflect_text(action: str, done: dict[str, Any]) -> str:
    key = {"confirm": "confirmed", "pin": "pinned", "unpin": "unpinned"}[action]
    text = f"{key} {len(done.get(key) or [])}"
    if done.get("not_found"):
        text += f"; not found: {', '.join(done['not_found'])}"
    if done.get("still_stale"):
        text += f"; still stale by age: {len(done['still_stale'])}"
    return text


def _recall_arguments(form: dict[str, Any], namespace: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "query": form["q"],
        "namespace": namespace,
        "explain": True,
        "limit": int(form["limit"] or 10),
    }
    if form["types"]:
        arguments["types"] = form["types"]
    if form["entity"].strip():
        arguments["entities"] = [e.strip() for e in form["entity"].split(",") if e.strip()]
    time_range = {k: form[k] for k in ("after", "before") if form[k]}
    if time_range:
        arguments["time_range"] = time_range
    if form["as_of"]:
        arguments["as_of"] = form["as_of"]
    for flag in ("include_stale", "include_invalidated"):
        if form[flag]:
            arguments[flag] = True
    return arguments


def _browse_arguments(request: Request, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = request.query_params
    form = {
        "type": params.get("type", ""),
        "staleness": params.get("staleness", ""),
        "sort": params.get("sort", "date"),
        "include_invalidated": params.get("include_invalidated") == "1",
    }
    arguments: dict[str, Any] = {"namespace": namespace, "sort": form["sort"]}
    if form["type"]:
        arguments["types"] = [form["type"]]
    if form["staleness"]:
        arguments["staleness"] = form["staleness"]
    if form["include_invalidated"]:
        arguments["include_invalidated"] = True
    page = params.get("page", "1")
    arguments["page"] = int(page) if page.isdigit() else 0  # 0: the engine says what is wrong
    return form, arguments


class NamespaceSwitch:
    """``?ns=NAME`` on any page switches the session's namespace (checked by the tools' rule)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("state", {}).get("session") is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            wanted = query.get("ns")
            if wanted:
                session: Session = scope["state"]["session"]
                try:
                    session.namespace = validate_namespace(wanted)
                except FerrexError as exc:
                    session.flash = {"kind": "error", "text": exc.message}
        await self.app(scope, receive, send)


def build_app(engine: Engine, access: Access) -> Any:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)
    pages = Pages(engine, templates)
    routes = [
        Route("/", pages.search),
        Route("/memory/{memory_id}", pages.memory),
        Route("/memory/{memory_id}/correct", pages.correct, methods=["POST"]),
        Route("/memory/{memory_id}/rollback", pages.rollback, methods=["POST"]),
        Route("/review", pages.review),
        Route("/stats", pages.stats),
        Route("/browse", pages.browse),
        Route("/browse.jsonl", pages.export),
        Route("/act", pages.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    return Guard(NamespaceSwitch(app), access)

"""The MCP server: five tools over stdio, a thin layer over the engine backend.

``initialize`` and ``tools/list`` answer at once; the store opens in the background and the
embedding model loads lazily. Errors are tool results with ``isError`` whose text is
``{"error": {"code", "message", ...}}``; nothing internal (stack traces, paths) reaches the agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ferrex import __version__
from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.runtime.shared import SharedBackend
from ferrex.server import resources
from ferrex.server.tools import INSTRUCTIONS, TOOL_NAMES, build_tools
from ferrex.server.wire import CheckedLines, stdio_wire

log = structlog.get_logger("ferrex.server")

# Seconds after spawn by which the engine starts opening even if no client asked for it.
ENGINE_START_GRACE = 1.0


def tool_result(payload: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=payload
    )


def tool_error(error: FerrexError) -> types.CallToolResult:
    """``isError`` with the stable code, the message and the fields to act on (``existing_id``,
    ``field``, ...) as JSON text, and no structured content: every client reads text, and the
    TypeScript SDK checks structured content against the tool's output schema even on errors
    (an error object there would replace the agent's error with a schema mismatch)."""
    payload = {"error": error.to_dict()}
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class FerrexMcp:
    """Tool routing between the MCP SDK and a backend (engine or peer)."""

    def __init__(
        self, backend: SharedBackend, default_namespace: str = "default", max_limit: int = 200
    ) -> None:
        self.backend = backend
        self.tools = build_tools(max_limit)
        # Sent explicitly with every call: a peer's --namespace must win over the engine's.
        self.default_namespace = default_namespace
        self.ready = anyio.Event()
        # Set by the first request that needs the engine, or by the first tools/list: the
        # engine opens only then (see ``serve_stdio``).
        self.wanted = anyio.Event()
        self.failure: FerrexError | None = None
        # Opens the store again when it could not open for lack of disk space (set by
        # ``serve_stdio``): each call tries, so the server recovers once space is back.
        self.reopen: Callable[[], Awaitable[None]] | None = None
        self.on_reopened: Callable[[], None] | None = None
        self._reopening = anyio.Lock()
        self.server: Server[Any] = Server(
            "ferrex",
            version=__version__,
            title="ferrex memory",
            description="Local-first long-term memory with hybrid retrieval and temporal validity",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    async def _retry_open(self) -> None:
        """The store could not open for lack of disk space: try again (space may be back)."""
        failure = self.failure
        if failure is None or failure.code != errors.STORAGE_FULL or self.reopen is None:
            return
        async with self._reopening:
            if self.failure is not failure:
                return  # another call reopened it (or failed again) meanwhile
            try:
                await self.reopen()
            except FerrexError as exc:
                self.failure = exc
                return
            except Exception as exc:  # keep answering the error the agent can act on
                log.error("reopening the store failed", error=repr(exc)[:300])
                return
            self.failure = None
            log.info("the store opened: the disk holding it has room again")
            if self.on_reopened is not None:
                self.on_reopened()

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self.wanted.set()
        return types.ListToolsResult(tools=self.tools)

    async def _list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=resources.RESOURCES)

    async def _list_resource_templates(
        self, ctx: Any, params: Any
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=resources.TEMPLATES)

    async def _read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        op, arguments = resources.resource_call(uri, self.default_namespace)
        self.wanted.set()
        await self.ready.wait()
        await self._retry_open()
        try:
            if self.failure is not None:
                raise self.failure
            payload = await self.backend.call(op, arguments)
        except FerrexError as exc:
            raise resources.resource_error(uri, exc) from None
        except Exception as exc:  # defensive: never leak internals
            log.error("resource read failed", uri=uri[:80], error=repr(exc)[:500])
            raise resources.resource_error(
                uri, FerrexError(errors.INTERNAL, "internal error; see the server log")
            ) from None
        return resources.resource_contents(uri, payload)

    async def _list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=resources.PROMPTS)

    async def _get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return resources.get_prompt(params.name, params.arguments)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        if name not in TOOL_NAMES:
            return tool_error(
                FerrexError(
                    errors.UNKNOWN_TOOL,
                    f"unknown tool '{name[:40]}'; tools: {', '.join(TOOL_NAMES)}",
                )
            )
        self.wanted.set()
        await self.ready.wait()
        await self._retry_open()
        if self.failure is not None:
            return tool_error(self.failure)
        arguments = params.arguments if params.arguments is not None else {}
        if isinstance(arguments, dict) and "namespace" not in arguments:
            arguments = {**arguments, "namespace": self.default_namespace}
        try:
            result = await self.backend.call(name, arguments)
        except FerrexError as exc:
            return tool_error(exc)
        except Exception as exc:  # defensive: never leak internals
            log.error("tool failed", tool=name, error=repr(exc)[:500])
            return tool_error(FerrexError(errors.INTERNAL, "internal error; see the server log"))
        return tool_result(result)


async def serve_stdio(
    backend: SharedBackend,
    on_fatal: Callable[[BaseException], None],
    default_namespace: str = "default",
    max_limit: int = 200,
    announce: Callable[[], None] | None = None,
    on_reopened: Callable[[], None] | None = None,
) -> None:
    app = FerrexMcp(backend, default_namespace, max_limit)
    app.on_reopened = on_reopened

    async def start_backend(task_group: anyio.abc.TaskGroup) -> None:
        # Opening the engine (imports, the store, the model's warm-up) holds the GIL for
        # long stretches: begun at spawn it delayed the handshake's tools/list by ~0.5 s.
        # It begins once tools are listed (their answer written first), at the first call,
        # or after a short grace, whichever comes first.
        with anyio.move_on_after(ENGINE_START_GRACE):
            await app.wanted.wait()
        await anyio.sleep(0.01)
        if announce is not None:
            try:
                await anyio.to_thread.run_sync(announce)
            except Exception as exc:  # a log line never stops the server
                log.warning("start-up line failed", error=repr(exc)[:300])
        try:
            await backend.start(task_group)
        except FerrexError as exc:
            # A refusal the agent can act on (model mismatch, unusable store): keep the session
            # and answer every tool call with it, so the client shows the message instead of a
            # dead server; the exit status at end of input is still non-zero. A disk too full
            # to open the store on is retried at every call.
            app.failure = exc
            if exc.code == errors.STORAGE_FULL:
                app.reopen = lambda: backend.start(task_group)
            on_fatal(exc)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:
            # Anything else (e.g. an unreachable Qdrant server): leave now. The stdio reader
            # blocks in a thread that cancellation cannot interrupt, so exit explicitly.
            on_fatal(exc)
            with anyio.CancelScope(shield=True):
                await backend.aclose(wait_for_warm_up=False)
            sys.stderr.flush()
            os._exit(_exit_status(exc))
        finally:
            app.ready.set()

    async def watch_signals(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("shutting down", signal=signal.Signals(signum).name)
                scope.cancel()
                # The stdio reader blocks in a thread that cancellation cannot interrupt: close
                # the store cleanly (in-flight writes finish first), then leave.
                with anyio.CancelScope(shield=True):
                    await backend.aclose(wait_for_warm_up=False)
                log.info("ferrex stopped")
                sys.stderr.flush()
                os._exit(0)

    # fd 0 and fd 1 stay pointed away from the wire until the backend has closed.
    with stdio_wire() as (source, out):
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch_signals, tasks.cancel_scope)
                tasks.start_soon(start_backend, tasks)
                lines = CheckedLines(source)
                async with stdio_server(stdin=lines, stdout=out) as (read_stream, write_stream):  # type: ignore[arg-type]
                    lines.attach(write_stream)
                    await app.server.run(
                        read_stream, write_stream, app.server.create_initialization_options()
                    )
                # Input ended: a store or model this configuration cannot open is still
                # reported (and sets the exit status), as if the engine had opened at spawn.
                app.wanted.set()
                await app.ready.wait()
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await backend.aclose()
            log.info("ferrex stopped")


def _exit_status(exc: BaseException) -> int:
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code:
        return exc.code
    return 2


def run(
    backend: SharedBackend,
    default_namespace: str = "default",
    max_limit: int = 200,
    announce: Callable[[], None] | None = None,
) -> int:
    exit_code = 0

    def fatal(exc: BaseException) -> None:
        nonlocal exit_code
        exit_code = 2
        if isinstance(exc, SystemExit):
            return  # already said why (e.g. the exact Qdrant fail-fast line)
        message = exc.message if isinstance(exc, FerrexError) else str(exc)
        sys.stderr.write(f"error: {message}\n")  # the operator's one line; stdout is protocol
        sys.stderr.flush()

    def reopened() -> None:
        nonlocal exit_code
        exit_code = 0

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serve_stdio, backend, fatal, default_namespace, max_limit, announce, reopened)
    return exit_code

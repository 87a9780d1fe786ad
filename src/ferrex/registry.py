"""The operations registry: every operation ferrex serves, named once, in ``OPERATIONS``.

An operation is what one ferrex process asks the engine (the process owning the data dir) to
do: the five MCP tools agents call, and the operations peers, operator commands, the memory
browser and the MCP resources send. Each entry says which request model validates its
arguments, which use case runs it, how its result is presented, which answer model describes
that answer, how agents see it (a tool: title, description, hints; a resource: its URI) and
whether it writes. Everything else iterates this list: the MCP tool list and output schemas
(``server/tools.py``), the resources (``server/resources.py``), the engine's dispatch
(``server/calls.py``, ``runtime/operations.py``), the link between processes and its retry
rules (``runtime/link.py``, ``runtime/shared.py``) and the CLI's tool commands.

Code is named by dotted path (``"module:attribute"``, an attribute path after the colon) and
imported only when used: importing the registry (every process does before it answers
``initialize`` and ``tools/list``) imports no engine code. Adding an operation is one entry
here plus its use case (and its presenter and answer model if agents read it).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

STORE_DESCRIPTION = (
    "Store a memory for long-term recall. Call this whenever you learn something worth "
    "remembering: new facts about the user or project, decisions made, problems solved, "
    "workflows discovered, or corrections to previous knowledge. You can specify type explicitly "
    '("episodic" for events, "semantic" for stable facts, "procedural" for workflows) or omit it '
    "and the system will auto-detect from the fields you provide. Write self-contained memories — "
    "each should make sense on its own without surrounding context. Include relevant entities "
    "for filtering. If this updates a previously known fact, the system detects and resolves the "
    "contradiction automatically. Near-duplicate memories are rejected automatically."
)

RECALL_DESCRIPTION = (
    "Search long-term memory. Call this whenever you need to remember something: past "
    "discussions, known facts, established workflows, or entity relationships. Use stats at the "
    "start of a conversation for a quick overview — use recall when you have a specific question. "
    "Returns results ranked by relevance with freshness metadata — check the staleness field to "
    "gauge how current each memory is."
)

FORGET_DESCRIPTION = (
    "Delete or invalidate memories that are no longer accurate or relevant. Use this when you "
    "discover a memory is wrong, outdated, or the user asks you to forget something. First use "
    "recall to find the memory IDs, then pass them here."
)

REFLECT_DESCRIPTION = (
    "Audit memory health. Call this periodically (e.g., end of a long session or weekly) to: "
    "surface stale memories that need review, detect contradictions between active facts, and "
    "identify memories that haven't been validated recently. Review the results and use "
    "store/forget to address issues."
)

STATS_DESCRIPTION = (
    "Memory system overview. Call this at the START of every conversation for a quick status, or "
    "with detailed=true for full diagnostics. Default (brief) mode returns just what needs "
    "attention and recent context — enough to orient without wasting tokens. Detailed mode adds "
    "counts, staleness distribution, and storage info."
)


@dataclass(frozen=True)
class Tool:
    """How agents see an operation that is an MCP tool."""

    title: str
    description: str
    destructive: bool = False
    # Parameters whose maximum is a setting (recall's ``limit``: ``retrieval.max_limit``).
    max_limit_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resource:
    """An MCP resource answered by the operation: ``uri`` is a URI or, with ``{name}``
    placeholders (each matching one path segment), a URI template whose values become the
    operation's arguments."""

    uri: str
    title: str
    description: str

    @property
    def is_template(self) -> bool:
        return "{" in self.uri


@dataclass(frozen=True)
class Flag:
    """A request field as a flag of the operation's CLI command: ``flag`` is its name there
    (``--entity`` for ``entities``; None: a positional argument named as the field). Its kind
    comes from the field's type: a list repeats, a bool is a switch, a ``Literal`` gives the
    choices, a dict is given as JSON; ``field`` ``a.b`` is field b of the nested model a."""

    field: str
    flag: str | None
    help: str
    metavar: str | None = None
    optional: bool = False  # a positional argument that may be left out
    stdin: bool = False  # "-" reads the value from standard input


@dataclass(frozen=True)
class Command:
    """The operation's CLI command (``ferrex <name>``): its flags, then the CLI's own beside
    them (``cli_only``, named as in ``cli/parser.py``: e.g. recall's ``--ids``), and whether
    it takes the reranker flags (its answer depends on them)."""

    help: str
    description: str | None = None
    flags: tuple[Flag, ...] = ()
    cli_only: tuple[str, ...] = ()
    rerank: bool = False
    # Its answer as text: ``fn(answer, brief=, explain=) -> lines`` (none: key: value lines).
    render: str | None = None


@dataclass(frozen=True)
class Operation:
    """One operation. ``use_case`` is called as ``use_case(service, request)`` with the
    validated request (the arguments dict as sent when ``request`` is None), plus the
    idempotency key for a ``keyed`` write forwarded by another process; ``present`` turns its
    result into the answer (none: the result is the answer)."""

    name: str
    use_case: str
    request: str | None = None
    present: str | None = None
    answer: str | None = None  # the answer's model (a tool's output schema)
    tool: Tool | None = None
    resource: Resource | None = None
    cli: Command | None = None
    writes: bool = False
    # A write only when this argument is true (doctor's ``repair``): otherwise a read.
    writes_if: str | None = None
    # Sent with an idempotency key (recorded with the write: applied exactly once on a retry).
    keyed: bool = False
    # Applied twice, the same result (MCP's idempotent hint; a peer may send it again).
    idempotent: bool = False

    def writes_with(self, arguments: Mapping[str, Any]) -> bool:
        if self.writes_if is not None:
            return bool(arguments.get(self.writes_if))
        return self.writes

    def resend(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a peer sends the call again when the engine went away mid-call: reads,
        keyed writes and idempotent ones. Other writes (import, rebuild, a repair) are not:
        their caller is told to check and retry."""
        return not self.writes_with(arguments) or self.keyed or self.idempotent


_REQUESTS = "ferrex.core.requests"
_SERVICE = "ferrex.core.service:MemoryService"
_PRESENT = "ferrex.server.presenter"
_ANSWERS = "ferrex.server.answers"
_OPS = "ferrex.runtime.operations"
_VIEWS = "ferrex.server.views"

OPERATIONS: tuple[Operation, ...] = (
    # ---- the MCP tools (in the order agents see them)
    Operation(
        "store",
        f"{_SERVICE}.store",
        request=f"{_REQUESTS}:StoreRequest",
        present=f"{_PRESENT}:present_store",
        answer=f"{_ANSWERS}:StoreAnswer",
        tool=Tool("Store memory", STORE_DESCRIPTION),
        cli=Command(
            "store a memory (as the store tool)",
            "Store a memory, as the store tool does: an event (content), a fact (--subject "
            "--predicate --object) or a procedure (--name --step ...). Exit status 0 stored, "
            "1 refused (duplicate, bad input: the tool's error code), 2 usage.",
            (
                Flag(
                    "content",
                    None,
                    "the memory text (events; optional for facts)",
                    optional=True,
                    stdin=True,
                ),
                Flag("type", "--type", "memory type (auto-detected when omitted)"),
                Flag("entities", "--entity", "entity (repeatable)", "NAME"),
                Flag("subject", "--subject", "fact subject"),
                Flag("predicate", "--predicate", "fact predicate"),
                Flag("object", "--object", "fact object", "OBJECT"),
                Flag("confidence", "--confidence", "fact confidence in [0, 1]"),
                Flag("name", "--name", "procedure name"),
                Flag("steps", "--step", "procedure step (repeatable)", "TEXT"),
                Flag("conditions", "--condition", "procedure condition (repeatable)", "TEXT"),
                Flag("timestamp", "--timestamp", "when the event happened (ISO 8601)", "ISO"),
                Flag("t_valid", "--t-valid", "when the fact became true", "ISO"),
                Flag("t_invalid", "--t-invalid", "when the fact stopped being true", "ISO"),
                Flag("supersedes", "--supersedes", "id of the memory this one replaces", "ID"),
                Flag("source", "--source", "where this came from (memory:<id> cites a memory)"),
                Flag("context", "--context", "context object as JSON", "JSON"),
                Flag("pinned", "--pinned", "never evict it"),
                Flag("multi_valued", "--multi-valued", "the predicate has many values"),
            ),
            render="ferrex.cli.render:render_store",
        ),
        writes=True,
        keyed=True,
    ),
    Operation(
        "recall",
        f"{_SERVICE}.recall",
        request=f"{_REQUESTS}:RecallRequest",
        present=f"{_PRESENT}:present_recall",
        answer=f"{_ANSWERS}:RecallAnswer",
        tool=Tool("Recall memories", RECALL_DESCRIPTION, max_limit_of=("limit",)),
        cli=Command(
            "search memory (as the recall tool)",
            "Search memory, as the recall tool does. Exit status 0 answered (even with no "
            "results), 1 refused, 2 usage.",
            (
                Flag("query", None, "what to look for"),
                Flag("limit", "--limit", "at most N results (default 5)", "N"),
                Flag("types", "--type", "memory type (repeatable)"),
                Flag("entities", "--entity", "entity (repeatable)", "NAME"),
                Flag("time_range.after", "--after", "time range start", "ISO"),
                Flag("time_range.before", "--before", "time range end", "ISO"),
                Flag("as_of", "--as-of", "what was true at this time", "ISO"),
                Flag("include_stale", "--include-stale", "also return stale memories"),
                Flag(
                    "include_invalidated", "--include-invalidated", "also return superseded facts"
                ),
                Flag("max_tokens", "--max-tokens", "token budget for results", "N"),
                Flag("explain", "--explain", "show the ranks"),
            ),
            cli_only=("ids", "brief"),
            rerank=True,
            render="ferrex.cli.render:render_recall",
        ),
        idempotent=True,
    ),
    Operation(
        "forget",
        f"{_SERVICE}.forget",
        request=f"{_REQUESTS}:ForgetRequest",
        present=f"{_PRESENT}:present_forget",
        answer=f"{_ANSWERS}:ForgetAnswer",
        tool=Tool("Forget memories", FORGET_DESCRIPTION, destructive=True),
        cli=Command(
            "delete memories by id (as the forget tool)",
            "Delete memories by id, as the forget tool does. Unknown ids are reported, not fatal.",
            (
                Flag("ids", None, "memory id", "ID"),
                Flag("cascade", "--cascade", "also remove entities only these memories referenced"),
            ),
            render="ferrex.cli.render:render_forget",
        ),
        writes=True,
        keyed=True,
        idempotent=True,
    ),
    Operation(
        "reflect",
        f"{_SERVICE}.reflect",
        request=f"{_REQUESTS}:ReflectRequest",
        present=f"{_PRESENT}:present_reflect",
        answer=f"{_ANSWERS}:ReflectAnswer",
        tool=Tool("Reflect on memory health", REFLECT_DESCRIPTION),
        cli=Command(
            "memory health review (as the reflect tool)",
            flags=(
                Flag("confirm_ids", "--confirm", "mark as reviewed", "ID"),
                Flag("pin_ids", "--pin", "pin", "ID"),
                Flag("unpin_ids", "--unpin", "unpin", "ID"),
            ),
        ),
        writes=True,  # confirm, pin, unpin: the same result applied twice
        idempotent=True,
    ),
    Operation(
        "stats",
        f"{_SERVICE}.stats",
        request=f"{_REQUESTS}:StatsRequest",
        present=f"{_PRESENT}:present_stats",
        answer=f"{_ANSWERS}:StatsAnswer",
        tool=Tool("Memory stats", STATS_DESCRIPTION),
        cli=Command(
            "memory overview (as the stats tool)",
            flags=(Flag("detailed", "--detailed", "counts, staleness, storage, models"),),
        ),
        resource=Resource(
            "ferrex://stats",
            "Memory overview",
            "Brief memory stats of the server's namespace: total, recent memories and what "
            "needs attention (the stats tool's brief answer).",
        ),
        idempotent=True,
    ),
    # ---- what peers and operator commands send
    Operation("ping", f"{_OPS}:ping"),
    # A peer joins: refused for another model, told the engine's settings.
    Operation("hello", f"{_OPS}:hello"),
    # What a server's first start does: the model pinned, the index created; answers stats.
    Operation("init", f"{_OPS}:init", writes=True),
    Operation("doctor", f"{_OPS}:doctor", writes_if="repair"),
    Operation("export", f"{_OPS}:export"),
    Operation("import", f"{_OPS}:import_batch", writes=True),
    Operation("rebuild", f"{_OPS}:rebuild_index", writes=True),
    # ---- the resources' reads
    Operation(
        "memory",
        f"{_OPS}:memory",
        resource=Resource(
            "ferrex://memory/{id}",
            "A memory",
            "One memory by id (as recall returns ids): its content, type, metadata and freshness.",
        ),
    ),
    Operation(
        "namespaces",
        f"{_OPS}:namespaces",
        resource=Resource(
            "ferrex://namespaces",
            "Namespaces",
            "Every namespace in this store with its memory counts by type.",
        ),
    ),
    # ---- the memory browser's reads (``ferrex ui``)
    Operation(
        "browse",
        f"{_SERVICE}.browse",
        request="ferrex.core.reading.browse:BrowseRequest",
        present=f"{_VIEWS}:present_browse",
    ),
    Operation(
        "history",
        f"{_SERVICE}.history",
        request="ferrex.core.reading.browse:HistoryRequest",
        present=f"{_VIEWS}:present_history",
    ),
    Operation(
        "activity",
        f"{_SERVICE}.activity",
        request="ferrex.core.reading.browse:ActivityRequest",
        present=f"{_VIEWS}:present_activity",
    ),
)

BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
TOOLS: tuple[Operation, ...] = tuple(op for op in OPERATIONS if op.tool is not None)
TOOL_NAMES: tuple[str, ...] = tuple(op.name for op in TOOLS)
COMMANDS: tuple[Operation, ...] = tuple(op for op in OPERATIONS if op.cli is not None)


def get(name: str) -> Operation | None:
    return BY_NAME.get(name)


@cache
def resolve(reference: str) -> Any:
    """The object a ``"module:attribute.path"`` reference names (imported on first use)."""
    module, _, path = reference.partition(":")
    target: Any = importlib.import_module(module)
    for part in path.split("."):
        target = getattr(target, part)
    return target

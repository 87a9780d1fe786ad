"""Property-based fuzzing of all five tools through ONE real MCP client session.

Hypothesis generates thousands of ``tools/call`` requests for store, recall, forget, reflect and
stats: well-formed ones and hostile ones (wrong types, huge strings, unicode, NUL bytes,
negative and huge numbers, unknown keys, bad timestamps, bad namespaces, nested junk in
``context``). Against a single ``ferrex`` subprocess it proves that:

- the server never dies (the same engine process answers from the first call to the last);
- every failure is a well-formed tool error (``isError`` with ``{"error": {"code", "message"}}``,
  a known ``code`` string) whose message leaks no traceback and no filesystem path;
- a rejected call changes nothing: SQLite (every table, read through a read-only connection,
  access bookkeeping aside) and the index point count reported by ``stats`` are identical
  before and after it.

``bench/fuzz_long.py`` runs the same properties for much longer.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import Client
from tests.support.harness import make_settings, mcp_client

import ferrex
from ferrex.bootstrap import build_service
from ferrex.core import errors
from ferrex.server.calls import run_tool as invoke

ERROR_CODES = {
    value for name, value in vars(errors).items() if name.isupper() and isinstance(value, str)
}
TOOLS = ("store", "recall", "forget", "reflect", "stats")
NAMESPACES = ("default", "fuzz-a", "fuzz.b_2")
ENTITY_POOL = ("Tokio", "PostgreSQL", "api server", "Ada Lovelace", "東京", "naïve café")
QUERY_POOL = ("database migration", "deploy steps", "who owns the api", "tokio runtime", "café")
EXAMPLES_PER_TOOL = int(
    os.environ.get("FERREX_TEST_FUZZ_EXAMPLES", "50")
)  # bench/fuzz_long.py: more
# CI replays the same generated calls every run; the long bench explores new ones each time.
DERANDOMIZE = os.environ.get("FERREX_TEST_FUZZ_RANDOM", "") != "1"
BATCH = (8, 16)
LEAK_MARKERS = ("Traceback", 'File "', "site-packages", '.py", line', "/tmp/", "/home/")

# =========================================================================== hostile values

unicode_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40
)
nul_text = st.builds(lambda a, b: f"{a}\x00{b}", unicode_text, unicode_text)


def huge_text(low: int = 2_100, high: int = 70_000) -> st.SearchStrategy[str]:
    return st.builds(
        lambda unit, n: (unit * (n // max(1, len(unit)) + 1))[:n],
        st.sampled_from(["x", "é", "🦀", "word ", "\u202e", "a\u0301"]),
        st.integers(low, high),
    )


big_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, -(2**63), 2**63, 2**64 + 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 1e-320, 0.5, 1.0000001]),
)
json_scalar = st.one_of(st.none(), st.booleans(), big_numbers, unicode_text, nul_text)
nested_junk = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(unicode_text, inner, max_size=4)
    ),
    max_leaves=24,
)


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"k": value}
    return value


bad_timestamps = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "yesterday",
            "2026-13-45",
            "2026-02-30T10:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-12:00",
            "1969-12-31T23:59:59Z",
            "2026-04-03T25:61:00Z",
            "2026-04-03T10:30:00+25:00",
            "20260403",
            "2026-04-03T10:30:00Z\n",
            "1e10",
            "NaN",
            "2026-04-03" + "0" * 80,
        ]
    ),
    unicode_text,
    big_numbers,
    st.lists(st.integers(), max_size=3),
)
bad_namespaces = st.one_of(
    st.sampled_from(
        ["", " ", "-lead", ".dot", "a" * 65, "../etc", "ns/x", "ns\n", "ns x", "ñs", "ns\x00", "*"]
    ),
    unicode_text.filter(lambda s: not s.isascii() or not s.isalnum()),
    big_numbers,
    st.lists(st.sampled_from(NAMESPACES), max_size=2),
)
bad_ids = st.one_of(
    st.sampled_from(["", " ", "mem_\n", "../../etc/passwd", "mem_" + "f" * 90, "; DROP TABLE"]),
    nul_text,
    big_numbers,
)
anything = st.one_of(json_scalar, nested_junk, huge_text(), bad_timestamps)


@dataclass
class Pick:
    """Draws parameter values for one call: all valid, or (in a hostile call) each value hostile
    with even odds."""

    draw: st.DrawFn
    hostile: bool

    def __call__(self, valid: st.SearchStrategy[Any], *bad: st.SearchStrategy[Any]) -> Any:
        if self.hostile and self.draw(st.booleans()):
            return self.draw(st.one_of(*(bad or (anything,))))
        return self.draw(valid)


def picker(draw: st.DrawFn) -> Pick:
    return Pick(draw, draw(st.booleans()))


# =========================================================================== well-formed values

_TOPIC_WORDS = """database migration deploy release tokio runtime api server owner incident
latency postgres index cache budget staging rollback schema queue worker"""
sentence = st.builds(
    lambda words, n: " ".join(words) + f" (note {n})",
    st.lists(st.sampled_from(_TOPIC_WORDS.split()), min_size=3, max_size=12),
    st.integers(0, 10**9),
)
good_timestamp = st.builds(
    lambda y, m, d, h: f"{y:04d}-{m:02d}-{d:02d}T{h:02d}:15:00Z",
    st.integers(2020, 2030),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
)
good_namespace = st.sampled_from(NAMESPACES)
entity_list = st.lists(st.sampled_from(ENTITY_POOL), max_size=3)
memory_id_like = st.builds(
    lambda n: f"mem_{n:020x}", st.integers(0, 16**20 - 1)
)  # well-formed but (almost surely) unknown


@st.composite
def unknown_keys(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 3)) != 0:
        return {}
    key = draw(st.text(alphabet=string.ascii_letters + "_$ ", min_size=1, max_size=20))
    return {key: draw(json_scalar)}


_STORE_KEY_TEXT = """
type content subject predicate object confidence source entities context supersedes
namespace timestamp t_valid name conditions steps multi_valued pinned rollback_to
"""
STORE_KEYS = _STORE_KEY_TEXT.split()
TYPE_NAMES = st.sampled_from(["episodic", "semantic", "procedural"])


def finish(draw: st.DrawFn, pick: Pick, out: dict[str, Any]) -> dict[str, Any]:
    """Hostile calls sometimes carry unknown keys too."""
    if pick.hostile:
        out.update(draw(unknown_keys()))
    return out


def store_body(draw: st.DrawFn, pick: Pick) -> dict[str, Any]:
    shapes = ["episodic", "semantic", "procedural"] + (["free"] if pick.hostile else [])
    shape = draw(st.sampled_from(shapes))
    if shape == "episodic":
        return {"content": pick(sentence, huge_text(32_001), nul_text, big_numbers, st.just(""))}
    if shape == "semantic":
        return {
            key: pick(
                st.builds(lambda n, v=prefix: f"{v}{n}", st.integers(0, 30)),
                huge_text(),
                big_numbers,
                nul_text,
            )
            for key, prefix in (("subject", "svc-"), ("predicate", "runs "), ("object", "v"))
        }
    if shape == "procedural":
        out = {
            "name": pick(st.sampled_from(["deploy", "rollback db"]), huge_text()),
            "steps": pick(
                st.lists(sentence, min_size=1, max_size=5),
                st.lists(anything, max_size=4),
                st.lists(st.just("s"), min_size=101, max_size=120),
            ),
        }
        if draw(st.integers(0, 4)) == 0:
            out["rollback_to"] = pick(st.integers(1, 4), big_numbers)
        return out
    return draw(st.dictionaries(st.sampled_from(STORE_KEYS), anything, max_size=4))


def sometimes(draw: st.DrawFn, one_in: int) -> bool:
    return draw(st.integers(0, one_in - 1)) == 0


@st.composite
def store_args(draw: st.DrawFn) -> dict[str, Any]:
    pick = picker(draw)
    out = store_body(draw, pick)
    if sometimes(draw, 4):
        out["type"] = pick(TYPE_NAMES)
    if sometimes(draw, 4):
        out["confidence"] = pick(st.floats(0, 1), big_numbers, unicode_text)
    if sometimes(draw, 4):
        out["entities"] = pick(entity_list, st.lists(anything, max_size=40))
    if sometimes(draw, 4):
        out["context"] = pick(
            st.dictionaries(st.sampled_from(["task", "file"]), st.text(max_size=20), max_size=2),
            nested_junk,
            st.just(deep(12)),
            st.builds(lambda s: {"blob": s}, huge_text(17_000, 40_000)),
        )
    if sometimes(draw, 4):
        out["namespace"] = pick(good_namespace, bad_namespaces)
    if sometimes(draw, 4):
        out["timestamp"] = pick(good_timestamp, bad_timestamps)
    if sometimes(draw, 4):
        out["t_valid"] = pick(good_timestamp, bad_timestamps)
    if sometimes(draw, 4):
        out["supersedes"] = pick(memory_id_like, bad_ids)
    if sometimes(draw, 4):
        out["source"] = pick(st.sampled_from(["user", "memory:mem_x"]), huge_text())
    if sometimes(draw, 4):
        out["pinned"] = pick(st.booleans(), json_scalar)
    if sometimes(draw, 4):
        out["multi_valued"] = pick(st.booleans(), json_scalar)
    return finish(draw, pick, out)


time_range = st.builds(
    lambda a, b: {"after": min(a, b), "before": max(a, b)}, good_timestamp, good_timestamp
) | st.fixed_dictionaries({}, optional={"after": good_timestamp})


@st.composite
def recall_args(draw: st.DrawFn) -> dict[str, Any]:
    pick = picker(draw)
    out: dict[str, Any] = {}
    if not pick.hostile or not sometimes(draw, 10):
        out["query"] = pick(st.sampled_from(QUERY_POOL), huge_text(4_001), nul_text, st.just("   "))
    if sometimes(draw, 3):
        out["types"] = pick(
            st.lists(TYPE_NAMES, min_size=1, max_size=3),
            st.lists(unicode_text, max_size=3),
        )
    if sometimes(draw, 3):
        out["limit"] = pick(st.integers(1, 60), big_numbers, st.integers(201, 10**6))
    if sometimes(draw, 3):
        out["time_range"] = pick(
            time_range,
            st.fixed_dictionaries({"after": bad_timestamps}),
            st.dictionaries(unicode_text, anything, max_size=2),
            json_scalar,
        )
    if sometimes(draw, 3):
        out["entities"] = pick(entity_list, st.lists(anything, max_size=40))
    for flag in ("include_stale", "include_invalidated", "explain"):
        if sometimes(draw, 3):
            out[flag] = pick(st.booleans(), json_scalar)
    if sometimes(draw, 3):
        out["namespace"] = pick(good_namespace, bad_namespaces)
    if sometimes(draw, 3):
        out["as_of"] = pick(good_timestamp, bad_timestamps)
    if sometimes(draw, 3):
        out["max_tokens"] = pick(st.integers(1, 4000), big_numbers)
    if sometimes(draw, 10):
        out["version"] = pick(st.integers(1, 5), big_numbers)
    return finish(draw, pick, out)


@st.composite
def forget_args(draw: st.DrawFn, known: list[str]) -> dict[str, Any]:
    pick = picker(draw)
    ids = st.sampled_from(known) if known else memory_id_like
    out: dict[str, Any] = {}
    if not pick.hostile or not sometimes(draw, 10):
        out["ids"] = pick(
            st.lists(st.one_of(ids, memory_id_like, memory_id_like), min_size=1, max_size=4),
            st.lists(bad_ids, min_size=1, max_size=3),
            st.just([]),
            st.lists(memory_id_like, min_size=501, max_size=520),
            json_scalar,
        )
    if sometimes(draw, 2):
        out["cascade"] = pick(st.booleans(), json_scalar)
    if sometimes(draw, 2):
        out["namespace"] = pick(good_namespace, bad_namespaces)
    return finish(draw, pick, out)


@st.composite
def reflect_args(draw: st.DrawFn, known: list[str]) -> dict[str, Any]:
    pick = picker(draw)
    ids = st.lists(st.sampled_from(known) if known else memory_id_like, max_size=3)
    out: dict[str, Any] = {}
    if sometimes(draw, 2):
        out["namespace"] = pick(good_namespace, bad_namespaces)
    if sometimes(draw, 2):
        out["limit"] = pick(st.integers(1, 200), big_numbers)
    for flag in ("include_contradictions", "include_stale"):
        if sometimes(draw, 2):
            out[flag] = pick(st.booleans(), json_scalar)
    for key in ("confirm_ids", "pin_ids", "unpin_ids"):
        if sometimes(draw, 4):
            out[key] = pick(ids, st.lists(bad_ids, min_size=1, max_size=3))
    return finish(draw, pick, out)


@st.composite
def stats_args(draw: st.DrawFn) -> dict[str, Any]:
    pick = picker(draw)
    out: dict[str, Any] = {}
    if sometimes(draw, 2):
        out["namespace"] = pick(good_namespace, bad_namespaces)
    if sometimes(draw, 2):
        out["detailed"] = pick(st.booleans(), json_scalar)
    return finish(draw, pick, out)


# =========================================================================== observing the store


@contextmanager
def read_only(db_path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)) as conn:
        yield conn


# Access bookkeeping (access_count, last_accessed) is flushed in the background after reads;
# it is the one thing allowed to move while a rejected call is answered.
SNAPSHOT_QUERIES = (
    "SELECT id, namespace, type, content, subject, predicate, predicate_canonical, object, "
    "subject_entity_id, name, conditions, steps, version, confidence, source, context, "
    "created_at, updated_at, event_time, t_valid, t_invalid, superseded_by, last_validated, "
    "pinned, multi_valued, chunk_count, embed_model FROM memories ORDER BY id",
    "SELECT id, namespace, name, display_name, entity_type, created_at, updated_at "
    "FROM entities ORDER BY id",
    "SELECT * FROM entity_aliases ORDER BY namespace, alias",
    "SELECT * FROM alias_candidates ORDER BY namespace, name, entity_id",
    "SELECT * FROM memory_entities ORDER BY memory_id, entity_id",
    "SELECT * FROM journal ORDER BY seq",
    "SELECT * FROM audit ORDER BY seq",
    "SELECT * FROM meta ORDER BY key",
)


def sqlite_digest(db_path: Path) -> str:
    digest = hashlib.sha256()
    with read_only(db_path) as conn:
        for query in SNAPSHOT_QUERIES:
            for row in conn.execute(query):
                digest.update(repr(row).encode())
            digest.update(b"|")
    return digest.hexdigest()


@dataclass
class Fuzzer:
    """Drives the one MCP session from hypothesis (sync) through a blocking portal."""

    portal: BlockingPortal
    client: Client
    data_dir: Path
    pid: int
    calls: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    known_ids: list[str] = field(default_factory=list)
    index_checks: int = 0
    _digest: str = ""

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ferrex.db"

    def raw_call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return self.portal.call(self.client.call_tool, tool, arguments)

    def start(self) -> None:
        self.raw_call("stats", {})  # the engine has opened (and migrated) the store
        self._digest = sqlite_digest(self.db_path)

    def run(self, tool: str, arguments: dict[str, Any]) -> None:
        self.calls[tool] += 1
        result = self.raw_call(tool, arguments)
        payload = result.structured_content
        if result.is_error:  # an error's code and message are in its text, as every client reads
            assert payload is None, result
            payload = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert isinstance(payload, dict), result
        after = sqlite_digest(self.db_path)
        if not result.is_error:
            assert "error" not in payload
            self._remember(tool, payload)
            self._digest = after
            return
        self.rejected[tool] += 1
        check_error(payload, self.data_dir)
        self.codes[payload["error"]["code"]] += 1
        assert after == self._digest, (
            f"rejected {tool} call changed SQLite: {short(arguments)} -> {payload}"
        )

    def check_index(self) -> None:
        """The index holds exactly the points SQLite expects (so no rejected call touched it)."""
        result = self.raw_call("stats", {"detailed": True})
        assert not result.is_error, result
        payload = result.structured_content or {}
        with read_only(self.db_path) as conn:
            expected = conn.execute("SELECT COALESCE(SUM(chunk_count), 0) FROM memories")
            points = int(expected.fetchone()[0])
        assert payload["index"]["points_all_namespaces"] == points, (payload["index"], points)
        assert payload["journal_backlog"] == 0
        self.index_checks += 1

    def _remember(self, tool: str, payload: dict[str, Any]) -> None:
        if tool == "store" and payload.get("id") and len(self.known_ids) < 400:
            self.known_ids.append(payload["id"])

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return Path(f"/proc/{self.pid}/status").read_text().find("State:\tZ") < 0


def check_error(payload: dict[str, Any], data_dir: Path) -> None:
    """A well-formed tool error: a known code, a message, nothing internal."""
    error = payload.get("error")
    assert isinstance(error, dict), payload
    assert isinstance(error.get("code"), str) and error["code"] in ERROR_CODES, error
    message = error.get("message")
    assert isinstance(message, str) and message.strip(), error
    text = repr(error)
    assert str(data_dir) not in text and str(Path(ferrex.__file__).parent) not in text, error
    for marker in LEAK_MARKERS:
        assert marker not in message, error
    assert error["code"] != errors.INTERNAL, f"an input crashed a tool: {error}"


def short(arguments: dict[str, Any]) -> str:
    return repr(arguments)[:400]


# =========================================================================== the session


def engine_pid(data_dir: Path) -> int:
    """The engine opens after the handshake (at the first call or tools/list, or after a
    second): wait for its lock file to name it."""
    deadline = time.monotonic() + 15
    lock = data_dir / "ferrex.lock"
    while time.monotonic() < deadline:
        text = lock.read_text(encoding="utf-8").strip() if lock.exists() else ""
        if text:
            return int(text)
        time.sleep(0.02)
    raise AssertionError("no engine pid")


def seed_store(fuzzer: Fuzzer) -> None:
    """A little of everything, so recall / forget / reflect have something to chew on."""
    seeds: list[dict[str, Any]] = [
        {"content": "The database migration for release 42 ran on staging", "entities": ["Tokio"]},
        {"subject": "api server", "predicate": "owned by", "object": "Ada Lovelace"},
        {"subject": "api server", "predicate": "owned by", "object": "Grace Hopper"},
        {"name": "deploy", "steps": ["build the image", "push it", "roll out"]},
        {"content": "Café latency rose during the incident", "namespace": "fuzz-a"},
        {"content": "old note about the tokio runtime", "timestamp": "2020-01-01T00:00:00Z"},
    ]
    for arguments in seeds:
        fuzzer.run("store", arguments)


def fuzz_tool(
    fuzzer: Fuzzer, tool: str, strategy: Callable[[], st.SearchStrategy[dict[str, Any]]]
) -> None:
    @settings(
        max_examples=EXAMPLES_PER_TOOL,
        deadline=None,
        derandomize=DERANDOMIZE,
        database=None,
        # No shrinking: the server is stateful, and every assertion names the failing call.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def batch(data: st.DataObject) -> None:
        size = data.draw(st.integers(*BATCH))
        for _ in range(size):
            fuzzer.run(tool, data.draw(strategy(), label=tool))
        fuzzer.check_index()

    batch()


@pytest.mark.slow
def test_thousands_of_generated_calls_never_crash_leak_or_change_state_when_rejected(
    tmp_path: Path, models_dir: Path
) -> None:
    started = time.monotonic()
    data_dir = tmp_path / "data"
    with start_blocking_portal("asyncio") as portal:
        session = mcp_client(data_dir, models_dir, FERREX_LOG="error")
        with portal.wrap_async_context_manager(session) as client:
            fuzzer = Fuzzer(portal, client, data_dir, engine_pid(data_dir))
            fuzzer.start()
            seed_store(fuzzer)
            known = fuzzer.known_ids
            fuzz_tool(fuzzer, "store", store_args)
            fuzz_tool(fuzzer, "recall", recall_args)
            fuzz_tool(fuzzer, "reflect", lambda: reflect_args(known))
            fuzz_tool(fuzzer, "stats", stats_args)
            fuzz_tool(fuzzer, "forget", lambda: forget_args(known))
            assert fuzzer.alive(), "the ferrex server died"
            assert engine_pid(data_dir) == fuzzer.pid
            final = fuzzer.raw_call("stats", {})
            assert not final.is_error
            unknown = fuzzer.raw_call("remember", {"content": "x"})
            assert unknown.is_error
            assert unknown.structured_content is None
            check_error(json.loads(unknown.content[0].text), data_dir)  # type: ignore[union-attr]
    total = sum(fuzzer.calls.values())
    print(
        f"\nfuzz: {total} calls {dict(fuzzer.calls)}, rejected {dict(fuzzer.rejected)}, "
        f"codes {dict(fuzzer.codes)}, {time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    assert total >= 2_000
    for tool in TOOLS:
        assert fuzzer.rejected[tool] > 20, f"{tool}: too few hostile calls generated"
        assert fuzzer.calls[tool] - fuzzer.rejected[tool] > 20, f"{tool}: too few valid calls"


# =========================================================================== pinned regressions


HOSTILE_CASES: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("store", {"content": "x", "namespace": "team\n"}, errors.INVALID_NAMESPACE),
    ("forget", {"ids": ["mem_0123456789abcdef\n"]}, errors.INVALID_PARAMS),
    ("recall", {"query": "q", "as_of": "0001-01-01T00:00:00+01:00"}, errors.INVALID_PARAMS),
    ("store", {"content": "x", "timestamp": "9999-12-31T23:59:59-12:00"}, errors.INVALID_PARAMS),
    ("recall", {"query": "q", "version": 10**30}, errors.INVALID_PARAMS),
    ("store", {"name": "p", "rollback_to": 2**63}, errors.INVALID_PARAMS),
    ("store", {"name": "p", "steps": ["s" * 1_900] * 20}, errors.TOO_LARGE),
    ("store", {"content": "x" * 32_001}, errors.TOO_LARGE),
    ("recall", {"query": "q" * 4_001}, errors.TOO_LARGE),
    ("recall", {"query": "q", "limit": 10_000}, errors.TOO_LARGE),
    ("store", {"content": "x", "context": deep(12)}, errors.TOO_LARGE),
    ("store", {"content": "x", "context": {"blob": "y" * 20_000}}, errors.TOO_LARGE),
    ("store", {"content": "x\x00y"}, errors.INVALID_PARAMS),
    ("reflect", {"pin_ids": ["../../etc/passwd"]}, errors.INVALID_PARAMS),
    ("stats", {"detailed": "yes"}, errors.INVALID_PARAMS),
    ("recall", {"query": "q", "types": [["episodic"]]}, errors.UNKNOWN_TYPE),
)


def test_hostile_inputs_are_refused_before_the_model_is_even_loaded(
    tmp_path: Path, models_dir: Path
) -> None:
    """Validation runs first: oversize or malformed calls never reach the embedder (its model is
    still unloaded after all of them) and leave the store empty."""
    service = build_service(make_settings(tmp_path / "lazy", models_dir))
    try:
        for tool, arguments, code in HOSTILE_CASES:
            with pytest.raises(errors.FerrexError) as refused:
                invoke(service, tool, arguments)
            assert refused.value.code == code, (tool, arguments, refused.value.to_dict())
            check_error({"error": refused.value.to_dict()}, tmp_path)
        assert service.embedder.loaded is False  # type: ignore[attr-defined]
        assert service.meta.count_memories() == 0
    finally:
        service.close()

"""Retrieval benchmark: LoCoMo (conversational memory) and BEIR-format sets (SciFact) through the
real MemoryService, in every retrieval mode side by side.

    python bench/retrieval.py locomo [PATH] [--limit-conversations N]
    python bench/retrieval.py beir [DIR] [--split train]
    python bench/retrieval.py --locomo [PATH] --beir [DIR]        # both in one invocation

Defaults (relative to the repository root): ``../shared/eval/locomo-dev/locomo-dev.json`` and
``../shared/eval/scifact-dev/``. Data sets are read in place and never copied into the repo.

Everything is stored through ``MemoryService.store_many`` (the bulk path of the MCP ``store``
tool: validation, chunking rules, dedup at cosine 0.95, SQLite + journal + Qdrant Edge) on a
temporary data dir, with the offline bundled all-MiniLM-L6-v2 (model tier ``small``). Each data
set is stored once and queried in each ``retrieval.mode`` (dense, bm25, hybrid; hybrid +
rerank when a cross-encoder is available). Results: a table on stdout and a JSON file in
``bench/results/<dataset>-<timestamp>.json``.

Experiment options (see bench/RESULTS.md) never edit ``src/``: ingestion options (content
format, captions, BM25 ``avg_len``, speaker entities), settings overrides (``--set``), and
*variants* that post-process the lists the service returned (client-side weighted RRF over the
same index, neighbouring turns of a hit, a boost for memories of a speaker the question names).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from stores import settings_overrides

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "eval" / "locomo-dev" / "locomo-dev.json"
DEFAULT_BEIR = REPO.parent / "shared" / "eval" / "scifact-dev"
DEFAULT_ASSISTANT = REPO.parent / "shared" / "eval" / "assistant-dev" / "assistant-dev.json"
RESULTS_DIR = REPO / "bench" / "results"

# A fixed "now": every LoCoMo memory (2022-2023) is older than the 90-day episodic staleness
# threshold, so every recall passes include_stale=true. A fixed clock keeps ages reproducible.
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
PRODUCT_MODES = ("dense", "bm25", "hybrid")
RERANK_MODE = "hybrid+rerank"
BUDGET_TOKENS = 4000
BUDGET_LIMIT = 200
TOP_K = 10
BEIR_DEPTH = 100


# =========================================================================== data


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None
    session: int
    order: int  # position in the whole conversation
    date: datetime


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: list[str] = field(default_factory=list)


_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


def parse_session_date(value: str) -> datetime:
    """LoCoMo session dates look like "1:56 pm on 8 May, 2023" (taken as UTC)."""
    cleaned = " ".join(value.split())
    return datetime.strptime(cleaned, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def normalise_evidence(raw: Iterable[str]) -> list[str]:
    """ "D:11:26" -> D11:26, "D30:05" -> D30:5, "D8:6; D9:17" -> two ids, junk ("D") dropped."""
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            match = _EVIDENCE.fullmatch(part.strip())
            if match:
                out.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return list(dict.fromkeys(out))


def load_locomo(path: Path, limit: int | None) -> list[Conversation]:
    samples = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in samples[: limit or None]:
        conversations.append(_conversation(sample))
    return conversations


def _conversation(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    sessions = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION.fullmatch(key)))
    turns: list[Turn] = []
    for number, key in sessions:
        date = parse_session_date(conv[f"{key}_date_time"])
        for raw in conv[key]:
            turns.append(
                Turn(
                    dia_id=raw["dia_id"],
                    speaker=raw["speaker"],
                    text=raw["text"],
                    caption=raw.get("blip_caption"),
                    session=number,
                    order=len(turns),
                    date=date,
                )
            )
    known = {t.dia_id for t in turns}
    questions: list[Question] = []
    dropped: list[str] = []
    for qa in sample["qa"]:
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = normalise_evidence(qa.get("evidence", []))
        dropped.extend(e for e in evidence if e not in known)
        evidence = [e for e in evidence if e in known]
        if evidence:
            questions.append(Question(qa["question"], int(qa["category"]), evidence))
    return Conversation(
        sample["sample_id"], (conv["speaker_a"], conv["speaker_b"]), turns, questions, dropped
    )


@dataclass
class BeirSet:
    corpus: dict[str, str]  # doc id -> "title text"
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(directory: Path, split: str) -> BeirSet:
    corpus: dict[str, str] = {}
    with (directory / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            corpus[str(doc["_id"])] = f"{doc.get('title', '')} {doc.get('text', '')}".strip()
    queries: dict[str, str] = {}
    with (directory / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            query = json.loads(line)
            queries[str(query["_id"])] = query["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (directory / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\n").split("\t")
            if number == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header
            qid, did, score = parts[0], parts[1], int(parts[2])
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    queries = {qid: text for qid, text in queries.items() if qid in qrels}
    return BeirSet(corpus, queries, qrels)


# =========================================================================== service


def build(args: argparse.Namespace, data_dir: Path) -> Any:
    from ferrex.bootstrap import Options, build_service
    from ferrex.config import load_settings

    cli: dict[str, Any] = {
        "data_dir": str(data_dir),
        "model_tier": args.model_tier,
        "offline": True,
        "models_dir": str(args.models_dir or data_dir / "models"),
        "rerank": args.reranker_path is not None or args.try_reranker,
        "log_level": "error",
    }
    if args.reranker_path:
        cli["reranker_path"] = str(args.reranker_path)
    for key, value in settings_overrides(args.set):
        cli[key] = value
    # environ={} so FERREX_* variables of the shell cannot change a measurement.
    settings, warnings = load_settings(cli=cli, environ={})
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    options = Options(explicit_model_tier=True)
    if args.engine == "qdrant-local":  # the qdrant-client adapter on its local mode (no server)
        from qdrant_client import QdrantClient

        options = Options(explicit_model_tier=True, qdrant_client=QdrantClient(":memory:"))
    service = build_service(settings, options)
    service.clock = lambda: NOW
    if args.bm25_avg_len is not None:
        from ferrex.embed.bm25 import Bm25Encoder

        encoder = Bm25Encoder(avg_len=args.bm25_avg_len)
        service.deps.sparse = encoder
        service.sync.sparse = encoder
    if args.no_bm25_date:  # ablation of the product's dated BM25 documents
        import ferrex.core.index.sync as sync_module

        sync_module.sparse_text = lambda memory, text: text
    args.rerank_top_n = settings.retrieval.rerank_top_n or 20
    if getattr(args, "embed_cache", None):
        EmbeddingCache(Path(args.embed_cache), service.embedder).install()
    service.ensure_ready()
    if settings.rerank:
        service.reranker.load()
    return service


class EmbeddingCache:
    """Document embeddings kept between benchmark runs (``bench/.cache``, gitignored), so
    parameter sweeps over the same data do not re-embed it. Keyed by the model's pin and the
    exact text; the model's output for a text is deterministic, so a hit equals a miss."""

    def __init__(self, directory: Path, embedder: Any) -> None:
        self.embedder = embedder
        self.directory = directory
        self.vectors: dict[str, Any] = {}
        self.dirty = False
        self.loaded = False

    def _file(self) -> Path:
        pin = re.sub(r"[^A-Za-z0-9._-]+", "_", self.embedder.info.pin)  # loaded: has a variant
        return self.directory / f"embeddings-{pin}.npz"

    def install(self) -> None:
        import atexit
        import hashlib

        import numpy as np

        original = self.embedder.embed_documents

        def embed_documents(texts: Sequence[str]) -> list[Any]:
            if not self.loaded:
                self.embedder.load()
                if self._file().exists():
                    with np.load(self._file()) as data:
                        self.vectors = {key: data[key] for key in data.files}
                self.loaded = True
            keys = [hashlib.blake2b(t.encode(), digest_size=12).hexdigest() for t in texts]
            missing = [i for i, key in enumerate(keys) if key not in self.vectors]
            if missing:
                fresh = original([texts[i] for i in missing])
                for i, vector in zip(missing, fresh, strict=True):
                    self.vectors[keys[i]] = np.asarray(vector, dtype=np.float32)
                self.dirty = True
            return [self.vectors[key].copy() for key in keys]

        self.embedder.embed_documents = embed_documents
        atexit.register(self.save)

    def save(self) -> None:
        import numpy as np

        if not self.dirty or not self.loaded:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        np.savez(self._file(), **self.vectors)  # type: ignore[arg-type]
        self.dirty = False


def set_mode(service: Any, mode: str, rerank_top_n: int = 20) -> None:
    """Switch the pipeline's retrieval mode; drop every cache so no mode sees another's work."""
    retrieval = service.settings.retrieval
    if mode == RERANK_MODE:
        retrieval.mode = "hybrid"
        retrieval.rerank_top_n = rerank_top_n
    else:
        retrieval.mode = mode
        retrieval.rerank_top_n = 0  # the single channels and plain RRF are measured unreranked
    service.cache.invalidate()
    service.cache.queries.clear()


def modes_to_run(service: Any, requested: Sequence[str]) -> tuple[list[str], str | None]:
    """Product modes, plus hybrid+rerank when a cross-encoder actually loaded."""
    modes = [m for m in requested if m in PRODUCT_MODES]
    if service.reranker.available:
        return [*modes, RERANK_MODE], None
    return modes, "n/a: no cross-encoder available"


def token_counter(service: Any) -> Callable[[str], int]:
    """What the service's token budget counts (the embedding tokenizer, no special tokens)."""
    embedder = service.embedder
    counter: Callable[[str], int] = getattr(embedder, "count_text_tokens", embedder.count_tokens)
    return counter


def truncate_to_context(service: Any, text: str) -> tuple[str, bool]:
    """Longest word-boundary prefix that fits the model's context window (special tokens
    included), found with the model's own tokenizer; (text, was_truncated)."""
    limit = service.embedder.info.max_tokens
    count = service.embedder.count_tokens
    if count(text) <= limit:
        return text, False
    words = text.split(" ")
    low, high = 1, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if count(" ".join(words[:middle])) <= limit:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]), True


# =========================================================================== timing


@dataclass
class Timings:
    """Per query: the embedding model alone, then the full recall (limit 10, which embeds the
    query again), then the long call (query embedding cached). Interleaved, so the model's time
    and the recall's are measured under the same machine load."""

    embed_ms: list[float] = field(default_factory=list)
    recall_ms: list[float] = field(default_factory=list)
    budget_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        e50, e95 = percentile(self.embed_ms, 50), percentile(self.embed_ms, 95)
        r50, r95 = percentile(self.recall_ms, 50), percentile(self.recall_ms, 95)
        b50, b95 = percentile(self.budget_ms, 50), percentile(self.budget_ms, 95)
        return {
            "embed_p50_ms": e50,
            "embed_p95_ms": e95,
            "recall_p50_ms": r50,
            "recall_p95_ms": r95,
            "recall_p50_x_embed": r50 / e50 if e50 else math.nan,
            "recall_p95_x_embed": r95 / e95 if e95 else math.nan,
            "long_recall_p50_ms": b50,
            "long_recall_p95_ms": b95,
        }


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def time_embedding(service: Any, query: str) -> float:
    """The embedding model's own time for one query (ms)."""
    start = time.perf_counter()
    service.embedder.embed_query(query)
    return (time.perf_counter() - start) * 1000


def timed_recall(service: Any, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    response = invoke(service, "recall", arguments)
    return response, (time.perf_counter() - start) * 1000


# =========================================================================== fusion helpers


def rrf(channels: Sequence[tuple[Sequence[str], float]], k: int, limit: int) -> list[str]:
    """Weighted reciprocal rank fusion of ranked id lists: ``sum w / (k + position)``, position
    counted from 0, ties by id. With weights 1:1 this is the product's hybrid fusion
    (``core.retrieval.fuse_rrf``, the same formula as Qdrant's ``Fusion.Rrf``)."""
    scores: dict[str, float] = {}
    for ranked, weight in channels:
        for position, item in enumerate(ranked):
            scores[item] = scores.get(item, 0.0) + weight / (k + position)
    ordered = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
    return [item for item, _ in ordered[:limit]]


class ChannelLists(NamedTuple):
    dense: list[str]
    bm25: list[str]
    bm25_scores: list[float]


Channels = dict[int, ChannelLists]


def channel_lists(service: Any, query: str, namespace: str, depths: Iterable[int]) -> Channels:
    """Dense and BM25 candidate lists (memory ids) straight from the same index, one search per
    depth: BM25 ties are frequent on short texts and the engine orders tied points differently
    for different limits, so a depth-30 prefix of a depth-400 list is not the depth-30 list."""
    from ferrex.core.ports import IndexFilter

    cfg = service.settings.retrieval
    flt = IndexFilter(namespace=namespace)
    vector = service.recalling._query_vectors(query)[0]
    sparse = service.sparse.encode_query(query)
    out: Channels = {}
    for depth in sorted(set(depths)):
        dense = service.index.dense_search(vector, flt, depth, cfg.hnsw_ef)
        bm25: dict[str, float] = {}
        for hit in service.index.sparse_search(sparse, flt, depth):
            if hit.memory_id and hit.memory_id not in bm25:
                bm25[hit.memory_id] = hit.score
        out[depth] = ChannelLists(
            unique(h.memory_id for h in dense), list(bm25), list(bm25.values())
        )
    return out


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def rank_score(rank: int, base_k: float) -> float:
    return (base_k + 1.0) / (base_k + rank)


def expand_neighbours(
    ranked: Sequence[str],
    neighbours_of: Callable[[str], Sequence[str]],
    *,
    triggers: int,
    decay: float,
    k: int = 60,
) -> list[str]:
    """Session-context expansion: each of the first ``triggers`` hits lends its neighbouring
    turns ``decay`` x its score on a 1/(k + rank) scale; merged by score, originals first on ties.
    """
    scores: dict[str, tuple[float, int]] = {}
    for rank, item in enumerate(ranked, start=1):
        scores[item] = (1.0 / (k + rank), -rank * 2)
    for rank, item in enumerate(ranked[:triggers], start=1):
        inherited = decay / (k + rank)
        for other in neighbours_of(item):
            if other not in scores or scores[other][0] < inherited:
                scores[other] = (inherited, -rank * 2 - 1)
    ordered = sorted(scores.items(), key=lambda pair: (-pair[1][0], -pair[1][1], pair[0]))
    return [item for item, _ in ordered]


def boost_speaker(
    ranked: Sequence[str], boosted: set[str], factor: float, base_k: float
) -> list[str]:
    """Multiplicative boost (like the recency boost) on the fused rank score for memories
    linked to an entity the question names."""
    scored = [
        (rank_score(rank, base_k) * (factor if item in boosted else 1.0), rank, item)
        for rank, item in enumerate(ranked, start=1)
    ]
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [item for _, _, item in scored]


def oracle(ranked: Sequence[str], relevant: set[str] | dict[str, int], n: int) -> list[str]:
    """The first ``n`` candidates reordered relevant-first (what a perfect reranker of the top
    ``n`` could return); the rest keep their order. An upper bound, not a method."""
    head = list(ranked[:n])
    head.sort(key=lambda item: item not in relevant)
    return head + list(ranked[n:])


# =========================================================================== LoCoMo


def content_of(turn: Turn, fmt: str, captions: bool) -> str:
    text = turn.text
    if captions and turn.caption:
        text = f"{text} [shares a photo of {turn.caption}]"
    if fmt == "dated":
        return f"[{turn.date.day} {turn.date:%B %Y}] {turn.speaker}: {text}"
    return f"{turn.speaker}: {text}"


@dataclass
class Stored:
    """Where each dialog turn ended up (memory id), per conversation."""

    memory_of: dict[str, str]  # dia_id -> memory id (a rejected duplicate maps to its twin)
    turn_of: dict[str, Turn]  # memory id -> turn
    rejected: list[dict[str, Any]]


def ingest_locomo(
    service: Any, conversations: Sequence[Conversation], args: argparse.Namespace
) -> tuple[dict[str, Stored], dict[str, Any]]:
    items: list[dict[str, Any]] = []
    owners: list[tuple[Conversation, Turn]] = []
    for conv in conversations:
        for turn in conv.turns:
            item: dict[str, Any] = {
                "type": "episodic",
                "content": content_of(turn, args.content_format, args.captions),
                "timestamp": turn.date.isoformat().replace("+00:00", "Z"),
                "namespace": conv.sample_id,
                "source": f"locomo:{conv.sample_id}:{turn.dia_id}",
            }
            if args.speaker_entities:
                item["entities"] = [turn.speaker]
            items.append(item)
            owners.append((conv, turn))
    start = time.perf_counter()
    if args.ingest_clock == "session":
        # As an agent would: each session is stored when it happens (created_at = the session
        # date, so a memory's age is its session's age), then every question is asked at NOW.
        results = []
        position = 0
        while position < len(items):
            date = owners[position][1].date
            end = position
            while (
                end < len(items)
                and owners[end][1].date == date
                and owners[end][0] is owners[position][0]
            ):
                end += 1
            service.clock = lambda moment=date: moment
            results.extend(store_many(service, items[position:end], batch=args.batch))
            position = end
        service.clock = lambda: NOW
    else:
        results = store_many(service, items, batch=args.batch)
    elapsed = time.perf_counter() - start
    stored: dict[str, Stored] = {c.sample_id: Stored({}, {}, []) for c in conversations}
    for (conv, turn), result in zip(owners, results, strict=True):
        target = stored[conv.sample_id]
        if "error" in result:
            error = result["error"]
            twin = error.get("existing_id")
            target.rejected.append(
                {
                    "dia_id": turn.dia_id,
                    "code": error.get("code"),
                    "duplicate_of": twin,
                    "similarity": error.get("similarity"),
                    "text": turn.text[:120],
                }
            )
            if twin:
                target.memory_of[turn.dia_id] = twin
            continue
        target.memory_of[turn.dia_id] = result["id"]
        target.turn_of[result["id"]] = turn
    rejected = [dict(r, conversation=cid) for cid, s in stored.items() for r in s.rejected]
    evidence = {(c.sample_id, e) for c in conversations for q in c.questions for e in q.evidence}
    lost = [r for r in rejected if (r["conversation"], r["dia_id"]) in evidence]
    codes: dict[str, int] = {}
    for r in rejected:
        codes[r["code"]] = codes.get(r["code"], 0) + 1
    info = {
        "turns": len(items),
        "stored": len(items) - len(rejected),
        "rejected": codes,
        "rejected_turns": rejected,
        "evidence_turns_rejected": lost,
        "ingest_seconds": round(elapsed, 2),
        "turns_per_second": round(len(items) / elapsed, 1) if elapsed else None,
    }
    return stored, info


def neighbour_map(stored: Stored, window: int) -> dict[str, list[str]]:
    """Memory id -> memory ids of the turns within ``window`` places in the same session."""
    by_order = sorted(stored.turn_of.items(), key=lambda pair: pair[1].order)
    out: dict[str, list[str]] = {}
    for position, (mid, turn) in enumerate(by_order):
        near = []
        for offset in range(1, window + 1):
            for other_pos in (position - offset, position + offset):
                if 0 <= other_pos < len(by_order):
                    other_mid, other = by_order[other_pos]
                    if other.session == turn.session:
                        near.append(other_mid)
        out[mid] = near
    return out


def named_speakers(question: str, speakers: Sequence[str]) -> list[str]:
    return [s for s in speakers if re.search(rf"\b{re.escape(s.split()[0])}\b", question, re.I)]


@dataclass
class QueryLists:
    """What one question got back in one mode: the top-10 list and the 200-long list."""

    top: list[str]
    budgeted: list[str]
    long: list[str]


def run_locomo(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    conversations = load_locomo(path, args.limit_conversations)
    questions = [(c, q) for c in conversations for q in c.questions]
    print(
        f"LoCoMo: {len(conversations)} conversations, "
        f"{sum(len(c.turns) for c in conversations)} turns, {len(questions)} questions "
        f"(categories 1-4 with evidence) from {path}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="ferrex-bench-") as tmp:
        service = build(args, Path(tmp))
        try:
            started = time.perf_counter()
            stored, ingest = ingest_locomo(service, conversations, args)
            print(
                f"  stored {ingest['stored']} of {ingest['turns']} turns in "
                f"{ingest['ingest_seconds']} s; rejected {ingest['rejected'] or 'none'}",
                file=sys.stderr,
            )
            if args.optimize:
                service.index.optimize()
            modes, rerank_note = modes_to_run(service, args.modes)
            counter = token_counter(service)
            text_of = {mid: t for s in stored.values() for mid, t in s.turn_of.items()}
            tokens = {mid: counter(service.meta.get_memory(mid).display_text()) for mid in text_of}
            service.embedder.embed_query("warm-up")
            lists: dict[str, list[QueryLists]] = {}
            timings: dict[str, Timings] = {}
            for mode in modes:
                lists[mode], timings[mode] = locomo_mode(service, mode, questions, stored, args)
                print(f"  mode {mode}: done", file=sys.stderr)
            channels = None
            if args.variants:
                set_mode(service, "hybrid")
                depths = variant_depths(service, BUDGET_LIMIT, args)
                channels = [
                    channel_lists(service, q.text, c.sample_id, depths) for c, q in questions
                ]
            evaluation = evaluate_locomo(questions, stored, lists, channels, tokens, args, service)
            latency = {m: timings[m].summary() for m in modes}
            result = {
                "dataset": "locomo",
                "path": str(path),
                "conversations": [c.sample_id for c in conversations],
                "questions": len(questions),
                "questions_per_category": {
                    CATEGORIES[k]: sum(1 for _, q in questions if q.category == k)
                    for k in CATEGORIES
                },
                "evidence_ids_dropped": {
                    c.sample_id: c.dropped_evidence for c in conversations if c.dropped_evidence
                },
                "ingest": ingest,
                "modes": evaluation["modes"],
                "variants": evaluation["variants"],
                "per_question": evaluation["per_question"],
                "latency": latency,
                "rerank": rerank_note or f"reranked with {service.reranker.name}",
                "seconds": round(time.perf_counter() - started, 1),
            }
            result.update(run_context(service, args))
            return result
        finally:
            service.close()


def locomo_mode(
    service: Any,
    mode: str,
    questions: Sequence[tuple[Conversation, Question]],
    stored: dict[str, Stored],
    args: argparse.Namespace,
) -> tuple[list[QueryLists], Timings]:
    set_mode(service, mode, args.rerank_top_n)
    timings = Timings()
    out: list[QueryLists] = []
    for conv, question in questions:
        base: dict[str, Any] = {
            "query": question.text,
            "namespace": conv.sample_id,
            "include_stale": True,
        }
        if args.entity_filter:
            names = named_speakers(question.text, conv.speakers)
            if len(names) == 1:
                base["entities"] = names
        timings.embed_ms.append(time_embedding(service, question.text))
        service.cache.queries.clear()  # every timed recall embeds its query, as a new one would
        top, ms = timed_recall(service, {**base, "limit": TOP_K})
        timings.recall_ms.append(ms)
        if args.top_only:  # recall@5 / @10 only (the budget metric is not measured)
            ids = [r["id"] for r in top["results"]]
            out.append(QueryLists(ids, [], ids))
            continue
        budget, ms = timed_recall(
            service, {**base, "limit": BUDGET_LIMIT, "max_tokens": BUDGET_TOKENS}
        )
        timings.budget_ms.append(ms)
        long = invoke(service, "recall", {**base, "limit": BUDGET_LIMIT})  # same candidates, uncut
        out.append(
            QueryLists(
                [r["id"] for r in top["results"]],
                [r["id"] for r in budget["results"]],
                [r["id"] for r in long["results"]],
            )
        )
    return out, timings


def fit(ranked: Sequence[str], tokens: dict[str, int], budget: int, limit: int) -> list[str]:
    """The service's budget rule (``core.retrieval.fit_budget``) on a ranked id list."""
    from ferrex.core.recall.formulas import fit_budget

    head = list(ranked[:limit])
    keep, _ = fit_budget(head, lambda mid: tokens[mid], budget)
    return head[:keep]


@dataclass
class Scores:
    r5: list[float] = field(default_factory=list)
    r10: list[float] = field(default_factory=list)
    all4k: list[float] = field(default_factory=list)
    cats: list[int] = field(default_factory=list)

    def add(self, category: int, evidence: set[str], top: Sequence[str], budget: set[str]) -> None:
        self.cats.append(category)
        self.r5.append(len(evidence & set(top[:5])) / len(evidence))
        self.r10.append(len(evidence & set(top[:10])) / len(evidence))
        self.all4k.append(1.0 if evidence <= budget else 0.0)

    def table(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for key, name in [*CATEGORIES.items(), (0, "overall")]:
            idx = [i for i, c in enumerate(self.cats) if key == 0 or c == key]
            out[name] = {
                "n": len(idx),
                "recall@5": mean(self.r5[i] for i in idx),
                "recall@10": mean(self.r10[i] for i in idx),
                "all_evidence_4k": mean(self.all4k[i] for i in idx),
            }
        return out


def mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else math.nan


def evaluate_locomo(
    questions: Sequence[tuple[Conversation, Question]],
    stored: dict[str, Stored],
    lists: dict[str, list[QueryLists]],
    channels: list[Channels] | None,
    tokens: dict[str, int],
    args: argparse.Namespace,
    service: Any,
) -> dict[str, Any]:
    evidence = [
        {stored[c.sample_id].memory_of[e] for e in q.evidence if e in stored[c.sample_id].memory_of}
        for c, q in questions
    ]
    modes: dict[str, Any] = {}
    per_question: list[dict[str, Any]] = []
    for mode, results in lists.items():
        scores = Scores()
        for (_conv, question), ev, got in zip(questions, evidence, results, strict=True):
            scores.add(question.category, ev, got.top, set(got.budgeted))
            # The service's own budget cut equals the benchmark's re-implementation of it.
            if not args.top_only:
                assert fit(got.long, tokens, BUDGET_TOKENS, BUDGET_LIMIT) == got.budgeted, mode
        modes[mode] = scores.table()
    for index, ((conv, question), ev) in enumerate(zip(questions, evidence, strict=True)):
        entry: dict[str, Any] = {
            "conversation": conv.sample_id,
            "question": question.text,
            "category": question.category,
            "evidence": question.evidence,
        }
        for mode, results in lists.items():
            ranked = results[index].long
            entry[f"ranks_{mode}"] = [ranked.index(m) + 1 if m in ranked else None for m in ev]
        per_question.append(entry)
    variants = locomo_variants(questions, stored, lists, channels, evidence, tokens, args, service)
    return {"modes": modes, "variants": variants, "per_question": per_question}


def variant_depths(service: Any, long_limit: int, args: argparse.Namespace) -> list[int]:
    """Prefetch depths the variants need: the product's for limit 10 and for the long call
    (``max(prefetch_limit, 2 * limit)``), plus the prefetch sweep."""
    cfg = service.settings.retrieval
    return sorted(
        {
            max(cfg.prefetch_limit, 2 * TOP_K),
            max(cfg.prefetch_limit, 2 * long_limit),
            *args.prefetch_sweep,
        }
    )


@dataclass
class Pools:
    """Ranked candidates of the limit-10 call and of the long call, before the limit cut."""

    top: list[str]
    long: list[str]


def fused_pools(
    chans: Channels,
    weights: tuple[float, float],
    k: int,
    p_top: int,
    p_long: int,
    bm25_long: int | None = None,
    bm25_floor: float | None = None,
) -> Pools:
    """What the hybrid query fuses (prefetch p per channel, 2p fused) for both calls.
    ``bm25_long`` caps the BM25 prefetch of the long call (dense keeps ``p_long``);
    ``bm25_floor`` drops BM25 hits scoring below that fraction of the channel's best score."""

    def fuse(depth: int, bm25_depth: int) -> list[str]:
        dense = chans[depth].dense
        lists = chans[bm25_depth]
        bm25 = lists.bm25
        if bm25_floor is not None and lists.bm25_scores:
            cut = bm25_floor * lists.bm25_scores[0]
            bm25 = [m for m, score in zip(bm25, lists.bm25_scores, strict=True) if score >= cut]
        return rrf([(dense, weights[0]), (bm25, weights[1])], k, 2 * depth)

    return Pools(fuse(p_top, p_top), fuse(p_long, min(bm25_long or p_long, p_long)))


def locomo_variants(
    questions: Sequence[tuple[Conversation, Question]],
    stored: dict[str, Stored],
    lists: dict[str, list[QueryLists]],
    channels: list[Channels] | None,
    evidence: list[set[str]],
    tokens: dict[str, int],
    args: argparse.Namespace,
    service: Any,
) -> dict[str, Any]:
    """Post-processing experiments over the same index (nothing re-stored): client-side fusion
    with other weights / k / prefetch, then boosts and neighbour expansion on the fused pools."""
    if channels is None:
        return {}
    cfg = service.settings.retrieval
    maps: dict[int, dict[str, dict[str, list[str]]]] = {}

    def neighbours_of(cid: str, window: int) -> dict[str, list[str]]:
        if window not in maps:
            maps[window] = {c: neighbour_map(s, window) for c, s in stored.items()}
        return maps[window][cid]

    speaker_of = {mid: t.speaker for s in stored.values() for mid, t in s.turn_of.items()}
    p_top = max(cfg.prefetch_limit, 2 * TOP_K)
    p_long = max(cfg.prefetch_limit, 2 * BUDGET_LIMIT)
    base = [fused_pools(ch, (1.0, 1.0), cfg.rrf_k, p_top, p_long) for ch in channels]

    def with_neighbours(
        pools: Pools, conv: Conversation, triggers: int, decay: float, window: int
    ) -> Pools:
        near = neighbours_of(conv.sample_id, window)

        def expand(ranked: Sequence[str]) -> list[str]:
            return expand_neighbours(
                ranked, lambda m: near.get(m, []), triggers=triggers, decay=decay
            )

        return Pools(expand(pools.top), expand(pools.long))

    def with_speaker(pools: Pools, conv: Conversation, q: Question, factor: float) -> Pools:
        names = set(named_speakers(q.text, conv.speakers))
        if len(names) != 1:
            return pools
        boosted = {m for m in {*pools.top, *pools.long} if speaker_of.get(m) in names}
        return Pools(
            boost_speaker(pools.top, boosted, factor, cfg.fused_base_k),
            boost_speaker(pools.long, boosted, factor, cfg.fused_base_k),
        )

    def combo(i: int, conv: Conversation, q: Question, spec: str) -> Pools:
        """ "k=10,w=1:1.5,bd=50,speaker=2,nb=20:0.6,nw=2": fusion (k, weights, BM25 prefetch of
        the long call), then the speaker boost, then neighbours (triggers:decay, window)."""
        steps = dict(part.split("=", 1) for part in spec.split(",") if part)
        weights = pairs(steps.get("w", "1:1"))[0]
        k = int(steps.get("k", cfg.rrf_k))
        bm25_long = int(steps["bd"]) if "bd" in steps else None
        floor = float(steps["bf"]) if "bf" in steps else None
        pools = fused_pools(channels[i], weights, k, p_top, p_long, bm25_long, floor)
        if "speaker" in steps:
            pools = with_speaker(pools, conv, q, float(steps["speaker"]))
        if "nb" in steps:
            triggers, decay = neighbour_settings(steps["nb"])[0]
            window = int(steps.get("nw", args.neighbour_window))
            pools = with_neighbours(pools, conv, triggers, decay, window)
        return pools

    Recipe = Callable[[int, Conversation, Question], Pools]
    recipes: dict[str, Recipe] = {
        "client RRF 1:1 k60 (= product hybrid)": lambda i, c, q: base[i],
        "channel: dense only": lambda i, c, q: Pools(channels[i][p_top][0], channels[i][p_long][0]),
        "channel: bm25 only": lambda i, c, q: Pools(channels[i][p_top][1], channels[i][p_long][1]),
    }
    for spec in args.combos:
        recipes[f"combo: {spec}"] = lambda i, c, q, spec=spec: combo(i, c, q, spec)
    for n in args.oracle_rerank:
        recipes[f"oracle: perfect rerank of the fused top {n} (upper bound)"] = (
            lambda i, c, q, n=n: Pools(
                oracle(base[i].top, evidence[i], n), oracle(base[i].long, evidence[i], n)
            )
        )
    for wd, wb in args.rrf_weights:
        recipes[f"RRF weights dense {wd:g} : bm25 {wb:g}"] = lambda i, c, q, w=(wd, wb): (
            fused_pools(channels[i], w, cfg.rrf_k, p_top, p_long)
        )
    for k in args.rrf_ks:
        recipes[f"RRF k={k}"] = lambda i, c, q, k=k: fused_pools(
            channels[i], (1.0, 1.0), k, p_top, p_long
        )
    for p in args.prefetch_sweep:
        recipes[f"prefetch {p} for the limit-10 call"] = lambda i, c, q, p=p: fused_pools(
            channels[i], (1.0, 1.0), cfg.rrf_k, p, p_long
        )
    for p in args.prefetch_sweep:
        recipes[f"BM25 prefetch {p} for the long call (dense keeps {p_long})"] = (
            lambda i, c, q, p=p: fused_pools(channels[i], (1.0, 1.0), cfg.rrf_k, p_top, p_long, p)
        )
    for triggers, decay in args.neighbour_settings:
        recipes[f"neighbours +-{args.neighbour_window} of top {triggers}, decay {decay:g}"] = (
            lambda i, c, q, t=triggers, d=decay: with_neighbours(
                base[i], c, t, d, args.neighbour_window
            )
        )
    for factor in args.speaker_boosts:
        recipes[f"speaker boost x{factor:g}"] = lambda i, c, q, f=factor: with_speaker(
            base[i], c, q, f
        )
    out: dict[str, Any] = {}
    for name, recipe in recipes.items():
        scores = Scores()
        for i, ((conv, question), ev) in enumerate(zip(questions, evidence, strict=True)):
            pools = recipe(i, conv, question)
            budget = set(fit(pools.long, tokens, BUDGET_TOKENS, BUDGET_LIMIT))
            scores.add(question.category, ev, pools.top[:TOP_K], budget)
        out[name] = scores.table()
    agree = (
        [
            (
                base[i].top[:TOP_K] == lists["hybrid"][i].top,
                base[i].long[:BUDGET_LIMIT] == lists["hybrid"][i].long,
            )
            for i in range(len(base))
        ]
        if "hybrid" in lists
        else []
    )
    if agree:
        out["_fidelity"] = {
            "identical_top10_lists": sum(a for a, _ in agree) / len(agree),
            "identical_long_lists": sum(b for _, b in agree) / len(agree),
        }
    return out


# =========================================================================== BEIR


def beir_subset(data: BeirSet, queries: int, documents: int) -> BeirSet:
    """The first ``queries`` queries (by id) over a corpus of ``documents``: every document
    they judge, then the first others by id (for slow engines: the qdrant-client local mode)."""
    qids = sorted(data.queries)[:queries]
    judged = {doc for qid in qids for doc in data.qrels[qid]}
    others = [doc for doc in sorted(data.corpus) if doc not in judged]
    keep = sorted(judged & set(data.corpus)) + others[: max(0, documents - len(judged))]
    return BeirSet(
        {doc: data.corpus[doc] for doc in keep},
        {qid: data.queries[qid] for qid in qids},
        {qid: data.qrels[qid] for qid in qids},
    )


def run_beir(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    data = load_beir(directory, args.split)
    if args.beir_subset:
        data = beir_subset(data, *args.beir_subset)
    print(
        f"BEIR: {len(data.corpus)} documents, {len(data.queries)} queries with qrels "
        f"(split {args.split}) from {directory}",
        file=sys.stderr,
    )
    namespace = "beir"
    with tempfile.TemporaryDirectory(prefix="ferrex-bench-") as tmp:
        service = build(args, Path(tmp))
        try:
            started = time.perf_counter()
            memory_of, ingest = ingest_beir(service, data, namespace, args)
            print(
                f"  stored {ingest['stored']} of {ingest['documents']} documents in "
                f"{ingest['ingest_seconds']} s; truncated {ingest['truncated']}; "
                f"rejected {ingest['rejected'] or 'none'}",
                file=sys.stderr,
            )
            if args.optimize:
                service.index.optimize()
            doc_of = {mid: did for did, mid in memory_of.items()}
            modes, rerank_note = modes_to_run(service, args.modes)
            qids = sorted(data.queries)
            service.embedder.embed_query("warm-up")
            table: dict[str, Any] = {}
            latency: dict[str, Any] = {}
            lists: dict[str, list[tuple[list[str], list[str]]]] = {}
            for mode in modes:
                set_mode(service, mode, args.rerank_top_n)
                timings = Timings()
                got: list[tuple[list[str], list[str]]] = []
                for qid in qids:
                    base = {
                        "query": data.queries[qid],
                        "namespace": namespace,
                        "include_stale": True,
                    }
                    timings.embed_ms.append(time_embedding(service, data.queries[qid]))
                    service.cache.queries.clear()
                    top, ms = timed_recall(service, {**base, "limit": TOP_K})
                    timings.recall_ms.append(ms)
                    deep, ms = timed_recall(service, {**base, "limit": BEIR_DEPTH})
                    timings.budget_ms.append(ms)
                    got.append(
                        (
                            [doc_of[r["id"]] for r in top["results"]],
                            [doc_of[r["id"]] for r in deep["results"]],
                        )
                    )
                lists[mode] = got
                table[mode] = beir_scores(qids, data.qrels, got)
                latency[mode] = timings.summary()
                print(f"  mode {mode}: done", file=sys.stderr)
            variants: dict[str, Any] = {}
            if args.variants:
                set_mode(service, "hybrid")
                variants = beir_variants(
                    service, data, qids, namespace, doc_of, args, lists.get("hybrid")
                )
            result = {
                "dataset": "beir",
                "path": str(directory),
                "split": args.split,
                "queries": len(qids),
                "ingest": ingest,
                "modes": table,
                "variants": variants,
                "latency": latency,
                "rerank": rerank_note or f"reranked with {service.reranker.name}",
                "seconds": round(time.perf_counter() - started, 1),
            }
            result.update(run_context(service, args))
            return result
        finally:
            service.close()


def ingest_beir(
    service: Any, data: BeirSet, namespace: str, args: argparse.Namespace
) -> tuple[dict[str, str], dict[str, Any]]:
    start = time.perf_counter()
    items, ids, truncated = [], [], 0
    for did, text in data.corpus.items():
        content, cut = truncate_to_context(service, text)
        truncated += cut
        items.append(
            {
                "type": "episodic",
                "content": content,
                "namespace": namespace,
                "source": f"beir:{did}",
            }
        )
        ids.append(did)
    prep = time.perf_counter() - start
    results = store_many(service, items, batch=args.batch)
    elapsed = time.perf_counter() - start
    memory_of: dict[str, str] = {}
    rejected: list[dict[str, Any]] = []
    for did, result in zip(ids, results, strict=True):
        if "error" in result:
            error = result["error"]
            rejected.append(
                {
                    "doc": did,
                    "code": error.get("code"),
                    "duplicate_of": error.get("existing_id"),
                    "similarity": error.get("similarity"),
                }
            )
            continue
        memory_of[did] = result["id"]
    relevant = {d for rel in data.qrels.values() for d in rel}
    codes: dict[str, int] = {}
    for r in rejected:
        codes[r["code"]] = codes.get(r["code"], 0) + 1
    info = {
        "documents": len(items),
        "stored": len(memory_of),
        "truncated": truncated,
        "truncation": "title + text cut at a word boundary to the model's context window "
        "(tokens counted with the model's tokenizer, [CLS]/[SEP] included)",
        "rejected": codes,
        "rejected_documents": rejected,
        "relevant_documents_rejected": [r for r in rejected if r["doc"] in relevant],
        "truncate_seconds": round(prep, 2),
        "ingest_seconds": round(elapsed, 2),
        "docs_per_second": round(len(items) / elapsed, 1) if elapsed else None,
    }
    return memory_of, info


def ndcg_at(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(
        relevant.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1)
    )
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def beir_scores(
    qids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    got: Sequence[tuple[list[str], list[str]]],
) -> dict[str, float]:
    return {
        "ndcg@10": mean(
            ndcg_at(top, qrels[q], TOP_K) for q, (top, _) in zip(qids, got, strict=True)
        ),
        "recall@100": mean(
            recall_at(deep, qrels[q], BEIR_DEPTH) for q, (_, deep) in zip(qids, got, strict=True)
        ),
    }


def beir_variants(
    service: Any,
    data: BeirSet,
    qids: Sequence[str],
    namespace: str,
    doc_of: dict[str, str],
    args: argparse.Namespace,
    product: Sequence[tuple[list[str], list[str]]] | None,
) -> dict[str, Any]:
    """Client-side fusion over the same index (weights, k, prefetch); no re-store."""
    cfg = service.settings.retrieval
    depths = variant_depths(service, BEIR_DEPTH, args)
    chans = [channel_lists(service, data.queries[q], namespace, depths) for q in qids]
    p_top = max(cfg.prefetch_limit, 2 * TOP_K)
    p_deep = max(cfg.prefetch_limit, 2 * BEIR_DEPTH)

    def lists(
        weights: tuple[float, float],
        k: int,
        p1: int,
        bm25_deep: int | None = None,
        floor: float | None = None,
    ) -> list[tuple[list[str], list[str]]]:
        got = []
        for ch in chans:
            pools = fused_pools(ch, weights, k, p1, p_deep, bm25_deep, floor)
            got.append(
                (
                    [doc_of[m] for m in pools.top[:TOP_K]],
                    [doc_of[m] for m in pools.long[:BEIR_DEPTH]],
                )
            )
        return got

    def run(weights: tuple[float, float], k: int, p1: int) -> dict[str, float]:
        return beir_scores(qids, data.qrels, lists(weights, k, p1))

    base = lists((1.0, 1.0), cfg.rrf_k, p_top)
    base_full = []
    for ch in chans:
        pools = fused_pools(ch, (1.0, 1.0), cfg.rrf_k, p_top, p_deep)
        base_full.append(
            ([doc_of[m] for m in pools.top], [doc_of[m] for m in pools.long[:BEIR_DEPTH]])
        )
    out: dict[str, Any] = {
        "client RRF 1:1 k60 (= product hybrid)": beir_scores(qids, data.qrels, base)
    }
    out["channel: dense only"] = beir_scores(
        qids,
        data.qrels,
        [
            ([doc_of[m] for m in ch[p_top][0][:TOP_K]], [doc_of[m] for m in ch[p_deep][0]])
            for ch in chans
        ],
    )
    out["channel: bm25 only"] = beir_scores(
        qids,
        data.qrels,
        [
            ([doc_of[m] for m in ch[p_top][1][:TOP_K]], [doc_of[m] for m in ch[p_deep][1]])
            for ch in chans
        ],
    )
    for n in args.oracle_rerank:
        out[f"oracle: perfect rerank of the fused top {n} (upper bound)"] = beir_scores(
            qids,
            data.qrels,
            [
                (oracle(top_long[0], data.qrels[q], n)[:TOP_K], top_long[1])
                for q, top_long in zip(qids, base_full, strict=True)
            ],
        )
    for wd, wb in args.rrf_weights:
        out[f"RRF weights dense {wd:g} : bm25 {wb:g}"] = run((wd, wb), cfg.rrf_k, p_top)
    for k in args.rrf_ks:
        out[f"RRF k={k}"] = run((1.0, 1.0), k, p_top)
    for p in args.prefetch_sweep:
        out[f"prefetch {p} for the limit-10 call"] = run((1.0, 1.0), cfg.rrf_k, p)
    for p in args.prefetch_sweep:
        name = f"BM25 prefetch {p} for the long call (dense keeps {p_deep})"
        out[name] = beir_scores(qids, data.qrels, lists((1.0, 1.0), cfg.rrf_k, p_top, p))
    for spec in args.combos:
        steps = dict(part.split("=", 1) for part in spec.split(",") if part)
        weights = pairs(steps.get("w", "1:1"))[0]
        k = int(steps.get("k", cfg.rrf_k))
        bm25_deep = int(steps["bd"]) if "bd" in steps else None
        floor = float(steps["bf"]) if "bf" in steps else None
        out[f"combo: {spec} (fusion steps only)"] = beir_scores(
            qids, data.qrels, lists(weights, k, p_top, bm25_deep, floor)
        )
    # Neighbour expansion applied blindly (no session key): SciFact documents share one
    # timestamp, so "adjacent" can only mean adjacent in storage order. Shows why the idea must
    # be gated on an explicit conversation/session key.
    order = list(doc_of.values())
    position = {did: i for i, did in enumerate(order)}

    def blind_neighbours(did: str) -> list[str]:
        i = position[did]
        return [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]

    for triggers, decay in args.neighbour_settings[:1]:
        out[f"neighbours +-1 of top {triggers}, decay {decay:g}, by storage order (no session)"] = (
            beir_scores(
                qids,
                data.qrels,
                [
                    (
                        expand_neighbours(top, blind_neighbours, triggers=triggers, decay=decay)[
                            :TOP_K
                        ],
                        expand_neighbours(deep, blind_neighbours, triggers=triggers, decay=decay)[
                            :BEIR_DEPTH
                        ],
                    )
                    for top, deep in base_full
                ],
            )
        )
    if product is not None:
        out["_fidelity"] = {
            "identical_top10_lists": mean(
                float(a[0] == b[0]) for a, b in zip(base, product, strict=True)
            ),
            "identical_long_lists": mean(
                float(a[1] == b[1]) for a, b in zip(base, product, strict=True)
            ),
        }
    return out


# =========================================================================== reporting


def run_context(service: Any, args: argparse.Namespace) -> dict[str, Any]:
    info = service.embedder.info
    settings = service.settings.model_dump(mode="json")
    for key in ("data_dir", "models_dir", "qdrant_api_key"):
        settings.pop(key, None)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "machine": machine_info(),
        "model": {
            "name": info.name,
            "dimension": info.dimension,
            "max_tokens": info.max_tokens,
            "source": info.source,
            "variant": info.variant,
        },
        "reranker": service.reranker.name if service.reranker.available else None,
        "settings": settings,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "clock": NOW.isoformat(),
        "recall_arguments": "include_stale=true (LoCoMo sessions are 2022-2023: stale by the "
        "90-day episodic rule); limit=10 for recall@5/@10 and nDCG@10; limit=200 + "
        "max_tokens=4000 for the budget metric; limit=100 for BEIR recall@100",
    }


def machine_info() -> dict[str, Any]:
    versions = {}
    for package in ("fastembed", "onnxruntime", "qdrant-edge-py", "tokenizers", "numpy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": cpu_model(),
        "packages": versions,
        "ferrex_commit": git_commit(),
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def git_commit() -> str | None:
    """HEAD, plus "+dirty(files)" when src/ has uncommitted changes (read-only git calls)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--short", "--", "src"],
            capture_output=True,
            text=True,
            check=False,
            timeout=5,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return None
    changed = [line[3:] for line in dirty if line.strip()]
    return f"{head}+dirty({', '.join(changed)})" if changed else head or None


def fmt(value: float) -> str:
    return (
        "  -  "
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:.3f}")
    )


def print_locomo(result: dict[str, Any]) -> None:
    ingest = result["ingest"]
    print(
        f"\nLoCoMo ({', '.join(result['conversations'])}): {result['questions']} questions, "
        f"{ingest['stored']}/{ingest['turns']} turns stored (rejected: {ingest['rejected'] or 0}; "
        f"evidence turns among them: {len(ingest['evidence_turns_rejected'])}); "
        f"model {result['model']['name']} ({result['model']['source']})"
    )
    names = [*CATEGORIES.values(), "overall"]
    header = f"{'mode':<16}{'metric':<10}" + "".join(f"{n:>13}" for n in names)
    print(header)
    print("-" * len(header))
    counts = result["modes"][next(iter(result["modes"]))] if result["modes"] else {}
    print(f"{'(questions)':<26}" + "".join(f"{counts.get(n, {}).get('n', 0):>13}" for n in names))
    for mode, table in result["modes"].items():
        for metric, label in (
            ("recall@5", "R@5"),
            ("recall@10", "R@10"),
            ("all_evidence_4k", "all@4k"),
        ):
            first = mode if metric == "recall@5" else ""
            print(
                f"{first:<16}{label:<10}" + "".join(f"{fmt(table[n][metric]):>13}" for n in names)
            )
    if result["rerank"].startswith("n/a"):
        print(f"{RERANK_MODE:<16}{result['rerank']}")
    print_latency(result)
    if result["variants"]:
        print(
            "\nvariants (post-processing of the same stored data; overall, and R@10 per category)"
        )
        head = f"{'variant':<72}{'R@5':>7}{'R@10':>7}{'all@4k':>8}" + "".join(
            f"{n[:9]:>10}" for n in CATEGORIES.values()
        )
        print(head)
        rows = [("product hybrid", result["modes"].get("hybrid")), *result["variants"].items()]
        for name, table in rows:
            if table is None or name.startswith("_"):
                continue
            overall = table["overall"]
            print(
                f"{name[:71]:<72}{fmt(overall['recall@5']):>7}{fmt(overall['recall@10']):>7}"
                f"{fmt(overall['all_evidence_4k']):>8}"
                + "".join(f"{fmt(table[n]['recall@10']):>10}" for n in CATEGORIES.values())
            )
        print_fidelity(result["variants"])


def print_fidelity(variants: dict[str, Any]) -> None:
    fidelity = variants.get("_fidelity")
    if fidelity:
        print(
            "client-side fusion reproduces the product's hybrid lists for "
            f"{fidelity['identical_top10_lists']:.1%} of limit-10 calls and "
            f"{fidelity['identical_long_lists']:.1%} of long calls"
        )


def print_latency(result: dict[str, Any]) -> None:
    long_call = "limit 200 + 4k budget" if result["dataset"] == "locomo" else "limit 100"
    print(
        "\nlatency (ms). recall = limit 10, embedding the query included; embed = the model alone "
        "on the same query just before;\nlong = the "
        f"{long_call} call (query embedding cached)"
    )
    print(
        f"{'mode':<16}{'embed p50':>10}{'p95':>7}{'recall p50':>12}{'p95':>7}"
        f"{'p50/embed':>11}{'p95/embed':>11}{'long p50':>10}{'p95':>7}"
    )
    for mode, lat in result["latency"].items():
        print(
            f"{mode:<16}{lat['embed_p50_ms']:>10.1f}{lat['embed_p95_ms']:>7.1f}"
            f"{lat['recall_p50_ms']:>12.1f}{lat['recall_p95_ms']:>7.1f}"
            f"{lat['recall_p50_x_embed']:>10.2f}x{lat['recall_p95_x_embed']:>10.2f}x"
            f"{lat['long_recall_p50_ms']:>10.1f}{lat['long_recall_p95_ms']:>7.1f}"
        )


def print_beir(result: dict[str, Any]) -> None:
    ingest = result["ingest"]
    print(
        f"\nBEIR {Path(result['path']).name} (split {result['split']}): {result['queries']} "
        f"queries, {ingest['stored']}/{ingest['documents']} documents stored "
        f"({ingest['truncated']} truncated to the context window; "
        f"rejected: {ingest['rejected'] or 0}, relevant among them: "
        f"{len(ingest['relevant_documents_rejected'])})"
    )
    print(f"{'mode':<16}{'nDCG@10':>9}{'R@100':>9}{'p50 ms':>9}{'p95 ms':>9}{'p50/embed':>11}")
    for mode, scores in result["modes"].items():
        lat = result["latency"][mode]
        print(
            f"{mode:<16}{scores['ndcg@10']:>9.3f}{scores['recall@100']:>9.3f}"
            f"{lat['recall_p50_ms']:>9.1f}{lat['recall_p95_ms']:>9.1f}"
            f"{lat['recall_p50_x_embed']:>10.2f}x"
        )
    if result["rerank"].startswith("n/a"):
        print(f"{RERANK_MODE:<16}{result['rerank']}")
    print_latency(result)
    if result["variants"]:
        print("\nvariants (client-side fusion over the same index)")
        for name, scores in result["variants"].items():
            if name.startswith("_"):
                continue
            print(f"{name[:60]:<61}{scores['ndcg@10']:>9.3f}{scores['recall@100']:>9.3f}")
        print_fidelity(result["variants"])


def write_json(result: dict[str, Any], out_dir: Path, label: str | None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    named = result["dataset"] in ("locomo", "assistant-dev")
    name = result["dataset"] if named else Path(result["path"]).name
    suffix = f"-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}" if label else ""
    path = out_dir / f"{name}-{stamp}{suffix}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return path


# =========================================================================== CLI


def pairs(value: str) -> list[tuple[float, float]]:
    """ "1:1,1:2" -> [(1, 1), (1, 2)]."""
    out = []
    for item in filter(None, value.split(",")):
        left, _, right = item.partition(":")
        out.append((float(left), float(right)))
    return out


def neighbour_settings(value: str) -> list[tuple[int, float]]:
    """ "20:0.6,10:0.9" -> [(20, 0.6), (10, 0.9)] (triggers : decay)."""
    return [(int(t), d) for t, d in pairs(value)]


def numbers(cast: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda value: [cast(v) for v in filter(None, value.split(","))]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", nargs="?", choices=["locomo", "beir", "assistant"])
    parser.add_argument("path", nargs="?", type=Path, help="data file (LoCoMo) or directory (BEIR)")
    parser.add_argument("--locomo", nargs="?", const=DEFAULT_LOCOMO, type=Path, metavar="PATH")
    parser.add_argument("--beir", nargs="?", const=DEFAULT_BEIR, type=Path, metavar="DIR")
    parser.add_argument(
        "--assistant",
        nargs="?",
        const=DEFAULT_ASSISTANT,
        type=Path,
        metavar="PATH",
        help="the mixed-type assistant-dev set (bench/assistant.py: P@1, MRR, as_of, empty)",
    )
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument(
        "--top-only",
        action="store_true",
        help="LoCoMo: only the limit-10 call (R@5, R@10; no budget metric): for slow engines",
    )
    parser.add_argument("--split", default="train", help="BEIR qrels split (default train)")
    parser.add_argument(
        "--beir-subset",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=None,
        metavar="QUERIES,DOCUMENTS",
        help="BEIR: the first QUERIES queries over DOCUMENTS documents (theirs, then others)",
    )
    parser.add_argument(
        "--modes",
        type=lambda v: v.split(","),
        default=list(PRODUCT_MODES),
        help="comma list of dense,bm25,hybrid (default all)",
    )
    parser.add_argument("--model-tier", default="small")
    parser.add_argument(
        "--engine",
        choices=["embedded", "qdrant-local"],
        default="embedded",
        help="the embedded engine, or the qdrant-client adapter in its local mode",
    )
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=None,
        help="model cache to reuse (default: inside the temporary data dir)",
    )
    parser.add_argument(
        "--reranker-path",
        type=Path,
        default=None,
        help="local ONNX cross-encoder: adds the hybrid+rerank mode",
    )
    parser.add_argument(
        "--try-reranker",
        action="store_true",
        help="try the default reranker tier from the model cache",
    )
    parser.add_argument("--batch", type=int, default=256, help="store_many batch size")
    parser.add_argument(
        "--ingest-clock",
        choices=("session", "now"),
        default="session",
        help="LoCoMo: store each session at its own date (as a live agent would; default) or "
        "everything at the fixed NOW",
    )
    parser.add_argument(
        "--embed-cache",
        default=str(REPO / "bench" / ".cache"),
        help="directory of cached document embeddings ('' disables)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--label", default=None, help="suffix for the JSON file name")
    parser.add_argument(
        "--optimize",
        action="store_true",
        help="run the index optimizer after ingestion (as `ferrex rebuild-index`)",
    )
    exp = parser.add_argument_group("experiments (see bench/RESULTS.md)")
    exp.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="settings override, e.g. retrieval.prefetch_limit=50 (repeatable)",
    )
    exp.add_argument(
        "--content-format",
        choices=["plain", "dated"],
        default="plain",
        help='LoCoMo content: "speaker: text" (plain) or "[date] speaker: text"',
    )
    exp.add_argument(
        "--captions",
        action="store_true",
        help="append the image caption (blip_caption) to turns that share a photo",
    )
    exp.add_argument(
        "--bm25-avg-len",
        type=float,
        default=None,
        help="Bm25Encoder(avg_len=...) for documents and queries (default: 256)",
    )
    exp.add_argument(
        "--no-bm25-date",
        action="store_true",
        help="ablation: index episodic memories without their event date in the BM25 document",
    )
    exp.add_argument(
        "--speaker-entities",
        action="store_true",
        help="store each LoCoMo turn with entities=[speaker]",
    )
    exp.add_argument(
        "--entity-filter",
        action="store_true",
        help="recall with entities=[name] when the question names one speaker "
        "(needs --speaker-entities)",
    )
    exp.add_argument(
        "--variants",
        action="store_true",
        help="also score post-processing variants (fusion, neighbours, boosts)",
    )
    exp.add_argument("--rrf-weights", type=pairs, default=pairs("1:1.5,1.5:1,1:2,2:1"))
    exp.add_argument("--rrf-ks", type=numbers(int), default=[2, 5, 10, 20, 30, 120])
    exp.add_argument("--prefetch-sweep", type=numbers(int), default=[50, 100, 200])
    exp.add_argument("--neighbour-window", type=int, default=1)
    exp.add_argument(
        "--neighbour-settings",
        type=neighbour_settings,
        default=neighbour_settings("20:0.6,20:0.8,10:0.9,50:0.6"),
    )
    exp.add_argument(
        "--combos",
        type=lambda v: [c.strip() for c in v.split(";") if c.strip()],
        default=[],
        help='";"-separated combinations, e.g. "k=10,speaker=2,nb=20:0.6;k=10,w=1:1.5"',
    )
    exp.add_argument("--oracle-rerank", type=numbers(int), default=[20, 50])
    exp.add_argument("--speaker-boosts", type=numbers(float), default=[1.2, 1.5, 2.0])
    args = parser.parse_args(argv)
    if args.dataset == "locomo":
        args.locomo = args.path or DEFAULT_LOCOMO
    elif args.dataset == "beir":
        args.beir = args.path or DEFAULT_BEIR
    elif args.dataset == "assistant":
        args.assistant = args.path or DEFAULT_ASSISTANT
    elif args.path is not None:
        parser.error("a path needs a dataset name first (locomo PATH or beir DIR)")
    if args.locomo is None and args.beir is None and args.assistant is None:
        parser.error(
            "say what to run: locomo [PATH], beir [DIR], assistant [PATH], or "
            "--locomo/--beir/--assistant"
        )
    if args.entity_filter and not args.speaker_entities:
        parser.error("--entity-filter needs --speaker-entities")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from ferrex.logs import configure

    configure("error")
    written = []
    if args.locomo is not None:
        result = run_locomo(args, Path(args.locomo).resolve())
        print_locomo(result)
        written.append(write_json(result, args.out_dir, args.label))
        print(f"\nLoCoMo run: {result['seconds']} s")
    if args.beir is not None:
        result = run_beir(args, Path(args.beir).resolve())
        print_beir(result)
        written.append(write_json(result, args.out_dir, args.label))
        print(f"\nBEIR run: {result['seconds']} s")
    if args.assistant is not None:
        import assistant

        started = time.perf_counter()
        outcome = assistant.run(Path(args.assistant).resolve(), args.set, None, args.engine)
        for finding in outcome["findings"]:
            print(f"assistant-dev store: {finding}")
        for name in ("all", "tune", "check"):
            for line in assistant.report(name, outcome[name], name == "all"):
                print(line)
        outcome["seconds"] = round(time.perf_counter() - started, 1)
        outcome["dataset"] = "assistant-dev"
        written.append(write_json(outcome, args.out_dir, args.label))
    for path in written:
        print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark stores: built once through ``store_many`` (the bulk import path), cached outside the
repository and copied for each run (runs write into their copy).

    python bench/stores.py 100000          # build (or reuse) the cached 100k store

The cache lives in ``$FERREX_BENCH_CACHE`` (default ``~/.cache/ferrex-bench``), keyed by size,
seed, model tier and corpus version; ``build.json`` beside the data records how long the bulk
import took.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

from corpus import CORPUS_VERSION, memories  # noqa: E402
from ferrex.bootstrap import Options, build_service  # noqa: E402
from ferrex.config import load_settings  # noqa: E402
from ferrex.core.service import MemoryService  # noqa: E402
from ferrex.server.calls import store_many  # noqa: E402

BATCH = 512


def cache_root() -> Path:
    return Path(os.environ.get("FERREX_BENCH_CACHE", "~/.cache/ferrex-bench")).expanduser()


def settings_cli(data_dir: Path, tier: str) -> dict[str, Any]:
    return {
        "data_dir": str(data_dir),
        "model_tier": tier,
        "offline": True,
        "rerank": False,
        "cache.enabled": False,
    }


def settings_overrides(pairs: Sequence[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` pairs (``--set`` of the bench scripts) as (dotted key, JSON or text value)."""
    out = []
    for pair in pairs:
        key, _, raw = pair.partition("=")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out.append((key.strip(), value))
    return out


def setting_env(pairs: Sequence[str]) -> dict[str, str]:
    """The same pairs as the environment of a served ferrex (``FERREX_SECTION__KEY``)."""
    return {
        "FERREX_" + key.strip().upper().replace(".", "__"): raw.strip()
        for key, _, raw in (pair.partition("=") for pair in pairs)
    }


def open_service(data_dir: Path, tier: str, overrides: Sequence[str] = ()) -> MemoryService:
    cli = {**settings_cli(data_dir, tier), **dict(settings_overrides(overrides))}
    settings, _ = load_settings(cli=cli, environ={})
    service = build_service(settings, Options(explicit_model_tier=True))
    service.ensure_ready()
    return service


def bulk_load(
    service: MemoryService, size: int, stream: Iterator[dict[str, Any]]
) -> dict[str, Any]:
    """Store ``size`` memories through ``store_many``; the bulk import's own throughput."""
    loaded = rejected = 0
    start = time.perf_counter()
    last_report = start
    while loaded < size:
        batch = list(islice(stream, min(BATCH, size - loaded)))
        results = store_many(service, batch)
        ok = sum(1 for r in results if "id" in r and r.get("status") != "duplicate")
        loaded += ok
        rejected += len(results) - ok
        now = time.perf_counter()
        if now - last_report > 30:
            last_report = now
            rate = loaded / (now - start)
            print(f"  {loaded}/{size} stored ({rate:.0f}/s)", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    return {
        "size": size,
        "stored": loaded,
        "rejected": rejected,
        "seconds": round(seconds, 1),
        "per_second": round(loaded / seconds, 1),
    }


def store_path(size: int, seed: int, tier: str) -> Path:
    return cache_root() / f"store-{size}-s{seed}-{tier}-c{CORPUS_VERSION}"


def cached_store(size: int, seed: int, tier: str, *, rebuild: bool = False) -> Path:
    """The cached store for this size (built now if missing)."""
    return cached_stores([size], seed, tier, rebuild=rebuild)[size]


def cached_stores(
    sizes: list[int], seed: int, tier: str, *, rebuild: bool = False
) -> dict[int, Path]:
    """Cached stores of every size, built in ONE growing store (the same memory stream) that
    is closed and copied at each size: the 1k store is the first 1,000 memories of the 10k."""
    wanted = sorted(set(sizes))
    paths = {size: store_path(size, seed, tier) for size in wanted}
    missing = [s for s in wanted if rebuild or not (paths[s] / "build.json").exists()]
    if not missing:
        return paths
    work = cache_root() / f"building-s{seed}-{tier}-c{CORPUS_VERSION}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    stream = memories(seed)
    loaded = 0
    seconds = 0.0
    rejected = 0
    for size in wanted:
        service = open_service(work, tier)
        try:
            part = bulk_load(service, size - loaded, stream)
        finally:
            service.close()
        loaded += part["stored"]
        rejected += part["rejected"]
        seconds += part["seconds"]
        if size in missing:
            target = paths[size]
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            shutil.copytree(work, target / "data")
            build = {
                "size": size,
                "stored": loaded,
                "rejected": rejected,
                "seconds": round(seconds, 1),
                "per_second": round(loaded / seconds, 1),
            }
            (target / "build.json").write_text(json.dumps(build, indent=2), encoding="utf-8")
            print(f"  cached {target} {build}", file=sys.stderr, flush=True)
    shutil.rmtree(work)
    return paths


SENTENCES = 1500  # the composed stores' sentence pool (a larger one: its own cache entry)


def composed_path(size: int, seed: int, tier: str, late: bool, sentences: int) -> Path:
    suffix = "-composed-late" if late else "-composed"
    pool = "" if sentences == SENTENCES else f"-p{sentences}"
    return cache_root() / f"store-{size}-s{seed}-{tier}-c{CORPUS_VERSION}{suffix}{pool}"


def composed_store(
    size: int,
    base: Path,
    seed: int,
    tier: str,
    *,
    sentences: int = SENTENCES,
    checkpoints: Sequence[int] = (),
) -> Path:
    """A store of ``size`` memories grown from the cached ``base`` store with memories whose
    vectors are COMPOSED, not embedded: each is two real SciFact sentences of two different
    papers, its vector the normalised sum of the two sentences' real embeddings (``sentences``
    of them embedded once). Everything else is the real write path (``store_many``: SQLite,
    BM25, dedup, the engine). With the late-interaction channel, a composed memory's token
    vectors are the two sentences' real ones, each pooled once to half the stored count (a
    separate cache entry, ``-composed-late``). Embedding 90,000 more texts takes hours of a
    shared 2-core box; this takes minutes. Recall, store and stats at this size all run the
    real model.

    A pool larger than the default (``sentences``; ~2 x its square ordered pairs) serves stores of
    a million memories, which skip the credential scan too (SciFact sentences hold none:
    ``bench/secrets_cost.py``; ~20% of this build's time). ``checkpoints``: smaller sizes on the
    way, each closed and copied into its own cache entry as the build passes it (the build log
    on stderr gives the rate as the store grows)."""
    late = _has_tokens_channel(base / "data" / "index")
    root = composed_path(size, seed, tier, late, sentences)
    if (root / "build.json").exists():
        return root
    if not (root / "data").exists():  # else: resume an interrupted build
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(base / "data", root / "data")
    stops = sorted(c for c in checkpoints if c < size)
    stops = [
        c
        for c in stops
        if not (composed_path(c, seed, tier, late, sentences) / "build.json").exists()
    ]
    info: dict[str, Any] = {}
    while True:
        target = stops.pop(0) if stops else size
        info = _compose(target, base, root, seed, tier, late, sentences, info)
        if target == size:
            break
        copy = composed_path(target, seed, tier, late, sentences)
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir(parents=True)
        shutil.copytree(root / "data", copy / "data")
        (copy / "build.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
        print(f"  cached {copy} {json.dumps(info)}", file=sys.stderr, flush=True)
    (root / "build.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return root


def _compose(
    size: int,
    base: Path,
    root: Path,
    seed: int,
    tier: str,
    late: bool,
    sentences: int,
    before: dict[str, Any],
) -> dict[str, Any]:
    """Grow the store at ``root`` to ``size`` composed memories (``composed_store``)."""
    import random

    import numpy as np

    from corpus import _abstracts

    rng = random.Random(seed)
    abstracts = _abstracts()
    picked = [(rng.randrange(len(abstracts)), rng.random()) for _ in range(sentences)]
    texts = []
    papers = []
    for paper, where in picked:
        options = abstracts[paper][1]
        texts.append(options[int(where * len(options))])
        papers.append(paper)
    pool = sentences != SENTENCES
    service = open_service(root / "data", tier, ["secret_handling=allow"] if pool else [])
    real_embed = service.embedder.embed_documents
    start = time.perf_counter()
    saved = root / f"sentences-{sentences}.npy"
    if saved.exists():
        vectors = list(np.load(saved))
    else:
        vectors = real_embed(texts)
        np.save(saved, np.stack(vectors))
    embed_seconds = time.perf_counter() - start
    # Each composed text is a pair of sentences of two different papers, never seen before
    # (``used``), so the dedup search (brute force over the growing unindexed store: the build's
    # whole cost otherwise) can only answer "no duplicate": skip it for these.
    service.storing.dedup.find = lambda *args, **kwargs: None  # type: ignore[method-assign]
    if pool:  # and the batch's nearest-neighbour search, which only that check reads (brute
        # force over the growing store: ~2% of the build at 60k memories, growing with it)
        service.storing.dedup.search_nearest = lambda *args, **kwargs: None  # type: ignore[method-assign]
    used: set[tuple[int, int]] = set()
    composed: dict[str, Any] = {}

    service.embedder.embed_documents = _known_first(composed, real_embed)  # type: ignore[method-assign]
    if late:
        # The late-interaction channel likewise: each sentence's own token vectors (the real
        # model pass), pooled once to half the stored count; a composed memory stores the two
        # halves (what pooling the pair would keep, without pooling 90,000 pairs again).
        from ferrex.core.index.late_interaction import document_tokens
        from ferrex.core.ports import TokenEmbedding

        half = max(1, service.settings.retrieval.late_interaction.tokens // 2)
        kept = root / f"sentences-{sentences}-tokens{half}.pickle"
        if kept.exists():  # a checkpointed build's later stages
            sentence_tokens = pickle.loads(kept.read_bytes())
        else:
            sentence_tokens = [
                document_tokens(e, half) for e in service.embedder.embed_documents_tokens(texts)
            ]
            kept.write_bytes(pickle.dumps(sentence_tokens))
        composed_tokens: dict[str, Any] = {}
        service.embedder.embed_documents_tokens = _known_first(  # type: ignore[method-assign]
            composed_tokens, service.embedder.embed_documents_tokens
        )
    try:
        have = service.meta.count_memories()
        if pool:  # a resumed or checkpointed build draws new pairs (``used`` starts empty)
            rng = random.Random(f"{seed}:{have}")
        stored = 0
        start = time.perf_counter()
        last_report = start
        while have + stored < size:
            batch = []
            for _ in range(min(BATCH, size - have - stored)):
                a, b = rng.sample(range(len(texts)), 2)
                if papers[a] == papers[b] or (a, b) in used:
                    continue
                used.add((a, b))
                text = f"{texts[a]} {texts[b]}"
                vector = vectors[a] + vectors[b]
                composed[text] = vector / float(np.linalg.norm(vector))
                if late:
                    pair = [t for t in (sentence_tokens[a], sentence_tokens[b]) if t is not None]
                    tokens = np.vstack(pair) if pair else None
                    words = ("w",) * (0 if tokens is None else len(tokens))
                    composed_tokens[text] = TokenEmbedding(composed[text], tokens, words)
                batch.append({"content": text})
            results = store_many(service, batch)
            stored += sum(1 for r in results if "id" in r and r.get("status") != "duplicate")
            composed.clear()
            if late:
                composed_tokens.clear()
            now = time.perf_counter()
            if now - last_report > 60:
                rate = stored / (now - start)
                print(f"  {have + stored} memories ({rate:.0f}/s)", file=sys.stderr, flush=True)
                last_report = now
        seconds = time.perf_counter() - start
    finally:
        service.close()
    composed_count = stored + int(before.get("composed", 0))
    total_seconds = seconds + float(before.get("seconds", 0))
    return {
        "size": size,
        "stored": have + stored,
        "composed": composed_count,
        "base": str(base.name),
        "sentences_embedded": sentences,
        "sentence_embedding_seconds": round(embed_seconds, 1),
        "seconds": round(total_seconds, 1),
        "per_second": round(composed_count / total_seconds, 1),
        "last_stage_per_second": round(stored / seconds, 1),
        "credential_scan": "skipped" if pool else "on",
        "note": "per_second excludes the model (composed vectors): not a bulk-import figure",
    }


def _known_first(known: dict[str, Any], embed: Any) -> Any:
    """An embedding call that answers the texts in ``known`` from it and embeds the rest."""

    def call(batch: Any) -> list[Any]:
        found = [known.get(t) for t in batch]
        missing = [t for t, v in zip(batch, found, strict=True) if v is None]
        fresh = iter(embed(missing) if missing else [])
        return [v if v is not None else next(fresh) for v in found]

    return call


def _has_tokens_channel(index: Path) -> bool:
    try:
        config = json.loads((index / "edge_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return "tokens" in (config.get("vectors") or {})


def copy_store(cached: Path, into: Path) -> Path:
    target = into / "data"
    shutil.copytree(cached / "data", target)
    return target


def build_info(cached: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((cached / "build.json").read_text(encoding="utf-8"))
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--sentences",
        type=int,
        default=SENTENCES,
        help="the composed memories' sentence pool (4000 for a million: its own cache entry)",
    )
    parser.add_argument(
        "--checkpoints",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="sizes on the way to --composed, each cached as the build passes it",
    )
    parser.add_argument(
        "--composed",
        type=int,
        default=0,
        metavar="N",
        help="also grow the largest size into an N-memory store of composed vectors",
    )
    args = parser.parse_args()
    from ferrex.logs import configure

    configure("error")
    paths = cached_stores(args.sizes, args.seed, args.model_tier, rebuild=args.rebuild)
    for path in paths.values():
        print(path, json.dumps(build_info(path)))
    if args.composed:
        base = paths[max(paths)]
        path = composed_store(
            args.composed,
            base,
            args.seed,
            args.model_tier,
            sentences=args.sentences,
            checkpoints=args.checkpoints,
        )
        print(path, json.dumps(build_info(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

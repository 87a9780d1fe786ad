"""Retrieval settings sweeps on one stored data set (LoCoMo dev or SciFact dev), paired.

    python bench/sweep.py locomo --variant 'rrf:retrieval.fusion="rrf"' --variant 'product:'
    python bench/sweep.py beir --dump bench/.cache/features-beir.json

Stores the data once through ``MemoryService.store_many`` exactly as ``bench/retrieval.py`` does
(same loaders, same ingestion, document embeddings cached in ``bench/.cache``), then for each
variant (a name and ``key=value`` settings overrides, applied to the live settings) asks every
question twice — ``limit`` 10 and the deep call (LoCoMo 200, SciFact 100) — with
``retrieval.min_score`` 0 and ``explain``, and applies relevance floors afterwards: a floor
``f`` drops the results whose base score (relevance, before the recency boost) is below ``f``,
which is what the service returns with ``retrieval.min_score = f`` (the floor is applied before
the limit cut). The answer gate (``retrieval.answer_gate``) is off in the service and applied
afterwards the same way: a question whose deep candidates' best relevance and best cosine are
both under ``--gate R,C`` (default: the configured gate; ``0,0`` for none) gets no result at
any floor. Prints, per variant, the metrics at every floor (the trade-off curve) and how many
questions the gate left without an answer.

``--dump`` writes every deep candidate's evidence (cosine, normalised BM25), label and (with
the late-interaction channel) mean MaxSim for ``bench/calibrate.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import retrieval as rb  # noqa: E402  (bench/retrieval.py)
from stores import settings_overrides  # noqa: E402

FLOORS = [0.0, 0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5]


def apply(service: Any, base: Any, overrides: Sequence[tuple[str, Any]]) -> None:
    """The variant's overrides on a fresh copy of the run's settings (variants never add up)."""
    service.settings.retrieval = base.model_copy(deep=True)
    for key, value in overrides:
        target: Any = service.settings
        parts = key.split(".")
        for part in parts[:-1]:
            target = getattr(target, part)
        current = getattr(target, parts[-1])
        if hasattr(current, "model_validate") and isinstance(value, dict):
            value = type(current).model_validate(value)
        setattr(target, parts[-1], value)
    service.cache.invalidate()
    service.cache.queries.clear()


def parse_variant(text: str) -> tuple[str, list[tuple[str, Any]]]:
    name, _, rest = text.partition(":")
    pairs = [p for p in _split(rest) if p.strip()]
    return name.strip(), settings_overrides(pairs)


def _split(text: str) -> list[str]:
    """Comma-separated key=value pairs; commas inside JSON brackets stay."""
    out, depth, current = [], 0, ""
    for char in text:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += char
    out.append(current)
    return out


def ask(service: Any, arguments: dict[str, Any]) -> list[tuple[str, float, dict[str, Any]]]:
    response = rb.invoke(service, "recall", {**arguments, "explain": True, "include_stale": True})
    return [(r["id"], r["explain"]["base_score"], r["explain"]) for r in response["results"]]


def floored(ranked: Sequence[tuple[str, float, Any]], floor: float) -> list[str]:
    """What ``retrieval.min_score = floor`` keeps: the base score (relevance before the boost)
    at the floor, or with late interaction the two-channel relevance (as the service)."""
    return [
        mid
        for mid, base, e in ranked
        if (base if e.get("rerank_score") is not None else e.get("gate_relevance", base)) >= floor
    ]


def gate_passes(ranked: Sequence[tuple[str, float, Any]], gate: tuple[float, float]) -> bool:
    """What the service's answer gate decides on this question's candidates."""
    from ferrex.config.recall import AnswerGate
    from ferrex.core.recall.relevance import answers

    best_relevance = max(
        (e.get("gate_relevance", e.get("relevance")) or 0.0 for _, _, e in ranked), default=0.0
    )
    best_cosine = max((e.get("cosine") or 0.0 for _, _, e in ranked), default=0.0)
    if not ranked:
        return gate[0] <= 0 and gate[1] <= 0  # the service gates only a non-empty pool
    return answers(best_relevance, best_cosine, AnswerGate(relevance=gate[0], cosine=gate[1]))


def run(args: argparse.Namespace) -> None:
    variants = [parse_variant(v) for v in args.variant] or [("product", [])]
    with tempfile.TemporaryDirectory(prefix="ferrex-sweep-") as tmp:
        service = rb.build(args, Path(tmp))
        try:
            started = time.perf_counter()
            if args.dataset == "locomo":
                conversations = rb.load_locomo(rb.DEFAULT_LOCOMO, args.limit_conversations)
                questions = [(c, q) for c in conversations for q in c.questions]
                stored, _ = rb.ingest_locomo(service, conversations, args)
                counter = rb.token_counter(service)
                tokens = {
                    mid: counter(service.meta.get_memory(mid).display_text())
                    for s in stored.values()
                    for mid in s.turn_of
                }
                items = [
                    (
                        {"query": q.text, "namespace": c.sample_id},
                        {stored[c.sample_id].memory_of[e] for e in q.evidence},
                        q.category,
                    )
                    for c, q in questions
                ]
                deep = rb.BUDGET_LIMIT
            else:
                data = rb.load_beir(rb.DEFAULT_BEIR, args.split)
                memory_of, _ = rb.ingest_beir(service, data, "beir", args)
                qids = sorted(data.queries)
                items = [
                    (
                        {"query": data.queries[q], "namespace": "beir"},
                        {memory_of[d]: g for d, g in data.qrels[q].items() if d in memory_of},
                        0,
                    )
                    for q in qids
                ]
                tokens = {}
                deep = rb.BEIR_DEPTH
            print(f"stored in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            rb.set_mode(service, "hybrid", 0)
            base = service.settings.retrieval.model_copy(deep=True)
            configured = base.answer_gate
            gate = args.gate or (configured.relevance, configured.cosine)
            dump: list[dict[str, Any]] = []
            results: dict[str, Any] = {}
            for name, overrides in variants:
                apply(
                    service,
                    base,
                    [
                        ("retrieval.min_score", 0.0),
                        ("retrieval.answer_gate.relevance", 0.0),
                        ("retrieval.answer_gate.cosine", 0.0),
                        *overrides,
                    ],
                )
                t0 = time.perf_counter()
                tops, deeps, ungated = [], [], []
                gated = 0
                for arguments, _, _ in items:
                    top = ask(service, {**arguments, "limit": rb.TOP_K})
                    long = ask(service, {**arguments, "limit": deep})
                    ungated.append(long)  # --dump: every question's candidates, for calibration
                    if not gate_passes(long, gate):
                        top, long = [], []
                        gated += 1
                    tops.append(top)
                    deeps.append(long)
                seconds = time.perf_counter() - t0
                curve = []
                for floor in args.floors:
                    if args.dataset == "locomo":
                        scores = rb.Scores()
                        for (_, evidence, category), top, long in zip(
                            items, tops, deeps, strict=True
                        ):
                            kept = floored(long, floor)
                            budget = rb.fit(kept, tokens, rb.BUDGET_TOKENS, rb.BUDGET_LIMIT)
                            scores.add(category, evidence, floored(top, floor), set(budget))
                        table = scores.table()
                        row = {
                            "floor": floor,
                            "R@10": table["overall"]["recall@10"],
                            "all4k": table["overall"]["all_evidence_4k"],
                            **{f"R@10 {k}": v["recall@10"] for k, v in table.items()},
                        }
                    else:
                        ndcg = rb.mean(
                            rb.ndcg_at(floored(top, floor), rel, rb.TOP_K)
                            for (_, rel, _), top in zip(items, tops, strict=True)
                        )
                        r100 = rb.mean(
                            rb.recall_at(floored(long, floor), rel, rb.BEIR_DEPTH)
                            for (_, rel, _), long in zip(items, deeps, strict=True)
                        )
                        row = {"floor": floor, "nDCG@10": ndcg, "R@100": r100}
                    row["results/query"] = rb.mean(len(floored(t, floor)) for t in tops)
                    curve.append(row)
                results[name] = {
                    "overrides": overrides,
                    "curve": curve,
                    "seconds": seconds,
                    "gate": gate,
                    "gated": gated,
                }
                print_curve(name, overrides, curve, seconds)
                print(f"answer gate {gate}: {gated} of {len(items)} questions get no result")
                if args.dump and not dump:
                    for (arguments, labels, _), long in zip(items, ungated, strict=True):
                        dump.append(
                            {
                                "query": arguments["query"],
                                "relevant": len(labels),
                                "candidates": [
                                    [
                                        e.get("cosine"),
                                        e.get("bm25_norm"),
                                        int(mid in labels),
                                        e.get("late"),
                                    ]
                                    for mid, _, e in long
                                ],
                            }
                        )
            if args.dump:
                Path(args.dump).parent.mkdir(parents=True, exist_ok=True)
                Path(args.dump).write_text(json.dumps(dump), encoding="utf-8")
                print(f"features: {args.dump}", file=sys.stderr)
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")
        finally:
            service.close()


def print_curve(name: str, overrides: Any, curve: list[dict[str, Any]], seconds: float) -> None:
    print(f"\n## {name} {overrides} ({seconds:.0f} s)")
    keys = [k for k in curve[0] if k != "floor"]
    print("| floor | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for row in curve:
        cells = [f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        print(f"| {row['floor']:g} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dataset", choices=["locomo", "beir"])
    parser.add_argument("--variant", action="append", default=[], help="name:key=value,...")
    parser.add_argument("--floors", type=rb.numbers(float), default=FLOORS)
    parser.add_argument(
        "--gate", type=rb.numbers(float), default=None, help="R,C (default: the configured gate)"
    )
    parser.add_argument("--dump", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args(argv)
    # What rb.build and the ingesters read.
    defaults = rb.parse_args(["locomo"])
    for key, value in vars(defaults).items():
        if not hasattr(args, key):
            setattr(args, key, value)
    from ferrex.logs import configure

    configure("error")
    run(args)


if __name__ == "__main__":
    main()

"""Golden-set regression gate (spec "Golden Set Retrieval Test"): recall@3 >= 0.7.

Stores golden_set/memories.json through the MemoryService (real SQLite, Qdrant Edge and the
offline all-MiniLM-L6-v2) and runs golden_set/queries.json. The clock is fixed so the recency
boosts, and therefore the figure, do not drift with the calendar. No trained cross-encoder is
available in this environment, so the gated figure is the fused (no-rerank) one; users with a
reranker run `python golden_set/run_golden.py --reranker-path DIR` for the other figure.
"""

from __future__ import annotations

from golden_set.run_golden import GATE, NOW, load, run
from tests.support.harness import ServiceFactory


def test_golden_set_is_well_formed() -> None:
    memories, queries = load()
    keys = [m["key"] for m in memories]
    assert len(memories) >= 20 and len(set(keys)) == len(keys)
    assert {m["type"] for m in memories} == {"episodic", "semantic", "procedural"}
    assert len(queries) >= 10
    for query in queries:
        assert query["expected"] and set(query["expected"]) <= set(keys)


def test_golden_set_recall_at_3_meets_the_gate(make_service: ServiceFactory) -> None:
    service = make_service(clock=lambda: NOW)
    report = run(service)
    print(f"golden set recall@3 = {report.recall_at_k:.3f} (reranked: {report.reranked})")
    misses = [q for q in report.per_query if q["recall"] < 1.0]
    assert report.recall_at_k >= GATE, misses


def test_golden_set_keeps_its_recall_at_the_default_floor_and_gate(
    make_service: ServiceFactory,
) -> None:
    """The relevance floor, the answer gate and late interaction as shipped (the fixture's
    services turn floor and gate off): no golden answer may fall under them. The paraphrase
    of "short, direct answers" (no word shared) has a low MaxSim; the floor judges the
    two-channel relevance, which keeps it."""
    from ferrex.config.recall import RetrievalConfig

    defaults = RetrievalConfig()
    service = make_service(
        clock=lambda: NOW,
        **{
            "retrieval.min_score": defaults.min_score,
            "retrieval.answer_gate.relevance": defaults.answer_gate.relevance,
            "retrieval.answer_gate.cosine": defaults.answer_gate.cosine,
        },
    )
    report = run(service)
    assert service.index.late_interaction is defaults.late_interaction.enabled
    misses = [q for q in report.per_query if q["recall"] < 1.0]
    assert report.recall_at_k >= 0.9, misses  # issue 15: 0.875 before context neighbours

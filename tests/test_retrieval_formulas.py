"""Retrieval formulas at the spec's boundary values ("Recency boost formulas" unit-test list)."""

from __future__ import annotations

import math

import pytest

from ferrex.config import RecencyConfig
from ferrex.core.memory import MemoryType
from ferrex.core.retrieval import (
    Candidate,
    fit_budget,
    order_candidates,
    rank_score,
    recency_boost,
    rerank_probability,
)

CFG = RecencyConfig()


@pytest.mark.parametrize(
    ("memory_type", "age", "expected"),
    [
        (MemoryType.EPISODIC, 0, 1.3),
        (MemoryType.EPISODIC, 30, 1.15),
        (MemoryType.EPISODIC, 60, 1.075),
        (MemoryType.EPISODIC, 300, 1.0 + 0.3 * 2 ** (-10)),
        (MemoryType.SEMANTIC, 0, 1.15),
        (MemoryType.SEMANTIC, 180, 1.075),
        (MemoryType.SEMANTIC, 300, 1.0 + 0.15 * 2 ** (-300 / 180)),
        (MemoryType.PROCEDURAL, 0, 1.0),
        (MemoryType.PROCEDURAL, 30, 1.0),
        (MemoryType.PROCEDURAL, 300, 1.0),
    ],
)
def test_recency_boost_spec_values(memory_type: MemoryType, age: float, expected: float) -> None:
    assert recency_boost(memory_type, age, CFG) == pytest.approx(expected, abs=1e-12)


def test_episodic_boost_is_about_one_at_300_days_and_floors_at_one() -> None:
    assert recency_boost("episodic", 300, CFG) == pytest.approx(1.0, abs=3e-4)
    assert recency_boost("episodic", 10_000, CFG) >= 1.0
    assert recency_boost("semantic", 10_000, CFG) >= 1.0
    # A future event (negative age) never boosts beyond the maximum.
    assert recency_boost("episodic", -5, CFG) == pytest.approx(1.3)


def test_boosts_are_multiplicative_and_large_enough_to_shift_rankings() -> None:
    """Cross-encoder scores differ by 0.2-0.5 between candidates; a fresh episodic memory with a
    rerank probability 20% lower than an old one must still be able to pass it."""
    old = Candidate("old", fused_score=0.03, fused_rank=1)
    fresh = Candidate("fresh", fused_score=0.02, fused_rank=2)
    scores = {"old": math.log(0.60 / 0.40), "fresh": math.log(0.50 / 0.50)}  # p = 0.60 and 0.50
    ages = {"old": 300.0, "fresh": 0.0}
    ordered, basis = order_candidates(
        [old, fresh],
        rerank_top_n=20,
        rerank=lambda head: [scores[c.memory_id] for c in head],
        boost_of=lambda c: recency_boost("episodic", ages[c.memory_id], CFG),
        base_k=5,
    )
    assert basis == "rerank"
    assert [c.memory_id for c in ordered] == ["fresh", "old"]
    assert ordered[0].final_score == pytest.approx(0.5 * 1.3)
    assert ordered[1].final_score == pytest.approx(0.6 * recency_boost("episodic", 300, CFG))


def test_rerank_probability_is_a_monotonic_sigmoid() -> None:
    assert rerank_probability(0.0) == 0.5
    assert rerank_probability(2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert rerank_probability(-800.0) == pytest.approx(0.0)
    assert rerank_probability(800.0) == pytest.approx(1.0)
    assert rerank_probability(-1.0) < rerank_probability(-0.5) < rerank_probability(3.0)


def test_bm25_relative_floor_drops_weak_lexical_matches() -> None:
    from ferrex.core.ports import IndexHit
    from ferrex.core.retrieval import apply_relative_floor

    hits = [
        IndexHit(f"p{i}", f"m{i}", score) for i, score in enumerate([10.0, 4.0, 2.0, 1.99, 0.5])
    ]
    assert [h.memory_id for h in apply_relative_floor(hits, 0.2)] == ["m0", "m1", "m2"]
    assert apply_relative_floor(hits, 0.0) == hits
    assert apply_relative_floor([], 0.2) == []


def test_rank_score_without_reranker() -> None:
    assert rank_score(1, 5) == 1.0
    assert rank_score(2, 5) == pytest.approx(6 / 7)
    assert rank_score(5, 5) == pytest.approx(0.6)
    # a maximal episodic boost lifts a memory one place (two past unboosted neighbours), not more
    assert rank_score(2, 5) * 1.3 > rank_score(1, 5)
    assert rank_score(3, 5) * 1.3 > rank_score(2, 5)
    assert rank_score(3, 5) * 1.3 < rank_score(1, 5)


def test_fused_order_ties_break_by_id_and_boost_reorders() -> None:
    candidates = [Candidate(mid, 0.01, rank) for rank, mid in enumerate(["b", "a", "c"], start=1)]
    ordered, basis = order_candidates(
        candidates, rerank_top_n=20, rerank=None, boost_of=lambda c: 1.0, base_k=5
    )
    assert basis == "fused"
    assert [c.memory_id for c in ordered] == ["b", "a", "c"]
    equal = [Candidate("z", 0.01, 1), Candidate("y", 0.01, 2)]
    ordered, _ = order_candidates(
        equal, rerank_top_n=20, rerank=lambda head: [1.0, 1.0], boost_of=lambda c: 1.0, base_k=5
    )
    assert [c.memory_id for c in ordered] == ["y", "z"]


def test_fit_budget_cuts_whole_results() -> None:
    texts = ["aaaa", "bb", "cccccc", "d"]
    count = len
    assert fit_budget(texts, count, 100) == (4, 13)
    assert fit_budget(texts, count, 6) == (2, 6)
    assert fit_budget(texts, count, 5) == (1, 4)
    assert fit_budget(texts, count, 3) == (0, 0)
    assert fit_budget([], count, 3) == (0, 0)

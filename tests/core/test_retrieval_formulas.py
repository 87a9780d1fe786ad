"""Retrieval formulas at the spec's boundary values ("Recency boost formulas" unit-test list)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrex.config.recall import RecencyConfig, RetrievalConfig
from ferrex.core.memory import MemoryType
from ferrex.core.recall.formulas import (
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


def test_the_boost_reorders_within_the_margin_and_never_past_it() -> None:
    """The recency boost moves a candidate at most ``margin`` logits (0.75 by default): a fresh
    event whose cross-encoder probability is a little lower than an old one's passes it; one
    whose evidence clearly differs (log-odds more than the margin apart) does not."""
    margin = RetrievalConfig().recency_margin
    assert margin == 0.75
    ages = {"old": 300.0, "fresh": 0.0}

    def ordered_by(p_old: float, p_fresh: float) -> list[Candidate]:
        old = Candidate("old", fused_score=0.03, fused_rank=1)
        fresh = Candidate("fresh", fused_score=0.02, fused_rank=2)
        scores = {"old": math.log(p_old / (1 - p_old)), "fresh": math.log(p_fresh / (1 - p_fresh))}
        ordered, basis = order_candidates(
            [old, fresh],
            rerank_top_n=20,
            rerank=lambda head: [scores[c.memory_id] for c in head],
            boost_of=lambda c: recency_boost("episodic", ages[c.memory_id], CFG),
            base_k=5,
            max_boost=1.3,
            margin=margin,
        )
        assert basis == "rerank"
        return ordered

    close = ordered_by(0.60, 0.50)  # log-odds 0.405 apart: within the margin
    assert [c.memory_id for c in close] == ["fresh", "old"]
    assert close[0].final_score == pytest.approx(0.5)  # the largest boost shows the relevance
    shift = margin * math.log(recency_boost("episodic", 300, CFG)) / math.log(1.3)
    assert close[1].final_score == pytest.approx(
        1 / (1 + math.exp(-(math.log(1.5) + shift - margin)))
    )
    clear = ordered_by(0.80, 0.50)  # log-odds 1.386 apart: the evidence decides
    assert [c.memory_id for c in clear] == ["old", "fresh"]
    assert clear[0].final_score >= clear[1].final_score


def test_order_key_and_shown_score_at_their_boundaries() -> None:
    from ferrex.core.recall.formulas import logit, order_key, recency_shift, shown_score

    assert recency_shift(1.3, 1.3, 0.75) == pytest.approx(0.75)  # the largest boost: the margin
    assert recency_shift(1.0, 1.3, 0.75) == 0.0  # no boost, no shift
    assert recency_shift(1.15, 1.3, 0.75) == pytest.approx(0.75 * math.log(1.15) / math.log(1.3))
    assert recency_shift(1.3, 1.3, 0.0) == 0.0  # margin 0 turns recency off
    assert recency_shift(1.3, 1.0, 0.75) == 0.0  # no type has a boost
    assert order_key(0.5, 1.3, 1.3, 0.75) == pytest.approx(0.75)
    assert shown_score(order_key(0.42, 1.3, 1.3, 0.75), 0.75) == pytest.approx(0.42)
    # Not capped by type: a certain fact (largest boost 1.15) scores near 1 as an event does.
    assert shown_score(order_key(0.99999, 1.15, 1.3, 0.75), 0.75) > 0.9999
    assert 0.0 < shown_score(order_key(1e-9, 1.0, 1.3, 0.75), 0.75) < 1e-9
    assert logit(0.0) < -27 and logit(1.0) > 27  # clamped, finite
    # Exactly the margin apart: the boosted one ties the other and the fused rank decides.
    low, high = 0.5, 1 / (1 + math.exp(-0.75))
    assert order_key(low, 1.3, 1.3, 0.75) == pytest.approx(order_key(high, 1.0, 1.3, 0.75))


def by_age(candidates: list[Candidate], ages: dict[str, float]) -> list[Candidate]:
    """``order_candidates`` without a reranker, episodic boosts by age, the default margin."""
    ordered, _ = order_candidates(
        candidates,
        rerank_top_n=0,
        rerank=None,
        boost_of=lambda c: recency_boost("episodic", ages[c.memory_id], CFG),
        base_k=5,
        max_boost=1.3,
        margin=0.75,
    )
    return ordered


def test_a_context_neighbour_never_ends_above_the_hit_it_is_context_of() -> None:
    """Credit lifts a neighbour at most to its hit's relevance; a fresher neighbour (a larger
    boost) still ends after the hit, at the hit's score at most."""
    hit = Candidate("hit", 0.0, 1, relevance=0.8)
    near = Candidate("near", 0.0, 2, relevance=0.8, context_of="hit")
    other = Candidate("other", 0.0, 3, relevance=0.5)
    ages = {"hit": 200.0, "near": 0.0, "other": 0.0}
    ordered = by_age([hit, near, other], ages)
    assert [c.memory_id for c in ordered] == ["hit", "near", "other"]
    assert ordered[1].final_score == ordered[0].final_score
    assert ordered[2].final_score <= ordered[1].final_score


def test_rerank_probability_is_a_monotonic_sigmoid() -> None:
    assert rerank_probability(0.0) == 0.5
    assert rerank_probability(2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert rerank_probability(-800.0) == pytest.approx(0.0)
    assert rerank_probability(800.0) == pytest.approx(1.0)
    assert rerank_probability(-1.0) < rerank_probability(-0.5) < rerank_probability(3.0)


def test_bm25_relative_floor_drops_weak_lexical_matches() -> None:
    from ferrex.core.ports import IndexHit
    from ferrex.core.recall.formulas import apply_relative_floor

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


# --------------------------------------------------------------------------- relevance, floor


def test_relevance_is_a_probability_rising_with_each_piece_of_evidence() -> None:
    from ferrex.config.recall import RelevanceModel
    from ferrex.core.recall.relevance import relevance

    model = RelevanceModel()
    low = relevance(0.1, 0.0, model)
    assert 0.0 < low < relevance(0.5, 0.0, model) < relevance(0.5, 0.5, model) < 1.0
    assert relevance(1.0, 3.0, model) <= 1.0


def test_bm25_norm_is_on_the_store_scale() -> None:
    from ferrex.core.recall.relevance import bm25_norm, idf_one

    # A memory matching every query term once, each term unique to it, scores about 1 whatever
    # the store size or the query length.
    for points in (20, 3000):
        for terms in (2, 6):
            assert bm25_norm(terms * idf_one(points), terms, points) == pytest.approx(1.0)
    assert bm25_norm(0.0, 3, 100) == 0.0
    assert bm25_norm(5.0, 0, 100) == 0.0


def test_a_small_store_counts_its_bm25_evidence_for_less() -> None:
    """``retrieval.bm25_min_points`` (500): a namespace under it counts its BM25 evidence by a
    unique term's IDF there over its IDF in 500 memories, never under 0.6; at or over 500 it is
    unchanged."""
    from ferrex.core.recall.relevance import (
        SMALL_STORE_FLOOR,
        bm25_norm,
        idf_one,
        small_store_factor,
    )

    assert RetrievalConfig().bm25_min_points == 500 and SMALL_STORE_FLOOR == 0.6
    assert small_store_factor(150, 500) == pytest.approx(idf_one(150) / idf_one(500))  # 0.79
    assert small_store_factor(499, 500) == pytest.approx(idf_one(499) / idf_one(500))
    assert small_store_factor(500, 500) == 1.0 and small_store_factor(100_000, 500) == 1.0
    assert small_store_factor(20, 500) == 0.6  # 0.45 by the ratio: the floor
    assert small_store_factor(4, 500) == 0.6
    assert small_store_factor(4, 1) == 1.0  # 1: off
    raw = 3 * idf_one(150)  # three unique terms in a store of 150
    assert bm25_norm(raw, 3, 150, 500) == pytest.approx(small_store_factor(150, 500))
    assert bm25_norm(3.0, 1, 501, 500) == pytest.approx(3.0 / idf_one(501))
    assert bm25_norm(3.0, 1, 20, 1) == pytest.approx(3.0 / idf_one(20))


def test_the_answer_gate_needs_one_kind_of_evidence_at_its_boundary() -> None:
    from ferrex.config.recall import AnswerGate
    from ferrex.core.recall.relevance import answers

    gate = AnswerGate()
    assert (gate.relevance, gate.cosine) == (0.4, 0.3)
    assert answers(0.4, 0.0, gate) and answers(0.0, 0.3, gate)  # at either boundary: answers
    assert answers(0.9, 0.1, gate) and answers(0.05, 0.36, gate)
    assert not answers(0.3999, 0.2999, gate)  # just under both: nothing answers
    # The tests' store: the bazel question's best candidate shares only "cache" with it.
    assert not answers(0.377, 0.243, gate)
    off = AnswerGate(relevance=0, cosine=0)
    assert answers(0.0, 0.0, off)
    only_relevance = AnswerGate(relevance=0.5, cosine=0)
    assert not answers(0.49, 0.99, only_relevance)  # cosine 0 disables that half only
    assert answers(0.5, 0.0, only_relevance)


def test_boost_is_normalised_and_never_lifts_a_memory_over_the_floor() -> None:
    from ferrex.core.recall.relevance import max_boost

    assert max_boost(CFG) == pytest.approx(1.3)
    fresh_unrelated = Candidate("unrelated", fused_score=0.0, fused_rank=1, relevance=0.15)
    old_relevant = Candidate("relevant", fused_score=0.0, fused_rank=2, relevance=0.45)
    fresh_relevant = Candidate("fresh", fused_score=0.0, fused_rank=3, relevance=0.40)
    ages = {"unrelated": 0.0, "relevant": 400.0, "fresh": 0.0}
    ordered, basis = order_candidates(
        [fresh_unrelated, old_relevant, fresh_relevant],
        rerank_top_n=0,
        rerank=None,
        boost_of=lambda c: recency_boost("episodic", ages[c.memory_id], CFG),
        base_k=5,
        max_boost=1.3,
        min_score=0.2,
        margin=0.75,
    )
    assert basis == "fused"
    # Below the floor it is gone, however fresh; the boost still reorders relevant memories
    # whose evidence is close (log-odds -0.20 and -0.41: within the 0.75 margin).
    assert [c.memory_id for c in ordered] == ["fresh", "relevant"]
    assert ordered[0].final_score == pytest.approx(0.40)  # maximal boost / max boost = 1
    assert 0.0 <= ordered[1].final_score <= ordered[0].final_score <= 1.0


def test_rrf_order_keeps_scores_from_rising_down_the_list() -> None:
    a = Candidate("a", fused_score=0.03, fused_rank=1, relevance=0.3)
    b = Candidate("b", fused_score=0.02, fused_rank=2, relevance=0.8)
    ordered, _ = order_candidates(
        [a, b],
        rerank_top_n=0,
        rerank=None,
        boost_of=lambda c: 1.0,
        base_k=5,
        max_boost=1.3,
        by_relevance=False,
    )
    assert [c.memory_id for c in ordered] == ["a", "b"]
    assert ordered[0].final_score >= ordered[1].final_score


def test_context_neighbours_credit_by_noisy_or_within_the_gap() -> None:
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.4, decay=0.5, window=2, gap_seconds=3600)
    t0, t1, later = (
        "2026-01-01T10:00:00+00:00",
        "2026-01-01T10:05:00+00:00",
        "2026-01-09T10:00:00+00:00",
    )
    near = {
        "hit": [
            ("prev", -1, t0, t1, True, False, "episodic", "episodic"),
            ("next2", 2, t1, t1, True, False, "episodic", "episodic"),
            ("week-later", 1, later, t1, True, False, "episodic", "episodic"),
            ("superseded", -2, t0, t1, False, False, "episodic", "episodic"),
        ]
    }
    credit = context_credit({"hit": 0.8, "next2": 0.5}, near, cfg, may_join=True)
    assert credit.relevance["prev"] == pytest.approx(0.4 * 0.8)  # joined: credit alone
    assert credit.relevance["next2"] == pytest.approx(1 - 0.5 * (1 - 0.2 * 0.8))
    assert "week-later" not in credit.relevance and "superseded" not in credit.relevance
    assert credit.joined == {"prev": "hit"}
    assert credit.relevance["hit"] == 0.8
    blocked = context_credit({"hit": 0.8}, near, cfg, may_join=False)
    assert blocked.joined == {} and set(blocked.relevance) == {"hit"}


def test_context_lifts_a_memory_at_most_to_the_hit_it_is_context_of() -> None:
    """The cap: noisy-OR credit never lifts a neighbour over the most relevant hit that gave
    it; a neighbour already above that hit keeps its own relevance."""
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.4, decay=0.5, window=2, gap_seconds=3600, min_similarity=-1)
    t = "2026-01-01T10:00:00+00:00"
    near = {
        "hit": [
            ("close", -1, t, t, True, False, "episodic", "episodic"),
            ("above", 1, t, t, True, False, "episodic", "episodic"),
            ("low", 2, t, t, True, False, "episodic", "episodic"),
        ]
    }
    relevance = {"hit": 0.5, "close": 0.45, "above": 0.6, "low": 0.1}
    credit = context_credit(relevance, near, cfg, may_join=True).relevance
    assert credit["close"] == 0.5  # 1 - 0.55 x 0.8 = 0.56, capped at the hit's 0.5
    assert credit["above"] == 0.6  # (credit flows from the hit only: "above" has no entry)
    assert credit["low"] == pytest.approx(1 - 0.9 * (1 - 0.2 * 0.5))  # 0.19, under the cap
    assert credit["hit"] == 0.5


def test_decay_zero_makes_only_the_nearest_neighbours_context() -> None:
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.4, decay=0.0, window=2, gap_seconds=3600, min_similarity=-1)
    t = "2026-01-01T10:00:00+00:00"
    near = {
        "hit": [
            ("next", 1, t, t, True, False, "episodic", "episodic"),
            ("next2", 2, t, t, True, False, "episodic", "episodic"),
        ]
    }
    credit = context_credit({"hit": 0.5}, near, cfg, may_join=True)
    assert credit.relevance["next"] == pytest.approx(0.2) and "next2" not in credit.relevance
    assert credit.joined == {"next": "hit"}


def test_a_neighbour_about_something_else_gets_no_credit() -> None:
    """``min_similarity``: credit passes only to a neighbour whose dense cosine with the hit
    reaches it (at the boundary: passes; one step under: none); unknown vectors pass none."""
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.4, decay=0.5, window=2, gap_seconds=3600, min_similarity=0.4)
    t = "2026-01-01T10:00:00+00:00"
    near = {
        "hit": [
            ("same", -1, t, t, True, False, "episodic", "episodic"),
            ("other", 1, t, t, True, False, "episodic", "episodic"),
            ("gone", 2, t, t, True, False, "episodic", "episodic"),
        ]
    }
    similarity = {("hit", "same"): 0.4, ("hit", "other"): 0.399}  # "gone": no cosine
    credit = context_credit({"hit": 0.8}, near, cfg, may_join=True, similarity=similarity)
    assert credit.relevance["same"] == pytest.approx(0.4 * 0.8)
    assert "other" not in credit.relevance and "gone" not in credit.relevance
    assert credit.joined == {"same": "hit"}
    ungated = context_credit({"hit": 0.8}, near, cfg, may_join=True)
    assert set(ungated.joined) == {"same", "other", "gone"}


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Who's your favourite player?", True),
        ("What was it about? 😊", True),
        ('She said "really?"', True),
        ("Really?!", True),
        ("Fine.", False),
        ("Is it? Yes, it is.", True),  # a question among its last sentences
        ("What breed is it? I love dogs!", True),
        # its only question is more than 40 characters from the end
        ("Is it new? It has been on the shelf since springs.", False),  # 41st from the end
        ("Is it new? It has been on the shelf since spring.", True),  # the 40th
        ("See https://example.com/search?q=dogs", False),  # inside an address
        ("What is 2?3", False),
        ("version 2.0", False),
        ("", False),
        ("???", True),
        ("Why?\n\n\t", True),
        ("   ", False),
        ("\u4f60\u597d\u5417\uff1f", True),  # full-width question mark
    ],
)
def test_a_memory_asks_when_a_question_ends_one_of_its_last_sentences(
    text: str, asks: bool
) -> None:
    from ferrex.core.recall.context import asks_question

    assert asks_question(text) is asks


def test_the_answer_to_a_question_gets_its_credit_whatever_its_cosine() -> None:
    """A hit that asks passes the memory stored right after it ``answer_weight x relevance``,
    ungated by ``min_similarity``; the one before it, and every neighbour of a hit that does
    not ask, stay ordinary (gated, weight x decay^(d-1)); answer_weight 0 turns the rule off."""
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    t = "2026-01-01T10:00:00+00:00"
    cfg = NeighbourConfig(weight=0.5, decay=0.7, window=2, min_similarity=0.3, answer_weight=0.9)

    def near(asks: bool) -> dict[str, list[tuple[str, int, str, str, bool, bool]]]:
        return {
            "hit": [
                ("before", -1, t, t, True, asks, "episodic", "episodic"),
                ("answer", 1, t, t, True, asks, "episodic", "episodic"),
                ("after2", 2, t, t, True, asks, "episodic", "episodic"),
            ]
        }

    low = {("hit", "before"): 0.1, ("hit", "answer"): 0.1, ("hit", "after2"): 0.3}
    asked = context_credit({"hit": 0.8}, near(True), cfg, may_join=True, similarity=low)
    assert asked.relevance["answer"] == pytest.approx(0.9 * 0.8)  # cosine 0.1: still credited
    assert "before" not in asked.relevance  # the turn before a question: gated as before
    assert asked.relevance["after2"] == pytest.approx(0.5 * 0.7 * 0.8)  # at the gate: passes
    assert asked.joined == {"answer": "hit", "after2": "hit"}
    # The cap holds for answers too: never above the question that gave the credit.
    candidate = context_credit(
        {"hit": 0.6, "answer": 0.5}, near(True), cfg, may_join=True, similarity=low
    )
    assert candidate.relevance["answer"] == 0.6
    told = context_credit({"hit": 0.8}, near(False), cfg, may_join=True, similarity=low)
    assert set(told.relevance) == {"hit", "after2"}  # a statement's next turn: gated
    off = NeighbourConfig(weight=0.5, decay=0.7, window=2, min_similarity=0.3, answer_weight=0)
    rule_off = context_credit({"hit": 0.8}, near(True), off, may_join=True, similarity=low)
    assert "answer" not in rule_off.relevance
    ungated = context_credit({"hit": 0.8}, near(True), off, may_join=True)
    assert ungated.relevance["answer"] == pytest.approx(0.5 * 0.8)  # ordinary distance-1 credit
    # An answer that is superseded, or stored past the gap, gets nothing; a filtered recall
    # (may_join False) credits an answer only when it is a candidate already.
    later = "2026-01-01T12:00:01+00:00"
    gone = {
        "hit": [("old", 1, t, t, False, True, "episodic", "episodic")],
        "hit2": [("late", 1, later, t, True, True, "episodic", "episodic")],
    }
    none = context_credit({"hit": 0.8, "hit2": 0.8}, gone, cfg, may_join=True, similarity=low)
    assert set(none.relevance) == {"hit", "hit2"}
    filtered = context_credit({"hit": 0.8}, near(True), cfg, may_join=False, similarity=low)
    assert set(filtered.relevance) == {"hit"}
    found = context_credit(
        {"hit": 0.8, "answer": 0.2}, near(True), cfg, may_join=False, similarity=low
    )
    assert found.relevance["answer"] == pytest.approx(1 - 0.8 * (1 - 0.9 * 0.8))


def test_the_floor_judges_a_candidates_floor_basis_where_it_has_one() -> None:
    """Late interaction: a candidate is ordered and scored by its three-feature relevance but
    the floor judges its two-channel relevance (``floor_basis``); the cross-encoder's head is
    judged on its probability."""
    from ferrex.core.recall.formulas import Candidate, order_candidates

    def candidates() -> list[Candidate]:
        out = []
        for rank, (mid, relevance, basis) in enumerate(
            [("a", 0.30, 0.35), ("b", 0.098, 0.105), ("c", 0.12, 0.05)], start=1
        ):
            c = Candidate(mid, 0.0, rank)
            c.relevance, c.floor_basis = relevance, basis
            out.append(c)
        return out

    ordered, _ = order_candidates(
        candidates(),
        rerank_top_n=0,
        rerank=None,
        boost_of=lambda c: 1.0,
        base_k=5.0,
        max_boost=1.3,
        min_score=0.1,
    )
    # b (0.098 but two-channel 0.105) stays; c (0.12 but two-channel 0.05) goes; scores are
    # the relevance itself.
    assert [c.memory_id for c in ordered] == ["a", "b"]
    assert ordered[1].final_score == pytest.approx(0.098)  # no boost, no margin: itself
    # With a cross-encoder over the first one: its probability decides for it, the basis for
    # the tail.
    ordered, _ = order_candidates(
        candidates(),
        rerank_top_n=1,
        rerank=lambda head: [-5.0],
        boost_of=lambda c: 1.0,
        base_k=5.0,
        max_boost=1.3,
        min_score=0.1,
    )
    assert [c.memory_id for c in ordered] == ["b"]


def test_stored_neighbours_say_whether_their_hit_asks(tmp_path: Path) -> None:
    """The flag the answer rule reads, from real SQLite: a question with trailing newlines and
    emoji asks, a statement or a fact (no content) does not, a lone memory has no rows."""
    from datetime import UTC, datetime, timedelta

    from ferrex.core.memory import Memory, MemoryType
    from ferrex.store.sqlite import SqliteStore

    meta = SqliteStore(tmp_path / "n.db")
    start = datetime(2026, 1, 1, 10, tzinfo=UTC)
    texts = ["What breed is she? 🐶🐶\n\n", "A beagle.", None, "Lunch at noon."]
    for n, text in enumerate(texts):
        at = start + timedelta(minutes=n)
        kind = MemoryType.SEMANTIC if text is None else MemoryType.EPISODIC
        fact = (
            {"subject": "Biscuit", "predicate": "is", "object": "a beagle"} if text is None else {}
        )
        meta.insert_memory(
            Memory(
                id=f"m{n}",
                namespace="ns",
                type=kind,
                created_at=at,
                updated_at=at,
                event_time=at,
                content=text,
                **fact,
            )
        )
    at = start
    meta.insert_memory(
        Memory(
            id="alone",
            namespace="other",
            type=MemoryType.EPISODIC,
            created_at=at,
            updated_at=at,
            event_time=at,
            content="Anyone there?",
        )
    )
    near = meta.stored_neighbours("ns", ["m0", "m1", "m2"], 1)
    assert [row[:2] for row in near["m0"]] == [("m1", 1)]
    assert all(row[5] for row in near["m0"])
    assert not any(row[5] for row in near["m1"]) and not any(row[5] for row in near["m2"])
    assert meta.stored_neighbours("other", ["alone"], 2) == {"alone": []}
    meta.close()


def test_a_chain_of_neighbours_never_ends_above_its_first_hit() -> None:
    """A is context of B, B of C: each ends at most at the key of the hit above it, after that
    hit's own cap (the fresher A and B do not pass C)."""
    c = Candidate("c", 0.0, 1, relevance=0.90)
    b = Candidate("b", 0.0, 2, relevance=0.86, context_of="c")
    a = Candidate("a", 0.0, 3, relevance=0.84, context_of="b")
    ages = {"c": 400.0, "b": 0.0, "a": 0.0}
    ordered = by_age([c, b, a], ages)
    assert ordered[0].memory_id == "c"
    assert ordered[0].final_score >= ordered[1].final_score >= ordered[2].final_score


def test_exactly_the_margin_apart_the_fused_rank_decides() -> None:
    from ferrex.core.recall.formulas import logit

    low = 0.5
    high = 1 / (1 + math.exp(-0.75))  # log-odds exactly 0.75 above
    assert logit(high) - logit(low) == pytest.approx(0.75)
    fresh = Candidate("fresh", 0.0, 2, relevance=low)
    old = Candidate("old", 0.0, 1, relevance=high)
    ages = {"fresh": 0.0, "old": 10_000.0}
    ordered = by_age([old, fresh], ages)
    assert ordered[0].key == pytest.approx(ordered[1].key)
    assert [c.memory_id for c in ordered] == ["old", "fresh"]  # fused rank 1 first


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.001, 0.999),
            st.floats(1.0, 1.3),
            st.integers(-1, 30),
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 10),
)
def test_the_pruning_bound_never_drops_a_member_of_the_page(
    rows: list[tuple[float, float, int]], limit: int
) -> None:
    """core/recall/candidates.py stops reading the fused list (by relevance) at the first
    candidate whose log-odds plus the margin are under the ``limit``-th one's: no boost and no
    context cap can put such a candidate on the page."""
    from ferrex.core.recall.formulas import logit

    relevances = sorted((r for r, _, _ in rows), reverse=True)
    candidates = []
    for rank, (relevance, (_, _, hit)) in enumerate(zip(relevances, rows, strict=True), 1):
        candidate = Candidate(f"m{rank:02d}", 0.0, rank, relevance=relevance)
        if 0 < hit < rank:  # context of a more relevant candidate
            candidate.context_of = f"m{hit:02d}"
        candidates.append(candidate)
    boosts = {f"m{rank:02d}": boost for rank, (_, boost, _) in enumerate(rows, 1)}
    ordered, _ = order_candidates(
        candidates,
        rerank_top_n=0,
        rerank=None,
        boost_of=lambda c: boosts[c.memory_id],
        base_k=5,
        max_boost=1.3,
        margin=0.75,
    )
    if len(relevances) <= limit:
        return
    bound = logit(relevances[limit - 1])
    pruned = {c.memory_id for c in candidates if logit(c.relevance) + 0.75 < bound}
    assert not pruned & {c.memory_id for c in ordered[:limit]}


def test_context_of_names_the_most_relevant_hit_that_raised_a_memory() -> None:
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.5, decay=0.5, window=2, gap_seconds=3600, min_similarity=-1)
    t = "2026-01-01T10:00:00+00:00"
    event = ("episodic", "episodic")
    near = {
        "h1": [("n", 1, t, t, True, False, *event), ("strong", -1, t, t, True, False, *event)],
        "h2": [("n", -1, t, t, True, False, *event)],
        "h3": [("n", 1, t, t, True, False, *event)],
    }
    relevance = {"h1": 0.6, "h2": 0.7, "h3": 0.7, "n": 0.1, "strong": 0.65}
    credit = context_credit(relevance, near, cfg, may_join=True)
    assert credit.context_of["n"] == "h2"  # 0.7 ties 0.7: the first id; over h1's 0.6
    assert "strong" not in credit.context_of  # above its hit: not raised, keeps its own 0.65
    assert credit.relevance["strong"] == 0.65


def test_a_fact_or_procedure_next_to_an_event_is_not_its_context() -> None:
    from ferrex.config.recall import NeighbourConfig
    from ferrex.core.recall.context import context_credit

    cfg = NeighbourConfig(weight=0.5, decay=0.5, window=2, gap_seconds=3600, min_similarity=-1)
    t = "2026-01-01T10:00:00+00:00"
    near = {
        "hit": [
            ("fact", 1, t, t, True, False, "semantic", "episodic"),
            ("steps", -1, t, t, True, False, "procedural", "episodic"),
            ("event", 2, t, t, True, False, "episodic", "episodic"),
        ],
        "fact-hit": [("event2", 1, t, t, True, False, "episodic", "semantic")],
    }
    credit = context_credit({"hit": 0.8, "fact-hit": 0.9}, near, cfg, may_join=True)
    assert set(credit.joined) == {"event"}
    assert credit.joined["event"] == "hit"

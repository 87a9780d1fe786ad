"""Late interaction (core/index/late_interaction.py): the model's token vectors from the same
pass as the dense embedding, pooled and stored as an engine multivector, scored by MaxSim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferrex.core.index.late_interaction import (
    ContentWords,
    document_tokens,
    maxsim,
    mean_maxsim,
    pool,
    query_tokens,
)
from ferrex.core.ports import IndexFilter, IndexPoint, SparseVec, TokenEmbedding
from ferrex.embed.bm25 import Bm25Encoder
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.store.edge import EdgeIndex


def _unit(rows: list[list[float]]) -> np.ndarray:
    array = np.asarray(rows, dtype=np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


# --------------------------------------------------------------------------- formulas


def test_maxsim_is_the_mean_over_query_tokens_of_the_best_document_token() -> None:
    query = _unit([[1, 0, 0], [0, 1, 0]])
    document = _unit([[1, 0, 0], [0, 0, 1]])
    # q1 finds itself (1.0); q2 is orthogonal to both document tokens (0.0).
    assert maxsim(query, document) == pytest.approx(0.5)
    assert maxsim(query, query) == pytest.approx(1.0)
    assert maxsim(query[:0], document) == 0.0
    # The engine reports the sum: the mean divides by the query's token count, clamped.
    assert mean_maxsim(1.0, 2) == pytest.approx(0.5)
    assert mean_maxsim(5.0, 2) == 1.0
    assert mean_maxsim(-5.0, 2) == -1.0
    assert mean_maxsim(1.0, 0) == 0.0


def test_pooling_keeps_short_texts_and_clusters_long_ones() -> None:
    tokens = _unit([[1, 0, 0], [0, 1, 0], [0.95, 0.05, 0], [0, 0, 1], [0.05, 0.95, 0]])
    assert pool(tokens, 5) is tokens
    assert pool(tokens, 8) is tokens
    pooled = pool(tokens, 3)
    # The alike tokens merge wherever they stand (contiguous runs would mix x with y): the
    # clusters {0, 2}, {1, 4}, {3}, in the order of their first token, each renormalised.
    assert pooled.shape == (3, 3)
    expected = _unit(
        [tokens[0] + tokens[2], tokens[1] + tokens[4], tokens[3]]  # type: ignore[list-item]
    )
    assert np.allclose(pooled, expected, atol=1e-6)
    one = pool(tokens, 1)
    assert one.shape == (1, 3) and np.isclose(np.linalg.norm(one[0]), 1.0)
    assert np.array_equal(pool(tokens, 2), pool(tokens, 2))  # deterministic


def test_stop_words_and_punctuation_carry_no_content() -> None:
    words = ContentWords(Bm25Encoder())
    assert words("caroline") and words("2023") and words("adoption")
    assert not words("the") and not words("did") and not words("?") and not words("-")
    embedding = TokenEmbedding(
        np.zeros(3), _unit([[1, 0, 0], [0, 1, 0], [0, 0, 1]]), ("when", "caroline", "?")
    )
    kept = query_tokens(embedding, words)
    assert kept is not None and kept.shape == (1, 3) and np.allclose(kept[0], [0, 1, 0])
    # A query of stop words alone keeps all its tokens (never an empty multivector).
    only = TokenEmbedding(np.zeros(3), _unit([[1, 0, 0], [0, 1, 0]]), ("the", "of"))
    kept = query_tokens(only, words)
    assert kept is not None and kept.shape == (2, 3)
    # A memory keeps its stop words, not its punctuation.
    stored = document_tokens(
        TokenEmbedding(np.zeros(3), _unit([[1, 0, 0], [0, 1, 0], [0, 0, 1]]), ("the", "x", "?")), 8
    )
    assert stored is not None and np.allclose(stored, _unit([[1, 0, 0], [0, 1, 0]]))
    assert document_tokens(TokenEmbedding(np.zeros(3), None), 8) is None


# --------------------------------------------------------------------------- the model pass


def test_token_vectors_come_from_the_same_pass_as_the_dense_embedding(
    embedder: FastEmbedEmbedder,
) -> None:
    texts = ["[2023-05-08] Caroline: I went to the LGBTQ support group yesterday.", "short"]
    embedded = embedder.embed_documents_tokens(texts)
    for one, reference in zip(embedded, embedder.embed_documents(texts), strict=True):
        assert np.allclose(one.dense, reference, atol=1e-6)
        assert one.tokens is not None and len(one.tokens) == len(one.words)
        assert np.allclose(np.linalg.norm(one.tokens, axis=1), 1.0, atol=1e-5)
    # No [CLS] / [SEP] / padding: the short text is its one word-piece.
    assert embedded[1].words == ("short",)
    assert "caroline" in embedded[0].words
    query = embedder.embed_query_tokens("When did Caroline go to the support group?")
    assert np.allclose(
        query.dense, embedder.embed_query("When did Caroline go to the support group?")
    )
    assert query.words[:3] == ("when", "did", "caroline")


# --------------------------------------------------------------------------- the engine


def _point(index: int, dense: list[float], tokens: np.ndarray | None) -> IndexPoint:
    return IndexPoint(
        point_id=f"00000000-0000-0000-0000-{index:012d}",
        dense=np.asarray(dense, dtype=np.float32),
        sparse=SparseVec((), ()),
        payload={"memory_id": f"m{index}", "namespace": "default", "chunk": 0},
        tokens=tokens,
    )


def test_the_engine_scores_the_channel_by_maxsim_over_the_asked_candidates(
    tmp_path: Path,
) -> None:
    index = EdgeIndex(tmp_path / "index")
    index.ensure_collection(3, late_interaction=True)
    assert index.late_interaction
    documents = {
        1: _unit([[1, 0, 0], [0, 1, 0]]),
        2: _unit([[0, 0, 1], [1, 1, 0]]),
        3: _unit([[0, 1, 1]]),
    }
    index.upsert(
        [_point(i, [1, 0, 0], d) for i, d in documents.items()] + [_point(4, [1, 0, 0], None)]
    )
    query = _unit([[1, 0, 0], [0, 0.5, 1]])
    flt = IndexFilter(namespace="default", memory_ids=("m1", "m2", "m4"))
    (hits,) = index.search_batch(np.zeros(3), SparseVec((), ()), [("tokens", flt, 10)], 16, query)
    scores = {hit.memory_id: hit.score for hit in hits}
    # Only the asked ones; m4 was written without token vectors: its dense vector stands in
    # (every point of the collection has the channel's vector).
    assert set(scores) == {"m1", "m2", "m4"}
    documents[4] = _unit([[1, 0, 0]])
    for memory_id, total in scores.items():
        reference = maxsim(query, documents[int(memory_id[1:])])
        # 8-bit storage: within 0.01 of the exact float32 MaxSim.
        assert mean_maxsim(total, len(query)) == pytest.approx(reference, abs=1e-2)
    # Without query tokens the channel finds nothing; other channels in the batch still answer.
    both = index.search_batch(
        np.asarray([1, 0, 0], dtype=np.float32),
        SparseVec((), ()),
        [("tokens", flt, 10), ("dense", IndexFilter(namespace="default"), 10)],
        16,
        None,
    )
    assert both[0] == [] and len(both[1]) == 4
    index.close()
    reopened = EdgeIndex(tmp_path / "index")
    assert reopened.late_interaction  # the channel is part of the collection's config
    reopened.close()


def test_a_collection_made_without_the_channel_reports_it_and_ignores_token_vectors(
    tmp_path: Path,
) -> None:
    index = EdgeIndex(tmp_path / "index")
    index.ensure_collection(3)
    assert not index.late_interaction
    index.upsert([_point(1, [1, 0, 0], _unit([[1, 0, 0]]))])
    flt = IndexFilter(namespace="default", memory_ids=("m1",))
    assert index.search_batch(
        np.zeros(3), SparseVec((), ()), [("tokens", flt, 10)], 16, _unit([[1, 0, 0]])
    ) == [[]]
    # reset (rebuild-index) is where an existing collection gets the channel.
    index.reset(3, late_interaction=True)
    assert index.late_interaction
    index.close()


# --------------------------------------------------------------------------- through recall


def test_a_tier_prefix_is_no_token_of_the_query_or_the_memory(models_dir: Path) -> None:
    """BGE / E5 tiers embed "<instruction>text": the instruction's words are the same in every
    query (or document) and would dilute every MaxSim; only the text's own tokens count."""
    model = FastEmbedEmbedder("small", models_dir, offline=True, prefer_bundled=True)
    model.load()
    model._prefix_query = "Represent this sentence for searching relevant passages: "
    model._prefix_doc = "passage: "
    query = model.embed_query_tokens("Where does Gina work?")
    assert query.words == ("where", "does", "gina", "work", "?")
    (document,) = model.embed_documents_tokens(["Gina works at a bakery"])
    assert document.words == ("gina", "works", "at", "a", "bakery")
    # The dense vectors still embed the whole input, prefix included, as before.
    assert np.allclose(query.dense, model.embed_query("Where does Gina work?"), atol=1e-6)


def test_a_candidate_the_channel_did_not_score_keeps_its_two_channel_relevance() -> None:
    from ferrex.config.recall import RelevanceModel
    from ferrex.core.ports import IndexHit
    from ferrex.core.recall.relevance import evidence_of, relevance, score_evidence

    plain = RelevanceModel()
    late_model = RelevanceModel(bias=-5.0, dense=7.0, bm25=9.0, late=1.5)
    dense = [IndexHit("p1", "a", 0.8), IndexHit("p2", "b", 0.8)]
    bm25 = [IndexHit("p1", "a", 1.0), IndexHit("p2", "b", 1.0)]
    evidence = evidence_of(["a", "b"], dense, bm25, query_weight=2.0, points=100, fetched=30)
    scored = score_evidence(evidence, late_model, {"a": 0.9}, without_late=plain)
    normed = scored["a"][1][2]
    assert scored["a"][0] == pytest.approx(relevance(0.8, normed, late_model, 0.9))
    # "b" has no token vectors: the two-channel model, not a MaxSim of 0 under the late one.
    assert scored["b"][0] == pytest.approx(relevance(0.8, normed, plain))


def test_long_procedures_do_not_crowd_other_candidates_out_of_the_channel(
    make_service: Any,
) -> None:
    from ferrex.server.calls import run_tool

    service = make_service(**{"retrieval.late_interaction.enabled": True})
    for name in ("rotate the signing keys", "restore the billing database", "drain a node"):
        steps = [f"{name}: check item {i} of the runbook and record it" for i in range(40)]
        run_tool(service, "store", {"type": "procedural", "name": name, "steps": steps})
    for i, topic in enumerate(["billing", "signing", "nodes", "runbook", "database", "keys"]):
        run_tool(service, "store", {"content": f"Note {i}: the {topic} review went well"})
    answer = run_tool(
        service, "recall", {"query": "check the runbook items", "limit": 20, "explain": True}
    )
    results = answer["results"]
    assert len(results) == 9
    # Every candidate has its MaxSim: 120 step points did not push the notes out of the page.
    lates = [r["explain"].get("late") for r in results]
    assert all(isinstance(v, float) for v in lates), lates

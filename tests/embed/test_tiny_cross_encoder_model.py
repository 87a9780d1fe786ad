"""Sanity checks of the tiny test cross-encoder itself, through real fastembed."""

from pathlib import Path

import pytest
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder, register_and_load

QUERY = "find the animal"
DOCUMENTS = ["a zebra in the field", "a car on the road", "zebra zebra stripes"]


def test_rerank_scores_trigger_word_documents_highest(tmp_path: Path) -> None:
    """Documents score 4 * (trigger count) - 2, through fastembed's rerank."""
    encoder = register_and_load(build_tiny_cross_encoder(tmp_path / "model"))

    single, car, double = list(encoder.rerank(QUERY, DOCUMENTS))

    assert double > single > car
    assert (single, car, double) == pytest.approx((2.0, -2.0, 6.0))


def test_rerank_pairs_matches_rerank(tmp_path: Path) -> None:
    """``rerank_pairs`` gives the same scores as ``rerank``."""
    encoder = register_and_load(build_tiny_cross_encoder(tmp_path / "model"))

    pair_scores = list(encoder.rerank_pairs([(QUERY, doc) for doc in DOCUMENTS]))

    assert pair_scores == pytest.approx(list(encoder.rerank(QUERY, DOCUMENTS)))


def test_query_tokens_do_not_count(tmp_path: Path) -> None:
    """The trigger word in the query (first segment) does not raise the score."""
    encoder = register_and_load(build_tiny_cross_encoder(tmp_path / "model"))

    scores = list(encoder.rerank("zebra zebra", ["a car on the road", "a Zebra"]))

    assert scores == pytest.approx([-2.0, 2.0])


def test_custom_trigger_word(tmp_path: Path) -> None:
    """Another single-wordpiece trigger word can be chosen."""
    encoder = register_and_load(
        build_tiny_cross_encoder(tmp_path / "model", trigger_word="car"),
        model_name="ferrex-test/tiny-cross-encoder-car",
    )

    scores = list(encoder.rerank(QUERY, DOCUMENTS))

    assert scores == pytest.approx([-2.0, 2.0, -2.0])


def test_multi_wordpiece_trigger_is_rejected(tmp_path: Path) -> None:
    """A trigger word split into several wordpieces is refused."""
    with pytest.raises(ValueError, match="single known wordpiece"):
        build_tiny_cross_encoder(tmp_path / "model", trigger_word="zebrafishery")

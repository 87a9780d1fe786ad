"""The token budget (``max_tokens``): the leading results that fit, cut, never split."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ferrex.core.memory import Memory
from ferrex.core.ports import Embedder
from ferrex.core.recall.formulas import Candidate, fit_budget


@dataclass
class Fitted:
    selected: list[Candidate]
    truncated: int | None = None  # results cut (None: no budget)
    tokens: int | None = None  # tokens used (None: no budget)
    # The best result's tokens and the budget, when the budget left no result.
    over_budget: tuple[int, int] | None = None


def count_tokens(embedder: Embedder, text: str) -> int:
    counter: Callable[[str], int] = getattr(embedder, "count_text_tokens", embedder.count_tokens)
    return counter(text)


def fit(
    embedder: Embedder, selected: list[Candidate], rows: dict[str, Memory], max_tokens: int | None
) -> Fitted:
    """The results that fit in ``max_tokens`` (all of them without a budget)."""
    if max_tokens is None:
        return Fitted(selected)
    texts = [rows[c.memory_id].display_text() for c in selected]
    keep, used = fit_budget(texts, lambda text: count_tokens(embedder, text), max_tokens)
    over_budget = None
    if keep == 0 and texts:  # rare: its count again, only to say it
        over_budget = (count_tokens(embedder, texts[0]), max_tokens)
    return Fitted(selected[:keep], len(selected) - keep, used, over_budget)

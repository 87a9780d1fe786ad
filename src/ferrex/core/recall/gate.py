"""What keeps a candidate or a whole answer out: the relevance floor, the answer gate, the
stale memories held back, and the one line an empty answer says why it is empty."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ferrex.config.core import CoreSettings
from ferrex.config.recall import RetrievalConfig
from ferrex.core.recall.filters import Scope
from ferrex.core.recall.formulas import Candidate
from ferrex.core.recall.ordering import Boost, order
from ferrex.core.recall.records import Retrieved
from ferrex.core.recall.relevance import answers


def floor_of(scope: Scope, cfg: RetrievalConfig) -> float:
    """The relevance floor: none where the filter selects (it does the choosing)."""
    return 0.0 if scope.selecting else cfg.min_score


def answer_gate(
    retrieved: Retrieved, scope: Scope, cfg: RetrievalConfig, cross_encoder: bool
) -> tuple[float, float] | None:
    """The best relevance and cosine when nothing here answers the question (else None).

    The question itself, on every candidate's evidence (stale ones count: they are held back,
    not irrelevant): without a cross-encoder, a best candidate weak on both kinds of evidence
    means nothing here answers it. Hybrid only: its thresholds are set on both channels'
    evidence (one channel would be judged on half of it, and ``explain`` fetches the other
    one). Not where the filter selects (``Scope.selecting``)."""
    if cross_encoder or scope.selecting or cfg.mode != "hybrid":
        return None
    # (A neighbour that joined is left out when types are asked for: its type is unknown
    # until its row is read, and the page drops one of another type.)
    judged = [r for r in retrieved.candidates if not (scope.types and r.neighbour_of is not None)]
    if not judged:
        return None
    # On the two channels' relevance, where its thresholds were set (late interaction
    # reorders the candidates; it does not decide whether the question has an answer).
    best_relevance = max(
        r.relevance if r.gate_relevance is None else r.gate_relevance for r in judged
    )
    best_cosine = max(r.cosine or 0.0 for r in judged)
    if answers(best_relevance, best_cosine, cfg.answer_gate):
        return None
    return best_relevance, best_cosine


def held_back(
    settings: CoreSettings,
    candidates: Sequence[Candidate],
    stale: Sequence[Candidate],
    limit: int,
    boost: Boost,
    floor: float,
) -> set[str]:
    """The stale memories include_stale=true would have put in these results: the
    stale candidates within the top ``limit`` of all candidates (fused order with the
    recency boost), not every stale memory the index returned (the dense channel returns
    something for any query)."""
    if not stale:
        return set()
    # Copies in fused order: ordering writes scores into the candidates it ranks.
    pool = sorted(
        (replace(c, rerank_score=None) for c in [*candidates, *stale]),
        key=lambda c: c.fused_rank,
    )
    everything, _ = order(settings, pool, rerank=None, rerank_top_n=0, boost=boost, floor=floor)
    stale_ids = {c.memory_id for c in stale}
    return {c.memory_id for c in everything[:limit] if c.memory_id in stale_ids}


def no_results(
    cfg: RetrievalConfig,
    had_candidates: bool,
    gated: tuple[float, float] | None,
    floor: float,
    *,
    held: int = 0,
    over_budget: tuple[int, int] | None = None,
) -> str:
    """Why an answer is empty, in one short line: what emptied it, and what to change.

    The budget and the stale rule come before the floor: memories that matched were left
    out by the request itself, and saying "nothing is relevant" would hide them."""
    if over_budget is not None:
        cost, budget = over_budget
        return (
            f"the best match needs {cost} tokens, over max_tokens {budget}: "
            "raise max_tokens to see it"
        )
    if held:
        what = "memory matches" if held == 1 else "memories match"
        return f"only stale {what} ({held}): ask with include_stale: true to see them"
    if gated is not None:
        gate = cfg.answer_gate
        return (
            f"nothing relevant: the best match has relevance {gated[0]:.2f} and cosine "
            f"{gated[1]:.2f} (an answer needs {gate.relevance:g} or {gate.cosine:g})"
        )
    if had_candidates and floor > 0:
        return f"no memory is relevant enough (min_score {floor:g})"
    return "no memory matches"

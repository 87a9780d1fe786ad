"""Comparing two engines' answers to one question (tests/store/test_engine_parity.py)."""

from __future__ import annotations

from collections.abc import Sequence

# Two candidates may change places between engines when their scores differ by less than this:
# the embedded engine stores token vectors 8-bit, a Qdrant server float16 (docs/recall.md).
NEAR_TIE = 0.01

Ranked = Sequence[tuple[str, float]]


def order_difference(a: Ranked, b: Ranked, top: int = 5, near: float = NEAR_TIE) -> str | None:
    """Why two ranked lists of (key, score) do not give the same top ``top``, or None.

    The same keys in the same order, except that two keys may swap when their scores differ by
    less than ``near`` in both engines, the ``top``-th place included: a key in one top and
    not the other must be within ``near`` of the other's last score there (the lists should
    run past ``top`` to show that). Exact ties are ordered by memory id, which each store draws
    at random: two stores of one engine differ there too."""
    head_a, head_b = list(a[:top]), list(b[:top])
    keys_a, keys_b = [k for k, _ in head_a], [k for k, _ in head_b]
    for head, keys, other in ((head_b, keys_b, a), (head_a, keys_a, b)):
        if not head:
            continue
        last = head[-1][1]
        for key, score in other[:top]:
            if key not in keys and (len(head) < top or abs(score - last) >= near):
                return f"{key} in one top {top} only ({score:.4f}; the other ends at {last:.4f})"
    score_a, score_b = dict(a), dict(b)
    place_b = {k: i for i, k in enumerate(keys_b)}
    shared = [k for k in keys_a if k in place_b]
    for i, first in enumerate(shared):
        for second in shared[i + 1 :]:
            if place_b[first] < place_b[second]:
                continue
            gap = max(abs(score_a[first] - score_a[second]), abs(score_b[first] - score_b[second]))
            if gap >= near:
                return f"{first} and {second} swapped with scores {gap:.4f} apart"
    return None


def same_set(a: Ranked, b: Ranked, top: int = 5) -> bool:
    """The strict measure: the same keys in both tops."""
    return {k for k, _ in a[:top]} == {k for k, _ in b[:top]}

"""Fit the no-reranker relevance model (core/recall/relevance.py) on dev-set candidates.

    python bench/sweep.py locomo --dump bench/.cache/features-locomo.json
    python bench/sweep.py beir --dump bench/.cache/features-beir.json
    python bench/calibrate.py bench/.cache/features-locomo.json bench/.cache/features-beir.json
    python bench/sweep.py locomo --set retrieval.late_interaction.enabled=true \
        --dump bench/.cache/features-locomo-late.json             # (and beir, the same)
    python bench/calibrate.py --late bench/.cache/features-locomo-late.json \
        bench/.cache/features-beir-late.json                      # retrieval.relevance_late

Each dump holds, per dev question, every deep candidate's (cosine, normalised BM25, label).
A logistic regression ``sigmoid(bias + dense x cosine + bm25 x bm25_norm)`` is fitted by Newton's
method (a small L2 penalty, no penalty on the bias), every data set weighing the same in total
(LoCoMo has 1-3 relevant turns in 200 candidates, SciFact 1-5 abstracts in 100). Prints the
weights for ``retrieval.relevance`` and the calibration table (predicted vs observed rate of
relevant candidates per predicted-relevance bin). Deterministic: same dumps, same weights.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = [c for q in json.loads(path.read_text(encoding="utf-8")) for c in q["candidates"]]
    data = np.array([[r[0] or 0.0, r[1] or 0.0, r[2]] for r in rows], dtype=np.float64)
    return data[:, :2], data[:, 2]


def ranking(path: Path, ratio: float) -> tuple[float, float]:
    """(recall@10, nDCG@10) of the deep candidates re-ordered by cosine + ratio x bm25_norm
    (an offline estimate; the product's numbers come from bench/sweep.py)."""
    recalls, ndcgs = [], []
    for question in json.loads(path.read_text(encoding="utf-8")):
        rows = question["candidates"]
        total = question.get("relevant") or sum(r[2] for r in rows) or 1
        order = sorted(rows, key=lambda r: -((r[0] or 0.0) + ratio * (r[1] or 0.0)))[:10]
        labels = [r[2] for r in order]
        recalls.append(sum(labels) / total)
        dcg = sum(label / np.log2(i + 2) for i, label in enumerate(labels))
        ideal = sum(1 / np.log2(i + 2) for i in range(min(10, total)))
        ndcgs.append(dcg / ideal)
    return float(np.mean(recalls)), float(np.mean(ndcgs))


def fit(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3, steps: int = 50
) -> np.ndarray:
    design = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(design.shape[1])
    penalty = np.diag([0.0] + [l2] * x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-design @ beta))
        grad = design.T @ (w * (p - y)) + penalty @ beta
        hess = (design * (w * p * (1 - p))[:, None]).T @ design + penalty
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return beta


def _questions(path: Path) -> list[tuple[np.ndarray, int]]:
    """Per question: its candidates' (cosine, bm25_norm, late, label) and its relevant count."""
    out = []
    for question in json.loads(path.read_text(encoding="utf-8")):
        rows = [
            [r[0] or 0.0, r[1] or 0.0, r[3] if len(r) > 3 and r[3] is not None else 0.0, r[2]]
            for r in question["candidates"]
        ]
        out.append((np.array(rows, dtype=np.float64), question.get("relevant") or 1))
    return out


def _quality(questions: list[tuple[np.ndarray, int]], direction: np.ndarray) -> tuple[float, float]:
    """(recall@10, nDCG@10) of the candidates ordered by ``features @ direction``."""
    discount = 1.0 / np.log2(np.arange(2, 12))
    recalls, ndcgs = [], []
    for rows, total in questions:
        top = np.argsort(-(rows[:, :3] @ direction), kind="stable")[:10]
        labels = rows[top, 3]
        recalls.append(labels.sum() / total)
        ndcgs.append((labels * discount[: len(labels)]).sum() / discount[: min(10, total)].sum())
    return float(np.mean(recalls)), float(np.mean(ndcgs))


def late_model(locomo: Path, beir: Path) -> None:
    """``retrieval.relevance_late``: the direction (cosine, BM25, late weights, on a grid) with
    the best LoCoMo recall@10 among those that keep SciFact's nDCG@10 at least at the
    two-feature model's (issue 15: no idea may lower it), then its scale and bias by a logistic
    on that one score, classes and sets weighing the same (as ``retrieval.relevance``)."""
    conversations, abstracts = _questions(locomo), _questions(beir)
    baseline = np.array([7.01, 8.73, 0.0])  # retrieval.relevance's weights
    floor = _quality(abstracts, baseline)[1]
    print(
        f"two-feature model: LoCoMo R@10 {_quality(conversations, baseline)[0]:.4f}, "
        f"SciFact nDCG@10 {floor:.4f}"
    )
    best: tuple[float, float, np.ndarray] | None = None
    for dense, bm25, late in itertools.product(
        [5, 6, 7, 8], [6, 7, 8, 9, 10], [0, 0.5, 1, 1.5, 2, 3, 4]
    ):
        direction = np.array([dense, bm25, late], dtype=np.float64)
        recall = _quality(conversations, direction)[0]
        ndcg = _quality(abstracts, direction)[1]
        if ndcg >= floor and (best is None or recall > best[0]):
            best = (recall, ndcg, direction)
    assert best is not None
    recall, ndcg, direction = best
    print(f"direction {direction.tolist()}: LoCoMo R@10 {recall:.4f}, SciFact nDCG@10 {ndcg:.4f}")
    xs, ys, ws = [], [], []
    for questions in (conversations, abstracts):
        rows = np.vstack([r for r, _ in questions])
        y = rows[:, 3]
        xs.append(rows[:, :3] @ direction)
        ys.append(y)
        ws.append(np.where(y > 0, 0.5 / y.sum(), 0.5 / (len(y) - y.sum())))
    x, y, w = np.concatenate(xs)[:, None], np.concatenate(ys), np.concatenate(ws)
    beta = fit(x, y, w * len(y) / w.sum())
    weights = beta[1] * direction
    print(f"bias = {beta[0]:.3f}\ndense = {weights[0]:.3f}\nbm25 = {weights[1]:.3f}")
    print(f"late = {weights[2]:.3f}")


def main(paths: list[str]) -> None:
    if paths and paths[0] == "--ratios":
        ratios = [float(r) for r in paths[1].split(",")]
        for ratio in ratios:
            cells = [ranking(Path(p), ratio) for p in paths[2:]]
            text = "  ".join(f"R@10 {r:.3f} nDCG@10 {n:.3f}" for r, n in cells)
            print(f"ratio {ratio:g}: {text}")
        return
    late = bool(paths) and paths[0] == "--late"
    if late:  # the model for retrieval.relevance_late: dumps made with the channel on
        late_model(Path(paths[1]), Path(paths[2]))
        return
    xs, ys, ws = [], [], []
    for path in paths:
        x, y = load(Path(path))
        xs.append(x)
        ys.append(y)
        ws.append(np.full(len(y), 1.0 / len(y)))
        print(f"{path}: {len(y)} candidates, {int(y.sum())} relevant", file=sys.stderr)
    x, y, w = np.vstack(xs), np.concatenate(ys), np.concatenate(ws)
    w = w * len(y) / w.sum()
    beta = fit(x, y, w)
    print(f"bias = {beta[0]:.3f}\ndense = {beta[1]:.3f}\nbm25 = {beta[2]:.3f}")
    design = np.hstack([np.ones((len(x), 1)), x])
    p = 1.0 / (1.0 + np.exp(-design @ beta))
    print("\n| predicted relevance | candidates | mean predicted | observed relevant |")
    print("|---|---|---|---|")
    edges = [0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.01]
    for low, high in itertools.pairwise(edges):
        mask = (p >= low) & (p < high)
        if mask.any():
            print(
                f"| {low:g}-{min(high, 1):g} | {int(mask.sum())} | {p[mask].mean():.3f} "
                f"| {y[mask].mean():.3f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])

"""Fit the no-reranker relevance model (core/relevance.py) on dev-set candidates.

    python bench/sweep.py locomo --dump bench/.cache/features-locomo.json
    python bench/sweep.py beir --dump bench/.cache/features-beir.json
    python bench/calibrate.py bench/.cache/features-locomo.json bench/.cache/features-beir.json

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


def main(paths: list[str]) -> None:
    if paths and paths[0] == "--ratios":
        ratios = [float(r) for r in paths[1].split(",")]
        for ratio in ratios:
            cells = [ranking(Path(p), ratio) for p in paths[2:]]
            text = "  ".join(f"R@10 {r:.3f} nDCG@10 {n:.3f}" for r, n in cells)
            print(f"ratio {ratio:g}: {text}")
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

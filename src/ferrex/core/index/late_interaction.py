"""Late interaction: MaxSim between the query's and a memory's token vectors.

The dense channel compares one pooled vector per memory; a question naming one detail ("when
did Caroline go to the support group?") can lose to a memory about the same person in general.
Late interaction keeps the model's token vectors (its last hidden state, from the same model
pass as the dense embedding: no extra model call) and scores a memory by

    late = (1 / |Q|) x sum over query tokens q of  max over memory tokens d of cos(q, d)

in [-1, 1] (the engine computes the sum, "MaxSim"; the mean is that over the query's token
count). The query's words that carry no content (the BM25 tokenizer's stop words, punctuation)
are left out; a memory keeps every word but punctuation (its stop words help: measured). Storage
stays bounded: a memory's tokens are clustered to at most ``retrieval.late_interaction.tokens``
vectors (see ``pool``) and the engine stores them 8-bit (TurboQuant, ~400 bytes a 384-d
vector, ~800 at 768): at most 18 vectors, ~7.3 KB a point with the small tier's model (measured
at 10k memories: +6.7 KB a memory, bench/late_cost.py), ~14 KB with a 768-d tier's.

``late`` is one more piece of evidence in the calibrated relevance (core/recall/relevance.py),
with its own fitted weights (``retrieval.relevance_late``): scores stay relevance in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ferrex.core.ports import SparseEncoder, TokenEmbedding


class ContentWords:
    """Which words carry content: the ones the BM25 tokenizer keeps (cached per word)."""

    def __init__(self, sparse: SparseEncoder) -> None:
        self._sparse = sparse
        self._known: dict[str, bool] = {}

    def __call__(self, word: str) -> bool:
        known = self._known.get(word)
        if known is None:
            known = any(c.isalnum() for c in word) and bool(self._sparse.encode_query(word))
            if len(self._known) < 100_000:
                self._known[word] = known
        return known


def content_rows(embedding: TokenEmbedding, is_content: Callable[[str], bool]) -> np.ndarray:
    """The token vectors of the words ``is_content`` keeps (all of them when it keeps none)."""
    tokens = embedding.tokens
    assert tokens is not None
    keep = [i for i, word in enumerate(embedding.words) if is_content(word)]
    return tokens[keep] if keep else tokens


def has_letters(word: str) -> bool:
    """Punctuation carries nothing a document is found by; stop words do (measured)."""
    return any(c.isalnum() for c in word)


def pool(tokens: np.ndarray, count: int) -> np.ndarray:
    """At most ``count`` unit vectors: the tokens clustered greedily (the two clusters whose
    centroids are most alike merge, until ``count`` are left), each cluster its renormalised
    mean, in the order of its first token; ``tokens`` unchanged when it has no more than that.

    Clustering keeps what contiguous runs lose (LoCoMo dev, MaxSim alone over a conversation,
    R@10: every token 0.735; 20 clusters 0.725, 16 0.714, 12 0.701; 20 contiguous runs 0.657).
    Deterministic: ties merge the lowest indices."""
    n = len(tokens)
    if n <= count:
        return tokens
    members = [[i] for i in range(n)]
    sums = tokens.astype(np.float64).copy()
    alive = np.ones(n, dtype=bool)
    unit = sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    for _ in range(n - count):
        flat = int(np.argmax(similarity))
        i, j = divmod(flat, n)
        i, j = min(i, j), max(i, j)
        members[i].extend(members[j])
        sums[i] += sums[j]
        alive[j] = False
        similarity[j, :] = -np.inf
        similarity[:, j] = -np.inf
        centroid = sums[i] / max(np.linalg.norm(sums[i]), 1e-12)
        row = unit @ centroid
        unit[i] = centroid
        row[~alive] = -np.inf
        row[i] = -np.inf
        similarity[i, :] = row
        similarity[:, i] = row
    kept = sorted((min(members[i]), i) for i in range(n) if alive[i])
    return np.stack([unit[i] for _, i in kept]).astype(np.float32)


def document_tokens(embedding: TokenEmbedding, count: int) -> np.ndarray | None:
    """What a point stores for the channel: its tokens but punctuation, pooled to at most
    ``count`` (None: the model gives no token vectors)."""
    if embedding.tokens is None or len(embedding.tokens) == 0:
        return None
    return pool(content_rows(embedding, has_letters), count).astype(np.float32)


def query_tokens(embedding: TokenEmbedding, is_content: Callable[[str], bool]) -> np.ndarray | None:
    """The query's content tokens (stop words and punctuation dropped), unpooled."""
    if embedding.tokens is None or len(embedding.tokens) == 0:
        return None
    return content_rows(embedding, is_content).astype(np.float32)


def mean_maxsim(total: float, query_token_count: int) -> float:
    """The engine's MaxSim (a sum over query tokens) as a mean in [-1, 1]."""
    if query_token_count <= 0:
        return 0.0
    return max(-1.0, min(1.0, total / query_token_count))


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Mean MaxSim of unit token vectors (what the engine's sum means, divided by |Q|)."""
    if len(query) == 0 or len(document) == 0:
        return 0.0
    sims = query.astype(np.float32) @ document.astype(np.float32).T
    return float(sims.max(axis=1).mean())

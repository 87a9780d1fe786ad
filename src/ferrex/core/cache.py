"""Semantic caching on recall (spec Phase 5: "LRU, embed-hash keyed").

Two LRUs: query text -> embedding (skips the model for repeated queries), and
(namespace, embedding hash, every recall parameter) -> the expensive part of a recall: the fused
candidate list and the cross-encoder scores. Freshness, staleness filtering and boosts are
recomputed from SQLite on every call, so a hit returns exactly what a miss would have. Any write
to a namespace bumps its generation and drops its entries.

Two more hold what context neighbours (core/recall/context.py) read for a hit, keyed by the
namespace's generation: its stored neighbours (SQLite) and the dense cosine of each (hit,
neighbour) pair (the index). Different queries find the same memories, and these lookups were
a third of a recall's work besides the model. Like the query embeddings they are exact copies
of what the stores answered in the same generation, so they are kept whether or not recall
results are cached.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from ferrex.core.ports import StoredNeighbour

if TYPE_CHECKING:  # the retrieval stage's output (recall/records.py)
    from ferrex.core.recall.records import Retrieved

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
            return None

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def drop_where(self, predicate: Any) -> None:
        with self._lock:
            for key in [k for k in self._items if predicate(k)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def embedding_hash(vector: np.ndarray) -> str:
    return hashlib.blake2b(
        np.asarray(vector, dtype=np.float32).tobytes(), digest_size=16
    ).hexdigest()


# Entries of the neighbour lookups: a recall reads ten hits' neighbours and ~40 cosines.
NEIGHBOUR_ENTRIES = 8192
COSINE_ENTRIES = 32768
NO_COSINE = float("nan")  # a pair the index gave no cosine for (e.g. another model's point)


class RecallCache:
    def __init__(self, capacity: int, enabled: bool = True) -> None:
        self.enabled = enabled
        # Query embeddings: (model pin, query) -> the vector; (model pin, query, "tokens") ->
        # the vector and the query's content token vectors (late interaction).
        self.queries: LRU[tuple[str, ...], Any] = LRU(max(16, capacity * 4))
        self.results: LRU[tuple[Any, ...], Retrieved] = LRU(capacity)
        # (namespace, generation, window, memory id) -> its stored neighbours; (namespace,
        # generation, model pin, hit, neighbour) -> their cosine or NO_COSINE. An entry of an
        # older generation is never asked for again and ages out.
        self.neighbours: LRU[tuple[str, int, int, str], list[StoredNeighbour]] = LRU(
            NEIGHBOUR_ENTRIES
        )
        self.cosines: LRU[tuple[str, int, str, str, str], float] = LRU(COSINE_ENTRIES)
        self._generation: dict[str, int] = {}
        # Bumped by an invalidation of every namespace (another connection's writes, an
        # import, a repair): it moves the generation of namespaces this process never wrote to
        # as well, which have no counter of their own yet.
        self._epoch = 0
        self._lock = threading.Lock()

    def generation(self, namespace: str) -> int:
        """Grows with every write to ``namespace`` and every invalidation of all of them."""
        with self._lock:
            return self._epoch + self._generation.get(namespace, 0)

    def invalidate(self, namespace: str | None = None) -> None:
        with self._lock:
            if namespace is None:
                self._epoch += 1
                self.results.clear()
                return
            self._generation[namespace] = self._generation.get(namespace, 0) + 1
        self.results.drop_where(lambda key: key[0] == namespace)

    def key(self, namespace: str, vector_hash: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
        return (namespace, self.generation(namespace), vector_hash, params)

    def get(self, key: tuple[Any, ...]) -> Retrieved | None:
        return self.results.get(key) if self.enabled else None

    def put(self, key: tuple[Any, ...], value: Retrieved) -> None:
        if self.enabled:
            self.results.put(key, value)

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self.results),
            "hits": self.results.hits,
            "misses": self.results.misses,
            "query_embeddings": len(self.queries),
        }

"""Entity resolution (spec "Entity Resolution"): normalize -> exact/alias -> Jaro-Winkler ->
embedding cosine -> new entity.

Matches through the fuzzy or embedding stages become aliases of the canonical entity; an
embedding cosine in [candidate_threshold, embedding_threshold] is recorded as an alias candidate
for reflect. Entities are per namespace.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import JaroWinkler

from ferrex.core.matching.names import distinct_entity_names, numbers_differ, word_swapped
from ferrex.core.ports import EntityRows, Vector

_T = TypeVar("_T")
_SEPARATORS = re.compile(r"[\s_\-]+")


def normalize_entity(name: str) -> str:
    """ "Tokio" -> "tokio"; " api server " -> "api server"; "api_server" -> "api server"."""
    return _SEPARATORS.sub(" ", name.strip().lower()).strip()


def same_entity_name(a: str, b: str) -> bool:
    """Two spellings of one name without any similarity guess ("API-Server" / "api server")."""
    return normalize_entity(a) == normalize_entity(b)


def display_name(name: str) -> str:
    """The name as shown and embedded: inner whitespace collapsed."""
    return " ".join(name.split())


@dataclass(frozen=True)
class EntityResolution:
    name: str
    normalized: str
    entity_id: int | None
    method: str  # "exact" | "fuzzy" | "embedding" | "new" | "unresolved"
    score: float = 1.0
    candidate: tuple[int, float] | None = None


class EntityResolver:
    """Layered resolution with a per-namespace cache of names and name embeddings."""

    def __init__(
        self,
        store: EntityRows,
        embed_names: Callable[[Sequence[str]], list[Vector]],
        *,
        fuzzy_threshold: float = 0.85,
        embedding_threshold: float = 0.92,
        candidate_threshold: float = 0.80,
    ) -> None:
        self.store = store
        self.embed_names = embed_names
        self.fuzzy_threshold = fuzzy_threshold
        self.embedding_threshold = embedding_threshold
        self.candidate_threshold = candidate_threshold
        # Per namespace: every name and alias sorted by (entity id, name), as the store lists
        # them, and the name embeddings in entity-id order. Kept up to date by this resolver's
        # own writes (a write that rolls back must call ``invalidate``), reloaded after anyone
        # else's: reloading them for every new entity made a store's cost grow with the
        # namespace (bulk import at 10,000 memories spent 2.3 s of 12 in these loads).
        self._names: dict[str, _NameTable] = {}
        self._vectors: dict[str, _VectorTable] = {}
        self._lock = threading.RLock()
        # Bumped by every change of what the tables should hold: a table read from the store
        # while one happened is used once, not kept. (Tables are read outside ``_lock``: a
        # store's transaction holds the store's lock and then needs this one.)
        self._generation = 0

    def invalidate(self, namespace: str | None = None) -> None:
        with self._lock:
            self._generation += 1
            if namespace is None:
                self._names.clear()
                self._vectors.clear()
            else:
                self._names.pop(namespace, None)
                self._vectors.pop(namespace, None)

    def _name_table(self, namespace: str) -> tuple[list[str], list[int]]:
        table = self._table(
            self._names, namespace, lambda: _NameTable(self.store.entity_names(namespace))
        )
        return table.names, table.ids

    def _vector_table(self, namespace: str) -> tuple[list[int], np.ndarray | None]:
        table = self._table(
            self._vectors,
            namespace,
            lambda: _VectorTable(*self.store.entity_embeddings(namespace)),
        )
        return table.ids, table.matrix

    def _table(self, tables: dict[str, _T], namespace: str, load: Callable[[], _T]) -> _T:
        """The namespace's loaded table, or one read from the store outside ``_lock`` and
        kept only if nothing changed meanwhile (``_generation``)."""
        with self._lock:
            table = tables.get(namespace)
            generation = self._generation
        if table is not None:
            return table
        loaded = load()
        with self._lock:
            table = tables.get(namespace)
            if table is None:
                table = loaded
                if self._generation == generation:
                    tables[namespace] = loaded
        return table

    def _added_name(self, namespace: str, normalized: str, entity_id: int) -> None:
        """A name or alias this resolver just wrote: into the loaded table, where a reload
        would put it."""
        with self._lock:
            self._generation += 1
            table = self._names.get(namespace)
            if table is not None:
                table.add(normalized, entity_id)

    def _added_entity(self, namespace: str, entity_id: int, vector: np.ndarray) -> None:
        with self._lock:
            self._generation += 1
            table = self._vectors.get(namespace)
            if table is not None and not table.append(entity_id, vector):
                del self._vectors[namespace]  # (an id out of order: reload it when asked)

    # ------------------------------------------------------------------ stages

    def fuzzy_match(self, namespace: str, normalized: str) -> tuple[int, float] | None:
        names, ids = self._name_table(namespace)
        if not names:
            return None
        matches = process.extract(
            normalized,
            names,
            scorer=JaroWinkler.similarity,
            limit=8,
            score_cutoff=self.fuzzy_threshold + 1e-12,
        )
        for matched, score, position in matches:
            if score > self.fuzzy_threshold and not distinct_entity_names(
                normalized, matched, self.fuzzy_threshold
            ):
                return ids[position], float(score)
        return None

    def embedding_match(
        self, namespace: str, vector: Vector, normalized: str
    ) -> tuple[int, float, bool] | None:
        """The nearest mergeable entity by name embedding among the 8 nearest: (id, cosine,
        True); failing that the nearest look-alike (id, cosine, False). Names that keep a word
        and swap another ("inbound queue" / "outbound queue") are never merged, whatever their
        cosine; they may still be alias candidates for reflect. Different numbers never are."""
        ids, matrix = self._vector_table(namespace)
        if matrix is None or not ids:
            return None
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")
        names, name_ids = self._name_table(namespace)
        canonical_by_id = {eid: name for name, eid in zip(names, name_ids, strict=True)}
        guarded: tuple[int, float, bool] | None = None
        for position in order[:8]:
            entity_id = ids[int(position)]
            score = float(scores[int(position)])
            if word_swapped(normalized, canonical_by_id.get(entity_id, ""), self.fuzzy_threshold):
                if guarded is None and not numbers_differ(
                    normalized, canonical_by_id.get(entity_id, "")
                ):
                    guarded = (entity_id, score, False)
                continue
            return entity_id, score, True
        return guarded

    # ------------------------------------------------------------------ pipeline

    def names_to_embed(self, namespace: str, names: Sequence[str]) -> list[str]:
        """The display forms of ``names`` that no exact or fuzzy match resolves now: the
        names whose resolution will compare embeddings (store embeds them with its document,
        before the write transaction)."""
        out = []
        for name in names:
            normalized = normalize_entity(name)
            if not normalized or self.store.entity_by_name(namespace, normalized) is not None:
                continue
            if self.fuzzy_match(namespace, normalized) is not None:
                continue
            out.append(display_name(name))
        return out

    def resolve(
        self,
        namespace: str,
        name: str,
        *,
        create: bool,
        at: datetime,
        vector: Vector | None = None,
    ) -> EntityResolution:
        """Resolve one name; with ``create`` a miss creates the entity (and aliases/candidates)."""
        normalized = normalize_entity(name)
        display = display_name(name)
        if not normalized:
            return EntityResolution(name, normalized, None, "unresolved", 0.0)
        exact = self.store.entity_by_name(namespace, normalized)
        if exact is not None:
            return EntityResolution(name, normalized, exact.id, "exact", 1.0)
        fuzzy = self.fuzzy_match(namespace, normalized)
        if fuzzy is not None:
            if create:
                self.store.add_alias(namespace, normalized, fuzzy[0], "fuzzy", fuzzy[1], at)
                self._added_name(namespace, normalized, fuzzy[0])
            return EntityResolution(name, normalized, fuzzy[0], "fuzzy", fuzzy[1])
        if vector is None:
            vector = self.embed_names([display])[0]
        found = self.embedding_match(namespace, vector, normalized)
        candidate: tuple[int, float] | None = None
        if found is not None:
            nearest_id, cosine, mergeable = found
            if mergeable and cosine > self.embedding_threshold:
                if create:
                    self.store.add_alias(namespace, normalized, nearest_id, "embedding", cosine, at)
                    self._added_name(namespace, normalized, nearest_id)
                return EntityResolution(name, normalized, nearest_id, "embedding", cosine)
            if cosine >= self.candidate_threshold:
                candidate = (nearest_id, cosine)
        if not create:
            return EntityResolution(name, normalized, None, "unresolved", 0.0, candidate)
        array = np.asarray(vector, dtype=np.float32)
        entity_id = self.store.create_entity(namespace, normalized, display, array, at)
        if candidate is not None:
            self.store.add_alias_candidate(namespace, normalized, candidate[0], candidate[1], at)
        self._added_name(namespace, normalized, entity_id)
        self._added_entity(namespace, entity_id, array)
        return EntityResolution(name, normalized, entity_id, "new", 1.0, candidate)


class _NameTable:
    """Names and aliases with their entity ids, sorted by (id, name) like
    ``EntityRows.entity_names`` (fuzzy ties resolve by position: a store and its reload
    must agree)."""

    def __init__(self, rows: Sequence[tuple[str, int]]) -> None:
        self.keys = sorted((entity_id, name) for name, entity_id in rows)
        self.names = [name for _, name in self.keys]
        self.ids = [entity_id for entity_id, _ in self.keys]

    def add(self, name: str, entity_id: int) -> None:
        key = (entity_id, name)
        position = bisect.bisect_left(self.keys, key)
        if position < len(self.keys) and self.keys[position] == key:
            return
        # New lists, not inserts: a reader may be holding the old ones.
        self.keys = [*self.keys[:position], key, *self.keys[position:]]
        self.names = [*self.names[:position], name, *self.names[position:]]
        self.ids = [*self.ids[:position], entity_id, *self.ids[position:]]


class _VectorTable:
    """Name embeddings in entity-id order, in a buffer that grows by doubling (a new entity
    has the largest id: appending keeps the order a reload gives)."""

    def __init__(self, ids: list[int], matrix: np.ndarray | None) -> None:
        self.ids = list(ids)
        self._buffer = None if matrix is None else np.array(matrix, dtype=np.float32)

    @property
    def matrix(self) -> np.ndarray | None:
        if self._buffer is None or not self.ids:
            return None
        return self._buffer[: len(self.ids)]

    def append(self, entity_id: int, vector: np.ndarray) -> bool:
        """False when the id would break the order (the table must then be reloaded)."""
        if self.ids and entity_id <= self.ids[-1]:
            return False
        row = np.asarray(vector, dtype=np.float32).reshape(-1)
        count = len(self.ids)
        if self._buffer is None:
            self._buffer = np.empty((8, len(row)), dtype=np.float32)
        elif self._buffer.shape[1] != len(row):
            return False
        elif count == len(self._buffer):
            grown = np.empty((2 * count, len(row)), dtype=np.float32)
            grown[:count] = self._buffer[:count]
            self._buffer = grown
        self._buffer[count] = row  # past every view handed out so far
        self.ids = [*self.ids, entity_id]
        return True

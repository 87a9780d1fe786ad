"""The explicit bundle of dependencies every use case is built over.

One ``Deps`` per store: the adapters (ports), the shared in-memory state (caches, the entity
resolver, access tracker, the write lock) and the few operations on that state every use case
needs (the clock, per-namespace predicate normalizers, cache invalidation after a write).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from ferrex.config.core import CoreSettings
from ferrex.core.cache import RecallCache
from ferrex.core.clock import Clock
from ferrex.core.index.sync import IndexSync
from ferrex.core.lifecycle.access import AccessTracker
from ferrex.core.matching.entities import EntityResolver
from ferrex.core.matching.predicates import PredicateNormalizer
from ferrex.core.ports import Embedder, MetadataStore, Reranker, SparseEncoder, VectorIndex


@dataclass
class Deps:
    settings: CoreSettings
    meta: MetadataStore
    index: VectorIndex
    embedder: Embedder
    sparse: SparseEncoder
    reranker: Reranker
    clock: Clock
    sync: IndexSync
    entities: EntityResolver
    cache: RecallCache
    access: AccessTracker
    write: threading.RLock = field(default_factory=threading.RLock)
    _normalizers: dict[str, PredicateNormalizer] = field(default_factory=dict)
    _data_version: int = 0

    def __post_init__(self) -> None:
        self._data_version = self.meta.data_version()

    @property
    def namespace(self) -> str:
        """The server's default namespace."""
        return self.settings.namespace

    def now(self) -> datetime:
        return self.clock()

    def normalizer(self, namespace: str) -> PredicateNormalizer:
        if namespace not in self._normalizers:
            self._normalizers[namespace] = PredicateNormalizer(
                self.settings.predicates.synonyms_for(namespace),
                self.settings.predicates.fuzzy_threshold,
            )
        return self._normalizers[namespace]

    def sync_external_writes(self) -> None:
        """Another connection committed (e.g. an operator command): drop in-memory caches."""
        version = self.meta.data_version()
        if version != self._data_version:
            self._data_version = version
            self.cache.invalidate()
            self.entities.invalidate()

    def after_write(self, namespace: str) -> None:
        self.cache.invalidate(namespace)
        self._data_version = self.meta.data_version()

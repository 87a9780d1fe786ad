"""What the MemoryService pipelines share: its adapters, caches and a few of its methods.

``IngestMixin`` and ``RecallMixin`` are parts of ``MemoryService``; this base declares, for
readers and type checkers, the attributes the service provides them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from ferrex.config import Settings
from ferrex.core.access import AccessTracker
from ferrex.core.cache import RecallCache
from ferrex.core.clock import Clock
from ferrex.core.entities import EntityResolver
from ferrex.core.ports import Embedder, MetadataStore, Reranker, SparseEncoder, VectorIndex
from ferrex.core.predicates import PredicateNormalizer
from ferrex.core.sync import IndexSync


class ServiceState:
    settings: Settings
    meta: MetadataStore
    index: VectorIndex
    embedder: Embedder
    sparse: SparseEncoder
    reranker: Reranker
    sync: IndexSync
    entities: EntityResolver
    cache: RecallCache
    access: AccessTracker
    clock: Clock
    _write: threading.RLock

    # Methods of MemoryService the pipelines call.
    @property
    def namespace(self) -> str:
        raise NotImplementedError

    ensure_ready: Callable[[], None]
    now: Callable[[], datetime]
    normalizer: Callable[[str], PredicateNormalizer]
    _after_write: Callable[[str], None]
    _sync_external_writes: Callable[[], None]
    enforce_budget: Callable[..., int]
    sweep_retention: Callable[..., int]

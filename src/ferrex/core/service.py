"""MemoryService: the store's composition of use cases (store / recall / forget / reflect /
stats) over one explicit bundle of dependencies (``core/deps.py``).

Each tool is one use case class taking its parsed request model (``core/requests.py``) and
returning a typed result (``core/results.py``); this facade makes the store ready before the
use cases that need the model. Blocking by design (model inference, SQLite, the embedded
engine); the MCP server runs it in worker threads. Writes are serialized by one lock; reads run
concurrently.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from ferrex.config import Settings
from ferrex.config.core import CoreSettings
from ferrex.core.cache import RecallCache
from ferrex.core.clock import Clock, utcnow
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.index.sync import (  # noqa: F401  (re-exported for the crash-safety tests)
    PHASE_AFTER_COMMIT,
    PHASE_AFTER_INDEX,
    PHASE_BEFORE_COMMIT,
    IndexSync,
)
from ferrex.core.ingest.usecase import Ingest
from ferrex.core.lifecycle.access import AccessTracker
from ferrex.core.lifecycle.forget import Forget
from ferrex.core.lifecycle.reflect import Reflect
from ferrex.core.lifecycle.upkeep import Upkeep
from ferrex.core.matching.entities import EntityResolver
from ferrex.core.ops.readiness import ModelMismatchError, Readiness  # noqa: F401
from ferrex.core.ops.stats import Stats
from ferrex.core.ports import (
    Embedder,
    MetadataStore,
    Reranker,
    SparseEncoder,
    Vector,
    VectorIndex,
)
from ferrex.core.reading.browse import (
    Activity,
    ActivityRequest,
    Browse,
    BrowsePage,
    BrowseRequest,
    History,
    HistoryRequest,
)
from ferrex.core.reading.lookup import Lookup
from ferrex.core.recall.usecase import Recall
from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
)
from ferrex.core.results import (
    ForgetResult,
    MemoryView,
    NamespaceCounts,
    RecallResult,
    ReflectReport,
    StatsBrief,
    StatsDetailed,
    StoreOutcome,
)


class MemoryService:
    def __init__(
        self,
        settings: Settings,
        meta: MetadataStore,
        index: VectorIndex,
        embedder: Embedder,
        sparse: SparseEncoder,
        reranker: Reranker,
        *,
        clock: Clock = utcnow,
        explicit_model: bool = False,
    ) -> None:
        def embed_names(names: Sequence[str]) -> list[Vector]:
            return embedder.embed_documents(list(names))

        self._settings = settings
        core = CoreSettings(settings)
        self.deps = deps = Deps(
            settings=core,
            meta=meta,
            index=index,
            embedder=embedder,
            sparse=sparse,
            reranker=reranker,
            clock=clock,
            sync=IndexSync(core, meta, index, embedder, sparse),
            entities=EntityResolver(
                meta,
                embed_names,
                fuzzy_threshold=settings.entities.fuzzy_threshold,
                embedding_threshold=settings.entities.embedding_threshold,
                candidate_threshold=settings.entities.candidate_threshold,
            ),
            cache=RecallCache(settings.cache.size, settings.cache.enabled),
            access=AccessTracker(meta.bump_access, clock, settings.lifecycle.access_flush_seconds),
        )
        self.upkeep = Upkeep(deps)
        self.readiness = Readiness(deps, self.upkeep, explicit_model=explicit_model)
        self.storing = Ingest(deps, self.upkeep)
        self.recalling = Recall(deps)
        self.forgetting = Forget(deps, self.upkeep)
        self.reflecting = Reflect(deps)
        self.statistics = Stats(deps, self.upkeep, self.readiness)
        self.looking = Lookup(deps)
        self.browsing = Browse(deps)
        self._closed = False

    # ------------------------------------------------------------------ what operators use
    # (maintenance commands, tests and benchmarks reach the adapters through the bundle)

    @property
    def settings(self) -> Settings:
        """Every setting, for the layers around core (the engine tells a joining process its
        share; adapters are wired from it). Use cases get ``deps.settings``: what core reads
        (``config/core.py``)."""
        return self._settings

    @property
    def meta(self) -> MetadataStore:
        return self.deps.meta

    @property
    def index(self) -> VectorIndex:
        return self.deps.index

    @property
    def embedder(self) -> Embedder:
        return self.deps.embedder

    @property
    def sparse(self) -> SparseEncoder:
        return self.deps.sparse

    @property
    def reranker(self) -> Reranker:
        return self.deps.reranker

    @property
    def sync(self) -> IndexSync:
        return self.deps.sync

    @property
    def entities(self) -> EntityResolver:
        return self.deps.entities

    @property
    def cache(self) -> RecallCache:
        return self.deps.cache

    @property
    def access(self) -> AccessTracker:
        return self.deps.access

    @property
    def clock(self) -> Clock:
        return self.deps.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.deps.clock = clock

    @property
    def namespace(self) -> str:
        return self.deps.namespace

    @property
    def replayed_at_start(self) -> int:
        return self.readiness.replayed_at_start

    def now(self) -> datetime:
        return self.deps.now()

    # ------------------------------------------------------------------ lifecycle

    def check_pin(self) -> None:
        self.readiness.check_pin()

    def check_peer_model(self, name: str, dimension: int | None, source: str | None = None) -> None:
        self.readiness.check_peer_model(name, dimension, source)

    def ensure_ready(self) -> None:
        self.readiness.ensure_ready()

    def warm_up(self) -> None:
        self.readiness.warm_up()

    def warnings(self, *, brief: bool = False) -> list[str]:
        return self.readiness.warnings(brief=brief)

    def close(self) -> None:
        with self.deps.write:  # let an in-flight write finish first
            if self._closed:
                return
            self._closed = True
            self.deps.access.stop()
            self.deps.index.close()
            self.deps.meta.close()

    def sweep_retention(self, *, force: bool = False, exclude: Collection[str] = ()) -> int:
        return self.upkeep.sweep_retention(force=force, exclude=exclude)

    def enforce_budget(self, exclude: Collection[str] = ()) -> int:
        return self.upkeep.enforce_budget(exclude)

    def storage_bytes(self) -> int:
        return self.upkeep.storage_bytes()

    def disk_bytes(self) -> int:
        return self.upkeep.disk_bytes()

    # ------------------------------------------------------------------ the five tools

    def store(self, request: StoreRequest, key: str | None = None) -> StoreOutcome:
        """``key``: a forwarded call's idempotency key (``core/call_keys.py``)."""
        self.ensure_ready()
        return self.storing.run(request, key)

    def store_many(
        self, items: Sequence[StoreRequest | FerrexError], batch: int = 256
    ) -> list[StoreOutcome | FerrexError]:
        self.ensure_ready()
        return self.storing.run_many(items, batch)

    def recall(self, request: RecallRequest) -> RecallResult:
        self.ensure_ready()
        return self.recalling.run(request)

    def forget(self, request: ForgetRequest, key: str | None = None) -> ForgetResult:
        self.ensure_ready()
        return self.forgetting.run(request, key)

    def reflect(self, request: ReflectRequest) -> ReflectReport:
        self.ensure_ready()
        return self.reflecting.run(request)

    def stats(self, request: StatsRequest) -> StatsBrief | StatsDetailed:
        return self.statistics.run(request)

    # ------------------------------------------------------------------ the resources

    def memory(self, memory_id: str) -> MemoryView:
        return self.looking.memory(memory_id)

    def namespaces(self) -> list[NamespaceCounts]:
        return self.looking.namespaces()

    # ------------------------------------------------------------------ browsing (ferrex ui)

    def browse(self, request: BrowseRequest) -> BrowsePage:
        return self.browsing.page(request)

    def history(self, request: HistoryRequest) -> History:
        return self.browsing.history(request)

    def activity(self, request: ActivityRequest) -> Activity:
        return self.browsing.activity(request)

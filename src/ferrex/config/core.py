"""What core reads of the settings (``CoreSettings``): the tuning sections and the few top-level
keys its rules use, and nothing else — no engine address, no model path, no credential.

Core's facade (``core/service.py``) is handed the whole ``Settings`` by the wiring
(``bootstrap.py``) and gives every use case this view of it. A view, not a copy: the same
section objects, read live, so a section a benchmark or a test swaps in (``settings.retrieval =
...``) is what core reads next. Read-only: core never changes a setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ferrex.config.ingest import (
    ConflictConfig,
    DedupConfig,
    EntitiesConfig,
    PredicatesConfig,
    SecretsConfig,
)
from ferrex.config.lifecycle import LifecycleConfig, StalenessConfig
from ferrex.config.recall import CacheConfig, RecencyConfig, RetrievalConfig
from ferrex.config.settings import LimitsConfig, Settings

# What the view exposes: tests/test_layering.py keeps it free of credentials and engine wiring.
CORE_SETTINGS = (
    "namespace",
    "data_dir",
    "rerank",
    "secret_handling",
    "model_tier_source",
    "retrieval",
    "recency",
    "dedup",
    "conflict",
    "predicates",
    "entities",
    "staleness",
    "lifecycle",
    "cache",
    "limits",
    "secrets",
)


class CoreSettings:
    """The settings core reads (module doc)."""

    __slots__ = ("_settings",)

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    # The server's default namespace, where the data dir is (disk checks, doctor), whether a
    # cross-encoder is configured, what to do with credentials in what agents store, and where
    # ``model_tier`` came from (for messages).
    @property
    def namespace(self) -> str:
        return self._settings.namespace

    @property
    def data_dir(self) -> Path:
        return self._settings.data_dir

    @property
    def rerank(self) -> bool:
        return self._settings.rerank

    @property
    def secret_handling(self) -> Literal["redact", "refuse", "allow"]:
        return self._settings.secret_handling

    @property
    def model_tier_source(self) -> str:
        return self._settings.model_tier_source

    # The tuning sections.
    @property
    def retrieval(self) -> RetrievalConfig:
        return self._settings.retrieval

    @property
    def recency(self) -> RecencyConfig:
        return self._settings.recency

    @property
    def dedup(self) -> DedupConfig:
        return self._settings.dedup

    @property
    def conflict(self) -> ConflictConfig:
        return self._settings.conflict

    @property
    def predicates(self) -> PredicatesConfig:
        return self._settings.predicates

    @property
    def entities(self) -> EntitiesConfig:
        return self._settings.entities

    @property
    def staleness(self) -> StalenessConfig:
        return self._settings.staleness

    @property
    def lifecycle(self) -> LifecycleConfig:
        return self._settings.lifecycle

    @property
    def cache(self) -> CacheConfig:
        return self._settings.cache

    @property
    def limits(self) -> LimitsConfig:
        return self._settings.limits

    @property
    def secrets(self) -> SecretsConfig:
        """The credential *detector's* patterns and allow-list (not a credential)."""
        return self._settings.secrets

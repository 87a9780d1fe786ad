"""The one settings object (``Settings``): the top-level keys, request limits, and a section
per concern (recall, ingest, lifecycle, engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
)

from ferrex.config.base import (
    NAMESPACE_PATTERN,
    LogLevel,
    ModelTier,
    RerankerTier,
    Section,
)
from ferrex.config.engine import QdrantConfig
from ferrex.config.ingest import (
    ConflictConfig,
    DedupConfig,
    EntitiesConfig,
    PredicatesConfig,
    SecretsConfig,
)
from ferrex.config.lifecycle import LifecycleConfig, StalenessConfig
from ferrex.config.recall import CacheConfig, RecencyConfig, RetrievalConfig
from ferrex.datadir import shared_model_cache


class LimitsConfig(Section):
    max_content_chars: int = Field(default=32_000, ge=100)
    max_field_chars: int = Field(default=2_000, ge=10)
    max_query_chars: int = Field(default=4_000, ge=10)
    max_entities: int = Field(default=32, ge=1)
    max_steps: int = Field(default=100, ge=1)
    max_ids: int = Field(default=500, ge=1)
    max_context_bytes: int = Field(default=16_384, ge=16)


class Settings(Section):
    """Every ferrex setting. Field names are the TOML keys."""

    # Where ``model_tier`` came from, for messages (not settings: never in a file or dump):
    # "the --model-tier flag", "FERREX_MODEL_TIER", or the configuration file's key (its path
    # for stderr and the CLI only, never for an agent).
    _tier_source: str = PrivateAttr(default="--model-tier")
    _tier_file: str | None = PrivateAttr(default=None)

    @property
    def model_tier_source(self) -> str:
        return self._tier_source

    @property
    def model_tier_file(self) -> str | None:
        return self._tier_file

    data_dir: Path = Field(default_factory=lambda: Path("~/.ferrex").expanduser())
    namespace: str = Field(default="default", pattern=NAMESPACE_PATTERN)
    log_level: LogLevel = "info"
    log_format: Literal["console", "json"] = "console"  # FERREX_LOG_FORMAT
    log_file: Path | None = None  # FERREX_LOG_FILE: also append the log lines to this file
    model_tier: ModelTier = "best"
    model_path: Path | None = None
    models_dir: Path | None = None
    offline: bool = False
    offline_fallback: bool = True
    rerank: bool = True
    reranker_tier: RerankerTier = "default"
    reranker_path: Path | None = None
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    # The Qdrant server binary for sidecar mode (else PATH, else <data dir>/bin/qdrant).
    qdrant_bin: Path | None = None
    # The collection on a Qdrant server: shards, replicas, consistency, on-disk storage.
    qdrant: QdrantConfig = Field(default_factory=QdrantConfig)
    # Bearer token of the team server (`ferrex serve --http`); env FERREX_HTTP_TOKEN.
    http_token: str | None = None
    threads: int | None = Field(default=None, ge=1, le=64)
    # The model runtime's threads keep spinning ~40 ms after a run, waiting for the next: calls
    # that come in bursts are faster; false frees the cores as a run returns (an idle server
    # burns nothing, bursts are slower: docs/performance.md, "Spinning between runs").
    runtime_spin: bool = True
    # Credentials in what agents store: redact (default), refuse, or allow (docs/secrets.md).
    secret_handling: Literal["redact", "refuse", "allow"] = "redact"

    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    recency: RecencyConfig = Field(default_factory=RecencyConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    conflict: ConflictConfig = Field(default_factory=ConflictConfig)
    predicates: PredicatesConfig = Field(default_factory=PredicatesConfig)
    entities: EntitiesConfig = Field(default_factory=EntitiesConfig)
    staleness: StalenessConfig = Field(default_factory=StalenessConfig)
    lifecycle: LifecycleConfig = Field(default_factory=LifecycleConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    secrets: SecretsConfig = Field(default_factory=SecretsConfig)

    @field_validator(
        "data_dir",
        "model_path",
        "models_dir",
        "reranker_path",
        "log_file",
        "qdrant_bin",
        mode="before",
    )
    @classmethod
    def _expand(cls, value: Any) -> Any:
        if isinstance(value, str) and value:
            return Path(value).expanduser()
        return value

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ferrex.db"

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @property
    def model_cache(self) -> Path:
        """Where models are downloaded: ``models_dir``; else the data dir's own ``models``
        folder where an earlier ferrex made one; else one cache for every data dir."""
        if self.models_dir is not None:
            return self.models_dir
        own = self.data_dir / "models"
        return own if own.is_dir() else shared_model_cache()


# --------------------------------------------------------------------------- loading

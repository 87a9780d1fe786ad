"""Configuration: one pydantic model holding every setting with the spec's defaults.

Precedence: CLI flag > ``FERREX_*`` environment > ``ferrex.toml`` > defaults. Unknown keys in the
TOML file (or ``FERREX_*`` variables that name no setting) are reported as warnings, never
silently ignored. ``ferrex.toml.example`` at the repository root documents every key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from ferrex.datadir import shared_model_cache

ModelTier = Literal["small", "mid", "best", "best-large", "multilingual"]
RerankerTier = Literal[
    "default", "multilingual", "v2-m3", "v2-m3-int8", "turbo", "tiny", "ms-marco"
]
LogLevel = Literal["debug", "info", "warning", "error"]
MemoryTypeName = Literal["episodic", "semantic", "procedural"]

NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


class Thresholds(_Section):
    """Staleness thresholds in days: fresh < ``fresh``; stale >= ``stale``; aging in between."""

    fresh: float = Field(ge=0)
    aging: float = Field(ge=0)
    stale: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if not self.fresh <= self.aging <= self.stale:
            raise ValueError("staleness thresholds need fresh <= aging <= stale")
        return self


class TypeThresholds(_Section):
    episodic: Thresholds | None = None
    semantic: Thresholds | None = None
    procedural: Thresholds | None = None


def _default_type_thresholds() -> TypeThresholds:
    return TypeThresholds(
        episodic=Thresholds(fresh=30, aging=90, stale=90),
        semantic=Thresholds(fresh=90, aging=180, stale=180),
        procedural=Thresholds(fresh=180, aging=365, stale=365),
    )


class StalenessWeights(_Section):
    """Staleness score weights (spec Layer 2: high for age and validation, low for access)."""

    age: float = Field(default=0.45, ge=0)
    validated: float = Field(default=0.45, ge=0)
    accessed: float = Field(default=0.05, ge=0, le=0.5)
    access_count: float = Field(default=0.05, ge=0, le=0.5)


class StalenessConfig(_Section):
    defaults: TypeThresholds = Field(default_factory=_default_type_thresholds)
    namespaces: dict[str, TypeThresholds] = Field(default_factory=dict)
    weights: StalenessWeights = Field(default_factory=StalenessWeights)

    @model_validator(mode="before")
    @classmethod
    def _complete_partial_tables(cls, data: Any) -> Any:
        """A type table may give only some thresholds (``episodic = { fresh = 14 }``): the
        others come from the defaults (for a namespace: the configured defaults)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        effective: dict[str, Any] = _default_type_thresholds().model_dump()
        defaults = data.get("defaults")
        if isinstance(defaults, dict):
            defaults = dict(defaults)
            for name, table in defaults.items():
                if isinstance(table, dict) and name in effective:
                    defaults[name] = effective[name] = {**effective[name], **table}
            data["defaults"] = defaults
        namespaces = data.get("namespaces")
        if isinstance(namespaces, dict):
            data["namespaces"] = {
                namespace: {
                    name: {**effective[name], **table}
                    if isinstance(table, dict) and name in effective
                    else table
                    for name, table in tables.items()
                }
                if isinstance(tables, dict)
                else tables
                for namespace, tables in namespaces.items()
            }
        return data

    @model_validator(mode="after")
    def _fill_defaults(self) -> StalenessConfig:
        base = _default_type_thresholds()
        for name in ("episodic", "semantic", "procedural"):
            if getattr(self.defaults, name) is None:
                setattr(self.defaults, name, getattr(base, name))
        return self

    def thresholds(self, namespace: str, memory_type: str) -> Thresholds:
        override = self.namespaces.get(namespace)
        if override is not None and getattr(override, memory_type) is not None:
            return getattr(override, memory_type)  # type: ignore[no-any-return]
        value = getattr(self.defaults, memory_type)
        assert value is not None
        return value  # type: ignore[no-any-return]


class RecencyCurve(_Section):
    """recency_boost = 1 + amplitude * 2^(-age_days / half_life_days)."""

    amplitude: float = Field(ge=0, le=5)
    half_life_days: float = Field(ge=0)


class RecencyConfig(_Section):
    episodic: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.3, half_life_days=30)
    )
    semantic: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.15, half_life_days=180)
    )
    procedural: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.0, half_life_days=0)
    )


class RelevanceModel(_Section):
    """relevance = sigmoid(bias + dense x cosine + bm25 x normalised BM25 + late x MaxSim)
    (core/recall/relevance.py; ``late`` counts only where the late-interaction channel is)."""

    # Fitted by bench/calibrate.py on LoCoMo dev + SciFact dev candidates (docs/recall.md).
    bias: float = -4.669
    dense: float = 7.010
    bm25: float = 8.730
    late: float = 0.0


def _late_relevance() -> RelevanceModel:
    # Fitted by ``bench/calibrate.py --late`` on the dev dumps with the channel (docs/recall.md).
    return RelevanceModel(bias=-5.436, dense=7.051, bm25=9.066, late=1.511)


class LateInteractionConfig(_Section):
    """The late-interaction channel (core/late_interaction.py). ``enabled`` at index time
    stores each point's pooled token vectors (``tokens`` of them at most; changing it takes
    ``ferrex rebuild-index``); at query time it scores the candidates by MaxSim when the index
    has the channel. Off: recall uses ``retrieval.relevance`` alone."""

    enabled: bool = True
    tokens: int = Field(default=18, ge=1, le=128)


class AnswerGate(_Section):
    """Whether a recall has an answer at all (core/recall/relevance.py ``answers``): its best
    candidate must reach ``relevance`` (the calibrated score) or ``cosine`` (dense evidence
    alone, for a paraphrase sharing no word with the query). A 0 turns that half off; two 0s
    turn the gate off. Used in hybrid mode without a cross-encoder (whose probability the
    ``min_score`` floor already judges)."""

    relevance: float = Field(default=0.4, ge=0, le=1)
    cosine: float = Field(default=0.3, ge=0, le=1)


class NeighbourConfig(_Section):
    """Context neighbours (core/neighbours.py); weight 0 turns them off. The defaults were
    chosen on both dev sets (docs/recall.md)."""

    weight: float = Field(default=0.5, ge=0, le=1)
    decay: float = Field(default=0.5, ge=0, le=1)
    window: int = Field(default=2, ge=1, le=5)
    gap_seconds: float = Field(default=3600.0, ge=0)
    top: int = Field(default=10, ge=1, le=200)
    # A neighbour is context only when it is about the same thing: the dense cosine between
    # it and the hit at least this (-1: any neighbour, no lookup).
    min_similarity: float = Field(default=0.35, ge=-1, le=1)
    # The memory stored right after a hit that asks a question (its answer) gets this credit,
    # whatever its cosine with the question (0: it is an ordinary neighbour; weight 0 turns
    # every neighbour's credit off, answers' too).
    answer_weight: float = Field(default=0.9, ge=0, le=1)


class FeedbackConfig(_Section):
    """BM25 pseudo-relevance feedback (core/feedback.py); weight 0 turns it off."""

    weight: float = Field(default=0.0, ge=0, le=2)
    docs: int = Field(default=5, ge=1, le=50)
    terms: int = Field(default=20, ge=1, le=200)


class RetrievalConfig(_Section):
    # "hybrid" is the product; "dense" and "bm25" run one channel through the same pipeline
    # (benchmarks compare them side by side).
    mode: Literal["hybrid", "dense", "bm25"] = "hybrid"
    prefetch_limit: int = Field(default=30, ge=1, le=2000)
    rrf_k: int = Field(default=60, ge=1, le=1000)
    default_limit: int = Field(default=5, ge=1, le=200)
    max_limit: int = Field(default=200, ge=1, le=1000)
    rerank_top_n: int = Field(default=20, ge=0, le=200)
    fused_base_k: float = Field(default=5.0, gt=0, le=1000)
    # BM25 hits below this fraction of the query's best BM25 score are not fused (0 disables).
    bm25_relative_floor: float = Field(default=0.2, ge=0, lt=1)
    # BM25 evidence of a namespace with fewer memories is put on the scale of one this large:
    # IDF from a few dozen memories calls a word in 2% of them nearly unique (docs/recall.md).
    bm25_min_points: int = Field(default=500, ge=1, le=10_000_000)
    # How far, in logits of relevance, the recency boost may move a candidate: two whose
    # relevance odds differ more than e^margin are never reordered by age; 0 turns it off.
    recency_margin: float = Field(default=0.75, ge=0, le=10)
    hnsw_ef: int = Field(default=128, ge=4, le=4096)
    # Embedded engine: build the dense HNSW index in a background process once this many
    # vectors lack it (0: never; brute-force search, exact, slower past ~20k memories).
    hnsw_build_min_unindexed: int = Field(default=20_000, ge=0)
    # Results whose relevance (before the recency boost) is below this are not returned: limit
    # is a maximum. 0 returns every candidate. Chosen on LoCoMo / SciFact dev (docs/recall.md).
    min_score: float = Field(default=0.08, ge=0, le=1)
    # A recall whose best candidate is weak on both kinds of evidence answers nothing.
    answer_gate: AnswerGate = Field(default_factory=AnswerGate)
    # How candidates are ordered without a cross-encoder: "relevance" (the calibrated score,
    # a score fusion of cosine and BM25) or "rrf" (reciprocal-rank fusion, k = rrf_k).
    fusion: Literal["relevance", "rrf"] = "relevance"
    relevance: RelevanceModel = Field(default_factory=RelevanceModel)
    # The relevance model used where the late-interaction channel scored the candidates.
    relevance_late: RelevanceModel = Field(default_factory=_late_relevance)
    late_interaction: LateInteractionConfig = Field(default_factory=LateInteractionConfig)
    neighbours: NeighbourConfig = Field(default_factory=NeighbourConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)


class DedupConfig(_Section):
    threshold: float = Field(default=0.95, gt=0, le=1.0)


class ConflictConfig(_Section):
    duplicate_threshold: float = Field(default=0.95, gt=0, le=1.0)
    different_threshold: float = Field(default=0.5, ge=0, lt=1.0)
    object_embedding_threshold: float = Field(default=0.95, gt=0, le=1.0)
    multi_valued_predicates: list[str] = Field(default_factory=list)
    # Relations whose values are named things with versions (a project depends on several
    # packages): a value replaces the current value of the same name ("tokio 1.36" -> "tokio
    # 1.38") and sits next to values of other names ("pydantic 2.7" next to "fastapi 0.110").
    # Opt-in: the spec's default is one current value per subject + predicate.
    keyed_predicates: list[str] = Field(default_factory=list)
    namespaces: dict[str, ConflictNamespace] = Field(default_factory=dict)

    def multi_valued(self, namespace: str) -> list[str]:
        override = self.namespaces.get(namespace)
        if override is not None and override.multi_valued_predicates is not None:
            return override.multi_valued_predicates
        return self.multi_valued_predicates


class ConflictNamespace(_Section):
    multi_valued_predicates: list[str] | None = None


ConflictConfig.model_rebuild()


def _default_synonyms() -> dict[str, list[str]]:
    return {
        "depends_on": ["uses", "depends_on", "requires", "needs"],
        "built_with": ["written_in", "implemented_in", "built_with"],
        "version": ["version", "runs_version", "at_version"],
        "owned_by": ["owned_by", "maintained_by", "managed_by"],
    }


class PredicateNamespace(_Section):
    synonyms: dict[str, list[str]] = Field(default_factory=dict)
    replace: bool = False


def _merge_families(
    base: dict[str, list[str]], extra: dict[str, list[str]]
) -> dict[str, list[str]]:
    merged = {key: list(values) for key, values in base.items()}
    for canonical, values in extra.items():
        family = merged.setdefault(canonical, [])
        family.extend(v for v in values if v not in family)
    return merged


class PredicatesConfig(_Section):
    fuzzy_threshold: float = Field(default=0.85, gt=0, le=1.0)
    # Families given here extend the spec's four (a family of the same name gains the
    # spellings); ``replace = true`` uses only the families given here.
    synonyms: dict[str, list[str]] = Field(default_factory=_default_synonyms)
    replace: bool = False
    namespaces: dict[str, PredicateNamespace] = Field(default_factory=dict)

    def families(self) -> dict[str, list[str]]:
        if self.replace:
            return {key: list(values) for key, values in self.synonyms.items()}
        return _merge_families(_default_synonyms(), self.synonyms)

    def synonyms_for(self, namespace: str) -> dict[str, list[str]]:
        override = self.namespaces.get(namespace)
        if override is None:
            return self.families()
        if override.replace:
            return dict(override.synonyms)
        return _merge_families(self.families(), override.synonyms)


class EntitiesConfig(_Section):
    fuzzy_threshold: float = Field(default=0.85, gt=0, le=1.0)
    embedding_threshold: float = Field(default=0.92, gt=0, le=1.0)
    candidate_threshold: float = Field(default=0.80, gt=0, le=1.0)


class LifecycleConfig(_Section):
    max_memories: int = Field(default=0, ge=0)
    max_storage_mb: float = Field(default=0.0, ge=0)
    superseded_retention_days: float = Field(default=180.0, ge=0)
    episodic_half_life_days: float = Field(default=30.0, gt=0)
    access_flush_seconds: float = Field(default=1.0, gt=0, le=60)
    inactive_entity_days: float = Field(default=90.0, ge=0)
    # stats and doctor warn when the disk holding the store has less free space than this
    # (writes fail with storage_full when it is full: docs/operations.md); 0 turns it off.
    min_free_mb: float = Field(default=500.0, ge=0)


class CacheConfig(_Section):
    enabled: bool = True
    size: int = Field(default=256, ge=1, le=100_000)


class LimitsConfig(_Section):
    max_content_chars: int = Field(default=32_000, ge=100)
    max_field_chars: int = Field(default=2_000, ge=10)
    max_query_chars: int = Field(default=4_000, ge=10)
    max_entities: int = Field(default=32, ge=1)
    max_steps: int = Field(default=100, ge=1)
    max_ids: int = Field(default=500, ge=1)
    max_context_bytes: int = Field(default=16_384, ge=16)


class SecretsConfig(_Section):
    # Kinds of one's own: kind -> regular expression (its first group, if any, is the secret).
    patterns: dict[str, str] = Field(default_factory=dict)
    # Regular expressions whose matches are never secrets (a test fixture's fake key).
    allow: list[str] = Field(default_factory=list)

    @field_validator("patterns", "allow")
    @classmethod
    def _compiles(cls, value: Any) -> Any:
        for pattern in value.values() if isinstance(value, dict) else value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
        return value


class QdrantConfig(_Section):
    """The collection ferrex creates on a Qdrant server (docs/modes.md, "Beyond one machine").

    ``shard_number``, ``replication_factor`` and ``write_consistency_factor`` are sent when
    ferrex creates the collection on an external server (``--qdrant-url``); the sidecar is one
    node and keeps the server's defaults. They apply at creation only: an existing collection
    keeps its own (``ferrex rebuild-index`` recreates it). ``write_consistency_factor`` unset
    is a majority of the replicas, which with ``read_consistency = "majority"`` keeps every
    read after an acknowledged write seeing it."""

    shard_number: int | None = Field(default=None, ge=1, le=1024)
    replication_factor: int | None = Field(default=None, ge=1, le=64)
    write_consistency_factor: int | None = Field(default=None, ge=1, le=64)
    # Dense vectors memory-mapped from disk (the token vectors always are), an 8-bit copy kept
    # in RAM for search; payload on disk. An existing collection's dense vectors go to disk at
    # the first open past ``on_disk_vectors_from`` points (0: never, unless on_disk_vectors).
    on_disk_vectors: bool = False
    on_disk_vectors_from: int = Field(default=20_000, ge=0)
    on_disk_payload: bool = True
    # Reads: "majority" | "all" | "quorum" | a number of replicas. Writes: "weak" | "medium" |
    # "strong" (Qdrant's write ordering between replicas).
    read_consistency: Literal["majority", "all", "quorum"] | int = "majority"
    write_ordering: Literal["weak", "medium", "strong"] = "strong"

    @model_validator(mode="after")
    def _consistent(self) -> QdrantConfig:
        factor, replicas = self.write_consistency_factor, self.replication_factor or 1
        if factor is not None and factor > replicas:
            raise ValueError(
                f"qdrant.write_consistency_factor ({factor}) cannot exceed "
                f"qdrant.replication_factor ({replicas}): a write could never be confirmed"
            )
        if isinstance(self.read_consistency, int) and not 1 <= self.read_consistency <= 64:
            raise ValueError("qdrant.read_consistency must be majority, all, quorum or 1-64")
        return self

    def write_factor(self) -> int | None:
        """The write consistency factor to create the collection with (None: not replicated)."""
        if self.write_consistency_factor is not None:
            return self.write_consistency_factor
        replicas = self.replication_factor or 1
        return replicas // 2 + 1 if replicas > 1 else None


class Settings(_Section):
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

# Environment variables that map to top-level keys (besides the generic FERREX_<KEY> form).
ENV_ALIASES: dict[str, str] = {
    "FERREX_HOME": "data_dir",
    "FERREX_LOG": "log_level",
    "QDRANT_API_KEY": "qdrant_api_key",
}
_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}


class ConfigError(Exception):
    """A configuration problem the user must fix (message says how)."""


def _fields_of(model: type[BaseModel]) -> dict[str, Any]:
    return dict(model.model_fields)


def unknown_keys(
    data: Mapping[str, Any], model: type[BaseModel], prefix: str = ""
) -> Iterator[str]:
    """Yield dotted paths of keys in ``data`` that the settings model does not know."""
    fields = _fields_of(model)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields:
            yield path
            continue
        annotation = fields[key].annotation
        if _is_dict_of_models(annotation) and isinstance(value, Mapping):
            # Checked first: a dict's value model (e.g. staleness.namespaces."ci-infra") is
            # also among its type arguments, but the dict's keys are free-form names.
            inner = _dict_value_model(annotation)
            for name, item in value.items():
                if inner is not None and isinstance(item, Mapping):
                    yield from unknown_keys(item, inner, prefix=f"{path}.{name}.")
            continue
        sub = _submodel(annotation)
        if sub is not None and isinstance(value, Mapping):
            yield from unknown_keys(value, sub, prefix=f"{path}.")


def _submodel(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_dict_of_models(annotation: Any) -> bool:
    return (
        getattr(annotation, "__origin__", None) is dict
        and _dict_value_model(annotation) is not None
    )


def _dict_value_model(annotation: Any) -> type[BaseModel] | None:
    args: tuple[Any, ...] = getattr(annotation, "__args__", ())
    if len(args) == 2:
        return _submodel(args[1])
    return None


def deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``overlay`` into a copy of ``base`` (nested dicts merge, other values replace)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Settings from ``FERREX_*`` variables (``FERREX_MODEL_TIER``, ``FERREX_RETRIEVAL__RRF_K``)."""
    data: dict[str, Any] = {}
    unknown: list[str] = []
    top = _fields_of(Settings)
    for name, raw in environ.items():
        if name in ENV_ALIASES:
            data[ENV_ALIASES[name]] = raw
            continue
        if not name.startswith("FERREX_") or name.startswith("FERREX_TEST_"):
            continue
        path = name[len("FERREX_") :].lower().split("__")
        if path[0] not in top or _names_unknown_key(path):
            unknown.append(name)
            continue
        cursor = data
        for part in path[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[path[-1]] = _coerce_env(raw)
    return data, unknown


def _names_unknown_key(path: list[str]) -> bool:
    """True when a nested variable (``FERREX_RETRIEVAL__BOGUS``) names no setting."""
    probe: dict[str, Any] = {}
    cursor = probe
    for part in path[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[path[-1]] = None
    return any(True for _ in unknown_keys(probe, Settings))


def _coerce_env(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in _BOOL_TRUE:
        return True
    if lowered in _BOOL_FALSE:
        return False
    if raw.strip().startswith("["):
        try:
            import json

            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def load_settings(
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
    staleness_path: Path | None = None,
) -> tuple[Settings, list[str]]:
    """Build the settings with precedence CLI > env > file > defaults.

    Returns the settings and a list of human-readable warnings (unknown keys...).
    """
    environ = os.environ if environ is None else environ
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    warnings: list[str] = []

    env_data, unknown_env = env_overrides(environ)
    warnings.extend(f"unknown environment variable {name} (ignored)" for name in unknown_env)

    data_dir = cli.get("data_dir") or env_data.get("data_dir")
    explicit_config = config_path is not None
    if config_path is None:
        base_dir = Path(str(data_dir)).expanduser() if data_dir else Path("~/.ferrex").expanduser()
        config_path = base_dir / "ferrex.toml"
    file_data: dict[str, Any] = {}
    if explicit_config or config_path.exists():
        file_data = read_toml(config_path)
        if not explicit_config:
            file_data.pop("data_dir", None)
    warnings.extend(
        f"unknown key '{key}' in {config_path} (ignored)"
        for key in unknown_keys(file_data, Settings)
    )
    if staleness_path is not None:
        extra = read_toml(staleness_path)
        staleness_only = extra.get("staleness", extra)
        if "staleness" in extra:
            warnings.extend(
                f"unknown key '{key}' in {staleness_path} (ignored: a --staleness-config file "
                "holds only [staleness])"
                for key in extra
                if key != "staleness"
            )
        warnings.extend(
            f"unknown key '{key}' in {staleness_path} (ignored)"
            for key in unknown_keys({"staleness": staleness_only}, Settings)
        )
        file_data = deep_merge(file_data, {"staleness": staleness_only})

    merged = deep_merge(deep_merge(file_data, env_data), _nest(cli))
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(exc)) from exc
    if "model_tier" in cli:
        settings._tier_source = "--model-tier"
    elif "model_tier" in env_data:
        settings._tier_source = "FERREX_MODEL_TIER"
    elif "model_tier" in file_data:
        settings._tier_source = "the model_tier key of ferrex.toml"
        settings._tier_file = str(config_path)
    return settings, warnings


def model_path_problem(path: Path | None) -> str | None:
    """What is wrong with ``--model-path`` (``model_path``), or None when it looks usable.

    Checked at start-up so a typo fails fast with one line instead of an unusable server. The
    message names the directory: it is for the operator (stderr), never sent to an agent.
    """
    if path is None:
        return None
    hint = (
        "point it at a directory holding model.onnx and the tokenizer files (tokenizer.json, "
        "config.json, special_tokens_map.json, tokenizer_config.json), or drop the flag"
    )
    if not path.exists():
        return f"--model-path {path} does not exist; {hint}"
    if not path.is_dir():
        return f"--model-path {path} is not a directory; {hint}"
    try:
        has_onnx = any(path.glob("*.onnx")) or any(path.glob("*/*.onnx"))
        has_tokenizer = (path / "tokenizer.json").is_file()
    except OSError as exc:
        return f"--model-path {path} cannot be read ({exc.strerror or exc}); {hint}"
    if not has_onnx:
        return f"no ONNX model in --model-path {path}; {hint}"
    if not has_tokenizer:
        return f"no tokenizer.json in --model-path {path}; {hint}"
    return None


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        cursor = out
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
    return out


def _describe_validation(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        lines.append(f"invalid setting '{where}': {error['msg']}")
    return "; ".join(lines)

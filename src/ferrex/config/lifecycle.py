"""Lifecycle tuning: staleness thresholds and weights, retention, the storage budget."""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    model_validator,
)

from ferrex.config.base import (
    Section,
)


class Thresholds(Section):
    """Staleness thresholds in days: fresh < ``fresh``; stale >= ``stale``; aging in between."""

    fresh: float = Field(ge=0)
    aging: float = Field(ge=0)
    stale: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if not self.fresh <= self.aging <= self.stale:
            raise ValueError("staleness thresholds need fresh <= aging <= stale")
        return self


class TypeThresholds(Section):
    episodic: Thresholds | None = None
    semantic: Thresholds | None = None
    procedural: Thresholds | None = None


def _default_type_thresholds() -> TypeThresholds:
    return TypeThresholds(
        episodic=Thresholds(fresh=30, aging=90, stale=90),
        semantic=Thresholds(fresh=90, aging=180, stale=180),
        procedural=Thresholds(fresh=180, aging=365, stale=365),
    )


class StalenessWeights(Section):
    """Staleness score weights (spec Layer 2: high for age and validation, low for access)."""

    age: float = Field(default=0.45, ge=0)
    validated: float = Field(default=0.45, ge=0)
    accessed: float = Field(default=0.05, ge=0, le=0.5)
    access_count: float = Field(default=0.05, ge=0, le=0.5)


class StalenessConfig(Section):
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


class LifecycleConfig(Section):
    max_memories: int = Field(default=0, ge=0)
    max_storage_mb: float = Field(default=0.0, ge=0)
    superseded_retention_days: float = Field(default=180.0, ge=0)
    episodic_half_life_days: float = Field(default=30.0, gt=0)
    access_flush_seconds: float = Field(default=1.0, gt=0, le=60)
    inactive_entity_days: float = Field(default=90.0, ge=0)
    # stats and doctor warn when the disk holding the store has less free space than this
    # (writes fail with storage_full when it is full: docs/operations.md); 0 turns it off.
    min_free_mb: float = Field(default=500.0, ge=0)

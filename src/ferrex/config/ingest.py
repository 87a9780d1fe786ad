"""Store tuning: the duplicate threshold, conflicts, predicate and entity resolution, what
counts as a secret (docs/matching.md, docs/secrets.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import (
    Field,
    field_validator,
)

from ferrex.config.base import (
    Section,
)


class DedupConfig(Section):
    threshold: float = Field(default=0.95, gt=0, le=1.0)


class ConflictConfig(Section):
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


class ConflictNamespace(Section):
    multi_valued_predicates: list[str] | None = None


ConflictConfig.model_rebuild()


def _default_synonyms() -> dict[str, list[str]]:
    return {
        "depends_on": ["uses", "depends_on", "requires", "needs"],
        "built_with": ["written_in", "implemented_in", "built_with"],
        "version": ["version", "runs_version", "at_version"],
        "owned_by": ["owned_by", "maintained_by", "managed_by"],
    }


class PredicateNamespace(Section):
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


class PredicatesConfig(Section):
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


class EntitiesConfig(Section):
    fuzzy_threshold: float = Field(default=0.85, gt=0, le=1.0)
    embedding_threshold: float = Field(default=0.92, gt=0, le=1.0)
    candidate_threshold: float = Field(default=0.80, gt=0, le=1.0)


class SecretsConfig(Section):
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

"""Predicate normalization (spec "Conflict Resolution / Predicate Normalization").

1. Normalize: lowercase, trim, collapse separators, strip hyphens/underscores ("depends-on" ->
   "dependson").
2. Synonym map: canonical families (depends_on, built_with, version, owned_by), extensible and
   overridable per namespace.
3. Fuzzy: Jaro-Winkler > 0.85 against the existing predicates of the same subject, with the
   guards of ``core/names.py`` ("min_version" is not "max_version", "licensed_to" is not
   "license", "end_date" is not "endtime").
Unrecognised predicates pass through as themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import JaroWinkler

from ferrex.core.names import distinct_predicates

_SEPARATORS = re.compile(r"[\s_\-]+")


def normalize_predicate(predicate: str) -> str:
    """ "Depends-On" -> "dependson"; " runs  version " -> "runsversion"."""
    return _SEPARATORS.sub("", predicate.strip().lower())


@dataclass(frozen=True)
class PredicateResolution:
    raw: str
    normalized: str
    canonical: str
    method: str  # "synonym" | "fuzzy" | "exact" | "new"
    score: float = 1.0
    matched: str | None = None


class PredicateNormalizer:
    """Maps predicates to canonical names with one synonym table."""

    def __init__(
        self, synonyms: Mapping[str, Sequence[str]], fuzzy_threshold: float = 0.85
    ) -> None:
        self.fuzzy_threshold = fuzzy_threshold
        self._table: dict[str, str] = {}
        for canonical, variants in synonyms.items():
            self._table[normalize_predicate(canonical)] = canonical
            for variant in variants:
                self._table[normalize_predicate(variant)] = canonical

    def synonym(self, predicate: str) -> str | None:
        return self._table.get(normalize_predicate(predicate))

    def canonical(self, predicate: str) -> str:
        """Synonym-mapped canonical name, or the normalized predicate itself."""
        normalized = normalize_predicate(predicate)
        return self._table.get(normalized, normalized)

    def resolve(self, predicate: str, existing: Sequence[str] = ()) -> PredicateResolution:
        """Canonical predicate of ``predicate`` given the subject's existing canonical names."""
        normalized = normalize_predicate(predicate)
        mapped = self._table.get(normalized)
        if mapped is not None:
            return PredicateResolution(predicate, normalized, mapped, "synonym", 1.0, mapped)
        if normalized in existing:
            return PredicateResolution(predicate, normalized, normalized, "exact", 1.0, normalized)
        found = self._fuzzy(predicate, normalized, {c: c for c in existing})
        if found is not None:
            score, canonical = found
            return PredicateResolution(predicate, normalized, canonical, "fuzzy", score, canonical)
        return PredicateResolution(predicate, normalized, normalized, "new", 1.0, None)

    def _fuzzy(
        self, predicate: str, normalized: str, candidates: Mapping[str, str]
    ) -> tuple[float, str] | None:
        """Best (score, canonical) over ``candidates`` (spelling -> canonical) above the
        threshold, skipping pairs that name different relations."""
        best: tuple[float, str] | None = None
        for spelling, canonical in candidates.items():
            score = JaroWinkler.similarity(normalized, normalize_predicate(spelling))
            if score <= self.fuzzy_threshold or (best is not None and score <= best[0]):
                continue
            if distinct_predicates(predicate, spelling, self.fuzzy_threshold):
                continue
            best = (score, canonical)
        return best

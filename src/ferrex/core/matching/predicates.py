"""Predicate normalization (spec "Conflict Resolution / Predicate Normalization").

1. Normalize: lowercase, trim, collapse separators, strip hyphens/underscores ("depends-on" ->
   "dependson").
2. Synonym map: canonical families (depends_on, built_with, version, owned_by), extensible and
   overridable per namespace.
3. Fuzzy: Jaro-Winkler > 0.85 against the existing predicates of the same subject, with the
   guards of ``core/matching/names.py`` ("min_version" is not "max_version", "licensed_to" is not
   "license", "end_date" is not "endtime").
4. Typos of the synonym table (an addition to the spec): a predicate that matched nothing above
   and is within Jaro-Winkler > 0.95 of a known spelling ("depend on" ~ "depends_on", "requirs",
   "writen in") joins that family, so the canonical name does not depend on which spelling a
   subject happened to be stored with first (otherwise "depend on" then "uses" would be two
   relations, and "uses" then "depend on" one). Stricter than the subject stage because it
   applies to every subject, and never across a suffix word ("managed" is not "managed_by").
Unrecognised predicates pass through as themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import JaroWinkler

from ferrex.core.matching.names import distinct_predicates

_SEPARATORS = re.compile(r"[\s_\-]+")
SYNONYM_TYPO_THRESHOLD = 0.95


def normalize_predicate(predicate: str) -> str:
    """ "Depends-On" -> "dependson"; " runs  version " -> "runsversion"."""
    return _SEPARATORS.sub("", predicate.strip().lower())


@dataclass(frozen=True)
class PredicateResolution:
    raw: str
    normalized: str
    canonical: str
    method: str  # "synonym" | "exact" | "fuzzy" | "typo" | "new"
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

    def same_relation(self, a: str, b: str) -> bool:
        """Two spellings of one relation without a guess from the subject's own predicates:
        equal once normalized, or members of one synonym family ("uses" / "depends-on"; a typo
        of a family spelling, "depend on", is a member as stage 4 says)."""
        na, nb = normalize_predicate(a), normalize_predicate(b)
        if na == nb:
            return True
        family = self._family(a, na)
        return family is not None and family == self._family(b, nb)

    def _family(self, predicate: str, normalized: str) -> str | None:
        mapped = self._table.get(normalized)
        if mapped is not None:
            return mapped
        typo = self._synonym_typo(predicate, normalized)
        return typo[1] if typo is not None else None

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
        typo = self._synonym_typo(predicate, normalized)
        if typo is not None:
            score, canonical = typo
            return PredicateResolution(predicate, normalized, canonical, "typo", score, canonical)
        return PredicateResolution(predicate, normalized, normalized, "new", 1.0, None)

    def _synonym_typo(self, predicate: str, normalized: str) -> tuple[float, str] | None:
        best: tuple[float, str] | None = None
        for spelling, canonical in self._table.items():
            score = JaroWinkler.similarity(normalized, spelling)
            if score <= SYNONYM_TYPO_THRESHOLD or (best is not None and score <= best[0]):
                continue
            shorter, longer = sorted((normalized, spelling), key=len)
            if longer.startswith(shorter) and len(longer) - len(shorter) > 1:
                continue  # a suffix word: "managed" / "managed_by" are inverse relations
            if distinct_predicates(predicate, spelling, self.fuzzy_threshold):
                continue
            best = (score, canonical)
        return best

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

"""When two similar-looking names are different things (guards on the fuzzy stages).

The spec's fuzzy stage (Jaro-Winkler > 0.85) exists for spelling variants: "postgres" /
"postgresql", "depend_on" / "depends_on". Jaro-Winkler also rates many pairs of *different*
things above 0.85, because they share a long prefix: "service-a" / "service-b" (0.94),
"java" / "javascript" (0.88), "min_version" / "max_version" (0.91), "created_by" /
"created_at" (0.92). A fuzzy merge of such a pair is not harmless: a merged subject or
predicate makes the next fact *supersede* an unrelated one. These guards veto a fuzzy match
when the names differ by something that carries meaning:

- different distinguishing tokens (``core/matching/distinguishing.py``: numbers, versions, ids,
  hashes,
  dates, outcome polarity: "python2" / "python3", "v1.36" / "v1.38", "INV-2041" / "INV-2042",
  "passing tests" / "failing tests");
- a word swapped for an unrelated word ("service a" / "service b", "min version" /
  "max version"): the same number of words, and a differing pair that is not itself a
  spelling variant;
- a compound ("java" / "javascript", "type" / "typescript"): one word is the start of the
  other and the rest is a word of its own (4 letters or more), not an inflection ("-ql", "-s",
  "-js", "-db");
- for predicates only, any word more or less ("license" / "licensed_to", "version" /
  "version_date", "requires" / "requires_auth"): a stored predicate is one squashed word
  ("dependson"), so it must split into spelling variants of the other's words, in order
  ("endtime" does not split into [end, date]). Entity names may add a qualifier word
  ("tokio" / "tokio runtime" is still tokio).

What stays a fuzzy match: spelling variants ("depend_on" / "depends_on", "deploys_to" /
"deployedto", "postgres" / "postgresql"), and pairs that differ by one letter of a long word
("http_port" / "https_port": the residual risk of a character-level score).
"""

from __future__ import annotations

import re

from rapidfuzz.distance import JaroWinkler

from ferrex.core.matching.distinguishing import differ

_RUNS = re.compile(r"[^\W\d_]+|\d+")  # letter runs (any script) and digit runs
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
COMPOUND_MIN_EXTRA = 4


def numbers_differ(a: str, b: str) -> bool:
    """True when two names carry different distinguishing tokens ("python2" vs "python3",
    "INV-2041" vs "INV-2042", "passing tests" vs "failing tests")."""
    return differ(a, b)


def words(name: str) -> list[str]:
    """Lower-case words of a name: separators, camelCase and digit runs split it.

    "service-a" -> [service, a]; "licensedTo" -> [licensed, to]; "JavaScript" -> [java, script];
    "сервис-б" -> [сервис, б].
    """
    out: list[str] = []
    for run in _RUNS.findall(name):
        parts = _CAMEL.findall(run) if run.isascii() and run.isalpha() else []
        out.extend(p.lower() for p in parts) if parts else out.append(run.lower())
    return out


def _compound(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return long.startswith(short) and len(long) - len(short) >= COMPOUND_MIN_EXTRA


def _splits_into(single: str, several: list[str], threshold: float) -> bool:
    """Whether ``single`` is the concatenation of spelling variants of ``several``, in order
    ("deployedto" = deployed + to ~ [deploys, to]; "endtime" is not [end, date])."""

    def rest_matches(position: int, index: int) -> bool:
        word = several[index]
        if index == len(several) - 1:
            return _variant(single[position:], word, threshold)
        for length in (len(word), len(word) + 1, len(word) - 1, len(word) + 2, len(word) - 2):
            end = position + length
            if length <= 0 or end >= len(single):
                continue
            if _variant(single[position:end], word, threshold) and rest_matches(end, index + 1):
                return True
        return False

    return rest_matches(0, 0)


def _variant(a: str, b: str, threshold: float) -> bool:
    """Two words that are spellings of one word."""
    if a == b:
        return True
    if _compound(a, b):
        return False
    return JaroWinkler.similarity(a, b) > threshold


def distinct_entity_names(a: str, b: str, threshold: float) -> bool:
    """True when entity names ``a`` and ``b`` name different things although Jaro-Winkler may
    rate them alike. A name may add a qualifier word ("tokio" / "tokio runtime")."""
    if numbers_differ(a, b):
        return True
    wa, wb = words(a), words(b)
    if len(wa) != len(wb) or not wa:
        return False
    return any(not _variant(x, y, threshold) for x, y in zip(wa, wb, strict=True))


def word_swapped(a: str, b: str, threshold: float) -> bool:
    """True when ``a`` and ``b`` keep a word and swap another for an unrelated one ("inbound
    queue" / "outbound queue", "left sidebar" / "right sidebar"). Embeddings rate such pairs
    above 0.95 (they share the head noun and the modifiers are semantically related), so the
    embedding stage of entity resolution uses this guard; a full rephrasing that keeps no word
    ("postgres db" / "postgresql database") or an abbreviated word ("auth service" /
    "authentication service") is what that stage exists for and passes."""
    if numbers_differ(a, b):
        return True
    wa, wb = words(a), words(b)
    if len(wa) != len(wb) or len(wa) < 2:
        return False
    pairs = list(zip(wa, wb, strict=True))
    kept = any(x == y for x, y in pairs)
    return kept and any(not _variant(x, y, threshold) and not _abbreviation(x, y) for x, y in pairs)


def _abbreviation(a: str, b: str) -> bool:
    """One word is the start of the other ("auth" / "authentication")."""
    short, long = sorted((a, b), key=len)
    return long.startswith(short)


def distinct_predicates(a: str, b: str, threshold: float) -> bool:
    """True when predicates ``a`` and ``b`` mean different relations although Jaro-Winkler may
    rate them alike: a word swapped for another, or a word more or less (module docstring)."""
    if numbers_differ(a, b):
        return True
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return False
    if len(wa) == len(wb):
        return any(not _variant(x, y, threshold) for x, y in zip(wa, wb, strict=True))
    if len(wa) == 1 or len(wb) == 1:
        # A stored predicate is often one squashed word ("dependson", "endtime"): it must split
        # into consecutive spelling variants of the other side's words, in order.
        single, several = (wa[0], wb) if len(wa) == 1 else (wb[0], wa)
        return not _splits_into(single, several, threshold)
    # Both have several words, in different numbers: each word needs a variant on the other side.
    return any(not any(_variant(x, y, threshold) for y in wb) for x in wa) or any(
        not any(_variant(y, x, threshold) for x in wa) for y in wb
    )

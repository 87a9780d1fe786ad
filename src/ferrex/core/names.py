"""When two similar-looking names are different things (guards on the fuzzy stages).

The spec's fuzzy stage (Jaro-Winkler > 0.85) exists for spelling variants: "postgres" /
"postgresql", "depend_on" / "depends_on". Jaro-Winkler also rates many pairs of *different*
things above 0.85, because they share a long prefix: "service-a" / "service-b" (0.94),
"java" / "javascript" (0.88), "min_version" / "max_version" (0.91), "created_by" /
"created_at" (0.92). A fuzzy merge of such a pair is not harmless: a merged subject or
predicate makes the next fact *supersede* an unrelated one. These guards veto a fuzzy match
when the names differ by something that carries meaning:

- different numbers ("python2" / "python3", "v1.36" / "v1.38");
- a word swapped for an unrelated word ("service a" / "service b", "min version" /
  "max version"): the same number of words, and a differing pair that is not itself a
  spelling variant;
- a compound ("java" / "javascript", "type" / "typescript"): one word is the start of the
  other and the rest is a word of its own (4 letters or more), not an inflection ("-ql", "-s",
  "-js", "-db");
- for predicates only, an extra short word ("license" / "licensed_to", "created" /
  "created_by"): a predicate's small words carry the relation. Entity names may add a
  qualifier word ("tokio" / "tokio runtime" is still tokio).

What stays a fuzzy match: spelling variants ("depend_on" / "depends_on", "deploys_to" /
"deployedto", "postgres" / "postgresql"), and pairs that differ by one letter of a long word
("http_port" / "https_port": the residual risk of a character-level score).
"""

from __future__ import annotations

import re

from rapidfuzz.distance import JaroWinkler

_DIGITS = re.compile(r"\d+")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
COMPOUND_MIN_EXTRA = 4
SHORT_WORD = 3


def numbers_differ(a: str, b: str) -> bool:
    """True when two names carry different numbers ("python2" vs "python3")."""
    return _DIGITS.findall(a) != _DIGITS.findall(b)


def words(name: str) -> list[str]:
    """Lower-case words of a name: separators, camelCase and digit runs split it.

    "service-a" -> [service, a]; "licensedTo" -> [licensed, to]; "JavaScript" -> [java, script].
    """
    return [w.lower() for w in _WORDS.findall(name)]


def _compound(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return long.startswith(short) and len(long) - len(short) >= COMPOUND_MIN_EXTRA


def _placed(word: str, single: str, position: int, count: int) -> bool:
    """Whether ``word`` (the position-th of count words) occurs where it belongs in ``single``:
    a first word at its start, a last word at its end, a middle word anywhere."""
    if position == 0:
        return single.startswith(word)
    if position == count - 1:
        return single.endswith(word)
    return word in single


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


def distinct_predicates(a: str, b: str, threshold: float) -> bool:
    """True when predicates ``a`` and ``b`` mean different relations although Jaro-Winkler may
    rate them alike. Stored predicates are often normalised to one word ("dependson"); a word
    written separately on the other side ("depends_on") must then occur in it, for the short
    function words that carry the relation ("on", "to", "by", "at", "min", "max")."""
    if numbers_differ(a, b):
        return True
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return False
    if len(wa) == len(wb):
        return any(not _variant(x, y, threshold) for x, y in zip(wa, wb, strict=True))
    if len(wa) == 1 or len(wb) == 1:
        single, several = (wa[0], wb) if len(wa) == 1 else (wb[0], wa)
        return any(
            len(w) <= SHORT_WORD and not _placed(w, single, i, len(several))
            for i, w in enumerate(several)
        )
    # Both have several words, in different numbers: each word needs a variant on the other side.
    return any(not any(_variant(x, y, threshold) for y in wb) for x in wa) or any(
        not any(_variant(y, x, threshold) for x in wa) for y in wb
    )

"""Predicate normalisation (spec "Conflict Resolution / Predicate Normalization").

Proves the three stages on the pure functions (normalise, synonym map, Jaro-Winkler > 0.85 against
the subject's existing predicates, strict at the boundary) and, on a real MemoryService, that what
the normaliser decides is what conflict detection uses: synonyms and fuzzy variants supersede each
other, fuzzy matching only looks at the same subject, unrelated predicates never conflict, and the
synonym map is extensible and overridable per namespace from the settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rapidfuzz.distance import JaroWinkler
from tests.support.harness import ServiceFactory
from tests.support.typed import stored

from ferrex.config import Settings, load_settings
from ferrex.core.matching.predicates import PredicateNormalizer, normalize_predicate
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.presenter import present_store

DEFAULT_SYNONYMS = Settings().predicates.synonyms


def fact(subject: str, predicate: str, obj: str, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, **extra}


def current_objects(service: MemoryService, subject: str, namespace: str = "default") -> set[str]:
    rows = service.meta.memories_in_namespace(
        namespace, where="type = 'semantic' AND t_invalid IS NULL"
    )
    return {m.object or "" for m in rows if m.subject == subject}


# --------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("depends-on", "dependson"),
        ("Depends_On", "dependson"),
        ("  depends  on ", "dependson"),
        ("RUNS-version", "runsversion"),
        ("uses", "uses"),
    ],
)
def test_normalize_lowercases_trims_and_strips_separators(raw: str, expected: str) -> None:
    assert normalize_predicate(raw) == expected


@pytest.mark.parametrize(
    ("canonical", "variants"),
    [
        ("depends_on", ["uses", "depends_on", "depends-on", "requires", "needs", "Depends On"]),
        ("built_with", ["written_in", "implemented-in", "built with"]),
        ("version", ["version", "runs_version", "at-version"]),
        ("owned_by", ["owned_by", "maintained-by", "Managed By"]),
    ],
)
def test_synonym_families_map_to_their_canonical(canonical: str, variants: list[str]) -> None:
    normalizer = PredicateNormalizer(DEFAULT_SYNONYMS)
    for variant in variants:
        resolution = normalizer.resolve(variant)
        assert (resolution.canonical, resolution.method) == (canonical, "synonym"), variant


def test_uses_and_depends_on_are_the_same_predicate() -> None:
    normalizer = PredicateNormalizer(DEFAULT_SYNONYMS)
    assert normalizer.canonical("uses") == normalizer.canonical("depends-on") == "depends_on"


def test_unrecognised_predicates_pass_through_normalised() -> None:
    normalizer = PredicateNormalizer(DEFAULT_SYNONYMS)
    resolution = normalizer.resolve("Deployed-To")
    assert (resolution.canonical, resolution.method) == ("deployedto", "new")


def test_fuzzy_depends_on_and_dependson_match_above_085() -> None:
    # Without the synonym map the fuzzy stage alone must equate them (spec unit test).
    assert JaroWinkler.similarity("depends_on", "dependson") > 0.85
    normalizer = PredicateNormalizer({})
    resolution = normalizer.resolve("dependson", existing=["depends_on"])
    assert resolution.canonical == "depends_on"
    assert resolution.method == "fuzzy" and resolution.score > 0.85


def test_fuzzy_match_against_existing_predicates() -> None:
    normalizer = PredicateNormalizer(DEFAULT_SYNONYMS)
    resolution = normalizer.resolve("deploys_to", existing=["deployedto", "license"])
    assert (resolution.canonical, resolution.method) == ("deployedto", "fuzzy")
    assert resolution.score > 0.85


def test_fuzzy_threshold_is_strict() -> None:
    score = JaroWinkler.similarity("deploysto", "deployedto")
    at_score = PredicateNormalizer({}, fuzzy_threshold=score)
    below_score = PredicateNormalizer({}, fuzzy_threshold=score - 0.001)
    assert at_score.resolve("deploysto", existing=["deployedto"]).method == "new"
    assert below_score.resolve("deploysto", existing=["deployedto"]).canonical == "deployedto"


def test_fuzzy_picks_the_closest_existing_predicate() -> None:
    normalizer = PredicateNormalizer({})
    resolution = normalizer.resolve("runs_on", existing=["runsin", "runson2", "runson"])
    assert resolution.canonical == "runson" and resolution.method == "exact"
    resolution = normalizer.resolve("deploys_to", existing=["deployed", "deployedto"])
    expected = max(["deployed", "deployedto"], key=lambda p: JaroWinkler.similarity("deploysto", p))
    assert resolution.canonical == expected


def test_unrelated_predicates_do_not_match() -> None:
    normalizer = PredicateNormalizer(DEFAULT_SYNONYMS)
    existing = ["depends_on", "owned_by", "version"]
    for predicate in ("license", "language", "deployed_to", "homepage"):
        resolution = normalizer.resolve(predicate, existing=existing)
        assert resolution.method == "new", (predicate, resolution)
        assert resolution.canonical == normalize_predicate(predicate)


@pytest.mark.parametrize(
    ("incoming", "existing"),
    [
        ("max_version", "minversion"),
        ("min_version", "max_version"),
        ("created_at", "createdby"),
        ("licensed_to", "license"),
        ("hosted_on", "hosts"),
        ("python3_path", "python2path"),
        ("requires_auth", "requires"),
        ("version_date", "version"),
        ("end_date", "endtime"),
        ("last_login", "lastlogout"),
        ("owner_email", "ownername"),
    ],
)
def test_look_alike_predicates_of_different_meaning_do_not_match(
    incoming: str, existing: str
) -> None:
    """Jaro-Winkler rates each pair above 0.85, yet they are different relations: a fuzzy match
    would make the new fact supersede an unrelated one."""
    assert (
        JaroWinkler.similarity(normalize_predicate(incoming), normalize_predicate(existing)) > 0.85
    )
    resolution = PredicateNormalizer({}).resolve(incoming, existing=[existing])
    assert resolution.method == "new", resolution


@pytest.mark.parametrize(
    ("incoming", "existing"),
    [
        ("lives_in", "livedin"),
        ("worked_at", "worksat"),
        ("favourite_color", "favoritecolor"),
        ("depend_on", "dependson"),
    ],
)
def test_spelling_variants_still_match(incoming: str, existing: str) -> None:
    resolution = PredicateNormalizer({}).resolve(incoming, existing=[existing])
    assert (resolution.canonical, resolution.method) == (existing, "fuzzy")


@pytest.mark.parametrize(
    ("typo", "canonical"),
    [("depend on", "depends_on"), ("requirs", "depends_on"), ("writen in", "built_with")],
)
def test_typos_of_known_spellings_join_their_family(typo: str, canonical: str) -> None:
    resolution = PredicateNormalizer(DEFAULT_SYNONYMS).resolve(typo)
    assert (resolution.canonical, resolution.method) == (canonical, "typo")
    assert resolution.score > 0.95


@pytest.mark.parametrize("predicate", ["user", "managed", "manager", "vision", "owner", "needed"])
def test_words_merely_near_a_known_spelling_stay_their_own_predicate(predicate: str) -> None:
    """Typo matching is strict (> 0.95) and never across a suffix word: "managed" (active) and
    "managed_by" (passive) are inverse relations; "user" is not "uses" (0.88)."""
    resolution = PredicateNormalizer(DEFAULT_SYNONYMS).resolve(predicate)
    assert resolution.method == "new"


def test_namespace_synonyms_extend_or_replace_the_map() -> None:
    settings = Settings.model_validate(
        {
            "predicates": {
                "namespaces": {
                    "infra": {"synonyms": {"depends_on": ["links_against"]}},
                    "strict": {"synonyms": {"hosted_on": ["runs_on"]}, "replace": True},
                }
            }
        }
    )
    infra = PredicateNormalizer(settings.predicates.synonyms_for("infra"))
    strict = PredicateNormalizer(settings.predicates.synonyms_for("strict"))
    default = PredicateNormalizer(settings.predicates.synonyms_for("default"))
    assert infra.canonical("links-against") == infra.canonical("uses") == "depends_on"
    assert default.canonical("links-against") == "linksagainst"
    assert strict.canonical("runs on") == "hosted_on"
    assert strict.canonical("uses") == "uses"  # replaced: the default families are gone


# --------------------------------------------------------------------------- service level


def test_synonym_predicates_supersede_each_other(service: MemoryService) -> None:
    first = invoke(service, "store", fact("api-server", "uses", "tokio 1.36"))
    second = stored(service, fact("api-server", "requires", "tokio 1.38"))
    assert second.status == "superseded" and second.superseded == [first["id"]]
    assert (second.predicate_canonical, second.predicate_resolved_by) == ("depends_on", "synonym")
    assert current_objects(service, "api-server") == {"tokio 1.38"}


def test_fuzzy_predicate_against_same_subject_keeps_both_current(service: MemoryService) -> None:
    """A predicate that matches another only by Jaro-Winkler never overwrites its current fact
    (issue 11: "http_port" / "https_port" look as alike as "deployed_to" / "deploys-to"): it is
    a relation of its own and the answer names the look-alike."""
    first = invoke(service, "store", fact("web", "deployed_to", "staging cluster"))
    second = stored(service, fact("web", "deploys-to", "production cluster"))
    assert (second.predicate_canonical, second.predicate_resolved_by) == ("deploysto", "new")
    assert second.superseded == []
    [alias] = second.possible_alias
    assert alias.id == first["id"] and alias.other == "deployed_to"
    answer = present_store(second)  # what the agent reads: the look-alike, and how to decide
    assert "superseded" not in answer and answer["possible_alias"][0]["id"] == first["id"]
    assert "t_invalid" in answer["possible_alias"][0]["hint"]
    assert current_objects(service, "web") == {"staging cluster", "production cluster"}
    # The look-alike spelling is its own relation from now on: a new value replaces its own.
    again = invoke(service, "store", fact("web", "deploys_to", "batch cluster"))
    assert again["superseded"] == [second.id] and "possible_alias" not in again
    assert current_objects(service, "web") == {"staging cluster", "batch cluster"}


@pytest.mark.parametrize(
    ("first", "second"), [("depend on", "uses"), ("uses", "depend on"), ("writen in", "written in")]
)
def test_conflicts_do_not_depend_on_which_spelling_came_first(
    service: MemoryService, first: str, second: str
) -> None:
    old = invoke(service, "store", fact("api", first, "tokio 1.36", t_valid="2026-01-01"))
    new = invoke(service, "store", fact("api", second, "tokio 1.38", t_valid="2026-02-01"))
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    assert current_objects(service, "api") == {"tokio 1.38"}


def test_fuzzy_predicates_only_compare_within_the_subject(service: MemoryService) -> None:
    invoke(service, "store", fact("web", "deployed_to", "staging cluster"))
    other = stored(service, fact("worker", "deploys-to", "batch cluster"))
    assert (other.predicate_canonical, other.predicate_resolved_by) == ("deploysto", "new")
    assert other.status == "stored"
    assert current_objects(service, "web") == {"staging cluster"}


def test_unrelated_predicates_do_not_conflict(service: MemoryService) -> None:
    ids = [
        invoke(service, "store", fact("api-server", predicate, obj))["id"]
        for predicate, obj in [
            ("uses", "tokio"),
            ("license", "MIT"),
            ("owned_by", "platform team"),
            ("written_in", "Rust"),
        ]
    ]
    memories = service.meta.get_memories(ids)
    assert all(m.t_invalid is None for m in memories.values())
    assert service.meta.count_audit("default", "supersede") == 0


def test_per_namespace_synonym_override(make_service: ServiceFactory) -> None:
    service = make_service(
        predicates={"namespaces": {"infra": {"synonyms": {"depends_on": ["links_against"]}}}}
    )
    infra_old = invoke(service, "store", fact("libfoo", "uses", "openssl 1.1", namespace="infra"))
    infra_new = invoke(
        service, "store", fact("libfoo", "links against", "openssl 3.0", namespace="infra")
    )
    assert infra_new["superseded"] == [infra_old["id"]]
    # Outside "infra" the extra synonym does not exist: the two predicates stay distinct.
    invoke(service, "store", fact("libfoo", "uses", "openssl 1.1", namespace="apps"))
    apps_new = stored(service, fact("libfoo", "links against", "openssl 3.0", namespace="apps"))
    assert apps_new.status == "stored"
    assert apps_new.predicate_canonical == "linksagainst"
    assert current_objects(service, "libfoo", "apps") == {"openssl 1.1", "openssl 3.0"}


def test_top_level_synonyms_extend_the_built_in_families(tmp_path: Path) -> None:
    """A `[predicates.synonyms]` table adds to the spec's four families (it does not drop
    them); `replace = true` keeps only what it lists."""
    extend = tmp_path / "extend.toml"
    extend.write_text(
        '[predicates.synonyms]\nhosted_on = ["runs_on"]\ndepends_on = ["pulls"]\n',
        encoding="utf-8",
    )
    extended, _ = load_settings(cli={"data_dir": str(tmp_path)}, environ={}, config_path=extend)
    normalizer = PredicateNormalizer(extended.predicates.synonyms_for("default"))
    assert normalizer.canonical("runs on") == "hosted_on"
    assert normalizer.canonical("pulls") == "depends_on"
    assert normalizer.canonical("uses") == "depends_on"  # the built-in family is still there
    assert normalizer.canonical("written in") == "built_with"
    replace = tmp_path / "replace.toml"
    replace.write_text(
        '[predicates]\nreplace = true\n[predicates.synonyms]\nhosted_on = ["runs_on"]\n',
        encoding="utf-8",
    )
    replaced, _ = load_settings(cli={"data_dir": str(tmp_path)}, environ={}, config_path=replace)
    only = PredicateNormalizer(replaced.predicates.synonyms_for("default"))
    assert only.canonical("uses") == "uses" and only.canonical("runs on") == "hosted_on"

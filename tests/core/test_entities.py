"""Entity resolution (spec "Entity Storage" / "Entity Resolution").

Proves the layered pipeline normalise -> exact/alias -> Jaro-Winkler > 0.85 -> name-embedding
cosine > 0.92 -> new entity, on the resolver over a real SQLite store and the real MiniLM model
(thresholds strict at their boundaries; 0.80-0.92 recorded as an alias candidate), and through
MemoryService: fuzzy and embedding merges become aliases, candidates surface in reflect, entity
rows are per namespace, and recall's ``entities`` filter resolves "Tokio", "tokio" and any alias
to the same memories.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from rapidfuzz.distance import JaroWinkler
from tests.support.answers import conforms
from tests.support.typed import stored

from ferrex.core.matching.entities import EntityResolver, normalize_entity
from ferrex.core.matching.names import numbers_differ
from ferrex.core.service import MemoryService
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.server.calls import run_tool as invoke
from ferrex.store.sqlite import SqliteStore

NOW = datetime(2026, 4, 1, tzinfo=UTC)
# Found by exploring MiniLM cosines: lexically far (Jaro-Winkler <= 0.85) but the same thing.
EMBEDDING_PAIR = ("deployment pipeline", "pipeline for deployment")
# Related but not the same: cosine in [0.80, 0.92].
CANDIDATE_PAIR = ("car", "automobile")
UNRELATED_PAIR = ("mysql", "mariadb")


def cosine(embedder: FastEmbedEmbedder, a: str, b: str) -> float:
    va, vb = embedder.embed_documents([a, b])
    return float(np.dot(va, vb))


@pytest.fixture
def meta(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "entities.db")
    yield store
    store.close()


def resolver(meta: SqliteStore, embedder: FastEmbedEmbedder, **thresholds: float) -> EntityResolver:
    return EntityResolver(meta, embedder.embed_documents, **thresholds)


def memory_ids(response: dict) -> set[str]:
    return {r["id"] for r in response["results"]}


# --------------------------------------------------------------------------- the pairs used


def test_exploration_pairs_sit_where_the_tests_need_them(embedder: FastEmbedEmbedder) -> None:
    a, b = EMBEDDING_PAIR
    assert JaroWinkler.similarity(a, b) <= 0.85 < 0.92 < cosine(embedder, a, b)
    a, b = CANDIDATE_PAIR
    assert JaroWinkler.similarity(a, b) <= 0.85
    assert 0.80 <= cosine(embedder, a, b) <= 0.92
    a, b = UNRELATED_PAIR
    assert JaroWinkler.similarity(a, b) <= 0.85 and cosine(embedder, a, b) < 0.80


# --------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Tokio", "tokio"),
        (" api server ", "api server"),
        ("API-Server", "api server"),
        ("api_server", "api server"),
        ("  connection   Pool ", "connection pool"),
    ],
)
def test_normalization(raw: str, expected: str) -> None:
    assert normalize_entity(raw) == expected


def test_numbers_distinguish_names() -> None:
    assert numbers_differ("python2", "python3")
    assert numbers_differ("tokio 1.36", "tokio 1.38")
    assert not numbers_differ("postgres", "postgresql")


# --------------------------------------------------------------------------- resolver stages


def test_exact_after_normalization(meta: SqliteStore, embedder: FastEmbedEmbedder) -> None:
    entities = resolver(meta, embedder)
    created = entities.resolve("default", "Tokio", create=True, at=NOW)
    again = entities.resolve("default", "  tokio ", create=True, at=NOW)
    assert created.method == "new"
    assert (again.entity_id, again.method) == (created.entity_id, "exact")
    assert meta.count_entities("default") == 1


def test_fuzzy_postgres_postgresql_merges_as_alias(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    entities = resolver(meta, embedder)
    postgres = entities.resolve("default", "postgres", create=True, at=NOW)
    merged = entities.resolve("default", "PostgreSQL", create=True, at=NOW)
    assert merged.method == "fuzzy" and merged.entity_id == postgres.entity_id
    assert merged.score == pytest.approx(JaroWinkler.similarity("postgres", "postgresql"))
    assert merged.score > 0.85
    aliases = meta.aliases_of([postgres.entity_id])[postgres.entity_id]
    assert [(a["alias"], a["method"]) for a in aliases] == [("postgresql", "fuzzy")]
    assert meta.count_entities("default") == 1


def test_alias_lookup_returns_the_canonical_entity(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    entities = resolver(meta, embedder)
    postgres = entities.resolve("default", "postgres", create=True, at=NOW)
    entities.resolve("default", "postgresql", create=True, at=NOW)
    lookup = entities.resolve("default", "POSTGRESQL", create=False, at=NOW)
    assert (lookup.entity_id, lookup.method) == (postgres.entity_id, "exact")
    row = meta.entity_by_name("default", "postgresql")
    assert row is not None and row.display_name == "postgres"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("service-a", "service-b"),
        ("Java", "JavaScript"),
        ("us-east", "us-west"),
        ("team red", "team blue"),
    ],
)
def test_look_alike_names_of_different_things_stay_apart(
    meta: SqliteStore, embedder: FastEmbedEmbedder, first: str, second: str
) -> None:
    """Jaro-Winkler rates each pair above 0.85, but a swapped word or a compound names another
    thing: no fuzzy merge (the embedding stage still decides, with its own threshold)."""
    assert JaroWinkler.similarity(normalize_entity(first), normalize_entity(second)) > 0.85
    entities = resolver(meta, embedder)
    a = entities.resolve("default", first, create=True, at=NOW)
    b = entities.resolve("default", second, create=True, at=NOW)
    assert b.method != "fuzzy"
    assert b.entity_id != a.entity_id
    assert meta.count_entities("default") == 2


def test_a_look_alike_subject_does_not_supersede_another_subjects_fact(
    service: MemoryService,
) -> None:
    """The over-merge failure in full: service-b's version must not invalidate service-a's."""
    first = stored(
        service,
        {"subject": "service-a", "predicate": "version", "object": "stable channel 4"},
    )
    second = stored(
        service,
        {"subject": "service-b", "predicate": "version", "object": "beta channel 4"},
    )
    assert second.status == "stored", second
    assert second.entities[0].entity_id != first.entities[0].entity_id
    current = invoke(
        service, "recall", {"query": "version channel", "types": ["semantic"], "limit": 10}
    )
    assert {first.id, second.id} <= {r["id"] for r in current["results"]}


@pytest.mark.parametrize(
    ("first", "second"), [("inbound queue", "outbound queue"), ("left sidebar", "right sidebar")]
)
def test_a_swapped_word_never_merges_through_the_embedding_stage(
    service: MemoryService, embedder: FastEmbedEmbedder, first: str, second: str
) -> None:
    """The embeddings of these pairs are above the 0.92 merge threshold, but one word is kept and
    the other swapped: two things, so a fact about one never supersedes the other's."""
    assert cosine(embedder, first, second) > 0.92
    a = stored(service, {"subject": first, "predicate": "max size", "object": "100 messages"})
    b = stored(service, {"subject": second, "predicate": "max size", "object": "5000 messages"})
    assert b.status == "stored", b
    assert b.entities[0].resolved_by == "new"
    filtered = invoke(service, "recall", {"query": "max size", "entities": [first], "limit": 10})
    assert [r["id"] for r in filtered["results"]] == [a.id]


def test_fuzzy_stage_also_matches_known_aliases(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    """Spec: Jaro-Winkler "against existing entity names and aliases". A misspelt alias
    resolves to the canonical entity even though it is not close to the canonical name."""
    entities = resolver(meta, embedder)
    k8s = entities.resolve("default", "k8s", create=True, at=NOW)
    meta.add_alias("default", "kubernetes cluster", k8s.entity_id, "manual", 1.0, NOW)
    entities.invalidate("default")
    assert JaroWinkler.similarity("kubernetes clustr", "k8s") < 0.85
    typo = entities.resolve("default", "Kubernetes clustr", create=False, at=NOW)
    assert (typo.entity_id, typo.method) == (k8s.entity_id, "fuzzy")


def test_fuzzy_threshold_is_strict(meta: SqliteStore, embedder: FastEmbedEmbedder) -> None:
    score = JaroWinkler.similarity("postgres", "postgresql")
    entities = resolver(meta, embedder, fuzzy_threshold=score, embedding_threshold=0.999)
    postgres = entities.resolve("default", "postgres", create=True, at=NOW)
    other = entities.resolve("default", "postgresql", create=True, at=NOW)
    assert other.method == "new" and other.entity_id != postgres.entity_id


def test_embedding_similarity_above_092_merges_as_alias(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    first, second = EMBEDDING_PAIR
    entities = resolver(meta, embedder)
    canonical = entities.resolve("default", first, create=True, at=NOW)
    merged = entities.resolve("default", second, create=True, at=NOW)
    assert merged.method == "embedding" and merged.entity_id == canonical.entity_id
    assert merged.score == pytest.approx(cosine(embedder, first, second), abs=1e-4)
    aliases = meta.aliases_of([canonical.entity_id])[canonical.entity_id]
    assert [(a["alias"], a["method"]) for a in aliases] == [(second, "embedding")]
    assert aliases[0]["score"] > 0.92
    # The alias now resolves exactly, without the model.
    assert entities.resolve("default", second, create=False, at=NOW).method == "exact"


def test_embedding_threshold_is_strict(meta: SqliteStore, embedder: FastEmbedEmbedder) -> None:
    first, second = EMBEDDING_PAIR
    score = cosine(embedder, first, second)
    entities = resolver(meta, embedder, embedding_threshold=score + 1e-4)
    canonical = entities.resolve("default", first, create=True, at=NOW)
    other = entities.resolve("default", second, create=True, at=NOW)
    assert other.method == "new" and other.entity_id != canonical.entity_id
    # Just under the merge threshold but above 0.80: recorded as a candidate instead.
    assert other.candidate is not None and other.candidate[0] == canonical.entity_id


def test_between_080_and_092_is_an_alias_candidate(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    first, second = CANDIDATE_PAIR
    entities = resolver(meta, embedder)
    canonical = entities.resolve("default", first, create=True, at=NOW)
    other = entities.resolve("default", second, create=True, at=NOW)
    assert other.method == "new" and other.entity_id != canonical.entity_id
    candidates = meta.alias_candidates("default", 10)
    assert [(c["name"], c["entity_id"]) for c in candidates] == [(second, canonical.entity_id)]
    assert 0.80 <= candidates[0]["score"] <= 0.92


def test_below_threshold_creates_a_new_entity(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    first, second = UNRELATED_PAIR
    entities = resolver(meta, embedder)
    a = entities.resolve("default", first, create=True, at=NOW)
    b = entities.resolve("default", second, create=True, at=NOW)
    assert b.method == "new" and a.entity_id != b.entity_id
    assert meta.alias_candidates("default", 10) == []
    assert meta.count_entities("default") == 2


def test_different_numbers_never_merge(meta: SqliteStore, embedder: FastEmbedEmbedder) -> None:
    entities = resolver(meta, embedder)
    two = entities.resolve("default", "python2", create=True, at=NOW)
    three = entities.resolve("default", "python3", create=True, at=NOW)
    assert JaroWinkler.similarity("python2", "python3") > 0.85
    assert three.method == "new" and three.entity_id != two.entity_id


def test_the_resolvers_tables_stay_what_a_reload_gives(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    """New entities and aliases go into the loaded tables instead of reloading them for every
    name (which made a store's cost grow with the namespace); the tables must equal a reload,
    order included (fuzzy ties resolve by position)."""
    r = resolver(meta, embedder)
    names = ["postgres", "redis", "postgresql", "zebra queue", "apple pie", "redis cluster"]
    names += [EMBEDDING_PAIR[0], EMBEDDING_PAIR[1], "kafka", "kafkaa", "aardvark"]
    methods = []
    for name in names:
        methods.append(r.resolve("ns", name, create=True, at=NOW).method)
        fresh = resolver(meta, embedder)
        assert r._name_table("ns") == fresh._name_table("ns"), name
        ids, matrix = r._vector_table("ns")
        fresh_ids, fresh_matrix = fresh._vector_table("ns")
        assert ids == fresh_ids, name
        assert matrix is not None and fresh_matrix is not None
        assert np.array_equal(matrix, fresh_matrix), name
    # Every path was taken: new entities, fuzzy aliases, an embedding alias.
    assert {"new", "fuzzy", "embedding"} <= set(methods)


def test_the_name_embedding_table_grows_and_reloads_when_out_of_order(
    meta: SqliteStore,
) -> None:
    from ferrex.core.matching.entities import _VectorTable

    rows = np.eye(4, dtype=np.float32)
    table = _VectorTable([1, 2, 3, 4], rows)
    held = table.matrix  # a reader's view, kept across the growth
    for entity_id in range(5, 30):  # past the buffer's size, several times
        vector = np.full(4, entity_id, dtype=np.float32)
        assert table.append(entity_id, vector)
    matrix = table.matrix
    assert matrix is not None and matrix.shape == (29, 4) and table.ids == list(range(1, 30))
    assert np.array_equal(matrix[:4], rows) and np.array_equal(matrix[28], np.full(4, 29))
    assert held is not None and np.array_equal(held, rows)  # unchanged for its reader
    assert not table.append(7, np.zeros(4, dtype=np.float32))  # out of order: reload instead
    assert not table.append(30, np.zeros(3, dtype=np.float32))  # another dimension: reload


def test_a_table_load_never_waits_for_the_store_while_holding_the_resolver(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    """A lookup that loads a table waits for the store's lock when a write transaction holds
    it; that transaction's own resolution must not then wait for the lookup (a recall naming
    entities beside a store used to be able to deadlock here)."""
    import threading
    import time

    r = resolver(meta, embedder)
    r.resolve("ns", "postgres", create=True, at=NOW)
    r.invalidate()
    results: dict[str, object] = {}
    in_tx = threading.Event()

    def writer() -> None:
        with meta.transaction():
            in_tx.set()
            time.sleep(0.3)  # the reader is now waiting for the store
            results["writer"] = r.resolve("ns", "postgresql", create=True, at=NOW).method

    def reader() -> None:
        in_tx.wait()
        results["reader"] = r.fuzzy_match("ns", "postgre")

    threads = [threading.Thread(target=f, daemon=True) for f in (writer, reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads), "deadlock"
    assert results["writer"] == "fuzzy" and results["reader"] is not None


def test_lookup_without_create_writes_nothing(
    meta: SqliteStore, embedder: FastEmbedEmbedder
) -> None:
    entities = resolver(meta, embedder)
    entities.resolve("default", "postgres", create=True, at=NOW)
    fuzzy = entities.resolve("default", "postgresql", create=False, at=NOW)
    missing = entities.resolve("default", "kafka", create=False, at=NOW)
    assert fuzzy.method == "fuzzy" and missing.entity_id is None
    assert meta.count_entities("default") == 1
    assert meta.entity_by_name("default", "postgresql") is None


# --------------------------------------------------------------------------- service level


def test_store_merges_variants_and_recall_filters_through_aliases(service: MemoryService) -> None:
    capital = stored(
        service,
        {"content": "switched the connection pool to a Tokio semaphore", "entities": ["Tokio"]},
    )
    runtime = stored(
        service,
        {"content": "upgraded the async executor for the api", "entities": ["tokio runtime"]},
    )
    invoke(service, "store", {"content": "tokio mentioned but not tagged with the entity at all"})
    assert capital.entities[0].resolved_by == "new"
    assert runtime.entities[0].resolved_by == "fuzzy"
    assert runtime.entities[0].entity_id == capital.entities[0].entity_id
    expected = {capital.id, runtime.id}
    for name in ("tokio", "Tokio", "TOKIO runtime", " tokio_runtime "):
        found = invoke(service, "recall", {"query": "tokio", "entities": [name], "limit": 10})
        assert memory_ids(found) == expected, name
    result = next(
        r
        for r in invoke(
            service, "recall", {"query": "executor", "entities": ["tokio"], "explain": True}
        )["results"]
        if r["id"] == runtime.id
    )
    assert result["explain"]["entities"] == ["Tokio"]  # the canonical display name


def test_embedding_alias_through_the_service(service: MemoryService) -> None:
    first, second = EMBEDDING_PAIR
    a = stored(
        service,
        {"content": "the deployment pipeline runs on every merge", "entities": [first]},
    )
    b = stored(service, {"content": "nightly job rebuilds caches", "entities": [second]})
    assert (b.entities[0].name, b.entities[0].entity_id, b.entities[0].resolved_by) == (
        second,
        a.entities[0].entity_id,
        "embedding",
    )
    found = invoke(service, "recall", {"query": "pipeline", "entities": [second], "limit": 10})
    assert memory_ids(found) == {a.id, b.id}


def test_alias_candidates_surface_in_reflect(service: MemoryService) -> None:
    first, second = CANDIDATE_PAIR
    invoke(
        service, "store", {"content": "the car needs new tyres before winter", "entities": [first]}
    )
    b = stored(
        service,
        {"content": "the automobile insurance renews in May", "entities": [second]},
    )
    assert b.entities[0].resolved_by == "new"
    candidates = conforms("reflect", invoke(service, "reflect", {}))["alias_candidates"]
    assert [(c["name"], c["entity"]) for c in candidates] == [(second, first)]
    assert 0.80 <= candidates[0]["score"] <= 0.92
    # A candidate is not an alias: filtering by one does not return the other's memory.
    found = invoke(
        service, "recall", {"query": "insurance tyres", "entities": [second], "limit": 10}
    )
    assert memory_ids(found) == {b.id}


def test_entity_rows_are_per_namespace(service: MemoryService) -> None:
    a = stored(service, {"content": "tokio in project a", "entities": ["tokio"], "namespace": "a"})
    b = stored(service, {"content": "tokio in project b", "entities": ["Tokio"], "namespace": "b"})
    invoke(
        service,
        "store",
        {"content": "postgres in project a", "entities": ["postgres"], "namespace": "a"},
    )
    invoke(
        service,
        "store",
        {"content": "postgresql alias in a", "entities": ["postgresql"], "namespace": "a"},
    )
    assert a.entities[0].entity_id != b.entities[0].entity_id
    assert b.entities[0].resolved_by == "new"
    assert service.meta.count_entities("a") == 2
    assert service.meta.count_entities("b") == 1
    assert service.meta.entity_by_name("b", "postgresql") is None
    found = invoke(service, "recall", {"query": "tokio", "entities": ["tokio"], "namespace": "b"})
    assert memory_ids(found) == {b.id}


def test_unknown_entity_filter_returns_nothing_and_creates_nothing(
    service: MemoryService,
) -> None:
    invoke(service, "store", {"content": "kafka consumer lag alert fired", "entities": ["kafka"]})
    before = service.meta.count_entities("default")
    found = invoke(service, "recall", {"query": "consumer lag", "entities": ["zookeeper"]})
    assert found["results"] == [] and found["unresolved_entities"] == ["zookeeper"]
    assert service.meta.count_entities("default") == before

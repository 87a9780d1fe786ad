"""The collection ferrex asks a Qdrant server for (issue 39): the late-interaction channel, cluster
settings (shards, replicas, write consistency), on-disk storage, the consistency of every read
and write, what happens on a server that lacks multivectors, and the channel carried by
``rebuild-index`` / ``migrate-index`` both ways.

No Qdrant server installs here. The request ferrex builds is tested as built, and applied to
qdrant-client's local mode (which accepts the cluster settings and does not report them back);
an old server is played by a local-mode client that reports an old version or refuses
multivectors as such a server does. The same collection is checked on a real server when
``FERREX_TEST_QDRANT_URL`` names one or a ``qdrant`` binary is on PATH (skipped visibly
otherwise).
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from qdrant_client import QdrantClient, models
from tests.support.harness import ServiceFactory
from tests.support.parity import order_difference

from ferrex.config import ConfigError, load_settings
from ferrex.config.engine import QdrantConfig
from ferrex.core.ops.rebuild import rebuild
from ferrex.server.calls import run_tool, store_many
from ferrex.store.edge import EdgeIndex
from ferrex.store.qdrant import COLLECTION, QdrantIndex
from ferrex.store.qdrant_collection import (
    TOKENS,
    ServerFeatures,
    collection_request,
    dense_to_disk,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOTES = [
    "the api-server switched to tokio::sync::Semaphore to fix a pool deadlock",
    "billing-service invoices were delayed by a stuck Stripe webhook (INC-2231)",
    "the dashboard team replaced Redux with Zustand for state management",
    "Caroline went to the LGBTQ support group on Saturday and felt welcome",
    "the nightly backup of the ledger database finished in 41 minutes",
]
QUESTIONS = ["why were invoices late", "state management library", "which support group"]


# --------------------------------------------------------------------------- the request


def test_the_request_for_a_cluster_names_shards_replicas_consistency_and_disk() -> None:
    config = QdrantConfig(shard_number=6, replication_factor=3, on_disk_vectors=True)
    request = collection_request(384, late_interaction=True, config=config, cluster=True)
    assert request["shard_number"] == 6 and request["replication_factor"] == 3
    assert request["write_consistency_factor"] == 2  # unset: a majority of 3
    assert request["on_disk_payload"] is True
    dense, tokens = request["vectors_config"]["dense"], request["vectors_config"][TOKENS]
    assert dense.size == 384 and dense.distance == models.Distance.COSINE and dense.on_disk
    assert tokens.multivector_config.comparator == models.MultiVectorComparator.MAX_SIM
    assert tokens.datatype == models.Datatype.FLOAT16 and tokens.on_disk
    assert tokens.hnsw_config.m == 0  # rescored over known candidates only: no graph
    assert request["sparse_vectors_config"]["bm25"].modifier == models.Modifier.IDF
    explicit = QdrantConfig(replication_factor=3, write_consistency_factor=3)
    assert (
        collection_request(8, late_interaction=False, config=explicit, cluster=True)[
            "write_consistency_factor"
        ]
        == 3
    )


def test_dense_vectors_on_disk_keep_an_8_bit_copy_in_memory() -> None:
    request = collection_request(
        384, late_interaction=True, config=QdrantConfig(on_disk_vectors=True), cluster=False
    )
    dense = request["vectors_config"]["dense"]
    assert dense.on_disk is True
    assert isinstance(dense.quantization_config, models.ScalarQuantization)
    scalar = dense.quantization_config.scalar
    assert scalar.type == models.ScalarType.INT8 and scalar.always_ram is True
    plain = collection_request(384, late_interaction=True, config=QdrantConfig(), cluster=False)
    assert plain["vectors_config"]["dense"].quantization_config is None


def test_an_existing_collection_moves_its_dense_vectors_to_disk_past_the_threshold(
    make_service: ServiceFactory,
) -> None:
    client = QdrantClient(":memory:")
    config = QdrantConfig(on_disk_vectors_from=3)
    index = QdrantIndex(client, mode="local", config=config)
    service = make_service(clock=lambda: NOW, index=index)
    store_many(service, [{"content": n} for n in NOTES[:2]])
    info = client.get_collection(COLLECTION)
    assert dense_to_disk(info, config) is None  # 2 points: below the threshold
    store_many(service, [{"content": n} for n in NOTES[2:]])
    info = client.get_collection(COLLECTION)
    update = dense_to_disk(info, config)
    assert update is not None
    diff = update["vectors_config"]["dense"]
    assert diff.on_disk is True and isinstance(diff.quantization_config, models.ScalarQuantization)
    assert dense_to_disk(info, QdrantConfig(on_disk_vectors_from=0)) is None  # turned off
    # Local mode accepts the request (checking the vector's name) and has nothing to change.
    assert client.update_collection(COLLECTION, **update) is False
    index.ensure_collection(384, late_interaction=True)  # the open that asks for it
    answer = run_tool(service, "recall", {"query": QUESTIONS[0]})
    assert answer["results"]


def test_the_sidecar_and_the_defaults_ask_for_no_cluster_settings() -> None:
    config = QdrantConfig(shard_number=4, replication_factor=2)
    request = collection_request(384, late_interaction=False, config=config, cluster=False)
    assert not {"shard_number", "replication_factor", "write_consistency_factor"} & set(request)
    assert set(request["vectors_config"]) == {"dense"}
    assert request["vectors_config"]["dense"].on_disk is None  # the server's default: RAM
    plain = collection_request(384, late_interaction=True, config=QdrantConfig(), cluster=True)
    assert not {"shard_number", "replication_factor", "write_consistency_factor"} & set(plain)


def test_a_write_consistency_no_replica_set_can_confirm_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"cannot exceed qdrant\.replication_factor"):
        load_settings(
            cli={"qdrant.replication_factor": 2, "qdrant.write_consistency_factor": 3},
            environ={},
        )
    with pytest.raises(ConfigError, match="qdrant"):
        load_settings(cli={"qdrant.shard_number": 0}, environ={})
    settings, _ = load_settings(
        cli={},
        environ={"FERREX_QDRANT__REPLICATION_FACTOR": "3", "FERREX_QDRANT__READ_CONSISTENCY": "2"},
    )
    assert settings.qdrant.replication_factor == 3 and settings.qdrant.read_consistency == 2


class RecordingClient(QdrantClient):
    """qdrant-client's local mode, recording the consistency and ordering of each call."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.calls: list[tuple[str, Any]] = []

    def _record(self, name: str, kwargs: dict[str, Any], key: str) -> None:
        self.calls.append((name, kwargs.get(key, "missing")))

    def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        self.calls.append(("create_collection", kwargs))
        return bool(super().create_collection(collection_name, **kwargs))

    def upsert(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("upsert", kwargs, "ordering")
        return super().upsert(collection_name, **kwargs)

    def delete(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("delete", kwargs, "ordering")
        return super().delete(collection_name, **kwargs)

    def set_payload(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("set_payload", kwargs, "ordering")
        return super().set_payload(collection_name, **kwargs)

    def query_batch_points(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("query_batch_points", kwargs, "consistency")
        return super().query_batch_points(collection_name, **kwargs)

    def query_points(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("query_points", kwargs, "consistency")
        return super().query_points(collection_name, **kwargs)

    def retrieve(self, collection_name: str, ids: Any, **kwargs: Any) -> Any:
        self._record("retrieve", kwargs, "consistency")
        return super().retrieve(collection_name, ids, **kwargs)

    def scroll(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("scroll", kwargs, "consistency")
        return super().scroll(collection_name, **kwargs)


def test_every_read_and_write_keeps_read_after_write_on_a_replicated_collection(
    make_service: ServiceFactory,
) -> None:
    client = RecordingClient()
    config = QdrantConfig(shard_number=2, replication_factor=3)
    index = QdrantIndex(client, mode="external", config=config)
    service = make_service(clock=lambda: NOW, index=index)
    ids = [s["id"] for s in store_many(service, [{"content": n} for n in NOTES])]
    fact = run_tool(service, "store", {"subject": "api-server", "predicate": "uses", "object": "1"})
    run_tool(service, "store", {"subject": "api-server", "predicate": "uses", "object": "2"})
    assert ids[1] in [
        r["id"] for r in run_tool(service, "recall", {"query": QUESTIONS[0]})["results"]
    ]
    run_tool(service, "forget", {"ids": [fact["id"], ids[0]]})
    run_tool(service, "stats", {"detailed": True})
    created = [kwargs for name, kwargs in client.calls if name == "create_collection"]
    assert len(created) == 1
    assert created[0]["shard_number"] == 2 and created[0]["replication_factor"] == 3
    assert created[0]["write_consistency_factor"] == 2 and TOKENS in created[0]["vectors_config"]
    calls = [(name, value) for name, value in client.calls if name != "create_collection"]
    writes = {value for name, value in calls if name in ("upsert", "delete", "set_payload")}
    reads = {value for name, value in calls if name not in ("upsert", "delete", "set_payload")}
    assert {name for name, _ in calls} >= {"upsert", "delete", "set_payload", "query_batch_points"}
    assert writes == {models.WriteOrdering.STRONG}
    assert reads == {models.ReadConsistencyType.MAJORITY}


# --------------------------------------------------------------------------- a server's features


class OldServer(QdrantClient):
    """Local mode playing a Qdrant server older than multivectors: it reports its version, or
    (``refuse``) reports none and refuses a multivector collection as such a server does."""

    def __init__(self, version: str | None, refuse: bool = False) -> None:
        super().__init__(":memory:")
        self.version, self.refuse = version, refuse

    def info(self) -> Any:
        if self.version is None:
            raise RuntimeError("404 Not Found")
        return models.VersionInfo(title="qdrant", version=self.version)

    def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        vectors = kwargs.get("vectors_config") or {}
        if self.refuse and any(v.multivector_config for v in vectors.values()):
            raise ValueError(
                'Unexpected Response: 400 (Bad Request) unknown field "multivector_config"'
            )
        return bool(super().create_collection(collection_name, **kwargs))


def test_multivectors_are_known_from_qdrant_1_10() -> None:
    for version, has in (("1.9.7", False), ("1.10.0", True), ("v1.10", True), ("2.0.1", True)):
        assert ServerFeatures(version).multivectors is has, version
    assert ServerFeatures(None).multivectors  # a server that does not say: asked, said if refused
    features = ServerFeatures("1.9.7")
    assert features.lacks("x") and not features.lacks("x") and features.limitations == ["x"]


class NoScopedIdf(QdrantClient):
    """Local mode playing a server that refuses BM25 IDF scoped to a filter (the namespace)."""

    def __init__(self) -> None:
        super().__init__(":memory:")

    def query_batch_points(self, collection_name: str, **kwargs: Any) -> Any:
        if any(r.params is not None and r.params.idf is not None for r in kwargs["requests"]):
            raise ValueError('Unexpected Response: 400 (Bad Request) unknown field "idf"')
        return super().query_batch_points(collection_name, **kwargs)


def test_a_server_without_namespace_idf_is_said_once_and_recall_falls_back(
    make_service: ServiceFactory,
) -> None:
    index = QdrantIndex(NoScopedIdf(), mode="external")
    service = make_service(clock=lambda: NOW, index=index)
    ids = [s["id"] for s in store_many(service, [{"content": n} for n in NOTES])]
    with structlog.testing.capture_logs() as logs:
        for question in QUESTIONS:
            run_tool(service, "recall", {"query": question})
        answer = run_tool(service, "recall", {"query": "INC-2231 Stripe webhook"})
    assert answer["results"][0]["id"] == ids[1]
    said = [entry["limitation"] for entry in logs if entry["event"] == "qdrant server limitation"]
    assert len(said) == 1 and "namespace-scoped BM25 IDF" in said[0], logs
    stats = run_tool(service, "stats", {"detailed": True})["index"]
    assert stats["limitations"] == said and stats["late_interaction"]["in_index"] is True


@pytest.mark.parametrize("server", ["version 1.9.2", "refuses multivectors"])
def test_a_server_without_multivectors_is_said_once_and_recall_falls_back(
    make_service: ServiceFactory, server: str
) -> None:
    client = OldServer("1.9.2") if server.startswith("version") else OldServer(None, refuse=True)
    index = QdrantIndex(client, mode="external")
    service = make_service(clock=lambda: NOW, index=index)
    with structlog.testing.capture_logs() as logs:
        ids = [s["id"] for s in store_many(service, [{"content": n} for n in NOTES])]
        answer = run_tool(service, "recall", {"query": QUESTIONS[0], "explain": True})
        run_tool(service, "recall", {"query": QUESTIONS[1]})
    said = [entry for entry in logs if entry["event"] == "qdrant server limitation"]
    assert len(said) == 1 and "multivectors" in said[0]["limitation"], logs
    assert (
        not index.late_interaction
        and TOKENS not in client.get_collection(COLLECTION).config.params.vectors
    )  # type: ignore[operator]
    assert answer["results"][0]["id"] == ids[1]
    assert "late" not in answer["results"][0]["explain"]  # the two-channel relevance
    stats = run_tool(service, "stats", {"detailed": True})
    assert any("multivectors" in s for s in stats["index"]["limitations"]), stats["index"]
    late = stats["index"]["late_interaction"]
    assert late["in_index"] is False and "needs Qdrant >= 1.10" in late["hint"]
    if server.startswith("version"):
        assert "Qdrant 1.9.2 has no multivectors" in late["hint"]
        # The next start on the same collection says it again (once), not "rebuild-index".
        restarted = QdrantIndex(client, mode="external")
        with structlog.testing.capture_logs() as logs:
            restarted.ensure_collection(384, late_interaction=True)
            restarted.ensure_collection(384, late_interaction=True)
        assert [e["event"] for e in logs] == ["qdrant server limitation"]
        assert "multivectors" in restarted.stats().details["limitations"][0]


def test_stats_name_the_servers_token_datatype(make_service: ServiceFactory) -> None:
    service = make_service(clock=lambda: NOW, index=QdrantIndex(QdrantClient(":memory:")))
    run_tool(service, "store", {"content": NOTES[0]})
    late = run_tool(service, "stats", {"detailed": True})["index"]["late_interaction"]
    assert late == {"enabled": True, "in_index": True, "datatype": "float16"}
    assert "limitations" not in run_tool(service, "stats", {"detailed": True})["index"]


# --------------------------------------------------------------------------- rebuild / migrate


def _answers(service: Any) -> list[list[tuple[str, float]]]:
    out = []
    for question in QUESTIONS:
        answer = run_tool(service, "recall", {"query": question, "limit": 5, "explain": True})
        assert all(isinstance(r["explain"].get("late"), float) for r in answer["results"])
        out.append([(r["id"], r["score"]) for r in answer["results"]])
    return out


def test_migrating_carries_the_channel_both_ways(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    """What ``migrate-index`` does (rebuild the target from SQLite, ``core.maintenance.rebuild``):
    embedded -> a Qdrant server -> embedded, the channel in each, the same answers."""
    data_dir = tmp_path / "store"
    embedded = make_service(data_dir, clock=lambda: NOW)
    store_many(embedded, [{"content": n} for n in NOTES])
    server = make_service(data_dir, clock=lambda: NOW, index=QdrantIndex(QdrantClient(":memory:")))
    assert rebuild(server)["memories"] == len(NOTES)
    assert server.index.late_interaction
    back = make_service(data_dir, clock=lambda: NOW, index=EdgeIndex(tmp_path / "index-back"))
    rebuild(back)
    assert back.index.late_interaction
    first = _answers(embedded)
    for other in (_answers(server), _answers(back)):
        for a, b in zip(first, other, strict=True):
            assert order_difference(a, b) is None, (a, b)


def test_rebuild_index_adds_the_channel_to_a_collection_made_without_it(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    client = QdrantClient(":memory:")
    data_dir = tmp_path / "store"
    before = make_service(
        data_dir,
        clock=lambda: NOW,
        index=QdrantIndex(client),
        **{"retrieval.late_interaction.enabled": False},
    )
    store_many(before, [{"content": n} for n in NOTES])
    assert not before.index.late_interaction  # as every server collection was before issue 39
    now = make_service(data_dir, clock=lambda: NOW, index=QdrantIndex(client))
    late = run_tool(now, "stats", {"detailed": True})["index"]["late_interaction"]
    assert late["in_index"] is False and "`ferrex rebuild-index` adds it" in late["hint"]
    rebuild(now)
    assert now.index.late_interaction and QdrantIndex(client).late_interaction
    assert len(_answers(now)) == len(QUESTIONS)


# --------------------------------------------------------------------------- a real server


@pytest.fixture
def real_server(tmp_path: Path) -> Any:
    url = os.environ.get("FERREX_TEST_QDRANT_URL")
    if url:
        client = QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY"), timeout=10)
        yield client
        client.close()
        return
    found = shutil.which("qdrant")
    if found is None:
        pytest.skip(
            "no Qdrant server (FERREX_TEST_QDRANT_URL unset, no qdrant binary on PATH): the "
            "collection request was tested as built and on qdrant-client's local mode only"
        )
    from ferrex.runtime.sidecar import Binary, Sidecar, connect_client

    data_dir = tmp_path / "sidecar"
    data_dir.mkdir(mode=0o700)
    sidecar = Sidecar(data_dir, Binary(Path(found), "PATH"))
    client = connect_client(sidecar.ensure_running())
    yield client
    client.close()
    sidecar.stop()


def test_a_real_server_creates_the_collection_ferrex_asks_for(
    real_server: QdrantClient, make_service: ServiceFactory
) -> None:
    collection = f"ferrex_test_{os.getpid()}"
    config = QdrantConfig(shard_number=2, on_disk_vectors=True)
    index = QdrantIndex(real_server, collection, mode="external", config=config)
    index.reset(384, late_interaction=True)
    try:
        params = real_server.get_collection(collection).config.params
        assert params.shard_number == 2 and params.on_disk_payload is True
        vectors = params.vectors
        assert isinstance(vectors, dict) and vectors["dense"].on_disk is True
        tokens = vectors[TOKENS]
        assert tokens.multivector_config is not None and tokens.datatype == models.Datatype.FLOAT16
        assert index.late_interaction and index.features.limitations == []
        service = make_service(clock=lambda: NOW, index=index)
        ids = [s["id"] for s in store_many(service, [{"content": n} for n in NOTES])]
        answer = run_tool(service, "recall", {"query": QUESTIONS[0], "explain": True})
        assert answer["results"][0]["id"] == ids[1]
        assert isinstance(answer["results"][0]["explain"]["late"], float)
    finally:
        real_server.delete_collection(collection)

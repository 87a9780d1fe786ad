"""The collection ferrex asks a Qdrant server for, and what the server can do.

``collection_request`` is the whole ``create_collection`` request (tested as built: qdrant-client's
local mode accepts the cluster settings but does not report them back). ``ServerFeatures`` says
what the server lacks, once, so the adapter can fall back and say why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from qdrant_client import models

from ferrex.config.engine import QdrantConfig

DENSE = "dense"
SPARSE = "bm25"
TOKENS = "tokens"  # the late-interaction multivector (MaxSim), where the collection has it

# The token vectors' storage on a server: 16-bit floats (2 bytes a dimension; a unit vector's
# components to ~5e-4, MaxSim within ~1e-3 of float32). The embedded engine stores them 8-bit
# (TurboQuant, within ~0.003). The adapter rounds what it sends through float16, so qdrant-client's
# local mode (which computes in float32 whatever the datatype) scores what a server stores.
TOKENS_DATATYPE = models.Datatype.FLOAT16
MULTIVECTOR_SINCE = (1, 10)  # Qdrant's first release with multivectors and MaxSim


@dataclass
class ServerFeatures:
    """What one Qdrant server can do (its version, when it says), and what it lacks."""

    version: str | None = None
    limitations: list[str] = field(default_factory=list)

    @property
    def multivectors(self) -> bool:
        parsed = parse_version(self.version)
        return parsed is None or parsed >= MULTIVECTOR_SINCE

    def lacks(self, what: str) -> bool:
        """Record a limitation; True the first time (the caller says it once)."""
        if what in self.limitations:
            return False
        self.limitations.append(what)
        return True


def parse_version(text: str | None) -> tuple[int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)", text or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def no_multivectors(version: str | None, error: str | None = None) -> str:
    why = f"Qdrant {version}" if version else "this Qdrant server"
    detail = f" ({error})" if error else ""
    return (
        f"{why} has no multivectors{detail}: the late-interaction channel needs Qdrant >= "
        f"{MULTIVECTOR_SINCE[0]}.{MULTIVECTOR_SINCE[1]}; recall uses the two-channel relevance"
    )


def collection_request(
    dimension: int, *, late_interaction: bool, config: QdrantConfig, cluster: bool
) -> dict[str, Any]:
    """The keyword arguments of ``QdrantClient.create_collection`` (its name apart).

    ``cluster``: an external server (``--qdrant-url``), which may be a cluster: shards, replicas
    and the write consistency factor are asked for there; the sidecar is one node."""
    on_disk = config.on_disk_vectors
    vectors = {
        DENSE: models.VectorParams(
            size=dimension,
            distance=models.Distance.COSINE,
            on_disk=True if on_disk else None,
            quantization_config=dense_quantization() if on_disk else None,
        )
    }
    if late_interaction:
        # Only rescored by filtered MaxSim queries over known candidates: no graph (m = 0),
        # and on disk (a recall reads ~30-100 points' tokens, not the whole collection).
        vectors[TOKENS] = models.VectorParams(
            size=dimension,
            distance=models.Distance.COSINE,
            multivector_config=models.MultiVectorConfig(
                comparator=models.MultiVectorComparator.MAX_SIM
            ),
            datatype=TOKENS_DATATYPE,
            on_disk=True,
            hnsw_config=models.HnswConfigDiff(m=0),
        )
    request: dict[str, Any] = {
        "vectors_config": vectors,
        "sparse_vectors_config": {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        "on_disk_payload": config.on_disk_payload,
    }
    if cluster:
        if config.shard_number is not None:
            request["shard_number"] = config.shard_number
        if config.replication_factor is not None:
            request["replication_factor"] = config.replication_factor
        factor = config.write_factor()
        if factor is not None:
            request["write_consistency_factor"] = factor
    return request


def dense_quantization() -> models.ScalarQuantization:
    """Dense vectors on disk keep an 8-bit copy in RAM (384 bytes a 384-d vector, a quarter of
    the originals): the server searches its graph over the copy and rescores the best from disk."""
    return models.ScalarQuantization(
        scalar=models.ScalarQuantizationConfig(
            type=models.ScalarType.INT8, quantile=0.99, always_ram=True
        )
    )


def dense_to_disk(info: models.CollectionInfo, config: QdrantConfig) -> dict[str, Any] | None:
    """The ``update_collection`` keyword arguments (its name apart) that move an existing
    collection's dense vectors to disk once it holds ``qdrant.on_disk_vectors_from`` points
    (with the 8-bit copy in RAM; the server re-optimizes its segments in the background), or
    None: below it, already on disk, or turned off (0)."""
    threshold = config.on_disk_vectors_from
    vectors = info.config.params.vectors
    dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
    if threshold <= 0 or dense is None or dense.on_disk:
        return None
    if (info.points_count or 0) < threshold:
        return None
    diff = models.VectorParamsDiff(on_disk=True, quantization_config=dense_quantization())
    return {"vectors_config": {DENSE: diff}}


def read_consistency(config: QdrantConfig) -> models.ReadConsistency:
    """What every read asks of the replicas (with the write factor: read-after-write)."""
    if isinstance(config.read_consistency, int):
        return config.read_consistency
    return models.ReadConsistencyType(config.read_consistency)


def write_ordering(config: QdrantConfig) -> models.WriteOrdering:
    return models.WriteOrdering(config.write_ordering)


def has_tokens(info: models.CollectionInfo) -> bool:
    """Whether an existing collection has the late-interaction channel."""
    vectors = info.config.params.vectors
    if not isinstance(vectors, dict) or TOKENS not in vectors:
        return False
    return vectors[TOKENS].multivector_config is not None

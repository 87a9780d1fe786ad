"""The collection ferrex creates on a Qdrant server."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from ferrex.config.base import (
    Section,
)


class QdrantConfig(Section):
    """The collection ferrex creates on a Qdrant server (docs/modes.md, "Beyond one machine").

    ``shard_number``, ``replication_factor`` and ``write_consistency_factor`` are sent when
    ferrex creates the collection on an external server (``--qdrant-url``); the sidecar is one
    node and keeps the server's defaults. They apply at creation only: an existing collection
    keeps its own (``ferrex rebuild-index`` recreates it). ``write_consistency_factor`` unset
    is a majority of the replicas, which with ``read_consistency = "majority"`` keeps every
    read after an acknowledged write seeing it."""

    shard_number: int | None = Field(default=None, ge=1, le=1024)
    replication_factor: int | None = Field(default=None, ge=1, le=64)
    write_consistency_factor: int | None = Field(default=None, ge=1, le=64)
    # Dense vectors memory-mapped from disk (the token vectors always are), an 8-bit copy kept
    # in RAM for search; payload on disk. An existing collection's dense vectors go to disk at
    # the first open past ``on_disk_vectors_from`` points (0: never, unless on_disk_vectors).
    on_disk_vectors: bool = False
    on_disk_vectors_from: int = Field(default=20_000, ge=0)
    on_disk_payload: bool = True
    # Reads: "majority" | "all" | "quorum" | a number of replicas. Writes: "weak" | "medium" |
    # "strong" (Qdrant's write ordering between replicas).
    read_consistency: Literal["majority", "all", "quorum"] | int = "majority"
    write_ordering: Literal["weak", "medium", "strong"] = "strong"

    @model_validator(mode="after")
    def _consistent(self) -> QdrantConfig:
        factor, replicas = self.write_consistency_factor, self.replication_factor or 1
        if factor is not None and factor > replicas:
            raise ValueError(
                f"qdrant.write_consistency_factor ({factor}) cannot exceed "
                f"qdrant.replication_factor ({replicas}): a write could never be confirmed"
            )
        if isinstance(self.read_consistency, int) and not 1 <= self.read_consistency <= 64:
            raise ValueError("qdrant.read_consistency must be majority, all, quorum or 1-64")
        return self

    def write_factor(self) -> int | None:
        """The write consistency factor to create the collection with (None: not replicated)."""
        if self.write_consistency_factor is not None:
            return self.write_consistency_factor
        replicas = self.replication_factor or 1
        return replicas // 2 + 1 if replicas > 1 else None

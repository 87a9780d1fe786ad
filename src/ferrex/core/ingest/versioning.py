"""A procedural store (spec, store step 7): the version of a named procedure, its rollback,
and the duplicate of its current version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ferrex.core import errors
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.ingest.dedup import DuplicateCheck
from ferrex.core.ingest.draft import Prepared
from ferrex.core.ingest.procedures import (
    current_version,
    find_version,
    next_version,
    same_definition,
    same_procedure_name,
)
from ferrex.core.memory import Memory
from ferrex.core.ports import (
    Vector,
)
from ferrex.core.results import StoreOutcome


class ProcedureStep:
    """Numbers a named procedure's versions and replaces its current one."""

    def __init__(self, deps: Deps, dedup: DuplicateCheck) -> None:
        self.meta = deps.meta
        self.sync = deps.sync
        self.dedup = dedup

    def apply(
        self,
        item: Prepared,
        now: datetime,
        invalidate: list[Memory],
        batch_vectors: Sequence[tuple[Prepared, Vector]],
        explicit_supersede: bool,
        out: StoreOutcome,
    ) -> None:
        memory = item.memory
        request = item.request
        if not memory.name:
            if not explicit_supersede:
                self.dedup.reject(item, batch_vectors)
            if request.version is not None:
                out.warnings.append(
                    "version not stored: ferrex numbers the versions of named procedures only "
                    "(give a name to version this procedure)"
                )
            return
        versions = self._procedure_versions(memory.namespace, memory.name)
        current = current_version(versions)
        if request.rollback_to is not None:
            target = find_version(versions, request.rollback_to)
            if target is None:
                raise FerrexError(
                    errors.NOT_FOUND,
                    f"store: procedure '{memory.name}' has no version {request.rollback_to} "
                    f"(versions: {[v.version for v in versions] or 'none'})",
                )
            memory.content = target.content
            memory.conditions = list(target.conditions)
            memory.steps = list(target.steps)
            if current is not None and same_definition(current, memory):
                raise FerrexError(
                    errors.DUPLICATE,
                    f"store: procedure '{current.name}' version {current.version} already has "
                    f"exactly the steps of version {request.rollback_to}: nothing to roll back. "
                    "Nothing was stored.",
                    existing_id=current.id,
                    similarity=1.0,
                )
            vectors = self.sync.plan([memory])[0]
            item.chunks = vectors.chunks
            item.vectors = vectors.vectors
            item.tokens = vectors.tokens
            memory.chunk_count = len(item.chunks)
            out.rolled_back_to = request.rollback_to
        elif not explicit_supersede:
            # A changed version of a known procedure is an update, not a near-duplicate of its
            # own earlier versions; an unchanged one is a duplicate of the current version.
            if current is not None and same_definition(current, memory):
                raise FerrexError(
                    errors.DUPLICATE,
                    f"similar memory already exists: {current.id} (procedure '{current.name}' "
                    f"version {current.version} has exactly these steps). Nothing was stored.",
                    existing_id=current.id,
                    similarity=1.0,
                )
            self.dedup.reject(item, batch_vectors, exclude=frozenset(v.id for v in versions))
        memory.version = next_version(versions)
        out.version = memory.version
        if request.version is not None and request.version != memory.version:
            out.warnings.append(
                f"ferrex numbers versions itself: this is version {memory.version} of "
                f"'{memory.name}' (version {request.version} was asked for)"
            )
        if current is not None:
            invalidate.append(current)
            out.previous_version_id = current.id
            out.previous_version = current.version
        if memory.version > 1:
            self.meta.audit(
                memory.namespace,
                "version",
                now,
                memory_id=memory.id,
                other_id=current.id if current else None,
                detail={"version": memory.version},
            )

    def _procedure_versions(self, namespace: str, name: str) -> list[Memory]:
        """Every version of the named procedure (names compare case- and spacing-insensitively)."""
        rows = self.meta.named_procedures(namespace)
        return [m for m in rows if same_procedure_name(m.name, name)]

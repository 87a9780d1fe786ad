"""The forget tool: delete memories by id (and, with cascade, the entities only they named)."""

from __future__ import annotations

from collections.abc import Sequence

from ferrex.core.call_keys import record, recorded
from ferrex.core.deps import Deps
from ferrex.core.lifecycle.upkeep import Upkeep
from ferrex.core.requests import ForgetRequest
from ferrex.core.results import ForgetResult


class Forget:
    def __init__(self, deps: Deps, upkeep: Upkeep) -> None:
        self.deps = deps
        self.upkeep = upkeep

    def run(self, request: ForgetRequest, key: str | None = None) -> ForgetResult:
        """Forget; ``key``: a forwarded call's idempotency key (``core/call_keys.py``): a
        retry of a forget that was applied answers as the first time (``deleted``), not
        ``not_found``."""
        namespace = request.namespace or self.deps.namespace
        ids = list(dict.fromkeys(request.ids))
        with self.deps.write:
            first = recorded(self.deps.meta, key, ForgetResult)
            if first is not None:
                return first
            existing = self.deps.meta.existing_ids(ids, namespace)
            deleted = [i for i in ids if i in existing]
            not_found = [i for i in ids if i not in existing]
            orphaned = self._history_left_without_value(namespace, deleted)

            def answer(removed: list[str]) -> ForgetResult:
                return ForgetResult(deleted, not_found, removed, namespace, orphaned)

            removed = self.upkeep.delete(
                deleted,
                namespace,
                cascade=request.cascade,
                action="forget",
                reason="forget",
                # in the delete's transaction: applied and recorded together, or neither
                also=lambda removed: record(
                    self.deps.meta, key, "forget", namespace, answer(removed)
                ),
            )
        return answer(removed)

    def _history_left_without_value(self, namespace: str, deleted: Sequence[str]) -> list[str]:
        """Facts superseded by one of ``deleted`` whose (subject, predicate) keeps no current
        value once ``deleted`` are gone (a v1 -> v2 -> v3 chain losing v2 still has v3)."""
        meta = self.deps.meta
        gone = set(deleted)
        predecessors = meta.facts_superseded_by(namespace, deleted)
        orphaned = []
        for fact in predecessors:
            if fact.id in gone or fact.subject_entity_id is None or not fact.predicate_canonical:
                continue
            still = [
                f
                for f in meta.facts_for_predicate(
                    namespace, fact.subject_entity_id, fact.predicate_canonical
                )
                if f.t_invalid is None and f.id not in gone
            ]
            if not still:
                orphaned.append(fact.id)
        return sorted(orphaned)

"""What the memory browser (``ferrex ui``) reads: the browsing use cases' results as JSON.

Not agent-facing (no tool answers these): the engine dispatches ``browse``, ``history`` and
``activity`` for the UI process, which renders them. Each memory has the memory resource's
fields (``present_memory``), so the UI shows exactly what an agent can read.
"""

from __future__ import annotations

from typing import Any

from ferrex.core.reading.browse import Activity, BrowseItem, BrowsePage, History
from ferrex.core.results import MemoryView
from ferrex.server.presenter import present_memory


def _item(item: BrowseItem) -> dict[str, Any]:
    return present_memory(MemoryView(item.memory, item.freshness, None))


def present_browse(page: BrowsePage) -> dict[str, Any]:
    return {
        "namespace": page.namespace,
        "total": page.total,
        "page": page.page,
        "page_size": page.page_size,
        "memories": [_item(item) for item in page.items],
    }


def present_history(history: History) -> dict[str, Any]:
    return {
        "memory": present_memory(history.view),
        "kind": history.kind,
        "versions": [_item(item) for item in history.versions],
        "contradicts": [m.id for m in history.contradicts],
    }


def present_activity(activity: Activity) -> dict[str, Any]:
    return {"namespace": activity.namespace, "months": activity.months, "by_type": activity.by_type}

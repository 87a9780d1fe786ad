"""Recall (spec "Retrieval Pipeline Detail"): the use case (``usecase.py``) and its stages, each a
module of its own."""

from __future__ import annotations

from ferrex.core.recall.usecase import Recall

__all__ = ["Recall"]

"""Recall (spec "Retrieval Pipeline Detail"): the use case (``usecase.py``), its stages, each a
module of its own, and their formulas (``formulas.py``: fusion, boosts, order, budget;
``context.py``: context neighbours' credit). Nothing is imported here: the store adapters read
``formulas.hit_order`` and ``context.asks_question`` without loading the use case."""

"""The vector index as derived data: what goes into it for a memory (``points``, its chunks:
``chunking``, its date terms: ``date_terms``), the dual write with SQLite and its recovery
(``sync``), and the embedding model the store is pinned to (``pins``)."""

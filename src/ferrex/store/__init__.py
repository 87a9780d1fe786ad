"""Storage adapters: the SQLite metadata store and the vector indexes (Edge, qdrant-client)."""

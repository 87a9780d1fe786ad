"""Storage adapters: the SQLite metadata store and the vector indexes (Qdrant Edge, qdrant-client)."""

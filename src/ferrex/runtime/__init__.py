"""Process runtime: who owns a data dir (lock), how other ferrex processes reach the owner
(the engine socket), the operations they send, and the managed Qdrant sidecar.

``server`` presents the MCP tools; this package decides which process does the work.
"""

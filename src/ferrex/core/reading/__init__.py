"""Reading the store without a query: one memory or the namespaces (``lookup``, the MCP
resources) and pages of memories for a person (``browse``, the ui)."""

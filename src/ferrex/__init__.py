"""ferrex: a local-first long-term memory server for AI agents (MCP over stdio)."""

__version__ = "0.1.0"

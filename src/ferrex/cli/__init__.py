"""The ``ferrex`` command: the MCP server (default) and the operator commands.

ferrex [options]                         start the MCP server on stdio
ferrex doctor [--json] [--repair] [--full]
                                         compare SQLite and the vector index, find secrets
ferrex rebuild-index [--model-tier X]    recreate the vector index from SQLite
ferrex export [--namespace NS]           JSON lines on stdout (or -o FILE)
ferrex import FILE                       restore an export
ferrex serve --http HOST:PORT            the team server: MCP streamable HTTP at /mcp
ferrex migrate-index --to MODE           rebuild the index in the sidecar or the embedded engine
"""

from ferrex.cli.main import main

__all__ = ["main"]

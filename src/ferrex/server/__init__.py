"""The MCP server: tool definitions, the stdio app and the shared engine."""

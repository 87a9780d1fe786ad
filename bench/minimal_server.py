"""The MCP SDK's minimal stdio server with one trivial tool: the floor bench/latency.py measures."""

from mcp.server.mcpserver import MCPServer

app = MCPServer("minimal")


@app.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    app.run()

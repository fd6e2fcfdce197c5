"""A legacy HTTP+SSE MCP server built with the official Python SDK
(MCPServer, formerly FastMCP). Usage: sse_server.py <port>"""
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("legacy-sse")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Returns the text in capitals."""
    return text.upper()


server.run("sse", host="127.0.0.1", port=int(sys.argv[1]))

"""An `add` tool served over streamable HTTP by the official Python SDK's
MCPServer (FastMCP in SDK 1.x). Usage: python mcpserver_add.py <port>"""
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("py-add")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))

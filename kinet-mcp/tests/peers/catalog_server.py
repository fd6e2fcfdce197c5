"""A stdio MCP server with many tools, built with the official Python SDK
(MCPServer): one per (department, action), like a company's internal API
catalog. Usage: catalog_server.py <prefix> <count>"""
import sys

from mcp.server.mcpserver import MCPServer

prefix, count = sys.argv[1], int(sys.argv[2])
server = MCPServer(f"{prefix}-catalog")
departments = ["billing", "shipping", "support", "inventory", "payroll", "sales", "legal", "security", "analytics"]
actions = ["list", "get", "create", "update", "archive"]


def make(department, action):
    def tool(record_id: str = "", note: str = "") -> str:
        return f"{prefix}:{department}.{action}({record_id}) ok"

    return tool


made = 0
for department in departments:
    for action in actions:
        if made == count:
            break
        server.add_tool(
            make(department, action),
            name=f"{department}_{action}",
            description=f"{action.capitalize()} {department} records in the {prefix} system. "
            f"Takes an optional record id and a free-text note; returns what was done.",
        )
        made += 1

server.run()

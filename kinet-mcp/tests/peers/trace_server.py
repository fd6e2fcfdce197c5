"""A stdio MCP server (official Python SDK, MCPServer) whose tool answers
with the W3C trace context its request carried in `_meta` (SEP-414)."""
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("trace")


@server.tool()
def traceparent(ctx: Context) -> str:
    """The traceparent this call's request carried, or "none"."""
    meta = ctx.request_context.meta
    if meta is None:
        return "none"
    if hasattr(meta, "model_dump"):
        meta = meta.model_dump(by_alias=True)
    return str(dict(meta).get("traceparent", "none"))


server.run()

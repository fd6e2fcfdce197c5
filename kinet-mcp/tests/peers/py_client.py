"""The official Python MCP SDK client against a kinet MCP server.
Usage: py_client.py stdio <command> [args...] | py_client.py http <url>
Prints one JSON line: the tool names, the `agent` answer with its
conversation id, and the `reply` answer."""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


asked = []


async def approve(context, params):
    """Elicitation: the user approves, and we remember what was asked."""
    asked.append(params.message)
    return types.ElicitResult(action="accept", content={"approve": True})


async def exercise(session):
    await session.initialize()
    tools = await session.list_tools()
    first = await session.call_tool("agent", {"prompt": "hello from python"})
    conversation = first.structured_content["conversation_id"]
    second = await session.call_tool("reply", {"conversation_id": conversation, "prompt": "and again"})
    written = await session.call_tool("agent", {"prompt": "write: buy milk"})
    return {
        "written": written.content[0].text,
        "asked": asked,
        "tools": sorted(t.name for t in tools.tools),
        "first": first.content[0].text,
        "conversation_id": conversation,
        "second": second.content[0].text,
        "second_error": bool(second.is_error),
    }


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, elicitation_callback=approve) as session:
                print(json.dumps(await exercise(session)))
    else:
        async with streamable_http_client(sys.argv[2]) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, elicitation_callback=approve) as session:
                print(json.dumps(await exercise(session)))


asyncio.run(main())

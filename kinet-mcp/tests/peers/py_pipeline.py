"""The official Python MCP SDK client calling tools a kinet MCP server
serves directly. Usage: py_pipeline.py <url> <path>...
Reads each path with `read_file`, then calls `slow`; prints one JSON line
with the read-only hints of the listed tools, each read's result and the
slow call's result and duration."""
import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def hint(tool):
    notes = tool.annotations
    if notes is None:
        return None
    return getattr(notes, "read_only_hint", getattr(notes, "readOnlyHint", None))


def summary(result):
    return {
        "error": bool(getattr(result, "is_error", getattr(result, "isError", False))),
        "text": result.content[0].text if result.content else "",
    }


async def main():
    async with streamable_http_client(sys.argv[1]) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            tools = await session.list_tools()
            out = {"hints": {t.name: hint(t) for t in tools.tools}, "reads": {}}
            for path in sys.argv[2:]:
                out["reads"][path] = summary(await session.call_tool("read_file", {"path": path}))
            started = time.monotonic()
            slow = summary(await session.call_tool("slow", {}))
            slow["seconds"] = time.monotonic() - started
            out["slow"] = slow
            print(json.dumps(out))


asyncio.run(main())

"""Times tools/call of `echo` through the official Python MCP SDK client
against a stdio server. Usage: python py_client.py <calls> <command> [args...]
Prints one JSON line: {"p50_us": .., "p99_us": .., "calls": ..}."""
import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    calls = int(sys.argv[1])
    params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(50):
                await session.call_tool("echo", {"message": "warm"})
            samples = []
            for i in range(calls):
                start = time.perf_counter_ns()
                result = await session.call_tool("echo", {"message": f"m{i}"})
                samples.append((time.perf_counter_ns() - start) / 1000)
                if result.content[0].text != f"Echo: m{i}":
                    raise SystemExit("wrong echo")
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    print(json.dumps({"p50_us": pick(0.5), "p99_us": pick(0.99), "calls": calls}))


asyncio.run(main())

"""Times the official Python MCP SDK client with its OAuth provider against
an OAuth-guarded streamable HTTP server (kinet-mcp/tests/peers/oauth_server.py):
the authorization (discovery, registration, the consent redirect, the code
exchange, initialize) and then `whoami` calls.
Usage: python py_oauth_client.py <calls> <server url>
Prints one JSON line: {"authorize_ms": .., "p50_us": .., "p99_us": .., "calls": ..}."""
import asyncio
import json
import sys
import time
from urllib.parse import parse_qs, urlparse

import httpx2

from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

REDIRECT = "http://127.0.0.1:9/callback"


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


async def main() -> None:
    calls = int(sys.argv[1])
    url = sys.argv[2]
    redirected = {}

    async def open_page(page: str) -> None:
        # The "browser": the consent page redirects straight back.
        async with httpx2.AsyncClient() as browser:
            answer = await browser.get(page)
            redirected["to"] = answer.headers["location"]

    async def come_back() -> AuthorizationCodeResult:
        query = parse_qs(urlparse(redirected["to"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0])

    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="bench", redirect_uris=[REDIRECT], token_endpoint_auth_method="none"
        ),
        storage=Memory(),
        redirect_handler=open_page,
        callback_handler=come_back,
    )
    started = time.perf_counter_ns()
    async with create_mcp_http_client(auth=auth) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                authorize_ms = (time.perf_counter_ns() - started) / 1e6
                for _ in range(50):
                    await session.call_tool("whoami", {})
                samples = []
                for _ in range(calls):
                    start = time.perf_counter_ns()
                    result = await session.call_tool("whoami", {})
                    samples.append((time.perf_counter_ns() - start) / 1000)
                    if result.content[0].text != "authorized":
                        raise SystemExit("not authorized")
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    print(
        json.dumps(
            {"authorize_ms": authorize_ms, "p50_us": pick(0.5), "p99_us": pick(0.99), "calls": calls}
        )
    )


asyncio.run(main())

"""An MCP server that is its own OAuth 2.1 authorization server, built with
the official Python SDK (MCPServer and its auth routes: protected-resource
metadata, authorization-server metadata, dynamic registration, /authorize,
/token with PKCE checks). The user's consent is automatic: /authorize
redirects straight back with a code, so a test's "browser" only follows
redirects.

Usage: oauth_server.py <port> <log file> [access token seconds]
[client id@redirect port] [transport]

The transport is `streamable-http` (at /mcp, the default) or `sse` (the
legacy transport, at /sse); the resource is that endpoint's URL. A client id
of `-` means none.

Every grant is appended to the log file as one line ("register <id>",
"authorize <client> <scopes> <resource>", "code", "refresh", "denied
refresh", "expire", "forget", "escalate"), so tests can see what the client did. With a client id, that
client is registered in advance (for `oauth.clientId` configurations) with
the redirect URI http://localhost:<redirect port>/callback.
"""
import json
import secrets
import sys
import time
import warnings

from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp.server.auth.middleware import bearer_auth
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

warnings.simplefilter("ignore")

PORT = int(sys.argv[1])
LOG = sys.argv[2]
ACCESS_SECONDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3600
PRESET = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
PRESET_CLIENT, _, PRESET_PORT = PRESET.partition("@") if PRESET else (None, "", "")
TRANSPORT = sys.argv[5] if len(sys.argv) > 5 else "streamable-http"
ENDPOINT = "/sse" if TRANSPORT == "sse" else "/mcp"
BASE = f"http://127.0.0.1:{PORT}"


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Provider:
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        if PRESET_CLIENT:
            self.clients[PRESET_CLIENT] = OAuthClientInformationFull(
                client_id=PRESET_CLIENT,
                redirect_uris=[f"http://localhost:{PRESET_PORT}/callback"],
                token_endpoint_auth_method="none",
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope="tools",
            )

    async def get_client(self, client_id: str):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        log(f"register {client_info.client_id}")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["tools"],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        log(f"authorize {client.client_id} {' '.join(params.scopes or [])} {params.resource}")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = secrets.token_urlsafe(24)
        refresh = secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + ACCESS_SECONDS,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=ACCESS_SECONDS,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        log("code")
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token: str):
        found = self.refresh.get(refresh_token)
        if found is None:
            log("denied refresh")
        return found

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        # Rotation: the old refresh token is spent.
        if self.refresh.pop(refresh_token.token, None) is None:
            log("denied refresh")
            raise TokenError(error="invalid_grant", error_description="refresh token already used")
        log("refresh")
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str):
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


async def _send_auth_error(self, send, status_code: int, error: str, description: str) -> None:
    """The SDK's challenge, plus the `scope` an insufficient_scope answer
    needs (MCP 2025-11-25 asks servers to name it, for step-up)."""
    parts = [f'error="{error}"', f'error_description="{description}"']
    if self.resource_metadata_url:
        parts.append(f'resource_metadata="{self.resource_metadata_url}"')
    if error == "insufficient_scope":
        parts.append(f'scope="{" ".join(self.required_scopes)}"')
    body = json.dumps({"error": error, "error_description": description}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", f"Bearer {', '.join(parts)}".encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


bearer_auth.RequireAuthMiddleware._send_auth_error = _send_auth_error

provider = Provider()
server = MCPServer(
    "guarded",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=AnyHttpUrl(BASE),
        resource_server_url=AnyHttpUrl(f"{BASE}{ENDPOINT}"),
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=["tools", "admin"], default_scopes=["tools", "admin"]
        ),
        required_scopes=["tools"],
    ),
)


@server.tool()
def whoami() -> str:
    """Says that the caller got through."""
    return "authorized"


@server.custom_route("/expire", methods=["POST"])
async def expire(_request: Request) -> JSONResponse:
    """Ends every access token early (refresh tokens stay good)."""
    provider.access.clear()
    log("expire")
    return JSONResponse({"ok": True})


@server.custom_route("/escalate", methods=["POST"])
async def escalate(_request: Request) -> JSONResponse:
    """From now on every request needs the `admin` scope too (step-up)."""
    server.settings.auth.required_scopes.append("admin")
    log("escalate")
    return JSONResponse({"ok": True})


@server.custom_route("/forget", methods=["POST"])
async def forget(_request: Request) -> JSONResponse:
    """Revokes every token (a server-side logout), keeping registrations."""
    provider.access.clear()
    provider.refresh.clear()
    log("forget")
    return JSONResponse({"ok": True})


server.run(TRANSPORT, host="127.0.0.1", port=PORT)

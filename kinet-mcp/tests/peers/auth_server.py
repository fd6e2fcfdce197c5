"""A standalone OAuth 2.1 authorization server (no MCP endpoint), built with
the official Python SDK's auth routes (authorization-server metadata, dynamic
registration, /authorize, /token with PKCE checks), for testing an MCP server
that is only a resource server. The user's consent is automatic: /authorize
redirects straight back with a code.

Usage: auth_server.py <port> <log file>

Access tokens are RS256 JWTs signed with an RSA key made at start (kid "k1"):
iss (the metadata's `issuer`, "http://127.0.0.1:<port>/"), sub ("user-" and
the first 8 characters of the client id), aud (the RFC 8707 `resource` the
client sent, or "none-sent"), client_id, scope, iat, exp, jti. Refresh tokens
are opaque and rotate. Besides the SDK's routes:

  GET  /jwks        the public key k1
  POST /introspect  RFC 7662; HTTP Basic client `rs` / `rs-secret`
  POST /test/mint   JSON {sub, aud, expires_in=3600, scope="mcp", forge=false}
                    -> {"access_token"}; `forge` signs with another key, kid k1

Every event is appended to the log file as one line ("register <client>",
"authorize <client> <resource or none-sent>", "token <sub> <aud>", "mint <sub> <aud>",
"introspect <active>"). The server exits when its stdin closes.
"""
import base64
import contextvars
import os
import secrets
import sys
import threading
import time
import uuid
import warnings
from urllib.parse import parse_qs

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

warnings.simplefilter("ignore")

PORT = int(sys.argv[1])
LOG = sys.argv[2]
ISSUER_URL = AnyHttpUrl(f"http://127.0.0.1:{PORT}")
ISSUER = str(ISSUER_URL)  # "http://127.0.0.1:<port>/", as the metadata prints it
ACCESS_SECONDS = 3600
KID = "k1"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
FORGE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RS_CLIENT, RS_SECRET = "rs", "rs-secret"

# The `resource` form field of the /token request being handled (the SDK does
# not pass it to the provider); used when /authorize named none.
TOKEN_RESOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("token_resource", default=None)


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def subject_of(client_id: str) -> str:
    return "user-" + client_id[:8]


def mint(sub: str, aud: str, client_id: str, scope: str, expires_in: int, forge: bool = False) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": sub,
        "aud": aud,
        "client_id": client_id,
        "scope": scope,
        "iat": now,
        "exp": now + expires_in,
        "jti": uuid.uuid4().hex,
    }
    key = FORGE_KEY if forge else KEY
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})


def verify(token: str) -> dict | None:
    """The claims of a valid, unexpired token signed by k1, else None."""
    try:
        if jwt.get_unverified_header(token).get("kid") != KID:
            return None
        return jwt.decode(
            token,
            KEY.public_key(),
            algorithms=["RS256"],
            issuer=ISSUER,
            options={"verify_aud": False, "require": ["exp", "iat", "sub"]},
        )
    except jwt.PyJWTError:
        return None


class Provider:
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        log(f"register {client_info.client_id}")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=subject_of(client.client_id),
        )
        log(f"authorize {client.client_id} {params.resource or 'none-sent'}")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str) -> OAuthToken:
        aud = resource or TOKEN_RESOURCE.get() or "none-sent"
        access = mint(subject, aud, client_id, " ".join(scopes), ACCESS_SECONDS)
        refresh = secrets.token_urlsafe(24)
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=aud, subject=subject
        )
        log(f"token {subject} {aud}")
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=ACCESS_SECONDS,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject or subject_of(client.client_id),
        )

    async def load_refresh_token(self, client, refresh_token: str):
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        # Rotation: the old refresh token is spent.
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError(error="invalid_grant", error_description="refresh token already used")
        return self._issue(
            client.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            refresh_token.subject or subject_of(client.client_id),
        )

    async def load_access_token(self, token: str):
        claims = verify(token)
        if claims is None:
            return None
        return AccessToken(
            token=token,
            client_id=claims.get("client_id", ""),
            scopes=claims.get("scope", "").split(),
            expires_at=claims["exp"],
            resource=claims.get("aud"),
            subject=claims["sub"],
        )

    async def revoke_token(self, token) -> None:
        self.refresh.pop(token.token, None)


def capture_token_resource(app):
    """Wraps the /token endpoint: buffers the form body, notes its `resource`
    field in TOKEN_RESOURCE, and replays the body to the SDK's handler."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        resource = parse_qs(body.decode("utf-8", "replace")).get("resource", [None])[0]
        TOKEN_RESOURCE.set(resource)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapped


async def jwks(_request: Request) -> JSONResponse:
    public = RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    jwk = {"kty": "RSA", "n": public["n"], "e": public["e"], "kid": KID, "alg": "RS256", "use": "sig"}
    return JSONResponse({"keys": [jwk]})


def basic_client(request: Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value).decode().partition(":")
    except ValueError:
        return None
    return user, password


async def introspect(request: Request) -> JSONResponse:
    if basic_client(request) != (RS_CLIENT, RS_SECRET):
        return JSONResponse({"error": "invalid_client"}, status_code=401,
                            headers={"WWW-Authenticate": 'Basic realm="introspect"'})
    form = await request.form()
    claims = verify(str(form.get("token", "")))
    log(f"introspect {str(claims is not None).lower()}")
    if claims is None:
        return JSONResponse({"active": False})
    answer = {k: claims.get(k) for k in ("sub", "aud", "exp", "iat", "scope", "client_id", "iss")}
    return JSONResponse({"active": True, **answer, "token_type": "Bearer"})


async def test_mint(request: Request) -> JSONResponse:
    body = await request.json()
    sub, aud = str(body["sub"]), str(body["aud"])
    token = mint(sub, aud, "minted", str(body.get("scope", "mcp")),
                 int(body.get("expires_in", ACCESS_SECONDS)), bool(body.get("forge", False)))
    log(f"mint {sub} {aud}")
    return JSONResponse({"access_token": token})


def exit_on_stdin_eof() -> None:
    while os.read(0, 4096):
        pass
    os._exit(0)


provider = Provider()
routes = create_auth_routes(
    provider,
    ISSUER_URL,
    service_documentation_url=None,
    client_registration_options=ClientRegistrationOptions(
        enabled=True, valid_scopes=["mcp", "memory"], default_scopes=["mcp"]
    ),
    revocation_options=None,
)
for route in routes:
    if route.path == "/token":
        route.app = capture_token_resource(route.app)
routes += [
    Route("/jwks", jwks, methods=["GET"]),
    Route("/introspect", introspect, methods=["POST"]),
    Route("/test/mint", test_mint, methods=["POST"]),
]

threading.Thread(target=exit_on_stdin_eof, daemon=True).start()
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=PORT, log_level="warning")
os._exit(0)  # not waiting for the stdin reader

//! OAuth 2.1 for remote MCP servers, as the MCP authorization spec
//! describes it.
//!
//! Give the hub an [`OAuth`] ([`HubBuilder::oauth`](crate::HubBuilder::oauth))
//! and a remote server that answers 401 is authorized without further
//! code:
//!
//! 1. **Discovery**: the challenge's `resource_metadata` (then the
//!    well-known protected-resource paths, RFC 9728) names the
//!    authorization server, whose metadata comes from the RFC 8414 or
//!    OpenID paths (or the server's `oauth.authServerMetadataUrl`). A server
//!    with no metadata at all gets the 2025-03-26 default endpoints. The
//!    resource metadata must name the server's own URL as its `resource`,
//!    and the issuer must be the one asked for; otherwise nothing is sent.
//!    A server that is not itself on this machine or a private network
//!    cannot point discovery, registration or the token endpoint there:
//!    literal addresses and `localhost` are refused, and names are
//!    resolved to public addresses only (the connection goes to the
//!    addresses checked).
//! 2. **Client**: the server's configured `oauth.clientId`, else the
//!    registration saved from before, else the host's client metadata
//!    document URL when the authorization server accepts those, else
//!    dynamic registration (RFC 7591) as a public client, saved at once.
//! 3. **Authorization code with PKCE (S256)**: the redirect goes to a
//!    loopback listener (`http://127.0.0.1:<port>/callback`, or
//!    `http://localhost:<callbackPort>/callback` when configured) and the
//!    request carries `state`, `resource` (RFC 8707) and the scopes (the
//!    configured ones, else the challenge's with those already granted,
//!    else the resource's advertised ones, else none). The browser step is
//!    the host's [`AuthorizationPrompt`]; the redirect's state is checked,
//!    and its issuer (RFC 9207), which must be there when the server says
//!    it sends it. A server whose metadata does not offer S256 is refused.
//! 4. **Tokens** go in the [`TokenStore`] ([`FileTokenStore`] by default,
//!    mode 0600) under the server's name and URL. Every request carries
//!    the current access token; one that expires within a minute is
//!    refreshed first (one process at a time, through the store's refresh
//!    lock; whoever waited takes the new tokens), and a 401 on a token gets
//!    one refresh and one
//!    retry. Only `invalid_grant` forgets the tokens (`invalid_client` the
//!    registration too). A 403 `insufficient_scope`, or a 401 nothing
//!    fixes, while connected or at start, leads to a new authorization
//!    (at most 3 per server in 10 minutes).
//!
//! While the user is in the browser the server's state is
//! [`ServerState::Authorizing`](crate::ServerState::Authorizing). Without
//! a prompt, saved tokens are still used and refreshed, and a server that
//! needs a new authorization fails with a message that says so.
//!
//! Servers with their own `Authorization` header, bearer token or
//! `headersHelper` are left alone.
//!
//! The other side, kinet's own [`McpServer`](crate::McpServer) as a
//! resource server that checks the tokens an authorization server issued
//! for it, is [`ResourceServer`]; each request's [`Principal`] owns the
//! conversations it starts.

mod authorizer;
mod challenge;
mod client;
mod flow;
mod metadata;
pub(crate) mod resource;
mod store;

pub use resource::{Principal, ResourceServer};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub(crate) use authorizer::Authorizer;
pub(crate) use client::OAuthHttpClient;
pub use store::{
    ClientRegistration, Credentials, FileTokenStore, MemoryTokenStore, RefreshGuard, TokenStore,
    Tokens,
};

/// The host's OAuth settings for the hub.
#[derive(Clone)]
pub struct OAuth {
    pub(crate) prompt: Option<Arc<dyn AuthorizationPrompt>>,
    pub(crate) store: Arc<dyn TokenStore>,
    pub(crate) client_name: String,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("prompt", &self.prompt.is_some())
            .field("client_name", &self.client_name)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for OAuth {
    fn default() -> Self {
        Self::new()
    }
}

impl OAuth {
    /// Defaults: tokens in [`FileTokenStore::default_path`] (in memory
    /// when there is no home directory); no prompt (saved tokens are used
    /// and refreshed, new authorizations fail naming the server); client
    /// name `kinet`; no client metadata document; 5 minutes for the user
    /// to finish in the browser.
    pub fn new() -> Self {
        let store: Arc<dyn TokenStore> = match FileTokenStore::default_path() {
            Some(path) => Arc::new(FileTokenStore::new(path)),
            None => Arc::new(MemoryTokenStore::default()),
        };
        Self {
            prompt: None,
            store,
            client_name: "kinet".into(),
            client_metadata_url: None,
            timeout: Duration::from_secs(300),
        }
    }

    /// How the user is sent to the authorization page.
    pub fn prompt(mut self, prompt: Arc<dyn AuthorizationPrompt>) -> Self {
        self.prompt = Some(prompt);
        self
    }

    /// Where credentials are kept.
    pub fn store(mut self, store: Arc<dyn TokenStore>) -> Self {
        self.store = store;
        self
    }

    /// The client name sent when registering.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// An HTTPS URL where the host publishes its OAuth client metadata
    /// document; used as the client id by authorization servers that
    /// accept those (`client_id_metadata_document_supported`). The
    /// document must list the loopback redirect URI
    /// `http://127.0.0.1/callback` (any port).
    pub fn client_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// How long the user has to finish in the browser.
    pub fn authorization_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// A server's own OAuth settings (Claude Code's `oauth` entry).
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OAuthClientConfig {
    /// A client id registered in advance (`clientId`), for authorization
    /// servers without dynamic registration.
    pub client_id: Option<String>,
    /// Its secret, if it is a confidential client (set in code; never read
    /// from configuration files).
    pub client_secret: Option<String>,
    /// A fixed loopback port for the redirect (`callbackPort`): the
    /// redirect URI is `http://localhost:<port>/callback`.
    pub callback_port: Option<u16>,
    /// The authorization server's metadata URL (`authServerMetadataUrl`,
    /// HTTPS), skipping discovery.
    pub auth_server_metadata_url: Option<String>,
    /// The scopes to ask for (`scopes`, space-separated), over what the
    /// server advertises.
    pub scopes: Option<String>,
}

impl std::fmt::Debug for OAuthClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClientConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("callback_port", &self.callback_port)
            .field("auth_server_metadata_url", &self.auth_server_metadata_url)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl OAuthClientConfig {
    /// A configuration with a pre-registered client id.
    pub fn with_client_id(client_id: impl Into<String>) -> Self {
        Self {
            client_id: Some(client_id.into()),
            ..Self::default()
        }
    }

    /// Sets the fixed callback port.
    pub fn callback_port(mut self, port: u16) -> Self {
        self.callback_port = Some(port);
        self
    }

    /// Sets the client secret.
    pub fn client_secret(mut self, secret: impl Into<String>) -> Self {
        self.client_secret = Some(secret.into());
        self
    }

    /// Sets the authorization server's metadata URL (skipping discovery).
    pub fn auth_server_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.auth_server_metadata_url = Some(url.into());
        self
    }

    /// Sets the scopes to ask for (space-separated).
    pub fn scopes(mut self, scopes: impl Into<String>) -> Self {
        self.scopes = Some(scopes.into());
        self
    }
}

/// What the user is asked to open.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    /// The MCP server being authorized.
    pub server: String,
    /// The authorization server's issuer.
    pub issuer: String,
    /// The page to open in the user's browser.
    pub url: String,
    /// Where the browser is sent back to (a loopback listener of the hub).
    pub redirect_uri: String,
}

/// How the browser step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthorizationOutcome {
    /// The page was opened: the hub waits for the browser to come back to
    /// its redirect URI.
    Opened,
    /// The host saw the redirect itself (a pasted URL, an embedded
    /// browser): the full URL the browser was sent to.
    Redirected(String),
    /// The user does not want to authorize now.
    Declined,
}

/// The host's browser step: show or open the authorization page.
#[async_trait]
pub trait AuthorizationPrompt: Send + Sync {
    /// Sends the user to `request.url`.
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome;

    /// The authorization of `server` ended: `error` is `None` when it
    /// succeeded, else why not (declined, timed out, refused). A host takes
    /// its sign-in link down here. Default: nothing.
    async fn finished(&self, server: &str, error: Option<&str>) {
        let _ = (server, error);
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

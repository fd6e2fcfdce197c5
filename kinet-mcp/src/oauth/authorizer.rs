//! One server's OAuth state: its saved credentials, refreshes, and the
//! interactive authorization when the server asks for one.

use std::collections::BTreeSet;
use std::sync::Mutex;

use reqwest::Url;
use tokio::net::TcpListener;

use super::challenge::Challenge;
use super::flow::{self, AuthorizeParams, Callback};
use super::metadata::{self, ServerMetadata};
use super::store::{ClientRegistration, Credentials};
use super::{AuthorizationOutcome, AuthorizationRequest, OAuth, OAuthClientConfig, now_secs};

/// A token this close to expiring is refreshed before it is sent.
const REFRESH_MARGIN_SECS: u64 = 60;

pub(crate) struct Authorizer {
    server: String,
    url: String,
    key: String,
    config: OAuthClientConfig,
    oauth: OAuth,
    /// The OAuth requests' client and where it may go, made on first use
    /// (the server's name is resolved then).
    http: tokio::sync::OnceCell<(metadata::Reach, reqwest::Client)>,
    state: tokio::sync::Mutex<Saved>,
    /// The last 401/403 challenge, until an authorization answers it.
    challenge: Mutex<Option<Challenge>>,
    /// Woken when a challenge is noted (the supervisor of a connected
    /// server then authorizes again: a step-up, a revoked grant).
    raised: tokio::sync::Notify,
}

#[derive(Default)]
struct Saved {
    loaded: bool,
    credentials: Option<Credentials>,
}

/// The saved access token, whatever its age.
fn current_access(saved: &Saved) -> Option<String> {
    Some(
        saved
            .credentials
            .as_ref()?
            .tokens
            .as_ref()?
            .access_token
            .clone(),
    )
}

/// The saved access token when it is not about to expire.
fn fresh_token(saved: &Saved) -> Option<String> {
    let tokens = saved.credentials.as_ref()?.tokens.as_ref()?;
    let expiring = tokens
        .expires_at
        .is_some_and(|at| at <= now_secs().saturating_add(REFRESH_MARGIN_SECS));
    (!expiring).then(|| tokens.access_token.clone())
}

impl Authorizer {
    pub(crate) fn new(
        server: &str,
        url: &str,
        config: Option<OAuthClientConfig>,
        oauth: OAuth,
    ) -> Result<Self, String> {
        Ok(Self {
            server: server.to_owned(),
            url: url.to_owned(),
            key: format!("{server} {url}"),
            config: config.unwrap_or_default(),
            oauth,
            http: tokio::sync::OnceCell::new(),
            state: tokio::sync::Mutex::new(Saved::default()),
            challenge: Mutex::new(None),
            raised: tokio::sync::Notify::new(),
        })
    }

    /// The access token to send: the saved one, refreshed first when it
    /// is about to expire. `None` when there is none yet (the request goes
    /// out without, and the server's 401 starts an authorization).
    pub(crate) async fn access_token(&self) -> Result<Option<String>, String> {
        let mut saved = self.state.lock().await;
        self.load(&mut saved).await?;
        if let Some(fresh) = fresh_token(&saved) {
            return Ok(Some(fresh));
        }
        // Another process sharing the store may have refreshed already.
        self.reload(&mut saved).await?;
        if let Some(fresh) = fresh_token(&saved) {
            return Ok(Some(fresh));
        }
        match saved.credentials.as_ref().and_then(|c| c.tokens.as_ref()) {
            None => Ok(None),
            Some(tokens) if tokens.refresh_token.is_none() => Ok(Some(tokens.access_token.clone())),
            Some(_) => self.refresh(&mut saved).await,
        }
    }

    /// The server refused `sent`: a token to retry with (a newer one saved
    /// meanwhile, here or by another process, or a refreshed one), or
    /// `None` when only a new authorization can help.
    pub(crate) async fn after_rejection(&self, sent: &str) -> Result<Option<String>, String> {
        let mut saved = self.state.lock().await;
        self.reload(&mut saved).await?;
        let Some(tokens) = saved.credentials.as_ref().and_then(|c| c.tokens.as_ref()) else {
            return Ok(None);
        };
        if tokens.access_token != sent {
            return Ok(Some(tokens.access_token.clone()));
        }
        self.refresh(&mut saved).await
    }

    /// Sends a request with the current token (`send` gets it); when
    /// `refused` says the server turned that token down, one refresh (or a
    /// newer saved token) and one retry. The outer error is the token's
    /// (reading or refreshing it); the inner result is the last answer.
    pub(crate) async fn send_with_token<T, F, Fut>(
        &self,
        send: F,
        refused: impl Fn(&T) -> bool,
    ) -> Result<T, String>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let token = self.access_token().await?;
        let answer = send(token.clone()).await;
        match token {
            Some(sent) if refused(&answer) => match self.after_rejection(&sent).await? {
                Some(fresh) if fresh != sent => Ok(send(Some(fresh)).await),
                _ => Ok(answer),
            },
            _ => Ok(answer),
        }
    }

    /// The client for the OAuth requests, and where it may go.
    async fn http(&self) -> Result<&(metadata::Reach, reqwest::Client), String> {
        self.http
            .get_or_try_init(|| async {
                let server = metadata::parse_url(&self.url, "the server URL")?;
                let reach = metadata::Reach::of(&server).await;
                Ok::<_, String>((reach, metadata::http_client(reach)?))
            })
            .await
    }

    /// Notes a 401/403 challenge from the server.
    pub(crate) fn note_challenge(&self, header: &str) {
        if let Ok(mut challenge) = self.challenge.lock() {
            *challenge = Some(Challenge::parse(header));
        }
        self.raised.notify_one();
    }

    /// Resolves when a challenge is noted.
    pub(crate) async fn raised(&self) {
        self.raised.notified().await;
    }

    /// Forgets the last challenge (a new connection attempt starts).
    pub(crate) fn clear_challenge(&self) {
        if let Ok(mut challenge) = self.challenge.lock() {
            *challenge = None;
        }
    }

    /// Whether the server asked for authorization since the last one.
    pub(crate) fn challenged(&self) -> bool {
        self.challenge.lock().is_ok_and(|c| c.is_some())
    }

    /// Whether a new authorization can be run (the host gave a prompt).
    pub(crate) fn can_prompt(&self) -> bool {
        self.oauth.prompt.is_some()
    }

    async fn load(&self, saved: &mut Saved) -> Result<(), String> {
        if !saved.loaded {
            self.reload(saved).await?;
        }
        Ok(())
    }

    /// Reads the store again (another process may have written it).
    async fn reload(&self, saved: &mut Saved) -> Result<(), String> {
        saved.credentials = self.oauth.store.load(&self.key).await.map_err(|e| {
            format!(
                "cannot read the saved credentials of `{}`: {e}",
                self.server
            )
        })?;
        saved.loaded = true;
        Ok(())
    }

    async fn save(&self, saved: &mut Saved, credentials: Credentials) -> Result<(), String> {
        let result = self.oauth.store.save(&self.key, &credentials).await;
        saved.credentials = Some(credentials);
        result.map_err(|e| format!("cannot save the credentials of `{}`: {e}", self.server))
    }

    /// Refreshes the saved tokens (rotating the refresh token when the
    /// server does). A refresh token the server no longer honours
    /// (`invalid_grant`) is forgotten, unless another process saved a newer
    /// one meanwhile; a client it no longer knows (`invalid_client`) is
    /// forgotten with its registration. Either gives `None`: only a new
    /// authorization can help. Other refusals keep everything for a later
    /// try.
    async fn refresh(&self, saved: &mut Saved) -> Result<Option<String>, String> {
        // One refresh at a time across processes sharing the store; whoever
        // waited reads the store again and takes what the other got.
        let had = current_access(saved);
        let _guard = self
            .oauth
            .store
            .lock_refresh(&self.key)
            .await
            .map_err(|e| {
                format!(
                    "cannot lock the saved credentials of `{}` for a refresh: {e}",
                    self.server
                )
            })?;
        self.reload(saved).await?;
        let now = current_access(saved);
        if now.is_some() && now != had {
            return Ok(now);
        }
        let Some(mut credentials) = saved.credentials.clone() else {
            return Ok(None);
        };
        let Some(refresh_token) = credentials
            .tokens
            .as_ref()
            .and_then(|t| t.refresh_token.clone())
        else {
            return Ok(None);
        };
        let grant = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token.as_str()),
            ("resource", credentials.resource.as_str()),
        ];
        let (_, http) = self.http().await?;
        match flow::token_request(
            http,
            &credentials.token_endpoint,
            &credentials.client,
            &grant,
            credentials.tokens.as_ref(),
        )
        .await
        {
            Ok(tokens) => {
                let access = tokens.access_token.clone();
                credentials.tokens = Some(tokens);
                self.save(saved, credentials).await?;
                Ok(Some(access))
            }
            Err(refused)
                if matches!(
                    refused.code.as_deref(),
                    Some("invalid_grant" | "invalid_client")
                ) =>
            {
                tracing::info!(server = %self.server, "token refresh refused: {}", refused.message);
                // Compare and clear: another process may have rotated the
                // refresh token, and its new tokens must survive.
                self.reload(saved).await?;
                let current = saved
                    .credentials
                    .as_ref()
                    .and_then(|c| c.tokens.as_ref())
                    .and_then(|t| t.refresh_token.as_deref());
                if current != Some(refresh_token.as_str()) {
                    return Ok(current_access(saved));
                }
                if refused.code.as_deref() == Some("invalid_client") {
                    let removed = self.oauth.store.remove(&self.key).await;
                    saved.credentials = None;
                    removed.map_err(|e| {
                        format!("cannot forget the credentials of `{}`: {e}", self.server)
                    })?;
                } else {
                    credentials.tokens = None;
                    self.save(saved, credentials).await?;
                }
                Ok(None)
            }
            Err(failed) => Err(format!(
                "cannot refresh the token of `{}`: {}",
                self.server, failed.message
            )),
        }
    }

    /// Runs a whole authorization (discovery, registration, the user's
    /// browser step, the code exchange) and saves the tokens. Bounded by
    /// the hub's authorization timeout.
    pub(crate) async fn authorize(&self) -> Result<(), String> {
        let result = self.authorize_once().await;
        if let Some(prompt) = &self.oauth.prompt {
            prompt
                .finished(&self.server, result.as_ref().err().map(String::as_str))
                .await;
        }
        result
    }

    async fn authorize_once(&self) -> Result<(), String> {
        let Some(prompt) = self.oauth.prompt.clone() else {
            return Err(format!(
                "{} wants an OAuth authorization and the host gave no way to ask the user (OAuth::prompt); authorize it in a host that can, or configure a token",
                self.url
            ));
        };
        let challenge = self
            .challenge
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .unwrap_or_default();
        let mut saved = self.state.lock().await;
        self.load(&mut saved).await?;
        let server = metadata::parse_url(&self.url, "the server URL")?;
        let (reach, http) = self.http().await?;
        let reach = *reach;

        // Discovery.
        let resource_metadata = metadata::resource_metadata(
            http,
            &server,
            challenge.resource_metadata.as_deref(),
            reach,
        )
        .await?;
        let explicit = self
            .config
            .auth_server_metadata_url
            .as_deref()
            .map(|u| metadata::parse_url(u, "oauth.authServerMetadataUrl"))
            .transpose()?;
        let issuer = match resource_metadata
            .as_ref()
            .and_then(|m| m.authorization_servers.first())
        {
            Some(issuer) => metadata::named_url(issuer, "the authorization server", reach)?,
            None => metadata::at_path(&server, "/"),
        };
        let found = metadata::server_metadata(http, &issuer, explicit.as_ref()).await?;
        let server_metadata = match found {
            Some(found) => found,
            None if resource_metadata.is_none() && explicit.is_none() => {
                metadata::assumed_metadata(&server)
            }
            None => {
                return Err(format!(
                    "the authorization server {issuer} of {} publishes no metadata",
                    self.url
                ));
            }
        };
        // Endpoints a server named: not into this machine unless it is here.
        metadata::named_url(&server_metadata.token_endpoint, "the token endpoint", reach)?;
        if let Some(endpoint) = &server_metadata.registration_endpoint {
            metadata::named_url(endpoint, "the registration endpoint", reach)?;
        }
        if !server_metadata
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m == "S256"))
        {
            return Err(format!(
                "the authorization server {issuer} does not offer PKCE with S256: refusing to authorize there"
            ));
        }
        let issuer_name = if server_metadata.issuer.is_empty() {
            issuer.to_string()
        } else {
            server_metadata.issuer.clone()
        };
        let resource = resource_metadata
            .as_ref()
            .and_then(|m| m.resource.clone())
            .unwrap_or_else(|| {
                let mut canonical = server.clone();
                canonical.set_fragment(None);
                canonical.to_string()
            });
        // Scopes the resource advertises; without resource metadata, none
        // (the authorization server's whole list is not what this server
        // needs).
        let no_scopes = Vec::new();
        let scope = self.scope(
            &challenge,
            &saved,
            resource_metadata
                .as_ref()
                .map_or(&no_scopes, |m| &m.scopes_supported),
        );

        // The loopback listener and the client.
        let previous = saved
            .credentials
            .clone()
            .filter(|c| c.issuer == issuer_name && self.config.client_id.is_none());
        let (listeners, previous) = self.listen(previous).await?;
        let port = listeners
            .first()
            .and_then(|l| l.local_addr().ok())
            .ok_or("the redirect listener has no address")?
            .port();
        let reused = previous.as_ref().map(|c| c.client.client_id.clone());
        let client = self.client(http, &server_metadata, previous, port).await?;
        if self.config.client_id.is_none() && reused.as_deref() != Some(client.client_id.as_str()) {
            // A new registration is kept at once: an authorization the user
            // abandons does not register yet another client next time.
            self.save(
                &mut saved,
                Credentials {
                    issuer: issuer_name.clone(),
                    token_endpoint: server_metadata.token_endpoint.clone(),
                    resource: resource.clone(),
                    client: client.clone(),
                    tokens: None,
                },
            )
            .await?;
        }

        // The user's step.
        let verifier = flow::random_text(48)?;
        let state = flow::random_text(24)?;
        let url = flow::authorization_url(&AuthorizeParams {
            metadata: &server_metadata,
            client: &client,
            scope: scope.as_deref(),
            resource: &resource,
            state: &state,
            challenge: &flow::code_challenge(&verifier),
        })?;
        let request = AuthorizationRequest {
            server: self.server.clone(),
            issuer: issuer_name.clone(),
            url: url.to_string(),
            redirect_uri: client.redirect_uri.clone(),
        };
        let wait = flow::wait_for_redirect(listeners, state.clone());
        // A host prompt that panics fails this authorization, not the
        // server's supervisor.
        let asked = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            prompt.authorize(request),
        ));
        tokio::pin!(wait, asked);
        let mut opened = false;
        let callback = tokio::time::timeout(self.oauth.timeout, async {
            loop {
                tokio::select! {
                    callback = &mut wait => break Ok(callback),
                    outcome = &mut asked, if !opened => match outcome {
                        Ok(AuthorizationOutcome::Opened) => opened = true,
                        Ok(AuthorizationOutcome::Redirected(url)) => break Callback::from_url(&url),
                        Ok(AuthorizationOutcome::Declined) => {
                            break Err("the user declined the authorization".to_owned())
                        }
                        Err(_) => break Err("the host's authorization prompt panicked".to_owned()),
                    },
                }
            }
        })
        .await
        .map_err(|_| {
            format!(
                "the authorization of `{}` was not finished within {} s",
                self.server,
                self.oauth.timeout.as_secs()
            )
        })??;
        let code = callback.code(
            &state,
            &issuer_name,
            server_metadata.authorization_response_iss_parameter_supported,
        )?;

        // The tokens.
        let grant = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", client.redirect_uri.as_str()),
            ("code_verifier", verifier.as_str()),
            ("resource", resource.as_str()),
        ];
        let tokens =
            flow::token_request(http, &server_metadata.token_endpoint, &client, &grant, None)
                .await
                .map_err(|e| format!("exchanging the authorization code: {}", e.message))?;
        self.save(
            &mut saved,
            Credentials {
                issuer: issuer_name,
                token_endpoint: server_metadata.token_endpoint.clone(),
                resource,
                client,
                tokens: Some(tokens),
            },
        )
        .await?;
        self.clear_challenge();
        Ok(())
    }

    /// The scopes to ask for: configured, else the challenge's with those
    /// granted before (a step-up keeps what was had), else advertised.
    fn scope(&self, challenge: &Challenge, saved: &Saved, advertised: &[String]) -> Option<String> {
        if let Some(scopes) = &self.config.scopes {
            return Some(scopes.clone());
        }
        if let Some(asked) = &challenge.scope {
            let mut all: BTreeSet<&str> = asked.split_whitespace().collect();
            if let Some(had) = saved
                .credentials
                .as_ref()
                .and_then(|c| c.tokens.as_ref())
                .and_then(|t| t.scope.as_deref())
            {
                all.extend(had.split_whitespace());
            }
            return Some(all.into_iter().collect::<Vec<_>>().join(" "));
        }
        (!advertised.is_empty()).then(|| advertised.join(" "))
    }

    /// Binds the redirect listener: the configured port (on both loopback
    /// addresses, since the redirect says `localhost`), else the port a
    /// saved registration redirects to (a new registration if it is
    /// taken), else any.
    async fn listen(
        &self,
        previous: Option<Credentials>,
    ) -> Result<(Vec<TcpListener>, Option<Credentials>), String> {
        if let Some(port) = self.config.callback_port {
            let listener = TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
                format!(
                    "cannot listen on 127.0.0.1:{port} for the OAuth redirect of `{}`: {e}; free the port or change oauth.callbackPort",
                    self.server
                )
            })?;
            let mut listeners = vec![listener];
            // `localhost` may resolve to ::1 first; where IPv6 is off, 127.0.0.1 serves.
            if let Ok(v6) = TcpListener::bind(("::1", port)).await {
                listeners.push(v6);
            }
            return Ok((listeners, None));
        }
        if let Some(port) = previous
            .as_ref()
            .and_then(|c| Url::parse(&c.client.redirect_uri).ok())
            .and_then(|u| u.port())
            && let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await
        {
            return Ok((vec![listener], previous));
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1 for the OAuth redirect: {e}"))?;
        Ok((vec![listener], None))
    }

    /// The client to authorize as (see the module docs for the order).
    async fn client(
        &self,
        http: &reqwest::Client,
        metadata: &ServerMetadata,
        previous: Option<Credentials>,
        port: u16,
    ) -> Result<ClientRegistration, String> {
        if let Some(client_id) = &self.config.client_id {
            let secret = self.config.client_secret.clone();
            let offered = metadata.token_endpoint_auth_methods_supported.as_deref();
            let method = match (&secret, offered) {
                (None, _) => "none",
                (Some(_), Some(methods))
                    if !methods.iter().any(|m| m == "client_secret_basic")
                        && methods.iter().any(|m| m == "client_secret_post") =>
                {
                    "client_secret_post"
                }
                (Some(_), _) => "client_secret_basic",
            };
            return Ok(ClientRegistration {
                client_id: client_id.clone(),
                client_secret: secret,
                redirect_uri: format!("http://localhost:{port}/callback"),
                token_endpoint_auth_method: method.into(),
            });
        }
        if let Some(previous) = previous {
            return Ok(previous.client);
        }
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        if metadata.client_id_metadata_document_supported
            && let Some(url) = &self.oauth.client_metadata_url
            && Url::parse(url).is_ok_and(|u| u.scheme() == "https" && u.path() != "/")
        {
            return Ok(ClientRegistration {
                client_id: url.clone(),
                client_secret: None,
                redirect_uri,
                token_endpoint_auth_method: "none".into(),
            });
        }
        match &metadata.registration_endpoint {
            Some(endpoint) => {
                flow::register(http, endpoint, &self.oauth.client_name, &redirect_uri).await
            }
            None => Err(format!(
                "the authorization server of `{}` offers no client registration: configure oauth.clientId for it",
                self.server
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::oauth::{MemoryTokenStore, Tokens};

    fn authorizer(config: Option<OAuthClientConfig>) -> Authorizer {
        let oauth = OAuth::new().store(Arc::new(MemoryTokenStore::default()));
        Authorizer::new("s", "https://mcp.example/mcp", config, oauth).unwrap()
    }

    fn had(scope: &str) -> Saved {
        Saved {
            loaded: true,
            credentials: Some(Credentials {
                issuer: "https://auth.example/".into(),
                token_endpoint: "https://auth.example/token".into(),
                resource: "https://mcp.example/mcp".into(),
                client: ClientRegistration {
                    client_id: "c".into(),
                    client_secret: None,
                    redirect_uri: "http://127.0.0.1:9/callback".into(),
                    token_endpoint_auth_method: "none".into(),
                },
                tokens: Some(Tokens {
                    access_token: "a".into(),
                    refresh_token: None,
                    expires_at: None,
                    scope: Some(scope.into()),
                }),
            }),
        }
    }

    #[tokio::test]
    async fn the_client_is_chosen_in_the_documented_order() {
        let http = reqwest::Client::new();
        let metadata = ServerMetadata {
            client_id_metadata_document_supported: true,
            registration_endpoint: Some("http://127.0.0.1:9/register".into()),
            ..ServerMetadata::default()
        };
        // A configured client id comes first, on localhost.
        let configured = authorizer(Some(OAuthClientConfig::with_client_id("pre")));
        let client = configured
            .client(&http, &metadata, None, 4242)
            .await
            .unwrap();
        assert_eq!(client.client_id, "pre");
        assert_eq!(client.redirect_uri, "http://localhost:4242/callback");
        assert_eq!(client.token_endpoint_auth_method, "none");
        let secret = authorizer(Some(
            OAuthClientConfig::with_client_id("pre").client_secret("s"),
        ));
        let client = secret.client(&http, &metadata, None, 1).await.unwrap();
        assert_eq!(client.token_endpoint_auth_method, "client_secret_basic");
        // Then the saved registration.
        let plain = authorizer(None);
        let saved = had("x").credentials;
        let client = plain.client(&http, &metadata, saved, 9).await.unwrap();
        assert_eq!(client.client_id, "c");
        // Then the host's client metadata document, where accepted.
        let oauth = OAuth::new()
            .store(Arc::new(MemoryTokenStore::default()))
            .client_metadata_url("https://host.example/client.json");
        let cimd = Authorizer::new("s", "https://mcp.example/mcp", None, oauth).unwrap();
        let client = cimd.client(&http, &metadata, None, 5555).await.unwrap();
        assert_eq!(client.client_id, "https://host.example/client.json");
        assert_eq!(client.redirect_uri, "http://127.0.0.1:5555/callback");
        // Neither a document nor registration: the user is told what to set.
        let bare = ServerMetadata::default();
        let error = plain.client(&http, &bare, None, 1).await.unwrap_err();
        assert!(error.contains("oauth.clientId"), "{error}");
    }

    #[test]
    fn a_step_up_asks_for_what_it_had_and_what_it_needs() {
        let auth = authorizer(None);
        let advertised = vec!["read".to_owned(), "write".to_owned()];
        let step_up = Challenge::parse(r#"Bearer error="insufficient_scope", scope="admin""#);
        assert_eq!(
            auth.scope(&step_up, &had("read write"), &advertised)
                .as_deref(),
            Some("admin read write")
        );
        // No scope in the challenge: what the server advertises.
        assert_eq!(
            auth.scope(&Challenge::default(), &Saved::default(), &advertised)
                .as_deref(),
            Some("read write")
        );
        assert_eq!(
            auth.scope(&Challenge::default(), &Saved::default(), &[]),
            None
        );
        // Configured scopes win.
        let pinned = authorizer(Some(OAuthClientConfig {
            scopes: Some("only".into()),
            ..OAuthClientConfig::default()
        }));
        assert_eq!(
            pinned.scope(&step_up, &had("read"), &advertised).as_deref(),
            Some("only")
        );
    }
}

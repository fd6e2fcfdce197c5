//! The interactive authorization of a server that asks for one: discovery
//! of its authorization server, the client to authorize as (and the
//! loopback listener its redirect comes back to), the user's step in the
//! browser, and the exchange of the code for tokens.

use std::collections::BTreeSet;
use std::sync::Arc;

use reqwest::Url;
use tokio::net::TcpListener;

use super::{Authorizer, Saved};
use crate::oauth::challenge::Challenge;
use crate::oauth::flow::{self, AuthorizeParams, Callback};
use crate::oauth::metadata::{self, Reach, ResourceMetadata, ServerMetadata};
use crate::oauth::store::{ClientRegistration, Credentials, Tokens};
use crate::oauth::{AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest};

/// Where discovery says to authorize, and for what.
struct Discovered {
    /// The authorization server's metadata.
    metadata: ServerMetadata,
    /// The authorization server's issuer: as its metadata names it, else
    /// where it was found.
    issuer: String,
    /// The resource the tokens are for (RFC 8707).
    resource: String,
    /// The scopes the resource advertises; without resource metadata,
    /// none (the authorization server's whole list is not what this server
    /// needs).
    scopes: Vec<String>,
}

impl Discovered {
    /// Credentials from this authorization server for `client`.
    fn credentials(&self, client: ClientRegistration, tokens: Option<Tokens>) -> Credentials {
        Credentials {
            issuer: self.issuer.clone(),
            token_endpoint: self.metadata.token_endpoint.clone(),
            resource: self.resource.clone(),
            client,
            tokens,
        }
    }
}

impl Authorizer {
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
        let found = self.discover(http, &server, *reach, &challenge).await?;
        let scope = self.scope(&challenge, &saved, &found.scopes);
        let (listeners, client) = self.prepare_client(http, &mut saved, &found).await?;

        // The user's step.
        let verifier = flow::random_text(48)?;
        let state = flow::random_text(24)?;
        let url = flow::authorization_url(&AuthorizeParams {
            metadata: &found.metadata,
            client: &client,
            scope: scope.as_deref(),
            resource: &found.resource,
            state: &state,
            challenge: &flow::code_challenge(&verifier),
        })?;
        let request = AuthorizationRequest {
            server: self.server.clone(),
            issuer: found.issuer.clone(),
            url: url.to_string(),
            redirect_uri: client.redirect_uri.clone(),
        };
        let callback = self
            .browser_step(prompt, listeners, request, &state)
            .await?;
        let code = callback.code(
            &state,
            &found.issuer,
            found
                .metadata
                .authorization_response_iss_parameter_supported,
        )?;

        let tokens = exchange_code(http, &found, &client, &code, &verifier).await?;
        self.save(&mut saved, found.credentials(client, Some(tokens)))
            .await?;
        self.clear_challenge();
        Ok(())
    }

    /// Finds the authorization server of `server`: from its
    /// protected-resource metadata (the challenge's, else at the well-known
    /// paths), else the configured metadata URL, else the server's own
    /// origin; and checks that it can be used.
    async fn discover(
        &self,
        http: &reqwest::Client,
        server: &Url,
        reach: Reach,
        challenge: &Challenge,
    ) -> Result<Discovered, String> {
        let resource_metadata = metadata::resource_metadata(
            http,
            server,
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
            None => metadata::at_path(server, "/"),
        };
        let found = metadata::server_metadata(http, &issuer, explicit.as_ref()).await?;
        let server_metadata = match found {
            Some(found) => found,
            None if resource_metadata.is_none() && explicit.is_none() => {
                metadata::assumed_metadata(server)
            }
            None => {
                return Err(format!(
                    "the authorization server {issuer} of {} publishes no metadata",
                    self.url
                ));
            }
        };
        check_server_metadata(&server_metadata, &issuer, reach)?;
        let issuer_name = if server_metadata.issuer.is_empty() {
            issuer.to_string()
        } else {
            server_metadata.issuer.clone()
        };
        Ok(Discovered {
            metadata: server_metadata,
            issuer: issuer_name,
            resource: resource_of(server, resource_metadata.as_ref()),
            scopes: resource_metadata
                .map(|m| m.scopes_supported)
                .unwrap_or_default(),
        })
    }

    /// Binds the redirect listener and picks the client to authorize as (a
    /// registration saved with this issuer is reused when its port is
    /// free). A new registration is saved at once: an authorization the
    /// user abandons does not register yet another client next time.
    async fn prepare_client(
        &self,
        http: &reqwest::Client,
        saved: &mut Saved,
        found: &Discovered,
    ) -> Result<(Vec<TcpListener>, ClientRegistration), String> {
        let previous = saved
            .credentials
            .clone()
            .filter(|c| c.issuer == found.issuer && self.config.client_id.is_none());
        let (listeners, previous) = self.listen(previous).await?;
        let port = listeners
            .first()
            .and_then(|l| l.local_addr().ok())
            .ok_or("the redirect listener has no address")?
            .port();
        let reused = previous.as_ref().map(|c| c.client.client_id.clone());
        let client = self.client(http, &found.metadata, previous, port).await?;
        if self.config.client_id.is_none() && reused.as_deref() != Some(client.client_id.as_str()) {
            self.save(saved, found.credentials(client.clone(), None))
                .await?;
        }
        Ok((listeners, client))
    }

    /// Sends the user to the authorization page through the host's
    /// `prompt` and waits, within the authorization timeout, for the
    /// browser's redirect: on `listeners`, or handed over by the host. A
    /// host prompt that panics fails this authorization, not the server's
    /// supervisor.
    async fn browser_step(
        &self,
        prompt: Arc<dyn AuthorizationPrompt>,
        listeners: Vec<TcpListener>,
        request: AuthorizationRequest,
        state: &str,
    ) -> Result<Callback, String> {
        let wait = flow::wait_for_redirect(listeners, state.to_owned());
        let asked = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            prompt.authorize(request),
        ));
        tokio::pin!(wait, asked);
        let mut opened = false;
        tokio::time::timeout(self.oauth.timeout, async {
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
        })?
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

/// Checks an authorization server before it is used: the endpoints it
/// names lead into this machine only if the server is here too, and it
/// offers PKCE with S256.
fn check_server_metadata(
    metadata: &ServerMetadata,
    issuer: &Url,
    reach: Reach,
) -> Result<(), String> {
    metadata::named_url(&metadata.token_endpoint, "the token endpoint", reach)?;
    if let Some(endpoint) = &metadata.registration_endpoint {
        metadata::named_url(endpoint, "the registration endpoint", reach)?;
    }
    if !metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m == "S256"))
    {
        return Err(format!(
            "the authorization server {issuer} does not offer PKCE with S256: refusing to authorize there"
        ));
    }
    Ok(())
}

/// The resource to ask tokens for: as its metadata names it, else the
/// server's URL without a fragment.
fn resource_of(server: &Url, resource_metadata: Option<&ResourceMetadata>) -> String {
    resource_metadata
        .and_then(|m| m.resource.clone())
        .unwrap_or_else(|| {
            let mut canonical = server.clone();
            canonical.set_fragment(None);
            canonical.to_string()
        })
}

/// Exchanges the authorization `code` for tokens, proving the PKCE
/// `verifier`.
async fn exchange_code(
    http: &reqwest::Client,
    found: &Discovered,
    client: &ClientRegistration,
    code: &str,
    verifier: &str,
) -> Result<Tokens, String> {
    let grant = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", client.redirect_uri.as_str()),
        ("code_verifier", verifier),
        ("resource", found.resource.as_str()),
    ];
    flow::token_request(http, &found.metadata.token_endpoint, client, &grant, None)
        .await
        .map_err(|e| format!("exchanging the authorization code: {}", e.message))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::oauth::{MemoryTokenStore, OAuth, OAuthClientConfig};

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

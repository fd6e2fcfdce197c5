//! One server's OAuth state: its saved credentials, refreshes, and the
//! interactive authorization when the server asks for one.

use std::sync::Mutex;

use super::challenge::Challenge;
use super::flow;
use super::metadata;
use super::store::Credentials;
use super::{OAuth, OAuthClientConfig, now_secs};

mod interactive;

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
}

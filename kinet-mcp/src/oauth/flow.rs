//! The steps of an authorization: PKCE, client registration, the loopback
//! redirect, and the token endpoint (code exchange and refresh).

use base64::Engine as _;
use reqwest::Url;
use serde::Deserialize;
use serde_json::json;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::metadata::{ServerMetadata, read_body};
use super::store::{ClientRegistration, Tokens};

/// `n` random bytes, base64url without padding.
pub(crate) fn random_text(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness from the system: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The S256 code challenge of a PKCE verifier (RFC 7636 §4.2).
pub(crate) fn code_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// Registers a public client (RFC 7591) redirecting to `redirect_uri`.
pub(crate) async fn register(
    client: &reqwest::Client,
    endpoint: &str,
    client_name: &str,
    redirect_uri: &str,
) -> Result<ClientRegistration, String> {
    let url = super::metadata::parse_url(endpoint, "the registration endpoint")?;
    // No `scope`: a client registered for some scopes could not step up to
    // others later; each authorization request names what it needs.
    let body = json!({
        "client_name": client_name,
        // A local program with a loopback redirect (OpenID DCR §2).
        "application_type": "native",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let response = client
        .post(url.clone())
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {}", crate::errors::error_chain(&e)))?;
    let status = response.status();
    let text = read_body(response, &url).await?;
    if !status.is_success() {
        return Err(format!(
            "{status} from {url} registering the client: {}; configure `oauth.clientId` for this server",
            describe_error(&text)
        ));
    }
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let registered: Registered = serde_json::from_slice(&text)
        .map_err(|e| format!("{url} answered the registration without a client id: {e}"))?;
    let method = registered.token_endpoint_auth_method.unwrap_or_else(|| {
        if registered.client_secret.is_some() {
            "client_secret_basic".into()
        } else {
            "none".into()
        }
    });
    Ok(ClientRegistration {
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        redirect_uri: redirect_uri.to_owned(),
        token_endpoint_auth_method: method,
    })
}

/// What the authorization request needs.
pub(crate) struct AuthorizeParams<'a> {
    pub(crate) metadata: &'a ServerMetadata,
    pub(crate) client: &'a ClientRegistration,
    pub(crate) scope: Option<&'a str>,
    pub(crate) resource: &'a str,
    pub(crate) state: &'a str,
    pub(crate) challenge: &'a str,
}

/// The URL the user opens.
pub(crate) fn authorization_url(params: &AuthorizeParams<'_>) -> Result<Url, String> {
    let mut url = super::metadata::parse_url(
        &params.metadata.authorization_endpoint,
        "the authorization endpoint",
    )?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &params.client.client_id)
            .append_pair("redirect_uri", &params.client.redirect_uri)
            .append_pair("code_challenge", params.challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", params.state)
            .append_pair("resource", params.resource);
        if let Some(scope) = params.scope {
            query.append_pair("scope", scope);
        }
    }
    Ok(url)
}

/// What came back to the redirect URI.
#[derive(Debug, Default)]
pub(crate) struct Callback {
    pub(crate) code: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) error_description: Option<String>,
    pub(crate) iss: Option<String>,
}

impl Callback {
    /// The parameters of a redirect URL (or of its path and query).
    pub(crate) fn from_url(url: &str) -> Result<Self, String> {
        let parsed = Url::parse(url)
            .or_else(|_| Url::parse(&format!("http://127.0.0.1{url}")))
            .map_err(|e| format!("`{url}` is not a redirect URL: {e}"))?;
        let mut callback = Self::default();
        for (name, value) in parsed.query_pairs() {
            let slot = match name.as_ref() {
                "code" => &mut callback.code,
                "state" => &mut callback.state,
                "error" => &mut callback.error,
                "error_description" => &mut callback.error_description,
                "iss" => &mut callback.iss,
                _ => continue,
            };
            slot.get_or_insert_with(|| value.into_owned());
        }
        Ok(callback)
    }

    /// The code, once the state, issuer and outcome are checked (`iss` must
    /// be there when the authorization server said it sends it).
    pub(crate) fn code(
        self,
        state: &str,
        issuer: &str,
        iss_required: bool,
    ) -> Result<String, String> {
        if self.state.as_deref() != Some(state) {
            return Err(
                "the redirect carried another authorization's state: refused (start the sign-in again)"
                    .into(),
            );
        }
        if iss_required && self.iss.is_none() {
            return Err(
                "the redirect carried no issuer though the authorization server sends one: refused (RFC 9207)"
                    .into(),
            );
        }
        // A plain string comparison (RFC 9207 §2.4): no normalisation.
        if let Some(iss) = &self.iss
            && !issuer.is_empty()
            && iss != issuer
        {
            return Err(format!(
                "the redirect came from the issuer `{}`, not `{issuer}`: refused (RFC 9207)",
                super::metadata::printable(iss)
            ));
        }
        if let Some(error) = self.error {
            let detail = self
                .error_description
                .map(|d| format!(" ({})", super::metadata::printable(&d)))
                .unwrap_or_default();
            return Err(if error == "access_denied" {
                format!("the user declined the authorization{detail}")
            } else {
                format!(
                    "the authorization server refused: {}{detail}",
                    super::metadata::printable(&error)
                )
            });
        }
        self.code
            .filter(|c| !c.is_empty())
            .ok_or_else(|| "the redirect carried no authorization code".to_owned())
    }
}

/// Waits on `listeners` for the browser's redirect to `/callback` with
/// `state`. Each connection is served on its own (a client that connects
/// and says nothing holds up no one) and for at most 2 s; other requests
/// are answered and ignored, so a page cannot end the wait with a forged
/// state. The listeners close when the returned future is dropped.
pub(crate) async fn wait_for_redirect(listeners: Vec<TcpListener>, state: String) -> Callback {
    let (found, mut first) = tokio::sync::mpsc::channel::<Callback>(1);
    let state = std::sync::Arc::new(state);
    let mut tasks = tokio::task::JoinSet::new();
    for listener in listeners {
        let found = found.clone();
        let state = std::sync::Arc::clone(&state);
        tasks.spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, say: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                // Reap finished connections; bound the ones in flight.
                while connections.try_join_next().is_some() {}
                if connections.len() >= 64 {
                    continue;
                }
                let found = found.clone();
                let state = std::sync::Arc::clone(&state);
                connections.spawn(async move {
                    if let Some(callback) = serve_redirect(stream, &state).await {
                        let _ = found.send(callback).await;
                    }
                });
            }
        });
    }
    drop(found);
    let callback = first.recv().await;
    tasks.abort_all();
    // The listeners' tasks never end on their own, so the channel stays
    // open until a redirect comes.
    callback.unwrap_or_default()
}

/// Answers one connection; the callback when it is the awaited redirect.
async fn serve_redirect(mut stream: tokio::net::TcpStream, state: &str) -> Option<Callback> {
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    let read = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let line = String::from_utf8_lossy(&request);
    let target = line
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("GET "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("");
    let ours = read.is_ok() && (target == "/callback" || target.starts_with("/callback?"));
    let callback = ours.then(|| Callback::from_url(target).ok()).flatten();
    let matches = callback
        .as_ref()
        .is_some_and(|c| c.state.as_deref() == Some(state));
    let (status, body) = match &callback {
        Some(c) if matches && c.error.is_none() => (
            "200 OK",
            "Authorization complete. You can close this window.",
        ),
        Some(_) if matches => (
            "200 OK",
            "Authorization was not granted. You can close this window.",
        ),
        Some(_) => (
            "400 Bad Request",
            "This sign-in link is stale; start again.",
        ),
        None => ("404 Not Found", "Not found."),
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
    callback.filter(|_| matches)
}

/// A refused token request: the OAuth error code, and the words for it.
#[derive(Debug)]
pub(crate) struct TokenError {
    /// `invalid_grant` and the like; `None` for transport failures.
    pub(crate) code: Option<String>,
    pub(crate) message: String,
}

/// POSTs a token request (`grant` fields plus the client's
/// authentication) and reads the tokens; what the answer leaves out of a
/// refresh (the refresh token, the scope) stays as in `previous`.
pub(crate) async fn token_request(
    client: &reqwest::Client,
    endpoint: &str,
    registration: &ClientRegistration,
    grant: &[(&str, &str)],
    previous: Option<&Tokens>,
) -> Result<Tokens, TokenError> {
    let transport = |message: String| TokenError {
        code: None,
        message,
    };
    let url = super::metadata::parse_url(endpoint, "the token endpoint").map_err(transport)?;
    let mut form: Vec<(&str, &str)> = grant.to_vec();
    let mut request = client
        .post(url.clone())
        .header(reqwest::header::ACCEPT, "application/json");
    match (
        registration.token_endpoint_auth_method.as_str(),
        registration.client_secret.as_deref(),
    ) {
        ("client_secret_basic", Some(secret)) => {
            // RFC 6749 §2.3.1: form-encoded before base64.
            let user: String =
                url::form_urlencoded::byte_serialize(registration.client_id.as_bytes()).collect();
            let pass: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
            request = request.basic_auth(user, Some(pass));
        }
        ("client_secret_post", Some(secret)) => {
            form.push(("client_id", &registration.client_id));
            form.push(("client_secret", secret));
        }
        _ => form.push(("client_id", &registration.client_id)),
    }
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = request
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| {
            transport(format!(
                "cannot reach {url}: {}",
                crate::errors::error_chain(&e)
            ))
        })?;
    let status = response.status();
    let text = read_body(response, &url).await.map_err(transport)?;
    if !status.is_success() {
        let code = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
        return Err(TokenError {
            code,
            message: format!("{status} from {url}: {}", describe_error(&text)),
        });
    }
    #[derive(Deserialize)]
    struct Issued {
        access_token: String,
        #[serde(default)]
        token_type: Option<String>,
        #[serde(default)]
        expires_in: Option<u64>,
        #[serde(default)]
        refresh_token: Option<String>,
        #[serde(default)]
        scope: Option<String>,
    }
    let issued: Issued = serde_json::from_slice(&text)
        .map_err(|e| transport(format!("{url} answered without an access token: {e}")))?;
    match &issued.token_type {
        Some(kind) if kind.eq_ignore_ascii_case("bearer") => {}
        Some(kind) => {
            return Err(transport(format!(
                "{url} issued a `{}` token; only Bearer tokens are supported",
                super::metadata::printable(kind)
            )));
        }
        None => {
            return Err(transport(format!(
                "{url} answered without a token_type (RFC 6749 §5.1)"
            )));
        }
    }
    Ok(Tokens {
        access_token: issued.access_token,
        // A server that does not rotate keeps the one we had.
        refresh_token: issued
            .refresh_token
            .or_else(|| previous.and_then(|p| p.refresh_token.clone())),
        expires_at: issued
            .expires_in
            .map(|s| crate::oauth::now_secs().saturating_add(s)),
        // RFC 6749 §5.1: no scope in the answer means the same scope.
        scope: issued
            .scope
            .or_else(|| previous.and_then(|p| p.scope.clone())),
    })
}

/// An OAuth error body in words (`error: description`), or its start.
fn describe_error(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(error) = value.get("error").and_then(|e| e.as_str())
    {
        return match value.get("error_description").and_then(|d| d.as_str()) {
            Some(description) => super::metadata::printable(&format!("{error}: {description}")),
            None => super::metadata::printable(error),
        };
    }
    let short = super::metadata::printable(&String::from_utf8_lossy(body));
    if short.trim().is_empty() {
        "no details".into()
    } else {
        short
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_matches_rfc_7636_appendix_b() {
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let verifier = random_text(32).unwrap();
        assert_eq!(verifier.len(), 43);
        assert_ne!(verifier, random_text(32).unwrap());
    }

    /// Connections that say nothing, or ask for something else, do not
    /// keep the real redirect from being served.
    #[tokio::test]
    async fn idle_and_stray_connections_do_not_hold_up_the_redirect() {
        use tokio::io::AsyncWriteExt as _;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let waiting = tokio::spawn(wait_for_redirect(vec![listener], "s".into()));
        let mut idle = Vec::new();
        for _ in 0..5 {
            idle.push(
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap(),
            );
        }
        let mut stray = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        stray
            .write_all(b"GET /callback?code=x&state=forged HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let mut real = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        real.write_all(b"GET /callback?code=c&state=s HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let callback = waiting.await.unwrap();
        assert_eq!(callback.code.as_deref(), Some("c"));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        drop(idle);
    }

    #[test]
    fn a_redirect_is_checked_before_its_code_is_used() {
        let ok = Callback::from_url(
            "http://127.0.0.1:5/callback?code=c1&state=s&iss=https%3A%2F%2Fa.example%2F",
        )
        .unwrap();
        assert_eq!(ok.code("s", "https://a.example/", true).unwrap(), "c1");
        // A plain string comparison: the same issuer spelled otherwise is
        // another issuer (RFC 9207 §2.4).
        let slashed = Callback::from_url(
            "http://127.0.0.1:5/callback?code=c1&state=s&iss=https%3A%2F%2Fa.example%2F",
        )
        .unwrap();
        let error = slashed.code("s", "https://a.example", true).unwrap_err();
        assert!(error.contains("RFC 9207"), "{error}");
        let forged = Callback::from_url("/callback?code=c1&state=other").unwrap();
        assert!(forged.code("s", "", false).unwrap_err().contains("state"));
        let mixed =
            Callback::from_url("/callback?code=c1&state=s&iss=https://evil.example").unwrap();
        let error = mixed.code("s", "https://a.example", false).unwrap_err();
        assert!(error.contains("RFC 9207"), "{error}");
        let missing = Callback::from_url("/callback?code=c1&state=s").unwrap();
        let error = missing.code("s", "https://a.example", true).unwrap_err();
        assert!(error.contains("RFC 9207"), "{error}");
        let denied = Callback::from_url("/callback?error=access_denied&state=s").unwrap();
        assert!(
            denied
                .code("s", "", false)
                .unwrap_err()
                .contains("declined")
        );
        let empty = Callback::from_url("/callback?state=s").unwrap();
        assert!(empty.code("s", "", false).is_err());
    }
}

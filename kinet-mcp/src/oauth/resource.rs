//! The MCP server's side of OAuth 2.1: a resource server ([`ResourceServer`])
//! that publishes its metadata (RFC 9728), checks each request's access
//! token (a JWT against the authorization server's keys, or RFC 7662
//! introspection), insists the token was issued for this server (RFC 8707
//! audience) and names who asked ([`Principal`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Who an authenticated request comes from: the token's subject at its
/// issuer. The MCP server binds each conversation to it and hands it to
/// the agent it serves (as a [`ToolCtx`](kinet_core::ToolCtx) extension,
/// and to [`McpServerBuilder::agent_for`](crate::McpServerBuilder::agent_for)
/// to choose, say, the principal's memory scope).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Principal {
    /// The token's `sub`: never empty.
    pub subject: String,
    /// The authorization server that issued the token.
    pub issuer: String,
    /// The OAuth client the token was issued to, when it says.
    pub client_id: Option<String>,
    /// The scopes granted.
    pub scopes: Vec<String>,
}

impl Principal {
    /// A principal (for hosts that authenticate requests themselves, and
    /// for tests).
    pub fn new(subject: impl Into<String>, issuer: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            issuer: issuer.into(),
            client_id: None,
            scopes: Vec::new(),
        }
    }

    /// The string a conversation's owner is stored as: issuer and subject.
    pub(crate) fn owner(&self) -> String {
        format!("{} {}", self.issuer, self.subject)
    }
}

/// Why a request's token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token: 401 with the metadata's address and no error code.
    Missing,
    /// A token that is expired, forged, for another resource or unknown:
    /// 401 `invalid_token`.
    Invalid(String),
    /// A valid token without the scopes required: 403
    /// `insufficient_scope`.
    Scope(String),
    /// The authorization server could not be asked: 503.
    Unavailable(String),
}

/// How tokens are checked.
enum Check {
    /// JWTs signed by the issuer's keys (fetched from `jwks_uri`, again
    /// when a token names a key not seen yet, at most once a minute).
    Jwt { jwks_uri: String, keys: Mutex<Keys> },
    /// RFC 7662 introspection with the resource server's own client
    /// credentials (HTTP Basic); answers kept for up to 30 s.
    Introspection {
        endpoint: String,
        client_id: String,
        client_secret: String,
        answers: Mutex<HashMap<[u8; 32], (Instant, Principal)>>,
    },
}

#[derive(Default)]
struct Keys {
    set: Option<jsonwebtoken::jwk::JwkSet>,
    fetched: Option<Instant>,
}

/// The MCP server as an OAuth 2.1 resource server, as the MCP
/// authorization spec (2025-06-18 and later) describes it; give it to
/// [`McpServerBuilder::oauth`](crate::McpServerBuilder::oauth).
///
/// - `/.well-known/oauth-protected-resource` (and the same with the
///   resource's path appended, RFC 9728 §3.1) says which authorization
///   servers issue tokens for it and which scopes it knows.
/// - A request without a token gets 401 with
///   `WWW-Authenticate: Bearer resource_metadata="..."`; with an expired,
///   forged, unknown token or one issued for another resource (its
///   audience is not this server's `resource`), 401 with
///   `error="invalid_token"`; without the required scopes, 403 with
///   `error="insufficient_scope"`.
/// - A valid token's subject becomes the request's [`Principal`].
///
/// JWTs must be signed with an asymmetric algorithm (RS*, PS*, ES*,
/// EdDSA) by a key of the issuer's JWKS, carry `iss` (the issuer given),
/// `aud` (containing `resource`), `exp` and a non-empty `sub`; clocks may
/// differ by the leeway (default 30 s).
///
/// ```
/// use kinet_mcp::oauth::ResourceServer;
///
/// let resource = ResourceServer::jwt(
///     "https://agents.example.com/mcp",
///     "https://login.example.com/",
///     "https://login.example.com/jwks",
/// )
/// .scopes_supported(["mcp"])
/// .require_scopes(["mcp"]);
/// # drop(resource);
/// ```
pub struct ResourceServer {
    resource: String,
    issuer: String,
    scopes_supported: Vec<String>,
    required: Vec<String>,
    leeway: Duration,
    check: Check,
    http: reqwest::Client,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.resource)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    fn with(resource: String, issuer: String, check: Check) -> Self {
        Self {
            resource,
            issuer,
            scopes_supported: Vec::new(),
            required: Vec::new(),
            leeway: Duration::from_secs(30),
            check,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }

    /// Tokens are JWTs from `issuer`, signed by a key of its JWKS at
    /// `jwks_uri`; `resource` is this server's canonical URL (the MCP
    /// endpoint clients call, e.g. `https://agents.example.com/mcp`), the
    /// audience tokens must name.
    pub fn jwt(
        resource: impl Into<String>,
        issuer: impl Into<String>,
        jwks_uri: impl Into<String>,
    ) -> Self {
        Self::with(
            resource.into(),
            issuer.into(),
            Check::Jwt {
                jwks_uri: jwks_uri.into(),
                keys: Mutex::new(Keys::default()),
            },
        )
    }

    /// Tokens are asked about at `endpoint` (RFC 7662) with this server's
    /// client credentials; an answer must say `active`, name `resource` in
    /// its `aud` and carry a non-empty `sub`. Answers are kept for up to
    /// 30 s (a revoked token may work that long).
    pub fn introspection(
        resource: impl Into<String>,
        issuer: impl Into<String>,
        endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self::with(
            resource.into(),
            issuer.into(),
            Check::Introspection {
                endpoint: endpoint.into(),
                client_id: client_id.into(),
                client_secret: client_secret.into(),
                answers: Mutex::new(HashMap::new()),
            },
        )
    }

    /// The scopes the metadata lists. Default: none listed.
    pub fn scopes_supported(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes_supported = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Scopes every token must have. Default: none.
    pub fn require_scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.required = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// How far clocks may differ when `exp` and `nbf` are checked.
    /// Default: 30 s.
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The resource (this server's canonical URL).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The metadata document (RFC 9728).
    pub(crate) fn metadata(&self) -> Value {
        let mut document = json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        });
        if !self.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(self.scopes_supported);
        }
        document
    }

    /// The path of the metadata with the resource's path appended
    /// (`/.well-known/oauth-protected-resource/mcp`), where clients look
    /// first.
    pub(crate) fn metadata_path(&self) -> String {
        let path = url::Url::parse(&self.resource)
            .map(|url| url.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        format!("/.well-known/oauth-protected-resource{path}")
    }

    /// The metadata's full URL, as `WWW-Authenticate` gives it.
    pub(crate) fn metadata_url(&self) -> String {
        match url::Url::parse(&self.resource) {
            Ok(url) => format!(
                "{}{}",
                url.origin().ascii_serialization(),
                self.metadata_path()
            ),
            Err(_) => self.metadata_path(),
        }
    }

    /// The principal `token` stands for, or why it is refused.
    pub(crate) async fn authenticate(&self, token: Option<&str>) -> Result<Principal, Refusal> {
        let token = token.filter(|t| !t.is_empty()).ok_or(Refusal::Missing)?;
        let principal = match &self.check {
            Check::Jwt { jwks_uri, keys } => self.check_jwt(token, jwks_uri, keys).await?,
            Check::Introspection {
                endpoint,
                client_id,
                client_secret,
                answers,
            } => {
                self.introspect(token, endpoint, client_id, client_secret, answers)
                    .await?
            }
        };
        let missing: Vec<&str> = self
            .required
            .iter()
            .filter(|scope| !principal.scopes.contains(scope))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::Scope(missing.join(" ")));
        }
        Ok(principal)
    }

    async fn check_jwt(
        &self,
        token: &str,
        jwks_uri: &str,
        keys: &Mutex<Keys>,
    ) -> Result<Principal, Refusal> {
        use jsonwebtoken::{Algorithm, DecodingKey, Validation};
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::Invalid(format!("the token is not a JWT: {e}")))?;
        let asymmetric = matches!(
            header.alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
                | Algorithm::ES256
                | Algorithm::ES384
                | Algorithm::EdDSA
        );
        if !asymmetric {
            return Err(Refusal::Invalid(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            )));
        }
        let jwk = self.key(jwks_uri, keys, header.kid.as_deref()).await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| Refusal::Invalid(format!("the signing key cannot be used: {e}")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[&self.resource]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "sub", "aud", "iss"]);
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Refusal::Invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
                ErrorKind::InvalidAudience => format!(
                    "the token was not issued for this server (its audience is not {})",
                    self.resource
                ),
                ErrorKind::InvalidSignature => "the token's signature is not valid".to_owned(),
                ErrorKind::InvalidIssuer => {
                    format!("the token was not issued by {}", self.issuer)
                }
                _ => format!("the token is not valid: {e}"),
            })
        })?;
        principal(
            &self.issuer,
            data.claims.sub,
            data.claims.client_id,
            data.claims.scope,
        )
    }

    /// The JWK `kid` names (or the only one), fetching the set when it is
    /// not known yet (at most once a minute after the first time).
    async fn key(
        &self,
        jwks_uri: &str,
        keys: &Mutex<Keys>,
        kid: Option<&str>,
    ) -> Result<jsonwebtoken::jwk::Jwk, Refusal> {
        let mut keys = keys.lock().await;
        let find = |set: &jsonwebtoken::jwk::JwkSet| match kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        };
        if let Some(found) = keys.set.as_ref().and_then(find) {
            return Ok(found);
        }
        let stale = keys
            .fetched
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
        if stale {
            let set: jsonwebtoken::jwk::JwkSet = self
                .http
                .get(jwks_uri)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| {
                    Refusal::Unavailable(format!(
                        "the authorization server's keys ({jwks_uri}) cannot be fetched: {e}"
                    ))
                })?
                .json()
                .await
                .map_err(|e| Refusal::Unavailable(format!("{jwks_uri} is not a JWK set: {e}")))?;
            keys.set = Some(set);
            keys.fetched = Some(Instant::now());
        }
        keys.set
            .as_ref()
            .and_then(find)
            .ok_or_else(|| Refusal::Invalid("the token's signing key is not the issuer's".into()))
    }

    async fn introspect(
        &self,
        token: &str,
        endpoint: &str,
        client_id: &str,
        client_secret: &str,
        answers: &Mutex<HashMap<[u8; 32], (Instant, Principal)>>,
    ) -> Result<Principal, Refusal> {
        use sha2::Digest;
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        {
            let mut answers = answers.lock().await;
            answers.retain(|_, (until, _)| *until > Instant::now());
            if let Some((_, principal)) = answers.get(&digest) {
                return Ok(principal.clone());
            }
        }
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let answer: Introspected = self
            .http
            .post(endpoint)
            .basic_auth(client_id, Some(client_secret))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| {
                Refusal::Unavailable(format!(
                    "the authorization server's introspection ({endpoint}) failed: {e}"
                ))
            })?
            .json()
            .await
            .map_err(|e| {
                Refusal::Unavailable(format!("{endpoint} answered no introspection: {e}"))
            })?;
        if !answer.active {
            return Err(Refusal::Invalid(
                "the token is not active (expired, revoked or unknown)".into(),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if answer
            .exp
            .is_some_and(|exp| exp.saturating_add(self.leeway.as_secs()) < now)
        {
            return Err(Refusal::Invalid("the token has expired".into()));
        }
        if !answer.aud.contains(&self.resource) {
            return Err(Refusal::Invalid(format!(
                "the token was not issued for this server (its audience is not {})",
                self.resource
            )));
        }
        if answer.iss.as_deref().is_some_and(|iss| iss != self.issuer) {
            return Err(Refusal::Invalid(format!(
                "the token was not issued by {}",
                self.issuer
            )));
        }
        let principal = principal(
            &self.issuer,
            answer.sub.unwrap_or_default(),
            answer.client_id,
            answer.scope,
        )?;
        // Kept until it expires, 30 s at most.
        let keep = answer.exp.map_or(Duration::from_secs(30), |exp| {
            Duration::from_secs(exp.saturating_sub(now).min(30))
        });
        let mut answers = answers.lock().await;
        if answers.len() < 10_000 {
            answers.insert(digest, (Instant::now() + keep, principal.clone()));
        }
        Ok(principal)
    }
}

fn principal(
    issuer: &str,
    subject: String,
    client_id: Option<String>,
    scope: Option<String>,
) -> Result<Principal, Refusal> {
    if subject.trim().is_empty() {
        return Err(Refusal::Invalid("the token names no subject".into()));
    }
    Ok(Principal {
        subject,
        issuer: issuer.to_owned(),
        client_id,
        scopes: scope
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    })
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

/// An RFC 7662 answer.
#[derive(Deserialize)]
struct Introspected {
    #[serde(default)]
    active: bool,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default, deserialize_with = "one_or_many")]
    aud: Vec<String>,
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
        None => Vec::new(),
    })
}

/// The `WWW-Authenticate` value for a refusal.
pub(crate) fn challenge(server: &ResourceServer, refusal: &Refusal) -> String {
    let quoted = |text: &str| text.replace(['"', '\\'], "'");
    let metadata = server.metadata_url();
    match refusal {
        Refusal::Missing | Refusal::Unavailable(_) => {
            format!("Bearer resource_metadata=\"{metadata}\"")
        }
        Refusal::Invalid(why) => format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"{}\"",
            quoted(why)
        ),
        Refusal::Scope(scopes) => format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"insufficient_scope\", scope=\"{}\"",
            quoted(scopes)
        ),
    }
}

/// Shared by the gate.
pub(crate) type SharedResourceServer = Arc<ResourceServer>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lives_where_rfc_9728_puts_it() {
        let server = ResourceServer::jwt("https://a.example/mcp", "https://login.example/", "x")
            .scopes_supported(["mcp"]);
        assert_eq!(
            server.metadata_path(),
            "/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            server.metadata_url(),
            "https://a.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(server.metadata()["resource"], "https://a.example/mcp");
        assert_eq!(server.metadata()["scopes_supported"][0], "mcp");
        let challenge = challenge(&server, &Refusal::Invalid("a \"quoted\" reason".into()));
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(challenge.contains("a 'quoted' reason"), "{challenge}");
    }
}

#[cfg(test)]
mod send_check {
    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn authenticate_is_send() {
        let server = super::ResourceServer::jwt("a", "b", "c");
        let future = server.authenticate(Some("x"));
        assert_send(&future);
    }
}

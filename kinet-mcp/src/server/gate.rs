//! The checks in front of the streamable HTTP endpoint: the `Origin` of
//! browser requests (DNS-rebinding and cross-site protection, as the MCP
//! transport spec requires), the bearer token (its scheme in any case, as
//! RFC 7235 says), and a session DELETE answered with 200 rather than 202.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{AUTHORIZATION, ORIGIN, WWW_AUTHENTICATE};

/// What a request must show.
pub(super) struct Gate {
    /// The bearer token, when one is required.
    pub(super) token: Option<Arc<str>>,
    /// The resource server checking OAuth access tokens, when configured
    /// (instead of a static token).
    pub(super) oauth: Option<crate::oauth::resource::SharedResourceServer>,
    /// Origins allowed besides loopback ones (`http://localhost:*` style
    /// entries allow any port).
    pub(super) origins: Arc<[String]>,
}

/// Whether a browser page at `origin` may call the server: a loopback
/// origin always, others when listed.
pub(super) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let listed = allowed.iter().any(|entry| match entry.strip_suffix(":*") {
        Some(prefix) => {
            origin == prefix
                || origin
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|port| {
                        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                    })
        }
        None => origin.eq_ignore_ascii_case(entry),
    });
    if listed {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") {
        return false;
    }
    let host = if let Some(bracketed) = rest.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// `Authorization: <scheme> <token>` with the scheme `bearer` in any case.
pub(super) fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(char::is_whitespace)?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

pub(super) async fn check(gate: Arc<Gate>, request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &gate.origins) {
            return (
                StatusCode::FORBIDDEN,
                format!("origin `{origin}` is not allowed: the server accepts loopback origins and those the host allows"),
            )
                .into_response();
        }
    }
    let mut request = request;
    if let Some(server) = &gate.oauth {
        let given = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
            .map(str::to_owned);
        match server.authenticate(given.as_deref()).await {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
            }
            Err(refusal) => {
                use crate::oauth::resource::{Refusal, challenge};
                let (status, body) = match &refusal {
                    Refusal::Missing => (
                        StatusCode::UNAUTHORIZED,
                        "an access token is required: see the resource metadata".to_owned(),
                    ),
                    Refusal::Invalid(why) => (StatusCode::UNAUTHORIZED, why.clone()),
                    Refusal::Scope(scopes) => (
                        StatusCode::FORBIDDEN,
                        format!("the token lacks the scopes {scopes}"),
                    ),
                    Refusal::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()),
                };
                let mut response = (status, body).into_response();
                if let Ok(value) = http::HeaderValue::from_str(&challenge(server, &refusal)) {
                    response.headers_mut().insert(WWW_AUTHENTICATE, value);
                }
                return response;
            }
        }
    } else if let Some(token) = &gate.token {
        let given = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        if !given.is_some_and(|given| same(given, token)) {
            return (
                StatusCode::UNAUTHORIZED,
                [(WWW_AUTHENTICATE, "Bearer")],
                "a valid bearer token is required",
            )
                .into_response();
        }
    }
    let delete = request.method() == http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_schemes() {
        let none: Vec<String> = Vec::new();
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert!(origin_allowed(ok, &none), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
            "file://localhost",
        ] {
            assert!(!origin_allowed(bad, &none), "{bad}");
        }
        let listed = vec![
            "https://app.example.com".to_owned(),
            "http://dev.example:*".to_owned(),
        ];
        assert!(origin_allowed("https://app.example.com", &listed));
        assert!(origin_allowed("http://dev.example:5173", &listed));
        assert!(!origin_allowed("http://dev.example:5173x", &listed));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER   abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}

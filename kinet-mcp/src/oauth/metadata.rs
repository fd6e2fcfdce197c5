//! Finding the authorization server: protected-resource metadata (RFC
//! 9728) and authorization-server metadata (RFC 8414, OpenID discovery).

use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

/// Longest metadata or token answer read.
const MAX_BODY: usize = 1 << 20;

/// What an MCP server says about itself as a protected resource.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ResourceMetadata {
    #[serde(default)]
    pub(crate) resource: Option<String>,
    #[serde(default)]
    pub(crate) authorization_servers: Vec<String>,
    #[serde(default)]
    pub(crate) scopes_supported: Vec<String>,
}

/// An authorization server's endpoints and abilities.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ServerMetadata {
    #[serde(default)]
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    #[serde(default)]
    pub(crate) registration_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub(crate) token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// The redirect must carry `iss` (RFC 9207).
    #[serde(default)]
    pub(crate) authorization_response_iss_parameter_supported: bool,
}

/// The HTTP client of the OAuth requests: bounded, and following no
/// redirects (a metadata or token answer is taken from where it was asked).
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// A URL with the user's words for a bad one.
pub(crate) fn parse_url(text: &str, what: &str) -> Result<Url, String> {
    let url =
        Url::parse(text).map_err(|e| format!("{what} `{}` is not a URL: {e}", printable(text)))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err(format!(
            "{what} `{url}` is plain HTTP: OAuth needs HTTPS except on this machine"
        )),
        other => Err(format!("{what} `{url}` uses `{other}`, not HTTPS")),
    }
}

/// A URL a server named for discovery or registration, for a server at
/// `server`: only a server on this machine may send the client to this
/// machine or a private network (a remote one cannot use the client to
/// reach services behind it). Literal addresses and `localhost` are
/// checked; names that resolve to private addresses are not.
pub(crate) fn named_url(text: &str, what: &str, server: &Url) -> Result<Url, String> {
    let url = parse_url(text, what)?;
    if !is_loopback(server) && is_internal(&url) {
        return Err(format!(
            "{what} `{url}` points into this machine or a private network, and {server} is not on it: refused"
        ));
    }
    Ok(url)
}

fn is_internal(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => {
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                // Shared address space (RFC 6598).
                || (ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64)
        }
        Some(url::Host::Ipv6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private() || v4.is_link_local())
        }
        None => true,
    }
}

/// Server-supplied text fit to show: control characters dropped, at most
/// 300 characters.
pub(crate) fn printable(text: &str) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
    if text.chars().filter(|c| !c.is_control()).count() > 300 {
        out.push('…');
    }
    out
}

pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// GETs `url` as JSON: `Ok(None)` when it is not there (4xx), an error
/// when it cannot be read.
pub(crate) async fn get_json(client: &reqwest::Client, url: &Url) -> Result<Option<Value>, String> {
    let response = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .header("MCP-Protocol-Version", "2025-06-18")
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {}", crate::errors::error_chain(&e)))?;
    let status = response.status();
    if status.is_client_error() || status.is_redirection() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("{status} from {url}"));
    }
    let body = read_body(response, url).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| format!("{url} did not answer with JSON: {e}"))
}

/// The body, at most [`MAX_BODY`] bytes.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    url: &Url,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {url}: {}", crate::errors::error_chain(&e)))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("{url} answered with more than 1 MiB"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The protected-resource metadata: at the challenge's
/// `resource_metadata`, else at the well-known paths for the server URL
/// (path-aware first). `None` when the server publishes none.
pub(crate) async fn resource_metadata(
    client: &reqwest::Client,
    server: &Url,
    from_challenge: Option<&str>,
) -> Result<Option<ResourceMetadata>, String> {
    let mut candidates = Vec::new();
    if let Some(url) = from_challenge {
        candidates.push(named_url(url, "the server's resource_metadata", server)?);
    }
    // Also the well-known paths, should the challenge's URL have nothing.
    candidates.extend(well_known(server, "oauth-protected-resource", false));
    for candidate in candidates {
        if let Some(json) = get_json(client, &candidate).await? {
            let metadata: ResourceMetadata = serde_json::from_value(json)
                .map_err(|e| format!("{candidate} is not protected-resource metadata: {e}"))?;
            match &metadata.resource {
                Some(resource) if same_resource(resource, server) => {}
                Some(resource) => {
                    return Err(format!(
                        "{candidate} describes `{}`, not {server}: refusing to get tokens for another resource (RFC 9728 §3.3)",
                        printable(resource)
                    ));
                }
                None => {
                    return Err(format!(
                        "{candidate} names no resource: refusing it (RFC 9728 §3.3)"
                    ));
                }
            }
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

/// Whether the resource identifier `resource` is the server URL itself
/// (a trailing slash aside; no query or fragment).
fn same_resource(resource: &str, server: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    resource.origin() == server.origin()
        && resource.path().trim_end_matches('/') == server.path().trim_end_matches('/')
        && resource.query().is_none()
        && resource.fragment().is_none()
}

/// The authorization server's metadata: from `explicit` when configured,
/// else from the RFC 8414 and OpenID well-known paths of `issuer`. `None`
/// when none is published.
pub(crate) async fn server_metadata(
    client: &reqwest::Client,
    issuer: &Url,
    explicit: Option<&Url>,
) -> Result<Option<ServerMetadata>, String> {
    let candidates = match explicit {
        Some(url) => vec![url.clone()],
        None => {
            let mut urls = well_known(issuer, "oauth-authorization-server", true);
            urls.extend(well_known(issuer, "openid-configuration", true));
            if issuer.path().trim_end_matches('/').is_empty() {
                urls.truncate(2);
            } else {
                // OpenID Connect Discovery's own form: appended to the path.
                let mut appended = issuer.clone();
                appended.set_path(&format!(
                    "{}/.well-known/openid-configuration",
                    issuer.path().trim_end_matches('/')
                ));
                urls.push(appended);
            }
            urls.dedup();
            urls
        }
    };
    for candidate in candidates {
        if let Some(json) = get_json(client, &candidate).await? {
            let metadata: ServerMetadata = serde_json::from_value(json)
                .map_err(|e| format!("{candidate} is not authorization-server metadata: {e}"))?;
            if explicit.is_none() && !same_issuer(&metadata.issuer, issuer) {
                return Err(format!(
                    "{candidate} names the issuer `{}`, not {issuer}: refusing it (RFC 8414 §3.3)",
                    printable(&metadata.issuer)
                ));
            }
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

/// The endpoints a server without metadata is assumed to have (MCP
/// 2025-03-26): `/authorize`, `/token` and `/register` at its origin.
pub(crate) fn assumed_metadata(server: &Url) -> ServerMetadata {
    let at = |path: &str| {
        let mut url = server.clone();
        url.set_path(path);
        url.set_query(None);
        url.set_fragment(None);
        url.to_string()
    };
    ServerMetadata {
        issuer: at("/"),
        authorization_endpoint: at("/authorize"),
        token_endpoint: at("/token"),
        registration_endpoint: Some(at("/register")),
        code_challenge_methods_supported: Some(vec!["S256".into()]),
        ..ServerMetadata::default()
    }
}

fn same_issuer(named: &str, asked: &Url) -> bool {
    named.trim_end_matches('/') == asked.as_str().trim_end_matches('/')
}

/// `<origin>/.well-known/<name><path>`, then (for resources) the root form.
fn well_known(url: &Url, name: &str, issuer: bool) -> Vec<Url> {
    let path = url.path().trim_end_matches('/');
    let mut urls = Vec::new();
    let mut at = |p: String| {
        let mut u = url.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        urls.push(u);
    };
    if !path.is_empty() {
        at(format!("/.well-known/{name}{path}"));
    }
    if !issuer || path.is_empty() {
        at(format!("/.well-known/{name}"));
    }
    urls
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn strings(urls: Vec<Url>) -> Vec<String> {
        urls.into_iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn well_known_paths_follow_rfc_9728_and_8414() {
        let server = Url::parse("https://x.example/api/mcp?q=1").unwrap();
        assert_eq!(
            strings(well_known(&server, "oauth-protected-resource", false)),
            [
                "https://x.example/.well-known/oauth-protected-resource/api/mcp",
                "https://x.example/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = Url::parse("https://auth.example/tenant1").unwrap();
        assert_eq!(
            strings(well_known(&issuer, "oauth-authorization-server", true)),
            ["https://auth.example/.well-known/oauth-authorization-server/tenant1"]
        );
        let root = Url::parse("https://auth.example/").unwrap();
        assert_eq!(
            strings(well_known(&root, "openid-configuration", true)),
            ["https://auth.example/.well-known/openid-configuration"]
        );
    }

    #[test]
    fn a_resource_must_be_the_server_itself() {
        let server = Url::parse("https://x.example/mcp/").unwrap();
        assert!(same_resource("https://x.example/mcp", &server));
        assert!(same_resource("https://x.example/mcp/", &server));
        assert!(!same_resource("https://x.example", &server), "wider");
        assert!(!same_resource("https://x.example/m", &server), "a prefix");
        assert!(!same_resource("https://x.example/other", &server));
        assert!(!same_resource("https://evil.example/mcp", &server));
        assert!(!same_resource("http://x.example/mcp", &server));
        assert!(!same_resource("https://x.example/mcp?a=1", &server));
    }

    #[test]
    fn a_remote_server_cannot_point_the_client_inward() {
        let remote = Url::parse("https://mcp.example/mcp").unwrap();
        let local = Url::parse("http://127.0.0.1:8000/mcp").unwrap();
        for inward in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "https://10.0.0.8/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://100.64.0.1/x",
            "https://db.localhost/x",
        ] {
            assert!(named_url(inward, "u", &remote).is_err(), "{inward}");
        }
        assert!(named_url("https://auth.example/x", "u", &remote).is_ok());
        assert!(named_url("http://127.0.0.1:9/x", "u", &local).is_ok());
    }

    #[test]
    fn server_text_is_made_printable() {
        assert_eq!(printable("a\u{1b}[31mb\nc"), "a[31mbc");
        assert_eq!(printable(&"x".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn plain_http_is_for_this_machine_only() {
        assert!(parse_url("http://127.0.0.1:9/t", "x").is_ok());
        assert!(parse_url("http://localhost/t", "x").is_ok());
        assert!(parse_url("http://[::1]/t", "x").is_ok());
        assert!(parse_url("http://auth.example/t", "x").is_err());
        assert!(parse_url("file:///etc/passwd", "x").is_err());
    }
}

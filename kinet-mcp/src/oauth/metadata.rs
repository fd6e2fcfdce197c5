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

/// Where a server may send the client. A server on this machine or in a
/// private network may name addresses there (its authorization server is
/// likely beside it); a public one only public addresses, so it cannot use
/// the client to reach services behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    Anywhere,
    PublicOnly,
}

impl Reach {
    /// The reach of the server at `server` (its name resolved once).
    pub(crate) async fn of(server: &Url) -> Self {
        let inward = match server.host() {
            Some(url::Host::Domain(name)) => {
                is_local_name(name)
                    || tokio::net::lookup_host((name, 0))
                        .await
                        .is_ok_and(|mut addrs| addrs.any(|a| is_internal_ip(a.ip())))
            }
            Some(url::Host::Ipv4(ip)) => is_internal_ip(ip.into()),
            Some(url::Host::Ipv6(ip)) => is_internal_ip(ip.into()),
            None => false,
        };
        if inward {
            Self::Anywhere
        } else {
            Self::PublicOnly
        }
    }
}

/// The HTTP client of the OAuth requests: bounded, and following no
/// redirects (a metadata or token answer is taken from where it was asked).
/// For [`Reach::PublicOnly`], names are resolved to public addresses only,
/// and the connection goes to the addresses checked.
pub(crate) fn http_client(reach: Reach) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none());
    if reach == Reach::PublicOnly {
        builder = builder.dns_resolver(std::sync::Arc::new(PublicOnly));
    }
    builder
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// A resolver that keeps public addresses only.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if is_local_name(&host) {
                return Err(inward_name(&host));
            }
            let public: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !is_internal_ip(a.ip()))
                .collect();
            if public.is_empty() {
                return Err(inward_name(&host));
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn inward_name(host: &str) -> Box<dyn std::error::Error + Send + Sync> {
    format!("`{host}` resolves only into this machine or a private network, and the MCP server is not there: refused").into()
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

/// A URL a server named for discovery or registration: with
/// [`Reach::PublicOnly`], not into this machine or a private network
/// (literal addresses and `localhost` here; names through the client's
/// resolver).
pub(crate) fn named_url(text: &str, what: &str, reach: Reach) -> Result<Url, String> {
    let url = parse_url(text, what)?;
    if reach == Reach::PublicOnly && is_internal(&url) {
        return Err(format!(
            "{what} `{url}` points into this machine or a private network, and the MCP server is not there: refused"
        ));
    }
    Ok(url)
}

fn is_local_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

fn is_internal(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => is_local_name(d),
        Some(url::Host::Ipv4(ip)) => is_internal_ip(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_internal_ip(ip.into()),
        None => true,
    }
}

/// Loopback, private, link-local, unspecified, broadcast, shared (RFC
/// 6598), unique-local IPv6 and IPv4-mapped forms of those.
fn is_internal_ip(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(ip) => {
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                || (ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64)
        }
        std::net::IpAddr::V6(ip) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_internal_ip(v4.into()))
        }
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
    reach: Reach,
) -> Result<Option<ResourceMetadata>, String> {
    let mut candidates = Vec::new();
    if let Some(url) = from_challenge {
        candidates.push(named_url(url, "the server's resource_metadata", reach)?);
    }
    // Also the well-known paths, should the challenge's URL have nothing.
    candidates.extend(well_known(server, "oauth-protected-resource", false));
    for candidate in candidates {
        if let Some(json) = get_json(client, &candidate).await? {
            let metadata: ResourceMetadata = serde_json::from_value(json)
                .map_err(|e| format!("{candidate} is not protected-resource metadata: {e}"))?;
            // RFC 9728 §3.3: the resource is the identifier the well-known
            // suffix was put after: the server URL, or its origin for the
            // metadata at the root (which describes the whole origin).
            let at_root = candidate.path() == "/.well-known/oauth-protected-resource";
            match &metadata.resource {
                Some(resource) if same_resource(resource, server) => {}
                Some(resource) if at_root && is_origin_of(resource, server) => {}
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

/// Whether `resource` is the bare origin of `server` (the identifier of
/// metadata published at the origin's root).
fn is_origin_of(resource: &str, server: &Url) -> bool {
    Url::parse(resource).is_ok_and(|resource| {
        resource.origin() == server.origin()
            && resource.path().trim_end_matches('/').is_empty()
            && resource.query().is_none()
            && resource.fragment().is_none()
    })
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
            let path = issuer.path().trim_end_matches('/');
            if !path.is_empty() {
                // OpenID Connect Discovery's own form: appended to the path.
                urls.push(at_path(
                    issuer,
                    &format!("{path}/.well-known/openid-configuration"),
                ));
            }
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
    let at = |path: &str| at_path(server, path).to_string();
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

/// `url`'s origin with `path` (no query or fragment).
pub(crate) fn at_path(url: &Url, path: &str) -> Url {
    let mut at = url.clone();
    at.set_path(path);
    at.set_query(None);
    at.set_fragment(None);
    at
}

/// `<origin>/.well-known/<name><path>`, then (for resources) the root form.
fn well_known(url: &Url, name: &str, issuer: bool) -> Vec<Url> {
    let path = url.path().trim_end_matches('/');
    let mut urls = Vec::new();
    if !path.is_empty() {
        urls.push(at_path(url, &format!("/.well-known/{name}{path}")));
    }
    if !issuer || path.is_empty() {
        urls.push(at_path(url, &format!("/.well-known/{name}")));
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
        // Metadata at the origin's root describes the origin.
        assert!(is_origin_of("https://x.example", &server));
        assert!(is_origin_of("https://x.example/", &server));
        assert!(!is_origin_of("https://x.example/m", &server));
        assert!(!is_origin_of("https://evil.example", &server));
        assert!(!is_origin_of("http://x.example", &server));
    }

    #[tokio::test]
    async fn a_remote_server_cannot_point_the_client_inward() {
        let remote = Reach::of(&Url::parse("https://203.0.113.7/mcp").unwrap()).await;
        let local = Reach::of(&Url::parse("http://127.0.0.1:8000/mcp").unwrap()).await;
        assert_eq!(remote, Reach::PublicOnly);
        assert_eq!(local, Reach::Anywhere);
        assert_eq!(
            Reach::of(&Url::parse("https://10.1.2.3/mcp").unwrap()).await,
            Reach::Anywhere
        );
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
            assert!(named_url(inward, "u", remote).is_err(), "{inward}");
        }
        assert!(named_url("https://auth.example/x", "u", remote).is_ok());
        assert!(named_url("http://127.0.0.1:9/x", "u", local).is_ok());
    }

    /// A name is checked where it resolves: `localhost` (and names under
    /// it) never reach a public-only client, and the request fails before
    /// anything is sent.
    #[tokio::test]
    async fn names_resolving_inward_are_refused_by_the_public_client() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move { listener.accept().await.is_ok() });
        let client = http_client(Reach::PublicOnly).unwrap();
        for name in ["localhost", "db.localhost"] {
            let error = client
                .get(format!("http://{name}:{port}/x"))
                .send()
                .await
                .unwrap_err();
            let text = crate::errors::error_chain(&error);
            assert!(text.contains("refused"), "{text}");
        }
        assert!(!accepted.is_finished(), "nothing may connect");
        accepted.abort();
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

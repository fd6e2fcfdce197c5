//! `web_search`: pluggable search backends with fallback.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use reqwest::Url;
use schemars::JsonSchema;
use serde::Deserialize;

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchResult {
    /// The page title.
    pub title: String,
    /// The page URL.
    pub url: String,
    /// The snippet the engine shows.
    pub snippet: String,
}

/// A search backend failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{backend}: {message}")]
pub struct SearchError {
    /// The backend's name.
    pub backend: String,
    /// What happened.
    pub message: String,
}

/// A web search engine.
#[async_trait]
pub trait SearchBackend: Send + Sync {
    /// A short name for messages.
    fn name(&self) -> &str;
    /// Up to `limit` results for `query`.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, SearchError>;
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .user_agent("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126 Safari/537.36")
        .build()
        .unwrap_or_default()
}

async fn get_text(backend: &str, request: reqwest::RequestBuilder) -> Result<String, SearchError> {
    let error = |message: String| SearchError {
        backend: backend.to_owned(),
        message,
    };
    let response = request.send().await.map_err(|e| error(e.to_string()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(error(format!("HTTP {status}")));
    }
    response.text().await.map_err(|e| error(e.to_string()))
}

fn text_of(element: scraper::ElementRef<'_>) -> String {
    element
        .text()
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn selector(css: &str) -> Option<scraper::Selector> {
    scraper::Selector::parse(css).ok()
}

/// Bing's HTML results page.
#[derive(Debug, Clone)]
pub struct BingHtml {
    base_url: String,
    client: reqwest::Client,
}

impl BingHtml {
    /// Bing at `base_url` (`https://www.bing.com`; a loopback URL in tests).
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            client: http_client(),
        }
    }
}

impl Default for BingHtml {
    fn default() -> Self {
        Self::new("https://www.bing.com")
    }
}

/// Bing wraps result links as `/ck/a?...&u=a1<base64url of the target>`.
fn unwrap_bing_link(href: &str) -> String {
    let Ok(url) = Url::parse(href) else {
        return href.to_owned();
    };
    if !url.path().starts_with("/ck/a") {
        return href.to_owned();
    }
    url.query_pairs()
        .find(|(k, _)| k == "u")
        .and_then(|(_, v)| {
            let encoded = v.strip_prefix("a1").unwrap_or(&v).to_owned();
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded.trim_end_matches('='))
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| href.to_owned())
}

/// Parses Bing's results page: organic results are `li.b_algo` with the
/// link in `h2 a` and the snippet in `.b_caption p`; ads are `li.b_ad`.
pub fn parse_bing(html: &str) -> Vec<SearchResult> {
    let document = scraper::Html::parse_document(html);
    let (Some(items), Some(link), Some(caption), Some(paragraph)) = (
        selector("li.b_algo"),
        selector("h2 a"),
        selector(".b_caption p"),
        selector("p"),
    ) else {
        return Vec::new();
    };
    document
        .select(&items)
        .filter_map(|item| {
            let anchor = item.select(&link).next()?;
            let href = anchor.value().attr("href")?;
            let snippet = item
                .select(&caption)
                .next()
                .or_else(|| item.select(&paragraph).next())
                .map(text_of)
                .unwrap_or_default();
            Some(SearchResult {
                title: text_of(anchor),
                url: unwrap_bing_link(href),
                snippet,
            })
        })
        .filter(|r| !r.title.is_empty() && r.url.starts_with("http"))
        .collect()
}

#[async_trait]
impl SearchBackend for BingHtml {
    fn name(&self) -> &str {
        "bing"
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, SearchError> {
        let request = self.client.get(format!(
            "{}/search?q={}&count={limit}",
            self.base_url.trim_end_matches('/'),
            urlencode(query)
        ));
        let html = get_text("bing", request).await?;
        let mut results = parse_bing(&html);
        results.truncate(limit);
        Ok(results)
    }
}

/// DuckDuckGo's HTML-only results page.
#[derive(Debug, Clone)]
pub struct DuckDuckGoHtml {
    base_url: String,
    client: reqwest::Client,
}

impl DuckDuckGoHtml {
    /// DuckDuckGo at `base_url` (`https://html.duckduckgo.com`).
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            client: http_client(),
        }
    }
}

impl Default for DuckDuckGoHtml {
    fn default() -> Self {
        Self::new("https://html.duckduckgo.com")
    }
}

/// DuckDuckGo wraps links as `//duckduckgo.com/l/?uddg=<encoded target>`.
fn unwrap_ddg_link(href: &str) -> String {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_owned()
    };
    Url::parse(&absolute)
        .ok()
        .and_then(|url| {
            url.query_pairs()
                .find(|(k, _)| k == "uddg")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or(absolute)
}

/// Parses DuckDuckGo's HTML results: `.result` blocks (ads carry
/// `.result--ad`) with `a.result__a` and `.result__snippet`.
pub fn parse_duckduckgo(html: &str) -> Vec<SearchResult> {
    let document = scraper::Html::parse_document(html);
    let (Some(items), Some(link), Some(snippet)) = (
        selector("div.result:not(.result--ad)"),
        selector("a.result__a"),
        selector(".result__snippet"),
    ) else {
        return Vec::new();
    };
    document
        .select(&items)
        .filter_map(|item| {
            let anchor = item.select(&link).next()?;
            let href = anchor.value().attr("href")?;
            Some(SearchResult {
                title: text_of(anchor),
                url: unwrap_ddg_link(href),
                snippet: item
                    .select(&snippet)
                    .next()
                    .map(text_of)
                    .unwrap_or_default(),
            })
        })
        .filter(|r| !r.title.is_empty() && r.url.starts_with("http"))
        .collect()
}

#[async_trait]
impl SearchBackend for DuckDuckGoHtml {
    fn name(&self) -> &str {
        "duckduckgo"
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, SearchError> {
        let request = self
            .client
            .post(format!("{}/html/", self.base_url.trim_end_matches('/')))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(format!("q={}", urlencode(query)));
        let html = get_text("duckduckgo", request).await?;
        let mut results = parse_duckduckgo(&html);
        results.truncate(limit);
        Ok(results)
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Which JSON search API a [`JsonApi`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonApiKind {
    /// SearXNG: `GET /search?q=..&format=json`, `results[].{title,url,content}`.
    SearXng,
    /// Brave Search: `GET /res/v1/web/search?q=..` with `X-Subscription-Token`,
    /// `web.results[].{title,url,description}`.
    Brave,
    /// Tavily: `POST /search` `{api_key, query, max_results}`,
    /// `results[].{title,url,content}`.
    Tavily,
}

/// A JSON search API for users with keys (or their own SearXNG).
#[derive(Debug, Clone)]
pub struct JsonApi {
    kind: JsonApiKind,
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
}

impl JsonApi {
    /// An API of `kind` at `base_url`.
    pub fn new(kind: JsonApiKind, base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self {
            kind,
            base_url: base_url.into(),
            api_key,
            client: http_client(),
        }
    }
}

#[async_trait]
impl SearchBackend for JsonApi {
    fn name(&self) -> &str {
        match self.kind {
            JsonApiKind::SearXng => "searxng",
            JsonApiKind::Brave => "brave",
            JsonApiKind::Tavily => "tavily",
        }
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, SearchError> {
        let base = self.base_url.trim_end_matches('/');
        let request = match self.kind {
            JsonApiKind::SearXng => self
                .client
                .get(format!("{base}/search?q={}&format=json", urlencode(query))),
            JsonApiKind::Brave => self
                .client
                .get(format!(
                    "{base}/res/v1/web/search?q={}&count={limit}",
                    urlencode(query)
                ))
                .header(
                    "X-Subscription-Token",
                    self.api_key.clone().unwrap_or_default(),
                )
                .header(reqwest::header::ACCEPT, "application/json"),
            JsonApiKind::Tavily => self
                .client
                .post(format!("{base}/search"))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(
                    serde_json::json!({
                        "api_key": self.api_key,
                        "query": query,
                        "max_results": limit,
                    })
                    .to_string(),
                ),
        };
        let text = get_text(self.name(), request).await?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| SearchError {
            backend: self.name().to_owned(),
            message: format!("invalid JSON: {e}"),
        })?;
        let (items, snippet_key) = match self.kind {
            JsonApiKind::Brave => (json.pointer("/web/results"), "description"),
            _ => (json.get("results"), "content"),
        };
        let field = |item: &serde_json::Value, key: &str| {
            item.get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        Ok(items
            .and_then(|v| v.as_array())
            .map(|items| {
                items
                    .iter()
                    .map(|item| SearchResult {
                        title: field(item, "title"),
                        url: field(item, "url"),
                        snippet: field(item, snippet_key),
                    })
                    .filter(|r| !r.url.is_empty())
                    .take(limit)
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// Arguments of `web_search`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebSearchArgs {
    /// The search query.
    pub query: String,
    /// Only results from these domains (subdomains included).
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Never results from these domains (subdomains included).
    #[serde(default)]
    pub blocked_domains: Vec<String>,
}

/// Searches the web: backends are tried in order until one returns results
/// (default: Bing, then DuckDuckGo).
#[derive(Clone)]
pub struct WebSearchTool {
    backends: Vec<Arc<dyn SearchBackend>>,
    max_results: usize,
}

impl std::fmt::Debug for WebSearchTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearchTool")
            .field(
                "backends",
                &self.backends.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for WebSearchTool {
    fn default() -> Self {
        Self::new(vec![
            Arc::new(BingHtml::default()),
            Arc::new(DuckDuckGoHtml::default()),
        ])
    }
}

impl WebSearchTool {
    /// Tries `backends` in this order; 10 results at most.
    pub fn new(backends: Vec<Arc<dyn SearchBackend>>) -> Self {
        Self {
            backends,
            max_results: 10,
        }
    }
}

fn domain_matches(url: &str, domain: &str) -> bool {
    let domain = domain
        .trim()
        .trim_start_matches("www.")
        .to_ascii_lowercase();
    Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.to_ascii_lowercase()))
        .is_some_and(|host| {
            let host = host.trim_start_matches("www.");
            host == domain || host.ends_with(&format!(".{domain}"))
        })
}

#[async_trait]
impl Tool for WebSearchTool {
    type Args = WebSearchArgs;

    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Searches the web and returns titles, links and snippets. Use allowed_domains or \
         blocked_domains to narrow the sources; fetch promising results with web_fetch."
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }

    /// The pipeline stops a search after this long: every backend's HTTP
    /// client gives up after 20 s, and two backends may be tried.
    fn timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(45))
    }

    async fn call(&self, args: WebSearchArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.query.trim().is_empty() {
            return Err(ToolError::invalid_arguments("the query is empty"));
        }
        // Domain filters are also passed to the engine as `site:` terms.
        let mut query = args.query.clone();
        if args.allowed_domains.len() == 1 {
            query.push_str(&format!(" site:{}", args.allowed_domains[0]));
        }
        let mut failures = Vec::new();
        for backend in &self.backends {
            let found = ctx
                .bounded(
                    &format!("the search on {}", backend.name()),
                    backend.search(&query, self.max_results * 2),
                )
                .await?;
            match found {
                Ok(results) if !results.is_empty() => {
                    let results: Vec<SearchResult> = results
                        .into_iter()
                        .filter(|r| {
                            (args.allowed_domains.is_empty()
                                || args
                                    .allowed_domains
                                    .iter()
                                    .any(|d| domain_matches(&r.url, d)))
                                && !args
                                    .blocked_domains
                                    .iter()
                                    .any(|d| domain_matches(&r.url, d))
                        })
                        .take(self.max_results)
                        .collect();
                    if results.is_empty() {
                        failures.push(format!(
                            "{}: no results within the domain filters",
                            backend.name()
                        ));
                        continue;
                    }
                    let mut text =
                        format!("Results from {} for \"{}\":\n", backend.name(), args.query);
                    for (n, r) in results.iter().enumerate() {
                        text.push_str(&format!("{}. {}\n   {}\n", n + 1, r.title, r.url));
                        if !r.snippet.is_empty() {
                            text.push_str(&format!("   {}\n", r.snippet));
                        }
                    }
                    return Ok(ToolOutput::text(text.trim_end().to_owned()));
                }
                Ok(_) => failures.push(format!("{}: no results", backend.name())),
                Err(error) => failures.push(error.to_string()),
            }
        }
        Err(ToolError::failed(format!(
            "no search results for \"{}\" ({})",
            args.query,
            failures.join("; ")
        )))
    }
}

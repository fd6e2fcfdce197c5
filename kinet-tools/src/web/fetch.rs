//! `web_fetch`: a page as clean markdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use reqwest::Url;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

use super::markdown::html_to_markdown;

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchArgs {
    /// The http(s) URL to fetch.
    pub url: String,
    /// What you are looking for on the page (shown with the result, to keep
    /// the reading focused).
    #[serde(default)]
    pub prompt: Option<String>,
}

/// A remote reader service (Jina Reader style: `GET <base>/<url>` returns
/// the page as markdown), tried before local conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderBackend {
    /// The service root, e.g. `https://r.jina.ai`.
    pub base_url: String,
    /// Sent as a bearer token.
    pub api_key: Option<String>,
}

/// Settings of `web_fetch`. Every field documents its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebFetchConfig {
    /// Whole-request time limit. Default 30 s.
    pub timeout: Duration,
    /// Largest body accepted. Default 5 MiB.
    pub max_bytes: usize,
    /// Redirects followed on the same host. Default 5.
    pub max_redirects: usize,
    /// How long a fetched page is served from memory. Default 15 min.
    pub cache_ttl: Duration,
    /// A remote reader tried first; local conversion is the fallback.
    /// Default none.
    pub reader: Option<ReaderBackend>,
    /// The User-Agent header. Default `kinet-web-fetch/<version>`.
    pub user_agent: String,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            max_bytes: 5 * 1024 * 1024,
            max_redirects: 5,
            cache_ttl: Duration::from_secs(15 * 60),
            reader: None,
            user_agent: format!("kinet-web-fetch/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Fetches a URL: HTML becomes clean markdown locally (main content found
/// readability-style, then converted; scripts, styles and navigation
/// dropped), text and JSON pass through, PDFs and binaries get a clear
/// error. A redirect to another host is reported, not followed.
#[derive(Debug, Clone)]
pub struct WebFetchTool {
    client: reqwest::Client,
    config: WebFetchConfig,
    cache: Arc<Mutex<HashMap<String, (Instant, ToolOutput)>>>,
}

impl Default for WebFetchTool {
    fn default() -> Self {
        Self::new(WebFetchConfig::default())
    }
}

impl WebFetchTool {
    /// A tool with these settings.
    pub fn new(config: WebFetchConfig) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(config.user_agent.clone())
            .build()
            .unwrap_or_default();
        Self {
            client,
            config,
            cache: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

const DESCRIPTION: &str = "\
Fetches a web page and returns its main content as markdown (navigation, scripts and \
styles removed). Plain text and JSON are returned as they are; PDFs and other binary \
files are not supported.
- Give a full http(s) URL. A redirect to another host is reported with the new URL: \
fetch that URL to continue.
- Use prompt to say what you are looking for.
- Results are cached for 15 minutes.";

/// Hosts equal up to a leading `www.`.
fn same_site(a: &Url, b: &Url) -> bool {
    let strip = |u: &Url| {
        u.host_str()
            .map(|h| h.trim_start_matches("www.").to_ascii_lowercase())
    };
    strip(a) == strip(b) && a.port_or_known_default() == b.port_or_known_default()
}

/// The charset named in a Content-Type header or an HTML `<meta>`.
fn charset(content_type: &str, head: &[u8]) -> &'static encoding_rs::Encoding {
    let from_header = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .next()
        .map(|c| c.trim_matches('"').to_owned());
    let from_meta = || {
        let head = String::from_utf8_lossy(&head[..head.len().min(2048)]).to_ascii_lowercase();
        let at = head.find("charset=")?;
        let rest = head[at + 8..].trim_start_matches(['"', '\'']);
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(rest.len());
        Some(rest[..end].to_owned())
    };
    from_header
        .or_else(from_meta)
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8)
}

enum Fetched {
    Page {
        url: Url,
        content_type: String,
        body: Vec<u8>,
    },
    Redirected {
        to: Url,
    },
}

impl WebFetchTool {
    async fn fetch(&self, start: Url, ctx: &ToolCtx) -> Result<Fetched, ToolError> {
        let mut url = start.clone();
        for _ in 0..=self.config.max_redirects {
            let response = ctx
                .bounded(
                    &format!("the request to {url}"),
                    self.client.get(url.clone()).send(),
                )
                .await?
                .map_err(|e| {
                    if e.is_timeout() {
                        ToolError::new(
                            ToolErrorKind::Timeout,
                            format!(
                                "{url} did not answer within {} s",
                                self.config.timeout.as_secs()
                            ),
                        )
                    } else {
                        ToolError::failed(format!("cannot fetch {url}: {e}"))
                    }
                })?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| {
                        ToolError::failed(format!("{url} redirected without a Location"))
                    })?;
                let next = url.join(location).map_err(|e| {
                    ToolError::failed(format!("{url} redirected to a bad URL `{location}`: {e}"))
                })?;
                if !same_site(&start, &next) {
                    return Ok(Fetched::Redirected { to: next });
                }
                url = next;
                continue;
            }
            if !status.is_success() {
                let kind = if status == reqwest::StatusCode::NOT_FOUND {
                    ToolErrorKind::NotFound
                } else {
                    ToolErrorKind::Failed
                };
                return Err(ToolError::new(
                    kind,
                    format!("{url} answered HTTP {status}"),
                ));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            if let Some(length) = response.content_length()
                && length as usize > self.config.max_bytes
            {
                return Err(self.too_large(&url));
            }
            let mut body = Vec::new();
            let mut stream = response.bytes_stream();
            loop {
                let chunk = ctx
                    .bounded(&format!("reading {url}"), stream.next())
                    .await?;
                let Some(chunk) = chunk else { break };
                let chunk = chunk.map_err(|e| {
                    if e.is_timeout() {
                        ToolError::new(
                            ToolErrorKind::Timeout,
                            format!("{url} was too slow to send the page"),
                        )
                    } else {
                        ToolError::failed(format!("reading {url} failed: {e}"))
                    }
                })?;
                if body.len() + chunk.len() > self.config.max_bytes {
                    return Err(self.too_large(&url));
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(Fetched::Page {
                url,
                content_type,
                body,
            });
        }
        Err(ToolError::failed(format!(
            "{start} redirected more than {} times",
            self.config.max_redirects
        )))
    }

    fn too_large(&self, url: &Url) -> ToolError {
        ToolError::invalid_arguments(format!(
            "{url} is larger than the {} MB limit for web_fetch",
            self.config.max_bytes / (1024 * 1024)
        ))
    }

    async fn via_reader(&self, reader: &ReaderBackend, url: &Url) -> Option<String> {
        let mut request = self
            .client
            .get(format!("{}/{url}", reader.base_url.trim_end_matches('/')));
        if let Some(key) = &reader.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let text = response.text().await.ok()?;
        (!text.trim().is_empty()).then_some(text)
    }
}

#[async_trait]
impl Tool for WebFetchTool {
    type Args = WebFetchArgs;

    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }

    /// The pipeline stops a fetch after this long (30 s by default).
    fn timeout(&self) -> Option<Duration> {
        Some(self.config.timeout)
    }

    async fn call(&self, args: WebFetchArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let url = Url::parse(args.url.trim()).map_err(|e| {
            ToolError::invalid_arguments(format!("`{}` is not a valid URL: {e}", args.url))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::invalid_arguments(format!(
                "only http and https URLs can be fetched, not `{}`",
                url.scheme()
            )));
        }
        let key = url.to_string();
        if let Ok(cache) = self.cache.lock()
            && let Some((at, output)) = cache.get(&key)
            && at.elapsed() < self.config.cache_ttl
        {
            return Ok(with_prompt(output.clone(), args.prompt.as_deref()));
        }
        let mut output = None;
        if let Some(reader) = &self.config.reader
            && let Some(markdown) = self.via_reader(reader, &url).await
        {
            output = Some(ToolOutput::text(format!(
                "Source: {url}\n\n{}",
                markdown.trim()
            )));
        }
        let output = match output {
            Some(output) => output,
            None => match self.fetch(url.clone(), ctx).await? {
                Fetched::Redirected { to } => {
                    return Ok(ToolOutput::text(format!(
                        "{url} redirects to another host: {to}\nFetch that URL to continue if you trust it."
                    )));
                }
                Fetched::Page {
                    url,
                    content_type,
                    body,
                } => convert(&url, &content_type, &body)?,
            },
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.retain(|_, (at, _)| at.elapsed() < self.config.cache_ttl);
            cache.insert(key, (Instant::now(), output.clone()));
        }
        Ok(with_prompt(output, args.prompt.as_deref()))
    }
}

fn with_prompt(mut output: ToolOutput, prompt: Option<&str>) -> ToolOutput {
    if let Some(prompt) = prompt.filter(|p| !p.trim().is_empty()) {
        output.text = format!("(looking for: {prompt})\n{}", output.text);
    }
    output
}

/// Turns a fetched body into what the model reads.
fn convert(url: &Url, content_type: &str, body: &[u8]) -> Result<ToolOutput, ToolError> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    let text = || {
        let (text, _, _) = charset(content_type, body).decode(body);
        text.into_owned()
    };
    let looks_html = mime.is_empty() && body.iter().take(512).any(|&b| b == b'<');
    match mime {
        "text/html" | "application/xhtml+xml" => {}
        _ if looks_html => {}
        "application/pdf" => {
            return Err(ToolError::invalid_arguments(format!(
                "{url} is a PDF document; web_fetch cannot read PDFs"
            )));
        }
        m if m.starts_with("text/")
            || m.ends_with("json")
            || m.ends_with("+xml")
            || m == "application/xml" =>
        {
            return Ok(ToolOutput::text(format!(
                "Source: {url}\n\n{}",
                text().trim()
            )));
        }
        other => {
            return Err(ToolError::invalid_arguments(format!(
                "{url} is `{other}`, not a web page or text; web_fetch cannot show it"
            )));
        }
    }
    let html = text();
    let page = html_to_markdown(&html, url.as_str());
    let mut out = String::new();
    if !page.title.is_empty() {
        out.push_str(&format!("# {}\n", page.title));
    }
    out.push_str(&format!("Source: {url}\n\n{}", page.markdown));
    Ok(ToolOutput::text(out))
}

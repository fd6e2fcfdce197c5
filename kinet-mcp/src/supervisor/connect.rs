//! Connecting to one server: the transport (stdio child, streamable HTTP
//! with or without OAuth, legacy SSE), `initialize`, and the failure in
//! the user's words.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use process_wrap::tokio::CommandWrap;
#[cfg(unix)]
use process_wrap::tokio::ProcessGroup;
use rmcp::RoleClient;
use rmcp::model::ProtocolVersion;
use rmcp::service::RunningService;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{Handler, STDERR_LINE_CHARS, STDERR_LINES, ServerSlot};
use crate::config::{ServerConfig, ServerTransport};
use crate::errors::error_chain;
use crate::settings::HubSettings;

pub(super) type Connected = (RunningService<RoleClient, Handler>, Handler);

/// Starts the transport and the protocol's lifecycle: a `server/discover`
/// probe first (2026-07-28: no handshake, each request self-contained),
/// and the `initialize` handshake (2025-11-25) with a server that answers
/// the probe as a legacy one, or, when the probe itself fails (some legacy
/// servers close or refuse a connection on an unknown first request), on a
/// fresh connection.
pub(super) async fn connect(
    slot: &ServerSlot,
    settings: &HubSettings,
) -> Result<Connected, String> {
    let probe = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    };
    if slot.config.initialize_only {
        return connect_with(slot, settings, ClientLifecycleMode::Initialize)
            .await
            .map_err(|failed| failed.reason);
    }
    match connect_with(slot, settings, probe).await {
        Ok(connected) => Ok(connected),
        Err(Failed {
            reason,
            legacy_may_work: false,
        }) => Err(reason),
        Err(Failed { reason, .. }) => {
            tracing::debug!(server = %slot.config.name, "server/discover failed ({reason}); trying initialize");
            connect_with(slot, settings, ClientLifecycleMode::Initialize)
                .await
                .map_err(|failed| failed.reason)
        }
    }
}

/// A failed connection: why, and whether the legacy handshake may still
/// succeed (not after a refusal of the credentials, a missing program, or
/// when the legacy handshake was the one that failed).
struct Failed {
    reason: String,
    legacy_may_work: bool,
}

impl From<String> for Failed {
    fn from(reason: String) -> Self {
        Self {
            reason,
            legacy_may_work: false,
        }
    }
}

/// Starts the lifecycle `mode` on `transport` for `handler`.
async fn start<T, E, A>(
    handler: &Handler,
    transport: T,
    mode: &ClientLifecycleMode,
    peer: &str,
    oauth: bool,
) -> Result<RunningService<RoleClient, Handler>, Failed>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    handler
        .clone()
        .serve_with_lifecycle(transport, mode.clone())
        .await
        .map_err(|e| {
            let reason = init_error(&e, peer, oauth);
            let refused = reason.starts_with("401") || reason.starts_with("403");
            Failed {
                reason,
                legacy_may_work: !refused && *mode != ClientLifecycleMode::Initialize,
            }
        })
}

async fn connect_with(
    slot: &ServerSlot,
    settings: &HubSettings,
    mode: ClientLifecycleMode,
) -> Result<Connected, Failed> {
    if let Some(auth) = &slot.auth {
        auth.clear_challenge();
    }
    let handler = Handler {
        client_name: Arc::from(settings.client_name.as_str()),
        server: Arc::from(slot.config.name.as_str()),
        elicitation: slot.elicitation.clone(),
        updates: slot.updates.clone(),
        ..Handler::default()
    };
    match &slot.config.transport {
        ServerTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            #[allow(unused_mut)]
            let mut wrap = CommandWrap::from(cmd);
            #[cfg(unix)]
            wrap.wrap(ProcessGroup::leader());
            let (transport, stderr) = TokioChildProcess::builder(wrap)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            if let Ok(mut pid) = slot.pid.lock() {
                *pid = transport.id();
            }
            if let Ok(mut tail) = slot.stderr.lock() {
                tail.clear();
            }
            if let Some(stderr) = stderr {
                let tail = Arc::clone(&slot.stderr);
                let name = slot.config.name.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %name, "{line}");
                        if let Ok(mut tail) = tail.lock() {
                            if tail.len() == STDERR_LINES {
                                tail.pop_front();
                            }
                            tail.push_back((
                                Instant::now(),
                                line.chars().take(STDERR_LINE_CHARS).collect(),
                            ));
                        }
                    }
                });
            }
            let service = start(&handler, transport, &mode, &format!("`{command}`"), false).await?;
            Ok((service, handler))
        }
        ServerTransport::Http {
            url,
            headers,
            bearer_token,
        } => {
            let headers = with_helper_headers(&slot.config, url, headers).await?;
            let custom: HashMap<_, _> = crate::sse::header_map(&headers)?
                .into_iter()
                .filter_map(|(name, value)| Some((name?, value)))
                .collect();
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
            if let Some(token) = bearer_token {
                config = config.auth_header(token.clone());
            }
            let oauth = slot.auth.is_some();
            let service = match &slot.auth {
                Some(auth) => {
                    let client = crate::oauth::OAuthHttpClient::new(Arc::clone(auth))?;
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    start(&handler, transport, &mode, url, oauth).await?
                }
                None => {
                    let transport = StreamableHttpClientTransport::from_config(config);
                    start(&handler, transport, &mode, url, oauth).await?
                }
            };
            Ok((service, handler))
        }
        ServerTransport::Sse { url, headers } => {
            let timeout = slot
                .config
                .startup_timeout
                .unwrap_or(settings.startup_timeout);
            let mut headers = with_helper_headers(&slot.config, url, headers).await?;
            if let Some(auth) = &slot.auth
                && let Some(token) = auth.access_token().await?
            {
                // The event stream's; each POST asks for the current token.
                headers.insert("Authorization".into(), format!("Bearer {token}"));
            }
            let transport =
                crate::sse::SseTransport::connect(url, &headers, timeout, slot.auth.clone())
                    .await?;
            // The legacy SSE transport predates 2026-07-28: initialize only.
            let service = start(
                &handler,
                transport,
                &ClientLifecycleMode::Initialize,
                url,
                slot.auth.is_some(),
            )
            .await?;
            Ok((service, handler))
        }
    }
}

/// The OAuth state of `config`'s server, when the hub authorizes it: a
/// remote server with no credentials of its own (no `Authorization`
/// header, bearer token or `headersHelper`).
pub(crate) fn authorizer_for(
    config: &ServerConfig,
    oauth: &crate::oauth::OAuth,
) -> Option<Arc<crate::oauth::Authorizer>> {
    let (url, headers) = match &config.transport {
        ServerTransport::Http {
            url,
            headers,
            bearer_token: None,
        } => (url, headers),
        ServerTransport::Sse { url, headers } => (url, headers),
        _ => return None,
    };
    if config.headers_helper.is_some()
        || headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        return None;
    }
    match crate::oauth::Authorizer::new(&config.name, url, config.oauth.clone(), oauth.clone()) {
        Ok(auth) => Some(Arc::new(auth)),
        Err(reason) => {
            tracing::warn!(server = %config.name, "no OAuth for this server: {reason}");
            None
        }
    }
}

/// The configured headers with those the server's `headersHelper` prints
/// over them (run again for every connection, so expiring tokens renew).
async fn with_helper_headers(
    config: &crate::ServerConfig,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut headers = headers.clone();
    if let Some(helper) = &config.headers_helper {
        headers.extend(crate::headers_helper::run(helper, &config.name, url).await?);
    }
    Ok(headers)
}

/// A failed `initialize` in the user's terms: the HTTP status and what to
/// check, or what the transport said, without the SDK's type names.
fn init_error(error: &rmcp::service::ClientInitializeError, peer: &str, oauth: bool) -> String {
    use rmcp::service::ClientInitializeError as E;
    match error {
        E::TransportError { error, .. } => {
            let text = error_chain(&*error.error);
            if text.starts_with("Auth required") && oauth {
                format!("401 from {peer}: the server wants an OAuth authorization")
            } else if text.starts_with("Auth required") {
                format!(
                    "401 from {peer}: the server wants authorization; check the token or headers configured for it, or give the hub OAuth (HubBuilder::oauth) to authorize it"
                )
            } else if text.starts_with("Insufficient scope") {
                format!("403 from {peer}: the token lacks a scope the server needs")
            } else {
                format!("initialize failed at {peer}: {text}")
            }
        }
        E::ConnectionClosed(_) => {
            format!("{peer} closed the connection before answering initialize")
        }
        E::ExpectedInitResponse(_) | E::ExpectedInitResult(_) => format!(
            "{peer} did not answer initialize with a server description: is it an MCP server?"
        ),
        E::JsonRpcError(error) => format!(
            "{peer} refused initialize: {} (code {})",
            error.message, error.code.0
        ),
        other => format!("initialize failed at {peer}: {other}"),
    }
}

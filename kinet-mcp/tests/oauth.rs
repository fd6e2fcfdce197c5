//! OAuth 2.1 against a real authorization server: an MCP server built with
//! the Python SDK that is its own authorization server (protected-resource
//! and server metadata, dynamic registration, PKCE-checked code exchange,
//! rotating refresh tokens). Its consent is automatic, so the "browser" of
//! these tests follows the authorization page's redirect to the hub's
//! loopback listener, as a user's browser would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kinet_mcp::oauth::{
    AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest, FileTokenStore,
    MemoryTokenStore, OAuth, OAuthClientConfig,
};
use kinet_mcp::{HubSettings, McpHub, ServerConfig, ServerState};
use serde_json::json;

/// The guarded server, its port and its grant log.
struct Guarded {
    _child: tokio::process::Child,
    port: u16,
    endpoint: &'static str,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Guarded {
    async fn start(access_seconds: u64, preset_client: Option<&str>) -> Option<Self> {
        Self::start_with(access_seconds, preset_client, "streamable-http").await
    }

    async fn start_with(
        access_seconds: u64,
        preset_client: Option<&str>,
        transport: &str,
    ) -> Option<Self> {
        let python = common::python()?;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("grants.log");
        std::fs::write(&log, "").unwrap();
        let port = common::free_port();
        let mut command = tokio::process::Command::new(python);
        command
            .arg(common::peers().join("oauth_server.py"))
            .arg(port.to_string())
            .arg(&log)
            .arg(access_seconds.to_string());
        command.arg(preset_client.unwrap_or("-")).arg(transport);
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        common::wait_for_port(port, "the OAuth server").await;
        Some(Self {
            _child: child,
            port,
            endpoint: if transport == "sse" { "/sse" } else { "/mcp" },
            log,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.endpoint)
    }

    fn grants(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn count(&self, kind: &str) -> usize {
        self.grants()
            .iter()
            .filter(|g| g.split(' ').next() == Some(kind))
            .count()
    }

    async fn post(&self, path: &str) {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}{path}", self.port))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Open the page and let the browser come back to the hub's listener.
    Follow,
    /// Hand the hub the redirect URL (a pasted URL).
    Paste,
    /// Hand back a redirect carrying another state.
    Forge,
    Decline,
}

/// A browser: GETs the authorization page and follows its redirect.
struct Browser {
    mode: Mode,
    asked: AtomicUsize,
    requests: Mutex<Vec<AuthorizationRequest>>,
    /// How each authorization ended, as the hub reported it.
    ended: Mutex<Vec<Option<String>>>,
}

impl Browser {
    fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            mode,
            asked: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            ended: Mutex::new(Vec::new()),
        })
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl AuthorizationPrompt for Browser {
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request.clone());
        if self.mode == Mode::Decline {
            return AuthorizationOutcome::Declined;
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let page = client.get(&request.url).send().await.unwrap();
        assert!(page.status().is_redirection(), "{page:?}");
        let back = page.headers()["location"].to_str().unwrap().to_owned();
        assert!(back.starts_with(&request.redirect_uri), "{back}");
        match self.mode {
            Mode::Follow => {
                let answer = client.get(&back).send().await.unwrap();
                assert_eq!(answer.status(), 200);
                AuthorizationOutcome::Opened
            }
            Mode::Paste => AuthorizationOutcome::Redirected(back),
            Mode::Forge => {
                let forged = back.replace("state=", "state=forged");
                // The listener does not take it either.
                let answer = client.get(&forged).send().await.unwrap();
                assert_eq!(answer.status(), 400);
                AuthorizationOutcome::Redirected(forged)
            }
            Mode::Decline => unreachable!(),
        }
    }

    async fn finished(&self, _server: &str, error: Option<&str>) {
        self.ended.lock().unwrap().push(error.map(str::to_owned));
    }
}

fn settings() -> HubSettings {
    HubSettings {
        startup_timeout: Duration::from_secs(20),
        restart_backoff: Duration::from_millis(50),
        ..HubSettings::default()
    }
}

async fn wait_for(hub: &McpHub, done: impl Fn(&ServerState) -> bool) -> ServerState {
    let started = Instant::now();
    loop {
        let state = hub.status()[0].state.clone();
        if done(&state) {
            return state;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn ready(hub: &McpHub) {
    let state = wait_for(hub, |s| {
        matches!(s, ServerState::Ready | ServerState::Failed { .. })
    })
    .await;
    assert_eq!(state, ServerState::Ready);
}

async fn whoami(hub: &McpHub) -> Result<String, String> {
    hub.call("guarded", "whoami", json!({}))
        .await
        .map(|out| out.text)
        .map_err(|e| e.to_string())
}

fn hub(server: &Guarded, oauth: OAuth) -> McpHub {
    McpHub::builder(vec![ServerConfig::http("guarded", server.url())])
        .settings(settings())
        .oauth(oauth)
        .start()
}

/// OAuth with tokens in memory and `browser` as the prompt.
fn in_memory(browser: &Arc<Browser>) -> OAuth {
    OAuth::new()
        .store(Arc::new(MemoryTokenStore::default()))
        .prompt(browser.clone())
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_wants_oauth_is_authorized_once_and_its_tokens_are_kept() {
    let Some(server) = Guarded::start(3600, None).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kinet/mcp-oauth.json");
    let store = Arc::new(FileTokenStore::new(&file));
    let browser = Browser::new(Mode::Follow);
    let first = hub(
        &server,
        OAuth::new().store(store.clone()).prompt(browser.clone()),
    );
    ready(&first).await;
    assert_eq!(whoami(&first).await.unwrap(), "authorized");
    assert_eq!(browser.asked(), 1);
    assert_eq!(*browser.ended.lock().unwrap(), [None]);

    // What the user was sent to: PKCE S256, state, the resource, scopes.
    let request = browser.requests.lock().unwrap()[0].clone();
    assert_eq!(request.server, "guarded");
    assert!(request.redirect_uri.starts_with("http://127.0.0.1:"));
    let url = reqwest::Url::parse(&request.url).unwrap();
    let query: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["code_challenge"].len(), 43);
    assert_eq!(query["resource"], server.url());
    assert_eq!(query["scope"], "tools");
    assert!(query["state"].len() >= 32);
    // Registered dynamically, authorized for this resource, code exchanged
    // (the server checked the PKCE verifier).
    let grants = server.grants();
    assert_eq!(grants.len(), 3, "{grants:?}");
    assert!(grants[0].starts_with("register "));
    assert_eq!(
        grants[1],
        format!(
            "authorize {} tools {}",
            grants[0].trim_start_matches("register "),
            server.url()
        )
    );
    assert_eq!(grants[2], "code");

    // The tokens are on disk, for the owner only.
    assert_eq!(mode_of(&file), 0o600);
    assert_eq!(mode_of(file.parent().unwrap()), 0o700);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(saved[format!("guarded {}", server.url())]["tokens"]["access_token"].is_string());
    first.shutdown().await;

    // The next run uses them: no browser, no new registration.
    let again = Browser::new(Mode::Follow);
    let second = hub(&server, OAuth::new().store(store).prompt(again.clone()));
    ready(&second).await;
    assert_eq!(whoami(&second).await.unwrap(), "authorized");
    assert_eq!(again.asked(), 0);
    assert_eq!(server.grants().len(), 3);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_without_the_user_and_a_refused_refresh_asks_again() {
    // Access tokens live 62 s: within the minute's margin after 2 s.
    let Some(server) = Guarded::start(62, None).await else {
        return;
    };
    let browser = Browser::new(Mode::Follow);
    let hub = hub(&server, in_memory(&browser));
    ready(&hub).await;
    assert_eq!(server.count("refresh"), 0);

    // About to expire: refreshed before the request is sent.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(whoami(&hub).await.unwrap(), "authorized");
    assert!(server.count("refresh") >= 1, "{:?}", server.grants());
    assert_eq!(server.count("denied"), 0);

    // Ended early by the server: the 401 gets one refresh and a retry.
    server.post("/expire").await;
    let before = server.count("refresh");
    assert_eq!(whoami(&hub).await.unwrap(), "authorized");
    assert!(server.count("refresh") > before, "{:?}", server.grants());
    assert_eq!(browser.asked(), 1);

    // Refresh tokens revoked too: only the user can help, and is asked.
    server.post("/forget").await;
    let _ = whoami(&hub).await;
    let started = Instant::now();
    loop {
        if browser.asked() == 2 && whoami(&hub).await.as_deref() == Ok("authorized") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not authorized again: {:?} {:?}",
            hub.status()[0].state,
            server.grants()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.count("denied") >= 1, "{:?}", server.grants());
    // The registration was kept: the second authorization did not register.
    assert_eq!(server.count("register"), 1);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_server_is_authorized_the_same_way() {
    let Some(server) = Guarded::start_with(3600, None, "sse").await else {
        return;
    };
    let browser = Browser::new(Mode::Follow);
    let hub = McpHub::builder(vec![ServerConfig::sse("guarded", server.url())])
        .settings(settings())
        .oauth(in_memory(&browser))
        .start();
    ready(&hub).await;
    assert_eq!(whoami(&hub).await.unwrap(), "authorized");
    assert_eq!(browser.asked(), 1);
    let request = browser.requests.lock().unwrap()[0].clone();
    assert!(
        request.url.contains("resource=http%3A%2F%2F127.0.0.1"),
        "{}",
        request.url
    );
    assert_eq!(server.count("code"), 1);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_redirect_and_a_preregistered_client_on_a_fixed_port_work() {
    // A port of its own: the server's port + 1 may be any other socket's.
    let callback = common::free_port();
    let preset = format!("kinet-preset@{callback}");
    let Some(server) = Guarded::start(3600, Some(&preset)).await else {
        return;
    };
    let browser = Browser::new(Mode::Paste);
    let config = ServerConfig::http("guarded", server.url()).oauth(
        OAuthClientConfig::with_client_id("kinet-preset")
            .callback_port(callback)
            // Discovery skipped: the metadata named directly.
            .auth_server_metadata_url(format!(
                "http://127.0.0.1:{}/.well-known/oauth-authorization-server",
                server.port
            ))
            .scopes("tools"),
    );
    let hub = McpHub::builder(vec![config])
        .settings(settings())
        .oauth(in_memory(&browser))
        .start();
    ready(&hub).await;
    assert_eq!(whoami(&hub).await.unwrap(), "authorized");
    let request = browser.requests.lock().unwrap()[0].clone();
    assert_eq!(
        request.redirect_uri,
        format!("http://localhost:{callback}/callback")
    );
    assert_eq!(server.count("register"), 0, "{:?}", server.grants());
    assert_eq!(server.count("code"), 1);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declined_forged_and_unaskable_authorizations_fail_with_reasons() {
    let Some(server) = Guarded::start(3600, None).await else {
        return;
    };
    let failure = |hub: McpHub| async move {
        let state = wait_for(&hub, |s| matches!(s, ServerState::Failed { .. })).await;
        hub.shutdown().await;
        match state {
            ServerState::Failed { reason } => reason,
            other => panic!("{other:?}"),
        }
    };
    let memory = || Arc::new(MemoryTokenStore::default());

    let declined = failure(hub(
        &server,
        OAuth::new()
            .store(memory())
            .prompt(Browser::new(Mode::Decline)),
    ))
    .await;
    assert!(declined.contains("declined"), "{declined}");

    let forged = failure(hub(
        &server,
        OAuth::new()
            .store(memory())
            .prompt(Browser::new(Mode::Forge)),
    ))
    .await;
    assert!(forged.contains("state"), "{forged}");
    assert_eq!(server.count("code"), 0, "no code was exchanged");

    // OAuth without a way to ask the user.
    let unaskable = failure(hub(&server, OAuth::new().store(memory()))).await;
    assert!(
        unaskable.contains(&server.url()) && unaskable.contains("OAuth::prompt"),
        "{unaskable}"
    );

    // No OAuth at all: the 401 is reported with what to do.
    let plain = McpHub::builder(vec![ServerConfig::http("guarded", server.url())])
        .settings(settings())
        .start();
    let reason = failure(plain).await;
    assert!(
        reason.contains("401 from") && reason.contains("HubBuilder::oauth"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_server_that_wants_more_scope_gets_a_step_up() {
    let Some(server) = Guarded::start(3600, None).await else {
        return;
    };
    let browser = Browser::new(Mode::Follow);
    let hub = hub(&server, in_memory(&browser));
    ready(&hub).await;
    assert_eq!(whoami(&hub).await.unwrap(), "authorized");
    // From now on the server wants `admin` as well: 403 insufficient_scope
    // naming it. The call fails; the hub asks the user for the wider scope
    // (keeping what it had) and the server is ready again.
    server.post("/escalate").await;
    let refused = whoami(&hub).await.unwrap_err();
    assert!(
        refused.contains("403") || refused.contains("scope"),
        "{refused}"
    );
    let started = Instant::now();
    while !(browser.asked() == 2 && whoami(&hub).await.is_ok()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no step-up: {:?} {:?}",
            hub.status()[0].state,
            server.grants()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = browser.requests.lock().unwrap()[1].url.clone();
    let query: std::collections::HashMap<_, _> = reqwest::Url::parse(&second)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(query["scope"], "admin tools");
    assert_eq!(server.count("register"), 1, "{:?}", server.grants());
    hub.shutdown().await;
}

/// Two hubs sharing the token file (two agent processes, each with its own
/// copy in memory), both needing a refresh at once: the file's refresh
/// lock lets one refresh and the other pick up the new tokens instead of
/// spending the rotated refresh token, so nobody is asked to sign in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hubs_sharing_the_token_file_follow_each_others_refreshes() {
    let Some(server) = Guarded::start(62, None).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp-oauth.json");
    let browser = Browser::new(Mode::Follow);
    let oauth = || {
        OAuth::new()
            .store(Arc::new(FileTokenStore::new(&file)))
            .prompt(browser.clone())
    };
    let first = hub(&server, oauth());
    ready(&first).await;
    let second = hub(&server, oauth());
    ready(&second).await;
    assert_eq!(browser.asked(), 1, "the second hub used the saved tokens");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Both need a refresh at the same moment: one refreshes, the other
    // waits for it and takes the new tokens (the refresh token rotates,
    // so a second refresh with the old one would be refused).
    let (a, b) = tokio::join!(whoami(&first), whoami(&second));
    assert_eq!(a.unwrap(), "authorized");
    assert_eq!(b.unwrap(), "authorized");
    assert_eq!(server.count("refresh"), 1, "{:?}", server.grants());
    assert_eq!(server.count("denied"), 0, "{:?}", server.grants());
    assert_eq!(browser.asked(), 1);
    first.shutdown().await;
    second.shutdown().await;
}

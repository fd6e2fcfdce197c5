//! The authorization server of the OAuth tests: the Python SDK's auth
//! routes (`peers/auth_server.py`) issuing RS256 JWTs, answering RFC 7662
//! introspection, and minting test tokens.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

use kinet_mcp::oauth::ResourceServer;
use serde_json::{Value, json};

#[path = "../common/mod.rs"]
pub mod common;

/// The peers folder, from kinet-mcp's tests or the workspace's benches.
fn peers() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let nested = here.join("kinet-mcp/tests/peers");
    if nested.is_dir() {
        nested
    } else {
        here.join("tests/peers")
    }
}

/// The authorization server.
pub struct Issuer {
    _child: tokio::process::Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Issuer {
    pub async fn start() -> Option<Self> {
        let python = common::python()?;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("as.log");
        let port = common::free_port();
        let child = tokio::process::Command::new(python)
            .arg(peers().join("auth_server.py"))
            .arg(port.to_string())
            .arg(&log)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        common::wait_for_port(port, "the authorization server").await;
        Some(Self {
            _child: child,
            port,
            log,
            _dir: dir,
        })
    }

    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn jwt(&self, resource: &str) -> ResourceServer {
        ResourceServer::jwt(resource, self.issuer(), self.url("/jwks")).scopes_supported(["mcp"])
    }

    pub fn introspecting(&self, resource: &str) -> ResourceServer {
        ResourceServer::introspection(
            resource,
            self.issuer(),
            self.url("/introspect"),
            "rs",
            "rs-secret",
        )
    }

    /// A token straight from the issuer's key (or, forged, from another).
    pub async fn mint(&self, sub: &str, aud: &str, expires_in: i64, forge: bool) -> String {
        let answer: Value = reqwest::Client::new()
            .post(self.url("/test/mint"))
            .json(&json!({"sub": sub, "aud": aud, "expires_in": expires_in, "forge": forge}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["access_token"].as_str().unwrap().to_owned()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

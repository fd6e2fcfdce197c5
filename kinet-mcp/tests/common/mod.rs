//! Helpers shared by the server-side tests.
#![allow(dead_code, unreachable_pub, clippy::print_stderr)]

use std::path::PathBuf;

/// The folder of the pinned npm and Python peers.
pub fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers")
}

/// A Python with the official MCP SDK, or `None` after a loud message.
pub fn python() -> Option<String> {
    let candidates = [
        std::env::var("KINET_PYTHON").ok(),
        Some("/var/tmp/kinet-pyenv/bin/python".to_owned()),
        Some("python3".to_owned()),
    ];
    let found = candidates.into_iter().flatten().find(|python| {
        std::process::Command::new(python)
            .args(["-c", "import mcp.client.streamable_http"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        kinet_core::testing::skipped(
            "the Python MCP SDK is not installed (pip install mcp==2.3.0; .ci/test does)",
        );
    }
    found
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Waits until something listens on `port` (a peer server starting), at
/// most 30 s; `what` names it in the failure.
pub async fn wait_for_port(port: u16, what: &str) {
    let started = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{what} did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

//! Helpers shared by the MCP benches: the `add` tool they call, finding
//! the Python SDK, percentiles, and reading a peer script's JSON line.

use std::process::Command;

use kinet::core::{Tool, ToolCtx, ToolError, ToolOutput};

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct AddArgs {
    a: i64,
    b: i64,
}

/// `add`: the served tool the MCP benches call.
pub(crate) struct Add;

#[kinet::async_trait]
impl Tool for Add {
    type Args = AddArgs;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers."
    }
    fn annotations(&self) -> kinet::ToolAnnotations {
        kinet::ToolAnnotations::read_only()
    }
    async fn call(&self, args: AddArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    }
}

/// The `q` quantile of sorted samples.
/// A loopback port free a moment ago, for a peer server to listen on.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)]
}

/// A Python that imports `module` (the official MCP SDK): `KINET_PYTHON`,
/// the venv `.ci/setup` makes, or `python3`.
pub(crate) fn python(module: &str) -> Option<String> {
    let candidates = [
        std::env::var("KINET_PYTHON").ok(),
        Some("/var/tmp/kinet-pyenv/bin/python".to_owned()),
        Some("python3".to_owned()),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Runs a peer client script and reads the JSON object on its last line;
/// `None` (after saying why) when it fails.
pub(crate) fn peer_json(mut command: Command) -> Option<serde_json::Value> {
    let output = command.output().ok()?;
    if !output.status.success() {
        eprintln!("peer failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    let line = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(line.trim().lines().last()?).ok()
}

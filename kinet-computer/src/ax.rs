//! `ax_script` (macOS only): AppleScript through `osascript`.

use std::time::Duration;

use async_trait::async_trait;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `ax_script`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AxScriptArgs {
    /// The AppleScript source.
    pub script: String,
}

/// Runs AppleScript with `osascript` (UI scripting through System Events
/// needs the host to have Accessibility permission). Mutating.
#[derive(Debug, Clone, Default)]
pub struct AxScriptTool;

#[async_trait]
impl Tool for AxScriptTool {
    type Args = AxScriptArgs;
    fn name(&self) -> &str {
        "ax_script"
    }
    fn description(&self) -> &str {
        "Runs an AppleScript with osascript (macOS) and returns what it prints, e.g. to drive \
an application's menus through System Events."
    }
    async fn confirm_summary(&self, args: &AxScriptArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Run AppleScript:\n{}", args.script))
    }
    async fn call(&self, args: AxScriptArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let child = tokio::process::Command::new("/usr/bin/osascript")
            .arg("-e")
            .arg(&args.script)
            .kill_on_drop(true)
            .output();
        let output = tokio::select! {
            _ = ctx.cancellation().cancelled() => return Err(ToolError::new(kinet_core::tool::ToolErrorKind::Cancelled, "cancelled")),
            output = tokio::time::timeout(Duration::from_secs(120), child) => output
                .map_err(|_| ToolError::new(kinet_core::tool::ToolErrorKind::Timeout, "osascript did not finish within 120 s"))?
                .map_err(|e| ToolError::failed(format!("could not run /usr/bin/osascript: {e}")))?,
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(ToolOutput::text(stdout))
        } else {
            Err(ToolError::failed(format!(
                "osascript failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }
}

//! Approval: on the terminal, or automatic in the demonstration (which
//! says so every time).

use kinet::core::confirm::{ConfirmError, ConfirmRequest};
use kinet::{ConfirmDecision, ConfirmHandler, async_trait};

use super::ui::{Out, Style, Terminal};

/// Shows what a call would do: the command, or the diff of a file edit.
fn show(out: &Out, request: &ConfirmRequest) {
    out.line(&format!(
        "{} {} wants to:",
        out.paint(Style::Yellow, "┌"),
        out.paint(Style::Bold, &request.tool)
    ));
    out.diff(&out.paint(Style::Yellow, "│ "), &request.summary);
    if let Some(concern) = &request.concern {
        out.line(&format!(
            "{} {}",
            out.paint(Style::Yellow, "│"),
            out.paint(
                Style::Red,
                &format!("⚠ possible prompt injection: {concern}")
            )
        ));
    }
}

/// Asks on the terminal: y = once, a = this tool for the rest of the
/// session, n = no (with an optional reason for the model), q = end the run.
pub struct TerminalConfirm {
    pub terminal: Terminal,
    pub out: Out,
}

#[async_trait]
impl ConfirmHandler for TerminalConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let ignored = self.terminal.discard_typed_ahead().await;
        if ignored > 0 {
            self.out.line(&self.out.paint(
                Style::Dim,
                &format!("  ({ignored} line(s) typed during the turn were dropped)"),
            ));
        }
        show(&self.out, &request);
        let prompt = format!(
            "{} allow? [y]es / [a]lways for {} / [n]o / [q]uit the turn: ",
            self.out.paint(Style::Yellow, "└"),
            request.tool
        );
        let answer = self
            .terminal
            .read_line(&self.out, &prompt)
            .await
            .ok_or_else(|| ConfirmError("the terminal closed".into()))?;
        Ok(match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => ConfirmDecision::Allow,
            "a" | "always" => ConfirmDecision::AllowForSession,
            "q" | "quit" => ConfirmDecision::Abort,
            _ => {
                let reason = self
                    .terminal
                    .read_line(&self.out, "  reason for the model (optional): ")
                    .await;
                ConfirmDecision::Deny {
                    reason: reason.filter(|r| !r.trim().is_empty()),
                }
            }
        })
    }
}

/// The demonstration's handler: shows the request like the terminal one,
/// then approves it, saying so.
pub struct DemoConfirm {
    pub out: Out,
}

#[async_trait]
impl ConfirmHandler for DemoConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        show(&self.out, &request);
        self.out.line(&format!(
            "{} {}",
            self.out.paint(Style::Yellow, "└"),
            self.out.paint(
                Style::Yellow,
                "approved automatically: this is the demonstration (a real session asks you here)"
            )
        ));
        Ok(ConfirmDecision::Allow)
    }
}

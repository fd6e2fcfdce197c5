//! One task on an engine over ACP: initialize, a new session in the
//! call's working directory, one prompt, its updates; `session/cancel`
//! when the call is cancelled.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Agent as AgentRole, Lines};
use futures::{SinkExt, StreamExt as _};
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::events::Updates;
use super::serve::Served;
use super::terminals::Terminals;

/// The longest line (one message) read from an engine.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// How a task on the engine ended, short of an answer.
pub(super) enum Failure {
    /// The call was cancelled (the engine was told, then stopped).
    Cancelled,
    /// The engine did not answer `initialize` in time.
    NoStart(Duration),
    /// It broke the protocol or the connection; why.
    Protocol(String),
    /// It ended the turn with this stop reason (refusal, limits).
    Stopped(String),
}

/// What a task needs.
pub(super) struct Task {
    pub(super) prompt: String,
    pub(super) cwd: PathBuf,
    pub(super) start_timeout: Duration,
    pub(super) cancel_grace: Duration,
    pub(super) cancel: CancellationToken,
    /// Where the session's updates go, told the session's id.
    pub(super) updates: Arc<Updates>,
    /// When the engine's process was started.
    pub(super) started: std::time::Instant,
    /// What kinet offers it.
    pub(super) offers: super::Offers,
}

/// A line the engine sent that is no JSON-RPC message; kept to name it.
type Malformed = Arc<Mutex<Option<String>>>;

/// Runs `task` on the engine at the other end of `stdin`/`stdout`.
pub(super) async fn converse(
    stdin: ChildStdin,
    stdout: ChildStdout,
    served: Arc<Served>,
    terminals: Arc<Terminals>,
    task: Task,
) -> Result<(), Failure> {
    let malformed: Malformed = Arc::default();
    let seen = Arc::clone(&malformed);
    let incoming =
        FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE)).map(move |line| {
            let line = line.map_err(std::io::Error::other)?;
            if let Some(why) = not_json_rpc(&line) {
                let shown: String = line.chars().take(200).collect();
                let message = format!("{why}: {shown}");
                if let Ok(mut seen) = seen.lock() {
                    seen.get_or_insert(message.clone());
                }
                return Err(std::io::Error::other(message));
            }
            Ok(line)
        });
    let outgoing = <FramedWrite<ChildStdin, LinesCodec> as SinkExt<String>>::sink_map_err(
        FramedWrite::new(stdin, LinesCodec::new()),
        std::io::Error::other,
    );
    let transport = Lines::new(outgoing, incoming);
    let offers = task.offers;
    let result = super::client::Peer::new(served, terminals, offers)
        .builder()
        .connect_with(transport, async move |cx: ConnectionTo<AgentRole>| {
            Ok(run_task(cx, task).await)
        })
        .await;
    let said = malformed.lock().ok().and_then(|m| m.clone());
    match (result, said) {
        (_, Some(line)) => Err(Failure::Protocol(format!("it sent {line}"))),
        (Ok(outcome), None) => outcome,
        (Err(error), None) => Err(Failure::Protocol(describe(&error))),
    }
}

/// Why `line` is not one JSON-RPC 2.0 message, if it is not.
fn not_json_rpc(line: &str) -> Option<&'static str> {
    if line.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(line) {
        Err(_) => Some("a line that is not JSON"),
        Ok(serde_json::Value::Object(message)) => {
            if message.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
                Some("a message without `\"jsonrpc\": \"2.0\"`")
            } else if !message.contains_key("method")
                && !message.contains_key("result")
                && !message.contains_key("error")
            {
                Some("a message that is neither a request, a notification nor a response")
            } else {
                None
            }
        }
        Ok(_) => Some("JSON that is not one JSON-RPC message"),
    }
}

fn describe(error: &agent_client_protocol::Error) -> String {
    let mut text = error.message.clone();
    if let Some(data) = &error.data {
        text.push_str(&format!(" ({data})"));
    }
    text
}

/// The initialize, new session and prompt requests, with cancellation.
async fn run_task(cx: ConnectionTo<AgentRole>, task: Task) -> Result<(), Failure> {
    let Task {
        prompt,
        cwd,
        start_timeout,
        cancel_grace,
        cancel,
        updates,
        started,
        offers,
    } = task;
    let protocol = |e: agent_client_protocol::Error| Failure::Protocol(describe(&e));
    let capabilities = acp::ClientCapabilities::new()
        .fs(acp::FileSystemCapabilities::new()
            .read_text_file(offers.files)
            .write_text_file(false))
        .terminal(offers.terminals);
    let initialize = cx
        .send_request(
            acp::InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(capabilities)
                .client_info(acp::Implementation::new("kinet", env!("CARGO_PKG_VERSION"))),
        )
        .block_task();
    tokio::select! {
        answer = tokio::time::timeout(start_timeout, initialize) => match answer {
            Err(_) => return Err(Failure::NoStart(start_timeout)),
            Ok(answer) => {
                let answer = answer.map_err(protocol)?;
                updates.started(answer.agent_info.as_ref(), started.elapsed());
            }
        },
        () = cancel.cancelled() => return Err(Failure::Cancelled),
    }
    let session = tokio::select! {
        answer = cx.send_request(acp::NewSessionRequest::new(cwd)).block_task() => answer.map_err(protocol)?,
        () = cancel.cancelled() => return Err(Failure::Cancelled),
    };
    let session_id = session.session_id;
    updates.session(session_id.clone());
    let prompt = acp::PromptRequest::new(
        session_id.clone(),
        vec![acp::ContentBlock::Text(acp::TextContent::new(prompt))],
    );
    let answer = cx.send_request(prompt).block_task();
    tokio::pin!(answer);
    let response = tokio::select! {
        answer = &mut answer => answer.map_err(protocol)?,
        () = cancel.cancelled() => {
            // Told first, so a well-behaved engine ends its turn; stopped
            // after the grace either way.
            let _ = cx.send_notification(acp::CancelNotification::new(session_id));
            let _ = tokio::time::timeout(cancel_grace, answer).await;
            return Err(Failure::Cancelled);
        }
    };
    match response.stop_reason {
        acp::StopReason::EndTurn => Ok(()),
        acp::StopReason::Cancelled => Err(Failure::Cancelled),
        other => Err(Failure::Stopped(
            serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "unknown".into()),
        )),
    }
}

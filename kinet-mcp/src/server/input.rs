//! What a served tool asks of the MCP client that called it: a question
//! for the client's user (elicitation), a completion from the client's
//! model (sampling) or its roots, the same way on every protocol version.
//!
//! - On 2025-11-25 and older, a question is a request to the client on the
//!   open connection, answered while the tool waits.
//! - On 2026-07-28 the server may not send requests; the call ends with an
//!   `input_required` result naming the questions, and the client calls the
//!   tool again with the answers. The tool then runs again from its start,
//!   and each question already answered returns its answer at once (the
//!   answers of earlier rounds travel in a sealed `requestState`). A tool
//!   that asks should therefore ask before it acts, or act idempotently.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientCapabilities, InputRequest, InputRequiredResult};
use rmcp::service::Peer;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// A question a served tool could not get answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The client did not declare the capability the question needs.
    #[error("the MCP client cannot answer {0} (it did not declare the capability)")]
    Unsupported(&'static str),
    /// The client answered with an error, or the connection failed.
    #[error("the MCP client did not answer {what}: {reason}")]
    Failed {
        /// What was asked.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// The answer was not of the shape the question needs.
    #[error("the MCP client's answer to {what} is malformed: {reason}")]
    Malformed {
        /// What was asked.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// What the client's user did with a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElicitAction {
    /// Answered (the content holds the answer).
    Accept,
    /// Declined to answer.
    Decline,
    /// Dismissed the question.
    Cancel,
}

/// The answer to [`ClientInput::elicit`].
#[derive(Debug, Clone, PartialEq)]
pub struct Elicited {
    /// What the user did.
    pub action: ElicitAction,
    /// The answer, shaped by the schema asked with, when accepted.
    pub content: Option<Map<String, Value>>,
}

/// The MCP client that called a served tool, as the tool sees it: found in
/// the tool's context with `ctx.extension::<ClientInput>()` when the tool
/// is called through an [`McpServer`](super::McpServer).
#[derive(Clone)]
pub struct ClientInput {
    mode: Mode,
    capabilities: ClientCapabilities,
    /// The capabilities asked for that the client did not declare (a
    /// failed call then tells a 2026-07-28 client which it needs).
    missing: Arc<Mutex<BTreeMap<&'static str, Value>>>,
}

#[derive(Clone)]
enum Mode {
    /// 2025-11-25 and older: requests on the open connection.
    Direct(Peer<RoleServer>),
    /// 2026-07-28: questions gathered into an `input_required` result.
    Rounds(Arc<Rounds>),
    /// 2026-07-28, a call that may become a task: questions go in rounds
    /// until it does, then wait for `tasks/update`.
    Task(Arc<Escalation>),
}

/// A call that may become a task: its rounds until then, its task after.
pub(super) struct Escalation {
    pub(super) rounds: Arc<Rounds>,
    runner: tokio::sync::watch::Sender<Option<super::tasks::Runner>>,
    /// Woken when the tool asks to become a task.
    pub(super) wanted: Notify,
}

impl Escalation {
    pub(super) fn new(rounds: Arc<Rounds>) -> Arc<Self> {
        Arc::new(Self {
            rounds,
            runner: tokio::sync::watch::Sender::new(None),
            wanted: Notify::new(),
        })
    }

    /// The call is a task now: questions from here on wait for
    /// `tasks/update` on `runner`.
    pub(super) fn start(&self, runner: super::tasks::Runner) {
        self.runner.send_replace(Some(runner));
    }

    fn runner(&self) -> Option<super::tasks::Runner> {
        self.runner.borrow().clone()
    }
}

/// The questions and answers of one 2026-07-28 call.
pub(super) struct Rounds {
    /// Answers of earlier rounds and of this request.
    answers: BTreeMap<String, Value>,
    /// Questions asked in this round that have no answer yet.
    asked: Mutex<BTreeMap<String, Value>>,
    /// Woken when a question is asked.
    pub(super) raised: Notify,
}

impl ClientInput {
    pub(super) fn direct(peer: Peer<RoleServer>, capabilities: ClientCapabilities) -> Self {
        Self {
            mode: Mode::Direct(peer),
            capabilities,
            missing: Arc::default(),
        }
    }

    pub(super) fn task(escalation: Arc<Escalation>, capabilities: ClientCapabilities) -> Self {
        Self {
            mode: Mode::Task(escalation),
            capabilities,
            missing: Arc::default(),
        }
    }

    pub(super) fn rounds(rounds: Arc<Rounds>, capabilities: ClientCapabilities) -> Self {
        Self {
            mode: Mode::Rounds(rounds),
            capabilities,
            missing: Arc::default(),
        }
    }

    /// Ends the synchronous part of a call the server runs as a task
    /// ([`McpServerBuilder::run_as_task`](super::McpServerBuilder::run_as_task)):
    /// the client gets the task now, and the rest of the call runs in it
    /// (its questions wait for `tasks/update`). Questions a tool asks
    /// before this, or before it first waits on other work, are asked in
    /// `input_required` rounds of the `tools/call` itself. Does nothing in
    /// calls that do not run as tasks, or once the call is a task.
    pub async fn escalate_to_task(&self) {
        let Mode::Task(escalation) = &self.mode else {
            return;
        };
        let mut runner = escalation.runner.subscribe();
        if runner.borrow().is_some() {
            return;
        }
        escalation.wanted.notify_one();
        let _ = runner.wait_for(Option::is_some).await;
    }

    /// Whether the client can show its user a question.
    pub fn can_elicit(&self) -> bool {
        self.capabilities.elicitation.is_some()
    }

    /// Whether the client lends its model (sampling; deprecated by the
    /// 2026-07-28 revision, kept for 2025-11-25 clients).
    #[allow(deprecated)]
    pub fn can_sample(&self) -> bool {
        self.capabilities.sampling.is_some()
    }

    /// Whether the client lists its roots (deprecated by the 2026-07-28
    /// revision, kept for 2025-11-25 clients).
    #[allow(deprecated)]
    pub fn can_list_roots(&self) -> bool {
        self.capabilities.roots.is_some()
    }

    /// Asks the client's user a question: `schema` is the flat JSON object
    /// schema of the answer (MCP elicitation). `key` names the question
    /// within this call (on 2026-07-28 it is the `inputRequests` key; use
    /// a different key for each question a call asks).
    pub async fn elicit(
        &self,
        key: &str,
        message: impl Into<String>,
        schema: Value,
    ) -> Result<Elicited, AskError> {
        const WHAT: &str = "a question for its user";
        if !self.can_elicit() {
            return Err(self.unsupported("elicitation", WHAT));
        }
        let params = json!({"mode": "form", "message": message.into(), "requestedSchema": schema});
        let answer = self.ask(key, "elicitation/create", params, WHAT).await?;
        let malformed = |reason: String| AskError::Malformed { what: WHAT, reason };
        let action = match answer.get("action").and_then(Value::as_str) {
            Some("accept") => ElicitAction::Accept,
            Some("decline") => ElicitAction::Decline,
            Some("cancel") => ElicitAction::Cancel,
            other => return Err(malformed(format!("`action` is {other:?}"))),
        };
        let content = match answer.get("content") {
            None | Some(Value::Null) => None,
            Some(Value::Object(content)) => Some(content.clone()),
            Some(_) => return Err(malformed("`content` is not an object".into())),
        };
        Ok(Elicited { action, content })
    }

    /// Asks the client's model for a completion of `prompt` (MCP sampling,
    /// deprecated by the 2026-07-28 revision) and returns its text.
    pub async fn sample(
        &self,
        key: &str,
        prompt: impl Into<String>,
        max_tokens: u32,
    ) -> Result<String, AskError> {
        const WHAT: &str = "a sampling request";
        if !self.can_sample() {
            return Err(self.unsupported("sampling", WHAT));
        }
        let params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt.into()}}],
            "maxTokens": max_tokens,
        });
        let answer = self
            .ask(key, "sampling/createMessage", params, WHAT)
            .await?;
        let content = answer.get("content");
        // One content block, or (newer clients) a list of them.
        let blocks = match content {
            Some(Value::Array(blocks)) => blocks.iter().collect(),
            Some(block) => vec![block],
            None => Vec::new(),
        };
        let text: String = blocks
            .into_iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect();
        if content.is_none() {
            return Err(AskError::Malformed {
                what: WHAT,
                reason: "no `content`".into(),
            });
        }
        Ok(text)
    }

    /// The client's roots as `file://` URIs (deprecated by the 2026-07-28
    /// revision).
    pub async fn roots(&self, key: &str) -> Result<Vec<String>, AskError> {
        const WHAT: &str = "a request for its roots";
        if !self.can_list_roots() {
            return Err(self.unsupported("roots", WHAT));
        }
        let answer = self.ask(key, "roots/list", json!({}), WHAT).await?;
        let Some(roots) = answer.get("roots").and_then(Value::as_array) else {
            return Err(AskError::Malformed {
                what: WHAT,
                reason: "no `roots` list".into(),
            });
        };
        Ok(roots
            .iter()
            .filter_map(|root| root.get("uri").and_then(Value::as_str).map(str::to_owned))
            .collect())
    }

    /// Notes that `capability` was needed and not declared.
    fn unsupported(&self, capability: &'static str, what: &'static str) -> AskError {
        if let Ok(mut missing) = self.missing.lock() {
            missing.insert(capability, json!({}));
        }
        AskError::Unsupported(what)
    }

    /// The capabilities a question needed that the client did not declare,
    /// as the `requiredCapabilities` of a -32021 error; `None` when none.
    pub(super) fn missing(&self) -> Option<ClientCapabilities> {
        let missing = self.missing.lock().ok()?;
        if missing.is_empty() {
            return None;
        }
        serde_json::to_value(&*missing)
            .and_then(serde_json::from_value)
            .ok()
    }

    async fn ask(
        &self,
        key: &str,
        method: &'static str,
        params: Value,
        what: &'static str,
    ) -> Result<Value, AskError> {
        match &self.mode {
            Mode::Direct(peer) => direct(peer, method, params, what).await,
            // In the task once there is one, unless answered in a round
            // before it.
            Mode::Task(escalation) => match escalation.runner() {
                Some(runner) if !escalation.rounds.answers.contains_key(key) => Ok(runner
                    .ask(key, json!({"method": method, "params": params}))
                    .await),
                _ => escalation.rounds.ask(key, method, params).await,
            },
            Mode::Rounds(rounds) => rounds.ask(key, method, params).await,
        }
    }
}

/// One request to the client on the open connection.
#[allow(deprecated)]
async fn direct(
    peer: &Peer<RoleServer>,
    method: &'static str,
    params: Value,
    what: &'static str,
) -> Result<Value, AskError> {
    let malformed = |e: serde_json::Error| AskError::Malformed {
        what,
        reason: e.to_string(),
    };
    let failed = |e: rmcp::ServiceError| AskError::Failed {
        what,
        reason: e.to_string(),
    };
    let answer = match method {
        "elicitation/create" => serde_json::to_value(
            peer.create_elicitation(serde_json::from_value(params).map_err(malformed)?)
                .await
                .map_err(failed)?,
        ),
        "sampling/createMessage" => serde_json::to_value(
            peer.create_message(serde_json::from_value(params).map_err(malformed)?)
                .await
                .map_err(failed)?,
        ),
        _ => serde_json::to_value(peer.list_roots().await.map_err(failed)?),
    };
    answer.map_err(malformed)
}

/// How long the answers of a round stay valid for the next.
const STATE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// What travels in a sealed `requestState` between rounds (sealed with the
/// tool's name and the caller as associated data, so a state is good only
/// for the same tool and the same principal).
#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    answers: BTreeMap<String, Value>,
}

impl Rounds {
    /// The rounds of a call: answers from the sealed state of earlier
    /// rounds plus this request's `inputResponses`. A state that was
    /// altered, expired or sealed for another tool or caller (`bound`) is
    /// refused.
    pub(super) fn open(
        codec: &rmcp::model::RequestStateCodec,
        bound: &str,
        state: Option<&str>,
        responses: Option<&BTreeMap<String, Value>>,
    ) -> Result<Arc<Self>, McpError> {
        let mut answers = BTreeMap::new();
        if let Some(sealed) = state {
            let state: State = codec
                .open_json_with(sealed, bound.as_bytes())
                .map_err(|_| {
                    McpError::invalid_params(
                        "requestState integrity check failed: it was altered, expired, or sealed for another tool, caller or server; call the tool again without it",
                        None,
                    )
                })?;
            answers = state.answers;
        }
        for (key, answer) in responses.into_iter().flatten() {
            if !answer.is_object() {
                return Err(McpError::invalid_params(
                    format!("inputResponses.{key} must be an object (the client's result)"),
                    None,
                ));
            }
            answers.insert(key.clone(), answer.clone());
        }
        Ok(Arc::new(Self {
            answers,
            asked: Mutex::new(BTreeMap::new()),
            raised: Notify::new(),
        }))
    }

    /// `key`'s answer from an earlier round, or (when there is none) the
    /// question raised for this round's `input_required`.
    async fn ask(&self, key: &str, method: &str, params: Value) -> Result<Value, AskError> {
        if let Some(answer) = self.answers.get(key) {
            return Ok(answer.clone());
        }
        if let Ok(mut asked) = self.asked.lock() {
            asked.insert(key.to_owned(), json!({"method": method, "params": params}));
        }
        self.raised.notify_one();
        // The call ends here: the server answers `input_required` and
        // drops this call; the client calls again with answers.
        std::future::pending().await
    }

    /// How many questions are waiting for an answer.
    pub(super) fn waiting(&self) -> usize {
        self.asked.lock().map(|asked| asked.len()).unwrap_or(0)
    }

    /// The `input_required` result asking what is waiting, with the answers
    /// so far sealed into its `requestState`.
    pub(super) fn input_required(
        &self,
        codec: &rmcp::model::RequestStateCodec,
        bound: &str,
    ) -> Result<InputRequiredResult, McpError> {
        let asked = self
            .asked
            .lock()
            .map(|asked| asked.clone())
            .unwrap_or_default();
        let mut requests = BTreeMap::new();
        for (key, request) in asked {
            let request: InputRequest = serde_json::from_value(request).map_err(|e| {
                McpError::internal_error(format!("cannot phrase the question `{key}`: {e}"), None)
            })?;
            requests.insert(key, request);
        }
        let state = State {
            answers: self.answers.clone(),
        };
        let options = rmcp::model::SealOptions::new()
            .associated_data(bound.as_bytes())
            .ttl(STATE_TTL);
        let sealed = codec.seal_json_with(&state, &options).map_err(|e| {
            McpError::internal_error(format!("cannot seal the request state: {e}"), None)
        })?;
        Ok(InputRequiredResult::new(Some(requests), Some(sealed)))
    }
}

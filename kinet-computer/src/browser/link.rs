//! kinet's own DevTools client beside the driving library's, on the same
//! pipe: for what that library does not do or does differently. It
//! attaches only tabs, so frames of other sites are reached here; and it
//! queues a navigation behind the previous one until that has loaded, so
//! `browser_navigate` sends its `Page.navigate` here, where a new
//! navigation replaces a hung one at once.
//!
//! The link works through a browser session of its own
//! (`Target.attachToBrowserTarget`) and attaches targets from there, so
//! the sessions it opens, and their events, never reach the library.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pipe::DevtoolsPipe;
use crate::ComputerError;

/// How long one command may wait for its answer when the caller sets no
/// shorter limit (callers bound their calls with the session's timeouts).
const ANSWER_LIMIT: Duration = Duration::from_secs(600);

/// kinet's own DevTools client: attaches a target (a tab, a frame of
/// another site) and sends it commands on the session that gives.
pub(crate) struct Link {
    pipe: Arc<DevtoolsPipe>,
    browser_session: tokio::sync::OnceCell<String>,
    sessions: tokio::sync::Mutex<HashMap<String, String>>,
}

impl Link {
    pub(crate) fn new(pipe: Arc<DevtoolsPipe>) -> Self {
        Self {
            pipe,
            browser_session: tokio::sync::OnceCell::new(),
            sessions: tokio::sync::Mutex::default(),
        }
    }

    /// Sends one command and waits for its answer (events are dropped).
    pub(crate) async fn call(
        &self,
        method: &'static str,
        session: Option<&str>,
        params: Value,
    ) -> Result<Value, ComputerError> {
        self.pipe.call(method, session, params, ANSWER_LIMIT).await
    }

    /// The link's own browser session, attached on first use.
    async fn browser_session(&self) -> Result<&str, ComputerError> {
        self.browser_session
            .get_or_try_init(|| async {
                let reply = self
                    .call("Target.attachToBrowserTarget", None, json!({}))
                    .await?;
                session_of(&reply, "the browser")
            })
            .await
            .map(String::as_str)
    }

    /// The session of target `target_id` (a frame's target id is its frame
    /// id), attached on first use.
    pub(crate) async fn session(&self, target_id: &str) -> Result<String, ComputerError> {
        if let Some(session) = self.sessions.lock().await.get(target_id) {
            return Ok(session.clone());
        }
        let browser = self.browser_session().await?;
        let reply = self
            .call(
                "Target.attachToTarget",
                Some(browser),
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await?;
        let session = session_of(&reply, &format!("target {target_id}"))?;
        self.sessions
            .lock()
            .await
            .insert(target_id.to_owned(), session.clone());
        Ok(session)
    }

    /// Drops a session that stopped answering.
    pub(crate) async fn forget(&self, session: &str) {
        self.sessions.lock().await.retain(|_, s| s != session);
    }
}

fn session_of(reply: &Value, what: &str) -> Result<String, ComputerError> {
    reply
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ComputerError::Browser(format!("{what} gave no session")))
}

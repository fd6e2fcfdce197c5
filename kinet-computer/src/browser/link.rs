//! kinet's own DevTools connection beside the driving library's: for what
//! that library does not do or does differently. It attaches only tabs, so
//! frames of other sites are reached here; and it queues a navigation
//! behind the previous one until that has loaded, so `browser_navigate`
//! sends its `Page.navigate` here, where a new navigation replaces a hung
//! one at once.

use std::collections::HashMap;

use chromiumoxide::Connection;
use chromiumoxide::types::{CdpJsonEventMessage, Message};
use futures::StreamExt;
use serde_json::{Value, json};

use super::browser_error;
use crate::ComputerError;

/// kinet's own DevTools connection: attaches a target (a tab, a frame of
/// another site) and sends it commands on the session that gives.
pub(crate) struct Link {
    connection: tokio::sync::Mutex<Connection<CdpJsonEventMessage>>,
    sessions: tokio::sync::Mutex<HashMap<String, String>>,
}

impl Link {
    pub(crate) async fn connect(ws_url: &str) -> Result<Self, ComputerError> {
        let connection = Connection::connect(ws_url).await.map_err(browser_error)?;
        Ok(Self {
            connection: tokio::sync::Mutex::new(connection),
            sessions: tokio::sync::Mutex::default(),
        })
    }

    /// Sends one command and waits for its answer (events are dropped).
    pub(crate) async fn call(
        &self,
        method: &'static str,
        session: Option<&str>,
        params: Value,
    ) -> Result<Value, ComputerError> {
        let mut connection = self.connection.lock().await;
        let id = connection
            .submit_command(method.into(), session.map(|s| s.to_owned().into()), params)
            .map_err(browser_error)?;
        while let Some(message) = connection.next().await {
            match message.map_err(browser_error)? {
                Message::Response(response) if response.id == id => {
                    if let Some(error) = response.error {
                        return Err(ComputerError::Browser(error.message));
                    }
                    return Ok(response.result.unwrap_or(Value::Null));
                }
                _ => {}
            }
        }
        Err(ComputerError::Browser(
            "the browser closed the connection".into(),
        ))
    }

    /// The session of target `target_id` (a frame's target id is its frame
    /// id), attached on first use.
    pub(crate) async fn session(&self, target_id: &str) -> Result<String, ComputerError> {
        if let Some(session) = self.sessions.lock().await.get(target_id) {
            return Ok(session.clone());
        }
        let reply = self
            .call(
                "Target.attachToTarget",
                None,
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await?;
        let session = reply
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| ComputerError::Browser(format!("target {target_id} gave no session")))?
            .to_owned();
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

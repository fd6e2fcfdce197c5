//! Where a running tool's events go.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::event::AgentEvent;

/// Where a running tool sends events (progress, todo updates). Cheap to
/// clone; sending never blocks and never fails (events sent after the run's
/// consumer is gone are dropped).
#[derive(Clone, Default)]
pub struct EventSink {
    sender: Option<mpsc::UnboundedSender<AgentEvent>>,
    tag: Option<Arc<str>>,
}

impl EventSink {
    /// A sink feeding `sender`.
    pub fn new(sender: mpsc::UnboundedSender<AgentEvent>) -> Self {
        Self {
            sender: Some(sender),
            tag: None,
        }
    }

    /// A sink that drops everything.
    pub fn discard() -> Self {
        Self::default()
    }

    /// A sink whose events arrive wrapped as [`AgentEvent::SubAgent`] with
    /// `agent_id`, for forwarding a sub-agent's events to its parent.
    pub fn tagged(&self, agent_id: impl Into<Arc<str>>) -> Self {
        Self {
            sender: self.sender.clone(),
            tag: Some(agent_id.into()),
        }
    }

    /// Sends an event.
    pub fn emit(&self, event: AgentEvent) {
        if let Some(sender) = &self.sender {
            let event = match &self.tag {
                Some(tag) => AgentEvent::SubAgent {
                    agent_id: tag.to_string(),
                    event: Box::new(event),
                },
                None => event,
            };
            let _ = sender.send(event);
        }
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSink")
            .field("connected", &self.sender.is_some())
            .field("tag", &self.tag)
            .finish()
    }
}

//! The one place a run's steps are recorded: the host's events, the
//! journal, the history.

use std::sync::Arc;

use super::{Journal, JournalEntry};
use crate::ctx::EventSink;
use crate::data::conversation::Conversation;
use crate::message::Message;

/// Where what happens in a run goes: the host's events and the journal.
/// A message joins the history through [`push`](Self::push), which
/// journals it too; entries that are not messages go through
/// [`record`](Self::record).
pub(crate) struct Recorder {
    pub(crate) events: EventSink,
    journal: Option<Arc<dyn Journal>>,
}

impl Recorder {
    pub(crate) fn new(events: EventSink, journal: Option<Arc<dyn Journal>>) -> Self {
        Self { events, journal }
    }

    /// The journal sees a run's input (see [`Journal::begin`]).
    pub(crate) fn begin(&self, messages: &[Message]) {
        if let Some(journal) = &self.journal {
            journal.begin(messages);
        }
    }

    /// Appends `message` to the history and journals it.
    pub(crate) fn push(&self, conversation: &mut Conversation, message: Message) {
        self.message(&message);
        conversation.push(message);
    }

    /// Journals a message that joins the history later (a tool result,
    /// journalled as its call finishes).
    pub(crate) fn message(&self, message: &Message) {
        if let Some(journal) = &self.journal {
            journal.message(message);
        }
    }

    /// Journals an entry, made only when there is a journal.
    pub(crate) fn record(&self, entry: impl FnOnce() -> JournalEntry) {
        if let Some(journal) = &self.journal {
            journal.record(&entry());
        }
    }
}

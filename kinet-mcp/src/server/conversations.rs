//! Where a served agent's conversations live: in the client session's
//! memory (the default), or in a [`SessionStore`] shared by every replica
//! of a stateless server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kinet_core::Conversation;
use kinet_core::session::{JournalEntry, Session, SessionStore};

/// One client session's conversations, or the shared store.
#[derive(Clone)]
pub(super) enum Conversations {
    /// This client session's, in memory.
    Memory(Arc<Mutex<HashMap<String, Conversation>>>),
    /// Any replica's, by id, in the store.
    Store(Arc<dyn SessionStore>),
}

impl Conversations {
    /// A fresh id: a counter in memory; in a shared store, unguessable
    /// (whoever has the id can continue the conversation).
    pub(super) fn new_id(&self, counter: u64) -> String {
        match self {
            Self::Memory(_) => format!("conv-{counter}"),
            Self::Store(_) => format!("conv-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// The conversation `id`, with how many messages it had.
    pub(super) fn load(&self, id: &str) -> Result<Option<Conversation>, String> {
        match self {
            Self::Memory(map) => Ok(map.lock().ok().and_then(|c| c.get(id).cloned())),
            Self::Store(store) => match store.load(id) {
                Ok(Some(session)) => session
                    .resume(&[])
                    .map(|(conversation, _)| Some(conversation))
                    .map_err(|e| e.to_string()),
                Ok(None) => Ok(None),
                Err(error) => Err(format!("the conversation store failed: {error}")),
            },
        }
    }

    /// Saves `conversation` as `id`; `saved` is what the store held
    /// before the run (`None`: a new conversation). When the run rewrote
    /// that prefix (the conversation was compacted), the stored session is
    /// replaced instead of appended to.
    pub(super) fn save(
        &self,
        id: &str,
        conversation: &Conversation,
        saved: Option<&[kinet_core::Message]>,
    ) -> Result<(), String> {
        match self {
            Self::Memory(map) => {
                if let Ok(mut map) = map.lock() {
                    map.insert(id.to_owned(), conversation.clone());
                }
                Ok(())
            }
            Self::Store(store) => {
                let failed = |e: Box<dyn std::error::Error + Send + Sync>| {
                    format!("the conversation store failed: {e}")
                };
                let kept = saved.is_some_and(|saved| {
                    conversation.messages.len() >= saved.len()
                        && conversation.messages[..saved.len()] == *saved
                });
                let from = match saved {
                    Some(saved) if kept => saved.len(),
                    Some(_) => {
                        store.delete(id).map_err(failed)?;
                        store.create(&Session::empty(id)).map_err(failed)?;
                        0
                    }
                    None => {
                        store.create(&Session::empty(id)).map_err(failed)?;
                        0
                    }
                };
                for message in conversation.messages.iter().skip(from) {
                    store
                        .append(
                            id,
                            &JournalEntry::Message {
                                message: message.clone(),
                            },
                        )
                        .map_err(failed)?;
                }
                Ok(())
            }
        }
    }
}

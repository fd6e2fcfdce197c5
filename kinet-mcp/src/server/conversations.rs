//! Where a served agent's conversations live: in the client session's
//! memory (the default), or in a [`SessionStore`] shared by every replica
//! of a stateless server.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::Conversation;
use kinet_core::session::{JournalEntry, Session, SessionStore};

/// How long a reply's claim on its conversation lasts without renewal (a
/// replica that dies frees its conversations within this).
const CLAIM_TTL: Duration = Duration::from_secs(120);

/// How often a running reply renews its claim.
const CLAIM_RENEW: Duration = Duration::from_secs(30);

/// One client session's conversations, or the shared store, and the
/// conversations a reply is running on.
#[derive(Clone)]
pub(super) struct Conversations {
    kind: Kind,
    busy: Arc<Mutex<HashSet<String>>>,
}

#[derive(Clone)]
enum Kind {
    /// This client session's, in memory.
    Memory(Arc<Mutex<HashMap<String, Conversation>>>),
    /// Any replica's, by id, in the store.
    Store(Arc<dyn SessionStore>),
}

/// A reply's hold on its conversation, released when dropped.
pub(super) struct Claim {
    id: String,
    busy: Arc<Mutex<HashSet<String>>>,
    shared: Option<(Arc<dyn SessionStore>, String)>,
    renew: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(renew) = self.renew.take() {
            renew.abort();
        }
        if let Some((store, holder)) = &self.shared {
            let _ = store.release(&self.id, holder);
        }
        if let Ok(mut busy) = self.busy.lock() {
            busy.remove(&self.id);
        }
    }
}

impl Conversations {
    /// Conversations of one client session, in memory.
    pub(super) fn memory() -> Self {
        Self::of(Kind::Memory(Arc::new(Mutex::new(HashMap::new()))))
    }

    /// Conversations in `store`, shared by every replica.
    pub(super) fn store(store: Arc<dyn SessionStore>) -> Self {
        Self::of(Kind::Store(store))
    }

    fn of(kind: Kind) -> Self {
        Self {
            kind,
            busy: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Holds conversation `id` for one reply: no other reply continues it
    /// (here, or on another replica sharing the store) until the claim is
    /// dropped, so two replies never interleave their messages.
    pub(super) fn claim(&self, id: &str) -> Result<Claim, String> {
        let busy_error = || {
            format!(
                "conversation `{id}` is busy with another reply; wait for that one to finish and send again"
            )
        };
        {
            let mut busy = self
                .busy
                .lock()
                .map_err(|_| "the conversation table is unusable".to_owned())?;
            if !busy.insert(id.to_owned()) {
                return Err(busy_error());
            }
        }
        let mut claim = Claim {
            id: id.to_owned(),
            busy: Arc::clone(&self.busy),
            shared: None,
            renew: None,
        };
        if let Kind::Store(store) = &self.kind {
            let holder = uuid::Uuid::new_v4().simple().to_string();
            match store.claim(id, &holder, CLAIM_TTL) {
                Ok(true) => {}
                Ok(false) => return Err(busy_error()),
                Err(error) => return Err(format!("the conversation store failed: {error}")),
            }
            let renewing = (Arc::clone(store), holder.clone(), id.to_owned());
            claim.renew = Some(tokio::spawn(async move {
                let (store, holder, id) = renewing;
                loop {
                    tokio::time::sleep(CLAIM_RENEW).await;
                    let _ = store.claim(&id, &holder, CLAIM_TTL);
                }
            }));
            claim.shared = Some((Arc::clone(store), holder));
        }
        Ok(claim)
    }

    /// A fresh id: a counter in memory; in a shared store, unguessable
    /// (whoever has the id can continue the conversation).
    pub(super) fn new_id(&self, counter: u64) -> String {
        match &self.kind {
            Kind::Memory(_) => format!("conv-{counter}"),
            Kind::Store(_) => format!("conv-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// The conversation `id`, with how many messages it had.
    pub(super) fn load(&self, id: &str) -> Result<Option<Conversation>, String> {
        match &self.kind {
            Kind::Memory(map) => Ok(map.lock().ok().and_then(|c| c.get(id).cloned())),
            Kind::Store(store) => match store.load(id) {
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
        match &self.kind {
            Kind::Memory(map) => {
                if let Ok(mut map) = map.lock() {
                    map.insert(id.to_owned(), conversation.clone());
                }
                Ok(())
            }
            Kind::Store(store) => {
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

//! Locks for keyed calls, shared by every run of a pipeline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One lock per scheduling key.
#[derive(Default)]
pub(super) struct KeyLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyLocks {
    /// The lock of `key`.
    pub(super) fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let Ok(mut locks) = self.locks.lock() else {
            // A poisoned map still hands out working (unshared) locks.
            return Arc::default();
        };
        Arc::clone(locks.entry(key.to_owned()).or_default())
    }
}

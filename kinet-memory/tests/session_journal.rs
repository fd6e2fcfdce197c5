//! Sessions journalled in SQLite files: the session conformance suite
//! (journals, forks, claims, concurrent appends, a run resumed elsewhere,
//! a process killed with SIGKILL mid-run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[macro_use]
mod session_conformance;

use std::sync::Arc;

use kinet_core::session::SessionStore;
use kinet_memory::SqliteSessionStore;

/// SQLite files in one temp dir.
struct Files(tempfile::TempDir, std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl session_conformance::SessionFixture for Files {
    async fn fresh(&self) -> String {
        let n = self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.path().join(format!("s{n}.db")).display().to_string()
    }
    async fn open(&self, at: &str) -> Arc<dyn SessionStore> {
        open(at)
    }
}

fn open(at: &str) -> Arc<dyn SessionStore> {
    Arc::new(SqliteSessionStore::open(at).unwrap())
}

fn files() -> Option<Files> {
    Some(Files(tempfile::tempdir().unwrap(), Default::default()))
}

session_suite!(files(), open);

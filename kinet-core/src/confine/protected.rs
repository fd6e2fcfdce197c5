//! Protected names: directories a workspace keeps read-only (`.git`,
//! `.kinet`), for the file tools' writes and the sandbox alike.

use std::io;
use std::path::{Component, Path};

/// The names protected by default, for the file tools
/// ([`Confinement`](super::Confinement)) and the sandbox
/// ([`SandboxPolicy`](crate::sandbox::SandboxPolicy)): what is written
/// beneath them (a git hook or config) runs later outside the agent's
/// control.
pub(crate) const PROTECTED: [&str; 2] = [".git", ".kinet"];

/// A write refused because it lands beneath a protected directory.
#[derive(Debug)]
pub(crate) struct Protected {
    name: String,
}

impl std::fmt::Display for Protected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "it is inside `{}`, which the workspace keeps read-only (what is written there, \
             a git hook or config, runs later outside the agent's control); only the host \
             can lift this protection",
            self.name
        )
    }
}

impl std::error::Error for Protected {}

/// Refuses `rel` (a path below a root) when a component is protected.
pub(crate) fn protected_in(rel: &Path, protected: &[String]) -> io::Result<()> {
    for component in rel.components() {
        if let Component::Normal(name) = component
            && let Some(hit) = protected.iter().find(|p| name == p.as_str())
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                Protected { name: hit.clone() },
            ));
        }
    }
    Ok(())
}

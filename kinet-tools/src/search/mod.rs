//! `grep` and `glob`, on ripgrep's crates, over a directory walk by
//! handles (the private `walk` module).

mod glob;
mod grep;
mod walk;

pub use glob::{GlobArgs, GlobConfig, GlobTool};
pub use grep::{GrepArgs, GrepConfig, GrepTool, OutputMode};

use std::path::Path;

use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use kinet_core::ToolError;
use kinet_core::tool::workspace::{Confinement, WorkspacePath};
use walk::{FileEntry, Flow, IgnoreDir, Rules};

/// The walk's rules as ripgrep's defaults and these options make them:
/// `glob` overrides (paths relative to `root`), a `file_type` selection.
pub(crate) fn rules(
    root: &Path,
    glob: Option<&str>,
    file_type: Option<&str>,
) -> Result<Rules, ToolError> {
    let mut overrides = OverrideBuilder::new(root);
    if let Some(glob) = glob {
        overrides
            .add(glob)
            .map_err(|e| ToolError::invalid_arguments(format!("invalid glob `{glob}`: {e}")))?;
    }
    let overrides = overrides.build().map_err(|e| {
        ToolError::invalid_arguments(format!("invalid glob `{}`: {e}", glob.unwrap_or("")))
    })?;
    let mut types = TypesBuilder::new();
    if let Some(name) = file_type {
        types.add_defaults();
        let known = types.definitions().iter().any(|d| d.name() == name);
        if !known {
            return Err(ToolError::invalid_arguments(format!(
                "unknown file type `{name}`; use a ripgrep type name such as rust, py, js, ts, go, java, c, cpp, md, json, yaml, toml, or use glob"
            )));
        }
        types.select(name);
    }
    let types = types.build().map_err(|e| {
        ToolError::invalid_arguments(format!("file type `{}`: {e}", file_type.unwrap_or("")))
    })?;
    Ok(Rules::new(overrides, types))
}

/// Walks the directory `place` (see [`walk`]) with `rules`, its parents'
/// ignore files read up to the workspace root.
pub(crate) fn walk_place<F, V>(
    place: &WorkspacePath,
    rules: &Rules,
    threads: usize,
    visitor: F,
) -> Result<(), ToolError>
where
    F: Fn() -> V + Sync,
    V: FnMut(FileEntry<'_>) -> Flow,
{
    let start = place.open_walk().map_err(|e| place.error("list", e))?;
    let parents = IgnoreDir::parents_of(place);
    walk::walk(start, place.path(), parents, rules, threads, visitor);
    Ok(())
}

/// A note for results on machines whose kernel cannot confine the opening
/// of the search directory (no `openat2`): the walk below it still never
/// follows a symlink.
pub(crate) fn confinement_note(place: &WorkspacePath) -> Option<&'static str> {
    (place.root().is_some() && kinet_core::tool::workspace::confinement() != Confinement::Kernel)
        .then_some(
            "[note: this kernel has no openat2, so the search directory itself was checked for \
         symlinks in user space, which a concurrent swap can race; nothing below it is \
         reached through a symlink]",
        )
}

/// `path` relative to `cwd` when it lies below it, else as it is.
pub(crate) fn display_path(path: &Path, cwd: &Path) -> String {
    path.strip_prefix(cwd)
        .ok()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(path)
        .display()
        .to_string()
}

//! `grep` and `glob`, on ripgrep's crates.

mod glob;
mod grep;

pub use glob::{GlobArgs, GlobConfig, GlobTool};
pub use grep::{GrepArgs, GrepConfig, GrepTool, OutputMode};

use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use kinet_core::ToolError;

/// A directory walk as ripgrep does it by default: `.gitignore`, `.ignore`
/// and global git excludes respected (also outside a git repository),
/// hidden files skipped, symlinks not followed.
pub(crate) fn walker(
    root: &Path,
    glob: Option<&str>,
    file_type: Option<&str>,
    threads: usize,
) -> Result<WalkBuilder, ToolError> {
    let mut walk = WalkBuilder::new(root);
    walk.require_git(false).threads(threads.max(1));
    if let Some(glob) = glob {
        let mut overrides = OverrideBuilder::new(root);
        overrides
            .add(glob)
            .map_err(|e| ToolError::invalid_arguments(format!("invalid glob `{glob}`: {e}")))?;
        let overrides = overrides
            .build()
            .map_err(|e| ToolError::invalid_arguments(format!("invalid glob `{glob}`: {e}")))?;
        walk.overrides(overrides);
    }
    if let Some(name) = file_type {
        let mut types = TypesBuilder::new();
        types.add_defaults();
        let known = types.definitions().iter().any(|d| d.name() == name);
        if !known {
            return Err(ToolError::invalid_arguments(format!(
                "unknown file type `{name}`; use a ripgrep type name such as rust, py, js, ts, go, java, c, cpp, md, json, yaml, toml, or use glob"
            )));
        }
        types.select(name);
        let types = types
            .build()
            .map_err(|e| ToolError::invalid_arguments(format!("file type `{name}`: {e}")))?;
        walk.types(types);
    }
    Ok(walk)
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

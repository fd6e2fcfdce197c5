//! Variable expansion in config files, in each application's own syntax,
//! and `envFile` reading.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::Discovery;

/// Whose syntax a file uses.
#[derive(Debug, Clone, Copy)]
pub(super) enum Syntax<'a> {
    /// Claude Code / Claude Desktop: `${VAR}`, `${VAR:-default}`, and
    /// `${CLAUDE_PLUGIN_ROOT}` inside a plugin.
    Claude { plugin_root: Option<&'a Path> },
    /// Cursor and VS Code: `${env:VAR}`, `${userHome}`, `${workspaceFolder}`,
    /// `${workspaceFolderBasename}`, `${pathSeparator}` / `${/}`;
    /// `${input:id}` (a VS Code prompt) cannot be answered here.
    Editor {
        workspace: Option<&'a Path>,
        home: Option<&'a Path>,
    },
}

impl Discovery {
    /// Expands `text`. A variable that is not set and has no default is
    /// kept as written (`${API_TOKEN}`), and its name added to `missing`,
    /// so the user is told instead of a header silently becoming
    /// `"Bearer "`.
    pub(super) fn expand(
        &self,
        text: &str,
        syntax: Syntax<'_>,
        missing: &mut BTreeSet<String>,
    ) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let inner = &after[..end];
            match self.lookup(inner, syntax) {
                Lookup::Value(value) => out.push_str(&value),
                Lookup::Missing(name) => {
                    missing.insert(name);
                    out.push_str(&rest[start..start + 2 + end + 1]);
                }
                Lookup::Unknown => out.push_str(&rest[start..start + 2 + end + 1]),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    fn lookup(&self, inner: &str, syntax: Syntax<'_>) -> Lookup {
        let path_text = |p: Option<&Path>| p.map(|p| p.display().to_string());
        match syntax {
            Syntax::Claude { plugin_root } => {
                let (name, default) = match inner.split_once(":-") {
                    Some((name, default)) => (name, Some(default)),
                    None => (inner, None),
                };
                let value = if name == "CLAUDE_PLUGIN_ROOT" && plugin_root.is_some() {
                    path_text(plugin_root)
                } else {
                    self.var(name)
                };
                match value.or_else(|| default.map(str::to_owned)) {
                    Some(value) => Lookup::Value(value),
                    None => Lookup::Missing(name.to_owned()),
                }
            }
            Syntax::Editor { workspace, home } => {
                if let Some(name) = inner.strip_prefix("env:") {
                    return self
                        .var(name)
                        .map_or_else(|| Lookup::Missing(name.to_owned()), Lookup::Value);
                }
                if let Some(id) = inner.strip_prefix("input:") {
                    return Lookup::Missing(format!("input:{id} (a VS Code prompt)"));
                }
                let value = match inner {
                    "userHome" => path_text(home),
                    "workspaceFolder" => path_text(workspace),
                    "workspaceFolderBasename" => workspace
                        .and_then(Path::file_name)
                        .map(|n| n.to_string_lossy().into_owned()),
                    "pathSeparator" | "/" => Some(std::path::MAIN_SEPARATOR.to_string()),
                    _ => return Lookup::Unknown,
                };
                value.map_or_else(|| Lookup::Missing(inner.to_owned()), Lookup::Value)
            }
        }
    }
}

enum Lookup {
    Value(String),
    Missing(String),
    /// Not a variable this syntax knows: left as it is.
    Unknown,
}

/// `KEY=VALUE` lines of an env file (`#` comments, blank lines, an
/// `export ` prefix and matching quotes around the value allowed).
pub(super) fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        let value = ['"', '\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        vars.insert(key.trim().to_owned(), value.to_owned());
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery() -> Discovery {
        Discovery::new().env(
            [("TOKEN", "t0k"), ("EMPTY", "")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    #[test]
    fn claude_syntax_keeps_unset_variables_and_names_them() {
        let d = discovery();
        let mut missing = BTreeSet::new();
        let claude = Syntax::Claude { plugin_root: None };
        assert_eq!(
            d.expand(
                "Bearer ${TOKEN} ${API_TOKEN} ${X:-dflt} ${EMPTY}",
                claude,
                &mut missing
            ),
            "Bearer t0k ${API_TOKEN} dflt "
        );
        assert_eq!(missing.into_iter().collect::<Vec<_>>(), ["API_TOKEN"]);
        let mut missing = BTreeSet::new();
        assert_eq!(
            d.expand("a ${unclosed", claude, &mut missing),
            "a ${unclosed"
        );
        assert!(missing.is_empty());
    }

    #[test]
    fn editor_syntax_knows_the_editor_variables() {
        let d = discovery();
        let mut missing = BTreeSet::new();
        let editor = Syntax::Editor {
            workspace: Some(Path::new("/w/proj")),
            home: Some(Path::new("/home/u")),
        };
        assert_eq!(
            d.expand(
                "${env:TOKEN} ${userHome} ${workspaceFolder}/x ${workspaceFolderBasename} ${input:key} ${env:NOPE} ${other}",
                editor,
                &mut missing
            ),
            "t0k /home/u /w/proj/x proj ${input:key} ${env:NOPE} ${other}"
        );
        assert_eq!(
            missing.into_iter().collect::<Vec<_>>(),
            ["NOPE", "input:key (a VS Code prompt)"]
        );
    }

    #[test]
    fn env_files_parse_like_dotenv() {
        let vars =
            parse_env_file("# c\nexport A=1\nB = \"two words\"\nC='x'\nnot a pair\n\nD=\"\n");
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two words");
        assert_eq!(vars["C"], "x");
        assert_eq!(vars["D"], "\"");
        assert_eq!(vars.len(), 4);
    }
}

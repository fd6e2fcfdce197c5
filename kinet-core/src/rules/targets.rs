//! The rules for what a call touches besides a command line: tools by
//! name and argument patterns, paths, and the hosts a sandboxed command
//! may reach.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::command::{normalize, resolve_existing};

use serde::Deserialize;

use super::{Decision, HostPattern, RulesError, because, check_examples, pattern_matches};

/// A rule for tools, by name or a prefix ending in `*`, and optionally by
/// argument patterns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolNameRule {
    /// The tool name or prefix (`mcp__github__*`).
    pub name: String,
    /// Argument patterns: each named argument must be present and match
    /// its [wildcard](wildcard_matches) pattern (`*` any run of
    /// characters, `?` one) for the rule to apply. Numbers and booleans
    /// are matched as their JSON text. Default: none (every call).
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// What the rule says.
    pub decision: Decision,
    /// Argument objects this rule must match (checked at load).
    #[serde(default, rename = "match")]
    pub matches: Vec<serde_json::Value>,
    /// Argument objects this rule must not match (checked at load).
    #[serde(default)]
    pub not_match: Vec<serde_json::Value>,
    /// Why, for messages.
    #[serde(default)]
    pub justification: Option<String>,
}

impl ToolNameRule {
    /// Whether the rule applies to a call of `tool` with these arguments.
    pub fn matches_call(&self, tool: &str, arguments: &serde_json::Value) -> bool {
        pattern_matches(&self.name, tool) && self.matches_arguments(arguments)
    }

    fn matches_arguments(&self, arguments: &serde_json::Value) -> bool {
        self.args.iter().all(|(field, pattern)| {
            let text = match arguments.get(field) {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                    value.to_string()
                }
                _ => return false,
            };
            wildcard_matches(pattern, &text)
        })
    }

    fn describe(&self) -> String {
        let mut text = self.name.clone();
        for (field, pattern) in &self.args {
            text.push_str(&format!(" {field}={pattern}"));
        }
        text
    }

    fn check_examples(&self, index: usize) -> Result<(), RulesError> {
        check_examples(&self.matches, &self.not_match, |example| {
            Ok(self.matches_arguments(example))
        })
        .map_err(|problem| RulesError::Invalid {
            rule: format!("tool rule {index} (`{}`)", self.describe()),
            problem,
        })
    }
}

/// A rule for paths a call names in its `path` or `file_path` argument.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    /// A glob: `*` and `?` within one component, `**` across them. A
    /// pattern without `/` matches a file name at any depth (`*.pem`,
    /// `.env`); one starting with `/` matches absolute paths; any other is
    /// relative to a workspace root (the call's directory when there are
    /// none): `secrets/**` (which covers `secrets` itself too).
    pub pattern: String,
    /// What the rule says.
    pub decision: Decision,
    /// The tools it applies to (names or prefixes ending in `*`). Default:
    /// every tool, which only `ask` and `deny` may use: an `allow` must
    /// name its tools.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Paths this rule must match (checked at load; relative ones as if
    /// relative to a root).
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    /// Paths this rule must not match (checked at load).
    #[serde(default)]
    pub not_match: Vec<String>,
    /// Why, for messages.
    #[serde(default)]
    pub justification: Option<String>,
    #[serde(skip)]
    glob: Option<globset::GlobSet>,
}

impl PathRule {
    fn compile(&mut self, index: usize) -> Result<(), RulesError> {
        let fail = |problem: String| RulesError::Invalid {
            rule: format!("path rule {index} (`{}`)", self.pattern),
            problem,
        };
        if self.decision == Decision::Allow && self.tools.is_empty() {
            return Err(fail(
                "an allow rule for paths must name its tools (`tools = [\"write_file\"]`)".into(),
            ));
        }
        let text = self.pattern.trim_end_matches('/');
        let anchored = if text.contains('/') {
            text.trim_start_matches("./").to_owned()
        } else {
            format!("**/{text}")
        };
        // `dir/**` covers `dir` itself too (a listing or search of it).
        let mut set = globset::GlobSetBuilder::new();
        let whole = anchored.strip_suffix("/**").into_iter();
        for pattern in std::iter::once(anchored.as_str()).chain(whole) {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| fail(format!("the pattern is not a valid glob: {e}")))?;
            set.add(glob);
        }
        self.glob = Some(
            set.build()
                .map_err(|e| fail(format!("the pattern is not a valid glob: {e}")))?,
        );
        // Examples are names relative to a root, not files: matched as
        // written, with nothing looked up on this machine.
        let root = Path::new("/root-of-the-examples");
        check_examples(&self.matches, &self.not_match, |example| {
            Ok(self.matches_path(&forms(example, root, &[root.to_path_buf()], false), false))
        })
        .map_err(fail)
    }

    /// Whether the rule applies to tool `tool`.
    fn covers(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|t| pattern_matches(t, tool))
    }

    /// Whether the pattern matches the path's forms: any of them, or with
    /// `all`, every one (so an `allow` holds for the name as written and
    /// for where its symlinks lead).
    fn matches_path(&self, forms: &[PathForm], all: bool) -> bool {
        let Some(glob) = &self.glob else {
            return false;
        };
        let absolute = self.pattern.starts_with('/');
        let one = |form: &PathForm| {
            if absolute {
                glob.is_match(&form.absolute)
            } else {
                form.relative.as_ref().is_some_and(|rel| glob.is_match(rel))
            }
        };
        if all {
            !forms.is_empty() && forms.iter().all(one)
        } else {
            forms.iter().any(one)
        }
    }
}

/// One way to see a path: absolute, and relative to the root it is in.
#[derive(Debug)]
struct PathForm {
    absolute: PathBuf,
    relative: Option<PathBuf>,
}

/// The path as written (made absolute from `cwd`, `..` folded) and, with
/// `links` and when it differs, with its existing part's symlinks resolved.
fn forms(path: &str, cwd: &Path, roots: &[PathBuf], links: bool) -> Vec<PathForm> {
    let written = normalize(&cwd.join(path));
    let resolved = if links {
        normalize(&resolve_existing(&written))
    } else {
        written.clone()
    };
    let roots: Vec<PathBuf> = if roots.is_empty() {
        vec![normalize(cwd)]
    } else {
        roots.iter().map(|r| normalize(r)).collect()
    };
    let form = |absolute: PathBuf| {
        let relative = roots
            .iter()
            .filter_map(|root| absolute.strip_prefix(root).ok())
            .min_by_key(|rel| rel.components().count())
            .map(Path::to_path_buf);
        PathForm { absolute, relative }
    };
    let mut all = vec![form(written.clone())];
    if resolved != written {
        all.push(form(resolved));
    }
    all
}

/// A rule for the hosts a sandboxed command may reach through the
/// sandbox's proxy
/// ([`SandboxPolicy::with_host_rules`](crate::sandbox::SandboxPolicy::with_host_rules)).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    /// A [`HostPattern`]: `crates.io`, `*.crates.io`, `localhost:8080`.
    pub name: String,
    /// `allow` or `deny` (a proxy has no one to ask).
    pub decision: Decision,
    /// Why, for messages.
    #[serde(default)]
    pub justification: Option<String>,
}

/// The argument fields that name a path.
const PATH_FIELDS: [&str; 2] = ["path", "file_path"];

impl super::Rules {
    /// Checks the tool, path and host rules (their examples, globs and
    /// host patterns).
    pub(super) fn check_targets(&mut self) -> Result<(), RulesError> {
        for (index, rule) in self.tools.iter().enumerate() {
            rule.check_examples(index + 1)?;
        }
        for (index, rule) in self.paths.iter_mut().enumerate() {
            rule.compile(index + 1)?;
        }
        for (index, rule) in self.hosts.iter().enumerate() {
            let fail = |problem: String| RulesError::Invalid {
                rule: format!("host rule {} (`{}`)", index + 1, rule.name),
                problem,
            };
            if rule.decision == Decision::Ask {
                return Err(fail("a host rule can only allow or deny".into()));
            }
            HostPattern::parse(&rule.name).map_err(fail)?;
        }
        Ok(())
    }

    /// What the tool rules say of a call (strictest match), with the rule.
    pub fn check_tool(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Option<(Decision, String)> {
        self.tools
            .iter()
            .filter(|rule| rule.matches_call(name, arguments))
            .max_by_key(|rule| rule.decision)
            .map(|rule| {
                let what = format!("rule `{}`", rule.describe());
                (rule.decision, because(what, &rule.justification))
            })
    }

    /// What the path rules say of the paths a call of `tool` names in its
    /// `path` or `file_path` argument, made absolute from `cwd` and
    /// matched relative to the workspace `roots` (strictest match). An
    /// `allow` holds only when it matches the path as written and with
    /// its symlinks resolved; `ask` and `deny` when either does.
    pub fn check_paths(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
        cwd: &Path,
        roots: &[PathBuf],
    ) -> Option<(Decision, String)> {
        if self.paths.is_empty() {
            return None;
        }
        let mut strictest: Option<(Decision, String)> = None;
        for field in PATH_FIELDS {
            let Some(path) = arguments.get(field).and_then(|v| v.as_str()) else {
                continue;
            };
            let forms = forms(path, cwd, roots, true);
            for rule in self.paths.iter().filter(|rule| rule.covers(tool)) {
                let all = rule.decision == Decision::Allow;
                if !rule.matches_path(&forms, all) {
                    continue;
                }
                if strictest
                    .as_ref()
                    .is_none_or(|(held, _)| rule.decision > *held)
                {
                    let what = format!("path rule `{}` for `{path}`", rule.pattern);
                    strictest = Some((rule.decision, because(what, &rule.justification)));
                }
            }
        }
        strictest
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (`/` included) and `?` any one character.
pub fn wildcard_matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

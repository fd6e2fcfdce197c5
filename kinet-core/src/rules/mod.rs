//! Approval rules as data: a TOML file of rules for shell commands (by
//! program and argument prefix), for tools (by name and argument
//! patterns), for paths, and for the hosts a sandboxed command may reach;
//! each `allow`, `ask` or `forbid`, most with examples that must and must
//! not match, checked when the file loads.
//!
//! ```toml
//! [[command]]
//! program = "git"
//! args = ["status"]            # an argument prefix (optional)
//! decision = "allow"
//! match = ["git status", "git status --short"]
//! not_match = ["git push", "git statusx"]
//!
//! [[command]]
//! program = "rm"
//! decision = "forbid"
//! justification = "delete with the file tools, which ask"
//!
//! [[tool]]
//! name = "mcp__prod_db__*"
//! decision = "forbid"
//!
//! [[tool]]
//! name = "web_fetch"
//! args = { url = "https://docs.rs/*" }   # wildcards: * and ?
//! decision = "allow"
//! match = [{ url = "https://docs.rs/serde" }]
//! not_match = [{ url = "https://docs.rs.example.com/" }]
//!
//! [[path]]
//! pattern = "secrets/**"       # relative to each workspace root
//! decision = "forbid"
//! match = ["secrets/prod.key"]
//!
//! [[path]]
//! pattern = "docs/**"
//! decision = "allow"
//! tools = ["write_file", "edit_file"]   # an allow names its tools
//!
//! [[host]]                      # the sandbox's network allowlist
//! name = "*.crates.io"
//! decision = "allow"
//! ```
//!
//! When several rules match, `forbid` wins over `ask`, and `ask` over
//! `allow`. A command line is parsed first ([`shell::parse`]): it is
//! allowed only when every simple command in it is allowed (and writes no
//! file through a redirection), forbidden when any is, and asks when the
//! parser cannot prove what runs (`$(...)`, `$VAR`, subshells, here
//! documents, ...). Path rules look at a call's `path` and `file_path`
//! arguments, as written and with their symlinks resolved: `ask` and
//! `forbid` apply when either form matches, `allow` only when both do.
//! Host rules do not decide calls:
//! [`SandboxPolicy::with_host_rules`](crate::sandbox::SandboxPolicy::with_host_rules)
//! turns them into a sandbox's network allowlist. A file whose example does not behave as
//! written does not load, and the error names the rule and the example.

pub(crate) mod hosts;
pub mod shell;
mod targets;

use serde::Deserialize;

pub use hosts::HostPattern;
pub use targets::{HostRule, PathRule, ToolNameRule, wildcard_matches};

use shell::{Parsed, SimpleCommand};

/// What a rule says about what it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Decision {
    /// Run without asking.
    Allow,
    /// Ask the person.
    Ask,
    /// Never run.
    Forbid,
}

/// A rule for shell commands.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRule {
    /// The program, by name (`git`) or path (`/usr/bin/git`, matched by
    /// its last component too).
    pub program: String,
    /// The arguments the command must start with. Default: none (any).
    #[serde(default)]
    pub args: Vec<String>,
    /// What the rule says.
    pub decision: Decision,
    /// Command lines this rule must match (checked at load).
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    /// Command lines this rule must not match (checked at load).
    #[serde(default)]
    pub not_match: Vec<String>,
    /// Why, for messages.
    #[serde(default)]
    pub justification: Option<String>,
}

/// A loaded, checked rules file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// The command rules, in file order.
    #[serde(default, rename = "command")]
    pub commands: Vec<CommandRule>,
    /// The tool rules, in file order.
    #[serde(default, rename = "tool")]
    pub tools: Vec<ToolNameRule>,
    /// The path rules, in file order.
    #[serde(default, rename = "path")]
    pub paths: Vec<PathRule>,
    /// The network rules for sandboxed commands, in file order.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostRule>,
    /// Command rules by program name (last path component), built at
    /// load; empty for rules built by hand (then every rule is tried).
    #[serde(skip)]
    by_program: std::collections::HashMap<String, Vec<usize>>,
}

/// Why a rules file did not load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The file is not valid TOML or has unknown fields.
    #[error("the rules file is not valid: {0}")]
    Syntax(String),
    /// A rule's example does not behave as the rule says.
    #[error("command rule {index} (`{program}`): {problem}")]
    Example {
        /// The rule's position, from 1.
        index: usize,
        /// Its program.
        program: String,
        /// What went wrong, naming the example.
        problem: String,
    },
    /// A tool, path or host rule is wrong: a failing example, a bad glob
    /// or host pattern, an `allow` for paths that names no tools.
    #[error("{rule}: {problem}")]
    Invalid {
        /// The rule: its kind, position from 1 and pattern.
        rule: String,
        /// What went wrong.
        problem: String,
    },
}

/// The outcome for a command line, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandVerdict {
    /// Allow, ask or forbid.
    pub decision: Decision,
    /// Why: the rule or the construct that decided.
    pub reason: String,
}

impl CommandRule {
    /// Whether the rule matches one simple command.
    pub fn matches_command(&self, command: &SimpleCommand) -> bool {
        let Some(program) = command.argv.first() else {
            return false;
        };
        let base = program.rsplit('/').next().unwrap_or(program);
        let named =
            program == &self.program || (!self.program.contains('/') && base == self.program);
        named
            && command.argv.len() > self.args.len()
            && command.argv[1..=self.args.len()] == self.args[..]
    }

    /// Whether the rule matches `line` as a whole: one simple command.
    fn matches_line(&self, line: &str) -> Result<bool, String> {
        match shell::parse(line) {
            Parsed::Simple(commands) if commands.len() == 1 => {
                Ok(self.matches_command(&commands[0]))
            }
            Parsed::Simple(commands) => Err(format!("runs {} commands, not one", commands.len())),
            Parsed::Unsure(why) => Err(why),
        }
    }

    fn describe(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Rules {
    /// Parses and checks a rules file: every `match` example must match
    /// its rule and every `not_match` example must not.
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let mut rules: Rules =
            toml::from_str(text).map_err(|e| RulesError::Syntax(e.to_string()))?;
        for (index, rule) in rules.commands.iter().enumerate() {
            let name = rule.program.rsplit('/').next().unwrap_or(&rule.program);
            rules
                .by_program
                .entry(name.to_owned())
                .or_default()
                .push(index);
        }
        for (index, rule) in rules.commands.iter().enumerate() {
            check_examples(&rule.matches, &rule.not_match, |line| {
                rule.matches_line(line)
            })
            .map_err(|problem| RulesError::Example {
                index: index + 1,
                program: rule.describe(),
                problem,
            })?;
        }
        rules.check_targets()?;
        Ok(rules)
    }

    /// The strictest decision of the command rules matching one simple
    /// command, with the rule; `None` when none matches.
    fn decide_one(&self, command: &SimpleCommand) -> Option<(Decision, &CommandRule)> {
        let candidates: Box<dyn Iterator<Item = &CommandRule>> = if self.by_program.is_empty() {
            Box::new(self.commands.iter())
        } else {
            let program = command.argv.first()?;
            let name = program.rsplit('/').next().unwrap_or(program);
            let indexes = self.by_program.get(name)?;
            Box::new(indexes.iter().filter_map(|&i| self.commands.get(i)))
        };
        candidates
            .filter(|rule| rule.matches_command(command))
            .max_by_key(|rule| rule.decision)
            .map(|rule| (rule.decision, rule))
    }

    /// What the rules say of a command line; `None` when no rule speaks
    /// to it at all (the host's other policy decides). A compound line is
    /// allowed only when every part is; any forbidden part forbids it; a
    /// line the parser cannot prove simple asks.
    pub fn check_command(&self, line: &str) -> Option<CommandVerdict> {
        let commands = match shell::parse(line) {
            Parsed::Simple(commands) => commands,
            Parsed::Unsure(why) => {
                return Some(CommandVerdict {
                    decision: Decision::Ask,
                    reason: format!("the command cannot be checked against the rules: {why}"),
                });
            }
        };
        let mut verdict: Option<CommandVerdict> = None;
        let mut unmatched = None;
        for command in &commands {
            let (decision, reason) = match self.decide_one(command) {
                Some((Decision::Allow, rule))
                    if command.redirects.iter().any(|r| r.writes_file()) =>
                {
                    (
                        Decision::Ask,
                        format!(
                            "`{}` is allowed, but this one writes a file through a redirection",
                            rule.describe()
                        ),
                    )
                }
                Some((decision, rule)) => (
                    decision,
                    because(format!("rule `{}`", rule.describe()), &rule.justification),
                ),
                None => {
                    unmatched.get_or_insert_with(|| command.argv.join(" "));
                    continue;
                }
            };
            if verdict.as_ref().is_none_or(|v| decision > v.decision) {
                verdict = Some(CommandVerdict { decision, reason });
            }
        }
        match (verdict, unmatched) {
            (Some(v), _) if v.decision == Decision::Forbid => Some(v),
            // An allowed part does not carry an unmatched one.
            (Some(v), Some(part)) if v.decision == Decision::Allow => Some(CommandVerdict {
                decision: Decision::Ask,
                reason: format!("no rule allows `{part}`"),
            }),
            (verdict, _) => verdict,
        }
    }
}

/// Checks a rule's examples: each of `matches` must match and none of
/// `not_match` may; `matcher` says whether one does, or why it cannot be
/// matched. The error names the example.
fn check_examples<T: std::fmt::Display>(
    matches: &[T],
    not_match: &[T],
    matcher: impl Fn(&T) -> Result<bool, String>,
) -> Result<(), String> {
    for example in matches {
        match matcher(example) {
            Ok(true) => {}
            Ok(false) => return Err(format!("the example `{example}` does not match")),
            Err(why) => return Err(format!("the example `{example}` cannot be matched: {why}")),
        }
    }
    for example in not_match {
        if matcher(example) == Ok(true) {
            return Err(format!("the counter-example `{example}` matches"));
        }
    }
    Ok(())
}

/// A rule's reason for messages: what matched, and the rule's
/// justification when it has one.
fn because(what: String, justification: &Option<String>) -> String {
    match justification {
        Some(why) => format!("{what}: {why}"),
        None => what,
    }
}

/// Whether a tool-name pattern (a name, or a prefix ending in `*`) matches
/// `tool`.
pub(crate) fn pattern_matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

#[cfg(test)]
mod tests;

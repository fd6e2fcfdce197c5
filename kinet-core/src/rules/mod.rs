//! Approval rules as data: a TOML file of rules for shell commands (by
//! program and argument prefix), for tools (by name and argument
//! patterns), for paths, and for the hosts a sandboxed command may reach;
//! each `allow`, `ask` or `deny` (`forbid` is read as `deny`), most with
//! examples that must and must not match, checked when the file loads.
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
//! decision = "deny"
//! justification = "delete with the file tools, which ask"
//!
//! [[tool]]
//! name = "mcp__prod_db__*"
//! decision = "deny"
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
//! decision = "deny"
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
//!
//! [[source]]                    # for the injection defence
//! tool = "mcp__bank__send_money"
//! argument = "recipient"
//! from = ["user", "mcp__bank__get_scheduled_transactions"]
//! ```
//!
//! When several rules match, `deny` wins over `ask`, and `ask` over
//! `allow`.
//!
//! **Command lines** are [planned](crate::command) where they run, at
//! check time, and the rules judge the plan, which is then what runs
//! (the shell tool starts each program itself, never through a shell): a
//! line is allowed only when every program it runs is allowed, and then
//! still asks when it sets a variable no `[[variable]]` rule allows,
//! writes a file through a redirection, redirects a file outside the
//! workspace roots, or gives an allowed program a dangerous argument (a
//! built-in catalogue — `git -c`, `git diff --output`, `find -exec`,
//! `sed -i`, `rg --pre`, `sort -o`, ... — that `[[dangerous]]` entries
//! extend). It is forbidden when any part is, and asks when the line
//! cannot be planned (`$(...)`, `$VAR`, `cd`, subshells, `&>`, ...). A
//! rule's `program` matches by resolution: a name only a program of that
//! name found in a system directory (never `./ls` or a program in the
//! workspace), a path only that file.
//!
//! ```toml
//! [[variable]]
//! name = "RUST_LOG"               # `RUST_LOG=debug cargo test` may run
//! decision = "allow"
//!
//! [[dangerous]]                   # more arguments that make `allow` ask
//! programs = ["mytool"]
//! options = ["--exec"]
//! why = "runs a program"
//! ```
//!
//! Path rules look at a call's `path` and `file_path` arguments, as
//! written and with their symlinks resolved: `ask` and `deny` apply when
//! either form matches, `allow` only when both do.
//! Host rules do not decide calls:
//! [`SandboxPolicy::with_host_rules`](crate::sandbox::SandboxPolicy::with_host_rules)
//! turns them into a sandbox's network allowlist. A file whose example does not behave as
//! written does not load, and the error names the rule and the example.

mod catalogue;
pub(crate) mod hosts;
mod targets;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use catalogue::DangerousRule;
pub use hosts::HostPattern;
pub use targets::{HostRule, PathRule, ToolNameRule, wildcard_matches};

use crate::command::{Command, Context, Invocation, Plan, Planned, Target, plan};

/// What a rule says about a call: the one vocabulary of the rules files,
/// the per-tool rules of an [`ApprovalPolicy`](crate::ApprovalPolicy) and
/// the sandbox's host and path rules. Ordered from the most to the least
/// permissive, so the strictest of several is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Decision {
    /// Run without asking.
    Allow,
    /// Ask the person.
    Ask,
    /// Never run. Rules files may also spell it `forbid`.
    #[serde(alias = "forbid")]
    Deny,
}

/// A rule for shell commands.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRule {
    /// The program: a name (`git`), which matches a program of that name
    /// found in a system directory (see [`crate::command`]), whether the
    /// line names it bare or by its absolute path; or a path (`/opt/x`,
    /// `./scripts/check.sh`, relative to a workspace root), which matches
    /// that file alone.
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

/// A rule for variables a command line sets (`NAME=value cmd`,
/// `env NAME=value cmd`). A line that sets a variable no rule allows asks.
/// The variables that choose or redirect programs
/// ([`PROGRAM_VARIABLES`](crate::command::PROGRAM_VARIABLES): `PATH`, `LD_*`, `GIT_*`, `PAGER`, ...) are
/// allowed only by a rule that names them exactly.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableRule {
    /// The variable, or a prefix ending in `*`.
    pub name: String,
    /// What the rule says.
    pub decision: Decision,
    /// Why, for messages.
    #[serde(default)]
    pub justification: Option<String>,
}

/// A `[[source]]` rule: the values of `argument` of the tools matching
/// `tool` come only from the tools in `from` (`user`: what the user said).
///
/// ```toml
/// [[source]]
/// tool = "mcp__bank__send_money"
/// argument = "recipient"
/// from = ["user", "mcp__bank__get_scheduled_transactions"]
/// justification = "a new payee is the user's to name"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SourceRule {
    /// A tool name, or a prefix ending in `*`.
    pub tool: String,
    /// The argument (a top-level name).
    pub argument: String,
    /// Tool names or patterns, and `user`.
    pub from: Vec<String>,
    /// Why, for people reading the file.
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
    /// The variable rules, in file order.
    #[serde(default, rename = "variable")]
    pub variables: Vec<VariableRule>,
    /// Dangerous arguments besides the built-in catalogue.
    #[serde(default)]
    pub dangerous: Vec<DangerousRule>,
    /// The tool rules, in file order.
    #[serde(default, rename = "tool")]
    pub tools: Vec<ToolNameRule>,
    /// The path rules, in file order.
    #[serde(default, rename = "path")]
    pub paths: Vec<PathRule>,
    /// The network rules for sandboxed commands, in file order.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostRule>,
    /// Where tools' arguments may take their values from (for the
    /// injection defence: [`Defence::with_source_rules`](crate::pipeline::Defence::with_source_rules)).
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceRule>,
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
    /// A tool, path, host or dangerous-argument rule is wrong: a failing
    /// example, a bad glob or host pattern, an `allow` for paths that
    /// names no tools.
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
    /// Allow, ask or deny.
    pub decision: Decision,
    /// Why: the rule or the construct that decided.
    pub reason: String,
}

impl CommandRule {
    /// Whether the rule matches the program a command runs (its
    /// [`Target`]), with `roots` for a rule that names a relative path.
    pub fn matches_target(&self, target: &Target, roots: &[PathBuf]) -> bool {
        let named = if self.program.contains('/') {
            let Some(path) = &target.path else {
                return false;
            };
            let rule = Path::new(&self.program);
            if rule.is_absolute() {
                crate::command::same_file(rule, path)
            } else {
                roots
                    .iter()
                    .any(|root| crate::command::same_file(&root.join(rule), path))
            }
        } else {
            target.system && target.name() == self.program
        };
        named
            && target.args.len() >= self.args.len()
            && target.args[..self.args.len()] == self.args[..]
    }

    /// Whether the rule matches `line` as a whole: one program, checked
    /// as the examples are ([`Context::examples`]).
    fn matches_line(&self, line: &str) -> Result<bool, String> {
        let context = Context::examples();
        match plan(line, &context) {
            Planned::Plan(plan) => {
                let all: Vec<&Invocation> = plan.invocations().collect();
                match all[..] {
                    [one] => Ok(self.matches_target(&one.target, context.workspace_roots())),
                    _ => Err(format!("runs {} commands, not one", all.len())),
                }
            }
            Planned::Unsure(why) => Err(why),
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
        for (index, rule) in rules.dangerous.iter().enumerate() {
            rule.check().map_err(|problem| RulesError::Invalid {
                rule: format!(
                    "dangerous rule {} (`{}`)",
                    index + 1,
                    rule.programs.join(", ")
                ),
                problem,
            })?;
        }
        rules.check_targets()?;
        Ok(rules)
    }

    /// The strictest decision of the command rules matching a target,
    /// with the rule; `None` when none matches.
    fn decide_one(&self, target: &Target, roots: &[PathBuf]) -> Option<(Decision, &CommandRule)> {
        let candidates: Box<dyn Iterator<Item = &CommandRule>> = if self.by_program.is_empty() {
            Box::new(self.commands.iter())
        } else {
            let indexes = self.by_program.get(target.name())?;
            Box::new(indexes.iter().filter_map(|&i| self.commands.get(i)))
        };
        candidates
            .filter(|rule| rule.matches_target(target, roots))
            .max_by_key(|rule| rule.decision)
            .map(|rule| (rule.decision, rule))
    }

    /// What the variable rules say of setting `name`; `None`: no rule.
    fn decide_variable(&self, name: &str) -> Option<(Decision, &VariableRule)> {
        let program_variable = crate::command::is_program_variable(name);
        self.variables
            .iter()
            .filter(|rule| {
                if program_variable {
                    rule.name == name
                } else {
                    pattern_matches(&rule.name, name)
                }
            })
            .max_by_key(|rule| rule.decision)
            .map(|rule| (rule.decision, rule))
    }

    /// Why an allowed program still asks: a variable no rule allows (or
    /// one a rule forbids), a file written or read outside the roots
    /// through a redirection, a dangerous argument, arguments added at
    /// run time to a program with dangerous ones.
    fn second_look(&self, invocation: &Invocation) -> Option<(Decision, String)> {
        let target = &invocation.target;
        for (name, _) in &target.env {
            match self.decide_variable(name) {
                Some((Decision::Allow, _)) => {}
                Some((decision, rule)) => {
                    let what = format!("variable rule `{}` for `{name}`", rule.name);
                    return Some((decision, because(what, &rule.justification)));
                }
                None => {
                    return Some((
                        Decision::Ask,
                        format!("the command sets `{name}`, which no rule allows"),
                    ));
                }
            }
        }
        if let Some(why) = redirect_problem(&invocation.redirects) {
            return Some((Decision::Ask, why));
        }
        let mut catalogue = catalogue::builtin().iter().chain(self.dangerous.iter());
        if target.open_args
            && catalogue
                .clone()
                .any(|rule| rule.programs.iter().any(|p| p == target.name()))
        {
            return Some((
                Decision::Ask,
                format!(
                    "`{}` is given arguments read at run time, and some of its arguments are dangerous",
                    target.name()
                ),
            ));
        }
        catalogue
            .find_map(|rule| rule.flags(target))
            .map(|why| (Decision::Ask, why))
    }

    /// What the rules say of a planned command line (see
    /// [`crate::command`]); `None` when no rule speaks to it at all (the
    /// host's other policy decides). A line is allowed only when every
    /// program it runs is allowed (and sets no variable no rule allows,
    /// writes no file through a redirection, reads none outside `roots`,
    /// gives no dangerous argument); forbidden when any is; a line that
    /// could not be planned asks.
    pub fn check_plan(&self, planned: &Planned, roots: &[PathBuf]) -> Option<CommandVerdict> {
        let plan = match planned {
            Planned::Plan(plan) => plan,
            Planned::Unsure(why) => {
                return Some(CommandVerdict {
                    decision: Decision::Ask,
                    reason: format!("the command cannot be checked against the rules: {why}"),
                });
            }
        };
        let mut verdict: Option<CommandVerdict> = None;
        let mut unmatched = None;
        let mut consider = |decision: Decision, reason: String| {
            if verdict.as_ref().is_none_or(|v| decision > v.decision) {
                verdict = Some(CommandVerdict { decision, reason });
            }
        };
        if let Some(why) = nested_redirects(plan) {
            consider(Decision::Ask, why);
        }
        for invocation in plan.invocations() {
            let target = &invocation.target;
            match self.decide_one(target, roots) {
                Some((Decision::Allow, rule)) => match self.second_look(invocation) {
                    Some((decision, why)) => consider(
                        decision,
                        format!("`{}` is allowed, but {why}", rule.describe()),
                    ),
                    None => consider(
                        Decision::Allow,
                        because(format!("rule `{}`", rule.describe()), &rule.justification),
                    ),
                },
                Some((decision, rule)) => consider(
                    decision,
                    because(format!("rule `{}`", rule.describe()), &rule.justification),
                ),
                None => {
                    unmatched.get_or_insert_with(|| unmatched_text(target));
                }
            }
        }
        match (verdict, unmatched) {
            (Some(v), _) if v.decision == Decision::Deny => Some(v),
            // An allowed part does not carry an unmatched one.
            (Some(v), Some(part)) if v.decision == Decision::Allow => Some(CommandVerdict {
                decision: Decision::Ask,
                reason: part,
            }),
            (verdict, _) => verdict,
        }
    }

    /// What the rules say of `line`, planned as the examples are
    /// ([`Context::examples`]: nothing looked up on this machine, a name
    /// taken for a system program). For a line another program will run
    /// (a tool kinet does not run itself), and for tests; the shell tool's
    /// lines are checked as planned where they run ([`check_plan`](Self::check_plan)).
    pub fn check_command(&self, line: &str) -> Option<CommandVerdict> {
        let context = Context::examples();
        self.check_plan(&plan(line, &context), context.workspace_roots())
    }
}

/// What to say of a program no rule matches.
fn unmatched_text(target: &Target) -> String {
    let line = std::iter::once(target.written.as_str())
        .chain(target.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    match (&target.path, target.system) {
        (Some(path), false) if !target.written_as_path() => format!(
            "no rule allows `{line}` (`{}` is found in `{}`, not a system directory)",
            target.written,
            path.parent().unwrap_or(path).display()
        ),
        _ => format!("no rule allows `{line}`"),
    }
}

/// Why redirections make an allowed command ask.
fn redirect_problem(redirects: &[crate::command::Redirect]) -> Option<String> {
    for redirect in redirects {
        if let Some(path) = redirect.writes() {
            return Some(format!("it writes `{path}` through a redirection"));
        }
        if let Some(file) = redirect.file()
            && file.outside_roots
        {
            return Some(format!(
                "it redirects `{}`, outside the workspace roots",
                file.path
            ));
        }
    }
    None
}

/// The redirections of nested shells (`sh -c '...' > out`).
fn nested_redirects(plan: &Plan) -> Option<String> {
    plan.items.iter().find_map(|item| {
        std::iter::once(&item.first)
            .chain(item.rest.iter().map(|(_, p)| p))
            .flat_map(|p| p.commands.iter())
            .find_map(|command| match command {
                Command::Shell(nested) => redirect_problem(&nested.redirects)
                    .map(|why| format!("`{} -c` {why}", nested.shell))
                    .or_else(|| nested_redirects(&nested.plan)),
                _ => None,
            })
    })
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

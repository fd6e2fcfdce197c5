//! Asking the user before a tool changes something.
//!
//! The host implements [`ConfirmHandler`] (a dialog, a terminal prompt, an
//! MCP elicitation); the [`ApprovalPolicy`] decides which calls reach it.

use std::time::Duration;

use async_trait::async_trait;

use crate::command::CheckedCommand;
use crate::rules::{Decision, Rules, pattern_matches};
use tokio::sync::{mpsc, oneshot};

pub use crate::decision::{ConfirmDecision, ConfirmRequest};

/// A confirmation that could not be obtained. The call is denied.
#[derive(Debug, Clone, thiserror::Error)]
#[error("confirmation failed: {0}")]
pub struct ConfirmError(pub String);

/// The host's approval UI.
///
/// A handler that returns an error, is dropped, or does not answer within the
/// policy's timeout denies the call.
///
/// ```
/// use kinet_core::confirm::{ConfirmDecision, ConfirmError, ConfirmHandler, ConfirmRequest};
///
/// /// Approves everything except `rm` in shell commands.
/// struct NoRm;
///
/// #[async_trait::async_trait]
/// impl ConfirmHandler for NoRm {
///     async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
///         if request.summary.contains("rm ") {
///             Ok(ConfirmDecision::Deny { reason: Some("no deletions".into()) })
///         } else {
///             Ok(ConfirmDecision::Allow)
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait ConfirmHandler: Send + Sync {
    /// Asks the user about one call.
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError>;
}

/// A shared handler is a handler: pass an `Arc` where one is taken.
#[async_trait]
impl<H: ConfirmHandler + ?Sized> ConfirmHandler for std::sync::Arc<H> {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        (**self).confirm(request).await
    }
}

/// Why [`DenyingHandler`] denies: what the host can do about it.
pub(crate) const NO_HANDLER: &str = "nobody was asked, because the host set no confirmation handler \
(AgentBuilder::confirm_handler) while its approval policy asks before calls that change something \
(ApprovalPolicy::never() or an allow rule runs them unasked)";

/// Why [`DenyingHandler`] denies a call the injection defence flagged.
pub(crate) const NO_HANDLER_FLAGGED: &str = "nobody was asked, because the host set no \
confirmation handler (AgentBuilder::confirm_handler); the injection defence asks about such a \
call under every policy (see Defence: a plan declared before reading, trusting the source, or \
Defence::unattended to refuse without asking)";

/// A handler with no UI: denies every request it is asked about. It is the
/// default, so an agent without a handler never runs a mutating tool unless
/// its policy says [`ApprovalMode::Never`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyingHandler;

#[async_trait]
impl ConfirmHandler for DenyingHandler {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let reason = match request.concern {
            None => NO_HANDLER.to_owned(),
            Some(concern) => format!("{concern}; {NO_HANDLER_FLAGGED}"),
        };
        Ok(ConfirmDecision::Deny {
            reason: Some(reason),
        })
    }
}

/// A request waiting for an answer from a [`ChannelConfirmHandler`]'s
/// receiver. Dropping it without answering denies the call.
#[derive(Debug)]
pub struct PendingConfirm {
    /// The request.
    pub request: ConfirmRequest,
    responder: oneshot::Sender<ConfirmDecision>,
}

impl PendingConfirm {
    /// Whether the run stopped waiting (timed out or was cancelled): the UI
    /// can drop such a request instead of showing it.
    pub fn is_closed(&self) -> bool {
        self.responder.is_closed()
    }

    /// Answers the request.
    pub fn respond(self, decision: ConfirmDecision) {
        // The run may have been cancelled meanwhile; nothing to do then.
        let _ = self.responder.send(decision);
    }
}

/// A handler that forwards requests over a channel, for hosts whose UI runs
/// elsewhere (an event loop, another task).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_core::confirm::{ChannelConfirmHandler, ConfirmDecision, ConfirmHandler, ConfirmRequest};
///
/// let (handler, mut requests) = ChannelConfirmHandler::new(8);
/// tokio::spawn(async move {
///     while let Some(pending) = requests.recv().await {
///         pending.respond(ConfirmDecision::Allow);
///     }
/// });
/// let request = ConfirmRequest::new("shell", "1", serde_json::json!({"command": "ls"}), "ls");
/// assert_eq!(handler.confirm(request).await.unwrap(), ConfirmDecision::Allow);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ChannelConfirmHandler {
    sender: mpsc::Sender<PendingConfirm>,
}

impl ChannelConfirmHandler {
    /// A handler and the receiver the UI reads requests from.
    pub fn new(buffer: usize) -> (Self, mpsc::Receiver<PendingConfirm>) {
        let (sender, receiver) = mpsc::channel(buffer.max(1));
        (Self { sender }, receiver)
    }
}

#[async_trait]
impl ConfirmHandler for ChannelConfirmHandler {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let (responder, answer) = oneshot::channel();
        self.sender
            .send(PendingConfirm { request, responder })
            .await
            .map_err(|_| ConfirmError("the confirmation UI is gone".into()))?;
        answer
            .await
            .map_err(|_| ConfirmError("the request was dropped without an answer".into()))
    }
}

/// When to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ApprovalMode {
    /// Ask before every mutating call (the default). Read-only calls run.
    #[default]
    Ask,
    /// Never ask: every call runs (auto-approve).
    Never,
    /// Deny every mutating call without asking. Read-only calls run.
    DenyAll,
}

/// Which calls need the user's approval.
///
/// Rules are checked first; when several match, the strictest wins
/// (`Deny` over `Ask` over `Allow`). Otherwise calls that are not mutating
/// (see [`Tool::mutating`](crate::Tool::mutating)) run and mutating ones follow the [`ApprovalMode`]. Tools approved for the session
/// run without asking unless a `Deny` rule matches.
///
/// ```
/// use kinet_core::confirm::{ApprovalPolicy, ApprovalMode};
/// use std::time::Duration;
///
/// let policy = ApprovalPolicy::ask()
///     .allow("write_file")
///     .deny("mcp__prod_db__*")
///     .confirm_timeout(Duration::from_secs(60));
/// assert_eq!(policy.mode(), ApprovalMode::Ask);
/// ```
#[derive(Debug, Clone)]
pub struct ApprovalPolicy {
    mode: ApprovalMode,
    rules: Vec<(String, Decision)>,
    timeout: Duration,
    /// A rules file ([`crate::rules`]) and the tools whose argument is a
    /// shell command line: (tool name, argument field).
    data: Option<std::sync::Arc<Rules>>,
    command_tools: Vec<(String, String)>,
    /// A sub-agent's policy: the rules file's allows do not apply, its
    /// asks deny.
    sub_agent: bool,
    /// Questions stop the run, to be decided later.
    defer: bool,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self::with_mode(ApprovalMode::Ask)
    }
}

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Run,
    Ask,
    Deny(String),
}

impl ApprovalPolicy {
    /// A policy with the given mode, no rules, and a 5-minute confirmation
    /// timeout.
    pub fn with_mode(mode: ApprovalMode) -> Self {
        Self {
            mode,
            rules: Vec::new(),
            timeout: Duration::from_secs(300),
            data: None,
            command_tools: Vec::new(),
            sub_agent: false,
            defer: false,
        }
    }

    /// Also decides by a rules file ([`Rules`], loaded and checked with
    /// [`Rules::from_toml`]): its tool rules (by name and argument
    /// patterns) join the rules above; its path rules judge the `path` and
    /// `file_path` arguments, relative to the call's workspace roots; and
    /// the command line of each shell call (see
    /// [`command_tool`](Self::command_tool)) is parsed and checked against
    /// its command rules: forbidden when any part is, run without asking
    /// when every part is allowed, asked when the parser cannot prove what
    /// runs. The strictest of all matching rules wins. (The file's host
    /// rules are for the sandbox:
    /// [`SandboxPolicy::with_host_rules`](crate::sandbox::SandboxPolicy::with_host_rules).)
    pub fn with_rules(mut self, rules: Rules) -> Self {
        self.data = Some(std::sync::Arc::new(rules));
        self
    }

    /// This policy with `earlier`'s rules file when it has none of its own
    /// (the builder's groups combine this way).
    pub(crate) fn keeping_rules_of(mut self, earlier: &ApprovalPolicy) -> Self {
        if self.data.is_none() {
            self.data = earlier.data.clone();
        }
        self
    }

    /// Names a tool whose argument `field` is a shell command line, for
    /// the rules file's command rules, when the tool runs the line itself
    /// (an MCP tool, a host's own): kinet cannot run what it checked, so
    /// the rules' `forbid` and `ask` apply to it but their `allow` asks.
    /// Tools that give their line to kinet
    /// ([`Tool::command_line`](crate::Tool::command_line), as the shell
    /// tool does) need no naming: their plan is checked and then run.
    /// Default: none.
    pub fn command_tool(mut self, tool: impl Into<String>, field: impl Into<String>) -> Self {
        self.command_tools.push((tool.into(), field.into()));
        self
    }

    /// Makes every question stop the run instead of reaching the handler
    /// (default: no): the run ends with
    /// [`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval),
    /// and [`Agent::resume`](crate::Agent::resume) finishes it with the
    /// decisions, in this process or another. For services, where the
    /// answer comes long after the request that started the run. (A
    /// handler can also defer one question:
    /// [`ConfirmDecision::Defer`].)
    pub fn defer_questions(mut self, defer: bool) -> Self {
        self.defer = defer;
        self
    }

    /// Whether questions stop the run ([`defer_questions`](Self::defer_questions)).
    pub(crate) fn defers(&self) -> bool {
        self.defer
    }

    /// Ask before mutating calls (the default).
    pub fn ask() -> Self {
        Self::with_mode(ApprovalMode::Ask)
    }

    /// Never ask; run everything.
    pub fn never() -> Self {
        Self::with_mode(ApprovalMode::Never)
    }

    /// Deny every mutating call.
    pub fn deny_all() -> Self {
        Self::with_mode(ApprovalMode::DenyAll)
    }

    /// The mode.
    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    /// Adds a rule.
    pub fn rule(mut self, pattern: impl Into<String>, rule: Decision) -> Self {
        self.rules.push((pattern.into(), rule));
        self
    }

    /// Runs calls of matching tools without asking.
    pub fn allow(self, pattern: impl Into<String>) -> Self {
        self.rule(pattern, Decision::Allow)
    }

    /// Never runs matching tools.
    pub fn deny(self, pattern: impl Into<String>) -> Self {
        self.rule(pattern, Decision::Deny)
    }

    /// Always asks for matching tools, also read-only calls.
    pub fn ask_for(self, pattern: impl Into<String>) -> Self {
        self.rule(pattern, Decision::Ask)
    }

    /// How long to wait for the handler before denying. Default 5 minutes.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The confirmation timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The policy a sub-agent runs under: mutating calls denied, the
    /// parent's deny rules kept, and its ask rules kept: a sub-agent's
    /// call that matches one is asked about through the host's handler
    /// (or, when questions are deferred, stops the sub-agent and the
    /// parent's run with it, for the host to answer later). A rules
    /// file's asks deny for a sub-agent (see `as_rule`).
    pub(crate) fn for_sub_agent(&self) -> Self {
        Self {
            mode: ApprovalMode::DenyAll,
            rules: self
                .rules
                .iter()
                .filter(|(_, rule)| *rule != Decision::Allow)
                .map(|(pattern, rule)| (pattern.clone(), *rule))
                .collect(),
            timeout: self.timeout,
            data: self.data.clone(),
            command_tools: self.command_tools.clone(),
            sub_agent: true,
            defer: self.defer,
        }
    }

    /// The strictest rule for this call, with a reason when a rules file
    /// decided.
    fn matching_rule(
        &self,
        tool: &str,
        arguments: &str,
        place: Place<'_>,
        command: Option<&CheckedCommand>,
    ) -> Option<(Decision, Option<String>)> {
        let mut strictest: Option<(Decision, Option<String>)> = None;
        let mut consider = |rule: Decision, reason: Option<String>| {
            let stricter = match &strictest {
                None => true,
                Some((held, _)) => rule > *held,
            };
            if stricter {
                strictest = Some((rule, reason));
            }
        };
        for (pattern, rule) in &self.rules {
            if pattern_matches(pattern, tool) {
                consider(*rule, None);
            }
        }
        if let Some(data) = &self.data {
            let parsed: serde_json::Value =
                serde_json::from_str(arguments).unwrap_or(serde_json::Value::Null);
            if let Some((decision, reason)) = data.check_tool(tool, &parsed)
                && let Some(rule) = self.as_rule(decision)
            {
                consider(rule, Some(reason));
            }
            if let Some((decision, reason)) = data.check_paths(tool, &parsed, place.0, place.1)
                && let Some(rule) = self.as_rule(decision)
            {
                consider(rule, Some(reason));
            }
            // An allow stands only for a line kinet runs as checked: `why`
            // says why this one is not.
            let (verdict, why) = match command {
                Some(checked) => (
                    data.check_plan(&checked.planned, checked.context.workspace_roots()),
                    (!crate::command::RUNS_PLANS)
                        .then(|| "kinet runs command lines itself on Linux only".to_owned()),
                ),
                None => match self.command_line(tool, arguments) {
                    Some(line) => (
                        data.check_command(&line),
                        Some(format!(
                            "`{tool}` runs its command line itself, so kinet cannot run what the rules checked"
                        )),
                    ),
                    None => (None, None),
                },
            };
            let verdict = verdict.map(|mut verdict| {
                if let Some(why) = why.filter(|_| verdict.decision == Decision::Allow) {
                    verdict.decision = Decision::Ask;
                    verdict.reason = format!("{}; {why}", verdict.reason);
                }
                verdict
            });
            if let Some(verdict) = verdict
                && let Some(rule) = self.as_rule(verdict.decision)
            {
                consider(rule, Some(verdict.reason));
            }
        }
        strictest
    }

    /// A rules-file decision as a rule of this policy. For a sub-agent,
    /// the file's asks deny and its allows do not apply (sub-agents run no
    /// mutating call the host did not name in an ask rule).
    fn as_rule(&self, decision: Decision) -> Option<Decision> {
        match decision {
            Decision::Ask if self.sub_agent => Some(Decision::Deny),
            Decision::Allow if self.sub_agent => None,
            decision => Some(decision),
        }
    }

    /// The command line of a call to a command tool.
    fn command_line(&self, tool: &str, arguments: &str) -> Option<String> {
        let (_, field) = self.command_tools.iter().find(|(name, _)| name == tool)?;
        let arguments: serde_json::Value = serde_json::from_str(arguments).ok()?;
        arguments.get(field)?.as_str().map(str::to_owned)
    }

    #[cfg(test)]
    pub(crate) fn verdict(
        &self,
        tool: &str,
        arguments: &str,
        mutating: bool,
        session_approved: bool,
    ) -> Verdict {
        self.verdict_at(
            tool,
            arguments,
            mutating,
            session_approved,
            (std::path::Path::new("/"), &[]),
            None,
        )
    }

    /// The verdict for a call made from `place` (the call's directory and
    /// workspace roots, against which path rules are matched).
    pub(crate) fn verdict_at(
        &self,
        tool: &str,
        arguments: &str,
        mutating: bool,
        session_approved: bool,
        place: Place<'_>,
        command: Option<&CheckedCommand>,
    ) -> Verdict {
        match self.matching_rule(tool, arguments, place, command) {
            Some((Decision::Deny, reason)) => {
                return Verdict::Deny(match reason {
                    Some(reason) => format!("`{tool}` is forbidden by the rules ({reason})"),
                    None => format!("calls to `{tool}` are denied by the approval policy"),
                });
            }
            Some((Decision::Allow, _)) => return Verdict::Run,
            Some((Decision::Ask, _)) => {
                return if session_approved {
                    Verdict::Run
                } else {
                    Verdict::Ask
                };
            }
            None => {}
        }
        if !mutating || session_approved {
            return Verdict::Run;
        }
        match self.mode {
            ApprovalMode::Never => Verdict::Run,
            ApprovalMode::Ask => Verdict::Ask,
            ApprovalMode::DenyAll => Verdict::Deny(format!(
                "mutating calls such as `{tool}` are not allowed in this session"
            )),
        }
    }
}

/// Where a call is made: its directory and workspace roots.
pub(crate) type Place<'a> = (&'a std::path::Path, &'a [std::path::PathBuf]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_asks_for_mutating_only() {
        let policy = ApprovalPolicy::default();
        assert_eq!(policy.verdict("shell", "{}", true, false), Verdict::Ask);
        assert_eq!(
            policy.verdict("read_file", "{}", false, false),
            Verdict::Run
        );
        assert_eq!(policy.verdict("shell", "{}", true, true), Verdict::Run);
    }

    #[test]
    fn strictest_rule_wins() {
        let policy = ApprovalPolicy::never()
            .allow("mcp__db__*")
            .deny("mcp__db__drop");
        assert!(matches!(
            policy.verdict("mcp__db__drop", "{}", false, true),
            Verdict::Deny(_)
        ));
        assert_eq!(
            policy.verdict("mcp__db__select", "{}", true, false),
            Verdict::Run
        );
    }

    #[test]
    fn ask_rule_applies_to_read_only() {
        let policy = ApprovalPolicy::never().ask_for("web_fetch");
        assert_eq!(
            policy.verdict("web_fetch", "{}", false, false),
            Verdict::Ask
        );
        assert_eq!(policy.verdict("web_fetch", "{}", false, true), Verdict::Run);
    }

    #[test]
    fn sub_agents_keep_ask_rules_and_deny_the_rest() {
        let policy = ApprovalPolicy::never()
            .ask_for("mcp__gmail__*")
            .allow("shell")
            .for_sub_agent();
        assert_eq!(
            policy.verdict("mcp__gmail__read", "{}", false, false),
            Verdict::Ask
        );
        assert_eq!(
            policy.verdict("mcp__gmail__send", "{}", true, false),
            Verdict::Ask
        );
        assert!(matches!(
            policy.verdict("shell", "{}", true, false),
            Verdict::Deny(_)
        ));
        assert_eq!(policy.verdict("grep", "{}", false, false), Verdict::Run);
    }

    #[test]
    fn a_rules_file_decides_shell_command_lines() {
        let rules = Rules::from_toml(
            r#"
[[command]]
program = "cargo"
args = ["test"]
decision = "allow"
match = ["cargo test -p kinet-core"]
[[command]]
program = "rm"
decision = "deny"
justification = "use the file tools"
[[tool]]
name = "mcp__prod__*"
decision = "deny"
"#,
        )
        .unwrap();
        let policy = ApprovalPolicy::ask()
            .with_rules(rules)
            .allow("mcp__prod__read");
        let shell = |line: &str| serde_json::json!({ "command": line }).to_string();
        let context = crate::command::Context::examples();
        let run = |policy: &ApprovalPolicy, line: &str, approved: bool| {
            let checked = CheckedCommand {
                call_id: "1".into(),
                line: line.into(),
                planned: crate::command::plan(line, &context),
                context: context.clone(),
            };
            policy.verdict_at(
                "shell",
                &shell(line),
                true,
                approved,
                (std::path::Path::new("/"), &[]),
                Some(&checked),
            )
        };
        assert_eq!(run(&policy, "cargo test", false), Verdict::Run);
        assert_eq!(run(&policy, "cargo build", false), Verdict::Ask);
        assert_eq!(
            run(&policy, "cargo test && echo $(id)", false),
            Verdict::Ask
        );
        let Verdict::Deny(reason) = run(&policy, "cargo test; rm -rf ~", true) else {
            panic!("rm must be forbidden, session approval or not");
        };
        assert!(reason.contains("use the file tools"), "{reason}");
        // Forbid beats the host's allow rule.
        assert!(matches!(
            policy.verdict("mcp__prod__read", "{}", false, false),
            Verdict::Deny(_)
        ));
        // Another tool with a command field is not a command tool unless
        // named; named, the rules' forbid holds and their allow asks, since
        // the tool runs the line itself.
        assert_eq!(
            policy.verdict("run", &shell("rm x"), true, false),
            Verdict::Ask
        );
        let named = policy.clone().command_tool("run", "command");
        assert!(matches!(
            named.verdict("run", &shell("rm x"), true, false),
            Verdict::Deny(_)
        ));
        assert_eq!(
            named.verdict("run", &shell("cargo test"), true, false),
            Verdict::Ask
        );
        // A sub-agent: the file's allows do not apply, its asks deny.
        let sub = policy.for_sub_agent();
        assert!(matches!(run(&sub, "cargo test", false), Verdict::Deny(_)));
        assert!(matches!(run(&sub, "cargo build", false), Verdict::Deny(_)));
    }

    #[test]
    fn a_rules_file_decides_paths_and_tool_arguments() {
        let rules = Rules::from_toml(
            r#"
[[path]]
pattern = "secrets/**"
decision = "deny"

[[path]]
pattern = "docs/**"
decision = "allow"
tools = ["write_file"]

[[tool]]
name = "web_fetch"
args = { url = "https://docs.rs/*" }
decision = "allow"
"#,
        )
        .unwrap();
        let policy = ApprovalPolicy::ask().allow("read_file").with_rules(rules);
        let root = std::path::PathBuf::from("/work/repo");
        let roots = [root.clone()];
        let place = (root.as_path(), &roots[..]);
        let path = |p: &str| serde_json::json!({ "path": p }).to_string();
        // A host allow does not carry a forbidden path.
        let Verdict::Deny(reason) =
            policy.verdict_at("read_file", &path("secrets/k"), false, false, place, None)
        else {
            panic!("a forbidden path must be denied");
        };
        assert!(reason.contains("path rule `secrets/**`"), "{reason}");
        assert_eq!(
            policy.verdict_at("write_file", &path("docs/a.md"), true, false, place, None),
            Verdict::Run
        );
        assert_eq!(
            policy.verdict_at(
                "write_file",
                &path("/work/repo/src/a.rs"),
                true,
                false,
                place,
                None
            ),
            Verdict::Ask
        );
        let url = |u: &str| serde_json::json!({ "url": u }).to_string();
        assert_eq!(
            policy.verdict_at(
                "web_fetch",
                &url("https://docs.rs/x"),
                true,
                false,
                place,
                None
            ),
            Verdict::Run
        );
        assert_eq!(
            policy.verdict_at(
                "web_fetch",
                &url("https://example.com"),
                true,
                false,
                place,
                None
            ),
            Verdict::Ask
        );
        // A sub-agent keeps the forbidden path, not the allowed one.
        let sub = policy.for_sub_agent();
        assert!(matches!(
            sub.verdict_at("write_file", &path("docs/a.md"), true, false, place, None),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn deny_all_still_reads() {
        let policy = ApprovalPolicy::deny_all();
        assert!(matches!(
            policy.verdict("write_file", "{}", true, false),
            Verdict::Deny(_)
        ));
        assert_eq!(policy.verdict("grep", "{}", false, false), Verdict::Run);
    }
}

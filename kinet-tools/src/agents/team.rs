//! Agent teams: persistent member agents, each with its own history, and
//! the four tools that talk to them (`spawn_team`, `team_broadcast`,
//! `team_send`, `team_close`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::confirm::ConfirmRequest;
use kinet_core::deferred::{Decisions, Suspension};
use kinet_core::tool::ToolErrorKind;
use kinet_core::tool::engine::AgentHandle;
use kinet_core::tool::engine::EngineCtx as _;
use kinet_core::{Conversation, RunStop, Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the four team tools say about themselves. The team is the agent's
/// own: no approval. Open-world all the same: the members' replies carry
/// whatever they read (web pages, mail), so they are untrusted text for the
/// injection defence. One team call at a time, alone in its turn; not
/// keyed, because a keyed lock is shared with the members' own runs and a
/// member calling a team tool would wait on it.
macro_rules! team_tool_traits {
    () => {
        fn annotations(&self) -> kinet_core::ToolAnnotations {
            kinet_core::ToolAnnotations::local_write().open_world(true)
        }
        fn mutating(&self, _: &Self::Args) -> bool {
            false
        }
        fn scheduling(&self, _: &Self::Args) -> kinet_core::tool::Scheduling {
            kinet_core::tool::Scheduling::Exclusive
        }
    };
}

/// One member's state, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's name.
    pub name: String,
    /// Its role (system prompt).
    pub role: String,
    /// Messages it has answered.
    pub replies: usize,
    /// Whether it is working on a message now.
    pub busy: bool,
}

/// A member's answer, or why there is none.
type Reply = Result<String, String>;

/// What a member is asked to do.
enum Asked {
    /// Answer a message.
    Message(String),
    /// Finish its run that stopped at approvals to be given later, with
    /// the decisions.
    Resume(Decisions),
}

/// What a member's run came to.
enum Heard {
    Replied(Reply),
    /// Its run stopped at approvals to be given later (the approval
    /// policy defers questions): these calls wait.
    Waiting(Vec<ConfirmRequest>),
}

/// A request to a member, with what the lead's model had read when it
/// wrote it, and where the answer goes.
struct Letter {
    asked: Asked,
    read: kinet_core::provenance::Provenance,
    answer: oneshot::Sender<Heard>,
}

struct Member {
    role: String,
    engine: Option<String>,
    inbox: mpsc::Sender<Letter>,
    task: JoinHandle<()>,
    state: Arc<Mutex<(usize, bool)>>,
    /// Its history, as of its last reply (for sessions).
    history: Arc<Mutex<Conversation>>,
}

/// A member restored from a session, started again on its first message.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Dormant {
    role: String,
    #[serde(default)]
    engine: Option<String>,
    history: Conversation,
}

/// The agent's team of persistent member agents: each runs as a tokio task
/// with its own history. Shared by the four team tools; the host can read
/// its state.
#[derive(Clone, Default)]
pub struct Team {
    members: Arc<Mutex<BTreeMap<String, Member>>>,
    /// Members restored from a session and not yet started again.
    dormant: Arc<Mutex<BTreeMap<String, Dormant>>>,
    stop: Arc<Mutex<CancellationToken>>,
}

/// Kept in a [`Session`](kinet_core::session::Session) as `"team"`: each
/// member's role, engine and history. Restored members start again on
/// their first message, remembering everything up to their last reply.
impl kinet_core::session::SessionState for Team {
    fn key(&self) -> &str {
        "team"
    }

    fn save(&self) -> serde_json::Value {
        let mut saved: BTreeMap<String, Dormant> =
            self.dormant.lock().map(|d| d.clone()).unwrap_or_default();
        if let Ok(members) = self.members.lock() {
            for (name, member) in members.iter() {
                let history = member.history.lock().map(|h| h.clone()).unwrap_or_default();
                saved.insert(
                    name.clone(),
                    Dormant {
                        role: member.role.clone(),
                        engine: member.engine.clone(),
                        history,
                    },
                );
            }
        }
        serde_json::to_value(saved).unwrap_or_default()
    }

    fn restore(&self, state: &serde_json::Value) -> Result<(), String> {
        let saved: BTreeMap<String, Dormant> =
            serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        let mut dormant = self
            .dormant
            .lock()
            .map_err(|_| "the team is poisoned".to_owned())?;
        *dormant = saved;
        Ok(())
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("members", &self.status())
            .finish()
    }
}

impl Team {
    /// An empty team.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every member's state (members restored from a session count, and
    /// start again on their first message).
    pub fn status(&self) -> Vec<MemberStatus> {
        let mut all: Vec<MemberStatus> = self
            .members
            .lock()
            .map(|members| {
                members
                    .iter()
                    .map(|(name, member)| {
                        let (replies, busy) = member.state.lock().map(|s| *s).unwrap_or((0, false));
                        MemberStatus {
                            name: name.clone(),
                            role: member.role.clone(),
                            replies,
                            busy,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Ok(dormant) = self.dormant.lock() {
            for (name, member) in dormant.iter() {
                if !all.iter().any(|m| &m.name == name) {
                    all.push(MemberStatus {
                        name: name.clone(),
                        role: member.role.clone(),
                        replies: member
                            .history
                            .messages
                            .iter()
                            .filter(|m| matches!(m, kinet_core::Message::Assistant { .. }))
                            .count(),
                        busy: false,
                    });
                }
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Ends every member's task; returns how many there were.
    pub fn close(&self) -> usize {
        if let Ok(stop) = self.stop.lock() {
            stop.cancel();
        }
        let members = self
            .members
            .lock()
            .map(|mut members| std::mem::take(&mut *members))
            .unwrap_or_default();
        for member in members.values() {
            member.task.abort();
        }
        let dormant = self
            .dormant
            .lock()
            .map(|mut dormant| std::mem::take(&mut *dormant))
            .unwrap_or_default();
        let closed = members.len() + dormant.keys().filter(|n| !members.contains_key(*n)).count();
        if let Ok(mut stop) = self.stop.lock() {
            *stop = CancellationToken::new();
        }
        closed
    }

    fn add(
        &self,
        name: String,
        role: String,
        engine: Option<String>,
        agent: Arc<dyn AgentHandle>,
        history: Conversation,
    ) -> Result<(), ToolError> {
        let shared_history = Arc::new(Mutex::new(history.clone()));
        let task_history = Arc::clone(&shared_history);
        let (inbox, mut messages) = mpsc::channel::<Letter>(16);
        let state = Arc::new(Mutex::new((0usize, false)));
        let stop = self
            .stop
            .lock()
            .map(|s| s.clone())
            .map_err(|_| ToolError::failed("the team is poisoned"))?;
        let task_state = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let mut conversation = history;
            while let Some(Letter {
                asked,
                read,
                answer,
            }) = tokio::select! {
                letter = messages.recv() => letter,
                _ = stop.cancelled() => None,
            } {
                if let Ok(mut state) = task_state.lock() {
                    state.1 = true;
                }
                // The lead's model wrote the message: the member knows what
                // that model read and does not take it as the user's.
                conversation.provenance.absorb(&read);
                let outcome = match asked {
                    Asked::Message(message) => {
                        conversation.push_user(message);
                        agent.run(conversation.clone(), stop.child_token()).await
                    }
                    Asked::Resume(decisions) => {
                        agent
                            .resume(conversation.clone(), decisions, stop.child_token())
                            .await
                    }
                };
                let heard = match &outcome.stop {
                    RunStop::Completed | RunStop::MaxTurns => {
                        Heard::Replied(Ok(outcome.final_text().unwrap_or_default()))
                    }
                    RunStop::AwaitingApproval { pending } => Heard::Waiting(pending.clone()),
                    other => Heard::Replied(Err(format!("its run {other}"))),
                };
                conversation = outcome.conversation;
                if let Ok(mut saved) = task_history.lock() {
                    *saved = conversation.clone();
                }
                if let Ok(mut state) = task_state.lock() {
                    state.0 += 1;
                    state.1 = false;
                }
                let _ = answer.send(heard);
            }
        });
        let mut members = self
            .members
            .lock()
            .map_err(|_| ToolError::failed("the team is poisoned"))?;
        if let Ok(mut dormant) = self.dormant.lock() {
            dormant.remove(&name);
        }
        if let Some(old) = members.insert(
            name,
            Member {
                role,
                engine,
                inbox,
                task,
                state,
                history: shared_history,
            },
        ) {
            old.task.abort();
        }
        Ok(())
    }

    /// Starts a member restored from a session again, with its history.
    fn wake(&self, name: &str, ctx: &ToolCtx) {
        let Some(member) = self.dormant.lock().ok().and_then(|d| d.get(name).cloned()) else {
            return;
        };
        let Some(spawner) = ctx.spawner() else {
            return;
        };
        if let Ok(agent) = spawner.member_agent(member.engine.as_deref(), Some(&member.role), ctx) {
            let _ = self.add(
                name.to_owned(),
                member.role,
                member.engine,
                agent,
                member.history,
            );
        }
    }

    /// Sends each named member its request at once and collects what
    /// they came to, each within `timeout`.
    async fn ask(
        &self,
        letters: Vec<(String, Asked)>,
        timeout: Duration,
        ctx: &ToolCtx,
    ) -> Vec<(String, Heard)> {
        let mut pending = Vec::new();
        for (name, asked) in letters {
            self.wake(&name, ctx);
            let inbox = self
                .members
                .lock()
                .ok()
                .and_then(|m| m.get(&name).map(|member| member.inbox.clone()));
            let (answer, heard) = oneshot::channel();
            let letter = Letter {
                asked,
                read: ctx.provenance().clone(),
                answer,
            };
            match inbox {
                Some(inbox) if inbox.send(letter).await.is_ok() => {
                    pending.push((name, Some(heard)));
                }
                _ => pending.push((name, None)),
            }
        }
        let waits = pending.into_iter().map(|(name, heard)| async move {
            let Some(heard) = heard else {
                return (
                    name,
                    Heard::Replied(Err("not a member of the team".to_owned())),
                );
            };
            let heard = tokio::select! {
                _ = ctx.cancellation().cancelled() => Heard::Replied(Err("cancelled".to_owned())),
                heard = tokio::time::timeout(timeout, heard) => match heard {
                    Ok(Ok(heard)) => heard,
                    Ok(Err(_)) => Heard::Replied(Err("the member stopped".to_owned())),
                    Err(_) => Heard::Replied(Err(format!("no reply within {} s", timeout.as_secs()))),
                },
            };
            (name, heard)
        });
        futures::future::join_all(waits).await
    }

    /// Asks `names` the message and formats their replies, as one call of
    /// a team tool. When a member's run stops at approvals to be given
    /// later, the call stops too ([`ToolError::deferred`]): the waiting
    /// calls go to the host under ids `<this call>.<member>.<call>`, and
    /// the replies so far are saved; on resume, the call runs again, the
    /// waiting members finish their runs with the decisions, and the
    /// replies are formatted as they would have been in place.
    async fn converse(
        &self,
        names: Vec<String>,
        message: &str,
        timeout: Duration,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        let (mut stopped, letters) = match ctx.saved_state() {
            Some(saved) => {
                let stopped = Stopped::deserialize(saved).map_err(|e| {
                    ToolError::failed(format!(
                        "the saved state of team call {} cannot be read: {e}",
                        ctx.call_id()
                    ))
                })?;
                let decisions = ctx.decisions_within();
                let letters = stopped
                    .waiting
                    .iter()
                    .cloned()
                    .map(|name| {
                        let asked = Asked::Resume(decisions.within(&name));
                        (name, asked)
                    })
                    .collect();
                (stopped, letters)
            }
            None => {
                let letters = names
                    .iter()
                    .map(|name| (name.clone(), Asked::Message(message.to_owned())))
                    .collect();
                let stopped = Stopped {
                    order: names,
                    replies: BTreeMap::new(),
                    waiting: Vec::new(),
                };
                (stopped, letters)
            }
        };
        stopped.waiting.clear();
        let mut pending = Vec::new();
        for (name, heard) in self.ask(letters, timeout, ctx).await {
            match heard {
                Heard::Replied(reply) => {
                    stopped.replies.insert(name, reply);
                }
                Heard::Waiting(requests) => {
                    pending.extend(requests.into_iter().map(|mut request| {
                        request.call_id = format!("{}.{name}.{}", ctx.call_id(), request.call_id);
                        request
                    }));
                    stopped.waiting.push(name);
                }
            }
        }
        if !pending.is_empty() {
            let state = serde_json::to_value(&stopped).map_err(|e| {
                ToolError::failed(format!("the team's replies cannot be saved: {e}"))
            })?;
            return Err(ToolError::deferred(
                Suspension::new(pending).save(ctx.call_id(), state),
            ));
        }
        Ok(format_replies(stopped.order.iter().map(|name| {
            let reply = stopped
                .replies
                .remove(name)
                .unwrap_or_else(|| Err("no reply".to_owned()));
            (name.clone(), reply)
        })))
    }
}

/// A team call that stopped because members wait for approvals: the
/// members in the order they were asked, the replies so far, and who
/// waits.
#[derive(serde::Serialize, Deserialize)]
struct Stopped {
    order: Vec<String>,
    replies: BTreeMap<String, Reply>,
    waiting: Vec<String>,
}

/// Arguments of `spawn_team`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SpawnTeamArgs {
    /// The members to start.
    pub members: Vec<TeamMemberSpec>,
}

/// One member to start.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TeamMemberSpec {
    /// A short unique name, e.g. `reviewer`.
    pub name: String,
    /// Its role: the system prompt it works under.
    pub role: String,
    /// A named engine registered by the host; omit for the current one.
    #[serde(default)]
    pub engine: Option<String>,
}

/// Arguments of `team_broadcast`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TeamBroadcastArgs {
    /// The message every member receives.
    pub message: String,
}

/// Arguments of `team_send`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TeamSendArgs {
    /// The member's name.
    pub member: String,
    /// The message.
    pub message: String,
}

/// Arguments of `team_close`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TeamCloseArgs {}

/// The team tools, sharing one [`Team`].
#[derive(Debug, Clone)]
pub struct TeamPack {
    team: Team,
    reply_timeout: Duration,
}

impl TeamPack {
    /// Tools on `team`; replies are awaited up to `reply_timeout` (default
    /// in [`TeamPack::default`]: 300 s).
    pub fn new(team: Team, reply_timeout: Duration) -> Self {
        Self {
            team,
            reply_timeout,
        }
    }

    /// The team.
    pub fn team(&self) -> &Team {
        &self.team
    }

    /// `spawn_team`, `team_broadcast`, `team_send`, `team_close`.
    pub fn toolset(&self) -> kinet_core::Toolset {
        kinet_core::Toolset::new()
            .with(SpawnTeam(self.clone()))
            .with(TeamBroadcast(self.clone()))
            .with(TeamSend(self.clone()))
            .with(TeamClose(self.clone()))
    }
}

impl Default for TeamPack {
    fn default() -> Self {
        Self::new(Team::new(), Duration::from_secs(300))
    }
}

fn format_replies(replies: impl Iterator<Item = (String, Reply)>) -> ToolOutput {
    let mut text = String::new();
    for (name, reply) in replies {
        match reply {
            Ok(answer) => text.push_str(&format!("## {name}\n{}\n\n", answer.trim())),
            Err(error) => text.push_str(&format!("## {name}\n(no reply: {error})\n\n")),
        }
    }
    ToolOutput::text(text.trim_end().to_owned())
}

/// Starts persistent member agents.
struct SpawnTeam(TeamPack);
/// Sends a message to every member.
struct TeamBroadcast(TeamPack);
/// Sends a message to one member.
struct TeamSend(TeamPack);
/// Ends the team.
struct TeamClose(TeamPack);

#[async_trait]
impl Tool for SpawnTeam {
    type Args = SpawnTeamArgs;
    fn name(&self) -> &str {
        "spawn_team"
    }
    fn description(&self) -> &str {
        "Starts a team of persistent helper agents, each with a name and a role (its \
         instructions). Members keep their own conversation across messages, can read and \
         search, and change nothing without the user's approval. Talk to them with team_send or team_broadcast; end \
         them with team_close."
    }
    team_tool_traits!();
    async fn call(&self, args: SpawnTeamArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.members.is_empty() {
            return Err(ToolError::invalid_arguments("give at least one member"));
        }
        let spawner = ctx
            .spawner()
            .ok_or_else(|| ToolError::failed("sub-agents are not available at this depth"))?;
        let mut names = Vec::new();
        for member in args.members {
            // Dots separate the parts of the ids of a member's calls that
            // wait for approval (`<call>.<member>.<its call>`).
            if member.name.trim().is_empty()
                || member.name.contains('.')
                || names.contains(&member.name)
            {
                return Err(ToolError::invalid_arguments(format!(
                    "member names must be non-empty, unique and without dots (`{}`)",
                    member.name
                )));
            }
            let agent = spawner.member_agent(member.engine.as_deref(), Some(&member.role), ctx)?;
            self.0.team.add(
                member.name.clone(),
                member.role,
                member.engine.clone(),
                agent,
                Conversation::new(),
            )?;
            names.push(member.name);
        }
        Ok(ToolOutput::text(format!(
            "Team started: {}.",
            names.join(", ")
        )))
    }
}

#[async_trait]
impl Tool for TeamBroadcast {
    type Args = TeamBroadcastArgs;
    fn name(&self) -> &str {
        "team_broadcast"
    }
    fn description(&self) -> &str {
        "Sends one message to every team member at once and returns all their replies."
    }
    team_tool_traits!();
    async fn call(&self, args: TeamBroadcastArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let names: Vec<String> = self.0.team.status().into_iter().map(|m| m.name).collect();
        if names.is_empty() {
            return Err(ToolError::new(
                ToolErrorKind::NotFound,
                "there is no team; start one with spawn_team",
            ));
        }
        self.0
            .team
            .converse(names, &args.message, self.0.reply_timeout, ctx)
            .await
    }
}

#[async_trait]
impl Tool for TeamSend {
    type Args = TeamSendArgs;
    fn name(&self) -> &str {
        "team_send"
    }
    fn description(&self) -> &str {
        "Sends a message to one team member and returns its reply."
    }
    team_tool_traits!();
    async fn call(&self, args: TeamSendArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let known: Vec<String> = self.0.team.status().into_iter().map(|m| m.name).collect();
        if !known.contains(&args.member) {
            return Err(ToolError::not_found(format!(
                "no team member `{}`; members: {}",
                args.member,
                if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
        self.0
            .team
            .converse(vec![args.member], &args.message, self.0.reply_timeout, ctx)
            .await
    }
}

#[async_trait]
impl Tool for TeamClose {
    type Args = TeamCloseArgs;
    fn name(&self) -> &str {
        "team_close"
    }
    fn description(&self) -> &str {
        "Ends every team member."
    }
    team_tool_traits!();
    async fn call(&self, _: TeamCloseArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let closed = self.0.team.close();
        Ok(ToolOutput::text(format!(
            "Closed the team ({closed} members)."
        )))
    }
}

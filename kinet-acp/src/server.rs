//! The ACP server: sessions, prompts and their updates, cancellation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{
    Agent as AgentRole, ByteStreams, Client, ConnectTo, Responder, Stdio, V1,
    on_receive_notification, on_receive_request,
};
use kinet_core::editor::Editor;
use kinet_core::sandbox::launcher::Launcher;
use kinet_core::session::{JournalEntry, Session, SessionStore};
use kinet_core::{Agent, Conversation, Message, RunStop};
use tokio_util::compat::{TokioAsyncReadCompatExt as _, TokioAsyncWriteCompatExt as _};
use tokio_util::sync::CancellationToken;

use crate::permission::{EditorApproval, EditorBuffers};
use crate::terminal::{Open, terminals};
use crate::updates::{Coalesced, Updates};

/// How long a prompt's answer waits for its terminals to be released.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes the agent of a session from its working directory (the editor's
/// project): confine it there with `Workspace::root`.
type MakeAgent = dyn Fn(&Path) -> Agent + Send + Sync;

/// Serves kinet agents to an editor over the Agent Client Protocol.
///
/// Each ACP session is a kinet conversation with an agent made for its
/// working directory. A prompt's run streams to the editor as session
/// updates: the answer's text, the model's thoughts where it gives them,
/// each tool call with its status and result, edits as diffs, the todo
/// list as the plan. Calls that need approval are asked of the person in
/// the editor (`session/request_permission`: allow once, always for this
/// tool, or reject); `session/cancel` cancels the run as kinet does (the
/// calls in flight get "cancelled" results). When the editor offers
/// `fs.readTextFile`, the file tools read files' text from the editor's
/// buffers, unsaved changes included; with `fs.writeTextFile`, `edit_file`
/// and `write_file` hand their result to the editor instead of writing
/// the disk ([`Editor`](kinet_core::editor::Editor)); both after kinet's own
/// confinement checks on the path. With [`terminals`](Self::terminals)
/// and an editor that offers `terminal`, shell commands run in the
/// editor's terminals, confined by kinet's launcher. With a
/// [`SessionStore`](kinet_core::session::SessionStore), sessions are
/// saved after each prompt and `session/load` replays one, in this process
/// or a later one.
///
/// ```no_run
/// use kinet_acp::AcpServer;
/// use kinet_core::Agent;
/// use kinet_core::builder::Workspace;
/// use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
///
/// # async fn serve() -> Result<(), kinet_acp::AcpError> {
/// AcpServer::new(|cwd| {
///     Agent::builder(ScriptedProvider::new([ScriptedTurn::text("hello")]))
///         .workspace(Workspace::new().cwd(cwd).root(cwd))
///         .build()
/// })
/// .serve_stdio()
/// .await
/// # }
/// ```
pub struct AcpServer {
    inner: Arc<Inner>,
}

struct Inner {
    make: Box<MakeAgent>,
    store: Option<Arc<dyn SessionStore>>,
    name: String,
    sessions: Mutex<HashMap<String, Arc<Slot>>>,
    /// What the editor offers the agent (its file system, terminals).
    offers: Mutex<acp::ClientCapabilities>,
    /// This program as a launcher, for commands in the editor's terminals.
    launcher: Option<Launcher>,
}

/// One ACP session.
struct Slot {
    agent: Agent,
    cwd: PathBuf,
    conversation: tokio::sync::Mutex<Conversation>,
    /// The running prompt's cancellation.
    running: Mutex<Option<CancellationToken>>,
}

/// The connection with the editor failed.
#[derive(Debug, thiserror::Error)]
#[error("the editor's connection failed: {0}")]
pub struct AcpError(String);

impl AcpServer {
    /// A server whose sessions get the agent `make` builds for their
    /// working directory. Default: no session store (`session/load` is
    /// not offered), named "kinet".
    pub fn new(make: impl Fn(&Path) -> Agent + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                make: Box::new(make),
                store: None,
                name: "kinet".into(),
                sessions: Mutex::default(),
                offers: Mutex::new(acp::ClientCapabilities::new()),
                launcher: None,
            }),
        }
    }

    /// Saves sessions in `store` (after each prompt) and offers
    /// `session/load`.
    pub fn store(self, store: Arc<dyn SessionStore>) -> Self {
        self.with(|inner| inner.store = Some(store))
    }

    /// Runs the shell tool's commands in the editor's terminals, when the
    /// editor offers them (the person watches them there), started by
    /// `launcher`: this program, which called
    /// [`launcher()`](kinet_core::sandbox::launcher::launcher) first thing
    /// in `main` and so applies kinet's containment, sandbox and
    /// environment policy to them as the shell tool would. Default: the
    /// agent runs commands itself and the editor sees their output as the
    /// call's content.
    pub fn terminals(self, launcher: Launcher) -> Self {
        self.with(|inner| inner.launcher = Some(launcher))
    }

    /// The name the editor shows for the agent.
    pub fn name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.with(|inner| inner.name = name)
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let Ok(mut inner) = Arc::try_unwrap(self.inner) else {
            unreachable!("the server is configured before it serves")
        };
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Serves one editor on this process's stdin and stdout, until the
    /// editor closes them. When they are pipes (as when an editor launches
    /// the agent), they are read and written on the runtime, without a
    /// thread hop per message.
    pub async fn serve_stdio(self) -> Result<(), AcpError> {
        #[cfg(unix)]
        if let Some((outgoing, incoming)) = stdio_pipes() {
            return self.serve(outgoing, incoming).await;
        }
        self.serve_on(Stdio::new()).await
    }

    /// Serves one editor over a pair of streams (a socket, a child's
    /// pipes), until `incoming` ends.
    pub async fn serve<W, R>(self, outgoing: W, incoming: R) -> Result<(), AcpError>
    where
        W: tokio::io::AsyncWrite + Send + 'static,
        R: tokio::io::AsyncRead + Send + 'static,
    {
        self.serve_on(ByteStreams::new(outgoing.compat_write(), incoming.compat()))
            .await
    }

    async fn serve_on(
        self,
        transport: impl ConnectTo<AgentRole> + 'static,
    ) -> Result<(), AcpError> {
        let inner = self.inner;
        let (for_init, for_new, for_load, for_prompt, for_cancel) = (
            Arc::clone(&inner),
            Arc::clone(&inner),
            Arc::clone(&inner),
            Arc::clone(&inner),
            Arc::clone(&inner),
        );
        AgentRole
            .v1()
            .name(inner.name.clone())
            .on_receive_request(
                async move |request: acp::InitializeRequest, responder, _cx| {
                    if let Ok(mut offers) = for_init.offers.lock() {
                        *offers = request.client_capabilities.clone();
                    }
                    let capabilities =
                        acp::AgentCapabilities::new().load_session(for_init.store.is_some());
                    responder.respond(
                        acp::InitializeResponse::new(request.protocol_version)
                            .agent_capabilities(capabilities)
                            .agent_info(acp::Implementation::new(
                                for_init.name.clone(),
                                env!("CARGO_PKG_VERSION"),
                            )),
                    )
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::NewSessionRequest, responder, _cx| {
                    for_new.new_session(request, responder)
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::LoadSessionRequest, responder, cx| {
                    for_load.load_session(request, responder, &cx)
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::PromptRequest, responder, cx: ConnectionTo<Client>| {
                    let inner = Arc::clone(&for_prompt);
                    let client = cx.clone();
                    cx.spawn(async move { inner.prompt(request, responder, client).await })
                },
                on_receive_request!(),
            )
            .on_receive_notification(
                async move |notification: acp::CancelNotification, _cx| {
                    if let Some(slot) = for_cancel.slot(&notification.session_id)
                        && let Ok(running) = slot.running.lock()
                        && let Some(cancel) = running.as_ref()
                    {
                        cancel.cancel();
                    }
                    Ok(())
                },
                on_receive_notification!(),
            )
            .connect_to(transport)
            .await
            .map_err(|e| AcpError(e.to_string()))
    }
}

/// Standard output and input as non-blocking pipes, when both are pipes.
#[cfg(unix)]
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Sender,
    tokio::net::unix::pipe::Receiver,
)> {
    use std::os::fd::AsFd as _;
    let outgoing = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let incoming = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let outgoing = tokio::net::unix::pipe::Sender::from_owned_fd(outgoing).ok()?;
    let incoming = tokio::net::unix::pipe::Receiver::from_owned_fd(incoming).ok()?;
    Some((outgoing, incoming))
}

fn internal(what: &str, error: impl std::fmt::Display) -> agent_client_protocol::Error {
    agent_client_protocol::Error::internal_error().data(format!("{what}: {error}"))
}

impl Inner {
    fn slot(&self, id: &acp::SessionId) -> Option<Arc<Slot>> {
        self.sessions.lock().ok()?.get(&*id.0).cloned()
    }

    fn open(
        &self,
        id: &str,
        cwd: PathBuf,
        conversation: Conversation,
    ) -> Result<(), agent_client_protocol::Error> {
        let slot = Arc::new(Slot {
            agent: (self.make)(&cwd),
            cwd,
            conversation: tokio::sync::Mutex::new(conversation),
            running: Mutex::new(None),
        });
        self.sessions
            .lock()
            .map_err(|e| internal("the sessions", e))?
            .insert(id.to_owned(), slot);
        Ok(())
    }

    fn new_session(
        &self,
        request: acp::NewSessionRequest,
        responder: Responder<acp::NewSessionResponse, V1>,
    ) -> Result<(), agent_client_protocol::Error> {
        if !request.cwd.is_absolute() {
            return responder.respond_with_error(
                agent_client_protocol::Error::invalid_params().data(format!(
                    "cwd must be an absolute path, not `{}`",
                    request.cwd.display()
                )),
            );
        }
        let id = kinet_core::session::new_id();
        if let Some(store) = &self.store
            && let Err(error) = store.create(&Session::empty(&id))
        {
            return responder.respond_with_error(internal("saving the new session", error));
        }
        self.open(&id, request.cwd, Conversation::new())?;
        responder.respond(acp::NewSessionResponse::new(acp::SessionId::new(id)))
    }

    fn load_session(
        &self,
        request: acp::LoadSessionRequest,
        responder: Responder<acp::LoadSessionResponse, V1>,
        client: &ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let Some(store) = &self.store else {
            return responder.respond_with_error(
                agent_client_protocol::Error::method_not_found()
                    .data("this agent keeps no sessions (it was built without a session store)"),
            );
        };
        let id = request.session_id.0.to_string();
        let session = match store.load(&id) {
            Ok(Some(session)) => session,
            Ok(None) => {
                return responder
                    .respond_with_error(acp::Error::session_not_found(request.session_id).into());
            }
            Err(error) => {
                return responder.respond_with_error(internal("loading the session", error));
            }
        };
        let (conversation, _) = match session.resume(&[]) {
            Ok(resumed) => resumed,
            Err(error) => {
                return responder.respond_with_error(internal("reading the session", error));
            }
        };
        for update in Updates::new(&request.cwd).replay(&conversation.messages) {
            client.send_notification(acp::SessionNotification::new(
                request.session_id.clone(),
                update,
            ))?;
        }
        self.open(&id, request.cwd, conversation)?;
        responder.respond(acp::LoadSessionResponse::new())
    }

    /// One prompt: the run, its updates, the stop reason.
    async fn prompt(
        self: Arc<Self>,
        request: acp::PromptRequest,
        responder: Responder<acp::PromptResponse, V1>,
        client: ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let Some(slot) = self.slot(&request.session_id) else {
            return responder
                .respond_with_error(acp::Error::session_not_found(request.session_id).into());
        };
        let Ok(mut conversation) = slot.conversation.try_lock() else {
            return responder.respond_with_error(
                agent_client_protocol::Error::invalid_request()
                    .data("a prompt is already running in this session; cancel it first"),
            );
        };
        let before = conversation.messages.len();
        let had_key = conversation.run_key.is_some();
        conversation.push(Message::user(prompt_text(&request.prompt)));
        let cancel = CancellationToken::new();
        if let Ok(mut running) = slot.running.lock() {
            *running = Some(cancel.clone());
        }
        let mut agent = slot.agent.to_builder().confirm_handler(EditorApproval {
            client: client.clone(),
            session: request.session_id.clone(),
        });
        let offers = self.offers.lock().map(|o| o.clone()).unwrap_or_default();
        // The file tools write through an editor only when it also gives
        // the text (see `EditorFiles::writes`): one that only takes writes
        // is not used.
        if offers.fs.read_text_file {
            agent = agent.extension(Editor(Arc::new(EditorBuffers {
                client: client.clone(),
                session: request.session_id.clone(),
                writes: offers.fs.write_text_file,
            })));
        }
        let open = Open::new();
        if let (true, Some(launcher)) = (offers.terminal, &self.launcher) {
            agent = agent.extension(terminals(&client, &request.session_id, launcher, &open));
        }
        let mut run = agent
            .build()
            .run_with_cancellation(conversation.clone(), cancel);
        let mut updates = Updates::new(&slot.cwd);
        let mut events = Coalesced::new(&mut run);
        while let Some(event) = events.next().await {
            for update in updates.of(&event) {
                client.send_notification(acp::SessionNotification::new(
                    request.session_id.clone(),
                    update,
                ))?;
            }
        }
        let outcome = run.finish().await;
        // A cancelled call's terminal is killed and released after the
        // call was dropped: the answer comes once that is done.
        open.released(RELEASE_WAIT).await;
        if let Ok(mut running) = slot.running.lock() {
            *running = None;
        }
        *conversation = outcome.conversation.clone();
        if let Some(store) = &self.store {
            let mut entries: Vec<JournalEntry> = Vec::new();
            if let (false, Some(key)) = (had_key, &conversation.run_key) {
                entries.push(JournalEntry::RunKey { key: key.clone() });
            }
            entries.extend(
                conversation.messages[before.min(conversation.messages.len())..]
                    .iter()
                    .map(|message| JournalEntry::Message {
                        message: message.clone(),
                    }),
            );
            if let Err(error) = store.append_all(&request.session_id.0, &entries) {
                tracing::warn!(%error, "the session could not be saved");
            }
        }
        let stop = match &outcome.stop {
            RunStop::Completed | RunStop::Halted { .. } | RunStop::BudgetReached { .. } => {
                acp::StopReason::EndTurn
            }
            RunStop::MaxTurns => acp::StopReason::MaxTurnRequests,
            RunStop::Cancelled | RunStop::Aborted { .. } => acp::StopReason::Cancelled,
            RunStop::Failed(error) => {
                return responder.respond_with_error(internal("the run failed", error));
            }
            other => {
                return responder.respond_with_error(internal("the run stopped", other));
            }
        };
        responder.respond(acp::PromptResponse::new(stop))
    }
}

/// The prompt's text: its text blocks, and links to the resources it
/// names.
fn prompt_text(blocks: &[acp::ContentBlock]) -> String {
    let mut text = String::new();
    for block in blocks {
        let part = match block {
            acp::ContentBlock::Text(content) => content.text.clone(),
            acp::ContentBlock::ResourceLink(link) => format!("[{}]({})", link.name, link.uri),
            _ => "(an attachment this agent cannot read)".to_owned(),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&part);
    }
    text
}

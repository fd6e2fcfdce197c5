//! Chrome's DevTools over `--remote-debugging-pipe`: Chrome reads commands
//! from its descriptor 3 and writes answers and events to 4, each message
//! JSON ended by a NUL byte. No TCP port is opened, so no other local
//! process can drive the browser.
//!
//! Two clients share the pipe: the driving library, and kinet's own
//! [`Link`](super::link::Link). Message ids are renumbered on the way in
//! and answers routed back by id; events go to the library unless they
//! belong to a session the link attached (the link works through a
//! browser session of its own, so the library never hears of its
//! targets).
//!
//! The library speaks WebSocket only: it gets a one-time endpoint on
//! loopback whose path carries 128 random bits, closed as soon as the
//! library has connected (within the launch, before any page loads);
//! a connection with any other path is refused.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::ComputerError;

/// The descriptors Chrome gets: it reads commands from the first (as its
/// descriptor 3) and writes to the second (as 4).
pub(crate) struct ChromeEnds {
    pub(crate) commands: OwnedFd,
    pub(crate) replies: OwnedFd,
}

/// Who waits for an answer.
enum Waiter {
    /// The library, under its own id.
    Library(Value),
    /// The link, for a call of `method`.
    Link {
        method: &'static str,
        reply: oneshot::Sender<Result<Value, String>>,
    },
}

#[derive(Default)]
struct Routes {
    next_id: u64,
    waiting: HashMap<u64, Waiter>,
    /// Sessions the link attached: their events are not the library's.
    link_sessions: HashSet<String>,
    library: Option<mpsc::UnboundedSender<String>>,
    closed: bool,
}

/// One DevTools pipe to a running Chrome, shared by the library and the
/// link.
pub(crate) struct DevtoolsPipe {
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    routes: Arc<Mutex<Routes>>,
}

/// 128 random bits, hex.
fn token() -> Result<String, ComputerError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            ComputerError::Browser(format!("no randomness for the DevTools token: {e}"))
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes the two pipes: Chrome's ends, and ours (write commands, read
/// replies).
pub(crate) fn pipes() -> std::io::Result<(ChromeEnds, OwnedFd, OwnedFd)> {
    let (commands_read, commands_write) = std::io::pipe()?;
    let (replies_read, replies_write) = std::io::pipe()?;
    Ok((
        ChromeEnds {
            commands: commands_read.into(),
            replies: replies_write.into(),
        },
        commands_write.into(),
        replies_read.into(),
    ))
}

impl DevtoolsPipe {
    /// Starts reading and writing our ends of the pipes.
    pub(crate) fn start(write: OwnedFd, read: OwnedFd) -> std::io::Result<Arc<Self>> {
        let mut sender = tokio::net::unix::pipe::Sender::from_owned_fd(write)?;
        let mut receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(read)?;
        let (outgoing, mut frames) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(mut frame) = frames.recv().await {
                frame.push(0);
                if sender.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        let routes = Arc::new(Mutex::new(Routes::default()));
        let reader_routes = Arc::clone(&routes);
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let read = match receiver.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => read,
                };
                let start = buffer.len();
                buffer.extend_from_slice(&chunk[..read]);
                let mut from = 0;
                let mut scan = start;
                while let Some(end) = memchr(&buffer[scan..]).map(|i| scan + i) {
                    route(&reader_routes, &buffer[from..end]);
                    from = end + 1;
                    scan = from;
                }
                buffer.drain(..from);
            }
            close(&reader_routes);
        });
        Ok(Arc::new(Self { outgoing, routes }))
    }

    /// Sends one command for the link and waits for its answer, at most
    /// `limit`.
    pub(crate) async fn call(
        &self,
        method: &'static str,
        session: Option<&str>,
        params: Value,
        limit: Duration,
    ) -> Result<Value, ComputerError> {
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut routes = self.lock()?;
            if routes.closed {
                return Err(closed_error());
            }
            routes.next_id += 1;
            let id = routes.next_id;
            routes.waiting.insert(id, Waiter::Link { method, reply });
            id
        };
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.send(&message)?;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(message))) => Err(ComputerError::Browser(message)),
            Ok(Err(_)) => Err(closed_error()),
            Err(_) => {
                if let Ok(mut routes) = self.routes.lock() {
                    routes.waiting.remove(&id);
                }
                Err(ComputerError::Browser(format!(
                    "the browser did not answer {method} within {} ms",
                    limit.as_millis()
                )))
            }
        }
    }

    /// Serves the library a one-time WebSocket endpoint on loopback and
    /// returns its address; the endpoint closes once the library is
    /// connected, or after `limit`.
    pub(crate) async fn library_endpoint(
        self: &Arc<Self>,
        limit: Duration,
    ) -> Result<String, ComputerError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| ComputerError::Browser(format!("no loopback endpoint: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| ComputerError::Browser(format!("no loopback endpoint: {e}")))?
            .port();
        let path = format!("/devtools/browser/{}", token()?);
        let url = format!("ws://127.0.0.1:{port}{path}");
        let pipe = Arc::clone(self);
        tokio::spawn(async move {
            let accepted = tokio::time::timeout(limit, accept(&listener, &path)).await;
            // The listener closes here: nothing else can connect.
            drop(listener);
            if let Ok(Some(socket)) = accepted {
                pipe.serve_library(socket).await;
            }
        });
        Ok(url)
    }

    /// Relays between the library's WebSocket and the pipe until either
    /// closes.
    async fn serve_library(
        &self,
        socket: async_tungstenite::WebSocketStream<
            async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>,
        >,
    ) {
        use async_tungstenite::tungstenite::Message;
        let (to_library, mut from_pipe) = mpsc::unbounded_channel::<String>();
        match self.routes.lock() {
            Ok(mut routes) if !routes.closed => routes.library = Some(to_library),
            _ => return,
        }
        let (mut sink, mut stream) = socket.split();
        let relay_out = async {
            while let Some(text) = from_pipe.recv().await {
                if sink.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            let _ = sink.close(None).await;
        };
        let relay_in = async {
            while let Some(Ok(message)) = stream.next().await {
                let text = match message {
                    Message::Text(text) => text.to_string(),
                    Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Message::Close(_) => break,
                    _ => continue,
                };
                if self.send_for_library(&text).is_err() {
                    break;
                }
            }
        };
        tokio::select! {
            () = relay_out => {}
            () = relay_in => {}
        }
        if let Ok(mut routes) = self.routes.lock() {
            routes.library = None;
        }
    }

    /// A command from the library: renumbered and sent.
    fn send_for_library(&self, text: &str) -> Result<(), ComputerError> {
        let Ok(mut message) = serde_json::from_str::<Value>(text) else {
            return Ok(());
        };
        let Some(original) = message.get("id").cloned() else {
            return Ok(());
        };
        let id = {
            let mut routes = self.lock()?;
            routes.next_id += 1;
            let id = routes.next_id;
            routes.waiting.insert(id, Waiter::Library(original));
            id
        };
        message["id"] = json!(id);
        self.send(&message)
    }

    fn send(&self, message: &Value) -> Result<(), ComputerError> {
        let bytes = serde_json::to_vec(message)
            .map_err(|e| ComputerError::Browser(format!("cannot encode a command: {e}")))?;
        self.outgoing.send(bytes).map_err(|_| closed_error())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Routes>, ComputerError> {
        self.routes
            .lock()
            .map_err(|_| ComputerError::Browser("the DevTools pipe failed".into()))
    }
}

fn closed_error() -> ComputerError {
    ComputerError::Browser("the browser closed the connection".into())
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == 0)
}

/// Accepts connections until one asks for `path`; others are refused.
async fn accept(
    listener: &tokio::net::TcpListener,
    path: &str,
) -> Option<
    async_tungstenite::WebSocketStream<
        async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>,
    >,
> {
    use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
    loop {
        let (stream, _) = listener.accept().await.ok()?;
        // The handshake library's callback type fixes the error's size.
        #[allow(clippy::result_large_err)]
        let check = |request: &Request, response: Response| {
            if request.uri().path() == path {
                Ok(response)
            } else {
                let mut refused = ErrorResponse::new(Some("no such endpoint".into()));
                *refused.status_mut() = async_tungstenite::tungstenite::http::StatusCode::FORBIDDEN;
                Err(refused)
            }
        };
        if let Ok(socket) = async_tungstenite::tokio::accept_hdr_async(stream, check).await {
            return Some(socket);
        }
    }
}

/// Routes one message from Chrome.
fn route(routes: &Mutex<Routes>, bytes: &[u8]) {
    let Ok(mut message) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let Ok(mut routes) = routes.lock() else {
        return;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        match routes.waiting.remove(&id) {
            Some(Waiter::Library(original)) => {
                message["id"] = original;
                deliver(&mut routes, &message);
            }
            Some(Waiter::Link { method, reply }) => {
                let answer = match message.get("error") {
                    Some(error) => Err(error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the browser refused the command")
                        .to_owned()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                // Sessions the link attaches are its own from the start,
                // before any of their events arrive.
                if matches!(
                    method,
                    "Target.attachToTarget" | "Target.attachToBrowserTarget"
                ) && let Ok(result) = &answer
                    && let Some(session) = result.get("sessionId").and_then(Value::as_str)
                {
                    routes.link_sessions.insert(session.to_owned());
                }
                let _ = reply.send(answer);
            }
            None => {}
        }
        return;
    }
    // An event.
    if let Some(session) = message.get("sessionId").and_then(Value::as_str)
        && routes.link_sessions.contains(session)
    {
        return;
    }
    // The link's own attachment to the browser target (announced before
    // its answer) is none of the library's business.
    if message.get("method").and_then(Value::as_str) == Some("Target.attachedToTarget")
        && message
            .pointer("/params/targetInfo/type")
            .and_then(Value::as_str)
            == Some("browser")
    {
        return;
    }
    deliver(&mut routes, &message);
}

fn deliver(routes: &mut Routes, message: &Value) {
    if let Some(library) = &routes.library
        && library.send(message.to_string()).is_err()
    {
        routes.library = None;
    }
}

/// Chrome closed its end: every waiter hears so, and the library's
/// connection ends.
fn close(routes: &Mutex<Routes>) {
    if let Ok(mut routes) = routes.lock() {
        routes.closed = true;
        routes.library = None;
        for (_, waiter) in routes.waiting.drain() {
            if let Waiter::Link { reply, .. } = waiter {
                let _ = reply.send(Err("the browser closed the connection".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use async_tungstenite::tungstenite::Message;
    use tokio::io::AsyncWriteExt;

    /// A stand-in for Chrome on the other ends of the pipes: answers every
    /// command, announcing attachments as Chrome does (the event before the
    /// answer), and sends one event on each session it attached plus one
    /// on the library's session `L`.
    async fn fake_chrome(ends: ChromeEnds) {
        let mut commands = tokio::net::unix::pipe::Receiver::from_owned_fd(ends.commands).unwrap();
        let mut replies = tokio::net::unix::pipe::Sender::from_owned_fd(ends.replies).unwrap();
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let Ok(read) = commands.read(&mut chunk).await else {
                return;
            };
            if read == 0 {
                return;
            }
            buffer.extend_from_slice(&chunk[..read]);
            while let Some(end) = buffer.iter().position(|&b| b == 0) {
                let frame: Vec<u8> = buffer.drain(..=end).collect();
                let message: Value = serde_json::from_slice(&frame[..end]).unwrap();
                let id = message["id"].clone();
                let mut out = Vec::new();
                match message["method"].as_str().unwrap() {
                    "Target.attachToBrowserTarget" => {
                        out.push(json!({"method": "Target.attachedToTarget",
                            "params": {"sessionId": "S", "targetInfo": {"type": "browser"}}}));
                        out.push(json!({"id": id, "result": {"sessionId": "S"}}));
                    }
                    "Target.attachToTarget" => {
                        assert_eq!(
                            message["sessionId"], "S",
                            "attached from the browser session"
                        );
                        out.push(
                            json!({"method": "Target.attachedToTarget", "sessionId": "S",
                            "params": {"sessionId": "C", "targetInfo": {"type": "page"}}}),
                        );
                        out.push(json!({"id": id, "result": {"sessionId": "C"}}));
                        out.push(json!({"method": "Page.loadEventFired", "sessionId": "C", "params": {}}));
                        out.push(json!({"method": "Page.loadEventFired", "sessionId": "L", "params": {}}));
                    }
                    "Fail.please" => {
                        out.push(
                            json!({"id": id, "error": {"code": -32000, "message": "refused"}}),
                        );
                    }
                    method => out.push(json!({"id": id, "result": {"echo": method}})),
                }
                for message in out {
                    let mut bytes = serde_json::to_vec(&message).unwrap();
                    bytes.push(0);
                    replies.write_all(&bytes).await.unwrap();
                }
            }
        }
    }

    #[tokio::test]
    async fn ids_are_renumbered_and_the_links_sessions_stay_its_own() {
        let (ends, write, read) = pipes().unwrap();
        tokio::spawn(fake_chrome(ends));
        let pipe = DevtoolsPipe::start(write, read).unwrap();
        let limit = Duration::from_secs(5);
        let url = pipe.library_endpoint(limit).await.unwrap();

        // A wrong path is refused; the right one connects, and then the
        // endpoint is gone.
        let port_url = url.rsplit_once("/devtools").unwrap().0.to_owned();
        assert!(
            async_tungstenite::tokio::connect_async(format!("{port_url}/devtools/browser/guess"))
                .await
                .is_err()
        );
        let (mut library, _) = async_tungstenite::tokio::connect_async(&url).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            async_tungstenite::tokio::connect_async(&url).await.is_err(),
            "the endpoint stayed open"
        );

        // The library's id comes back as it sent it.
        library
            .send(Message::text(
                json!({"id": 7, "method": "Browser.getVersion"}).to_string(),
            ))
            .await
            .unwrap();
        // The link: a browser session, a target attached from it, errors.
        let link = super::super::link::Link::new(Arc::clone(&pipe));
        assert_eq!(link.session("T1").await.unwrap(), "C");
        let err = pipe
            .call("Fail.please", None, json!({}), limit)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
        let echoed = pipe
            .call("Some.method", Some("C"), json!({}), limit)
            .await
            .unwrap();
        assert_eq!(echoed["echo"], "Some.method");

        // The library heard its answer and the event of its own session,
        // nothing of the link's.
        let mut heard = Vec::new();
        while let Ok(Some(Ok(Message::Text(text)))) =
            tokio::time::timeout(Duration::from_millis(300), library.next()).await
        {
            heard.push(serde_json::from_str::<Value>(&text).unwrap());
        }
        assert!(
            heard
                .iter()
                .any(|m| m["id"] == 7 && m["result"]["echo"] == "Browser.getVersion"),
            "{heard:?}"
        );
        assert!(heard.iter().any(|m| m["sessionId"] == "L"), "{heard:?}");
        for message in &heard {
            assert!(
                message["sessionId"] != "S" && message["sessionId"] != "C",
                "leaked: {message}"
            );
            assert!(
                message["params"]["targetInfo"]["type"] != "browser",
                "leaked: {message}"
            );
        }
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_waiting_calls() {
        let (ends, write, read) = pipes().unwrap();
        let pipe = DevtoolsPipe::start(write, read).unwrap();
        let call = pipe.call("Never.answered", None, json!({}), Duration::from_secs(5));
        let closer = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(ends);
        };
        let (result, ()) = tokio::join!(call, closer);
        let err = result.unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
        assert!(
            pipe.call("After", None, json!({}), Duration::from_secs(1))
                .await
                .is_err()
        );
    }
}

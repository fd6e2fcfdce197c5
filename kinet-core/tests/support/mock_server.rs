//! A loopback HTTP/1.1 server that replays scripted responses (recorded SSE
//! fixtures, error bodies, stalls) and records each request.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted response.
#[derive(Clone, Debug)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    chunk_delay: Duration,
    stall: Option<Duration>,
}

impl Reply {
    /// A 200 SSE response replaying a fixture file, sent in many small
    /// chunks that split events and lines.
    pub fn sse_fixture(name: &str) -> Self {
        let body = std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        Self::sse_bytes(&body)
    }

    /// A 200 SSE response with this body.
    pub fn sse_bytes(body: &[u8]) -> Self {
        // Odd-sized chunks so that events, lines and UTF-8 characters are
        // split across reads.
        let chunks = body.chunks(97).map(<[u8]>::to_vec).collect();
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks,
            chunk_delay: Duration::from_millis(0),
            stall: None,
        }
    }

    /// A response with a status and a JSON body.
    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            chunk_delay: Duration::ZERO,
            stall: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// After the body, keeps the connection open and silent.
    pub fn then_stall(mut self, duration: Duration) -> Self {
        self.stall = Some(duration);
        self
    }

    /// Waits between chunks.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: serde_json::Value,
}

#[derive(Default)]
struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    /// Connections the client closed while the server was still sending or
    /// stalling.
    client_hangups: AtomicUsize,
}

/// The server; it stops when dropped.
pub struct MockServer {
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Starts a server that answers requests with `replies` in order (and
    /// with a 500 once they run out).
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            replies: Mutex::new(replies.into()),
            ..State::default()
        });
        let accept_state = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&accept_state);
                tokio::spawn(async move {
                    serve(socket, state).await;
                });
            }
        });
        Self { url, state, task }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// How many times the client hung up early.
    pub fn client_hangups(&self) -> usize {
        self.state.client_hangups.load(Ordering::SeqCst)
    }
}

async fn serve(mut socket: TcpStream, state: Arc<State>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    state.requests.lock().unwrap().push(request);
    let reply = state
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| Reply::json(500, r#"{"error":{"message":"no reply scripted"}}"#));
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    if socket.write_all(head.as_bytes()).await.is_err() {
        state.client_hangups.fetch_add(1, Ordering::SeqCst);
        return;
    }
    for chunk in &reply.chunks {
        if !reply.chunk_delay.is_zero() {
            tokio::time::sleep(reply.chunk_delay).await;
        }
        if socket.write_all(chunk).await.is_err() || socket.flush().await.is_err() {
            state.client_hangups.fetch_add(1, Ordering::SeqCst);
            return;
        }
    }
    if let Some(stall) = reply.stall {
        let mut buf = [0u8; 64];
        tokio::select! {
            _ = tokio::time::sleep(stall) => {}
            read = socket.read(&mut buf) => {
                if matches!(read, Ok(0) | Err(_)) {
                    state.client_hangups.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[header_end..]).unwrap_or(serde_json::Value::Null);
    Some(Recorded {
        path,
        headers,
        body,
    })
}

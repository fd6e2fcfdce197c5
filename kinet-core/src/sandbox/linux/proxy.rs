//! The host side of a sandbox's network allowlist: an HTTP proxy serving
//! a listening socket that lives in the sandbox's network namespace.
//!
//! The sandbox's first process brings its loopback up, listens on
//! [`PROXY_URL`](crate::sandbox::PROXY_URL) there and sends that socket, with its own pid, over
//! a socket pair to the thread started here. A socket keeps the network
//! namespace it was made in, so this thread accepts connections made
//! inside the sandbox while its own connections leave from the host's
//! namespace. It serves `CONNECT host:port` (a tunnel, for HTTPS) and
//! plain HTTP requests in absolute form, one request per connection; a
//! destination the allowlist does not permit gets `403` naming the
//! allowlist. When the sandbox's first process ends, the listener and
//! every connection through it are closed.

use std::io::{self, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};

use crate::rules::hosts::{Allowlist, split_host_port};

/// The longest request head read.
const MAX_HEAD: usize = 64 * 1024;
/// The most streams open at once through one sandbox's proxy (two per
/// forwarded connection, one per refused or starting one).
const MAX_STREAMS: usize = 256;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The open connections of one proxy (both ends of each), closed when the
/// sandbox ends.
#[derive(Default)]
struct Open {
    streams: Mutex<Vec<(u64, TcpStream)>>,
    next: std::sync::atomic::AtomicU64,
    closed: std::sync::atomic::AtomicBool,
}

impl Open {
    /// Registers a stream; `None` when the proxy has closed.
    fn add(&self, stream: &TcpStream) -> Option<u64> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = stream.try_clone().ok()?;
        let mut streams = self.streams.lock().ok()?;
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        streams.push((id, copy));
        Some(id)
    }

    fn remove(&self, id: u64) {
        if let Ok(mut streams) = self.streams.lock() {
            streams.retain(|(held, _)| *held != id);
        }
    }

    fn count(&self) -> usize {
        self.streams.lock().map(|s| s.len()).unwrap_or(0)
    }

    fn close_all(&self) {
        if let Ok(mut streams) = self.streams.lock() {
            self.closed
                .store(true, std::sync::atomic::Ordering::Release);
            for (_, stream) in streams.drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Starts the proxy's thread; `channel` is the host's end of the socket
/// pair the sandbox sends its listener on.
pub(super) fn start(channel: OwnedFd, allowlist: Allowlist) -> io::Result<()> {
    std::thread::Builder::new()
        .name("kinet-sandbox-proxy".into())
        .spawn(move || {
            if let Err(error) = run(channel, Arc::new(allowlist)) {
                tracing::debug!(%error, "sandbox proxy ended");
            }
        })?;
    Ok(())
}

/// Receives the listener and the sandbox's pid, then serves until that
/// process ends.
fn run(channel: OwnedFd, allowlist: Arc<Allowlist>) -> io::Result<()> {
    let mut pid_bytes = [0u8; 4];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        &channel,
        &mut [IoSliceMut::new(&mut pid_bytes)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut listener = None;
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                listener.get_or_insert(fd);
            }
        }
    }
    let Some(listener) = listener else {
        // The command failed before its sandbox was ready.
        return Ok(());
    };
    if received.bytes != 4 {
        return Err(io::Error::other("the sandbox sent no process id"));
    }
    let pid = rustix::process::Pid::from_raw(i32::from_ne_bytes(pid_bytes))
        .ok_or_else(|| io::Error::other("the sandbox sent a bad process id"))?;
    // The sender is the sandbox's supervisor, a child of the host: its pid
    // is not reused until it has been reaped, and if it has been already
    // (a command that ended at once), pidfd_open fails and the proxy ends.
    // Reaped and reused in the microseconds between is the one miss: the
    // proxy would then serve nobody until that other process ends.
    let ended = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
    let listener = TcpListener::from(listener);
    listener.set_nonblocking(true)?;
    let open = Arc::new(Open::default());
    loop {
        let mut fds = [
            PollFd::new(&listener, PollFlags::IN),
            PollFd::new(&ended, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
        if !fds[1].revents().is_empty() {
            break;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    if open.count() >= MAX_STREAMS {
                        refuse(
                            stream,
                            "503 Service Unavailable",
                            "too many connections at once through the sandbox's proxy",
                        );
                        continue;
                    }
                    let allowlist = Arc::clone(&allowlist);
                    let open_for_thread = Arc::clone(&open);
                    let spawned = std::thread::Builder::new()
                        .name("kinet-sandbox-proxy-conn".into())
                        .spawn(move || serve(stream, &allowlist, &open_for_thread));
                    if spawned.is_err() {
                        break;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    drop(listener);
    open.close_all();
    Ok(())
}

/// Answers with an error status and closes.
fn refuse(mut stream: TcpStream, status: &str, message: &str) {
    let body = format!("{message}\n");
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Kinet-Sandbox: refused\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

/// A parsed request head.
struct Head {
    /// `CONNECT` tunnel, or a plain request to forward.
    connect: bool,
    host: String,
    port: u16,
    /// For a plain request: the head to send on, in origin form.
    forward: Vec<u8>,
    /// For a plain request: the body's length.
    body: u64,
}

/// Reads and parses a request head; `Err` carries the refusal.
fn read_head(stream: &mut TcpStream) -> Result<(Head, Vec<u8>), (&'static str, String)> {
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).map_err(|_| {
            (
                "408 Request Timeout",
                "the request did not arrive".to_owned(),
            )
        })?;
        if read == 0 {
            return Err(("400 Bad Request", "the request ended early".into()));
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 96];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer) {
            Ok(httparse::Status::Complete(length)) => {
                let head = parse_request(&request)?;
                return Ok((head, buffer[length..].to_vec()));
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err((
                    "431 Request Header Fields Too Large",
                    "the request head is over 64 KiB".into(),
                ));
            }
            Err(error) => {
                return Err(("400 Bad Request", format!("not an HTTP request: {error}")));
            }
        }
    }
}

/// Hop-by-hop headers, and those the proxy sets itself.
const DROPPED: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "host",
];

fn parse_request(request: &httparse::Request) -> Result<Head, (&'static str, String)> {
    let bad = |why: String| ("400 Bad Request", why);
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target)
            .map_err(|why| bad(format!("the CONNECT target `{target}` {why}")))?;
        let port = port.ok_or_else(|| bad(format!("the CONNECT target `{target}` has no port")))?;
        return Ok(Head {
            connect: true,
            host: host.to_owned(),
            port,
            forward: Vec::new(),
            body: 0,
        });
    }
    let rest = target
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or_else(|| {
            bad(format!(
                "`{target}` is not an absolute http:// address (use CONNECT for https)"
            ))
        })?;
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(bad(
            "addresses with user information are not forwarded".into()
        ));
    }
    let (host, port) = split_host_port(authority)
        .map_err(|why| bad(format!("the address `{authority}` {why}")))?;
    if host.is_empty() {
        return Err(bad(format!("`{target}` names no host")));
    }
    let port = port.unwrap_or(80);
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    let mut body = 0u64;
    let mut forward = Vec::with_capacity(512);
    forward.extend_from_slice(
        format!(
            "{method} {path} HTTP/1.{}\r\n",
            request.version.unwrap_or(1)
        )
        .as_bytes(),
    );
    forward.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if name == "transfer-encoding" {
            return Err((
                "411 Length Required",
                "the sandbox's proxy forwards request bodies with a Content-Length only".into(),
            ));
        }
        if name == "content-length" {
            body = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| bad("a bad Content-Length".into()))?;
        }
        if DROPPED.contains(&name.as_str()) {
            continue;
        }
        forward.extend_from_slice(header.name.as_bytes());
        forward.extend_from_slice(b": ");
        forward.extend_from_slice(header.value);
        forward.extend_from_slice(b"\r\n");
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Head {
        connect: false,
        host: host.to_owned(),
        port,
        forward,
        body,
    })
}

/// One connection from inside the sandbox.
fn serve(mut inside: TcpStream, allowlist: &Allowlist, open: &Open) {
    let Some(inside_id) = open.add(&inside) else {
        return;
    };
    let _ = inside.set_read_timeout(Some(HEAD_TIMEOUT));
    let mut outside_id = None;
    let _ = (|| {
        let (head, early) = match read_head(&mut inside) {
            Ok(parsed) => parsed,
            Err((status, why)) => {
                refuse(inside.try_clone().ok()?, status, &why);
                return None;
            }
        };
        if !allowlist.permits(&head.host, head.port) {
            refuse(
                inside.try_clone().ok()?,
                "403 Forbidden",
                &format!(
                    "the sandbox allows network access only to {}; `{}` port {} is not on that list",
                    allowlist.describe(),
                    head.host,
                    head.port
                ),
            );
            return None;
        }
        let Some(mut outside) = connect(&head.host, head.port) else {
            refuse(
                inside.try_clone().ok()?,
                "502 Bad Gateway",
                &format!("cannot reach `{}` port {}", head.host, head.port),
            );
            return None;
        };
        outside_id = Some(open.add(&outside)?);
        let _ = inside.set_read_timeout(None);
        if head.connect {
            inside
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .ok()?;
            outside.write_all(&early).ok()?;
            relay(inside.try_clone().ok()?, outside.try_clone().ok()?, None);
        } else {
            outside.write_all(&head.forward).ok()?;
            let early_body = early
                .len()
                .min(usize::try_from(head.body).unwrap_or(usize::MAX));
            outside.write_all(&early[..early_body]).ok()?;
            let remaining = head.body - early_body as u64;
            relay(
                inside.try_clone().ok()?,
                outside.try_clone().ok()?,
                Some(remaining),
            );
        }
        Some(())
    })();
    let _ = inside.shutdown(Shutdown::Both);
    open.remove(inside_id);
    if let Some(id) = outside_id {
        open.remove(id);
    }
}

fn connect(host: &str, port: u16) -> Option<TcpStream> {
    let addresses = (host, port).to_socket_addrs().ok()?;
    addresses
        .into_iter()
        .find_map(|address| TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).ok())
}

/// Copies both ways until the far side is done. With `limit`, only that
/// many more bytes go from the sandbox to the server (the rest of one
/// request's body); then the answer is copied back until the server
/// closes.
fn relay(inside: TcpStream, outside: TcpStream, limit: Option<u64>) {
    let (Ok(inside_reader), Ok(outside_writer)) = (inside.try_clone(), outside.try_clone()) else {
        return;
    };
    let upstream = std::thread::Builder::new()
        .name("kinet-sandbox-proxy-up".into())
        .spawn(move || {
            let mut reader: Box<dyn Read> = match limit {
                Some(limit) => Box::new(inside_reader.take(limit)),
                None => Box::new(inside_reader),
            };
            let mut writer = outside_writer;
            let _ = io::copy(&mut reader, &mut writer);
            if limit.is_none() {
                let _ = writer.shutdown(Shutdown::Write);
            }
        });
    let mut reader = outside;
    let mut writer = inside;
    let _ = io::copy(&mut reader, &mut writer);
    let _ = writer.shutdown(Shutdown::Both);
    let _ = reader.shutdown(Shutdown::Both);
    if let Ok(upstream) = upstream {
        let _ = upstream.join();
    }
}

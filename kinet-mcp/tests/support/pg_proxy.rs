//! A TCP proxy in front of PostgreSQL that counts the round trips its
//! clients make (part of the load harness, `load.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Round trips to PostgreSQL, as the counting proxy saw them.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundTrips {
    /// Exchanges that run a statement: a simple Query, or an extended
    /// exchange (up to its Sync) with an Execute.
    pub run: u64,
    /// Extended exchanges without an Execute: a statement prepared.
    pub prepared: u64,
}

/// The proxy's running counts.
#[derive(Default)]
pub(super) struct Counts {
    run: AtomicU64,
    prepared: AtomicU64,
}

impl Counts {
    pub(super) fn now(&self) -> RoundTrips {
        RoundTrips {
            run: self.run.load(Ordering::Relaxed),
            prepared: self.prepared.load(Ordering::Relaxed),
        }
    }
}

/// The queries the PostgreSQL driver runs to learn a type (`vector`, say)
/// while it prepares a statement, once per type and connection.
const TYPE_LOOKUPS: &[&str] = &["SELECT t.typname", "SELECT enumlabel", "SELECT attname"];

/// A TCP proxy in front of the PostgreSQL server of `url` that counts the
/// round trips clients make: each frontend Sync (`S`, the end of an
/// extended-query exchange) or simple Query (`Q`) is one, counted as run
/// when it runs a statement (a Query, or an Execute before the Sync) and
/// as prepared otherwise (a statement prepared, or the driver looking up
/// a type for one). Returns the URL through the proxy and the
/// counts.
pub(super) async fn counting_proxy(url: &str) -> (String, Arc<Counts>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (head, rest) = url.rsplit_once(':').unwrap();
    let (port, tail) = rest.split_once('/').unwrap();
    let upstream = format!("{}:{port}", head.rsplit_once('@').map_or(head, |(_, h)| h));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxied = format!("{head}:{}/{tail}", listener.local_addr().unwrap().port());
    let count = Arc::new(Counts::default());
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let counter = counter.clone();
            // Messages go on at once (no Nagle wait for an ACK, which
            // delayed ACKs hold back 40 ms), each batch the client sent in
            // one write.
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            tokio::spawn(async move {
                let (from_client, mut to_client) = client.into_split();
                let (mut from_server, to_server) = server.into_split();
                let mut from_client = tokio::io::BufReader::new(from_client);
                let mut to_server = tokio::io::BufWriter::new(to_server);
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                // Untyped first messages: an SSL or GSS request (answered
                // by the server), then the startup message.
                loop {
                    let mut len = [0u8; 4];
                    if from_client.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                    if from_client.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let code = body
                        .get(..4)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    if to_server.write_all(&len).await.is_err()
                        || to_server.write_all(&body).await.is_err()
                        || to_server.flush().await.is_err()
                    {
                        return;
                    }
                    if !matches!(code, Some(80_877_103 | 80_877_104)) {
                        break;
                    }
                }
                let (mut executes, mut looks_up) = (false, false);
                let mut lookups: HashSet<Vec<u8>> = HashSet::new();
                loop {
                    let mut head = [0u8; 5];
                    if from_client.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
                    let mut body = vec![0u8; len.saturating_sub(4)];
                    if from_client.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    match head[0] {
                        // A statement prepared: is it the driver's own
                        // look-up of a type (part of preparing another)?
                        b'P' => {
                            let mut parts = body.split(|b| *b == 0);
                            let name = parts.next().unwrap_or_default().to_vec();
                            let query = parts.next().unwrap_or_default();
                            if TYPE_LOOKUPS.iter().any(|q| query.starts_with(q.as_bytes())) {
                                lookups.insert(name);
                            }
                        }
                        b'B' => {
                            let mut parts = body.split(|b| *b == 0);
                            let _portal = parts.next();
                            looks_up = lookups.contains(parts.next().unwrap_or_default());
                        }
                        b'E' => executes = true,
                        b'Q' => {
                            counter.run.fetch_add(1, Ordering::Relaxed);
                        }
                        b'S' => {
                            let kind = if executes && !looks_up {
                                &counter.run
                            } else {
                                &counter.prepared
                            };
                            kind.fetch_add(1, Ordering::Relaxed);
                            (executes, looks_up) = (false, false);
                        }
                        _ => {}
                    }
                    if to_server.write_all(&head).await.is_err()
                        || to_server.write_all(&body).await.is_err()
                    {
                        return;
                    }
                    // All the client has sent so far is passed on.
                    if from_client.buffer().is_empty() && to_server.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (proxied, count)
}

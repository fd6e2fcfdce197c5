//! Sessions in PostgreSQL: [`PostgresSessionStore`], the journal store for
//! services whose replicas run on several machines.

use super::Cached as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::Pool;
use kinet_core::session::{
    AsyncClaims, Claimed, ForkPoint, JournalEntry, Session, SessionInfo, SessionState,
    SessionStore, StoreError, StoreJournal,
};
use tokio::sync::mpsc;

use super::{open_pool, pg, schema};
use crate::MemoryError;
use crate::sessions::{initial_entries, kind};

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;
type Job = Box<dyn FnOnce(Pool) -> Work + Send>;
/// One call's statements, to run on the store's thread for a blocking
/// caller ([`PostgresSessionStore::run`]) or an async one
/// ([`PostgresSessionStore::run_async`]).
type Op<T> =
    Box<dyn FnOnce(Pool) -> Pin<Box<dyn Future<Output = Result<T, MemoryError>> + Send>> + Send>;

/// `work` as an [`Op`].
fn op<T, F>(work: impl FnOnce(Pool) -> F + Send + 'static) -> Op<T>
where
    F: Future<Output = Result<T, MemoryError>> + Send + 'static,
{
    Box::new(move |pool| Box::pin(work(pool)))
}

/// The server's clock in ms since the epoch, as SQL: claims expire by one
/// clock however many machines share the database.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Claims session `$1` for holder `$2` for `$3` ms: one statement, whose
/// row lock makes the check and the claim one step for every process.
fn claim_statement() -> String {
    format!(
        "INSERT INTO kinet_session_claims (session, holder, expires_at) VALUES ($1, $2, {NOW_MS} + $3)
         ON CONFLICT (session) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE kinet_session_claims.holder = excluded.holder
            OR kinet_session_claims.expires_at <= {NOW_MS}"
    )
}

/// A journal entry of session `id` as stored.
fn entry_from(id: &str, body: &str) -> Result<JournalEntry, MemoryError> {
    serde_json::from_str(body)
        .map_err(|e| MemoryError::Io(format!("a journal entry of `{id}` is unreadable: {e}")))
}

/// Sessions in PostgreSQL (tables `kinet_sessions`,
/// `kinet_session_entries`, `kinet_session_claims`, versioned in
/// `kinet_session_schema` and migrated under the memory tables' advisory
/// lock; a database of a newer schema is refused; no pgvector needed). The same [`SessionStore`] as
/// [`SqliteSessionStore`](crate::SqliteSessionStore), held to the same
/// conformance suite, for replicas on several machines: give it to
/// stateless MCP serving or to each agent's journal.
///
/// - An append is one statement: it draws the entry's sequence number
///   from the session row, so appends from any number of processes are
///   ordered and never collide.
/// - Claims expire by the database server's clock, not the callers'.
/// - `SessionStore` is a blocking trait (a journal is written between the
///   steps of a run): the store runs its pool (as many connections as
///   [`PostgresMemory`](super::PostgresMemory)'s, `pool_max_conns`) on a
///   thread of its own, so its calls work from any thread or runtime;
///   each waits for one round trip.
/// - An async caller's claim, renewal, save and release
///   ([`SessionStore::nonblocking`]) wait on its runtime for the store's
///   thread, with no blocking thread between (the MCP server's stateless
///   turns use them).
///
/// ```no_run
/// # fn run() -> Result<(), kinet_memory::MemoryError> {
/// use kinet_memory::postgres::PostgresSessionStore;
///
/// let sessions = PostgresSessionStore::connect("postgres://agent@db.internal/agents")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresSessionStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: mpsc::UnboundedSender<Job>,
    target: String,
}

impl std::fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSessionStore")
            .field("target", &self.inner.target)
            .finish_non_exhaustive()
    }
}

impl PostgresSessionStore {
    /// Connects to `url` (as [`PostgresMemory::connect`](super::PostgresMemory::connect)
    /// takes it) and migrates the schema; blocks until done.
    pub fn connect(url: &str) -> Result<Self, MemoryError> {
        Self::connect_at(url, schema::SESSION_SCHEMA_VERSION)
    }

    pub(crate) fn connect_at(url: &str, version: usize) -> Result<Self, MemoryError> {
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let (ready, opened) = std::sync::mpsc::sync_channel(1);
        let address = url.to_owned();
        std::thread::Builder::new()
            .name("kinet-pg-sessions".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready.send(Err(MemoryError::Io(format!(
                            "cannot start the session store's thread: {error}"
                        ))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let pool = match open_pool(&address, schema::Tables::Sessions, version).await {
                        Ok((pool, target)) => {
                            let _ = ready.send(Ok(target));
                            pool
                        }
                        Err(error) => {
                            let _ = ready.send(Err(error));
                            return;
                        }
                    };
                    // Each call runs as its own task: calls from several
                    // threads proceed on several connections at once.
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job(pool.clone()));
                    }
                });
            })
            .map_err(|e| {
                MemoryError::Io(format!("cannot start the session store's thread: {e}"))
            })?;
        let target = opened.recv().map_err(|_| MemoryError::Closed)??;
        Ok(Self {
            inner: Arc::new(Inner { jobs, target }),
        })
    }

    /// Hands `work` to the store's thread, which gives its answer to
    /// `reply`.
    fn submit<T, F>(
        &self,
        work: impl FnOnce(Pool) -> F + Send + 'static,
        reply: impl FnOnce(Result<T, MemoryError>) + Send + 'static,
    ) -> Result<(), MemoryError>
    where
        F: Future<Output = Result<T, MemoryError>> + Send + 'static,
    {
        let job: Job = Box::new(move |pool| Box::pin(async move { reply(work(pool).await) }));
        self.inner.jobs.send(job).map_err(|_| MemoryError::Closed)
    }

    /// Runs `work` on the store's thread and waits for its answer.
    fn run<T, F>(&self, work: impl FnOnce(Pool) -> F + Send + 'static) -> Result<T, MemoryError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, MemoryError>> + Send + 'static,
    {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.submit(work, move |answer| drop(reply.send(answer)))?;
        answer.recv().map_err(|_| MemoryError::Closed)?
    }

    /// Runs `work` on the store's thread and awaits its answer without
    /// blocking the caller's thread (the served turn's path: no blocking
    /// thread between the runtime and the store's own).
    async fn run_async<T: Send + 'static>(&self, work: Op<T>) -> Result<T, MemoryError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.submit(work, move |answer| drop(reply.send(answer)))?;
        answer.await.map_err(|_| MemoryError::Closed)?
    }

    /// A connection, or why there is none (naming the server).
    async fn client(pool: &Pool, target: &str) -> Result<deadpool_postgres::Object, MemoryError> {
        pool.get().await.map_err(|e| super::pool_error(target, e))
    }

    /// Stores `session` (its messages, approvals, state and what it has
    /// read become the journal's first entries).
    pub fn create(&self, session: &Session) -> Result<(), MemoryError> {
        let id = session.id.clone();
        let fork = session
            .forked_from
            .as_ref()
            .map(|f| (f.session.clone(), i64::try_from(f.at).unwrap_or(i64::MAX)));
        let entries = initial_entries(session)?;
        let target = self.inner.target.clone();
        let kinds: Vec<&'static str> = entries.iter().map(|(kind, _)| *kind).collect();
        let bodies: Vec<String> = entries.into_iter().map(|(_, body)| body).collect();
        self.run(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            let count = i64::try_from(kinds.len()).unwrap_or(i64::MAX);
            // One statement: the session row and its first entries, all or
            // none; nothing when the id is taken.
            let inserted = client
                .execute_cached(
                    &format!(
                        "WITH s AS (
                             INSERT INTO kinet_sessions (id, created_at, updated_at, forked_from, fork_at, next_seq)
                             VALUES ($1, {NOW_MS}, {NOW_MS}, $2, $3, $4) ON CONFLICT (id) DO NOTHING
                             RETURNING id
                         ), added AS (
                             INSERT INTO kinet_session_entries (session, seq, kind, body)
                             SELECT s.id, n - 1, k, b
                             FROM s, unnest($5::text[], $6::text[]) WITH ORDINALITY AS x(k, b, n)
                         )
                         SELECT 1 FROM s"
                    ),
                    &[
                        &id,
                        &fork.as_ref().map(|f| &f.0),
                        &fork.as_ref().map(|f| f.1),
                        &count,
                        &kinds,
                        &bodies,
                    ],
                )
                .await
                .map_err(pg)?;
            if inserted == 0 {
                return Err(MemoryError::Invalid(format!(
                    "a session `{id}` already exists; load it, or create the new one under another id"
                )));
            }
            Ok(())
        })
    }

    /// Appends one entry to a session's journal.
    pub fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), MemoryError> {
        self.append_all(id, std::slice::from_ref(entry))
    }

    /// Appends entries to a session's journal in one statement (all or
    /// none), their sequence numbers drawn from the session row.
    pub fn append_all(&self, id: &str, entries: &[JournalEntry]) -> Result<(), MemoryError> {
        self.run(self.append_releasing(id, entries, None)?)
    }

    /// Appends `entries` and, with a `holder`, gives up its claim on `id`
    /// in the same statement (so only once the entries are stored).
    fn append_releasing(
        &self,
        id: &str,
        entries: &[JournalEntry],
        holder: Option<&str>,
    ) -> Result<Op<()>, MemoryError> {
        let mut kinds = Vec::with_capacity(entries.len());
        let mut bodies = Vec::with_capacity(entries.len());
        for entry in entries {
            kinds.push(kind(entry));
            bodies.push(serde_json::to_string(entry).map_err(|e| MemoryError::Io(e.to_string()))?);
        }
        let id = id.to_owned();
        let holder = holder.map(str::to_owned);
        let count = i64::try_from(entries.len()).unwrap_or(i64::MAX);
        let target = self.inner.target.clone();
        Ok(op(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            // The claim goes only with a session row to append to (`s`):
            // a failed append keeps it.
            let changed = client
                .execute_cached(
                    &format!(
                        "WITH s AS (
                             UPDATE kinet_sessions SET updated_at = {NOW_MS}, next_seq = next_seq + $4
                             WHERE id = $1 RETURNING next_seq - $4 AS first
                         ), added AS (
                             INSERT INTO kinet_session_entries (session, seq, kind, body)
                             SELECT $1, s.first + x.n - 1, x.k, x.b
                             FROM s, unnest($2::text[], $3::text[]) WITH ORDINALITY AS x(k, b, n)
                         ), released AS (
                             DELETE FROM kinet_session_claims
                             WHERE $5::text IS NOT NULL AND session = $1 AND holder = $5
                               AND EXISTS (SELECT 1 FROM s)
                         )
                         SELECT 1 FROM s"
                    ),
                    &[&id, &kinds, &bodies, &count, &holder],
                )
                .await
                .map_err(pg)?;
            if changed == 0 {
                return Err(MemoryError::Invalid(format!("there is no session `{id}`")));
            }
            Ok(())
        }))
    }

    /// Claims `id` for `holder` and reads its journal in one statement.
    fn claim_reading(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Op<Claimed> {
        let (id, holder) = (id.to_owned(), holder.to_owned());
        let ttl = ttl_ms(ttl);
        let target = self.inner.target.clone();
        op(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            // One row when refused or when there is no session; else one
            // per entry (one with no body for a session with none).
            let rows = client
                .query_cached(
                    &format!(
                        "WITH c AS (
                             {}
                             RETURNING 1
                         ), g AS (SELECT count(*) > 0 AS granted FROM c)
                         SELECT g.granted, s.id IS NOT NULL, s.forked_from, s.fork_at, e.body
                         FROM g
                         LEFT JOIN kinet_sessions s ON g.granted AND s.id = $1
                         LEFT JOIN kinet_session_entries e ON e.session = s.id
                         ORDER BY e.seq",
                        claim_statement()
                    ),
                    &[&id, &holder, &ttl],
                )
                .await
                .map_err(pg)?;
            let Some(first) = rows.first() else {
                return Err(MemoryError::Io(format!("claiming `{id}` returned nothing")));
            };
            if !first.get::<_, bool>(0) {
                return Ok(Claimed::Busy);
            }
            if !first.get::<_, bool>(1) {
                return Ok(Claimed::Held(None));
            }
            let mut session = Session::empty(id.clone());
            let (from, at): (Option<String>, Option<i64>) = (first.get(2), first.get(3));
            session.forked_from = from.zip(at).map(|(session, at)| ForkPoint {
                session,
                at: usize::try_from(at).unwrap_or(0),
            });
            for row in &rows {
                if let Some(body) = row.get::<_, Option<&str>>(4) {
                    session.apply(entry_from(&id, body)?);
                }
            }
            Ok(Claimed::Held(Some(session)))
        })
    }

    /// The journal of session `id` for an agent
    /// ([`Sessions::journal`](kinet_core::builder::Sessions::journal)): each
    /// entry written as it comes, and the state of `states` after every tool
    /// result.
    pub fn journal(&self, id: &str, states: Vec<Arc<dyn SessionState>>) -> Arc<StoreJournal> {
        StoreJournal::new(Arc::new(self.clone()), id, states)
    }

    /// Runs one statement that changes rows and says how many.
    fn change(&self, statement: String, params: Vec<Param>) -> Op<u64> {
        let target = self.inner.target.clone();
        op(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(Param::as_sql).collect();
            client.execute_cached(&statement, &refs).await.map_err(pg)
        })
    }

    /// Extends `holder`'s claim on `id`; whether it still held it.
    fn renewing(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Op<bool> {
        let renewed = self.change(
            format!(
                "UPDATE kinet_session_claims SET expires_at = {NOW_MS} + $3 WHERE session = $1 AND holder = $2"
            ),
            vec![
                Param::Text(id.to_owned()),
                Param::Text(holder.to_owned()),
                Param::Int(ttl_ms(ttl)),
            ],
        );
        op(move |pool| async move { Ok(renewed(pool).await? == 1) })
    }

    /// Gives up `holder`'s claim on `id`.
    fn releasing(&self, id: &str, holder: &str) -> Op<()> {
        let released = self.change(
            "DELETE FROM kinet_session_claims WHERE session = $1 AND holder = $2".into(),
            vec![Param::Text(id.to_owned()), Param::Text(holder.to_owned())],
        );
        op(move |pool| async move { released(pool).await.map(drop) })
    }
}

/// An owned statement parameter.
enum Param {
    Text(String),
    Int(i64),
}

impl Param {
    fn as_sql(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Self::Text(text) => text,
            Self::Int(int) => int,
        }
    }
}

fn ttl_ms(ttl: std::time::Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl SessionStore for PostgresSessionStore {
    fn create(&self, session: &Session) -> Result<(), StoreError> {
        Ok(PostgresSessionStore::create(self, session)?)
    }

    fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), StoreError> {
        Ok(PostgresSessionStore::append(self, id, entry)?)
    }

    fn append_all(&self, id: &str, entries: &[JournalEntry]) -> Result<(), StoreError> {
        Ok(PostgresSessionStore::append_all(self, id, entries)?)
    }

    fn entries(&self, id: &str) -> Result<Option<Vec<JournalEntry>>, StoreError> {
        let id = id.to_owned();
        let target = self.inner.target.clone();
        Ok(self.run(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            // One row per entry; one row with no body for a session with
            // none; no row for no session.
            let rows = client
                .query_cached(
                    "SELECT e.body FROM kinet_sessions s
                     LEFT JOIN kinet_session_entries e ON e.session = s.id
                     WHERE s.id = $1 ORDER BY e.seq",
                    &[&id],
                )
                .await
                .map_err(pg)?;
            if rows.is_empty() {
                return Ok(None);
            }
            let mut entries = Vec::with_capacity(rows.len());
            for row in &rows {
                let Some(body) = row.get::<_, Option<&str>>(0) else {
                    continue;
                };
                entries.push(entry_from(&id, body)?);
            }
            Ok(Some(entries))
        })?)
    }

    fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        let target = self.inner.target.clone();
        Ok(self.run(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            let rows = client
                .query_cached(
                    "SELECT s.id, s.created_at, s.updated_at,
                        (SELECT count(*) FROM kinet_session_entries e WHERE e.session = s.id AND e.kind = 'message')
                     FROM kinet_sessions s ORDER BY s.updated_at DESC, s.id",
                    &[],
                )
                .await
                .map_err(pg)?;
            Ok(rows
                .iter()
                .map(|row| {
                    SessionInfo::new(
                        row.get(0),
                        row.get(1),
                        row.get(2),
                        usize::try_from(row.get::<_, i64>(3)).unwrap_or(0),
                    )
                })
                .collect())
        })?)
    }

    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        // The entries go with the session (ON DELETE CASCADE).
        let gone = self.run(self.change(
            "DELETE FROM kinet_sessions WHERE id = $1".into(),
            vec![Param::Text(id.to_owned())],
        ))?;
        Ok(gone > 0)
    }

    fn fork_point(&self, id: &str) -> Result<Option<ForkPoint>, StoreError> {
        let id = id.to_owned();
        let target = self.inner.target.clone();
        Ok(self.run(move |pool| async move {
            let client = Self::client(&pool, &target).await?;
            let row = client
                .query_opt_cached(
                    "SELECT forked_from, fork_at FROM kinet_sessions WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(pg)?;
            Ok(row.and_then(|row| {
                let session: Option<String> = row.get(0);
                let at: Option<i64> = row.get(1);
                Some(ForkPoint {
                    session: session?,
                    at: usize::try_from(at?).unwrap_or(0),
                })
            }))
        })?)
    }

    fn claim(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        // One statement: the row lock of the upsert makes the check and
        // the claim one step for every process.
        let granted = self.run(self.change(
            claim_statement(),
            vec![
                Param::Text(id.to_owned()),
                Param::Text(holder.to_owned()),
                Param::Int(ttl_ms(ttl)),
            ],
        ))?;
        Ok(granted == 1)
    }

    fn renew(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        Ok(self.run(self.renewing(id, holder, ttl))?)
    }

    fn release(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        Ok(self.run(self.releasing(id, holder))?)
    }

    fn claim_and_load(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Claimed, StoreError> {
        Ok(self.run(self.claim_reading(id, holder, ttl))?)
    }

    fn append_and_release(
        &self,
        id: &str,
        entries: &[JournalEntry],
        holder: &str,
    ) -> Result<(), StoreError> {
        Ok(self.run(self.append_releasing(id, entries, Some(holder))?)?)
    }

    fn nonblocking(&self) -> Option<&dyn AsyncClaims> {
        Some(self)
    }
}

/// The same statements, awaited on the caller's runtime: a served turn's
/// claim and save wait for the store's thread without a blocking thread
/// between.
#[async_trait::async_trait]
impl AsyncClaims for PostgresSessionStore {
    async fn claim_and_load(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Claimed, StoreError> {
        Ok(self.run_async(self.claim_reading(id, holder, ttl)).await?)
    }

    async fn renew(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.run_async(self.renewing(id, holder, ttl)).await?)
    }

    async fn release(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        Ok(self.run_async(self.releasing(id, holder)).await?)
    }

    async fn append_and_release(
        &self,
        id: &str,
        entries: &[JournalEntry],
        holder: &str,
    ) -> Result<(), StoreError> {
        let work = self.append_releasing(id, entries, Some(holder))?;
        Ok(self.run_async(work).await?)
    }
}

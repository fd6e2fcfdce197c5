//! Served calls as tasks: the Tasks extension of MCP 2026-07-28
//! (SEP-2663, `io.modelcontextprotocol/tasks`). rmcp carries the wire
//! types and routes `tasks/get`, `tasks/update` and `tasks/cancel`; the
//! rest is kinet's: a task's state lives in the server's session store
//! (the stateless server's shared one, so any replica answers for any
//! task and a task outlives a restart of the replica that did not run it),
//! or in memory for a stateful server.
//!
//! One task is one store session (`task-<uuid>`) whose state keys are
//! written by one party each, so no write is lost to another: the runner
//! writes the task record, `tasks/cancel` writes the cancel flag and
//! `tasks/update` one answer key per question. The replica running a task
//! holds a claim on it, renewed while it runs; a task whose runner died
//! (its claim expired) is reported failed by whichever replica is asked.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kinet_core::session::{JournalEntry, Session, SessionInfo, SessionStore, StoreError};
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, InputRequests, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::{Value, json};

/// The task record, written by the runner.
const RECORD: &str = "kinet.mcp.task";
/// Set by `tasks/cancel`.
const CANCEL: &str = "kinet.mcp.task.cancel";
/// `tasks/update`'s answers, one key per question.
const ANSWER: &str = "kinet.mcp.task.answer.";
/// The state key of the answer to question `key`.
fn answer_key(key: &str) -> String {
    format!("{ANSWER}{key}")
}

/// How long a finished task stays readable.
const KEEP: Duration = Duration::from_secs(3600);
/// How often a runner looks for answers and a cancellation in the store.
const POLL: Duration = Duration::from_millis(100);
/// The poll interval suggested to clients.
const POLL_HINT_MS: u64 = 250;

/// What the runner records.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Record {
    owner: Option<String>,
    status: TaskStatus,
    created_at: String,
    updated_at: String,
    /// When it finished (milliseconds since the epoch), for expiry.
    #[serde(default)]
    finished_ms: Option<u64>,
    #[serde(default)]
    result: Option<JsonObject>,
    #[serde(default)]
    error: Option<JsonObject>,
    /// The questions waiting for `tasks/update`.
    #[serde(default)]
    input_requests: Option<Value>,
}

/// The tasks of one server.
pub(super) struct Tasks {
    store: Arc<dyn SessionStore>,
    /// Whether other processes share the store (claims mean something).
    shared: bool,
    /// This process's name as a claim holder.
    replica: String,
    claim_ttl: Duration,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ms` since the epoch as RFC 3339 (UTC, milliseconds).
fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

fn store_error(e: StoreError) -> McpError {
    McpError::internal_error(format!("the task store failed: {e}"), None)
}

fn no_task(id: &str) -> McpError {
    McpError::invalid_params(
        format!("no task `{id}` (it never existed, expired, or belongs to someone else)"),
        None,
    )
}

impl Tasks {
    /// Tasks in `store` (shared by replicas) or, without one, in memory.
    pub(super) fn new(store: Option<Arc<dyn SessionStore>>, claim_ttl: Duration) -> Self {
        let shared = store.is_some();
        Self {
            store: store.unwrap_or_else(|| Arc::new(MemoryTasks::default())),
            shared,
            replica: format!("replica-{}", uuid::Uuid::new_v4().simple()),
            claim_ttl,
        }
    }

    /// Records a new working task for `owner` and returns its id and the
    /// handle its runner uses.
    pub(super) fn create(
        self: &Arc<Self>,
        owner: Option<String>,
    ) -> Result<(Task, Runner), McpError> {
        let id = format!("task-{}", uuid::Uuid::new_v4().simple());
        let now = rfc3339(now_ms());
        let record = Record {
            owner,
            status: TaskStatus::Working,
            created_at: now.clone(),
            updated_at: now,
            finished_ms: None,
            result: None,
            error: None,
            input_requests: None,
        };
        let mut session = Session::empty(&id);
        session.state.insert(
            RECORD.into(),
            serde_json::to_value(&record).unwrap_or_default(),
        );
        self.store.create(&session).map_err(store_error)?;
        if self.shared {
            self.store
                .claim(&id, &self.replica, self.claim_ttl)
                .map_err(store_error)?;
        }
        let task = task_of(&id, &record);
        Ok((
            task,
            Runner {
                tasks: Arc::clone(self),
                id,
                record: Arc::new(Mutex::new(record)),
                waiting: Arc::new(Mutex::new(BTreeMap::new())),
            },
        ))
    }

    /// The record of `id` as `owner` may see it, with the session's other
    /// state (cancel flag, answers).
    fn load(&self, id: &str, owner: Option<&str>) -> Result<(Record, Session), McpError> {
        let session = self
            .store
            .load(id)
            .map_err(store_error)?
            .ok_or_else(|| no_task(id))?;
        let record: Record = session
            .state
            .get(RECORD)
            .cloned()
            .and_then(|r| serde_json::from_value(r).ok())
            .ok_or_else(|| no_task(id))?;
        if record.owner.as_deref() != owner {
            return Err(no_task(id));
        }
        if record
            .finished_ms
            .is_some_and(|at| now_ms().saturating_sub(at) > KEEP.as_millis() as u64)
        {
            let _ = self.store.delete(id);
            return Err(no_task(id));
        }
        Ok((record, session))
    }

    /// `tasks/get`: the task's state. A task whose runner is gone (another
    /// replica's claim expired) is failed here, once.
    pub(super) fn get(&self, id: &str, owner: Option<&str>) -> Result<DetailedTask, McpError> {
        let (mut record, session) = self.load(id, owner)?;
        // Answers given and not yet taken up by the runner: those
        // questions wait no more.
        if record.status == TaskStatus::InputRequired
            && let Some(Value::Object(waiting)) = &mut record.input_requests
        {
            waiting.retain(|key, _| !session.state.contains_key(&answer_key(key)));
            if waiting.is_empty() {
                record.status = TaskStatus::Working;
                record.input_requests = None;
            }
        }
        if !record.status.is_terminal() && self.shared {
            let probe = format!("probe-{}", uuid::Uuid::new_v4().simple());
            if self
                .store
                .claim(id, &probe, Duration::from_secs(5))
                .unwrap_or(false)
            {
                // The runner may have finished (written its result, then
                // let go of its claim) since the record was read: read it
                // again now that nobody else can write it.
                let (fresh, _) = self.load(id, owner)?;
                if fresh.status.is_terminal() {
                    let _ = self.store.release(id, &probe);
                    return Ok(detailed(id, &fresh));
                }
                record = finish(
                    record,
                    TaskStatus::Failed,
                    None,
                    Some(error_object(
                        -32603,
                        "the server replica running this task stopped before it finished; call the tool again",
                    )),
                );
                write(&*self.store, id, &record).map_err(store_error)?;
                let _ = self.store.release(id, &probe);
            }
        }
        Ok(detailed(id, &record))
    }

    /// `tasks/update`: answers to the task's questions.
    pub(super) fn update(
        &self,
        id: &str,
        owner: Option<&str>,
        answers: BTreeMap<String, Value>,
    ) -> Result<(), McpError> {
        let (record, _) = self.load(id, owner)?;
        if record.status.is_terminal() {
            return Ok(());
        }
        let entries: Vec<JournalEntry> = answers
            .into_iter()
            .map(|(key, value)| JournalEntry::State {
                key: answer_key(&key),
                value,
            })
            .collect();
        self.store.append_all(id, &entries).map_err(store_error)
    }

    /// `tasks/cancel`: asks the runner to stop (an ended task stays as it
    /// ended).
    pub(super) fn cancel(&self, id: &str, owner: Option<&str>) -> Result<(), McpError> {
        let (record, _) = self.load(id, owner)?;
        if record.status.is_terminal() {
            return Ok(());
        }
        self.store
            .append(
                id,
                &JournalEntry::State {
                    key: CANCEL.into(),
                    value: json!(true),
                },
            )
            .map_err(store_error)
    }
}

fn write(store: &dyn SessionStore, id: &str, record: &Record) -> Result<(), StoreError> {
    store.append(
        id,
        &JournalEntry::State {
            key: RECORD.into(),
            value: serde_json::to_value(record).unwrap_or_default(),
        },
    )
}

fn error_object(code: i64, message: &str) -> JsonObject {
    let mut error = JsonObject::new();
    error.insert("code".into(), json!(code));
    error.insert("message".into(), json!(message));
    error
}

fn finish(
    mut record: Record,
    status: TaskStatus,
    result: Option<JsonObject>,
    error: Option<JsonObject>,
) -> Record {
    let now = now_ms();
    record.status = status;
    record.updated_at = rfc3339(now);
    record.finished_ms = Some(now);
    record.result = result;
    record.error = error;
    record.input_requests = None;
    record
}

fn task_of(id: &str, record: &Record) -> Task {
    Task::new(id, record.status, &record.created_at, &record.updated_at)
        .with_ttl_ms(KEEP.as_millis() as u64)
        .with_poll_interval_ms(POLL_HINT_MS)
}

fn detailed(id: &str, record: &Record) -> DetailedTask {
    let payload = match record.status {
        TaskStatus::InputRequired => TaskPayload::InputRequired {
            input_requests: record
                .input_requests
                .clone()
                .and_then(|r| serde_json::from_value::<InputRequests>(r).ok())
                .unwrap_or_default(),
        },
        TaskStatus::Completed => TaskPayload::Completed {
            result: record.result.clone().unwrap_or_default(),
        },
        TaskStatus::Failed => TaskPayload::Failed {
            error: record
                .error
                .clone()
                .unwrap_or_else(|| error_object(-32603, "the task failed")),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        _ => TaskPayload::Working,
    };
    DetailedTask::new(task_of(id, record), payload)
}

/// The runner's side of one task: its questions and its end.
#[derive(Clone)]
pub(super) struct Runner {
    tasks: Arc<Tasks>,
    id: String,
    record: Arc<Mutex<Record>>,
    /// Questions waiting for an answer, by key: the request and where
    /// its answer goes.
    waiting: Arc<Mutex<BTreeMap<String, Waiting>>>,
}

/// A question waiting for `tasks/update`.
struct Waiting {
    request: Value,
    answer: tokio::sync::oneshot::Sender<Value>,
}

impl Runner {
    /// Writes the record as it stands (the questions waiting, if any).
    fn publish(&self) {
        let Ok(mut record) = self.record.lock() else {
            return;
        };
        let waiting: BTreeMap<String, Value> = self
            .waiting
            .lock()
            .map(|w| {
                w.iter()
                    .map(|(key, w)| (key.clone(), w.request.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if record.status.is_terminal() {
            return;
        }
        record.status = if waiting.is_empty() {
            TaskStatus::Working
        } else {
            TaskStatus::InputRequired
        };
        record.input_requests = (!waiting.is_empty()).then(|| json!(waiting));
        record.updated_at = rfc3339(now_ms());
        if let Err(e) = write(&*self.tasks.store, &self.id, &record) {
            tracing::warn!(task = %self.id, "cannot record the task: {e}");
        }
    }

    /// Asks the client `request` (an input request: method and params)
    /// under `key` and waits for `tasks/update` to answer it (the answer
    /// comes through [`cancelled`](Self::cancelled)'s look at the store).
    pub(super) async fn ask(&self, key: &str, request: Value) -> Value {
        let (answer, answered) = tokio::sync::oneshot::channel();
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.insert(key.to_owned(), Waiting { request, answer });
        }
        self.publish();
        match answered.await {
            Ok(answer) => answer,
            // The task ended: nothing will answer.
            Err(_) => std::future::pending().await,
        }
    }

    /// Resolves when the task is cancelled (through any replica). Until
    /// then, one look at the store per tick hands answers from
    /// `tasks/update` to the questions waiting for them, and keeps this
    /// replica's claim on the task.
    pub(super) async fn cancelled(&self) {
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            let Ok(Some(session)) = self.tasks.store.load(&self.id) else {
                continue;
            };
            if session.state.contains_key(CANCEL) {
                return;
            }
            let answered: Vec<(String, Waiting)> = match self.waiting.lock() {
                Ok(mut waiting) => {
                    let keys: Vec<String> = waiting
                        .keys()
                        .filter(|key| session.state.contains_key(&answer_key(key)))
                        .cloned()
                        .collect();
                    keys.into_iter()
                        .filter_map(|key| waiting.remove_entry(&key))
                        .collect()
                }
                Err(_) => Vec::new(),
            };
            let delivered = !answered.is_empty();
            for (key, question) in answered {
                if let Some(answer) = session.state.get(&answer_key(&key)) {
                    let _ = question.answer.send(answer.clone());
                }
            }
            if delivered {
                self.publish();
            }
            if self.tasks.shared && renewed.elapsed() >= self.tasks.claim_ttl / 4 {
                renewed = tokio::time::Instant::now();
                let _ = self
                    .tasks
                    .store
                    .renew(&self.id, &self.tasks.replica, self.tasks.claim_ttl);
            }
        }
    }

    /// Records how the task ended: a tool result (an error result is still
    /// `completed`), a protocol error, or cancellation.
    pub(super) fn end(&self, outcome: Result<Option<JsonObject>, (i64, String)>) {
        let Ok(mut record) = self.record.lock() else {
            return;
        };
        let (status, result, error) = match outcome {
            Ok(Some(result)) => (TaskStatus::Completed, Some(result), None),
            Ok(None) => (TaskStatus::Cancelled, None, None),
            Err((code, message)) => (TaskStatus::Failed, None, Some(error_object(code, &message))),
        };
        *record = finish(record.clone(), status, result, error);
        if let Err(e) = write(&*self.tasks.store, &self.id, &record) {
            tracing::warn!(task = %self.id, "cannot record the task's end: {e}");
        }
        if self.tasks.shared {
            let _ = self.tasks.store.release(&self.id, &self.tasks.replica);
        }
    }
}

/// A stateful server's tasks: a session store in this process's memory.
#[derive(Default)]
struct MemoryTasks(Mutex<HashMap<String, Vec<JournalEntry>>>);

impl SessionStore for MemoryTasks {
    fn create(&self, session: &Session) -> Result<(), StoreError> {
        let entries = session
            .state
            .iter()
            .map(|(key, value)| JournalEntry::State {
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        if let Ok(mut all) = self.0.lock() {
            // A task no one has asked about for a day is dropped.
            if all.len() > 10_000 {
                all.clear();
            }
            all.insert(session.id.clone(), entries);
        }
        Ok(())
    }
    fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), StoreError> {
        if let Ok(mut all) = self.0.lock()
            && let Some(entries) = all.get_mut(id)
        {
            entries.push(entry.clone());
        }
        Ok(())
    }
    fn entries(&self, id: &str) -> Result<Option<Vec<JournalEntry>>, StoreError> {
        Ok(self.0.lock().ok().and_then(|all| all.get(id).cloned()))
    }
    fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        Ok(Vec::new())
    }
    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .lock()
            .map(|mut all| all.remove(id).is_some())
            .unwrap_or(false))
    }
    fn fork_point(&self, _id: &str) -> Result<Option<kinet_core::session::ForkPoint>, StoreError> {
        Ok(None)
    }
}

#[cfg(test)]
mod timestamps {
    #[test]
    fn timestamps_are_rfc_3339_with_milliseconds() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            super::rfc3339(1_796_428_800_000),
            "2026-12-05T00:00:00.000Z"
        );
    }
}

//! What the tools do on a page: snapshots, clicks, typing and selecting,
//! each through the page script in `page.js`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chromiumoxide::Page;
use chromiumoxide::layout::Point;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::browser_error;
use super::document::Doc;
use crate::ComputerError;

const PAGE_JS: &str = include_str!("page.js");

/// The number the next document's refs start from: every document numbers
/// on from the highest ref handed out in this process, so a ref taken from
/// an old page (or another tab) is refused as stale instead of naming an
/// element of the new one.
static NEXT_REF: AtomicU64 = AtomicU64::new(1);

/// The longest accessible name or value shown in a snapshot line.
const MAX_NAME: usize = 100;

/// How long the page may take to say where a click's press landed.
const LANDED_CHECK: Duration = Duration::from_millis(500);

/// How often an element that is not yet actionable is looked at again.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Calls `window.__kinet.<function>(args...)` in `doc` after making sure
/// the page script is installed in its current document.
async fn call_page<T: DeserializeOwned>(
    doc: &Doc,
    function: &str,
    args: &[Value],
) -> Result<T, ComputerError> {
    let args: Vec<String> = args.iter().map(Value::to_string).collect();
    let seed = NEXT_REF.load(Ordering::Relaxed);
    let frame = Value::from(doc.key.as_str());
    let expression = format!(
        "window.__kinetSeed = {seed}; window.__kinetFrame = {frame};\n{PAGE_JS}\nwindow.__kinet.{function}({})",
        args.join(", ")
    );
    let value = doc.evaluate(&expression).await?;
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        let message = value
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or(error)
            .to_owned();
        return Err(match error {
            "stale" => ComputerError::StaleRef(message),
            _ if value.get("retry").and_then(Value::as_bool) == Some(true) => {
                ComputerError::NotActionable(format!("{message} (waited for it)"))
            }
            _ => ComputerError::NotActionable(message),
        });
    }
    serde_json::from_value(value).map_err(browser_error)
}

/// Calls a page function that may answer "not yet" (`retry`): asks again
/// until it succeeds or `wait` has passed, then returns the last reason.
async fn call_until_ready<T: DeserializeOwned>(
    doc: &Doc,
    function: &str,
    args: &[Value],
    wait: Duration,
) -> Result<T, ComputerError> {
    let deadline = Instant::now() + wait;
    loop {
        match call_page(doc, function, args).await {
            Err(ComputerError::NotActionable(message))
                if message.ends_with("(waited for it)") && Instant::now() < deadline =>
            {
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Err(ComputerError::NotActionable(message)) if message.ends_with("(waited for it)") => {
                let waited = wait.as_secs_f64();
                let message = message.trim_end_matches("(waited for it)");
                return Err(ComputerError::NotActionable(format!(
                    "{message}(still so after waiting {waited:.1} s)"
                )));
            }
            other => return other,
        }
    }
}

/// What a snapshot shows.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnapshotMode {
    /// Headings, text, code, lists, tables, images and interactive
    /// elements with refs (the default).
    #[default]
    Full,
    /// Only interactive elements (with refs) and the lists, tables and
    /// frames around them.
    Interactive,
    /// Reading view: the text with links and buttons as plain words, no
    /// refs.
    Text,
}

/// Which part of a page a snapshot covers, and how much of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// A ref (`e12`, `f3e7`, a frame `f3`) or a CSS selector whose element
    /// is the snapshot's root. Default: the whole page.
    pub root: Option<String>,
    /// How many levels of nesting (lists, tables, frames) are shown; deeper
    /// parts become one line naming the ref to ask for. Default: all.
    pub depth: Option<usize>,
    /// What is shown. Default [`SnapshotMode::Full`].
    pub mode: SnapshotMode,
    /// The longest text or code block shown whole; a longer one is cut with
    /// a marker naming the ref whose snapshot shows all of it. Default
    /// 4,000 characters; with a `root`, no limit.
    pub max_block: Option<usize>,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        Self {
            root: None,
            depth: None,
            mode: SnapshotMode::Full,
            max_block: Some(4_000),
        }
    }
}

#[derive(Deserialize)]
struct RawSnapshot {
    title: String,
    url: String,
    lines: String,
    #[serde(default)]
    remote: Vec<RemoteSlot>,
    refs: usize,
    next: u64,
}

/// Where the snapshot of a frame of another site goes.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RemoteSlot {
    /// The frame's key (`f3`).
    pub(crate) key: String,
    /// The line index the frame's lines go before.
    pub(crate) at: usize,
    /// Their indentation level.
    pub(crate) indent: usize,
}

/// A text snapshot of a page: title, URL, then one line per heading, text
/// block, code block, image and interactive element, nested under lists,
/// tables and frames; interactive ones with a `[ref=eN]` the other tools
/// take (`f3e12` inside frame `f3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The page title.
    pub title: String,
    /// The page URL.
    pub url: String,
    /// The snapshot lines.
    pub body: String,
    /// How many element refs are live.
    pub refs: usize,
}

impl Snapshot {
    /// The text the model reads.
    pub fn render(&self) -> String {
        format!("Page: {}\nURL: {}\n{}", self.title, self.url, self.body)
    }
}

/// Takes a snapshot of the page's main document (frames of other sites
/// are listed but not read; the browser tools read them too). Refs number
/// on from the highest handed out in this process; two snapshots running
/// at once (in different tabs) may hand out the same numbers, so the
/// browser tools take turns.
pub async fn snapshot(page: &Page, options: &SnapshotOptions) -> Result<Snapshot, ComputerError> {
    let (snapshot, _) = snapshot_doc(&Doc::top(page.clone()), options).await?;
    Ok(snapshot)
}

/// A snapshot of one document and where its frames of other sites go.
pub(crate) async fn snapshot_doc(
    doc: &Doc,
    options: &SnapshotOptions,
) -> Result<(Snapshot, Vec<RemoteSlot>), ComputerError> {
    let max_block = match (&options.root, options.max_block) {
        (Some(_), _) | (_, None) => Value::Null,
        (None, Some(limit)) => Value::from(limit),
    };
    let opts = serde_json::json!({
        "root": options.root,
        "depth": options.depth,
        "mode": options.mode,
        "maxBlock": max_block,
        "maxName": MAX_NAME,
    });
    let raw: RawSnapshot = call_page(doc, "snapshot", &[opts]).await?;
    NEXT_REF.fetch_max(raw.next, Ordering::Relaxed);
    Ok((
        Snapshot {
            title: raw.title,
            url: raw.url,
            body: raw.lines,
            refs: raw.refs,
        },
        raw.remote,
    ))
}

#[derive(Deserialize)]
struct ClickPoint {
    x: f64,
    y: f64,
}

#[derive(Deserialize)]
struct Landed {
    landed: bool,
    #[serde(default)]
    on: Option<String>,
    #[serde(default)]
    target: Option<String>,
}

/// Clicks the element with real mouse events at its centre, after
/// scrolling it into view and checking that it is visible, enabled, not
/// moving and the topmost element there. An element that is not yet
/// actionable is waited for up to `wait`, then refused with the reason.
/// Fails if the press reached another element after all (the page moved
/// between the check and the click).
pub async fn click(page: &Page, element: &str, wait: Duration) -> Result<(), ComputerError> {
    click_in(&Doc::top(page.clone()), element, wait).await
}

pub(crate) async fn click_in(
    doc: &Doc,
    element: &str,
    wait: Duration,
) -> Result<(), ComputerError> {
    let point: ClickPoint =
        call_until_ready(doc, "clickPoint", &[Value::from(element)], wait).await?;
    let (x, y) = (point.x + doc.origin.0, point.y + doc.origin.1);
    doc.top.click(Point { x, y }).await.map_err(browser_error)?;
    // A press that started a navigation leaves no page to ask (Chrome holds
    // commands back while the new page is on its way): it landed.
    let asked =
        tokio::time::timeout(LANDED_CHECK, call_page::<Landed>(doc, "clickLanded", &[])).await;
    let Ok(Ok(landed)) = asked else {
        return Ok(());
    };
    if landed.landed {
        return Ok(());
    }
    Err(ComputerError::NotActionable(format!(
        "the click at {element}'s position reached {} instead of {} (the page changed under it): \
take a new browser_snapshot",
        landed.on.unwrap_or_else(|| "nothing".into()),
        landed.target.unwrap_or_else(|| element.to_owned()),
    )))
}

#[derive(Deserialize)]
struct Focused {
    form: bool,
}

/// Replaces the text of a field with `text` (as typed input: the page sees
/// input events); `submit` presses Enter afterwards. Returns whether the
/// field belongs to a form. A disabled field is waited for up to `wait`.
pub async fn type_text(
    page: &Page,
    element: &str,
    text: &str,
    submit: bool,
    wait: Duration,
) -> Result<bool, ComputerError> {
    type_in(&Doc::top(page.clone()), element, text, submit, wait).await
}

pub(crate) async fn type_in(
    doc: &Doc,
    element: &str,
    text: &str,
    submit: bool,
    wait: Duration,
) -> Result<bool, ComputerError> {
    let focused: Focused =
        call_until_ready(doc, "focusForTyping", &[Value::from(element)], wait).await?;
    if !text.is_empty() {
        doc.input("Input.insertText", serde_json::json!({ "text": text }))
            .await?;
    }
    if submit {
        for (kind, text) in [("keyDown", Some("\r")), ("keyUp", None)] {
            let mut event = serde_json::json!({
                "type": kind,
                "key": "Enter",
                "code": "Enter",
                "windowsVirtualKeyCode": 13,
                "nativeVirtualKeyCode": 13,
            });
            if let Some(text) = text {
                event["text"] = text.into();
                event["unmodifiedText"] = text.into();
            }
            doc.input("Input.dispatchKeyEvent", event).await?;
        }
    }
    Ok(focused.form)
}

#[derive(Deserialize)]
struct Selected {
    selected: Vec<String>,
}

/// Chooses options of a `<select>` by value or label; returns the labels
/// chosen. A disabled select is waited for up to `wait`.
pub async fn select(
    page: &Page,
    element: &str,
    values: &[String],
    wait: Duration,
) -> Result<Vec<String>, ComputerError> {
    select_in(&Doc::top(page.clone()), element, values, wait).await
}

pub(crate) async fn select_in(
    doc: &Doc,
    element: &str,
    values: &[String],
    wait: Duration,
) -> Result<Vec<String>, ComputerError> {
    let values = Value::from(values.to_vec());
    let selected: Selected =
        call_until_ready(doc, "selectOptions", &[Value::from(element), values], wait).await?;
    Ok(selected.selected)
}

/// The content-box origin of frame `key` (an element of `doc`) in `doc`'s
/// viewport.
pub(crate) async fn frame_origin(doc: &Doc, key: &str) -> Result<(f64, f64), ComputerError> {
    let point: ClickPoint = call_page(doc, "frameOrigin", &[Value::from(key)]).await?;
    Ok((point.x, point.y))
}

//! What the tools do on a page: snapshots, clicks, typing, selecting,
//! evaluating, each through the page script in `page.js`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::IntoEventKind;
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, InsertTextParams,
};
use chromiumoxide::cdp::browser_protocol::page::{
    ClientNavigationDisposition, EventFrameRequestedNavigation, EventFrameStartedLoading,
    EventFrameStoppedLoading, EventLoadEventFired, EventNavigatedWithinDocument, FrameId,
};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::layout::Point;
use chromiumoxide::listeners::EventStream;
use futures::StreamExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::browser_error;
use crate::ComputerError;

const PAGE_JS: &str = include_str!("page.js");

/// The number the next document's refs start from: every document numbers
/// on from the highest ref handed out in this process, so a ref taken from
/// an old page (or another tab) is refused as stale instead of naming an
/// element of the new one.
static NEXT_REF: AtomicU64 = AtomicU64::new(1);

/// The longest accessible name or value shown in a snapshot line.
const MAX_TEXT: usize = 100;

/// Evaluates `expression` (awaiting promises) and returns its JSON value;
/// exceptions become [`ComputerError::Script`].
pub(crate) async fn evaluate(page: &Page, expression: &str) -> Result<Value, ComputerError> {
    let params = EvaluateParams::builder()
        .expression(expression)
        .await_promise(true)
        .return_by_value(true)
        .user_gesture(true)
        .build()
        .map_err(browser_error)?;
    let result = page.evaluate_expression(params).await.map_err(|e| {
        let text = e.to_string();
        if text.contains("Exception") || text.contains("exception") {
            ComputerError::Script(text)
        } else {
            browser_error(text)
        }
    })?;
    Ok(result.value().cloned().unwrap_or(Value::Null))
}

/// Calls `window.__kinet.<function>(args...)` after making sure the page
/// script is installed in the current document.
async fn call_page<T: DeserializeOwned>(
    page: &Page,
    function: &str,
    args: &[Value],
) -> Result<T, ComputerError> {
    let args: Vec<String> = args.iter().map(Value::to_string).collect();
    let seed = NEXT_REF.load(Ordering::Relaxed);
    let expression = format!(
        "window.__kinetSeed = {seed};\n{PAGE_JS}\nwindow.__kinet.{function}({})",
        args.join(", ")
    );
    let value = evaluate(page, &expression).await?;
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        let message = value
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or(error)
            .to_owned();
        return Err(match error {
            "stale" => ComputerError::StaleRef(message),
            _ => ComputerError::NotActionable(message),
        });
    }
    serde_json::from_value(value).map_err(browser_error)
}

#[derive(Deserialize)]
struct RawSnapshot {
    title: String,
    url: String,
    lines: String,
    refs: usize,
    next: u64,
}

/// A text snapshot of a page: title, URL, then one line per heading, text
/// block, image and interactive element, interactive ones with a `[ref=eN]`
/// the other tools take.
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

/// Takes a snapshot of the page. Refs number on from the highest handed
/// out in this process; two snapshots running at once (in different tabs)
/// may hand out the same numbers, so the browser tools take turns.
pub async fn snapshot(page: &Page) -> Result<Snapshot, ComputerError> {
    let raw: RawSnapshot = call_page(page, "snapshot", &[Value::from(MAX_TEXT)]).await?;
    NEXT_REF.fetch_max(raw.next, Ordering::Relaxed);
    Ok(Snapshot {
        title: raw.title,
        url: raw.url,
        body: raw.lines,
        refs: raw.refs,
    })
}

/// How long a navigation the action started may take to announce itself
/// after the page has run the tasks the action queued.
const NAVIGATION_GRACE: Duration = Duration::from_millis(25);

/// What an action set off, as far as the main frame goes.
enum Navigation {
    /// A new document is on its way.
    Document,
    /// The URL changed within the document (`#fragment`, history API).
    SameDocument,
}

/// Runs `action`; if it starts a navigation of the main frame (a link, a
/// form submission, a handler changing `location`), waits up to `limit` for
/// the new page to finish loading. Same-document navigations and links that
/// open a new tab or a download end the wait at once.
pub(crate) async fn settle<T>(
    page: &Page,
    limit: Duration,
    action: impl Future<Output = Result<T, ComputerError>>,
) -> Result<T, ComputerError> {
    let main = page.mainframe().await.ok().flatten();
    let is_main = |frame: &FrameId| main.as_ref().is_none_or(|main| main == frame);
    let mut requested = listen::<EventFrameRequestedNavigation>(page).await?;
    let mut started = listen::<EventFrameStartedLoading>(page).await?;
    let mut within_document = listen::<EventNavigatedWithinDocument>(page).await?;
    let mut loaded = listen::<EventLoadEventFired>(page).await?;
    let mut stopped = listen::<EventFrameStoppedLoading>(page).await?;
    let value = action.await?;
    // A barrier: the page runs what the action queued (form submissions are
    // queued tasks) before this resolves; a navigation that replaces the
    // document makes it fail.
    let barrier = evaluate(page, "new Promise(r => setTimeout(r, 0))").await;
    if barrier.is_ok() {
        let announced = tokio::time::timeout(NAVIGATION_GRACE, async {
            loop {
                tokio::select! {
                    Some(event) = requested.next() => {
                        if is_main(&event.frame_id)
                            && event.disposition == ClientNavigationDisposition::CurrentTab
                        {
                            return Some(Navigation::Document);
                        }
                    }
                    Some(event) = started.next() => {
                        if is_main(&event.frame_id) {
                            return Some(Navigation::Document);
                        }
                    }
                    Some(event) = within_document.next() => {
                        if is_main(&event.frame_id) {
                            return Some(Navigation::SameDocument);
                        }
                    }
                    else => return None,
                }
            }
        })
        .await;
        if !matches!(announced, Ok(Some(Navigation::Document))) {
            return Ok(value);
        }
    }
    // A requested navigation may still turn out to stay in the document
    // (`#fragment` links are requested first).
    let _ = tokio::time::timeout(limit, async {
        loop {
            tokio::select! {
                Some(_) = loaded.next() => return,
                Some(event) = stopped.next() => {
                    if is_main(&event.frame_id) {
                        return;
                    }
                }
                Some(event) = within_document.next() => {
                    if is_main(&event.frame_id) {
                        return;
                    }
                }
                else => return,
            }
        }
    })
    .await;
    Ok(value)
}

async fn listen<E>(page: &Page) -> Result<EventStream<E>, ComputerError>
where
    E: IntoEventKind + Unpin,
{
    page.event_listener::<E>().await.map_err(browser_error)
}

#[derive(Deserialize)]
struct ClickPoint {
    x: f64,
    y: f64,
}

/// Clicks the element with real mouse events at its centre, after scrolling
/// it into view and checking nothing covers it.
pub async fn click(page: &Page, element: &str) -> Result<(), ComputerError> {
    let point: ClickPoint = call_page(page, "clickPoint", &[Value::from(element)]).await?;
    page.click(Point {
        x: point.x,
        y: point.y,
    })
    .await
    .map_err(browser_error)?;
    Ok(())
}

#[derive(Deserialize)]
struct Focused {
    form: bool,
}

/// Replaces the text of a field with `text` (as typed input: the page sees
/// input events); `submit` presses Enter afterwards. Returns whether the
/// field belongs to a form.
pub async fn type_text(
    page: &Page,
    element: &str,
    text: &str,
    submit: bool,
) -> Result<bool, ComputerError> {
    let focused: Focused = call_page(page, "focusForTyping", &[Value::from(element)]).await?;
    if !text.is_empty() {
        page.execute(InsertTextParams::new(text))
            .await
            .map_err(browser_error)?;
    }
    if submit {
        press_enter(page).await?;
    }
    Ok(focused.form)
}

async fn press_enter(page: &Page) -> Result<(), ComputerError> {
    for (kind, text) in [
        (DispatchKeyEventType::KeyDown, Some("\r")),
        (DispatchKeyEventType::KeyUp, None),
    ] {
        let mut event = DispatchKeyEventParams::builder()
            .r#type(kind)
            .key("Enter")
            .code("Enter")
            .windows_virtual_key_code(13)
            .native_virtual_key_code(13);
        if let Some(text) = text {
            event = event.text(text).unmodified_text(text);
        }
        page.execute(event.build().map_err(browser_error)?)
            .await
            .map_err(browser_error)?;
    }
    Ok(())
}

#[derive(Deserialize)]
struct Selected {
    selected: Vec<String>,
}

/// Chooses options of a `<select>` by value or label; returns the labels
/// chosen.
pub async fn select(
    page: &Page,
    element: &str,
    values: &[String],
) -> Result<Vec<String>, ComputerError> {
    let values = Value::from(values.to_vec());
    let selected: Selected =
        call_page(page, "selectOptions", &[Value::from(element), values]).await?;
    Ok(selected.selected)
}

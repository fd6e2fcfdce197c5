//! Navigations, bounded: `browser_navigate` and the navigations actions set
//! off finish within their time limit and say where the tab ended up: the
//! HTTP status of the document it landed on, or that it is still loading,
//! or that a navigation was stopped at its limit.

use std::time::{Duration, Instant};

use chromiumoxide::Page;
use chromiumoxide::cdp::IntoEventKind;
use chromiumoxide::cdp::browser_protocol::network::{EventResponseReceived, ResourceType};
use chromiumoxide::cdp::browser_protocol::page::{
    ClientNavigationDisposition, EventFrameRequestedNavigation, EventFrameStartedLoading,
    EventFrameStoppedLoading, EventLoadEventFired, EventNavigatedWithinDocument, FrameId,
};
use chromiumoxide::listeners::EventStream;
use futures::StreamExt;
use serde_json::{Value, json};

use super::browser_error;
use super::document::evaluate;
use super::link::Link;
use crate::ComputerError;

/// How long a navigation the action started may take to announce itself
/// after the page has run the tasks the action queued.
const NAVIGATION_GRACE: Duration = Duration::from_millis(25);

/// Where an action or a navigation left the tab.
#[derive(Debug, Clone, Default)]
pub(crate) struct Landing {
    /// A new document was on its way.
    pub(crate) navigated: bool,
    /// The URL changed within the document (`#fragment`, history API).
    pub(crate) same_document: bool,
    /// The new document finished loading in time.
    pub(crate) loaded: bool,
    /// The main document's response: status, status text, URL.
    pub(crate) response: Option<(i64, String, String)>,
    /// The time limit, when it was reached.
    pub(crate) timed_out: Option<Duration>,
    /// The address the page asked to go to, when the browser said.
    pub(crate) requested: Option<String>,
}

impl Landing {
    /// One sentence on where the tab is now, or empty when the action did
    /// not navigate.
    pub(crate) fn describe(&self) -> String {
        let status = |(code, text, url): &(i64, String, String)| {
            let text = if text.is_empty() {
                String::new()
            } else {
                format!(" {text}")
            };
            format!("{url} answered HTTP {code}{text}")
        };
        match (self.navigated, &self.response, self.timed_out) {
            (false, _, _) if self.same_document => {
                "The page's address changed (same document).".into()
            }
            (false, _, _) => String::new(),
            (true, Some(response), None) => format!("{}.", status(response)),
            (true, None, None) => "It opened a new page.".into(),
            (true, Some(response), Some(limit)) => format!(
                "It opened a new page: {}, but the page was still loading after {} s; take a \
browser_snapshot in a moment.",
                status(response),
                limit.as_secs_f64()
            ),
            (true, None, Some(limit)) => format!(
                "It started opening {}, which had not answered after {} s; the tab shows the old \
page until it does: take a browser_snapshot in a moment.",
                self.requested.as_deref().unwrap_or("a new page"),
                limit.as_secs_f64()
            ),
        }
    }

    /// Whether the landing page answered with an HTTP error.
    pub(crate) fn http_error(&self) -> bool {
        self.response
            .as_ref()
            .is_some_and(|(code, ..)| *code >= 400)
    }
}

/// The events a navigation is followed with.
struct Watch {
    main: Option<FrameId>,
    requested: EventStream<EventFrameRequestedNavigation>,
    started: EventStream<EventFrameStartedLoading>,
    within_document: EventStream<EventNavigatedWithinDocument>,
    loaded: EventStream<EventLoadEventFired>,
    stopped: EventStream<EventFrameStoppedLoading>,
    responses: EventStream<EventResponseReceived>,
    /// The address of the last navigation the main frame asked for.
    requested_url: Option<String>,
}

impl Watch {
    async fn new(page: &Page) -> Result<Self, ComputerError> {
        let requested = listen(page).await?;
        let started = listen(page).await?;
        let within_document = listen(page).await?;
        let loaded = listen(page).await?;
        let stopped = listen(page).await?;
        let responses = listen(page).await?;
        // Asked last, on the same queue as the listeners: once it answers,
        // every listener is in place, so no event of what follows (the
        // document's response first of all) can go unheard.
        let main = page.mainframe().await.ok().flatten();
        Ok(Self {
            main,
            requested,
            started,
            within_document,
            loaded,
            stopped,
            responses,
            requested_url: None,
        })
    }

    /// The next navigation of the main frame the browser announces: a new
    /// document (`false`) or the same one (`true`).
    async fn announced(&mut self) -> Option<bool> {
        loop {
            tokio::select! {
                Some(event) = self.requested.next() => {
                    if self.is_main(Some(&event.frame_id))
                        && event.disposition == ClientNavigationDisposition::CurrentTab
                    {
                        self.requested_url = Some(event.url.clone());
                        return Some(false);
                    }
                }
                Some(event) = self.started.next() => {
                    if self.is_main(Some(&event.frame_id)) {
                        return Some(false);
                    }
                }
                Some(event) = self.within_document.next() => {
                    if self.is_main(Some(&event.frame_id)) {
                        return Some(true);
                    }
                }
                else => return None,
            }
        }
    }

    fn is_main(&self, frame: Option<&FrameId>) -> bool {
        match (&self.main, frame) {
            (Some(main), Some(frame)) => main == frame,
            _ => true,
        }
    }

    /// Waits until the new document has loaded (or the load stopped, or
    /// the navigation turned out to stay in the document), noting the main
    /// document's response; gives up at `deadline`.
    async fn until_loaded(&mut self, landing: &mut Landing, deadline: Instant) {
        let wait = deadline.saturating_duration_since(Instant::now());
        let done = tokio::time::timeout(wait, async {
            loop {
                tokio::select! {
                    Some(event) = self.responses.next() => {
                        self.note_response(&event, landing);
                    }
                    Some(event) = self.requested.next() => {
                        if self.is_main(Some(&event.frame_id)) && landing.requested.is_none() {
                            landing.requested = Some(event.url.clone());
                        }
                    }
                    Some(_) = self.loaded.next() => return,
                    Some(event) = self.stopped.next() => {
                        if self.is_main(Some(&event.frame_id)) {
                            return;
                        }
                    }
                    Some(event) = self.within_document.next() => {
                        if self.is_main(Some(&event.frame_id)) {
                            landing.same_document = true;
                            if landing.response.is_none() {
                                landing.navigated = false;
                            }
                            return;
                        }
                    }
                    else => return,
                }
            }
        })
        .await;
        if done.is_ok() {
            landing.loaded = landing.navigated;
        }
        // A response that arrived with the load event.
        while let Some(Some(event)) = self.responses.next().now_or_never() {
            self.note_response(&event, landing);
        }
        // The browser sends the document's response before its load event,
        // but the two come on separate streams: one not read yet is waited
        // for a moment.
        if landing.loaded && landing.response.is_none() {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(RESPONSE_AFTER_LOAD);
            let _ = tokio::time::timeout(wait, async {
                while let Some(event) = self.responses.next().await {
                    if self.note_response(&event, landing) {
                        return;
                    }
                }
            })
            .await;
        }
    }

    /// Notes `event` when it is the main document's response; whether it
    /// was.
    fn note_response(&self, event: &EventResponseReceived, landing: &mut Landing) -> bool {
        if event.r#type == ResourceType::Document && self.is_main(event.frame_id.as_ref()) {
            let response = &event.response;
            landing.response = Some((
                response.status,
                response.status_text.clone(),
                response.url.clone(),
            ));
            return true;
        }
        false
    }
}

use futures::FutureExt as _;

/// How long a loaded page's document response is waited for when its load
/// event came first.
const RESPONSE_AFTER_LOAD: Duration = Duration::from_millis(500);

async fn listen<E>(page: &Page) -> Result<EventStream<E>, ComputerError>
where
    E: IntoEventKind + Unpin,
{
    page.event_listener::<E>().await.map_err(browser_error)
}

/// Runs `action`; if it starts a navigation of the main frame (a link, a
/// form submission, a handler changing `location`), waits up to `limit`
/// for the new page to finish loading, and says where the tab landed. A
/// page still loading at the limit is left loading (the action happened;
/// the outcome says so). Same-document navigations and links that open a
/// new tab or a download end the wait at once.
pub(crate) async fn settle<T>(
    page: &Page,
    limit: Duration,
    action: impl Future<Output = Result<T, ComputerError>>,
) -> Result<(T, Landing), ComputerError> {
    let mut watch = Watch::new(page).await?;
    let value = action.await?;
    let deadline = Instant::now() + limit;
    let mut landing = Landing::default();
    // A barrier: the page runs what the action queued (form submissions are
    // queued tasks) before this resolves; a navigation that replaces the
    // document makes it fail, and one waiting for its answer holds it back
    // (Chrome keeps commands for the document until the new one arrives),
    // so the navigation's own announcement ends the wait too.
    let barrier = evaluate(page, "new Promise(r => setTimeout(r, 0))");
    let first = tokio::time::timeout(limit, async {
        tokio::select! {
            result = barrier => if result.is_ok() { None } else { Some(false) },
            announced = watch.announced() => announced.or(Some(false)),
        }
    })
    .await;
    let announced = match first {
        Ok(Some(same)) => Some(same),
        Err(_) => Some(false),
        // The barrier came back first: anything the action set off has
        // been asked for by now; give the browser a moment to say so.
        Ok(None) => tokio::time::timeout(NAVIGATION_GRACE, watch.announced())
            .await
            .ok()
            .flatten(),
    };
    match announced {
        Some(false) => {}
        Some(true) => {
            landing.same_document = true;
            return Ok((value, landing));
        }
        None => return Ok((value, landing)),
    }
    landing.navigated = true;
    while let Some(Some(event)) = watch.requested.next().now_or_never() {
        if watch.is_main(Some(&event.frame_id)) {
            watch.requested_url = Some(event.url.clone());
        }
    }
    landing.requested = watch.requested_url.clone();
    watch.until_loaded(&mut landing, deadline).await;
    if landing.navigated && !landing.loaded {
        landing.timed_out = Some(limit);
    }
    Ok((value, landing))
}

/// Opens `url` in `page`, waiting up to `limit` for it to load. At the
/// limit the navigation is stopped, so it cannot replace a later page, and
/// the outcome says where the tab stayed; an HTTP error page is a landing
/// like any other (the status is in the outcome). Sent over kinet's own
/// connection (`link`), so a navigation never waits behind an earlier one.
pub(crate) async fn navigate(
    page: &Page,
    link: &Link,
    url: &str,
    limit: Duration,
) -> Result<Landing, ComputerError> {
    let deadline = Instant::now() + limit;
    let mut watch = Watch::new(page).await?;
    let mut landing = Landing {
        navigated: true,
        ..Landing::default()
    };
    let session = link.session(page.target_id().inner()).await?;
    let sent = link.call("Page.navigate", Some(&session), json!({ "url": url }));
    match tokio::time::timeout(limit, sent).await {
        Ok(Ok(reply)) => {
            if let Some(error) = reply
                .get("errorText")
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty())
            {
                return Err(ComputerError::Browser(format!(
                    "could not open {url}: {error}"
                )));
            }
            if reply.get("loaderId").is_none() {
                // Same-document navigation (`#fragment`): nothing to load.
                return Ok(Landing {
                    same_document: true,
                    ..Landing::default()
                });
            }
            watch.until_loaded(&mut landing, deadline).await;
        }
        Ok(Err(error)) => {
            link.forget(&session).await;
            return Err(ComputerError::Browser(format!(
                "could not open {url}: {error}"
            )));
        }
        Err(_) => {}
    }
    if !landing.loaded {
        // Stopped, so a late answer cannot take the tab from the next
        // navigation.
        let stop = link.call("Page.stopLoading", Some(&session), json!({}));
        let _ = tokio::time::timeout(Duration::from_secs(2), stop).await;
        landing.timed_out = Some(limit);
    }
    Ok(landing)
}

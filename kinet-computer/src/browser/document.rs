//! Where the page script runs: a tab's own document, or a frame of another
//! site reached through kinet's own DevTools connection ([`Link`]), and
//! the commands such a document takes (evaluating, input).

use std::sync::Arc;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::dom::DescribeNodeParams;
use chromiumoxide::cdp::browser_protocol::input::{DispatchKeyEventParams, InsertTextParams};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use serde_json::{Value, json};

use super::browser_error;
use super::link::Link;
use crate::ComputerError;

/// Where a document's commands go.
#[derive(Clone)]
pub(crate) enum Target {
    /// A tab, through the driving library.
    Page(Page),
    /// A frame of another site, through kinet's own connection.
    Frame { link: Arc<Link>, session: String },
}

/// A document the page script runs in: the tab's own (`key` empty) or a
/// frame of another site.
#[derive(Clone)]
pub(crate) struct Doc {
    /// Where the page script is evaluated.
    pub(crate) target: Target,
    /// The tab, which takes mouse input.
    pub(crate) top: Page,
    /// The frame key refs in this document start with.
    pub(crate) key: String,
    /// Where this document's viewport starts in the tab's viewport.
    pub(crate) origin: (f64, f64),
}

impl Doc {
    /// The tab's own document.
    pub(crate) fn top(page: Page) -> Self {
        Self {
            top: page.clone(),
            target: Target::Page(page),
            key: String::new(),
            origin: (0.0, 0.0),
        }
    }

    /// Evaluates `expression` (promises awaited) and returns its JSON value.
    pub(crate) async fn evaluate(&self, expression: &str) -> Result<Value, ComputerError> {
        match &self.target {
            Target::Page(page) => evaluate(page, expression).await,
            Target::Frame { link, session } => {
                let params = json!({
                    "expression": expression,
                    "awaitPromise": true,
                    "returnByValue": true,
                    "userGesture": true,
                });
                let reply = match link.call("Runtime.evaluate", Some(session), params).await {
                    Ok(reply) => reply,
                    Err(error) => {
                        // A frame gone or navigated: attached again next time.
                        link.forget(session).await;
                        return Err(error);
                    }
                };
                if let Some(exception) = reply.get("exceptionDetails") {
                    let text = exception
                        .pointer("/exception/description")
                        .or_else(|| exception.get("text"))
                        .and_then(Value::as_str)
                        .unwrap_or("an exception");
                    return Err(ComputerError::Script(text.to_owned()));
                }
                Ok(reply
                    .pointer("/result/value")
                    .cloned()
                    .unwrap_or(Value::Null))
            }
        }
    }

    /// Sends an input command (`Input.insertText`, `Input.dispatchKeyEvent`)
    /// to this document's target.
    pub(crate) async fn input(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<(), ComputerError> {
        match &self.target {
            Target::Page(page) => page_input(page, method, params).await,
            Target::Frame { link, session } => {
                link.call(method, Some(session), params).await.map(drop)
            }
        }
    }

    /// The frame id of frame element `key` of this document.
    pub(crate) async fn frame_id_of(&self, key: &str) -> Result<String, ComputerError> {
        let expression = format!(
            "window.__kinet && window.__kinet.frameElement({})",
            Value::from(key)
        );
        let gone = || ComputerError::Browser(format!("frame {key} is gone"));
        let no_document = || ComputerError::Browser(format!("frame {key} has no document yet"));
        match &self.target {
            Target::Page(page) => {
                let params = EvaluateParams::builder()
                    .expression(expression)
                    .return_by_value(false)
                    .build()
                    .map_err(browser_error)?;
                let object = page
                    .execute(params)
                    .await
                    .map_err(browser_error)?
                    .result
                    .result
                    .object_id
                    .ok_or_else(gone)?;
                let node = page
                    .execute(DescribeNodeParams::builder().object_id(object).build())
                    .await
                    .map_err(browser_error)?
                    .result
                    .node;
                Ok(node.frame_id.ok_or_else(no_document)?.inner().clone())
            }
            Target::Frame { link, session } => {
                let reply = link
                    .call(
                        "Runtime.evaluate",
                        Some(session),
                        json!({ "expression": expression }),
                    )
                    .await?;
                let object = reply
                    .pointer("/result/objectId")
                    .cloned()
                    .ok_or_else(gone)?;
                let node = link
                    .call(
                        "DOM.describeNode",
                        Some(session),
                        json!({ "objectId": object }),
                    )
                    .await?;
                node.pointer("/node/frameId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(no_document)
            }
        }
    }
}

/// Evaluates `expression` (awaiting promises) in the page's main world and
/// returns its JSON value; exceptions become [`ComputerError::Script`].
///
/// Sent as a plain `Runtime.evaluate` with no context id, so it never
/// waits for a navigation in progress to create one: the current document
/// answers.
pub(crate) async fn evaluate(page: &Page, expression: &str) -> Result<Value, ComputerError> {
    let params = EvaluateParams::builder()
        .expression(expression)
        .await_promise(true)
        .return_by_value(true)
        .user_gesture(true)
        .build()
        .map_err(browser_error)?;
    let reply = page.execute(params).await.map_err(browser_error)?.result;
    if let Some(exception) = reply.exception_details {
        let text = exception
            .exception
            .as_ref()
            .and_then(|e| e.description.clone())
            .unwrap_or(exception.text);
        return Err(ComputerError::Script(text));
    }
    Ok(reply.result.value.unwrap_or(Value::Null))
}

/// Sends an input command given as JSON to a tab.
async fn page_input(page: &Page, method: &str, params: Value) -> Result<(), ComputerError> {
    match method {
        "Input.insertText" => {
            let params: InsertTextParams = serde_json::from_value(params).map_err(browser_error)?;
            page.execute(params).await.map_err(browser_error)?;
        }
        _ => {
            let params: DispatchKeyEventParams =
                serde_json::from_value(params).map_err(browser_error)?;
            page.execute(params).await.map_err(browser_error)?;
        }
    }
    Ok(())
}

//! JavaScript dialogs (`alert`, `confirm`, `prompt`, `beforeunload`): a
//! dialog blocks its page until answered, so each is answered as soon as it
//! opens and reported to the model with the next tool result.

use std::sync::{Arc, Mutex};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    DialogType, EventJavascriptDialogOpening, HandleJavaScriptDialogParams,
};
use futures::StreamExt;
use tokio::task::JoinHandle;

/// Answers dialogs and keeps what they said until the tools collect it.
#[derive(Debug, Clone)]
pub(crate) struct Dialogs {
    accept: bool,
    notes: Arc<Mutex<Vec<String>>>,
}

impl Dialogs {
    /// `accept`: confirm and prompt dialogs are accepted (prompts with their
    /// default text) rather than dismissed; alerts and leave-page prompts
    /// are always accepted.
    pub(crate) fn new(accept: bool) -> Self {
        Self {
            accept,
            notes: Arc::default(),
        }
    }

    /// Starts answering the dialogs of `page`; the task ends with the page.
    pub(crate) fn watch(&self, page: &Page) -> JoinHandle<()> {
        let page = page.clone();
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(mut opened) = page.event_listener::<EventJavascriptDialogOpening>().await else {
                return;
            };
            while let Some(dialog) = opened.next().await {
                this.answer(&page, &dialog).await;
            }
        })
    }

    async fn answer(&self, page: &Page, dialog: &EventJavascriptDialogOpening) {
        let (kind, accept) = match dialog.r#type {
            DialogType::Alert => ("alert", true),
            DialogType::Beforeunload => ("leave-page", true),
            DialogType::Confirm => ("confirm", self.accept),
            DialogType::Prompt => ("prompt", self.accept),
        };
        let mut answer = HandleJavaScriptDialogParams::new(accept);
        if accept && dialog.r#type == DialogType::Prompt {
            answer.prompt_text = Some(dialog.default_prompt.clone().unwrap_or_default());
        }
        let outcome = match page.execute(answer).await {
            Ok(_) if accept => "accepted",
            Ok(_) => "dismissed",
            Err(_) => "could not answer",
        };
        let note = format!(
            "The page showed a {kind} dialog {:?}; kinet {outcome} it.",
            dialog.message
        );
        tracing::debug!(%note, "browser dialog");
        if let Ok(mut notes) = self.notes.lock() {
            notes.push(note);
        }
    }

    /// The notes since the last call.
    pub(crate) fn take(&self) -> Vec<String> {
        self.notes
            .lock()
            .map(|mut notes| std::mem::take(&mut *notes))
            .unwrap_or_default()
    }
}

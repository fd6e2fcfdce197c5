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

    /// Answers the dialogs of `page` from now on (the listener is in place
    /// when this returns); the task ends with the page. A dialog already
    /// open (on a tab the page opened itself) is answered too.
    pub(crate) async fn watch(&self, page: &Page) -> JoinHandle<()> {
        let page = page.clone();
        let this = self.clone();
        let opened = page.event_listener::<EventJavascriptDialogOpening>().await;
        tokio::spawn(async move {
            let Ok(mut opened) = opened else {
                return;
            };
            // Fails with "no dialog is showing" in the usual case.
            if page
                .execute(HandleJavaScriptDialogParams::new(this.accept))
                .await
                .is_ok()
            {
                this.note("A dialog was already open on a tab; kinet answered it.".into());
            }
            while let Some(dialog) = opened.next().await {
                this.answer(&page, &dialog).await;
            }
        })
    }

    /// Adds a note for the next tool result.
    pub(crate) fn note(&self, note: String) {
        tracing::debug!(%note, "browser dialog");
        if let Ok(mut notes) = self.notes.lock() {
            notes.push(note);
        }
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
        // Noted first: the action that opened the dialog may return as
        // soon as it is answered.
        let outcome = if accept { "accepted" } else { "dismissed" };
        self.note(format!(
            "The page showed a {kind} dialog {:?}; kinet {outcome} it.",
            dialog.message
        ));
        if let Err(error) = page.execute(answer).await {
            self.note(format!("Answering that dialog failed: {error}."));
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

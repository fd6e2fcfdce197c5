//! Pruning and summarising the older part of a conversation.

use futures::StreamExt;

use super::{ContextPolicy, Sizer, message_chars};
use crate::backend::Provider;
use crate::data::model::{ChatRequest, GenerationParams, StreamEvent};
use crate::message::{ContentPart, Message};

/// What one compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compaction {
    /// Estimated prompt tokens before.
    pub before_tokens: u64,
    /// Estimated prompt tokens after.
    pub after_tokens: u64,
    /// Tool results replaced by a stub.
    pub pruned_results: usize,
    /// Messages replaced by the summary.
    pub summarized_messages: usize,
}

/// The request a compaction works for.
pub(crate) struct Request<'a> {
    /// Sizes of this request's messages.
    pub(crate) sizer: &'a Sizer,
    /// The raw estimate of the messages as they are (the caller has it).
    pub(crate) raw: u64,
    pub(crate) window: u64,
    /// Compact even under the threshold (after a context-length error).
    pub(crate) force: bool,
}

/// The model that writes summaries when the policy names no summariser.
pub(crate) struct Model<'a> {
    pub(crate) provider: &'a dyn Provider,
    pub(crate) name: &'a str,
    pub(crate) params: &'a GenerationParams,
}

/// Where the kept tail starts: the `keep`-th user message from the end
/// (the cut never splits a tool call from its result).
fn tail_start(messages: &[Message], keep: usize) -> usize {
    let users: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::User { .. }))
        .map(|(i, _)| i)
        .collect();
    match users.len() {
        0 => messages.len(),
        n => users[n.saturating_sub(keep)],
    }
}

fn text_of(content: &[ContentPart]) -> String {
    content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.as_str()),
            ContentPart::Image(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replaces large tool results in `messages[range]` by stubs; returns how
/// many.
fn prune(messages: &mut [Message], over_chars: usize) -> usize {
    let mut pruned = 0;
    for message in messages.iter_mut() {
        if let Message::Tool { name, content, .. } = message {
            let text = text_of(content);
            let chars = text.len();
            if chars > over_chars && !text.starts_with("[pruned") {
                *content = vec![ContentPart::Text {
                    text: format!(
                        "[pruned: {chars} characters of `{name}` output were removed to save context; call `{name}` again if you need them]"
                    ),
                }];
                pruned += 1;
            }
        }
    }
    pruned
}

/// Compacts `messages` when the request would pass the threshold (or when
/// forced): prune, then summarise. `None` when nothing needed doing.
pub(crate) async fn compact(
    messages: &mut Vec<Message>,
    request: Request<'_>,
    policy: &ContextPolicy,
    model: Model<'_>,
) -> Result<Option<Compaction>, String> {
    let size = |messages: &[Message]| request.sizer.tokens(messages);
    // Room for the answer: servers refuse prompt + max_tokens > window.
    let room = u64::from(model.params.max_tokens.unwrap_or(0)).min(request.window / 2);
    let usable = request.window.saturating_sub(room);
    let limit = (usable as f64 * policy.threshold) as u64;
    let before = request.sizer.calibrated(request.raw);
    if before <= limit && !request.force {
        return Ok(None);
    }
    // Aim well under the threshold so the next turns do not compact again
    // at once.
    let target = (usable as f64 * policy.threshold * 0.6) as u64;
    let mut done = Compaction {
        before_tokens: before,
        ..Compaction::default()
    };
    let mut keep = policy.keep_user_turns;
    let mut start = tail_start(messages, keep);
    done.pruned_results += prune(&mut messages[..start], policy.prune_over_chars);
    if size(messages) > target {
        // The kept turns may be the problem: prune them too, but never the
        // results the model has not read yet (after its last message).
        let unread = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .unwrap_or(messages.len());
        if start < unread {
            done.pruned_results += prune(&mut messages[start..unread], policy.prune_over_chars);
        }
    }
    // Summarise older turns when pruning was not enough; keep fewer turns
    // whole if the kept tail alone is too large.
    while size(messages) > target && start > 0 {
        let head: Vec<Message> = messages[..start].to_vec();
        let summary = match summarize(&head, &request, policy, &model).await {
            Ok(summary) => summary,
            // Pruning alone may have made it fit: keep what it did.
            Err(error) if done.pruned_results > 0 => {
                tracing::warn!(%error, "the summary failed; keeping the pruning only");
                break;
            }
            Err(error) => return Err(error),
        };
        let mut tail: Vec<Message> = messages.drain(start..).collect();
        // The summary opens the first kept user message, so roles still
        // alternate (strict chat templates refuse two user turns in a row).
        match tail.first_mut() {
            Some(Message::User { content }) => {
                let mut merged = vec![ContentPart::Text {
                    text: summary_text(&head, &summary, request.window),
                }];
                merged.append(content);
                *content = merged;
            }
            _ => tail.insert(
                0,
                Message::user(summary_text(&head, &summary, request.window)),
            ),
        }
        done.summarized_messages += head.len();
        *messages = tail;
        if size(messages) <= target || keep <= 1 {
            break;
        }
        keep -= 1;
        start = tail_start(messages, keep);
        if start == 0 {
            break;
        }
    }
    if done.pruned_results == 0 && done.summarized_messages == 0 {
        // Nothing older than the kept turns: a retry would fail the same way.
        return Ok(None);
    }
    done.after_tokens = size(messages);
    Ok(Some(done))
}

/// How the text that replaces summarised turns opens, and how it ends (the
/// user's message goes on after it).
pub(crate) const SUMMARY_OPENS: &str = "[Summary of the earlier conversation";
pub(crate) const SUMMARY_ENDS: &str = "[End of the summary]";

/// The text that replaces the summarised turns: the summary, then the
/// user's own words verbatim as far as they fit in a tenth of the window.
fn summary_text(head: &[Message], summary: &str, window: u64) -> String {
    let mut text = format!(
        "{SUMMARY_OPENS}, written to save context]\n{}",
        summary.trim()
    );
    let budget = (window as usize * 4) / 10;
    let users: Vec<String> = head
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => {
                let text = text_of(content);
                // A message that opens with an earlier summary: its own
                // words follow the summary's end.
                match text.split_once(SUMMARY_ENDS) {
                    Some((_, own)) => Some(own.trim().to_owned()).filter(|t| !t.is_empty()),
                    None => Some(text),
                }
            }
            _ => None,
        })
        .collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut used = 0;
    for said in users.iter().rev() {
        if used + said.len() > budget {
            break;
        }
        used += said.len();
        kept.push(said);
    }
    if !kept.is_empty() {
        kept.reverse();
        text.push_str("\n\nThe user's own words so far (the latest ones, verbatim):");
        for said in kept {
            text.push_str("\n- ");
            text.push_str(said);
        }
    }
    text.push('\n');
    text.push_str(SUMMARY_ENDS);
    text.push_str("\n\n");
    text
}

const INSTRUCTIONS: &str = "You summarise the earlier part of a conversation between a user and an AI agent that uses tools, so the agent can go on without it. Write plain text with these headings: Goals; Decisions; Files touched; Open todos; Key facts. Keep names, paths, numbers and the user's requests exact. Be brief.";

/// The summary of `head`, from the policy's summariser or the model.
async fn summarize(
    head: &[Message],
    request: &Request<'_>,
    policy: &ContextPolicy,
    model: &Model<'_>,
) -> Result<String, String> {
    if let Some(summarizer) = &policy.summarizer {
        return summarizer.summarize(head).await;
    }
    // A transcript that fits half the window: each message cut short, the
    // oldest dropped first if needed.
    let budget = (request.window as usize * 4) / 2;
    let mut lines: Vec<String> = head
        .iter()
        .map(|message| {
            let (who, text) = match message {
                Message::System { text } => ("system", text.clone()),
                Message::User { content } => ("user", text_of(content)),
                Message::Assistant {
                    content,
                    tool_calls,
                    ..
                } => {
                    let calls: Vec<String> = tool_calls
                        .iter()
                        .map(|c| format!("{}({})", c.name, c.arguments))
                        .collect();
                    (
                        "assistant",
                        format!("{} {}", text_of(content), calls.join(" ")),
                    )
                }
                Message::Tool { name, content, .. } => {
                    ("tool", format!("{name}: {}", text_of(content)))
                }
            };
            let cap = if who == "user" { 2000 } else { 400 };
            let text: String = text.chars().take(cap).collect();
            format!("{who}: {text}")
        })
        .collect();
    while lines.iter().map(String::len).sum::<usize>() > budget && lines.len() > 1 {
        lines.remove(0);
    }
    let transcript = lines.join("\n");
    let messages = [Message::user(format!(
        "Summarise this conversation:\n\n{transcript}"
    ))];
    let params = GenerationParams {
        max_tokens: Some(((request.window / 8).clamp(128, 2048)) as u32),
        output: None,
        ..model.params.clone()
    };
    let chat = ChatRequest {
        model: std::borrow::Cow::Borrowed(model.name),
        system: std::borrow::Cow::Borrowed(INSTRUCTIONS),
        messages: std::borrow::Cow::Borrowed(&messages),
        tools: std::borrow::Cow::Owned(Vec::new()),
        params: std::borrow::Cow::Owned(params),
    };
    let mut stream = model
        .provider
        .stream(chat)
        .await
        .map_err(|e| format!("the summary failed: {e}"))?;
    let mut summary = String::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::TextDelta(text) =
            event.map_err(|e| format!("the summary failed: {e}"))?
        {
            summary.push_str(&text);
        }
    }
    if summary.trim().is_empty() {
        // A summary is still better than failing: keep the head's last
        // assistant texts.
        summary = head
            .iter()
            .rev()
            .filter_map(|m| match m {
                Message::Assistant { content, .. } => Some(text_of(content)),
                _ => None,
            })
            .take(3)
            .collect::<Vec<_>>()
            .join("\n");
    }
    let _ = message_chars;
    Ok(summary)
}

//! Recognising "the prompt does not fit the model's context" in the error
//! bodies of the servers people run, and reading the window size and the
//! requested size out of them where they say.
//!
//! Table-driven: each rule names the server it comes from, so a new server
//! is one line.

use crate::data::model::ProviderError;

/// What marks an overflow in an error body.
enum Mark {
    /// The error's `code` (a string, or a number written as one).
    Code(&'static str),
    /// The error's `type`.
    Kind(&'static str),
    /// A phrase in the message (compared in lower case).
    Phrase(&'static str),
}

/// Each rule, with the server whose documented errors it matches.
const RULES: &[(&str, Mark)] = &[
    ("OpenAI", Mark::Code("context_length_exceeded")),
    ("OpenAI", Mark::Phrase("maximum context length")),
    (
        "OpenAI Responses",
        Mark::Phrase("exceeds the context window"),
    ),
    ("Anthropic", Mark::Phrase("prompt is too long")),
    ("llama.cpp", Mark::Kind("exceed_context_size_error")),
    (
        "llama.cpp",
        Mark::Phrase("exceeds the available context size"),
    ),
    ("vLLM, DeepSeek", Mark::Phrase("maximum context length is")),
    ("Ollama", Mark::Phrase("exceeds the context length")),
    ("Ollama", Mark::Phrase("exceeds maximum context length")),
    ("GLM", Mark::Code("1261")),
    ("GLM", Mark::Phrase("prompt exceeds max length")),
    ("generic", Mark::Phrase("context length")),
    ("generic", Mark::Phrase("context_length")),
    ("generic", Mark::Phrase("context window")),
];

/// The parts of an error body the rules look at.
struct Parts {
    message: String,
    code: String,
    kind: String,
    limit_field: Option<u64>,
    requested_field: Option<u64>,
}

fn parts(body: &str) -> Parts {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let root = parsed.as_ref();
    let error = root.and_then(|v| v.get("error"));
    let field = |name: &str| {
        error
            .and_then(|e| e.get(name))
            .or_else(|| root.and_then(|v| v.get(name)))
    };
    let text = |value: Option<&serde_json::Value>| match value {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let message = match error {
        // Ollama: `{"error": "the input length exceeds the context length"}`.
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => {
            let found = text(field("message"));
            if found.is_empty() && parsed.is_none() {
                body.trim().chars().take(2000).collect()
            } else {
                found
            }
        }
    };
    Parts {
        message,
        code: text(field("code")),
        kind: text(field("type")),
        limit_field: field("n_ctx").and_then(serde_json::Value::as_u64),
        requested_field: field("n_prompt_tokens").and_then(serde_json::Value::as_u64),
    }
}

/// The number right after `phrase` in `text` (skipping spaces and `(`).
fn number_after(text: &str, phrase: &str) -> Option<u64> {
    let at = text.find(phrase)? + phrase.len();
    let rest = text[at..].trim_start_matches([' ', '(', ':']);
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The window size a message states.
fn limit_in(lower: &str) -> Option<u64> {
    number_after(lower, "maximum context length is")
        .or_else(|| number_after(lower, "available context size"))
        .or_else(|| number_after(lower, "context window of"))
        .or_else(|| {
            // Anthropic: "prompt is too long: 208310 tokens > 200000 maximum".
            let at = lower.find(" > ")?;
            number_after(&lower[at..], " > ").filter(|_| lower[at..].contains("maximum"))
        })
}

/// The prompt size a message states.
fn requested_in(lower: &str) -> Option<u64> {
    number_after(lower, "you requested")
        .or_else(|| number_after(lower, "resulted in"))
        .or_else(|| number_after(lower, "prompt is too long"))
        .or_else(|| number_after(lower, "request"))
}

/// The overflow error for `body`, when it is one.
pub(crate) fn overflow(body: &str) -> Option<ProviderError> {
    let parts = parts(body);
    overflow_of(&parts)
}

/// The overflow error for a message and code reported inside a stream.
pub(crate) fn overflow_in_stream(message: &str, code: &str) -> Option<ProviderError> {
    overflow_of(&Parts {
        message: message.to_owned(),
        code: code.to_owned(),
        kind: code.to_owned(),
        limit_field: None,
        requested_field: None,
    })
}

fn overflow_of(parts: &Parts) -> Option<ProviderError> {
    let lower = parts.message.to_lowercase();
    let matched = RULES.iter().any(|(_, mark)| match mark {
        Mark::Code(code) => parts.code == *code,
        Mark::Kind(kind) => parts.kind == *kind,
        Mark::Phrase(phrase) => lower.contains(phrase),
    });
    matched.then(|| ProviderError::ContextLengthExceeded {
        message: parts.message.clone(),
        limit: parts.limit_field.or_else(|| limit_in(&lower)),
        requested: parts.requested_field.or_else(|| requested_in(&lower)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documented (or captured) error bodies, with the window and prompt
    /// sizes they state.
    const BODIES: &[(&str, &str, Option<u64>, Option<u64>)] = &[
        (
            "OpenAI Chat Completions",
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            Some(128_000),
            Some(130_512),
        ),
        (
            "OpenAI Responses",
            r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
            None,
            None,
        ),
        (
            "Anthropic",
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            Some(200_000),
            Some(208_310),
        ),
        (
            "llama.cpp",
            r#"{"error":{"code":400,"message":"request (5031 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5031,"n_ctx":4096}}"#,
            Some(4096),
            Some(5031),
        ),
        (
            "vLLM",
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            Some(4096),
            Some(5000),
        ),
        (
            "Ollama",
            r#"{"error":"the input length exceeds the context length"}"#,
            None,
            None,
        ),
        (
            "DeepSeek",
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70124 tokens (70124 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            Some(65_536),
            Some(70_124),
        ),
        (
            "GLM",
            r#"{"error":{"code":"1261","message":"Prompt exceeds max length"}}"#,
            None,
            None,
        ),
    ];

    #[test]
    fn every_documented_overflow_is_recognised_with_its_sizes() {
        for (server, body, limit, requested) in BODIES {
            match overflow(body) {
                Some(ProviderError::ContextLengthExceeded {
                    limit: got_limit,
                    requested: got_requested,
                    message,
                }) => {
                    assert_eq!(got_limit, *limit, "{server}: {message}");
                    assert_eq!(got_requested, *requested, "{server}: {message}");
                    assert!(!message.is_empty(), "{server}");
                }
                other => panic!("{server}: not recognised: {other:?}"),
            }
        }
    }

    #[test]
    fn other_errors_are_not_overflows() {
        for body in [
            r#"{"error":{"message":"Invalid API key","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"error":{"code":400,"message":"tools param requires --jinja flag","type":"invalid_request_error"}}"#,
            "upstream connect error",
        ] {
            assert!(overflow(body).is_none(), "{body}");
        }
    }
}

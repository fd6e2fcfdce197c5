//! The conversation model: messages, content parts and tool calls.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// An image carried inline, base64-encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// The IANA media type, e.g. `image/png`.
    pub media_type: String,
    /// The image bytes, standard base64 with padding.
    pub data: String,
}

impl ImagePart {
    /// Encodes raw image bytes.
    ///
    /// ```
    /// let image = kinet_core::message::ImagePart::from_bytes("image/png", &[0x89, b'P', b'N', b'G']);
    /// assert_eq!(image.data, "iVBORw==");
    /// ```
    pub fn from_bytes(media_type: impl Into<String>, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.into(),
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    /// Decodes the image bytes; `None` when `data` is not valid base64.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(self.data.as_bytes())
            .ok()
    }
}

/// One piece of message content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An inline image.
    Image(ImagePart),
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            Self::Image(_) => None,
        }
    }
}

/// A tool call requested by the model.
///
/// `arguments` is the raw JSON text exactly as the model produced it: it is
/// echoed back to the provider verbatim and parsed only when the call runs, so
/// malformed arguments become an error result instead of a lost message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for this call; the result carries the same id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments as raw JSON text.
    pub arguments: String,
}

/// A message in a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Extra system instructions placed in the history (the agent's own system
    /// prompt is configured on the agent and is not stored here).
    System {
        /// The instructions.
        text: String,
    },
    /// A user turn.
    User {
        /// Text and images.
        content: Vec<ContentPart>,
    },
    /// A model turn: text and the tool calls it asked for.
    Assistant {
        /// Text the model produced (may be empty when it only calls tools).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        content: Vec<ContentPart>,
        /// Tool calls, in the order the model gave them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Opaque provider state that must be echoed back on the next request
        /// (thinking signatures, response item ids). Never interpreted by the
        /// engine.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_state: Option<serde_json::Value>,
    },
    /// The result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name (some providers want it back).
        name: String,
        /// What the model sees: the (possibly truncated) output.
        content: Vec<ContentPart>,
        /// True when the call failed, was denied or was cancelled.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl Message {
    /// A user message with one text part.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User {
            content: vec![ContentPart::text(text)],
        }
    }

    /// An assistant message with text only.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::Assistant {
            content: vec![ContentPart::text(text)],
            tool_calls: Vec::new(),
            provider_state: None,
        }
    }

    /// The concatenated text parts of this message.
    pub fn text(&self) -> String {
        match self {
            Self::System { text } => text.clone(),
            Self::User { content }
            | Self::Assistant { content, .. }
            | Self::Tool { content, .. } => join_text(content),
        }
    }

    /// The tool calls of an assistant message (empty for other roles).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

pub(crate) fn join_text(content: &[ContentPart]) -> String {
    let mut out = String::new();
    for part in content {
        if let Some(text) = part.as_text() {
            out.push_str(text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_json_shape_is_stable() {
        let message = Message::Assistant {
            content: vec![ContentPart::text("hi")],
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "echo".into(),
                arguments: "{\"a\":1}".into(),
            }],
            provider_state: None,
        };
        let json = serde_json::to_value(&message).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "role": "assistant",
                "content": [{"type": "text", "text": "hi"}],
                "tool_calls": [{"id": "c1", "name": "echo", "arguments": "{\"a\":1}"}]
            })
        );
        let back: Message = serde_json::from_value(json).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn image_round_trips() {
        let image = ImagePart::from_bytes("image/png", b"\x89PNG\r\n");
        assert_eq!(image.to_bytes().unwrap(), b"\x89PNG\r\n");
    }
}

//! The conversation model: messages, content parts and tool calls.

pub use crate::conversation::Conversation;
pub use crate::data::message::{ContentPart, ImagePart, Message, ToolCall};

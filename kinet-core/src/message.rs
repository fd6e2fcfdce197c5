//! The conversation model: messages, content parts and tool calls.

pub use crate::data::conversation::Conversation;
pub use crate::data::message::{ContentPart, ImagePart, Message, ToolCall};
